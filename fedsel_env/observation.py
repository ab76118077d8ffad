"""The observation's spaces (SPEC §2): one definition, shared by the env and fedsel_flower.

``weights`` (N+1, d) PCA coordinates; ``clients`` (N, F) with the columns of
``fedsel_env.spec.CLIENT_FEATURES``, each with a finite upper bound; ``progress`` (2,).
The flat variant concatenates the chosen parts in order.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch
from gymnasium import spaces
from sklearn.decomposition import PCA

from .spec import CLIENT_FEATURES, FEATURE_INDEX

#: Reported losses are clipped to this bound in the observation.
LOSS_CAP = 1e4
#: PCA coordinates are clipped to ±this bound.
WEIGHT_CAP = 1e6


def client_feature_high(system: Mapping[str, Any], model_size: int) -> np.ndarray:
    """The upper bound of each ``clients`` column (all lower bounds are 0)."""
    high = np.ones(len(CLIENT_FEATURES), dtype=np.float32)
    high[FEATURE_INDEX["loss"]] = LOSS_CAP
    high[FEATURE_INDEX["loss_rms"]] = LOSS_CAP
    high[FEATURE_INDEX["ctx_cpu"]] = 1.0 / system["cpu_share"][0]
    high[FEATURE_INDEX["ctx_comm"]] = 4.0 * model_size / system["bandwidth"][0]
    high[FEATURE_INDEX["last_exchange_time"]] = 1e6
    return high


def dict_observation_space(cfg: Mapping[str, Any], num_clients: int, pca_components: int,
                           model_size: int) -> spaces.Dict:
    """The Dict observation space of a config.

    :param cfg: the env config (its ``system`` field sets the context bounds).
    :param num_clients: N.
    :param pca_components: d.
    :param model_size: the model's parameter count P.
    """
    n, d = num_clients, pca_components
    high = client_feature_high(cfg["system"], model_size)
    return spaces.Dict({
        "weights": spaces.Box(-WEIGHT_CAP, WEIGHT_CAP, shape=(n + 1, d), dtype=np.float32),
        "clients": spaces.Box(np.zeros((n, len(CLIENT_FEATURES)), np.float32), np.tile(high, (n, 1)),
                              dtype=np.float32),
        "progress": spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32),
    })


def flat_observation_space(dict_space: spaces.Dict, parts: Sequence[str]) -> spaces.Box:
    """One ``Box``: the ``parts`` of ``dict_space`` flattened and concatenated in order."""
    lows = [dict_space[p].low.reshape(-1) for p in parts]
    highs = [dict_space[p].high.reshape(-1) for p in parts]
    return spaces.Box(np.concatenate(lows), np.concatenate(highs), dtype=np.float32)


class WeightPCA:
    """FAVOR's fixed PCA of flat weights, fitted once on the profiling round (SPEC §2) and kept.

    :param stacked: (N+1, P) the profiling round's weights, row 0 = w_0.
    :param components: d; fewer are fitted when the data allow fewer, and the rest padded with zeros.
    :param seed: the PCA's ``random_state``.
    """

    def __init__(self, stacked: np.ndarray, components: int, seed: int) -> None:
        stacked = np.asarray(stacked, dtype=np.float64)
        d = min(components, stacked.shape[0], stacked.shape[1])
        with np.errstate(divide="ignore", invalid="ignore"):  # all rows equal: explained-variance ratio 0/0
            pca = PCA(n_components=d, random_state=seed).fit(stacked)
        self.mean = torch.from_numpy(pca.mean_)
        comps = torch.from_numpy(pca.components_)
        if d < components:
            comps = torch.cat([comps, torch.zeros(components - d, comps.shape[1], dtype=torch.float64)])
        self.components = comps

    def project(self, flat: torch.Tensor) -> np.ndarray:
        """PCA coordinates: (P,) → (d,), (K, P) → (K, d)."""
        return ((flat.to(torch.float64) - self.mean) @ self.components.T).numpy()
