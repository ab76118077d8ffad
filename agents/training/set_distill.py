"""Training ``set_distill`` (``agents/set_distill.py``): DAgger with the bench's lookahead oracle as the expert.

One training run = one scenario (``fedsel_env/bench.py``), one training seed, a fixed number of episodes,
each on a new federation. Episode i of training seed s starts from ``env.reset(seed=TRAIN_SEED_BASE +
10_000·s + i)``: far from the bench's tuning (100–109) and reporting (9000–9029) seeds, and its federation
(``fedsel_env.bench.federation_seed``) is checked to be none of theirs.

Every round of a training episode:

1. the learner picks its set (greedy maximisation of V, ``agents.set_distill.greedy_set``);
2. the oracle (``LookaheadOracle.plan``) plays its M candidates and the learner's pick one round ahead on
   the simulator and scores each by the scenario's objective (the federation is put back after each);
3. the state, the candidates and their scores join the data set (all rounds so far, up to ``buffer_rounds``);
4. the env plays the oracle's best candidate with probability β_i = max(0, 1 − i / beta_episodes) (DAgger's
   mixture, decaying to the learner alone), else the learner's pick;
5. ``grad_steps`` Adam steps on minibatches of past rounds: the pairwise logistic (RankNet) loss of V over
   every pair of a round's candidates whose scores differ, each pair weighted by its score gap over the
   round's mean gap.

Resumable and deterministic: after each episode the run folder gets that episode's rounds as
``data/ep<i>.npz`` (written once), the model, the optimiser and the episode count (``checkpoint.pt``, atomic),
and one line of ``progress.jsonl`` (the learning curve, when the caller gives ``evaluate``). Every random draw of episode i comes from
``SeedSequence([seed, i])``, so a resumed run equals an uninterrupted one (``tests/test_set_distill.py``).
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch as th

from agents.set_distill import SetDistillAgent, SetScorer, candidate_members, save_model

from .atomic import append_line, atomic_save, atomic_write_text, pin_run_config

TRAIN_SEED_BASE = 1_000_000
OBS_KEYS = ("weights", "clients", "progress")


@dataclass
class DistillConfig:
    """What one training run does (saved as ``config.json`` in its folder; a resume must match it).

    :param scenario: a scenario: a registered name, an id, or the path of a YAML scenario file (issue #46).
    :param seed: the training seed (model initialisation, episode seeds, minibatches).
    :param episodes: training episodes (each a new federation).
    :param candidates: M, the oracle's candidates per round (the bench's oracle uses 16).
    :param beta_episodes: episodes over which the oracle's share of the played rounds falls from 1 to 0.
    :param eval_every: every this many episodes (and at the end) the greedy learner plays ``eval_seeds``
        (through ``train``'s ``evaluate``).
    :param eval_seeds: seeds of that learning curve (the bench's tuning seeds; never the reporting ones).
    :param env_overrides: env-config fields over the scenario's (e.g. a smaller ``max_rounds`` for a test).
    :param cover_features: train the cover-aware variant ``set_distill_cover`` (``agents/set_distill.py``: the
        tokens carry ``kcenter_cover``'s state); omitted from ``config.json`` when False, so the runs made
        before it existed resume unchanged.
    """

    scenario: str
    seed: int = 0
    episodes: int = 100
    candidates: int = 16
    hidden: int = 64
    lr: float = 1e-3
    batch_size: int = 32
    grad_steps: int = 2
    beta_episodes: int = 25
    buffer_rounds: int = 20_000
    eval_every: int = 25
    eval_seeds: Sequence[int] = (100, 101, 102, 103, 104)
    env_overrides: Dict[str, Any] = field(default_factory=dict)
    cover_features: bool = False

    def __post_init__(self) -> None:
        from fedsel_env.bench import curve_seeds, scenario

        if isinstance(self.scenario, os.PathLike):  # a YAML scenario file's path, kept as text in config.json
            self.scenario = str(self.scenario)
        sc = scenario(self.scenario)  # a name, an id or a YAML scenario file (issue #46); raises for anything else
        for name in ("episodes", "candidates", "hidden", "batch_size", "buffer_rounds", "eval_every"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"set_distill: {name} = {v!r} is invalid: expected an integer >= 1")
        for name in ("seed", "grad_steps", "beta_episodes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"set_distill: {name} = {v!r} is invalid: expected an integer >= 0")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"set_distill: lr = {self.lr!r} is invalid: expected a finite number > 0")
        self.eval_seeds = curve_seeds("set_distill", self.eval_seeds, sc)  # never the scenario's reporting seeds

    def env_config(self) -> Dict[str, Any]:
        from fedsel_env.bench import training_env_config

        return training_env_config(self.scenario, self.env_overrides)

    def episode_seed(self, i: int) -> int:
        return TRAIN_SEED_BASE + 10_000 * self.seed + i


def check_training_seeds(cfg: DistillConfig) -> None:
    """Refuse a run whose training federations would include a tuning or reporting federation of its scenario."""
    from fedsel_env.bench import check_fresh_federations, scenario

    check_fresh_federations({f"training episode {i}": cfg.episode_seed(i) for i in range(cfg.episodes)},
                            scenario(cfg.scenario))


# ------------------------------------------------------------------------------------------ the loss
def ranking_loss(model: SetScorer, batch: Dict[str, Any], k: int) -> th.Tensor:
    """The pairwise logistic loss of V over each round's candidates, pairs weighted by their score gap."""
    v = model.set_values(batch["obs"], batch["members"], k)            # (B, M)
    y, valid = batch["scores"], batch["valid"]
    dv = v[:, :, None] - v[:, None, :]                                  # V_i − V_j
    dy = y[:, :, None] - y[:, None, :]
    pair = valid[:, :, None] & valid[:, None, :] & (dy > 1e-12)         # i scored above j
    gap = th.where(pair, dy, th.zeros_like(dy))
    mean_gap = gap.sum(dim=(1, 2), keepdim=True) / pair.sum(dim=(1, 2), keepdim=True).clamp(min=1)
    w = th.where(pair, gap / mean_gap.clamp(min=1e-12), th.zeros_like(dy))
    loss = th.nn.functional.softplus(-dv) * w
    return loss.sum() / pair.sum().clamp(min=1)


def _finite_scores(scores: np.ndarray) -> np.ndarray:
    """A diverged candidate (−∞) ranks below every other: one below the worst finite score."""
    s = np.asarray(scores, dtype=np.float64).copy()
    bad = ~np.isfinite(s)
    if bad.any():
        s[bad] = (s[~bad].min() - 1.0) if (~bad).any() else 0.0
    return s


class RoundBuffer:
    """The training rounds: each a state, its candidates' membership (M, N) and their scores (M,)."""

    def __init__(self, limit: int) -> None:
        self.limit = int(limit)
        self.rounds: List[Dict[str, np.ndarray]] = []

    def add(self, rounds: Sequence[Dict[str, np.ndarray]]) -> None:
        self.rounds.extend(rounds)
        del self.rounds[: max(0, len(self.rounds) - self.limit)]

    def batch(self, rng: np.random.Generator, size: int) -> Dict[str, Any]:
        idx = rng.integers(0, len(self.rounds), size=min(size, len(self.rounds)))
        picked = [self.rounds[i] for i in idx]
        m = max(r["members"].shape[0] for r in picked)
        n = picked[0]["members"].shape[1]
        members = np.zeros((len(picked), m, n), dtype=np.float32)
        scores = np.zeros((len(picked), m), dtype=np.float32)
        valid = np.zeros((len(picked), m), dtype=bool)
        for b, r in enumerate(picked):
            j = r["members"].shape[0]
            members[b, :j], scores[b, :j], valid[b, :j] = r["members"], r["scores"], True
        obs = {k: th.as_tensor(np.stack([r[k] for r in picked])) for k in OBS_KEYS}
        return {"obs": obs, "members": th.as_tensor(members), "scores": th.as_tensor(scores),
                "valid": th.as_tensor(valid)}


def _save_shard(path: Path, rounds: Sequence[Dict[str, np.ndarray]]) -> None:
    arrays: Dict[str, np.ndarray] = {"count": np.asarray(len(rounds))}
    for i, r in enumerate(rounds):
        for key, a in r.items():
            arrays[f"{i}_{key}"] = a
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # closed (and flushed) before the rename
            np.savez(f, **arrays)

    atomic_save(write, path)


def _load_shard(path: Path) -> List[Dict[str, np.ndarray]]:
    with np.load(path, allow_pickle=False) as z:
        count = int(z["count"])
        return [{key: z[f"{i}_{key}"] for key in (*OBS_KEYS, "members", "scores")} for i in range(count)]


# ------------------------------------------------------------------------------------------ one run
def greedy_curve(model: SetScorer, cfg: DistillConfig) -> List[float]:
    """The learning curve's point: the greedy learner's objective on ``cfg.eval_seeds`` (tuning seeds; a missed Ω
    counts as the cap), each episode played by ``fedsel_env.rollout`` as any evaluation plays it."""
    from fedsel_env.bench import scenario
    from fedsel_env.env import FedSelectEnv
    from fedsel_env.rollout import scenario_objectives

    env = FedSelectEnv(config=cfg.env_config())
    try:
        return scenario_objectives(env, scenario(cfg.scenario), lambda spec: SetDistillAgent(spec, model=model),
                                   cfg.eval_seeds)[0]
    finally:
        env.close()


def train(cfg: DistillConfig, folder: Path, log: Callable[[str], Any] = print,
          deadline: float = math.inf, stop_after: Optional[int] = None,
          evaluate: Optional[Callable[[SetScorer, DistillConfig], List[float]]] = None,
          on_episode: Optional[Callable[[Dict[str, Any]], Any]] = None) -> Dict[str, Any]:
    """Train (or resume) ``cfg``'s run in ``folder``; return its summary (also ``summary.json``).

    :param deadline: ``time.time()`` after which no new episode starts (the run resumes from there later).
    :param stop_after: play at most this many episodes in this call (a chunk; the run resumes from there later).
    :param evaluate: the learning curve: ``evaluate(model, cfg)`` → the learner's objective on ``cfg.eval_seeds``,
        called every ``eval_every`` episodes (:func:`greedy_curve`, what ``train_agent.py --algo set_distill`` uses);
        None: no curve.
    :param on_episode: called with each episode's ``progress.jsonl`` row once it is written (a progress bar,
        TensorBoard scalars).
    :raises ValueError: when ``folder`` holds a run of another config.
    """
    from agents.lookahead import LookaheadOracle
    from fedsel_env.bench import scenario
    from fedsel_env.env import FedSelectEnv

    folder = Path(folder)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    conf_dict = asdict(cfg)
    if not cfg.cover_features:
        del conf_dict["cover_features"]
    pin_run_config(folder, conf_dict, "set_distill")
    check_training_seeds(cfg)
    sc = scenario(cfg.scenario)
    env = FedSelectEnv(config=cfg.env_config())
    spec = env.selection_spec  # the problem's shape, known before any reset (each episode resets below)
    k, n_features = spec.clients_per_round, len(spec.client_features)
    th.manual_seed(cfg.seed)
    model = SetScorer(env.observation_space, hidden=cfg.hidden, cover_features=cfg.cover_features)
    opt = th.optim.Adam(model.parameters(), lr=cfg.lr)
    buffer, start = RoundBuffer(cfg.buffer_rounds), 0
    ckpt = folder / "checkpoint.pt"
    if ckpt.is_file():
        state = th.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = int(state["episodes_done"])
        for i in range(start):
            buffer.add(_load_shard(folder / "data" / f"ep{i:05d}.npz"))
        log(f"{sc.name} seed {cfg.seed}: resumed after episode {start}")
    meta = {"pca_components": int(spec.pca_components), "n_features": n_features, "hidden": cfg.hidden,
            "scenario": sc.name, "seed": cfg.seed, "design": "set_distill"}
    if cfg.cover_features:
        meta.update(design="set_distill_cover", cover_features=True)
    for i in range(start, cfg.episodes):
        if time.time() >= deadline or (stop_after is not None and i - start >= stop_after):
            break
        t0 = time.perf_counter()
        ep_rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, i]))
        obs, _ = env.reset(seed=cfg.episode_seed(i))
        spec = env.selection_spec
        learner = SetDistillAgent(spec, model=model)
        oracle = LookaheadOracle(spec, seed=cfg.episode_seed(i), objective=sc.objective, candidates=cfg.candidates)
        oracle.bind(env)
        oracle.reset(obs)
        beta = max(0.0, 1.0 - i / cfg.beta_episodes) if cfg.beta_episodes else 0.0
        rounds, regrets, losses, done = [], [], [], False
        while not done:
            model.eval()
            mine = learner.select(obs)
            cands, scores = oracle.plan(obs, extra=[mine])
            if not cands:  # nobody available: the round is played by whoever the env picks
                chosen = mine
            else:
                y = _finite_scores(scores)
                key = frozenset(mine.tolist())
                mine_score = next(y[j] for j, c in enumerate(cands) if frozenset(c.tolist()) == key) \
                    if mine.size else y.min()
                regrets.append(float(y.max() - mine_score))
                seen = learner.last_input  # the model's input: obs, with the cover features for that variant
                rounds.append({**{kk: np.asarray(seen[kk], dtype=np.float32) for kk in OBS_KEYS},
                               "members": candidate_members(cands, spec.num_clients), "scores": y.astype(np.float32)})
                buffer.add(rounds[-1:])
                chosen = cands[int(np.argmax(y))] if ep_rng.random() < beta else mine
            action = np.full(spec.num_clients, -1.0, dtype=np.float32)
            action[chosen] = np.arange(len(chosen), 0, -1, dtype=np.float32) / max(len(chosen), 1)
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            if cands:
                model.train()
                for _ in range(cfg.grad_steps):
                    loss = ranking_loss(model, buffer.batch(ep_rng, cfg.batch_size), k)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    losses.append(float(loss.detach()))
        _save_shard(folder / "data" / f"ep{i:05d}.npz", rounds)
        row = {"episode": i + 1, "seed": cfg.episode_seed(i), "beta": beta, "rounds": len(rounds),
               "regret": float(np.mean(regrets)) if regrets else None,
               "learner_best": float(np.mean([r < 1e-12 for r in regrets])) if regrets else None,
               "loss": float(np.mean(losses)) if losses else None, "div_weight": float(model.div_weight.detach()),
               "oracle_rounds": int(oracle.planned_rounds), "wall_s": round(time.perf_counter() - t0, 3)}
        if evaluate is not None and ((i + 1) % cfg.eval_every == 0 or i + 1 == cfg.episodes):
            model.eval()
            vals = [float(v) for v in evaluate(model, cfg)]
            row["eval_mean"] = float(np.mean(vals))
            row["eval_values"] = vals
        save_model(model, folder, {**meta, "episodes": i + 1})
        atomic_save(lambda tmp: th.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                                         "episodes_done": i + 1}, tmp), ckpt)
        append_line(folder / "progress.jsonl", json.dumps(row))
        log(f"{sc.name} seed {cfg.seed} episode {i + 1}/{cfg.episodes}: β {beta:.2f}, {len(rounds)} rounds, "
            f"regret {row['regret'] if row['regret'] is None else round(row['regret'], 4)}, "
            f"loss {row['loss'] if row['loss'] is None else round(row['loss'], 4)}, w {row['div_weight']:+.3f}"
            + (f", eval {row['eval_mean']:.4g}" if "eval_mean" in row else "") + f", {row['wall_s']:.1f} s")
        if on_episode is not None:
            on_episode(row)
    env.close()
    progress = [json.loads(x) for x in (folder / "progress.jsonl").read_text().splitlines()] \
        if (folder / "progress.jsonl").is_file() else []
    summary = {"scenario": sc.name, "seed": cfg.seed, "episodes_done": len(progress), "complete": len(progress) >= cfg.episodes,
               "train_seconds": round(sum(r["wall_s"] for r in progress), 2),
               "env_rounds": int(sum(r["rounds"] for r in progress)),
               "oracle_rounds": int(sum(r["oracle_rounds"] for r in progress))}
    atomic_write_text(folder / "summary.json", json.dumps(summary, indent=1) + "\n")
    return summary


__all__ = ["DistillConfig", "RoundBuffer", "TRAIN_SEED_BASE", "check_training_seeds", "greedy_curve",
           "ranking_loss", "train"]
