"""How the env uses torch's CPU threads (part of issue #16, docs/ENVIRONMENT.md "Threads").

* :func:`on_env_threads`: ``reset``, ``step`` and ``query_losses`` compute on the config's
  ``torch_threads`` threads (default 1) and give the process its own setting back afterwards, so a
  learner in the same process keeps its threads. One thread is the default because the env's models are
  small and its work comes in short bursts: measured on this 2-core machine with the other core busy,
  the `tiny` preset ran 28–35 steps/s on torch's default 2 threads and 145–182 on one, the default
  preset 8.6 against 44.8 (``bench/env_threads.py``). ``torch_threads: null`` leaves torch's setting alone.
* The same count for the BLAS pools numpy and scipy use (OpenBLAS, through ``threadpoolctl``): FAVOR's PCA
  (scikit-learn's SVD of the profiling round's weights) on OpenBLAS's 2 threads took 0.4-1.5 s instead of
  2-40 ms on one whenever another process kept a core busy (issue #27; the same SVD, bit for bit).
* A fork hook: a process forked after ``import fedsel_env`` runs torch on one thread. GNU OpenMP,
  which torch's CPU kernels use, is not fork-safe: once its thread pool has run in a process, a child
  forked from it hangs at its first parallel region — what Gymnasium's ``AsyncVectorEnv`` does by
  default on Linux (``fork``), so ``gymnasium.make_vec(id, n, vectorization_mode="async")`` hung as
  soon as torch had computed anything in the parent. A child that runs torch on one thread never
  enters the pool. A child that wants more calls ``torch.set_num_threads`` itself.
"""
from __future__ import annotations

import functools
import os
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Iterator, Optional

import torch


_BLAS: list = []


def _blas_pools() -> Any:
    """threadpoolctl's controller of the BLAS libraries loaded now (made once; None without threadpoolctl)."""
    if not _BLAS:
        try:
            from threadpoolctl import ThreadpoolController
            _BLAS.append(ThreadpoolController())
        except Exception:  # noqa: BLE001  (no threadpoolctl, or a library it cannot read: leave BLAS alone)
            _BLAS.append(None)
    return _BLAS[0]


@contextmanager
def torch_threads(n: Optional[int]) -> Iterator[None]:
    """Run the block on ``n`` torch threads and ``n`` BLAS threads, then restore the caller's settings
    (``None``: leave them alone)."""
    if n is None:
        yield
        return
    pools = _blas_pools()
    with (pools.limit(limits=n, user_api="blas") if pools is not None else nullcontext()):
        before = torch.get_num_threads()
        if n == before:
            yield
            return
        torch.set_num_threads(n)
        try:
            yield
        finally:
            torch.set_num_threads(before)


def on_env_threads(method: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator for an env method: run it on the env config's ``torch_threads``."""
    @functools.wraps(method)
    def wrapper(self, *args: Any, **kwargs: Any) -> Any:
        with torch_threads(self.config["torch_threads"]):
            return method(self, *args, **kwargs)
    return wrapper


def _one_torch_thread() -> None:
    torch.set_num_threads(1)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_one_torch_thread)
