"""A greedy farthest-point *cover* of the profiling round's model weights (``kcenter_cover``).

Not FAVOR's K-Center (that is ``kcenter``, ``agents/kcenter.py``): this variant walks a
farthest-point order through all clients, K per round, without reuse until every client has
been picked once. On 10 well-separated clusters of 10 clients with K = 10 its rounds 2–10
cover 5–10 of the 10 clusters (6.0–7.4 on average over 5 seeds), where FAVOR's K-Center
covers all 10 every round (tests/test_favor_faithful.py); it is kept because it guarantees that every client
trains within ⌈N/K⌉ rounds, which the clustered K-Center does not.

The ideas it borrows are FAVOR's:

H. Wang, Z. Kaplan, D. Niu, B. Li, "Optimizing Federated Learning on Non-IID Data
with Reinforcement Learning", IEEE INFOCOM 2020 (seed 002), §III-B: every device
trains one epoch from the same initial weights; the local models' weights reveal
the devices' data distributions, so grouping devices by k-center over those
weights and training on one device per group each round covers the data better
than uniform sampling. The k-center heuristic is Gonzalez's farthest-point greedy
(T. F. Gonzalez, "Clustering to Minimize the Maximum Intercluster Distance",
Theoretical Computer Science 38, 1985). docs/SPEC.md §4.

The points are the clients' PCA rows of the first observation (rows 1..N of
``weights``: the profiling round's local models), fixed for the episode. A
*cover* is a pass over all clients without reuse. Each round the agent picks K
centres greedily among the available clients not yet used in the current cover:

    c = argmax_{k ∈ candidates} min_{j ∈ C} ‖w_k − w_j‖₂,

where C holds the clients already used in this cover plus the centres picked so
far this round (so each round extends the cover where it is thinnest); the first
centre of a cover is the client farthest from the mean of all clients. When every
client has been used, a new cover starts. If too few unused clients are
available, the round is completed with already-used available clients (the
farthest-point rule again) rather than sending fewer than K; no client is reused
while an unused one is available.
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from fedsel_env.spec import SelectionSpec

from .base import SelectionAgent
from .kcenter import farthest_point
from .registry import AGENTS


@AGENTS.register("kcenter_cover")
class KCenterCoverAgent(SelectionAgent):
    """Greedy k-center over the profiling round's PCA weights; no reuse until every client is covered.

    :param spec: the problem's public description.
    :param seed: unused (the agent is deterministic); accepted for a uniform interface.
    """

    name = "kcenter_cover"
    supported_modes = ("one", "topk", "subset")

    def __init__(self, spec: SelectionSpec, seed: Optional[int] = None) -> None:
        super().__init__(spec, seed)
        self.points: Optional[np.ndarray] = None
        self.used = np.zeros(spec.num_clients, dtype=bool)  # used in the current cover
        self.covers_started = 0

    def reset(self, obs: Dict[str, np.ndarray]) -> None:
        """Fix the points: the client rows of the first observation's ``weights``."""
        self.points = np.asarray(obs["weights"], dtype=np.float64)[1:].copy()
        self.used = np.zeros(self.spec.num_clients, dtype=bool)
        self.covers_started = 1

    def select(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        if self.points is None:
            self.reset(obs)
        available = self.spec.feature(obs, "available") > 0.5
        k = min(self.k, int(available.sum()))
        chosen = farthest_point(self.points, np.flatnonzero(available & ~self.used),
                                np.flatnonzero(self.used), k)
        self.used[chosen] = True
        if self.used.all() and chosen.size < k:
            # the cover is complete: a new one starts with the rest of this round's picks
            self.used[:] = False
            self.covers_started += 1
            more = farthest_point(self.points, np.setdiff1d(np.flatnonzero(available), chosen), chosen,
                                  k - chosen.size)
            self.used[more] = True
            chosen = np.concatenate([chosen, more])
        elif chosen.size < k:
            # unused clients remain but are unavailable: fill with used ones, the cover stays open
            more = farthest_point(self.points, np.setdiff1d(np.flatnonzero(available), chosen), chosen,
                                  k - chosen.size)
            chosen = np.concatenate([chosen, more])
        if self.used.all():
            self.used[:] = False
            self.covers_started += 1
        return chosen
