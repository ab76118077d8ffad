"""Partitions of a labelled pool over N clients, and client sizes with quantity skew (docs/SPEC.md §3.2).

Every partition is ``fn(labels, sizes, num_classes, rng, **params) -> list[np.ndarray]``:
client k receives exactly ``sizes[k]`` distinct pool indices and no index goes to two
clients. The partitions and the papers they come from:

- ``iid`` — a uniformly random permutation of the pool cut into consecutive pieces.
- ``sigma`` — FAVOR: H. Wang, Z. Kaplan, D. Niu, B. Li, "Optimizing Federated Learning
  on Non-IID Data with Reinforcement Learning", IEEE INFOCOM 2020. A fraction σ of each
  client's samples has its primary label, the rest 1 − σ is spread evenly over the
  other C − 1 labels: n_{k,p_k} = σ n_k, n_{k,j} = (1 − σ) n_k / (C − 1) for j ≠ p_k.
  Primary labels go round-robin over a shuffled order of the classes, so each label is
  primary for ⌊N/C⌋ or ⌈N/C⌉ clients. σ = 1 is single-label.
- ``two_label`` — FAVOR's σ = H: n_k / 2 samples from each of two distinct labels; the
  2N label slots are consecutive shuffled permutations of the classes, so each label
  serves ~2N/C clients.
- ``shards`` — H. B. McMahan, E. Moore, D. Ramage, S. Hampson, B. Agüera y Arcas,
  "Communication-Efficient Learning of Deep Networks from Decentralized Data",
  AISTATS 2017: the pool sorted by label is cut into N·s shards and each client gets s
  of them at random. Here the shards are cut inside one label's block (client k's s
  shards have sizes ⌊n_k/s⌋ or ⌈n_k/s⌉), so a client holds at most s labels; a shard
  straddles two labels only when no label has room for it.
- ``dirichlet`` — T.-M. H. Hsu, H. Qi, M. Brown, "Measuring the Effects of Non-Identical
  Data Distribution for Federated Visual Classification", 2019: client k's label
  proportions q_k ~ Dir(α·1_C), n_{k,j} ≈ q_{k,j} n_k.
- ``natural`` — for datasets generated per device (``synthetic``): the pool is stored
  device after device and client k is device k.

Exact compositions meet a finite pool: the real-valued label counts are rounded row by
row (each row sums exactly to n_k, ties broken toward the labels the clients so far
were shortest of, which keeps every label's total within about one sample of its real
value), then any label asked for more samples than the pool holds gives up the excess
from the clients most over their real target, each such client taking the shortfall
from the label it is most short of (the nearest label index on ties) that still has
samples left. ``sigma`` and ``two_label`` warn when this moves more than 1% of the
samples (the pool is then too small for the exact composition).

Quantity skew (:func:`client_sizes`): client weights w_k ~ LogNormal(0, s²), sizes
n_k = m + share of (T − N m) ∝ w_k, rounded by largest remainder so Σ n_k = T exactly.
"""
from __future__ import annotations

import inspect
import warnings
from typing import Any, List, Mapping, Optional

import numpy as np

from ..registry import Registry, callable_with, check_params
from .limits import real_in, short

PARTITIONS = Registry("partition", check=callable_with(4, "(labels, sizes, num_classes, rng, **params)",
                                                       "a partition is a function returning N index arrays"))

# A composition change above this fraction of the samples is worth a warning.
_WARN_FRACTION = 0.01


def partition_indices(name: str, labels: np.ndarray, sizes: np.ndarray, num_classes: int,
                      rng: np.random.Generator, params: Optional[Mapping[str, Any]] = None) -> List[np.ndarray]:
    """Look up partition ``name``, validate ``params`` against its keywords and run it.

    :param name: a registered partition (``PARTITIONS``).
    :param labels: (M,) pool labels in ``[0, num_classes)``.
    :param sizes: (N,) samples each client receives (train + test).
    :param num_classes: C.
    :param rng: the generator every random draw comes from.
    :param params: the partition's parameters; unknown names raise ``ValueError``.
    :return: N arrays of distinct pool indices, client k's of length ``sizes[k]``.
    """
    fn = PARTITIONS.lookup(name)
    defaults = {p.name: p.default for p in inspect.signature(fn).parameters.values()
                if p.kind is inspect.Parameter.KEYWORD_ONLY}
    merged = check_params("partition", name, dict(params or {}), defaults)
    labels, sizes = _check_pool(labels, sizes, num_classes)
    if name in PARTITIONS:
        return fn(labels, sizes, num_classes, rng, **merged)
    try:  # a plug-in's own failure, whatever it is: named, not raw
        return fn(labels, sizes, num_classes, rng, **merged)
    except ValueError:
        raise
    except (Exception, SystemExit) as e:  # noqa: BLE001
        raise ValueError(f"config field 'partition' = {short(name)} failed ({type(e).__name__}: {short(str(e))}): "
                         f"a partition is a function (labels, sizes, num_classes, rng, **params) returning N "
                         f"index arrays") from e


def _check_pool(labels: np.ndarray, sizes: np.ndarray, num_classes: int) -> tuple:
    labels = np.asarray(labels)
    sizes = np.asarray(sizes)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be a 1-D integer array, got shape {labels.shape} dtype {labels.dtype}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 1:
        raise ValueError(f"num_classes = {num_classes!r}; expected an integer >= 1")
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}), got range [{labels.min()}, {labels.max()}]")
    if sizes.ndim != 1 or sizes.size == 0 or not np.issubdtype(sizes.dtype, np.integer) or (sizes < 0).any():
        raise ValueError(f"sizes must be a non-empty 1-D array of integers >= 0, got {sizes!r}")
    if sizes.sum() > labels.size:
        raise ValueError(f"the pool holds {labels.size} samples but the client sizes sum to {int(sizes.sum())}; "
                         f"lower samples_per_client or num_clients")
    return labels.astype(np.int64), sizes.astype(np.int64)


def test_size(train_size: int, test_fraction: float) -> int:
    """A client's test-split size: round(test_fraction × train_size), half up, at least 1."""
    return max(1, int(np.floor(test_fraction * train_size + 0.5)))


test_size.__test__ = False  # not a pytest test, despite the name


def client_sizes(num_clients: int, total: int, quantity_skew: float, rng: np.random.Generator,
                 min_size: int = 2) -> np.ndarray:
    """Training sizes of N clients summing exactly to ``total``.

    :param num_clients: N.
    :param total: Σ n_k.
    :param quantity_skew: lognormal σ of the sizes; 0 gives equal sizes (differing by at most 1).
    :param rng: draws the lognormal weights (nothing is drawn when ``quantity_skew`` is 0).
    :param min_size: with skew, every client gets at least this many samples.
    :return: (N,) int64 sizes.
    """
    weights = None if quantity_skew == 0 else rng.lognormal(0.0, quantity_skew, num_clients)
    return sizes_from_weights(weights, num_clients, total, min_size)


def sizes_from_weights(weights: Optional[np.ndarray], n: int, total: int, min_size: int = 2) -> np.ndarray:
    """``n`` sizes summing to ``total``: equal (±1) when ``weights`` is None, else ``min_size`` each
    plus the rest shared in proportion to ``weights`` (largest remainder).

    :raises ValueError: when ``n * min_size`` exceeds ``total``.
    """
    if weights is None:
        sizes = np.full(n, total // n, dtype=np.int64)
        sizes[: total % n] += 1
        return sizes
    if n * min_size > total:
        raise ValueError(f"quantity_skew: {n} clients of at least {min_size} samples need {n * min_size}, "
                         f"but only {total} are available")
    return min_size + _largest_remainder(weights / weights.sum() * (total - n * min_size), total - n * min_size)


def _largest_remainder(real: np.ndarray, total: int) -> np.ndarray:
    """Integers summing to ``total`` whose values are ⌊real⌋ plus one for the largest fractions."""
    base = np.floor(real).astype(np.int64)
    short = int(total - base.sum())
    if short > 0:
        base[np.argsort(-(real - base), kind="stable")[:short]] += 1
    return base


# --- the label-count machinery shared by sigma, two_label, shards and dirichlet -----------------

def _round_rows(target: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Round the (N, C) real counts row by row, each row summing to ``sizes[k]`` exactly.

    Among the entries a row may round up, those of the labels the previous rows left
    shortest of their real totals come first, so column sums stay near the real ones.
    """
    counts = np.floor(target).astype(np.int64)
    column_error = np.zeros(target.shape[1])
    for k in range(target.shape[0]):
        short = int(sizes[k] - counts[k].sum())
        if short > 0:
            frac = target[k] - counts[k]
            priority = frac - column_error  # a label behind on its total gets the unit first
            priority[frac <= 1e-9] = -np.inf
            up = np.argsort(-priority, kind="stable")[:short]
            counts[k, up] += 1
        column_error += counts[k] - target[k]
    return counts


def _fit_to_pool(target: np.ndarray, sizes: np.ndarray, available: np.ndarray) -> tuple:
    """Integer label counts (N, C) with row sums ``sizes`` and column sums ≤ ``available``.

    :return: (counts, moved) where ``moved`` counts the samples reassigned for lack of pool.
    """
    counts = _round_rows(target, sizes)
    num_classes = target.shape[1]
    label_distance = np.abs(np.arange(num_classes)[:, None] - np.arange(num_classes)[None, :])
    label_distance = np.minimum(label_distance, num_classes - label_distance)  # cyclic
    moved = 0
    while True:
        over = counts.sum(axis=0) - available
        if (over <= 0).all():
            return counts, moved
        j = int(np.argmax(over))
        spare = np.maximum(available - counts.sum(axis=0), 0)
        holders = np.flatnonzero(counts[:, j] > 0)
        # One unit from each of the holders most over their real target, as many as the excess.
        holders = holders[np.argsort(-(counts[holders, j] - target[holders, j]), kind="stable")][: int(over[j])]
        for k in holders:
            # The label this client is most short of (nearest to j on ties) among those with spare.
            deficit = target[k] - counts[k]
            score = np.where(spare > 0, deficit - 1e-6 * label_distance[j], -np.inf)
            dest = int(np.argmax(score))
            counts[k, j] -= 1
            counts[k, dest] += 1
            spare[dest] -= 1
            moved += 1


def _allocate(labels: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> List[np.ndarray]:
    """Hand out pool indices: client k gets ``counts[k, j]`` random distinct indices of label j."""
    num_classes = counts.shape[1]
    by_label = [rng.permutation(np.flatnonzero(labels == j)) for j in range(num_classes)]
    starts = np.vstack([np.zeros((1, num_classes), np.int64), np.cumsum(counts, axis=0)])
    parts = []
    for k in range(counts.shape[0]):
        idx = np.concatenate([by_label[j][starts[k, j]:starts[k + 1, j]] for j in range(num_classes)])
        parts.append(rng.permutation(idx))
    return parts


def _composition_partition(name: str, labels: np.ndarray, sizes: np.ndarray, target: np.ndarray,
                           rng: np.random.Generator, warn: bool) -> List[np.ndarray]:
    available = np.bincount(labels, minlength=target.shape[1]).astype(np.int64)
    counts, moved = _fit_to_pool(target, sizes, available)
    if warn and moved > _WARN_FRACTION * max(1, int(sizes.sum())):
        short = np.flatnonzero(target.sum(axis=0) > available + 0.5).tolist()
        warnings.warn(f"partition {name!r}: the pool holds too few samples of label(s) {short} for the "
                      f"requested composition; {moved} samples ({100 * moved / sizes.sum():.1f}%) were "
                      f"taken from other labels instead (fewer clients or samples_per_client keep it exact)",
                      stacklevel=4)
    return _allocate(labels, counts, rng)


# --- the partitions -----------------------------------------------------------------------------

@PARTITIONS.register("iid")
def iid(labels: np.ndarray, sizes: np.ndarray, num_classes: int, rng: np.random.Generator) -> List[np.ndarray]:
    """IID: a random permutation of the pool cut into pieces of ``sizes``."""
    perm = rng.permutation(labels.size)
    ends = np.cumsum(sizes)
    return [perm[e - s:e] for s, e in zip(sizes, ends)]


@PARTITIONS.register("sigma")
def sigma(labels: np.ndarray, sizes: np.ndarray, num_classes: int, rng: np.random.Generator, *,
          sigma: float = 0.8) -> List[np.ndarray]:
    """FAVOR's σ partition: σ n_k samples of a primary label, (1 − σ) n_k / (C − 1) of each other.

    :param sigma: the primary label's fraction, in (0, 1]; 1 = single-label clients.
    """
    if real_in(sigma, 0.0, 1.0, lo_open=True) is None:
        raise ValueError(f"partition parameter 'sigma' = {short(sigma)}; allowed: a number in (0, 1]")
    if num_classes < 2 and sigma < 1:
        raise ValueError(f"partition 'sigma' with sigma = {sigma} needs at least 2 classes, got {num_classes}")
    order = rng.permutation(num_classes)
    primary = order[np.arange(sizes.size) % num_classes]
    rest = (1.0 - sigma) * sizes / max(1, num_classes - 1)
    target = np.repeat(rest[:, None], num_classes, axis=1)
    target[np.arange(sizes.size), primary] = sigma * sizes
    return _composition_partition("sigma", labels, sizes, target, rng, warn=True)


@PARTITIONS.register("two_label")
def two_label(labels: np.ndarray, sizes: np.ndarray, num_classes: int,
              rng: np.random.Generator) -> List[np.ndarray]:
    """FAVOR's σ = H: half of each client's samples from each of two distinct labels."""
    if num_classes < 2:
        raise ValueError(f"partition 'two_label' needs at least 2 classes, got {num_classes}")
    n = sizes.size
    slots = np.concatenate([rng.permutation(num_classes) for _ in range(-(-2 * n // num_classes))])[: 2 * n]
    for k in range(n):  # a pair can repeat a label only across two permutations (C odd): swap it away
        a, b = 2 * k, 2 * k + 1
        if slots[a] == slots[b]:
            if b + 1 < slots.size:
                slots[b], slots[b + 1] = slots[b + 1], slots[b]
            else:
                use = np.bincount(slots, minlength=num_classes).astype(float)
                use[slots[a]] = np.inf
                slots[b] = int(np.argmin(use))
    target = np.zeros((n, num_classes))
    target[np.arange(n), slots[0::2]] += sizes / 2
    target[np.arange(n), slots[1::2]] += sizes / 2
    return _composition_partition("two_label", labels, sizes, target, rng, warn=True)


@PARTITIONS.register("shards")
def shards(labels: np.ndarray, sizes: np.ndarray, num_classes: int, rng: np.random.Generator, *,
           shards_per_client: int = 2) -> List[np.ndarray]:
    """McMahan's shards: s label-sorted shards per client, assigned at random.

    :param shards_per_client: s, an integer >= 1.
    """
    s = shards_per_client
    if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1:
        raise ValueError(f"partition parameter 'shards_per_client' = {s!r}; allowed: an integer >= 1")
    most = int(sizes.sum()) // sizes.size  # the pool is cut into N·s shards: at most one per sample
    if s > most:
        raise ValueError(f"partition parameter 'shards_per_client' = {s!r} is too large: {sizes.size} clients × {s} "
                         f"shards would cut their {int(sizes.sum())} samples into more shards than samples; "
                         f"allowed: an integer in [1, {max(most, 1)}]")
    owner = np.repeat(np.arange(sizes.size), s)
    length = np.concatenate([np.full(s, n // s) + (np.arange(s) < n % s) for n in sizes]).astype(np.int64)
    available = np.bincount(labels, minlength=num_classes).astype(np.int64)
    # Each label is used in proportion to its share of the pool, as cutting a uniform subsample would.
    quota = available * (sizes.sum() / max(1, labels.size))
    used = np.zeros(num_classes, np.int64)
    tie = rng.permutation(num_classes) * 1e-9  # no bias toward low label indices
    counts = np.zeros((sizes.size, num_classes), np.int64)
    for i in rng.permutation(owner.size):
        k, left = owner[i], int(length[i])
        room = available - used
        fits = room >= left
        if fits.any():  # the label furthest below its quota that can hold the whole shard
            j = int(np.argmax(np.where(fits, quota - used + tie, -np.inf)))
            counts[k, j] += left
            used[j] += left
            continue
        while left > 0:  # no label has room: the shard straddles, first into labels k holds, then the roomiest
            room = available - used
            score = np.where(room > 0, room + tie + (counts[k] > 0) * labels.size, -np.inf)
            j = int(np.argmax(score))
            take = min(left, int(room[j]))
            counts[k, j] += take
            used[j] += take
            left -= take
    return _allocate(labels, counts, rng)


@PARTITIONS.register("dirichlet")
def dirichlet(labels: np.ndarray, sizes: np.ndarray, num_classes: int, rng: np.random.Generator, *,
              alpha: float = 0.5) -> List[np.ndarray]:
    """Label proportions q_k ~ Dir(α·1_C) per client.

    :param alpha: the concentration α > 0 (small α: few labels per client; large α: near IID).
    """
    if real_in(alpha, 0.0, lo_open=True) is None:  # 10**400: no float (was OverflowError below)
        raise ValueError(f"partition parameter 'alpha' = {short(alpha)}; allowed: a finite number > 0")
    proportions = rng.dirichlet(np.full(num_classes, float(alpha)), size=sizes.size)
    return _composition_partition("dirichlet", labels, sizes, proportions * sizes[:, None], rng, warn=False)


@PARTITIONS.register("natural")
def natural(labels: np.ndarray, sizes: np.ndarray, num_classes: int,
            rng: np.random.Generator) -> List[np.ndarray]:
    """One device = one client: the pool is stored device after device, ``sizes`` rows each."""
    ends = np.cumsum(sizes)
    return [np.arange(e - s, e) for s, e in zip(sizes, ends)]


def label_histograms(labels: np.ndarray, parts: List[np.ndarray], num_classes: int) -> np.ndarray:
    """(N, C) label counts of each client's indices (for checks and plots)."""
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])


__all__ = ["PARTITIONS", "partition_indices", "client_sizes", "sizes_from_weights", "test_size", "label_histograms"]
