"""A fresh federation's reset, built once and shared (issue #43; docs/PERFORMANCE.md, "The reset cache").

A reset is FAVOR's profiling round — every client trains one epoch from w_0, every model is evaluated — and the
PCA fitted on the N + 1 models (docs/SPEC.md §2). What it leaves behind is a function of the config and the six
seeds the reset draws from its ``seed`` (the federation's, the system's, the training's, w_0's, the profiling
round's and the PCA's): two resets that agree on them leave the same federation state, server view and tally, bit
for bit. :class:`ResetCache` keeps that state after the first such reset (the federation's
:meth:`~fedsel_env.sim.federation.Federation.snapshot`, the server view's arrays with its fitted PCA shared — it
is never written — and the tally's two inputs) and the next one restores it instead of replaying the round.

Where it pays: the same reset seed played again — every candidate of a ``set_es`` generation on the generation's
federations (a vector env's :meth:`~fedsel_env.vector.FedSelectVectorEnv.reset_some` resets one sub-env per key
first, then the others from the cache), every policy of a benchmark on the same reporting seeds, FAVOR's fixed
federation (``federation_seed`` with ``init: federation``) reset with the same seed. A fresh federation every
episode (RL training) never hits; storing costs a copy of the federation's round state.

Entries are dropped least recently used past ``max_bytes`` (default :data:`DEFAULT_MAX_BYTES`, read when a cache is
made: setting it to 0 turns every cache made afterwards off, as ``bench/es_generation.py --reset-cache off`` does);
``ResetCache(0)`` keeps nothing. Not used with ``workers > 1`` (the worker processes hold their own copies of the federation).
"""
from __future__ import annotations

import collections
import copy
import json
from typing import Any, Dict, Hashable, Mapping, Optional, Tuple

import numpy as np
import torch

#: the default byte budget of a cache (the sum of the kept states' arrays and tensors)
DEFAULT_MAX_BYTES = 256 * 2**20


def config_key(config: Mapping[str, Any]) -> str:
    """``config`` as one string (sorted keys, arrays as lists): equal for configs that build the same env."""
    return json.dumps(config, sort_keys=True, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v))


def state_bytes(obj: Any, _seen: Optional[set] = None) -> int:
    """The bytes of the numpy arrays and torch tensors reachable from ``obj`` (dicts, lists, tuples, objects'
    ``__dict__``), each counted once: what an entry holds."""
    seen = set() if _seen is None else _seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, torch.Tensor):
        return int(obj.element_size() * obj.nelement())
    if isinstance(obj, dict):
        return sum(state_bytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple, set)):
        return sum(state_bytes(v, seen) for v in obj)
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return state_bytes(vars(obj), seen)
    return 0


class ResetCache:
    """States after a reset, by key (the config and the reset's six seeds), least recently used dropped first.

    :param max_bytes: the budget for all entries (:func:`state_bytes`); an integer >= 0 (0 keeps nothing); None:
        :data:`DEFAULT_MAX_BYTES`.
    """

    def __init__(self, max_bytes: Optional[int] = None) -> None:
        max_bytes = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, (int, np.integer)) or max_bytes < 0:
            raise ValueError(f"ResetCache max_bytes = {max_bytes!r} is invalid: expected an integer >= 0 "
                             f"(0 keeps nothing)")
        self.max_bytes = int(max_bytes)
        self._entries: "collections.OrderedDict[Hashable, Tuple[Any, int]]" = collections.OrderedDict()
        self.bytes = 0
        self.hits = self.misses = 0
        self._config_keys: Dict[int, Tuple[Mapping[str, Any], str]] = {}  # id(config) -> (config, config_key)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def get(self, key: Hashable) -> Optional[Any]:
        """The state kept under ``key`` (the caller copies what it will change), or None."""
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry[0]

    def put(self, key: Hashable, state: Any) -> bool:
        """Keep ``state`` (already a copy nobody else writes) under ``key``; False if it alone exceeds the budget."""
        size = state_bytes(state)
        if size > self.max_bytes:
            return False
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        self._entries[key] = (state, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (_, dropped) = self._entries.popitem(last=False)
            self.bytes -= dropped
        return True

    def key(self, config: Mapping[str, Any], seeds: Any, pca: int, options: Any = None) -> Optional[tuple]:
        """The key of a reset of ``config`` with ``seeds`` (:class:`~fedsel_env.sim.federation.EpisodeSeeds`) and
        the PCA's seed ``pca``; None where nothing is cached: ``workers > 1``, reset ``options``, a 0-byte cache."""
        if config["workers"] > 1 or options or self.max_bytes == 0:
            return None
        memo = self._config_keys.get(id(config))
        if memo is None or memo[0] is not config:
            memo = self._config_keys[id(config)] = (config, config_key(config))
        return (memo[1], seeds.federation, seeds.system, seeds.training, seeds.init, seeds.profiling, pca)

    def restore(self, key: Optional[tuple], federation: Any, view_cls: type) -> Optional[Tuple[Any, float, bool]]:
        """On a hit, put ``federation`` back in the state kept under ``key`` (torch's generator left as it is: a
        reset draws nothing from it) and return ``(server view, profiling time, profiling diverged)``; else None."""
        kept = self.get(key) if key is not None else None
        if kept is None:
            return None
        fed_state, view_state, (profiling_time, broken) = kept
        federation.restore({**fed_state, "torch_rng": torch.get_rng_state()})
        return view_from_state(view_cls, view_state), profiling_time, broken

    def store(self, key: Optional[tuple], federation: Any, view: Any, profiling_time: float, broken: bool) -> None:
        """Keep what a reset under ``key`` left (nothing where ``key`` is None)."""
        if key is not None:
            state = federation.snapshot()
            del state["torch_rng"]
            self.put(key, (state, copy_view_state(view), (profiling_time, broken)))

    def start(self, key: Optional[tuple], federation: Any, seeds: Any, pca: int, view_cls: type,
              view_args: tuple):
        """A reset's start of ``federation``: restored from the entry under ``key`` on a hit; else played (a
        generator: it yields the profiling round's ``TrainRequest``, as ``Federation.start_steps`` does) on a new
        ``view_cls(*view_args)`` (the server view) and kept. Returns ``(server view, profiling time, diverged)``."""
        kept = self.restore(key, federation, view_cls)
        if kept is not None:
            return kept
        report = yield from federation.start_steps(seeds)
        view = view_cls(*view_args)
        broken = view.start(report, pca_seed=pca)
        view.open_round(federation.open_round())
        self.store(key, federation, view, report.round_time, broken)
        return view, report.round_time, broken

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0

    def stats(self) -> Dict[str, int]:
        return {"entries": len(self._entries), "bytes": self.bytes, "hits": self.hits, "misses": self.misses}


def _copy_view_vars(state: Dict[str, Any]) -> Dict[str, Any]:
    # the fitted PCA and the observation space are shared: neither is written after the reset
    shared = [state[k] for k in ("pca", "space") if k in state]
    return copy.deepcopy(state, {id(v): v for v in shared})


def copy_view_state(view: Any) -> Dict[str, Any]:
    """A server view's attributes (``fedsel_env/server_view.py``), copied (its PCA and observation space shared)."""
    return _copy_view_vars(vars(view))


def view_from_state(cls: type, state: Dict[str, Any]) -> Any:
    """A new ``cls`` (the server view's class) holding a copy of ``state`` (:func:`copy_view_state`'s)."""
    view = cls.__new__(cls)
    vars(view).update(_copy_view_vars(state))
    return view
