"""Schedules a saved model may pickle by name: :class:`LinearDecay` (rl-zoo3's ``lin_<value>``).

It lives below ``agents.saved_models`` (whose restricted unpickler admits it) and ``agents.training``
(whose hyper-parameter files name it); ``agents.training.hyperparams`` re-exports it, so models saved when
it lived there still load.
"""
from __future__ import annotations


class LinearDecay:
    """rl-zoo3's ``lin_<value>``: the value decays linearly to 0 over training. A class, not a lambda, so a
    saved model pickles it by name and loads through ``agents.saved_models``' restricted unpickler."""

    def __init__(self, initial: float):
        self.initial = float(initial)

    def __call__(self, progress_remaining: float) -> float:
        return progress_remaining * self.initial

    def __repr__(self) -> str:
        return f"LinearDecay({self.initial})"
