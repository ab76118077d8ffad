"""Rewards by name (docs/SPEC.md §2). A reward maps a :class:`RoundOutcome` to a float.

- ``favor`` (FAVOR, seed 002): r_t = Ξ^(acc_t − Ω) − 1, Ξ = 64, in (−1, 0] while acc_t ≤ Ω.
- ``accuracy_gain``: scale · (acc_t − acc_{t−1}).
- ``time_penalised``: FAVOR's reward minus ``time_weight`` × the round's exchange time (seconds).
- ``vector``: a numpy vector of objectives with its ``reward_space`` (``fedsel_env/objectives.py``).

Add one with ``@REWARDS.register("name")`` on a class with ``__init__(**params)`` and ``__call__(outcome)``.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .registry import Registry, has_methods

REWARDS: Registry = Registry("reward", check=has_methods("__call__", fix="write a class with __init__(**params) and "
                                                          "__call__(outcome: RoundOutcome) -> float"))


@dataclass
class RoundOutcome:
    """What a reward may look at after a round."""

    accuracy: float        # acc_t, global test accuracy after the round
    prev_accuracy: float   # acc_{t-1}
    target: float          # Ω
    round_time: float      # the round's exchange time (slowest responder), seconds
    round: int             # t, 1-based count of rounds played
    # per client (N,), after and before the round: rounds each one's update counted in, test accuracies
    participation: Optional[np.ndarray] = None
    prev_participation: Optional[np.ndarray] = None
    client_accuracies: Optional[np.ndarray] = None
    prev_client_accuracies: Optional[np.ndarray] = None


#: The most ``time_weight`` may be: a round lasts at most ~1e18 s under the system's bounds
#: (``fedsel_env.config``), so the penalty stays finite.
MAX_TIME_WEIGHT = 1e6


def _number(name: str, field: str, v: object, lo: float, lo_open: bool = False, hi: float = math.inf) -> float:
    """A finite number in (lo | [lo, hi]: a reward that could only be non-finite is refused here."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (v > lo if lo_open else v >= lo)
    if not ok or not abs(v) <= sys.float_info.max or v > hi:  # NaN fails v >= lo; inf and 10**400 fail here
        bound = f"{'>' if lo_open else '>='} {lo}" + (f" and <= {hi:g}" if hi < math.inf else "")
        raise ValueError(f"reward {name!r} parameter {field!r} = {v!r}: expected a finite number {bound}")
    return float(v)


@REWARDS.register("favor")
class FavorReward:
    """Ξ^(acc − Ω) − 1 (FAVOR eq. 4)."""

    def __init__(self, xi: float = 64.0) -> None:
        self.xi = _number("favor", "xi", xi, 1.0, lo_open=True)

    def __call__(self, o: RoundOutcome) -> float:
        return float(self.xi ** (o.accuracy - o.target) - 1.0)


@REWARDS.register("accuracy_gain")
class AccuracyGainReward:
    """scale · (acc_t − acc_{t−1})."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = _number("accuracy_gain", "scale", scale, 0.0, lo_open=True)

    def __call__(self, o: RoundOutcome) -> float:
        return float(self.scale * (o.accuracy - o.prev_accuracy))


@REWARDS.register("time_penalised")
class TimePenalisedReward(FavorReward):
    """Ξ^(acc − Ω) − 1 − time_weight · round_time: FAVOR's reward charged for slow rounds."""

    def __init__(self, xi: float = 64.0, time_weight: float = 0.05) -> None:
        super().__init__(xi)
        self.time_weight = _number("time_penalised", "time_weight", time_weight, 0.0, hi=MAX_TIME_WEIGHT)

    def __call__(self, o: RoundOutcome) -> float:
        return super().__call__(o) - self.time_weight * float(o.round_time)


def make_reward(name: str, params: dict | None = None):
    cls = REWARDS.lookup(name)
    try:
        return cls(**(params or {}))
    except TypeError as e:
        raise ValueError(f"bad reward_params {sorted(params or {})} for reward {name!r}: {e}") from None
