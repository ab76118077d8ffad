"""Episodes played several at once through the vector env (issue #27): ``evaluate.py --n-envs E``.

:func:`play` (:func:`fedsel_env.rollout.play_vector`) runs episodes — each a seed and a way to build its
policy — in the E sub-envs of one :class:`~fedsel_env.vector.FedSelectVectorEnv`: every slot resets with its episode's seed, the sub-envs'
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
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from fedsel_env.rollout import EpisodeJob, play_vector

from .episodes import task_policy, task_record

if TYPE_CHECKING:
    from .plan import EpisodeTask, EvalPlan


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
    ``(job.tag, record)`` as each episode ends (records as :func:`~fedsel_eval.episodes.run_episode`'s):
    :func:`fedsel_env.rollout.play_vector` (the loop lives below the agents layer, where the ES trainer plays its
    generations with it), ``n_envs`` checked first."""
    check_n_envs(n_envs)
    yield from play_vector(env_config, jobs, n_envs, deadline)


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
