"""Episodes played several at once through the vector env (issue #27): ``evaluate.py --n-envs E``.

:func:`play` runs episodes — each a seed and a way to build its policy — in the E sub-envs of one
:class:`~fedsel_env.vector.FedSelectVectorEnv`: every slot resets with its episode's seed, the sub-envs'
rounds are stepped together (one fused local training for all of them), and when a slot's episode ends
the next pending episode starts there (the slot idles when none is left). Each episode is
:func:`~fedsel_eval.episodes.episode_steps` — :func:`~fedsel_eval.episodes.run_episode`'s own loop —
with its own policy object, bound to its own sub-env, so a record equals the one ``run_episode`` gives
for the same seed: a sub-env's trajectory is the single env's bit for bit (``tests/test_vector_env.py``),
and the policies see the same observations (``tests/test_vector_episodes.py``). Only ``wall_time_s``
differs: an episode's wall time then includes its neighbours' work in the same calls.

:func:`vector_records` is :func:`~fedsel_eval.executors.run_plan`'s executor for ``n_envs`` > 1; the bench
suite (``fedsel_eval/bench.py``) calls :func:`play` directly.
"""
from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from .episodes import episode_steps, task_policy, task_record

if TYPE_CHECKING:
    from .plan import EpisodeTask, EvalPlan


@dataclass
class EpisodeJob:
    """One episode to play: its ``seed``, how to build its policy from the episode's selection spec, and a
    ``tag`` the caller gets back with the record."""

    seed: int
    make_policy: Callable[[Any], Any]
    tag: Any = None


def check_n_envs(n_envs: Any, workers: int = 1, ray: Optional[str] = None) -> None:
    """``ValueError`` for an ``n_envs`` that is not an integer >= 1, or > 1 beside worker processes or Ray."""
    if isinstance(n_envs, bool) or not isinstance(n_envs, int) or n_envs < 1:
        raise ValueError(f"n_envs = {n_envs!r} is invalid: expected an integer >= 1")
    if n_envs > 1 and (workers > 1 or ray is not None):
        raise ValueError(f"n_envs = {n_envs} plays the episodes in this process through the vector env: "
                         f"with workers = {workers}{' and Ray' if ray is not None else ''} leave n_envs at 1")


def play(env_config: Mapping[str, Any], jobs: Sequence[EpisodeJob], n_envs: int,
         deadline: float = math.inf) -> Iterator[Tuple[Any, Dict]]:
    """Play ``jobs`` in up to ``n_envs`` sub-envs of one vector env of ``env_config``; yields
    ``(job.tag, record)`` as each episode ends (records as :func:`~fedsel_eval.episodes.run_episode`'s).
    No episode starts at or after ``deadline`` (``time.time()``); those started are played to their end.
    Closing the generator stops the episodes still running (their records are not yielded)."""
    from fedsel_env.vector import FedSelectVectorEnv

    check_n_envs(n_envs)
    if not jobs:
        return
    venv = FedSelectVectorEnv(min(n_envs, len(jobs)), config=dict(env_config), autoreset_mode="disabled")
    pending = deque(jobs)
    running: Dict[int, Tuple[EpisodeJob, Any]] = {}
    actions: Dict[int, Any] = {}
    try:
        free = list(range(venv.num_envs))
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
        venv.close()


def vector_records(plan: EvalPlan, todo: Sequence[EpisodeTask], torch_threads: int,
                   n_envs: int) -> Iterator[Dict[str, Any]]:
    """:func:`~fedsel_eval.executors.run_plan`'s executor for ``n_envs`` > 1: each backend's episodes through a
    vector env of its config, seed by seed (the policies of one seed play side by side, on one federation's
    data built once); records in completion order."""
    import torch

    by_backend: Dict[str, List[EpisodeTask]] = {}
    for t in todo:
        by_backend.setdefault(t.backend.label, []).append(t)
    threads = torch.get_num_threads()
    torch.set_num_threads(torch_threads)
    try:
        for tasks in by_backend.values():
            order = sorted(range(len(tasks)), key=lambda i: (tasks[i].seed, i))
            jobs = [EpisodeJob(tasks[i].seed, task_policy(tasks[i]), tasks[i]) for i in order]
            for task, record in play(plan.env_config_for(tasks[0].backend), jobs, n_envs):
                yield task_record(task, record)
    finally:
        torch.set_num_threads(threads)


__all__ = ["EpisodeJob", "check_n_envs", "play", "vector_records"]
