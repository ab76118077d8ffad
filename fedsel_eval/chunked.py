"""Long episodes in resumable chunks: a run checkpoints its whole state every M rounds and, after a pause,
a time budget or a crash, continues from its last checkpoint bit for bit as if it had never stopped.

A *run* is the episode :func:`fedsel_eval.run_episode` plays — a ``--policy`` value acting in one env
config from ``env.reset(seed=s)`` until the round budget, the policy built by
:func:`fedsel_eval.build_policy` and seeded by :func:`fedsel_eval.agent_seed` — so an uninterrupted run
gives the numbers of ``run_episode`` for that seed (``tests/test_chunked.py`` checks both claims). One
difference: the policy is built on the spec of the seed's own federation (:func:`start` says why).
What differs is the bookkeeping: a run of 20,000 rounds keeps a curve point every ``eval_every`` rounds
(the env evaluates only then, and at the last round) instead of one per round, and its state lies in
``<folder>/checkpoint.pkl``, written atomically (a temp file, fsync, ``os.replace``) every
``checkpoint_every`` rounds and when a call stops early.

A checkpoint holds everything a round changes: the federation's global model, round counter, loss
cache, aggregator (its server state), system model and clients' behaviour (each with its generator);
the server view and the episode's tallies; the env's and the policy's generators; torch's, numpy's and
Python's global generator states; the curve so far. Restoring replays ``env.reset(seed)`` (which
rebuilds the seed's data, model and w_0 deterministically) and then puts that state back. A checkpoint
written for another run (env config, policy or seed) is ignored and the run starts afresh.

Runs go through :func:`run_all`: in this process (``workers`` = 1) or in worker processes, each run
stopping cleanly at a deadline, with ``on_outcome`` called in this process as each run pauses or ends.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from agents.training.atomic import atomic_write_bytes, plain

CHECKPOINT_FILE = "checkpoint.pkl"
#: bump when the checkpoint's layout changes: an older checkpoint is then ignored (the run restarts)
CHECKPOINT_VERSION = 1
#: the federation's attributes that change during an episode (everything else is fixed by the seed)
FEDERATION_STATE = ("global_params", "round", "_loss_cache", "aggregator", "system", "adversary", "train_seed")


@dataclass(frozen=True)
class RunSpec:
    """One run: a policy in an env config from one reset seed, for the config's ``max_rounds``.

    :param run_id: its name (unique within a grid; the progress file's key).
    :param env: env-config fields with an optional ``preset`` (``max_rounds``, ``eval_every`` included).
    :param policy: a ``--policy`` value (``random_nk``, ``qffl:q=1``).
    :param seed: the episode seed (``env.reset(seed=seed)``).
    """

    run_id: str
    env: Mapping[str, Any]
    policy: str
    seed: int

    def key(self) -> str:
        """What a checkpoint must match to be resumed."""
        return json.dumps({"env": plain(self.env), "policy": self.policy, "seed": self.seed,
                           "version": CHECKPOINT_VERSION}, sort_keys=True)


@dataclass
class RunOutcome:
    """What one call of :func:`advance` did.

    :param status: ``finished`` (the episode ended: ``record`` holds its results) or ``paused``.
    :param start_round: the round it resumed from (0: from the start).
    :param rounds_done: rounds played in all, after this call.
    :param seconds: this call's wall time (the env's construction and reset included).
    :param round_seconds: wall time of this call's rounds alone (``seconds`` less the set-up).
    """

    run_id: str
    status: str
    start_round: int
    rounds_done: int
    seconds: float
    round_seconds: float
    record: Optional[Dict[str, Any]] = None
    extra: Dict[str, Any] = field(default_factory=dict)


def advance(spec: RunSpec, folder: Path, checkpoint_every: int, deadline: float = math.inf,
            max_rounds: Optional[int] = None) -> RunOutcome:
    """Play ``spec`` on from its last checkpoint in ``folder`` until it ends, ``time.time()`` passes
    ``deadline`` or this call has played ``max_rounds`` rounds; checkpoint every ``checkpoint_every`` rounds.

    :return: the outcome; a finished run's ``record`` has ``metrics`` (docs/SPEC.md §5's per-client accuracy
        summary, final accuracy, rounds, divergence), ``clients`` (final per-client accuracy,
        participation, sample counts), ``curve`` (the evaluated rounds' global accuracy and loss,
        variance ×10⁴, worst-10% and best-10% of the per-client accuracy) and ``model_sha256`` (the
        final global model's bytes). A run already finished in ``folder`` returns its record at once.
    """
    from fedsel_env import metrics

    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every = {checkpoint_every} is invalid: expected >= 1")
    started = time.perf_counter()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    done = finished_record(folder, spec)
    if done is not None:  # finished before (its progress entry was lost): nothing to play
        rounds = int(done["metrics"]["rounds"])
        return RunOutcome(spec.run_id, "finished", rounds, rounds, 0.0, 0.0, done)
    env, policy, obs, info = start(spec)
    saved = load_checkpoint(folder, spec)
    if saved is None:
        curve: Dict[str, List[float]] = {k: [] for k in ("round", "accuracy", "loss", "acc_var_1e4",
                                                          "acc_worst10", "acc_best10")}
        _add_point(curve, 0, info, metrics)
        num_samples = np.asarray(info["num_samples"]).tolist()
    else:
        _restore(env, policy, saved["state"])
        curve, num_samples = saved["curve"], saved["num_samples"]
        obs = env.view.observe()
    start_round = env._round
    rounds_started = time.perf_counter()
    played, terminated, truncated = 0, False, False
    while True:
        action, _ = policy.predict(obs, deterministic=True)
        obs, _, terminated, truncated, info = env.step(action)
        played += 1
        if info["evaluated"]:
            _add_point(curve, env._round, info, metrics)
        if terminated or truncated:
            break
        stop = time.time() >= deadline or (max_rounds is not None and played >= max_rounds)
        if stop or env._round % checkpoint_every == 0:
            save_checkpoint(folder, spec, {"state": _capture(env, policy), "curve": curve, "num_samples": num_samples})
        if stop:
            now = time.perf_counter()
            return RunOutcome(spec.run_id, "paused", start_round, env._round, now - started, now - rounds_started)
    now = time.perf_counter()
    client_acc = np.asarray(info["client_accuracies"], dtype=np.float64)
    record = {"metrics": {**metrics.client_accuracy_summary(client_acc), "final_accuracy": float(info["accuracy"]),
                          "final_loss": float(info["loss"]), "rounds": float(env._round),
                          "diverged": bool(info["diverged"]), "reached": bool(terminated)},
              # the final global model's bytes: two runs with equal hashes ended at the same model, bit for bit
              "model_sha256": hashlib.sha256(env.federation.global_params.detach().cpu().numpy().tobytes()).hexdigest(),
              "clients": {"accuracy": client_acc.tolist(),
                          "participation": np.asarray(info["participation"]).astype(int).tolist(),
                          "num_samples": num_samples},
              "curve": curve}
    save_checkpoint(folder, spec, {"state": None, "curve": curve, "num_samples": num_samples, "record": record})
    return RunOutcome(spec.run_id, "finished", start_round, env._round, now - started, now - rounds_started, record)


def start(spec: RunSpec) -> tuple:
    """The run's env reset with its seed, and its policy: (env, policy, first observation, reset info).

    The policy is built after the reset, on ``env.selection_spec`` of the seed's own federation: built
    before it (as ``fedsel_eval.evaluate_task`` does), an agent reading ``spec.num_samples`` (``random_nk``,
    ``qffl``, ``afl``, ``oort``, ``pow_d``) would sample by the sizes of the env's previous federation, which
    differ from this one's whenever sizes are drawn per federation (Synthetic's lognormal n_k).
    """
    from fedsel_env.env import FedSelectEnv
    from .policies import build_policy, parse_policy

    env = FedSelectEnv(config=dict(spec.env))
    obs, info = env.reset(seed=spec.seed)
    policy = build_policy(parse_policy(spec.policy), env.selection_spec, spec.seed)
    if hasattr(policy, "bind"):
        policy.bind(env.unwrapped)
    return env, policy, obs, info


def _add_point(curve: Dict[str, List[float]], rnd: int, info: Mapping[str, Any], metrics: Any) -> None:
    s = metrics.client_accuracy_summary(np.asarray(info["client_accuracies"], dtype=np.float64))
    curve["round"].append(int(rnd))
    curve["accuracy"].append(float(info["accuracy"]))
    curve["loss"].append(float(info["loss"]))
    for k in ("acc_var_1e4", "acc_worst10", "acc_best10"):
        curve[k].append(float(s[k]))


# ============================================================================================ state
def _capture(env: Any, policy: Any) -> bytes:
    """Everything an episode's rounds change, pickled in one go (so shared objects stay shared: the
    tally's clients are the federation's)."""
    fed = env.federation
    agent_state = {k: v for k, v in vars(policy).items() if k != "spec" and v is not env.unwrapped}
    state = {
        "federation": {k: getattr(fed, k) for k in FEDERATION_STATE},
        "view": env.view, "tally": env.tally, "round": env._round, "selection_spec": env.selection_spec,
        "env_rng": env.np_random, "policy": agent_state,
        "torch_rng": _torch().get_rng_state(), "numpy_rng": np.random.get_state(), "python_rng": random.getstate(),
    }
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def _restore(env: Any, policy: Any, blob: bytes) -> None:
    """Put a captured state back into an env just reset with the run's seed, and its policy."""
    state = pickle.loads(blob)
    fed = env.federation
    for k, v in state["federation"].items():
        setattr(fed, k, v)
    env.view, env.tally, env._round, env.selection_spec = \
        state["view"], state["tally"], state["round"], state["selection_spec"]
    env.np_random = state["env_rng"]
    vars(policy).update(state["policy"])
    _torch().set_rng_state(state["torch_rng"])
    np.random.set_state(state["numpy_rng"])
    random.setstate(state["python_rng"])


def _torch() -> Any:
    import torch

    return torch


def save_checkpoint(folder: Path, spec: RunSpec, payload: Mapping[str, Any]) -> None:
    """Write ``<folder>/checkpoint.pkl`` atomically: a crash mid-write leaves the previous checkpoint."""
    path = Path(folder) / CHECKPOINT_FILE
    atomic_write_bytes(path, pickle.dumps({"key": spec.key(), **payload}, protocol=pickle.HIGHEST_PROTOCOL))


def load_checkpoint(folder: Path, spec: RunSpec) -> Optional[Dict[str, Any]]:
    """The run's last checkpoint with a state to resume, or None (none, another run's, or finished)."""
    path = Path(folder) / CHECKPOINT_FILE
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as f:
            saved = pickle.load(f)
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as e:
        print(f"{spec.run_id}: ignoring an unreadable checkpoint {path} ({type(e).__name__}: {e}); starting afresh")
        return None
    if saved.get("key") != spec.key() or saved.get("state") is None:
        return None
    return saved


def finished_record(folder: Path, spec: RunSpec) -> Optional[Dict[str, Any]]:
    """The record a finished run left in its folder (its last checkpoint), or None."""
    path = Path(folder) / CHECKPOINT_FILE
    if not path.is_file():
        return None
    with open(path, "rb") as f:
        saved = pickle.load(f)
    return saved.get("record") if saved.get("key") == spec.key() else None


# ============================================================================================ many runs
def _init_worker(parent: int) -> None:
    """A worker computes on one thread and ends with the process that started it, however that ends."""
    from fedsel_env.sim import lifeline

    lifeline.watch(parent)
    os.environ["OMP_NUM_THREADS"] = "1"
    _torch().set_num_threads(1)


def run_all(specs: Sequence[RunSpec], folder_of: Callable[[RunSpec], Path], checkpoint_every: int,
            workers: int = 1, deadline: float = math.inf,
            on_outcome: Callable[[RunOutcome], None] = lambda o: None) -> List[RunOutcome]:
    """Advance every run in ``specs`` (in order) until it ends or ``deadline`` passes.

    A run not started by the deadline is left alone (no outcome). With ``workers`` > 1 the runs go to
    that many worker processes (forkserver: this process is never forked), one run each at a time.

    :param folder_of: each run's checkpoint folder.
    :param on_outcome: called in this process as each run pauses or finishes (e.g. to record progress).
    """
    outcomes: List[RunOutcome] = []

    def took(o: RunOutcome) -> None:
        outcomes.append(o)
        on_outcome(o)

    if workers <= 1:
        for s in specs:
            if time.time() >= deadline:
                break
            took(advance(s, folder_of(s), checkpoint_every, deadline))
        return outcomes
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ctx = mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
    with ProcessPoolExecutor(max_workers=min(workers, max(len(specs), 1)), mp_context=ctx,
                             initializer=_init_worker, initargs=(os.getpid(),)) as pool:
        futures = [pool.submit(_advance_unless_late, s, folder_of(s), checkpoint_every, deadline) for s in specs]
        try:
            for fut in as_completed(futures):
                o = fut.result()
                if o is not None:
                    took(o)
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise
    return outcomes


def _advance_unless_late(spec: RunSpec, folder: Path, checkpoint_every: int, deadline: float) -> Optional[RunOutcome]:
    """A worker's task: the run, unless the deadline passed while it waited for a worker."""
    if time.time() >= deadline:
        return None
    return advance(spec, folder, checkpoint_every, deadline)
