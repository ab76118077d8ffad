"""Running an evaluation's episodes: one policy for one episode, in this process or in worker processes.

Owns :func:`run_episode` (a policy acts from ``env.reset(seed=s)`` to the end; the record holds
docs/SPEC.md §5's metrics, the per-round curves and the per-client arrays), one env per config kept in
each process, the unit of work of a worker (:func:`evaluate_task`), the worker processes
(forkserver or spawn, ``torch_threads`` each; they end when the evaluating process ends, however it
ends), and :func:`run_plan`, which runs what a run folder lacks on one of three executors (this
process, worker processes, Ray tasks: :mod:`.ray_executor`) and appends each record as it finishes.
The records are the same whichever executor ran them.
"""
from __future__ import annotations

import json
import math
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence

import numpy as np

from fedsel_env import metrics
from fedsel_env.env import FedSelectEnv
from fedsel_env.sim import lifeline

from .policies import agent_seed, build_policy
from .ray_executor import check_address as check_ray_address
from .run_folder import RunFolder, jsonable

if TYPE_CHECKING:
    from .plan import EpisodeTask, EvalPlan


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
        improved.append(float(info["improved_fraction"]))
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
    from .vector_episodes import check_n_envs, vector_records

    check_ray_address(ray, workers)
    check_n_envs(n_envs, workers, ray)
    done = {r["key"]: r for r in run.read_episodes()}
    tasks = plan.tasks()
    todo = [t for t in tasks if t.key not in done]
    bar = tqdm(total=len(tasks), initial=len(tasks) - len(todo), unit="episode", desc="evaluating",
               disable=not progress, dynamic_ncols=True)
    if ray is not None:
        from .ray_executor import ray_episodes

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


__all__ = ["episode_steps", "evaluate_task", "keep_env", "run_episode", "run_plan", "task_policy", "task_record"]
