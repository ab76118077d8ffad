"""Action modes (docs/SPEC.md §2): how an action names the clients of a round.

- ``one``: ``Discrete(N)``, one client per round (FAVOR's training regime).
- ``topk``: ``Box(N)`` of scores; the env takes the K highest-scoring *available* clients.
- ``subset``: ``MultiBinary(N)`` (:class:`SubsetSpace`); exactly the marked clients, between 1 and K of them.
  Gymnasium's vector envs batch it as :class:`SubsetBatch` (registered with ``batch_space``), whose
  ``sample()`` draws a valid subset for every env. Learners that sample bits independently (PPO, A2C,
  MaskablePPO) act through :class:`fedsel_env.wrappers.SubsetRepair` instead (docs/ENVIRONMENT.md says why).

Each mode is a small class with ``space()`` and ``decode(action, available) -> indices``;
``decode`` raises ``ValueError`` naming the problem and never has side effects, so
a rejected action changes nothing in the env.
"""
from __future__ import annotations

from copy import deepcopy
from typing import Any, Mapping, Sequence

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_differing_spaces, batch_space

from .registry import Registry

ACTION_MODES: Registry = Registry("action mode", plugins=False)


def server_step(cfg: Mapping[str, Any]) -> float:
    """The fraction of a communication round one step stands for: the config's ``one_mode_step`` in the ``one``
    mode (``"1/K"``: 1/K), 1 in the others. The global model moves this fraction of the way to the aggregate,
    and the round-based parts of the state and the round budget count the step as this fraction of a round."""
    if cfg["action_mode"] != "one":
        return 1.0
    step = cfg["one_mode_step"]
    return 1.0 / cfg["clients_per_round"] if step == "1/K" else float(step)


class ActionMode:
    def __init__(self, num_clients: int, clients_per_round: int) -> None:
        self.n, self.k = num_clients, clients_per_round

    def space(self) -> spaces.Space:
        raise NotImplementedError  # abstract

    def decode(self, action: Any, available: np.ndarray) -> np.ndarray:
        raise NotImplementedError  # abstract

    def _array(self, action: Any, what: str) -> np.ndarray:
        try:
            a = np.asarray(action)
        except Exception as e:  # e.g. ragged lists
            raise ValueError(f"invalid {what} action {action!r}: {e}") from None
        if a.dtype == object:
            raise ValueError(f"invalid {what} action: expected numbers, got {a.dtype}")
        return a


class SubsetSpace(spaces.MultiBinary):
    """``MultiBinary(N)`` restricted to vectors with between 1 and K ones.

    ``sample()`` draws only valid subsets (so Gymnasium's and SB3's checkers, and
    random exploration, produce actions the env accepts); ``contains`` checks the count.
    """

    def __init__(self, n: int, k: int, seed: Any = None) -> None:
        super().__init__(n, seed=seed)
        self.k = int(k)

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        n = int(np.prod(self.shape))
        allowed = np.arange(n) if mask is None else np.flatnonzero(np.asarray(mask).reshape(-1))
        return _draw_subset(self.np_random, n, self.k, allowed, self.dtype).reshape(self.shape)

    def contains(self, x: Any) -> bool:
        return bool(super().contains(x) and 1 <= int(np.asarray(x).sum()) <= self.k)

    def __repr__(self) -> str:
        return f"SubsetSpace({self.n}, k={self.k})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, SubsetSpace) and self.n == other.n and self.k == other.k


def _draw_subset(rng: np.random.Generator, n: int, k: int, allowed: np.ndarray, dtype: Any) -> np.ndarray:
    """A 0/1 vector marking between 1 and K of the ``allowed`` indices (none when nothing is allowed)."""
    out = np.zeros(n, dtype=dtype)
    if allowed.size:
        count = int(rng.integers(1, min(k, allowed.size) + 1))
        out[rng.choice(allowed, size=count, replace=False)] = 1
    return out


class SubsetBatch(spaces.MultiBinary):
    """The ``subset`` action space of a vector env: ``MultiBinary((num_envs, N))``, each row a valid subset.

    Gymnasium batches a plain ``MultiBinary`` into a ``Box`` whose ``sample()`` marks any number of
    clients; this keeps :class:`SubsetSpace`'s rule row by row (``sample`` and ``contains``).
    """

    def __init__(self, num_envs: int, n: int, k: int, seed: Any = None) -> None:
        super().__init__([int(num_envs), int(n)], seed=seed)
        self.k = int(k)

    def sample(self, mask: Any = None, probability: Any = None) -> np.ndarray:
        """One valid subset per env; ``mask`` (optional, shape (num_envs, N)) restricts each row's clients."""
        rows, n = self.shape
        masks = [None] * rows if mask is None else np.asarray(mask).reshape(rows, n)
        return np.stack([_draw_subset(self.np_random, n, self.k,
                                      np.arange(n) if m is None else np.flatnonzero(m), self.dtype)
                         for m in masks])

    def contains(self, x: Any) -> bool:
        if not super().contains(x):
            return False
        counts = np.asarray(x).reshape(self.shape).sum(axis=1)
        return bool(np.all((counts >= 1) & (counts <= self.k)))

    def __repr__(self) -> str:
        return f"SubsetBatch({self.shape[0]}, {self.shape[1]}, k={self.k})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, SubsetBatch) and self.shape == other.shape and self.k == other.k


@batch_space.register(SubsetSpace)
def _batch_subset_space(space: SubsetSpace, n: int = 1) -> SubsetBatch:
    return SubsetBatch(n, space.n, space.k, seed=deepcopy(space.np_random))


@batch_differing_spaces.register(SubsetSpace)
def _batch_differing_subset_spaces(subsets: Sequence[SubsetSpace]) -> SubsetBatch:
    if any(s.n != subsets[0].n or s.k != subsets[0].k for s in subsets):
        raise ValueError(f"cannot batch differing subset spaces {list(subsets)}: every env needs the same N and K")
    return SubsetBatch(len(subsets), subsets[0].n, subsets[0].k, seed=deepcopy(subsets[0].np_random))


@ACTION_MODES.register("one")
class OneClient(ActionMode):
    def space(self) -> spaces.Space:
        return spaces.Discrete(self.n)

    def decode(self, action: Any, available: np.ndarray) -> np.ndarray:
        a = self._array(action, "'one'")
        if a.size != 1 or a.ndim > 1 or not (np.issubdtype(a.dtype, np.integer) or
                               (np.issubdtype(a.dtype, np.floating) and float(a.reshape(-1)[0]).is_integer())):
            raise ValueError(f"action mode 'one' expects one integer client index in [0, {self.n}), got {action!r}")
        i = int(a.reshape(-1)[0])
        if not 0 <= i < self.n:
            raise ValueError(f"client index {i} out of range [0, {self.n})")
        return np.array([i], dtype=np.int64)


@ACTION_MODES.register("topk")
class TopK(ActionMode):
    def space(self) -> spaces.Space:
        # Scores only rank clients: any finite value is accepted; [-1, 1] is the range policies should emit.
        return spaces.Box(low=-1.0, high=1.0, shape=(self.n,), dtype=np.float32)

    def decode(self, action: Any, available: np.ndarray) -> np.ndarray:
        a = self._array(action, "'topk'")
        if a.shape != (self.n,):
            raise ValueError(f"action mode 'topk' expects {self.n} scores (shape ({self.n},)), got shape {a.shape}")
        if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
            raise ValueError(f"action mode 'topk' expects numeric scores, got dtype {a.dtype}")
        a = a.astype(np.float64)
        if not np.all(np.isfinite(a)):
            raise ValueError("action mode 'topk': scores contain NaN or infinity")
        avail = np.flatnonzero(available)
        if avail.size == 0:
            return np.zeros(0, dtype=np.int64)
        # stable: ties go to the lower index
        order = avail[np.argsort(-a[avail], kind="stable")]
        return np.sort(order[: self.k])


@ACTION_MODES.register("subset")
class Subset(ActionMode):
    def space(self) -> spaces.Space:
        return SubsetSpace(self.n, self.k)

    def decode(self, action: Any, available: np.ndarray) -> np.ndarray:
        a = self._array(action, "'subset'")
        if a.shape != (self.n,):
            raise ValueError(f"action mode 'subset' expects a 0/1 vector of shape ({self.n},), got shape {a.shape}")
        if not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.bool_)
                or np.issubdtype(a.dtype, np.floating)):
            raise ValueError(f"action mode 'subset' expects 0/1 values, got dtype {a.dtype}")
        if not np.all((a == 0) | (a == 1)):
            raise ValueError("action mode 'subset' expects only 0 and 1 values")
        chosen = np.flatnonzero(a)
        if not 1 <= chosen.size <= self.k:
            raise ValueError(f"action mode 'subset' must mark between 1 and K={self.k} clients, marked {chosen.size}")
        return chosen.astype(np.int64)
