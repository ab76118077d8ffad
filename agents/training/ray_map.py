"""Independent tasks as Ray tasks, on a local Ray or an existing cluster (``train_agent.py --ray [ADDRESS]``).

An evolution strategy's generation is embarrassingly parallel: every candidate plays its episodes on its own,
so the generation is a list of tasks whose results only meet when CMA-ES is told the fitnesses (Salimans, Ho,
Chen, Sidor & Sutskever, "Evolution Strategies as a Scalable Alternative to Reinforcement Learning",
arXiv:1703.03864, 2017: ES run on 1,440 CPUs with little more than the seeds and the scalar returns sent
around). :class:`RayMapper` plays such a list on Ray (Moritz et al., "Ray: A Distributed Framework for
Emerging AI Applications", OSDI 2018), each item a task of its own: ``mapper.map(fn, items)`` returns
``[fn(item) for item in items]`` in item order, as the trainers' serial mapper does
(``agents.training.set_es.SerialMapper``; docs/SPEC.md §4's selectors are what the tasks play). ``fn`` must
be a module-level function (a Ray worker imports it by name) of one picklable item.

**The same results as one process.** A task's result must depend on its item alone — ``set_es``'s episodes
each start from ``env.reset(seed=...)`` on the env of their config that the worker keeps between tasks
(``fedsel_env.rollout.env_for``) — so which worker or node plays which item does not change a number.

**A lost node costs no result.** A task whose worker or node died (the process killed, the machine gone: Ray
raises :data:`LOST`) is submitted again, up to ``retries`` times per item, on whatever node is left; Ray's
own retry is switched off (``max_retries=0``) so that every re-run is counted and logged here. An exception
raised by ``fn`` itself is not retried: it reaches the caller as that exception (Ray's ``RayTaskError`` is an
instance of the task's exception class).

Where to connect (``address``):

- ``"local"``: start a Ray instance on this machine (Ray's own rule: ``RAY_ADDRESS``, when set, is
  connected to instead);
- ``"auto"``: the cluster this machine joined with ``ray start``;
- ``"ray://host:10001"`` or ``"host:6379"``: that cluster.

A process already connected to Ray (``ray.init`` in a notebook, or a test) is used as it is. Ray stays up
until the process ends. ``fedsel_eval.ray_executor`` (``evaluate.py --ray``) connects through this module.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

#: The ``--ray`` value that starts a Ray instance on this machine.
LOCAL = "local"
INSTALL_HINT = ("pip install -e '.[ray]' (or '.[flower]', whose flwr[simulation] brings it; scripts/setup.sh installs "
                "both)")
#: the names, in ``ray.exceptions``, of the errors that mean a task's worker, node or result was lost (not
#: that the task's code failed): such a task is submitted again
LOST = ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "ObjectLostError", "OwnerDiedError",
        "ObjectReconstructionFailedError", "ObjectFetchTimedOutError", "OutOfMemoryError")


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


def is_lost(error: BaseException) -> bool:
    """Whether ``error`` (raised by ``ray.get``) says the task's worker, node or result was lost — not that its
    code raised: a ``RayTaskError`` counts only when what it wraps is such a loss."""
    import ray.exceptions as rex

    lost = tuple(getattr(rex, n) for n in LOST if hasattr(rex, n))
    if isinstance(error, rex.RayTaskError):
        cause = getattr(error, "cause", None)
        return cause is not None and cause is not error and is_lost(cause)
    return isinstance(error, lost)


def run_item(fn: Callable[[Any], Any], item: Any, torch_threads: int) -> Tuple[Any, str]:
    """A Ray task: ``fn(item)`` on ``torch_threads`` torch threads → (its result, the id of the node that ran it)."""
    import ray
    import torch

    torch.set_num_threads(torch_threads)  # Ray's workers are reused: set on every task
    return fn(item), ray.get_runtime_context().get_node_id()


class RayMapper:
    """``map(fn, items)``: ``[fn(item) for item in items]``, each item a Ray task (see the module's docstring).

    :param address: where to run (:func:`connect`); Ray is connected to on the first ``map``.
    :param torch_threads: torch threads (and Ray CPUs) per task.
    :param retries: how many times one item is submitted again after its worker or node was lost.
    :param log: where a re-submission is reported.
    """

    def __init__(self, address: str = LOCAL, torch_threads: int = 1, retries: int = 3,
                 log: Callable[[str], Any] = print) -> None:
        check_address(address)
        for name, v in (("torch_threads", torch_threads), ("retries", retries)):
            if isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "torch_threads" else 0):
                raise ValueError(f"RayMapper: {name} = {v!r} is invalid: expected an integer >= "
                                 f"{1 if name == 'torch_threads' else 0}")
        self.address, self.torch_threads, self.retries, self.log = address, torch_threads, retries, log
        #: items submitted again after a loss, over this mapper's life
        self.resubmitted = 0
        #: the node that ran each item of the last ``map``, in item order
        self.nodes: List[str] = []

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> List[Any]:
        """``[fn(item) for item in items]``, the items played as Ray tasks, the results in item order."""
        results: Dict[int, Any] = {}
        nodes: Dict[int, str] = {}
        for i, (result, node) in self.as_completed(fn, items):
            results[i], nodes[i] = result, node
        self.nodes = [nodes[i] for i in range(len(items))]
        return [results[i] for i in range(len(items))]

    def as_completed(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> Iterator[Tuple[int, Tuple[Any, str]]]:
        """Yield ``(index, (fn(items[index]), node id))`` as each task finishes (completion order); a task lost
        with its worker or node is submitted again (up to ``retries`` times). Closing the generator (an
        exception or Ctrl-C in the caller) cancels the tasks not yet finished.

        :raises ValueError: when an item was lost more than ``retries`` times (naming it and the last error).
        """
        items = list(items)
        if not items:
            return
        ray = connect(self.address)
        remote = ray.remote(run_item).options(num_cpus=self.torch_threads, max_retries=0)
        fn_ref = ray.put(fn)
        pending: Dict[Any, int] = {}
        tries = [0] * len(items)
        try:
            for i, item in enumerate(items):
                pending[remote.remote(fn_ref, item, self.torch_threads)] = i
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                i = pending.pop(ready[0])
                try:
                    out = ray.get(ready[0])
                except Exception as e:  # noqa: BLE001 -- only a lost worker/node is retried; anything else re-raised
                    if not is_lost(e):
                        raise
                    tries[i] += 1
                    if tries[i] > self.retries:
                        raise ValueError(f"task {i} of {len(items)} was lost {tries[i]} time{'s' * (tries[i] > 1)} (last: "
                                         f"{type(e).__name__}: {e}); the cluster keeps losing its nodes — "
                                         f"check `ray status`, or raise retries") from e
                    self.resubmitted += 1
                    self.log(f"ray: task {i} of {len(items)} lost ({type(e).__name__}); submitted again "
                             f"({tries[i]}/{self.retries})")
                    pending[remote.remote(fn_ref, items[i], self.torch_threads)] = i
                    continue
                yield i, out
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)  # force: a running task holds no state worth a clean stop
            raise


__all__ = ["LOCAL", "LOST", "RayMapper", "check_address", "connect", "is_lost", "run_item"]
