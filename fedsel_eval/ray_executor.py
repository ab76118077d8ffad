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

A process already connected to Ray (``ray.init`` in a notebook, or a test) is used as it is. Ray stays
up until the process ends (it shuts itself down at exit), so several evaluations in one script — the
experiments' parts — start it once.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Sequence

if TYPE_CHECKING:
    from .plan import EpisodeTask, EvalPlan

#: The ``--ray`` value that starts a Ray instance on this machine.
LOCAL = "local"
INSTALL_HINT = "pip install -e '.[ray]' (or '.[flower]', whose flwr[simulation] brings it; scripts/setup.sh installs both)"


def check_address(address: Optional[str], workers: int = 1) -> None:
    """Check ``address`` and that Ray can be imported, before anything is written.

    :param workers: the ``workers`` asked for alongside (more than 1 excludes Ray).
    :raises ValueError: for an address that is not a string, with ``workers`` > 1, or when Ray is not
        installed (naming the fix).
    """
    if address is None:
        return
    if workers != 1:
        raise ValueError(f"--ray and --workers {workers} exclude each other: with --ray, Ray runs as many "
                         f"episodes at once as the cluster has CPUs (one per episode); drop --workers")
    if not isinstance(address, str) or not address.strip():
        raise ValueError(f"--ray {address!r} is invalid: expected nothing (a local Ray), 'auto' (the cluster this "
                         f"machine joined with `ray start`), or a cluster address (ray://HOST:10001 or HOST:6379)")
    _import_ray()


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise ValueError(f"--ray needs the 'ray' package, which is not installed ({e}): {INSTALL_HINT}") from None
    return ray


def connect(address: str) -> Any:
    """Connect to Ray (see the module's docstring for ``address``); return the ``ray`` module."""
    ray = _import_ray()
    if not ray.is_initialized():
        try:
            with _ctrl_c_held():
                if address == LOCAL:
                    ray.init(include_dashboard=False)
                else:
                    ray.init(address=address)
        except ConnectionError as e:
            raise ValueError(f"--ray {address}: could not connect ({e}). Start a cluster with `ray start --head` "
                             f"(then --ray auto), or leave the address out for a local Ray") from None
    return ray


@contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """Hold a Ctrl-C until the block has run, then raise it: a ``KeyboardInterrupt`` inside ``ray.init``
    left a half-started Ray that crashed the process at exit (SIGSEGV instead of exit status 130)."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    held: List[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if held:
        raise KeyboardInterrupt


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


__all__ = ["LOCAL", "check_address", "connect", "ray_episodes"]
