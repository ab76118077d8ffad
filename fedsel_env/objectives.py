"""The vector reward (``reward: vector``): one entry per objective, in MO-Gymnasium's convention.

MO-Gymnasium (Alegre et al., "MO-Gym: A Library of Multi-Objective Reinforcement Learning
Environments", BNAIC 2022; ``mo_gymnasium/envs``) has an env declare ``env.unwrapped.reward_space``, a
``Box`` of the objectives' bounds, and ``step`` return a numpy vector in it; MORL libraries
(``morl-baselines``) and MO-Gymnasium's wrappers (``LinearReward``, ``MORecordEpisodeStatistics``) read
both. :class:`VectorReward`, registered as the ``vector`` reward, gives the env its ``reward_space``.

Each objective is larger when better and is a per-round *change*, so over an episode it telescopes to
(final − initial) whatever the episode's length, and no objective pays an agent for making the
episode last (an episode ends at the target accuracy Ω):

- ``accuracy_gain``: acc_t − acc_{t−1}, the global test accuracy's change; in [−1, 1].
- ``round_time``: −τ_t, minus the round's exchange time in seconds (its slowest counted
  responder); in [−∞, 0]: the system model's heavy tails (Pareto stragglers) have no finite bound.
  Its sum is minus the job's simulated time.
- ``participation_fairness``: J(c_t) − J(c_{t−1}), the change of Jain's index of the participation
  counts c (rounds each client's update counted in), J(c) = (Σc)² / (N Σc²), J(0) = 1; J lies in
  [1/N, 1], so the change in [1/N − 1, 1 − 1/N]. Its sum is J_T − 1.
- ``accuracy_spread``: −(σ_t − σ_{t−1}), minus the change of the standard deviation of the
  per-client test accuracies (each client's own test split); σ of values in [0, 1] is at most 1/2,
  so the change lies in [−1/2, 1/2]. With ``eval_every`` > 1 it moves on evaluated rounds only.

The default objectives are (``accuracy_gain``, ``round_time``, ``participation_fairness``):
docs/ENVIRONMENT.md says why participation, not the accuracy spread, is the default fairness term.
Add an objective with ``@OBJECTIVES.register("name")`` on a class with ``bounds(num_clients)`` and
``__call__(outcome)``.
"""
from __future__ import annotations

import math
from typing import Sequence, Tuple

import numpy as np
from gymnasium import spaces

from .metrics import jain_index
from .registry import Registry
from .rewards import REWARDS, RoundOutcome

OBJECTIVES: Registry = Registry("objective")

#: ``reward: vector``'s objectives when ``reward_params`` names none.
DEFAULT_OBJECTIVES = ("accuracy_gain", "round_time", "participation_fairness")


@OBJECTIVES.register("accuracy_gain")
class AccuracyGain:
    """acc_t − acc_{t−1}."""

    def bounds(self, num_clients: int) -> Tuple[float, float]:
        return -1.0, 1.0

    def __call__(self, o: RoundOutcome) -> float:
        return float(o.accuracy - o.prev_accuracy)


@OBJECTIVES.register("round_time")
class NegativeRoundTime:
    """−τ_t (seconds)."""

    def bounds(self, num_clients: int) -> Tuple[float, float]:
        return -math.inf, 0.0

    def __call__(self, o: RoundOutcome) -> float:
        return -float(o.round_time)


@OBJECTIVES.register("participation_fairness")
class ParticipationFairness:
    """J(c_t) − J(c_{t−1}), Jain's index of the participation counts."""

    def bounds(self, num_clients: int) -> Tuple[float, float]:
        return 1.0 / num_clients - 1.0, 1.0 - 1.0 / num_clients

    def __call__(self, o: RoundOutcome) -> float:
        return jain_index(o.participation) - jain_index(o.prev_participation)


@OBJECTIVES.register("accuracy_spread")
class AccuracySpread:
    """−(σ_t − σ_{t−1}) of the per-client test accuracies."""

    def bounds(self, num_clients: int) -> Tuple[float, float]:
        return -0.5, 0.5

    def __call__(self, o: RoundOutcome) -> float:
        return -(float(np.std(o.client_accuracies)) - float(np.std(o.prev_client_accuracies)))


@REWARDS.register("vector")
class VectorReward:
    """One float32 entry per objective (``reward_params: {objectives: [...]}``), with its ``reward_space``.

    :param objectives: names registered in :data:`OBJECTIVES`, in the order of the vector's entries.
    """

    def __init__(self, objectives: Sequence[str] = DEFAULT_OBJECTIVES) -> None:
        if isinstance(objectives, str) or not isinstance(objectives, Sequence) or not objectives \
                or len(set(map(str, objectives))) != len(objectives):
            raise ValueError(f"reward 'vector' parameter 'objectives' = {objectives!r}: expected a non-empty list "
                             f"of distinct objective names from {sorted(OBJECTIVES)}")
        self.names = tuple(objectives)
        self.objectives = [OBJECTIVES.lookup(name)() for name in self.names]

    def space(self, num_clients: int) -> spaces.Box:
        """The ``reward_space``: each objective's bounds for N clients."""
        low, high = zip(*(obj.bounds(num_clients) for obj in self.objectives))
        return spaces.Box(np.array(low, dtype=np.float32), np.array(high, dtype=np.float32), dtype=np.float32)

    def __call__(self, o: RoundOutcome) -> np.ndarray:
        return np.array([obj(o) for obj in self.objectives], dtype=np.float32)


__all__ = ["DEFAULT_OBJECTIVES", "OBJECTIVES", "VectorReward"]
