"""A round's heavy work split across processes (config ``workers``; docs/PERFORMANCE.md).

On a CPU the batched ``vmap`` training of docs/SPEC.md §3.4 gains nothing for the CNNs (a K = 10
vmapped step costs what 10 single steps cost, ``bench/vmap_batching.py``), and one process
at batch 10 cannot keep two cores busy. With ``workers: P`` the env splits each round's
clients into P groups, trains group 0 in its own process and groups 1..P-1 in P-1 worker
processes, each with one torch thread, at the same time. The same split serves the
profiling round, the loss passes (F_k for the listed clients), the full-batch gradients of
q-FedSGD, and the evaluation on every client's test split (cut into P row ranges).

Each client's local training depends only on its own data and its own generator (seeded by
episode, round and client id), so the split changes no result beyond float rounding in the
batched kernels: ``tests/test_parallel.py`` checks that ``workers: 2`` gives the same models as
``workers: 1`` to float tolerance, and the same selections, accuracies and rewards step by step.

Workers are never forked from the env's process (issue #33): a process that has run autograd on a
GPU (or initialised CUDA) cannot be forked safely — the child's first backward pass fails with "Unable
to handle autograd's threading in combination with fork-based multiprocessing" — and a user may train on
``cuda`` and then build a ``workers`` env in the same process. They come from multiprocessing's
``forkserver`` (:func:`start_method`; ``spawn`` where there is none): a clean server process, started
once per process, that has imported this module (torch with it) and forks each worker from itself. A
pool then starts in well under a second after the first (which starts the server, ~2 s). Workers
receive the federation's tensors once per federation through shared memory. They exit with the env (``env.close()``) or with this process,
however it ends: a SIGKILL'ed or SIGTERM'ed parent runs no clean-up, so each worker watches its parent
itself (:mod:`.lifeline`; ``tests/test_parallel.py`` kills parents and counts what is left).
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import threading
import traceback
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from . import lifeline
from .training import BatchedTrainer


def start_method() -> str:
    """The start method of the workers: ``forkserver`` where the platform has it, else ``spawn``; never
    ``fork`` (see the module's docstring)."""
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def _context():
    ctx = mp.get_context(start_method())
    if ctx.get_start_method() == "forkserver":
        # the server imports torch and the trainer once; each worker is forked from it, not from the env's process.
        # (If a forkserver already runs in this process, e.g. fedsel_eval's, it is used and imports on demand.)
        ctx.set_forkserver_preload([__name__])
    return ctx


def _worker_main(conn, parent_pid: int, forked_from_main_thread: bool, inherited: Sequence[Any]) -> None:
    """A worker's loop: ("setup", key, trainer kwargs, test x, test y) then ("call", key, method, args).

    It ends with the env's process (``parent_pid``) however that ends (:mod:`.lifeline`), and closes its
    copies of the parent's pipe ends (``inherited``, a fork's only), so that a parent's death also reads as
    the end of the pipe.
    """
    for c in inherited:
        c.close()
    if os.getppid() == parent_pid:  # forked by the env's process itself (the 'fork' start method)
        lifeline.die_with_parent(parent_pid, forked_from_main_thread)
    else:  # a forkserver's child: the server is the parent (prctl ties the worker to it), the env's process is watched
        lifeline.die_with_grandparent(parent_pid)
    torch.set_num_threads(1)
    current: Dict[str, Any] = {}
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if msg is None:
            return
        try:
            if msg[0] == "setup":
                _, key, kwargs, x_test, y_test = msg
                current = {"key": key, "trainer": BatchedTrainer(**kwargs), "x_test": x_test, "y_test": y_test}
                conn.send(("ok", None))
                continue
            _, key, method, args = msg
            if current.get("key") != key:
                raise RuntimeError(f"worker has federation {current.get('key')}, asked for {key}")
            trainer = current["trainer"]
            if method == "test_losses":
                flat, lo, hi = args
                out = trainer.per_sample_losses(flat, current["x_test"][lo:hi], current["y_test"][lo:hi])
            else:
                out = getattr(trainer, method)(*args)
            # results travel as numpy arrays: pickled by value, no shared-memory file per tensor
            if isinstance(out, torch.Tensor):
                out = out.numpy()
            elif isinstance(out, tuple):
                out = tuple(o.numpy() if isinstance(o, torch.Tensor) else o for o in out)
            reply = ("ok", out)
        except Exception:  # noqa: BLE001 - everything goes back to the parent, which raises it
            reply = ("err", traceback.format_exc())
        try:
            conn.send(reply)
        except OSError:  # BrokenPipeError: the parent is gone
            return


class WorkerPool:
    """``size`` worker processes (started by :func:`start_method`), each answering one request at a time
    over a pipe."""

    _key_lock = threading.Lock()
    _next_key = 0

    def __init__(self, size: int) -> None:
        ctx = _context()
        self.start_method = ctx.get_start_method()
        forks = self.start_method == "fork"
        self.size = int(size)
        self._conns, self._procs = [], []
        main_thread = threading.current_thread() is threading.main_thread()  # see lifeline.die_with_parent
        for _ in range(self.size):
            parent, child = ctx.Pipe()
            inherited = [*self._conns, parent] if forks else []
            proc = ctx.Process(target=_worker_main, args=(child, os.getpid(), main_thread, inherited),
                               daemon=True, name="fedsel-worker")
            proc.start()
            child.close()
            self._conns.append(parent)
            self._procs.append(proc)
        self.key: Optional[int] = None
        # runs on close(), when the pool is garbage-collected, or at interpreter exit
        self._finalizer = weakref.finalize(self, WorkerPool._shutdown, self._conns, self._procs)

    @staticmethod
    def _shutdown(conns, procs) -> None:
        for c in conns:
            try:
                c.send(None)
                c.close()
            except (OSError, BrokenPipeError):
                pass  # the worker is gone already: nothing to tell it
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()

    def close(self) -> None:
        """Stop the workers (idempotent)."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def setup(self, trainer_kwargs: Dict[str, Any], x_test: torch.Tensor, y_test: torch.Tensor) -> int:
        """Give every worker a federation (tensors in shared memory); returns its key."""
        with WorkerPool._key_lock:
            WorkerPool._next_key += 1
            key = WorkerPool._next_key
        try:
            for t in (trainer_kwargs["x_train"], trainer_kwargs["y_train"], x_test, y_test):
                t.share_memory_()
        except RuntimeError as e:  # e.g. a container's 64 MB /dev/shm
            mb = sum(t.numel() * t.element_size() for t in (trainer_kwargs["x_train"], x_test)) / 2**20
            raise RuntimeError(
                f"workers > 1 puts the federation's data ({mb:.0f} MB) in shared memory and that failed ({e}); "
                "give /dev/shm more room (docker run --shm-size=2g) or set workers: 1") from e
        for c in self._conns:
            c.send(("setup", key, trainer_kwargs, x_test, y_test))
        for c in self._conns:
            self._receive(c)
        self.key = key
        return key

    def submit(self, worker: int, key: int, method: str, args: tuple) -> None:
        self._conns[worker].send(("call", key, method, args))

    def result(self, worker: int) -> Any:
        return self._receive(self._conns[worker])

    @staticmethod
    def _receive(conn) -> Any:
        try:
            status, payload = conn.recv()
        except EOFError as e:
            raise RuntimeError("a fedsel worker process died (out of memory?); rebuild the env") from e
        if status == "err":
            raise RuntimeError(f"a fedsel worker process failed:\n{payload}")
        return payload


def split_clients(client_ids: Sequence[int], sizes: np.ndarray, parts: int) -> List[np.ndarray]:
    """Positions 0..K-1 of ``client_ids`` in ``parts`` groups of near-equal work.

    Clients are sorted by size and dealt out in turn (largest first), so each group holds clients
    of similar size (little masked padding in the vmapped steps) and the groups' sample totals are close.
    """
    order = np.argsort(-np.asarray(sizes)[np.asarray(client_ids, dtype=np.int64)], kind="stable")
    groups = [np.sort(order[i::parts]) for i in range(parts)]
    return [g for g in groups if g.size]


#: rows × parameters below which a pass stays in this process (2^24: ~1,700 rows of the 21,840-parameter CNN,
#: ~27,000 rows of a 610-parameter logistic regression).
MIN_SPLIT_WORK = 2**24


class ParallelTrainer:
    """:class:`BatchedTrainer`'s interface, with the work split between this process and a pool.

    :param trainer: this process's trainer (it does group 0); the workers build theirs from the same arguments.
    :param trainer_kwargs: the arguments ``trainer`` was built with.
    :param x_test: the federation's test inputs (evaluation is split by rows when these are evaluated).
    :param y_test: the test labels.
    :param pool: the worker processes.
    """

    def __init__(self, trainer: BatchedTrainer, trainer_kwargs: Dict[str, Any], x_test: torch.Tensor,
                 y_test: torch.Tensor, pool: WorkerPool) -> None:
        self.local = trainer
        self.pool = pool
        self.parts = pool.size + 1
        self.x_test, self.y_test = x_test, y_test
        self.key = pool.setup(trainer_kwargs, x_test, y_test)
        self.num_params = int(trainer.layout.size)

    def _worth_splitting(self, rows: int, count: int) -> bool:
        """Whether ``rows`` sample passes are worth sending to workers (≥ 2 items, ≥ MIN_SPLIT_WORK).

        The work is estimated as rows × parameters (a dense model's multiply-adds per forward pass; a CNN
        does more per parameter). Under the threshold (logistic regression and small MLPs on few rows) a
        worker's messages cost more than its share of the work saves (docs/PERFORMANCE.md).
        """
        return count >= 2 and rows * self.num_params >= MIN_SPLIT_WORK

    def __getattr__(self, name: str) -> Any:  # layout, lr, sizes, batch_plan, ... from the local trainer
        return getattr(self.local, name)

    def _run(self, method: str, group_args: List[tuple]) -> List[Any]:
        """Group 0 here, groups 1.. in workers 0..; results in group order."""
        if self.pool.closed:
            raise RuntimeError("the env's worker processes were closed; build a new env")
        if self.pool.key != self.key:  # another federation (a later reset) has the pool now
            raise RuntimeError("the worker pool now serves another federation; reset() the env")
        for w, args in enumerate(group_args[1:]):
            self.pool.submit(w, self.key, method, args)
        threads = torch.get_num_threads()
        try:
            # this process's share runs on one thread, like each worker's: with more, P processes would
            # oversubscribe P cores (1.76 s against 1.08 s for a CNN round with 2 threads here; PERFORMANCE.md)
            if threads != 1:
                torch.set_num_threads(1)
            if method == "test_losses":
                flat, lo, hi = group_args[0]
                first = self.local.per_sample_losses(flat, self.x_test[lo:hi], self.y_test[lo:hi])
            else:
                first = getattr(self.local, method)(*group_args[0])
        except BaseException:
            # collect the workers' answers (a worker's own error too: this one is raised instead) so that
            # every pipe is empty again for the next call
            for w in range(len(group_args) - 1):
                with contextlib.suppress(RuntimeError):
                    self.pool.result(w)
            raise
        finally:
            if threads != 1:
                torch.set_num_threads(threads)
        rest = [self.pool.result(w) for w in range(len(group_args) - 1)]
        return [first] + rest

    def _by_client(self, method: str, client_ids: Sequence[int], make_args) -> Tuple[List[np.ndarray], List[Any]]:
        ids = np.asarray(list(client_ids), dtype=np.int64)
        groups = split_clients(ids, self.local.sizes, self.parts)
        return groups, self._run(method, [make_args(g) for g in groups])

    @staticmethod
    def _gather_rows(groups: List[np.ndarray], outs: List[Any], k: int) -> torch.Tensor:
        outs = [torch.as_tensor(o) for o in outs]
        full = outs[0].new_empty((k, outs[0].shape[1]))
        for g, o in zip(groups, outs):
            full[torch.from_numpy(g)] = o
        return full

    def train(self, global_flat: torch.Tensor, client_ids: Sequence[int],
              generators: Sequence[np.random.Generator], prox_mu: float = 0.0,
              epochs: Optional[int] = None) -> torch.Tensor:
        ids = np.asarray(list(client_ids), dtype=np.int64)
        rows = int(self.local.sizes[ids].sum()) * (self.local.epochs if epochs is None else epochs)
        if not self._worth_splitting(rows, ids.size):
            return self.local.train(global_flat, ids, generators, prox_mu, epochs)
        groups, outs = self._by_client("train", ids, lambda g: (global_flat, ids[g].tolist(),
                                                                [generators[i] for i in g], prox_mu, epochs))
        return self._gather_rows(groups, outs, ids.size)

    def full_gradients(self, global_flat: torch.Tensor, client_ids: Sequence[int]) -> torch.Tensor:
        ids = np.asarray(list(client_ids), dtype=np.int64)
        if not self._worth_splitting(int(self.local.sizes[ids].sum()), ids.size):
            return self.local.full_gradients(global_flat, ids)
        groups, outs = self._by_client("full_gradients", ids, lambda g: (global_flat, ids[g].tolist()))
        return self._gather_rows(groups, outs, ids.size)

    def client_losses(self, flat: torch.Tensor, client_ids: Sequence[int]) -> Tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(list(client_ids), dtype=np.int64)
        if not self._worth_splitting(int(self.local.sizes[ids].sum()), ids.size):
            return self.local.client_losses(flat, ids)
        groups, outs = self._by_client("client_losses", ids, lambda g: (flat, ids[g].tolist()))
        mean, rms = np.empty(ids.size), np.empty(ids.size)
        for g, (m, r) in zip(groups, outs):
            mean[g], rms[g] = m, r
        return mean, rms

    def per_sample_losses(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                          rows_per_pass: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Split by rows when ``x`` is the federation's test set; otherwise computed here."""
        if x is not self.x_test or not self._worth_splitting(int(x.shape[0]), int(x.shape[0]) // self.parts):
            return self.local.per_sample_losses(flat, x, y, rows_per_pass)
        bounds = np.linspace(0, x.shape[0], self.parts + 1).astype(int)
        outs = self._run("test_losses", [(flat, int(bounds[i]), int(bounds[i + 1])) for i in range(self.parts)])
        losses = torch.cat([torch.as_tensor(o[0]) for o in outs])
        correct = torch.cat([torch.as_tensor(o[1]) for o in outs])
        return losses, correct
