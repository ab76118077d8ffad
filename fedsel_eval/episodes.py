"""An evaluation's episode: one policy for one episode, the unit of work of every executor.

The loop itself — :func:`run_episode` (a policy acts from ``env.reset(seed=s)`` to the end; the record holds
docs/SPEC.md §5's metrics, the per-round curves and the per-client arrays) and :func:`episode_steps` (the same
loop as a generator, which the vector env's executor drives) — lives in :mod:`fedsel_env.rollout`, below the
agents, so the trainers play the same episodes (issue #46); it is re-exported here. This module owns one env
per config kept in each process
(:func:`keep_env`), and the unit of work of a worker (:func:`evaluate_task`). The executors that run
them — this process, worker processes, Ray tasks, the vector env — are :mod:`.executors`,
:mod:`.ray_executor` and :mod:`.vector_episodes`; they import this module, never the reverse.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable, Dict, Mapping

from fedsel_env.env import FedSelectEnv
from fedsel_env.rollout import episode_steps, run_episode

from .policies import agent_seed, build_policy
from .run_folder import jsonable

if TYPE_CHECKING:
    from .plan import EpisodeTask


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
