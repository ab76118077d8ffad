"""Episodes as Ray tasks, on a local Ray or an existing cluster (``evaluate.py --ray [ADDRESS]``).

One more executor behind :func:`fedsel_eval.executors.run_plan`: each task runs
:func:`~fedsel_eval.episodes.evaluate_task` — the unit of work of the process-pool workers — in a Ray
worker on ``torch_threads`` torch threads (one CPU of the cluster each by default), and yields the
records as they finish; the driver appends them to the run folder, so ``episodes.jsonl`` is written by
one process only and an interrupted run is resumed like any other. A Ray worker keeps its env between
tasks of the same config, as a pool worker does, so the records are those of a local run.

Ray is optional (``pip install -e '.[ray]'``; ``flwr[simulation]`` brings it too). Where to connect:

- ``"local"``: start a Ray instance on this machine (Ray's own rule: ``RAY_ADDRESS``, when set, is
  connected to instead);
- ``"auto"``: the cluster this machine joined with ``ray start``;
- ``"ray://host:10001"`` or ``"host:6379"``: that cluster.

Connecting (:func:`connect`, :func:`check_address`) is :mod:`agents.training.ray_map`'s, which the trainers'
``--ray`` uses too. A process already connected to Ray (``ray.init`` in a notebook, or a test) is used as it
is. Ray stays up until the process ends (it shuts itself down at exit), so several evaluations in one script —
the experiments' parts — start it once.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Sequence, Tuple

if TYPE_CHECKING:
    from .plan import EpisodeTask, EvalPlan

# connecting is shared with the trainers' Ray mapper (``train_agent.py --ray``), one layer down
from agents.training.ray_map import INSTALL_HINT, LOCAL, _ctrl_c_held, check_address, connect  # noqa: F401


def _episode_on_ray(task: EpisodeTask, env_config: Mapping[str, Any], torch_threads: int) -> Dict[str, Any]:
    """A Ray task: what a pool worker does for one episode (its torch threads set as ``_init_worker`` does)."""
    import torch

    from .episodes import evaluate_task

    torch.set_num_threads(torch_threads)  # Ray's workers are reused: set on every task
    return evaluate_task(task, env_config)


def ray_episodes(plan: EvalPlan, todo: Sequence[EpisodeTask], torch_threads: int,
                 address: str) -> Iterator[Dict[str, Any]]:
    """Run ``todo`` as Ray tasks; yield each record as it finishes (completion order).

    Closing the generator (an exception or Ctrl-C in the driver) cancels the tasks not yet finished.

    :param torch_threads: torch threads (and Ray CPUs) per task.
    :param address: where to run (:func:`connect`).
    """
    if not todo:
        return
    ray = connect(address)
    remote = ray.remote(_episode_on_ray)
    configs = {t.backend.label: plan.env_config_for(t.backend) for t in todo}
    refs = {label: ray.put(cfg) for label, cfg in configs.items()}
    # Ray hides the GPUs from a task that asks for none: a CUDA env config asks for one per episode
    # (``device: auto`` resolves on the worker, to the CPU unless its task holds a GPU)
    pending: List[Any] = []
    try:
        for t in todo:
            gpus = 1 if str(configs[t.backend.label].get("device", "cpu")).startswith("cuda") else 0
            pending.append(remote.options(num_cpus=torch_threads, num_gpus=gpus, max_retries=0)
                           .remote(t, refs[t.backend.label], torch_threads))
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            yield ray.get(ready[0])
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)  # force: a running episode holds no state worth a clean stop
        raise


def suite_episode(item: Tuple[Mapping[str, Any], Any, int]) -> Tuple[Dict[str, Any], Any]:
    """One ``--suite bench`` episode ``(env config, parsed policy, seed)`` as a Ray task: the episode on this
    process's env of that config (``fedsel_env.rollout.env_for``, kept between tasks; every episode starts from
    ``reset(seed)``) → (its record, the policy's planning cost: the oracle's ``planned_rounds``, if it has one)."""
    from types import SimpleNamespace

    from fedsel_env.rollout import env_for

    from .episodes import run_episode
    from .policies import build_policy

    cfg, spec, seed = item
    made: List[Any] = []

    def make(selection_spec: Any) -> Any:
        made.append(build_policy(spec, selection_spec, seed))
        return made[-1]

    rec = run_episode(env_for(cfg), None, seed, make_policy=make)
    cost = {k: getattr(made[0], k) for k in ("planned_rounds", "planning_seconds") if hasattr(made[0], k)}
    return rec, SimpleNamespace(**cost)


def suite_episodes(cfg: Mapping[str, Any], todo: Sequence[Tuple[Any, int]], address: str, deadline: float,
                   log: Callable[[str], Any]) -> Iterator[Tuple[int, Dict[str, Any], Any]]:
    """``fedsel_eval.bench``'s episodes ``todo`` (parsed policy, seed) of one scenario's config as Ray tasks
    (:class:`agents.training.ray_map.RayMapper`: a task lost with its node is re-run): yield ``(index, record,
    planning cost)`` as each ends, until ``deadline`` (the tasks not finished then are cancelled)."""
    from agents.training.ray_map import RayMapper

    episodes = RayMapper(address, log=log).as_completed(suite_episode, [(cfg, spec, seed) for spec, seed in todo])
    try:
        for i, ((rec, cost), _node) in episodes:
            yield i, rec, cost
            if time.time() >= deadline:
                break
    finally:
        episodes.close()


__all__ = ["LOCAL", "check_address", "connect", "ray_episodes", "suite_episode", "suite_episodes"]
