"""K-Center selection as FAVOR runs it (``kcenter``), FAVOR's baseline.

H. Wang, Z. Kaplan, D. Niu, B. Li, "Optimizing Federated Learning on Non-IID Data
with Reinforcement Learning", IEEE INFOCOM 2020 (seed 002), §II and §III-B: every
device trains one epoch from the same initial weights; the local models' weights
reveal the devices' data distributions. The K-Center baseline clusters the N
devices' weight vectors into K groups by k-center and, each round, trains on one
device drawn from each group. docs/SPEC.md §4.

The k-center clustering is Gonzalez's farthest-point greedy (T. F. Gonzalez,
"Clustering to Minimize the Maximum Intercluster Distance", Theoretical Computer
Science 38, 1985; a 2-approximation of the optimal maximum radius): the first centre
is the device farthest from the mean, each next centre the device farthest from its
nearest centre; every device joins its nearest centre's group.

The points are the clients' PCA rows of the first observation (rows 1..N of
``weights``: the profiling round's local models; the PCA keeps every distance when
d ≥ N + 1 components, the default up to N = 99), and the groups are fixed for the
episode. Each round one available device is drawn uniformly from each group; a
group with no available device is filled by drawing from the available devices of
the other groups. In the ``one`` mode the groups take turns, one device a step.
(``kcenter_cover``, ``agents/kcenter_cover.py``, is a different method: a greedy
farthest-point pass through all clients.)
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from fedsel_env.spec import SelectionSpec

from .base import SelectionAgent
from .registry import AGENTS


def farthest_point(points: np.ndarray, candidates: np.ndarray, centres: np.ndarray, count: int) -> np.ndarray:
    """Gonzalez's greedy: ``count`` candidates, each the farthest from its nearest centre so far.

    :param points: every point, shape (N, d).
    :param candidates: indices that may be picked.
    :param centres: indices already chosen as centres (may be empty: the first pick is the
        candidate farthest from the mean of all points).
    :param count: how many to pick (capped at the number of candidates).
    :return: the picked indices, in the order picked; ties go to the lower index.
    """
    candidates = np.asarray(candidates, dtype=np.int64)
    centres = np.asarray(centres, dtype=np.int64)
    count = min(int(count), candidates.size)
    if count <= 0:
        return np.empty(0, dtype=np.int64)
    cand_points = points[candidates]
    if centres.size:
        diff = cand_points[:, None, :] - points[centres][None, :, :]
        nearest = np.sqrt((diff ** 2).sum(-1)).min(axis=1)
    else:
        nearest = np.linalg.norm(cand_points - points.mean(axis=0), axis=1)
    picked = []
    left = np.ones(candidates.size, dtype=bool)
    for _ in range(count):
        i = int(np.argmax(np.where(left, nearest, -np.inf)))
        picked.append(candidates[i])
        left[i] = False
        nearest = np.minimum(nearest, np.linalg.norm(cand_points - cand_points[i], axis=1))
    return np.asarray(picked, dtype=np.int64)


def k_center_groups(points: np.ndarray, k: int) -> np.ndarray:
    """Gonzalez's k-center clustering: the group (0..k−1) of every point, shape (N,)."""
    centres = farthest_point(points, np.arange(len(points)), np.empty(0, dtype=np.int64), k)
    dist = np.linalg.norm(points[:, None, :] - points[centres][None, :, :], axis=2)
    return np.argmin(dist, axis=1)


@AGENTS.register("kcenter")
class KCenterAgent(SelectionAgent):
    """FAVOR's K-Center: K groups of the profiling round's weights, one device drawn from each per round.

    :param spec: the problem's public description.
    :param seed: seed of the draws within the groups.
    """

    name = "kcenter"
    supported_modes = ("one", "topk", "subset")

    def __init__(self, spec: SelectionSpec, seed: Optional[int] = None) -> None:
        super().__init__(spec, seed)
        self.groups: Optional[np.ndarray] = None
        self.turn = 0  # the `one` mode's group

    def reset(self, obs: Dict[str, np.ndarray]) -> None:
        """Cluster the client rows of the first observation's ``weights`` into K groups."""
        points = np.asarray(obs["weights"], dtype=np.float64)[1:]
        self.groups = k_center_groups(points, self.spec.clients_per_round)
        self.turn = 0

    def select(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        if self.groups is None:
            self.reset(obs)
        available = self.spec.feature(obs, "available") > 0.5
        k = self.spec.clients_per_round
        order = [self.turn % k] if self.k == 1 else range(k)
        self.turn += 1
        chosen = []
        for g in order:
            members = np.flatnonzero(available & (self.groups == g))
            if members.size:
                chosen.append(int(self.rng.choice(members)))
        short = self.k - len(chosen)
        if short > 0:  # groups with nobody available: fill from the other groups' available devices
            rest = np.setdiff1d(np.flatnonzero(available), chosen)
            chosen.extend(int(c) for c in self.rng.choice(rest, size=min(short, rest.size), replace=False))
        return np.asarray(chosen, dtype=np.int64)
