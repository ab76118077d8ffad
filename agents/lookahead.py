"""``lookahead``: a planning oracle for FedSelect-Bench (issue #28). **Privileged — not a deployable agent.**

It reads and replays the simulator: each round it draws M candidate K-subsets — the pick of every
hand-written heuristic (each fed the env's observations as if it were selecting) plus random K-subsets of
the available clients up to M — plays each one ``depth`` rounds ahead on the env's own federation
(:meth:`Federation.snapshot` before, :meth:`Federation.restore` after each candidate, so the env is left
exactly as it was: ``tests/test_bench.py``), and keeps the candidate that scores best by the scenario's
objective. Rounds after the first (``depth`` > 1) are played with K random available clients, the same
draws for every candidate (common random numbers). A real server cannot do this: it would have to train
every candidate round and then undo it. Its scores bound what selection can gain from a greedy search over
these candidates; they are not a best-possible value (a better set may lie outside the candidates, and a
greedy choice is not an optimal sequence). ``fedsel_eval`` leaves it out of ``--policy all``
(``privileged = True``).

The one-round score of a candidate, by objective (``fedsel_env.bench.OBJECTIVES``):

- ``rounds_to_target``, ``final_accuracy``: the global test accuracy after the lookahead;
- ``time_to_target``: the accuracy gained per simulated second (a gain ≤ 0: the gain times the seconds, so a
  long round that loses accuracy scores worst);
- ``acc_worst10``: the mean test accuracy of the worst 10% of clients after the lookahead.

A diverged lookahead scores −∞. Its cost: every round plays ``candidates × depth`` extra rounds
(:attr:`planned_rounds` counts them, :attr:`planning_seconds` times them).
"""
from __future__ import annotations

import copy
import time
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from fedsel_env.metrics import tail_means
from fedsel_env.sim.federation import run_inline
from fedsel_env.spec import SelectionSpec
from fedsel_env.vector_training import drive

from .base import SelectionAgent
from .registry import AGENTS, make

LOOKAHEAD_OBJECTIVES = ("rounds_to_target", "time_to_target", "final_accuracy", "acc_worst10")


class _Channel:
    """The heuristics' channel to the clients inside the oracle: ``pow_d``'s loss query goes straight to the
    federation (restored afterwards), so it is not counted as the env's ``loss_queries``."""

    def __init__(self, oracle: "LookaheadOracle") -> None:
        self.oracle = oracle

    def query_losses(self, clients: Any) -> np.ndarray:
        return self.oracle.federation.query_losses(np.asarray(clients, dtype=np.int64))


def _round_copy(fed: Any, snap: Dict[str, Any]) -> Any:
    """A federation that shares ``fed``'s data, model and trainer but holds its own copy of the round state
    ``snap`` (``Federation.snapshot``): a candidate round played on it leaves ``fed`` as it was. Local training
    draws from generators seeded per (episode, round, client), and no round draws from torch's global generator,
    so the copies' rounds can be played side by side."""
    clone = copy.copy(fed)
    for k, v in copy.deepcopy({k: v for k, v in snap.items() if k != "torch_rng"}).items():
        setattr(clone, k, v)
    return clone


@AGENTS.register("lookahead")
class LookaheadOracle(SelectionAgent):
    """Keep the best of M candidate rounds, each played ``depth`` rounds ahead on the simulator.

    :param spec: the problem's public description.
    :param seed: seed of the random candidates, the rollouts and the heuristics' own seeds.
    :param objective: what a candidate is scored by (:data:`LOOKAHEAD_OBJECTIVES`).
    :param candidates: M ≥ 1, the candidates per round: the heuristics' distinct picks, then random K-subsets
        up to M (when the heuristics alone give more than M distinct picks, all of them are played).
    :param depth: rounds played ahead per candidate (≥ 1).
    :param proposers: the heuristics whose picks are candidates: ``"all"`` (every registered agent that builds
        with its default parameters, this one and other privileged ones aside), or a list of names (``[]``:
        random candidates only).
    :param batch_candidates: play the M candidate rounds side by side, their local training in one fused call
        (:func:`~fedsel_env.vector_training.drive`, as the vector env steps its sub-envs): the same scores bit for
        bit as one after another (``tests/test_bench.py``), faster; ``False`` plays them one after another.
    """

    name = "lookahead"
    supported_modes = ("one", "topk", "subset")
    privileged = True

    def __init__(self, spec: SelectionSpec, seed: Optional[int] = None, objective: str = "rounds_to_target",
                 candidates: int = 16, depth: int = 1, proposers: Union[str, Sequence[str]] = "all",
                 batch_candidates: bool = True) -> None:
        super().__init__(spec, seed)
        if objective not in LOOKAHEAD_OBJECTIVES:
            raise ValueError(f"parameter 'objective' = {objective!r} is invalid: allowed {list(LOOKAHEAD_OBJECTIVES)}")
        for pname, v in (("candidates", candidates), ("depth", depth)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"parameter {pname!r} = {v!r} is invalid: expected an integer >= 1")
        if proposers != "all" and (isinstance(proposers, str) or not all(isinstance(p, str) for p in proposers)):
            raise ValueError(f"parameter 'proposers' = {proposers!r} is invalid: expected 'all' or a list of "
                             f"agent names")
        self.objective, self.m, self.depth = objective, int(candidates), int(depth)
        self.batch_candidates = bool(batch_candidates)
        self.proposer_names = self._proposer_names(spec, proposers)
        self.base_seed = 0 if seed is None else int(seed)
        self.env: Any = None
        self.proposers: List[SelectionAgent] = []
        self.planned_rounds, self.planning_seconds = 0, 0.0
        self.last_candidates: List[np.ndarray] = []
        self.last_scores: np.ndarray = np.zeros(0)

    @staticmethod
    def _proposer_names(spec: SelectionSpec, proposers: Union[str, Sequence[str]]) -> List[str]:
        if proposers != "all":
            names = list(proposers)
            for n in names:
                if getattr(AGENTS.lookup(n), "privileged", False):
                    raise ValueError(f"parameter 'proposers' names {n!r}, a privileged agent: name hand-written ones")
            return names
        names = []
        for n in sorted(AGENTS):
            cls = AGENTS[n]
            if getattr(cls, "privileged", False) or spec.action_mode not in getattr(cls, "supported_modes", ()):
                continue
            try:
                make(n, spec, seed=0)
            except ValueError:  # needs a model (favor, per_client)
                continue
            names.append(n)
        return names

    # ------------------------------------------------------------------ binding and episode start
    def bind(self, env: Any) -> None:
        """The env whose simulator it plays (``env.unwrapped``; ``fedsel_eval`` binds every agent)."""
        self.env = env

    @property
    def federation(self) -> Any:
        return self.env.federation

    def reset(self, obs: Dict[str, np.ndarray]) -> None:
        if self.env is None:
            raise ValueError("lookahead plays candidate rounds on the simulator: bind it to the env first "
                             "(agent.bind(env.unwrapped); evaluate.py and fedsel_eval do)")
        self.proposers = []
        for i, n in enumerate(self.proposer_names):
            p = make(n, self.spec, seed=int(np.random.SeedSequence([self.base_seed, 28, i]).generate_state(1)[0]))
            p.bind(_Channel(self))
            self.proposers.append(p)
        self.planned_rounds, self.planning_seconds, self._t = 0, 0.0, 0

    # ------------------------------------------------------------------ the choice
    def candidate_sets(self, obs: Dict[str, np.ndarray]) -> List[np.ndarray]:
        """This round's candidates: the heuristics' distinct picks, then random K-subsets up to M."""
        out, seen = [], set()

        def add(c: Any) -> None:
            c = np.asarray(c, dtype=np.int64)[: self.k]
            key = frozenset(c.tolist())
            if c.size and key not in seen:
                seen.add(key)
                out.append(c)

        for p in self.proposers:
            if not p._started:
                p.reset(obs)
                p._started = True
            add(p.select(obs))
        avail = self.available(obs)
        tries = 0
        while len(out) < self.m and avail.size and tries < 20 * self.m:
            add(self.rng.choice(avail, size=min(self.k, avail.size), replace=False))
            tries += 1
        return out

    def score(self, fed: Any, cand: np.ndarray, now_accuracy: float, rollout_seed: int) -> float:
        """Play ``cand`` and ``depth`` − 1 random rounds after it on ``fed``; the objective's score (fed changed)."""
        return run_inline(self.score_steps(fed, cand, now_accuracy, rollout_seed))

    def score_steps(self, fed: Any, cand: np.ndarray, now_accuracy: float, rollout_seed: int):
        """:meth:`score` as a generator of the rounds' requests (``Federation.round_steps``), so that
        :func:`~fedsel_env.vector_training.drive` can answer every candidate's requests together."""
        seconds, report = 0.0, None
        rng = np.random.default_rng([rollout_seed, 28])
        for d in range(self.depth):
            if d > 0:
                avail = np.flatnonzero(fed.open_round().available)
                cand = rng.choice(avail, size=min(self.k, avail.size), replace=False) if avail.size else cand[:0]
            report = yield from fed.round_steps(np.asarray(cand, dtype=np.int64), evaluate=(d == self.depth - 1))
            self.planned_rounds += 1
            seconds += float(report.round_time)
            if report.diverged:
                return -np.inf
        ev = report.evaluation
        if ev is None or not np.isfinite(ev.accuracy):
            return -np.inf
        if self.objective == "acc_worst10":
            return tail_means(ev.client_accuracies)[0]
        if self.objective == "time_to_target":
            gain = ev.accuracy - now_accuracy
            return gain / max(seconds, 1e-12) if gain > 0 else gain * max(seconds, 1e-12)
        return float(ev.accuracy)

    def plan(self, obs: Dict[str, np.ndarray], extra: Sequence[Any] = ()) -> tuple:
        """This round's candidates (the heuristics' picks, random ones up to M, then each set of ``extra``
        not already among them) and each one's score, every candidate played on the env's federation and the
        federation put back exactly as it was. ``set_distill``'s trainer adds its learner's pick as ``extra``.

        :return: ``(candidates, scores)``: a list of index arrays and a float array of the same length.
        """
        started = time.perf_counter()
        fed = self.federation
        snap = fed.snapshot()  # before the heuristics ask anything: the env is left exactly as it was
        try:
            cands = self.candidate_sets(obs)
            seen = {frozenset(c.tolist()) for c in cands}
            for c in extra:
                c = np.asarray(c, dtype=np.int64)[: self.k]
                if c.size and frozenset(c.tolist()) not in seen:
                    seen.add(frozenset(c.tolist()))
                    cands.append(c)
            fed.restore(snap)
            now = float(self.env.view.accuracy)
            seed = int(np.random.SeedSequence([self.base_seed, self._t]).generate_state(1)[0])
            scores = []
            if self.batch_candidates and len(cands) > 1:
                # every candidate on its own copy of the round state, their rounds' requests answered together
                # (one fused local training of all candidates' clients): each one's round bit for bit as alone
                played = drive({i: self.score_steps(_round_copy(fed, snap), c, now, seed)
                                for i, c in enumerate(cands)})
                scores = [played[i] for i in range(len(cands))]
            else:
                for c in cands:
                    scores.append(self.score(fed, c, now, seed))
                    fed.restore(snap)
        finally:
            fed.restore(snap)
        self._t += 1
        self.last_candidates, self.last_scores = cands, np.asarray(scores, dtype=np.float64)
        self.planning_seconds += time.perf_counter() - started
        return self.last_candidates, self.last_scores

    def select(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        cands, scores = self.plan(obs)
        if not cands:
            return np.zeros(0, dtype=np.int64)
        return cands[int(np.argmax(scores))]
