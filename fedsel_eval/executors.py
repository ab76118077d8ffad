"""Where an evaluation's episodes run: this process, worker processes, Ray tasks or the vector env.

Owns :func:`run_plan`, which runs what a run folder lacks on one of four executors — this process one
episode at a time, this process several at once through the vector env (:mod:`.vector_episodes`),
worker processes (forkserver or spawn, ``torch_threads`` each; they end when the evaluating process ends,
however it ends), Ray tasks (:mod:`.ray_executor`) — each a generator of records of
:func:`~fedsel_eval.episodes.evaluate_task`'s, and appends each record as it finishes. The records are the
same whichever executor ran them.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence

from fedsel_env.sim import lifeline

from .episodes import evaluate_task, keep_env
from .ray_executor import check_address as check_ray_address
from .ray_executor import ray_episodes
from .run_folder import RunFolder
from .vector_episodes import check_n_envs, vector_records

if TYPE_CHECKING:
    from .plan import EpisodeTask, EvalPlan


def _worker_context(plan: EvalPlan) -> Any:
    """Worker processes never fork this (possibly multi-threaded) process: ``forkserver`` where the
    platform has it — a clean server process imports the simulator once and forks each worker from
    it, so workers start in a fraction of a spawn's time — else ``spawn``."""
    import multiprocessing as mp

    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["fedsel_eval", "fedsel_env.env", "agents"])  # agents: every agent and deployment
    return ctx


def _init_worker(torch_threads: int, evaluator_pid: int) -> None:
    # A worker's parent is the forkserver, which lives as long as any worker holds its pipe: when the
    # evaluating process is killed (SIGKILL, SIGTERM) nothing would end the pool, the forkserver and the
    # resource tracker. Each worker watches the evaluating process and ends itself when it is gone; the
    # forkserver and the resource tracker then see their last client leave and end too.
    lifeline.watch(evaluator_pid)
    os.environ["OMP_NUM_THREADS"] = str(torch_threads)
    import torch

    torch.set_num_threads(torch_threads)


def _in_this_process(plan: EvalPlan, todo: Sequence[EpisodeTask], torch_threads: int,
                     starting: Callable[[EpisodeTask], Any]) -> Iterator[Dict[str, Any]]:
    """The executor of ``workers = 1``: each task in this process, in order (``starting`` is told which)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(torch_threads)
    if plan.probe is not None:  # the env the plan was checked in serves its backend's episodes here
        keep_env(plan.env_config_for(plan.backends[0]), plan.probe)
    try:
        for t in todo:
            starting(t)
            yield evaluate_task(t, plan.env_config_for(t.backend))
    finally:
        torch.set_num_threads(threads)


def _worker_processes(plan: EvalPlan, todo: Sequence[EpisodeTask], torch_threads: int,
                      workers: int) -> Iterator[Dict[str, Any]]:
    """The executor of ``workers > 1``: a pool of worker processes; records in completion order.
    Closing the generator cancels what has not started."""
    if not todo:
        return
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=_worker_context(plan),
                             initializer=_init_worker, initargs=(torch_threads, os.getpid())) as pool:
        futures = [pool.submit(evaluate_task, t, plan.env_config_for(t.backend)) for t in todo]
        try:
            for fut in as_completed(futures):
                yield fut.result()
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise


def run_plan(plan: EvalPlan, run: RunFolder, workers: int = 1, progress: bool = True,
             torch_threads: int = 1, ray: Optional[str] = None, n_envs: int = 1) -> List[Dict[str, Any]]:
    """Run every episode of ``plan`` not yet in ``run``'s ``episodes.jsonl``, appending each as it finishes.

    The episodes run on one of four executors — this process one episode at a time, this process several
    at once through the vector env, worker processes, Ray tasks — each a generator of records; this process alone appends them to the run folder, so the folder and its
    resume work the same whichever ran them.

    :param workers: 1 = in this process; more = that many worker processes (:func:`_worker_context`).
    :param progress: show a tqdm bar over the episodes with the current policy and seed.
    :param torch_threads: torch threads per process (1 keeps runs identical across executors).
    :param ray: run the episodes as Ray tasks: ``"local"`` (start Ray here), ``"auto"`` or a cluster
        address (:mod:`fedsel_eval.ray_executor`); excludes ``workers`` > 1.
    :param n_envs: in this process, play up to this many episodes at once through the vector env
        (:mod:`fedsel_eval.vector_episodes`; the records are the same); excludes ``workers`` > 1 and ``ray``.
    :return: all the plan's records (earlier and new), in plan order.
    """
    from tqdm.auto import tqdm

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers = {workers!r} is invalid: expected an integer >= 1")
    check_ray_address(ray, workers)
    check_n_envs(n_envs, workers, ray)
    done = {r["key"]: r for r in run.read_episodes()}
    tasks = plan.tasks()
    todo = [t for t in tasks if t.key not in done]
    bar = tqdm(total=len(tasks), initial=len(tasks) - len(todo), unit="episode", desc="evaluating",
               disable=not progress, dynamic_ncols=True)
    if ray is not None:
        records = ray_episodes(plan, todo, torch_threads, ray)
    elif workers > 1:
        records = _worker_processes(plan, todo, torch_threads, workers)
    elif n_envs > 1:
        records = vector_records(plan, todo, torch_threads, n_envs)
    else:  # in this process the bar names the episode being run
        records = _in_this_process(plan, todo, torch_threads,
                                   lambda t: bar.set_postfix_str(f"{t.policy.label} / {t.backend.label} seed {t.seed}"))
    try:
        for record in records:
            run.append_episode(record)
            done[record["key"]] = record
            if workers > 1 or ray is not None or n_envs > 1:
                bar.set_postfix_str(f"finished {record['policy']} / {record['backend']} seed {record['seed']}",
                                    refresh=False)
            bar.update(1)
    finally:
        records.close()  # an interruption cancels the episodes not yet run
        bar.close()
    return [done[t.key] for t in tasks]


__all__ = ["run_plan"]
