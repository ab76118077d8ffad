"""One episode of a policy on a FedSelect env, the loop every trainer and every evaluation plays.

The episode loop lives here, below the agents layer (issue #46), so a trainer owns its rollouts:
``agents/training/set_es.py`` plays its candidates and ``agents/training/set_distill.py`` its learning curve
with :func:`run_episode` / :func:`scenario_objectives`, and ``fedsel_eval.episodes`` (the evaluation's unit
of work) delegates to it, so a record is the same whoever plays it.

- :func:`run_episode` — a policy acts from ``env.reset(seed=s)`` to the end; the record holds docs/SPEC.md
  §5's metrics, the per-round curves and the per-client arrays. A policy with ``bind(env)`` (``pow_d``,
  ``set_es_q``: agents that ask clients their loss before selecting) is bound to the env first.
- :func:`episode_steps` — the same loop as a generator (the vector env's executor drives it).
- :func:`play_vector` — many episodes (:class:`EpisodeJob`) E at a time in the sub-envs of one
  :class:`~fedsel_env.vector.FedSelectVectorEnv`, each a sub-env's :func:`episode_steps` (so its record is
  :func:`run_episode`'s: a sub-env's trajectory is the single env's bit for bit, ``tests/test_vector_env.py``):
  ``evaluate.py --n-envs`` (``fedsel_eval.vector_episodes``) and ``set_es``'s generations
  (``agents/training/set_es.py``'s ``VectorMapper``).
- :func:`scenario_objectives` — a scenario's objective on each seed's episode (a missed Ω counts as the cap,
  ``fedsel_env.bench.episode_objective``) and the env rounds they took.
- :func:`env_for` — one env per config kept in this process (building the data takes a while; ``reset(seed)``
  makes each episode independent of the ones before).

Only the policy's ``predict(obs, deterministic=True)`` (SB3's interface) and optional ``bind`` are used:
this module imports no agent.
"""
from __future__ import annotations

import json
import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import metrics
from .reset_cache import config_key
from .bench import episode_objective


def run_episode(env: Any, policy: Any, seed: int, make_policy: Optional[Callable[[Any], Any]] = None) -> Dict[str, Any]:
    """Run ``policy`` for one episode of ``env`` from ``reset(seed=seed)``.

    ``make_policy`` (instead of ``policy``, which is then ``None``) builds the policy from the episode's
    own ``selection_spec`` after the reset: where each seed draws its own federation
    (``federation_seed: null``), the clients' sample counts n_k are that federation's, and an agent
    built before the reset would read the previous federation's.

    :return: the episode record: ``metrics`` (docs/SPEC.md §5), ``curves`` (per round: accuracy and clock
        from round 0, round time, fraction of improved participants, responders, the clients selected),
        ``clients`` (final per-client accuracies, participation counts, sample counts) and bookkeeping; with a
        vector reward (``reward: vector``), ``return_vector`` per objective (``episode_return`` is NaN).
    """
    start = time.perf_counter()
    steps = episode_steps(env.unwrapped, policy, *env.reset(seed=seed), make_policy=make_policy, start=start)
    try:
        action = next(steps)
        while True:
            action = steps.send(env.step(action))
    except StopIteration as done:
        return done.value


def episode_steps(env: Any, policy: Any, obs: Any, info: Mapping[str, Any],
                  make_policy: Optional[Callable[[Any], Any]] = None, start: Optional[float] = None):
    """:func:`run_episode` after its reset, as a generator: it yields each action and is sent the step's
    ``(obs, reward, terminated, truncated, info)``; it returns the record. ``env`` is the (unwrapped) env
    that was reset with ``obs`` and ``info`` (the vector env's sub-env: ``fedsel_eval.vector_episodes``)."""
    start = time.perf_counter() if start is None else start
    if make_policy is not None:
        policy = make_policy(env.selection_spec)
    if hasattr(policy, "bind"):  # agents that ask clients something before selecting (pow_d)
        policy.bind(env)
    num_samples = np.asarray(info["num_samples"])
    accuracy, clock, loss = [float(info["accuracy"])], [0.0], [float(info["loss"])]
    round_time, improved, responders, selected = [], [], [], []
    episode_return, terminated, truncated = 0.0, False, False
    vector_return = None  # a vector reward (reward: vector) is summed per objective
    while not (terminated or truncated):
        action, _ = policy.predict(obs, deterministic=True)
        obs, reward, terminated, truncated, info = yield action
        if np.ndim(reward):
            vector_return = np.asarray(reward, np.float64) + (0.0 if vector_return is None else vector_return)
        else:
            episode_return += float(reward)
        accuracy.append(float(info["accuracy"]))
        loss.append(float(info["loss"]))
        clock.append(float(info["clock"]))
        round_time.append(float(info["round_time"]))
        improved.append(float(info.get("improved_fraction", math.nan)))  # absent: not measured this round
        responders.append(int(len(info["responders"])))
        selected.append([int(c) for c in info["selected"]])
    rounds = len(round_time)
    participation = np.asarray(info["participation"], dtype=np.int64)
    client_acc = np.asarray(info["client_accuracies"], dtype=np.float64)
    m: Dict[str, Any] = {
        "rounds_to_target": float(rounds) if terminated else math.nan,
        "time_to_target": clock[-1] if terminated else math.nan,
        "final_accuracy": accuracy[-1],
        "best_accuracy": float(max(accuracy[1:])),
        **metrics.client_accuracy_summary(client_acc),
        **metrics.participation_summary(participation, rounds),
        "mean_round_time": float(np.mean(round_time)),
        # a round nobody responded to has no participants to improve (NaN): left out of the mean
        "improved_fraction": float(np.nanmean(improved)) if np.isfinite(improved).any() else math.nan,
        "updates_sent": float(info["updates_sent"]),
        "loss_queries": float(info.get("loss_queries", 0)),
        "rounds": float(rounds),
        "sim_time": clock[-1],
        "episode_return": episode_return if vector_return is None else math.nan,
        "attacker_selected_rate": float(info.get("attacker_selected_rate", math.nan)),
        "attacker_response_share": float(info.get("attacker_response_share", math.nan)),
        "honest_acc_mean": float(info.get("honest_acc_mean", math.nan)),
        "dropouts": float(info.get("dropouts", 0)),
        "late_arrivals": float(info.get("late_arrivals", 0)),
    }
    return {
        "reached": bool(terminated), "diverged": bool(info["diverged"]), "terminated": bool(terminated),
        "truncated": bool(truncated), "metrics": m,
        "curves": {"accuracy": accuracy, "loss": loss, "clock": clock, "round_time": round_time,
                   "improved_fraction": improved, "responders": responders, "selected": selected},
        "clients": {"accuracy": client_acc.tolist(), "participation": participation.tolist(),
                    "num_samples": num_samples.tolist()},
        "profiling_time": float(info["profiling_time"]),
        **({} if vector_return is None else {"return_vector": vector_return.tolist()}),
        "wall_time_s": time.perf_counter() - start,
    }


def scenario_objectives(env: Any, sc: Any, make_policy: Callable[[Any], Any],
                        seeds: Sequence[int]) -> Tuple[List[float], int]:
    """The scenario ``sc``'s objective of the policy ``make_policy(spec)`` builds, on each seed's episode of
    ``env`` (a missed Ω counts as the cap), and the env rounds they took in all."""
    values, rounds = [], 0
    for s in seeds:
        rec = run_episode(env, None, int(s), make_policy=make_policy)
        values.append(float(episode_objective(sc, rec)[0]))
        rounds += int(rec["metrics"]["rounds"])
    return values, rounds


@dataclass
class EpisodeJob:
    """One episode to play: its ``seed``, how to build its policy from the episode's selection spec, and a
    ``tag`` the caller gets back with the record."""

    seed: int
    make_policy: Callable[[Any], Any]
    tag: Any = None


def play_vector(env_config: Optional[Mapping[str, Any]], jobs: Sequence[EpisodeJob], n_envs: int,
                deadline: float = math.inf, venv: Any = None) -> Iterator[Tuple[Any, Dict]]:
    """Play ``jobs`` in up to ``n_envs`` sub-envs of one vector env of ``env_config`` (or of ``venv``, a
    :class:`~fedsel_env.vector.FedSelectVectorEnv` the caller keeps and closes; ``env_config`` is then unused);
    yields ``(job.tag, record)`` as each episode ends (records as :func:`run_episode`'s). Every slot resets with its
    episode's seed, the sub-envs' rounds are stepped together (one fused local training for all of them), and when
    a slot's episode ends the next pending one starts there. No episode starts at or after ``deadline``
    (``time.time()``); those started are played to their end. Closing the generator stops the episodes still
    running (their records are not yielded; a kept ``venv``'s slots are reset by the next call)."""
    if not jobs:
        return
    own = venv is None
    if own:
        from .vector import FedSelectVectorEnv

        venv = FedSelectVectorEnv(min(n_envs, len(jobs)), config=dict(env_config or {}), autoreset_mode="disabled")
    pending = deque(jobs)
    running: Dict[int, Tuple[EpisodeJob, Any]] = {}
    actions: Dict[int, Any] = {}
    try:
        free = list(range(min(venv.num_envs, n_envs)))
        while pending or running:
            starting = {}
            if time.time() >= deadline:
                pending.clear()
            while free and pending:
                starting[free.pop(0)] = pending.popleft()
            if starting:  # their resets (profiling rounds) together
                start = time.perf_counter()
                for i, (obs, info) in venv.reset_some({i: j.seed for i, j in starting.items()}).items():
                    steps = episode_steps(venv.envs[i], None, obs, info, make_policy=starting[i].make_policy,
                                          start=start)
                    running[i] = (starting[i], steps)
                    actions[i] = next(steps)  # an episode has at least one step
            if not running:
                break
            results = venv.step_some(actions)
            actions = {}
            for i in sorted(results):
                job, steps = running[i]
                try:
                    actions[i] = steps.send(results[i])
                except StopIteration as done:
                    del running[i]
                    free.append(i)
                    yield job.tag, done.value
            free.sort()
    finally:
        if own:
            venv.close()


_ENVS: Dict[str, Any] = {}


def env_for(config: Mapping[str, Any]) -> Any:
    """This process's env of ``config`` (built once; a new config replaces the one kept before)."""
    from .env import FedSelectEnv

    key = config_key(config)
    if key not in _ENVS:
        close_envs()
        _ENVS[key] = FedSelectEnv(config=json.loads(key))
    return _ENVS[key]


def keep_env(config: Mapping[str, Any], env: Any) -> None:
    """Keep ``env``, built for ``config``, as this process's env of that config (a caller that built it already)."""
    _ENVS.clear()
    _ENVS[config_key(config)] = env


def forget_env(env: Any) -> None:
    """Drop ``env`` from the envs :func:`env_for` keeps, without closing it (its owner closes it)."""
    for key in [k for k, e in _ENVS.items() if e is env]:
        del _ENVS[key]


def close_envs() -> None:
    """Close and forget the env kept by :func:`env_for`."""
    for env in _ENVS.values():
        env.close()
    _ENVS.clear()


__all__ = ["EpisodeJob", "close_envs", "config_key", "env_for", "episode_steps", "forget_env", "keep_env", "play_vector", "run_episode",
           "scenario_objectives"]
