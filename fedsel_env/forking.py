"""A process forked after ``import fedsel_env`` runs torch on one thread (part of issue #16).

GNU OpenMP, which torch's CPU kernels use, is not fork-safe: once its thread pool has run in a
process, a child forked from it hangs at its first parallel region. That is what Gymnasium's
``AsyncVectorEnv`` does by default on Linux (``fork``), so ``gymnasium.make_vec(id, n,
vectorization_mode="async")`` used to hang as soon as torch had computed anything in the parent (a
notebook that trained or evaluated a model first). A child that runs torch on one thread never enters
the pool, and one thread per process is also the fast setting for the many small envs of a vector env
(docs/PERFORMANCE.md: 2 processes × 1 thread beat 1 × 2 on this 2-core machine). A child that wants
more calls ``torch.set_num_threads`` itself.
"""
from __future__ import annotations

import os

import torch


def _one_torch_thread() -> None:
    torch.set_num_threads(1)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_one_torch_thread)
