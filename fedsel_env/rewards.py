"""Rewards by name (docs/SPEC.md §2). A reward maps a :class:`RoundOutcome` to a float.

- ``favor`` (FAVOR, seed 002): r_t = Ξ^(acc_t − Ω) − 1, Ξ = 64, in (−1, 0] while acc_t ≤ Ω.
- ``accuracy_gain``: scale · (acc_t − acc_{t−1}).
- ``time_penalised``: FAVOR's reward minus ``time_weight`` × the round's exchange time (seconds).
- ``vector``: a numpy vector of objectives with its ``reward_space`` (``fedsel_env/objectives.py``).
- ``objective``: a FedSelect-Bench objective as the reward (issue #41; docs/BENCHMARK.md): the per-round values
  add up over an episode to exactly minus the objective (lower-is-better) or the objective (higher-is-better),
  with the bench's conventions for a missed target. The default of every ``fedsel/Bench-*`` id.

Add one with ``@REWARDS.register("name")`` on a class with ``__init__(**params)`` and ``__call__(outcome)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .registry import Registry, has_methods
from .sim.limits import real_in, reals_text, short

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
    # the simulated clock (seconds since the first round) after and before the round
    clock: float = 0.0
    prev_clock: float = 0.0
    final: bool = False    # this step ends the episode (terminated or truncated)


#: The most ``time_weight`` may be: a round lasts at most ~1e18 s under the system's bounds
#: (``fedsel_env.config``), so the penalty stays finite.
MAX_TIME_WEIGHT = 1e6


def _number(name: str, field: str, v: object, lo: float, lo_open: bool = False, hi: float = math.inf) -> float:
    """A finite number in (lo | [lo, hi]: a reward that could only be non-finite is refused here."""
    x = real_in(v, lo, hi, lo_open) if isinstance(v, (int, float)) else None  # NaN, ±inf, 10**400, bools: None
    if x is None:
        raise ValueError(f"reward {name!r} parameter {field!r} = {short(v)}: expected "
                         f"{reals_text(lo, hi, lo_open, given=v)}")
    return x


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


#: grid of the dense part of an accuracy objective's reward: differences of multiples of 2^-24 in [0, 1] and
#: their running sums are exact in float64, so only the last step's remainder is rounded (and then corrected)
_GRID = float(2 ** 24)


def _on_grid(v: float) -> float:
    return round(float(v) * _GRID) / _GRID


def _exact_step(before: float, after: float) -> float:
    """r with ``before + r == after`` in float64 (the running sum lands exactly on ``after``): the rounded
    difference, moved by an ulp or two where the addition would round away from ``after``. Where no such float
    exists (``after`` below half of ``before`` at a coarser grid) the nearest one is returned."""
    r = after - before
    for _ in range(4):
        got = before + r
        if got == after:
            break
        r = math.nextafter(r, math.inf if got < after else -math.inf)
    return r if before + r == after else after - before


@REWARDS.register("objective")
class ObjectiveReward:
    """A FedSelect-Bench objective as the reward (``reward_params: {objective: <name>}``, issue #41).

    Summed over an episode from 0.0 in step order (as ``sum(rewards)`` and ``fedsel_eval`` do), the rewards
    equal ``fedsel_env.bench.episode_objective``'s value, negated when lower is better:

    - ``rounds_to_target``: −1 per round (a missed Ω: minus the rounds played, the round cap);
    - ``time_to_target``: minus the round's simulated seconds (the clock's step; a miss: minus the clock at the cap);
    - ``final_accuracy`` / ``acc_worst10`` (higher is better): the change of the objective's value over the round
      on a 2^-24 grid (dense, so every round is credited), the first round from 0, and at the episode's last step
      the remainder that lands the sum exactly on the final value.

    Bit for bit where the sum can land on the value in float64 (always for rounds and time; for the accuracy
    objectives unless the last round more than halves the value, when it is within one ulp).
    """

    def __init__(self, objective: str = "rounds_to_target") -> None:
        from .bench import OBJECTIVES as BENCH_OBJECTIVES

        if not isinstance(objective, str) or objective not in BENCH_OBJECTIVES:
            raise ValueError(f"reward 'objective' parameter 'objective' = {objective!r}: expected one of "
                             f"{sorted(BENCH_OBJECTIVES)} (reward_params: {{objective: time_to_target}})")
        self.objective = objective
        self.lower_is_better = BENCH_OBJECTIVES[objective]

    def value(self, o: RoundOutcome, before: bool = False) -> float:
        """The higher-is-better objective's value after (``before``: before) the round."""
        if self.objective == "final_accuracy":
            return float(o.prev_accuracy if before else o.accuracy)
        from .metrics import tail_means

        return tail_means(o.prev_client_accuracies if before else o.client_accuracies)[0]

    def __call__(self, o: RoundOutcome) -> float:
        if self.objective == "rounds_to_target":
            return -1.0
        if self.objective == "time_to_target":
            return _exact_step(-float(o.prev_clock), -float(o.clock))
        prev = 0.0 if o.round <= 1 else _on_grid(self.value(o, before=True))
        return _exact_step(prev, self.value(o)) if o.final else _on_grid(self.value(o)) - prev


def make_reward(name: str, params: dict | None = None):
    cls = REWARDS.lookup(name)
    try:
        return cls(**(params or {}))
    except TypeError as e:
        raise ValueError(f"bad reward_params {sorted(params or {})} for reward {name!r}: {e}") from None
