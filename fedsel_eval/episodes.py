"""An evaluation's episode: one policy for one episode, the unit of work of every executor.

Owns :func:`run_episode` (a policy acts from ``env.reset(seed=s)`` to the end; the record holds
docs/SPEC.md §5's metrics, the per-round curves and the per-client arrays) and its loop as a generator
(:func:`episode_steps`, which the vector env's executor drives), one env per config kept in each process
(:func:`keep_env`), and the unit of work of a worker (:func:`evaluate_task`). The executors that run
them — this process, worker processes, Ray tasks, the vector env — are :mod:`.executors`,
:mod:`.ray_executor` and :mod:`.vector_episodes`; they import this module, never the reverse.
"""
from __future__ import annotations

import json
import math
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Mapping, Optional

import numpy as np

from fedsel_env import metrics
from fedsel_env.env import FedSelectEnv

from .policies import agent_seed, build_policy
from .run_folder import jsonable

if TYPE_CHECKING:
    from .plan import EpisodeTask


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


_ENV_CACHE: Dict[str, Any] = {}


def _env_for(config: Mapping[str, Any]) -> Any:
    """One env per config in each process (building the data takes a while); ``reset(seed)`` makes
    each episode independent of the ones before."""
    key = json.dumps(jsonable(config), sort_keys=True)
    if key not in _ENV_CACHE:
        _ENV_CACHE.clear()
        _ENV_CACHE[key] = FedSelectEnv(config=json.loads(key))
    return _ENV_CACHE[key]


def keep_env(config: Mapping[str, Any], env: Any) -> None:
    """Keep ``env``, built for ``config``, as this process's env of that config (the plan's probe
    env serves the first backend's episodes)."""
    _ENV_CACHE.clear()
    _ENV_CACHE[json.dumps(jsonable(config), sort_keys=True)] = env


def evaluate_task(task: EpisodeTask, env_config: Mapping[str, Any]) -> Dict[str, Any]:
    """Run one task and return its JSON-ready record (the unit of work of a worker process)."""
    env = _env_for(env_config)
    return task_record(task, run_episode(env, None, task.seed, make_policy=task_policy(task)))


def task_policy(task: EpisodeTask) -> Callable[[Any], Any]:
    """The task's policy, built from the episode's selection spec (``run_episode``'s ``make_policy``)."""
    return lambda spec: build_policy(task.policy, spec, task.seed)


def task_record(task: EpisodeTask, record: Mapping[str, Any]) -> Dict[str, Any]:
    """The JSON-ready line of ``episodes.jsonl``: the task's key, policy, backend and seeds, then the record."""
    head = {"key": task.key, "policy": task.policy.label, "backend": task.backend.label, "seed": task.seed,
            "agent_seed": agent_seed(task.seed)}
    return jsonable({**head, **record})


__all__ = ["episode_steps", "evaluate_task", "keep_env", "run_episode", "task_policy", "task_record"]
