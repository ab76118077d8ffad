"""Oort's guided participant selection (``oort``).

F. Lai, X. Zhu, H. V. Madhyastha, M. Chowdhury, "Oort: Efficient Federated
Learning via Guided Participant Selection", USENIX OSDI 2021. docs/SPEC.md §4. The
procedure follows the training selector of the authors' public code
(SymbioticLab/Oort, ``oort/oort.py``: ``_training_selector.getTopK`` and ``pacer``).

Per client i Oort keeps a statistical utility U_i, the duration t_i of its last
round, the round L_i it last took part in, and whether it was ever explored.

* Statistical utility (§4.2): U_i = |B_i| · √(1/|B_i| Σ_{k∈B_i} Loss(k)²) — here
  n_i × ``loss_rms``, refreshed for the clients that responded; every client's is
  known from the profiling round at reset.
* Score of an explored, available client (§4.2–4.3):

      Util(i) = (min(U_i, clip) − U_min) / (U_max − U_min)  +  √(0.1 · ln R / L_i)
                × (T / t_i)^α   when t_i > T (a slow client's system penalty),

  R the current round; clip the ``clip_bound`` quantile of the utilities and
  U_min = 0.999 × their minimum, over the available clients (``get_norm``); the
  second term is the temporal-uncertainty (staleness) bonus; T the developer's
  preferred round duration: the ``round_threshold``-th percentile of the known
  durations (∞ at 100).
* Exploitation / exploration (§4.3): ε ← max(ε · decay, ε_min) every round;
  ⌊K(1 − ε)⌋ clients are drawn ∝ Util among the explored clients whose Util is at
  least ``cut_off_util`` × the cut-off utility (the code's: the score ranked just
  past the exploitation count); the rest of the K come from the unexplored clients,
  the ``sample_window`` × count best by (penalised) U_i, drawn ∝ U_i; once every
  client has been explored, ε and ε_min drop to 0. If still short, the round is
  filled uniformly from the available clients.
* Pacer (§4.3): every ``pacer_step`` rounds, compare the exploited utility summed
  over the last window with the window before: if it changed by ≤ 10%, relax T
  (round_threshold += ``pacer_delta``, at most 100); if by ≥ 5×, tighten it
  (−= ``pacer_delta``, at least ``pacer_delta``).
* Blacklist: clients that took part more than ``blacklist_rounds`` times are left
  out (at most ``blacklist_max_len`` × N of them); −1 turns it off.

Defaults are those of the authors' experiment driver, SymbioticLab/Oort
``training/argParser.py``: exploration_factor 0.9, exploration_decay 0.95,
exploration_min 0.2, round_threshold 10, round_penalty (α) 2.0, clip_bound 0.98,
cut_off_util 0.7, sample_window 5.0, pacer_step 20, pacer_delta 5,
blacklist_rounds −1, blacklist_max_len 0.3. (FedScale, which hosts Oort now, ships
0.98 / 0.3 / 30 / 0.9 / 0.05 for decay / min / threshold / clip / cut-off.)

Durations are the exchange times the server has observed (``last_exchange_time``);
a client never observed has an unknown duration and is not penalised.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from fedsel_env.spec import SelectionSpec

from .base import SelectionAgent
from .qffl import weighted_sample
from .registry import AGENTS

#: SymbioticLab/Oort, training/argParser.py.
OORT_DEFAULTS = {
    "exploration_factor": 0.9, "exploration_decay": 0.95, "exploration_min": 0.2,
    "round_threshold": 10.0, "round_penalty": 2.0, "clip_bound": 0.98, "cut_off_util": 0.7,
    "sample_window": 5.0, "pacer_step": 20, "pacer_delta": 5.0,
    "blacklist_rounds": -1, "blacklist_max_len": 0.3,
}


def _check(name: str, value, lo: float, hi: Optional[float] = None, integer: bool = False) -> float:
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    ok = ok and np.isfinite(value) and value >= lo and (hi is None or value <= hi)
    ok = ok and (not integer or float(value).is_integer())
    if not ok:
        kind = "an integer" if integer else "a number"
        raise ValueError(f"parameter {name!r} = {value!r} is invalid: expected {kind} >= {lo}"
                         + (f" and <= {hi}" if hi is not None else ""))
    return float(value)


@AGENTS.register("oort")
class OortAgent(SelectionAgent):
    """Oort: statistical utility × system penalty, ε-greedy exploration with decay, pacer.

    :param spec: the problem's public description.
    :param seed: seed of the sampling generator.
    :param exploration_factor: the initial exploration fraction ε.
    :param exploration_decay: ε's factor per round.
    :param exploration_min: ε's floor.
    :param round_threshold: percentile of known durations that sets the preferred duration T (≥ 100: no T).
    :param round_penalty: α, the exponent of the system penalty (T/t)^α.
    :param clip_bound: quantile at which utilities are clipped before normalising.
    :param cut_off_util: admit explored clients with Util ≥ this × the cut-off utility.
    :param sample_window: the unexplored draw considers this × (its size) best clients.
    :param pacer_step: rounds per pacer window.
    :param pacer_delta: the pacer's step on round_threshold.
    :param blacklist_rounds: leave out clients that took part more often than this (−1: off).
    :param blacklist_max_len: at most this fraction of N is left out.
    """

    name = "oort"
    supported_modes = ("one", "topk", "subset")

    def __init__(self, spec: SelectionSpec, seed: Optional[int] = None,
                 exploration_factor: float = 0.9, exploration_decay: float = 0.95, exploration_min: float = 0.2,
                 round_threshold: float = 10.0, round_penalty: float = 2.0, clip_bound: float = 0.98,
                 cut_off_util: float = 0.7, sample_window: float = 5.0, pacer_step: int = 20,
                 pacer_delta: float = 5.0, blacklist_rounds: int = -1, blacklist_max_len: float = 0.3) -> None:
        super().__init__(spec, seed)
        self.exploration_factor = _check("exploration_factor", exploration_factor, 0.0, 1.0)
        self.exploration_decay = _check("exploration_decay", exploration_decay, 0.0, 1.0)
        self.exploration_min_init = _check("exploration_min", exploration_min, 0.0, 1.0)
        self.round_threshold_init = _check("round_threshold", round_threshold, 0.0)
        self.round_penalty = _check("round_penalty", round_penalty, 0.0)
        self.clip_bound = _check("clip_bound", clip_bound, 0.0, 1.0)
        self.cut_off_util = _check("cut_off_util", cut_off_util, 0.0, 1.0)
        self.sample_window = _check("sample_window", sample_window, 1.0)
        self.pacer_step = int(_check("pacer_step", pacer_step, 1, integer=True))
        self.pacer_delta = _check("pacer_delta", pacer_delta, 0.0)
        self.blacklist_rounds = int(_check("blacklist_rounds", blacklist_rounds, -1, integer=True))
        self.blacklist_max_len = _check("blacklist_max_len", blacklist_max_len, 0.0, 1.0)
        self._n_samples = spec.num_samples.astype(np.float64)
        self.utility: Optional[np.ndarray] = None
        self._clear()

    # ------------------------------------------------------------ memory
    def _clear(self) -> None:
        n = self.spec.num_clients
        self.duration = np.zeros(n)                   # t_i; 0 = not observed yet
        self.last_round = np.zeros(n, dtype=np.int64)  # L_i
        self.count = np.zeros(n, dtype=np.int64)
        self.explored = np.zeros(n, dtype=bool)
        self.round = 0
        self.exploration = self.exploration_factor
        self.exploration_min = self.exploration_min_init
        self.round_threshold = self.round_threshold_init
        self.preferred_duration = np.inf
        self.exploit_history: List[float] = []
        self.explore_history: List[float] = []
        self.exploit_clients = np.empty(0, dtype=np.int64)
        self.explore_clients = np.empty(0, dtype=np.int64)

    def reset(self, obs: Dict[str, np.ndarray]) -> None:
        """Register every client with the utility it reported in the profiling round."""
        self._clear()
        self.utility = self._n_samples * self.spec.feature(obs, "loss_rms").astype(np.float64)

    def observe_feedback(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        """``update_client_util`` for the clients that responded last round; returns them."""
        resp = np.flatnonzero(self.spec.feature(obs, "responded_last_round") > 0.5)
        if resp.size:
            self.utility[resp] = self._n_samples[resp] * self.spec.feature(obs, "loss_rms")[resp]
            self.duration[resp] = self.spec.feature(obs, "last_exchange_time")[resp]
            self.last_round[resp] = self.round  # they took part in the round just played
            self.count[resp] += 1
            self.explored[resp] = True
        return resp

    # ------------------------------------------------------------- pacer
    def _mean_utility(self, clients: np.ndarray, succeeded: np.ndarray) -> float:
        ok = np.intersect1d(clients, succeeded)
        return float(self.utility[ok].sum() / (ok.size + 1e-4))

    def pacer(self, succeeded: np.ndarray) -> None:
        """Relax the preferred duration when the exploited utility stalls, tighten it when it swings."""
        self.explore_history.append(self._mean_utility(self.explore_clients, succeeded))
        self.exploit_history.append(self._mean_utility(self.exploit_clients, succeeded))
        step, t = self.pacer_step, self.round
        if t >= 2 * step and t % step == 0:
            last = sum(self.exploit_history[-2 * step:-step])
            current = sum(self.exploit_history[-step:])
            if abs(current - last) <= 0.1 * last:
                self.round_threshold = min(100.0, self.round_threshold + self.pacer_delta)
            elif abs(current - last) >= 5 * last:
                self.round_threshold = max(self.pacer_delta, self.round_threshold - self.pacer_delta)

    # ------------------------------------------------------------ scores
    def _preferred_duration(self) -> float:
        known = np.sort(self.duration[self.duration > 0])
        if self.round_threshold >= 100.0 or known.size == 0:
            return np.inf
        return float(known[min(int(known.size * self.round_threshold / 100.0), known.size - 1)])

    def _penalty(self, clients: np.ndarray) -> np.ndarray:
        """(T / t_i)^α for clients slower than T, 1 otherwise."""
        t = self.duration[clients]
        slow = t > self.preferred_duration
        pen = np.ones(clients.size)
        pen[slow] = (self.preferred_duration / np.maximum(1e-4, t[slow])) ** self.round_penalty
        return pen

    def blacklist(self) -> np.ndarray:
        """Clients left out for having taken part too often (empty when blacklist_rounds = −1)."""
        if self.blacklist_rounds == -1:
            return np.empty(0, dtype=np.int64)
        order = np.argsort(-self.count, kind="stable")
        over = order[self.count[order] > self.blacklist_rounds]
        return over[: int(self.blacklist_max_len * self.spec.num_clients)]

    def scores(self, feasible: np.ndarray) -> np.ndarray:
        """Util(i) of the explored clients among ``feasible`` (same order; the others get NaN)."""
        rewards = self.utility[feasible]
        positive = np.sort(rewards[rewards > 0])
        out = np.full(feasible.size, np.nan)
        if positive.size == 0:
            lo, span, clip = 0.0, 1.0, np.inf
        else:
            clip = positive[min(int(positive.size * self.clip_bound), positive.size - 1)]
            lo = positive[0] * 0.999
            span = max(positive[-1] - lo, 1e-4)
        ex = self.explored[feasible]
        clients = feasible[ex]
        if clients.size:
            stat = (np.minimum(self.utility[clients], clip) - lo) / span
            bonus = np.sqrt(0.1 * np.log(self.round) / np.maximum(self.last_round[clients], 1))
            out[ex] = np.maximum(stat + bonus, 0.0) * self._penalty(clients)
        return out

    # ----------------------------------------------------------- selection
    def select(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        if self.utility is None:
            self.reset(obs)
        succeeded = self.observe_feedback(obs)
        self.round += 1
        self.pacer(succeeded)
        self.preferred_duration = self._preferred_duration()
        feasible = np.setdiff1d(self.available(obs), self.blacklist())
        k = self.k

        score = self.scores(feasible)
        explored = ~np.isnan(score)
        cand, cand_score = feasible[explored], score[explored]
        self.exploration = max(self.exploration * self.exploration_decay, self.exploration_min)
        exploit_len = min(int(k * (1.0 - self.exploration)), cand.size)
        picked = np.empty(0, dtype=np.int64)
        if exploit_len > 0:
            order = np.argsort(-cand_score, kind="stable")
            cut = cand_score[order[min(exploit_len, cand.size - 1)]] * self.cut_off_util
            admitted = order[cand_score[order] >= cut]
            picked = weighted_sample(self.rng, cand[admitted], cand_score[admitted], exploit_len)
        self.exploit_clients = picked

        self.explore_clients = np.empty(0, dtype=np.int64)
        if not self.explored.all():
            unexplored = feasible[~self.explored[feasible]]
            explore_len = min(unexplored.size, k - picked.size)
            if explore_len > 0:
                init = self.utility[unexplored] * self._penalty(unexplored)
                window = np.argsort(-init, kind="stable")[: min(int(self.sample_window * explore_len),
                                                                unexplored.size)]
                self.explore_clients = weighted_sample(self.rng, unexplored[window], init[window], explore_len)
        else:
            self.exploration = self.exploration_min = 0.0  # nobody left to explore
        picked = np.concatenate([picked, self.explore_clients])

        for pool in (feasible, self.available(obs)):  # still short: fill uniformly, blacklisted clients last
            if picked.size < k:
                rest = np.setdiff1d(pool, picked)
                fill = self.rng.choice(rest, size=min(k - picked.size, rest.size), replace=False)
                picked = np.concatenate([picked, fill])
        return picked.astype(np.int64)
