"""Data sources and the federated dataset built from them (docs/SPEC.md §3.1, §3.2).

``DATASETS`` maps a name to a :class:`DataSource`, whose ``load`` returns the whole
labelled pool; :func:`build_federated_data` cuts that pool into N clients with a
partition of ``fedsel_env.sim.partitions`` and gives every client a held-out test split
drawn from its own label distribution.

Sources:

- ``digits`` — scikit-learn's bundled 8×8 digits (1,797 images), pixels / 16 ∈ [0, 1].
- ``synthetic`` — Synthetic(α, β) of T. Li, A. K. Sahu, M. Zaheer, M. Sanjabi,
  A. Talwalkar, V. Smith, "Federated Optimization in Heterogeneous Networks" (FedProx),
  MLSys 2020, as used by q-FFL (Li, Sanjabi, Beirami, Smith, ICLR 2020). With d = 60,
  C = 10, Σ = diag(j^−1.2), j = 1..60, per device k:
  u_k ~ N(0, α²), B_k ~ N(0, β²); v_k,i ~ N(B_k, 1); W_k,ij, b_k,j ~ N(u_k, 1);
  x ~ N(v_k, Σ); y = argmax softmax(x W_k + b_k); n_k = ⌊LogNormal(4, 2)⌋ + 50.
- ``fashion_mnist``, ``mnist`` — the four idx files (plain or .gz), read with numpy;
  ``cifar10`` — the python-pickle batches. Pixels / 255, then standardised by fixed
  per-dataset mean and std. The pool is the train and test files together: the
  federation re-splits it per client.

The files are read by ``fedsel_env/sim/data_files.py``, which caches what it decodes.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from .partitions import PARTITIONS, partition_indices, sizes_from_weights, test_size
from ..registry import Registry, check_params
from .limits import is_choice, real_in, reals_text, refuse_if_too_big, short
from .data_files import DatasetNotFoundError  # noqa: F401  (re-exported: the loaders raise it)
from .data_files import concat_idx_cached, damaged, file_key, locate_dataset, read_cifar_cached, read_idx

def _is_data_source(obj: Any) -> Optional[str]:
    """The interface of a dataset named by import path: a :class:`DataSource` (its ``load`` and ``defaults``)."""
    if isinstance(obj, DataSource):
        return None
    return (f"expected a fedsel_env.sim.data.DataSource(load=..., defaults=...), got {type(obj).__name__} "
            f"{short(obj)}")


DATASETS = Registry("dataset", check=lambda obj: _is_data_source(obj))

# Fixed normalisation (mean, std of [0, 1] pixels over the training files); Fashion-MNIST's
# were measured on the Debian copy: 0.28604, 0.35302.
NORMALISATION = {
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "mnist": ((0.1307,), (0.3081,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}


@dataclass
class DataPool:
    """A labelled pool before partitioning.

    ``x`` keeps the stored dtype (uint8 pixels); :meth:`features` turns chosen rows into
    float32 inputs as ``x * scale`` then ``(· − mean) / std`` (per channel).
    """

    x: np.ndarray                           # (M, *input_shape)
    y: np.ndarray                           # (M,) int64
    num_classes: int
    input_shape: Tuple[int, ...]
    scale: float = 1.0
    mean: Tuple[float, ...] = (0.0,)
    std: Tuple[float, ...] = (1.0,)
    device_sizes: Optional[np.ndarray] = None        # natural pools: rows per device (train + test), in order
    device_train_sizes: Optional[np.ndarray] = None  # natural pools: each device's training rows

    def features(self, idx: np.ndarray) -> np.ndarray:
        """float32 model inputs of pool rows ``idx``."""
        x = self.x[idx].astype(np.float32, copy=False)  # fancy indexing already copied
        if self.scale == 1.0 and all(m == 0.0 for m in self.mean) and all(s == 1.0 for s in self.std):
            return x
        shape = (-1,) + (1,) * (len(self.input_shape) - 1) if len(self.mean) > 1 else ()
        mean = np.asarray(self.mean, np.float32).reshape(shape)
        std = np.asarray(self.std, np.float32).reshape(shape)
        np.multiply(x, np.float32(self.scale) / std, out=x)
        np.subtract(x, mean / std, out=x)
        return x


@dataclass(frozen=True)
class DataSource:
    """A registered dataset: ``load(params, cfg, rng) -> DataPool`` with validated ``params``.

    ``natural`` sources generate one device per client and accept only the ``natural`` partition.
    """

    load: Callable[[Dict[str, Any], Dict[str, Any], np.random.Generator], DataPool]
    defaults: Dict[str, Any] = field(default_factory=dict)
    natural: bool = False


@dataclass
class FederatedData:
    """N clients' train and test data, each client's rows stored contiguously."""

    x_train: torch.Tensor        # (total_train, *input_shape) float32
    y_train: torch.Tensor        # (total_train,) int64
    train_offsets: np.ndarray    # (N+1,): client k's training rows are train_offsets[k]:train_offsets[k+1]
    x_test: torch.Tensor         # (total_test, *input_shape) float32
    y_test: torch.Tensor         # (total_test,) int64
    test_offsets: np.ndarray     # (N+1,)
    input_shape: tuple
    num_classes: int

    @property
    def num_samples(self) -> np.ndarray:
        """(N,) training samples per client."""
        return np.diff(self.train_offsets)

    @property
    def num_test_samples(self) -> np.ndarray:
        """(N,) test samples per client."""
        return np.diff(self.test_offsets)

    @property
    def num_clients(self) -> int:
        """N."""
        return len(self.train_offsets) - 1

    def client_train(self, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Client k's training (x, y), views into the stored tensors."""
        a, b = self.train_offsets[k], self.train_offsets[k + 1]
        return self.x_train[a:b], self.y_train[a:b]

    def client_test(self, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """Client k's test (x, y), views into the stored tensors."""
        a, b = self.test_offsets[k], self.test_offsets[k + 1]
        return self.x_test[a:b], self.y_test[a:b]


# --- building the federation ---------------------------------------------------------------------

def build_federated_data(cfg: Dict[str, Any], rng: np.random.Generator) -> FederatedData:
    """Load ``cfg["dataset"]``, partition it over ``cfg["num_clients"]`` clients, split each client.

    Client k's train and test samples are partitioned together (n_k + t_k of them, with
    t_k = round(test_fraction · n_k), at least 1) and then split stratified by label, so
    its test split follows its own label distribution.

    :param cfg: a complete config from ``fedsel_env.config.make_config``.
    :param rng: the generator every draw (synthetic data, sizes, partition, split) comes from.
    :raises ValueError: on an unknown dataset, partition or parameter, an incompatible
        dataset/partition pair, or a pool too small for the requested sizes.
    """
    shared = _SHARED_BUILDS.get()
    if shared is not None:
        return shared.build(cfg, rng)
    name = cfg["dataset"]
    source = DATASETS.lookup(name)
    noise, given = label_noise_params(cfg["dataset_params"])
    params = check_params("dataset", name, given, source.defaults)
    partition = cfg["partition"]
    PARTITIONS.lookup(partition)
    if source.natural and partition != "natural":
        raise ValueError(f"config field 'partition' = {partition!r} is invalid for dataset {name!r}, which is "
                         f"partitioned naturally (one device = one client): set partition='natural'")
    if not source.natural and partition == "natural":
        naturals = sorted(n for n, s in DATASETS.items() if s.natural)
        raise ValueError(f"config field 'partition' = 'natural' is only valid for {naturals}; for dataset "
                         f"{name!r} choose one of {sorted(set(PARTITIONS) - {'natural'})}")
    if source.natural and cfg["quantity_skew"] != 0:
        raise ValueError(f"config field 'quantity_skew' = {cfg['quantity_skew']!r} is invalid for dataset "
                         f"{name!r}, whose sizes come from its own generating process: set it to 0")

    pool = source.load(params, cfg, rng)
    if source.natural:
        train_sizes = pool.device_train_sizes
        totals = pool.device_sizes
    else:
        train_sizes = _train_sizes(cfg, pool.y.size, name, rng)
        totals = train_sizes + _test_sizes(train_sizes, cfg["test_fraction"])
    parts = partition_indices(partition, pool.y, totals, pool.num_classes, rng, cfg["partition_params"])

    train_idx, test_idx = split_by_label(parts, pool.y, pool.num_classes, totals - train_sizes, rng)
    y_train = pool.y[train_idx].astype(np.int64)
    if noise["noisy_clients"] > 0:  # drawn after everything else: without noise every draw is as before
        y_train = noisy_labels(y_train, train_sizes, pool.num_classes, noise, rng)
    return FederatedData(
        x_train=torch.from_numpy(pool.features(train_idx)),
        y_train=torch.from_numpy(y_train),
        train_offsets=np.concatenate([[0], np.cumsum(train_sizes)]).astype(np.int64),
        x_test=torch.from_numpy(pool.features(test_idx)),
        y_test=torch.from_numpy(pool.y[test_idx].astype(np.int64)),
        test_offsets=np.concatenate([[0], np.cumsum(totals - train_sizes)]).astype(np.int64),
        input_shape=tuple(pool.input_shape),
        num_classes=int(pool.num_classes),
    )


class SharedBuilds:
    """Federated datasets built once and shared while :func:`sharing_builds` is active (the vector env's
    sub-envs, ``fedsel_env/vector.py``): the same config from a generator in the same state gives the same
    :class:`FederatedData` object — nothing writes into its tensors — and leaves the generator where a build
    would have left it, so every draw after it is as before. An entry lives while some env holds its data."""

    def __init__(self) -> None:
        self._data: "weakref.WeakValueDictionary[tuple, FederatedData]" = weakref.WeakValueDictionary()
        self._after: Dict[tuple, Dict[str, Any]] = {}

    def build(self, cfg: Dict[str, Any], rng: np.random.Generator) -> FederatedData:
        key = (json.dumps(cfg, sort_keys=True, default=repr),
               json.dumps(rng.bit_generator.state, sort_keys=True, default=str))
        data = self._data.get(key)
        if data is None:
            token = _SHARED_BUILDS.set(None)
            try:
                data = build_federated_data(cfg, rng)
            finally:
                _SHARED_BUILDS.reset(token)
            self._after = {k: v for k, v in self._after.items() if k in self._data}
            self._data[key], self._after[key] = data, rng.bit_generator.state
        else:
            rng.bit_generator.state = self._after[key]
        return data


_SHARED_BUILDS: "contextvars.ContextVar[Optional[SharedBuilds]]" = contextvars.ContextVar("fedsel_shared_builds",
                                                                                           default=None)


@contextlib.contextmanager
def sharing_builds(shared: SharedBuilds):
    """Within the block, :func:`build_federated_data` goes through ``shared`` (see :class:`SharedBuilds`)."""
    token = _SHARED_BUILDS.set(shared)
    try:
        yield shared
    finally:
        _SHARED_BUILDS.reset(token)


#: label noise, a parameter of every dataset (``dataset_params``): the share of clients whose *training* labels
#: are corrupted (their test split stays clean, as the task they should learn), and how: ``random`` (each label
#: replaced by a uniform draw over the classes) or ``shift`` (y → (y + 1) mod C, a systematic flip)
LABEL_NOISE_DEFAULTS = {"noisy_clients": 0.0, "label_noise": "random"}


def label_noise_params(given: Any) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Split ``dataset_params`` into the label-noise keys (checked, defaults filled) and the source's own."""
    given = dict(given or {}) if isinstance(given, dict) else given
    if not isinstance(given, dict):
        return dict(LABEL_NOISE_DEFAULTS), given  # check_params names the bad mapping
    noise = {k: given.pop(k) for k in list(given) if k in LABEL_NOISE_DEFAULTS}
    noise = {**LABEL_NOISE_DEFAULTS, **noise}
    f = noise["noisy_clients"]
    if real_in(f, 0.0, 1.0, hi_open=True) is None:
        raise ValueError(f"config field 'dataset_params.noisy_clients' = {short(f)} is invalid: expected the share "
                         f"of clients with corrupted training labels, {reals_text(0.0, 1.0, hi_open=True, given=f)}")
    if not is_choice(noise["label_noise"], ("random", "shift")):
        raise ValueError(f"config field 'dataset_params.label_noise' = {short(noise['label_noise'])} is invalid: "
                         f"allowed: ['random', 'shift']")
    return noise, given


def noisy_labels(y: np.ndarray, train_sizes: np.ndarray, num_classes: int, noise: Dict[str, Any],
                 rng: np.random.Generator) -> np.ndarray:
    """Training labels with round(share·N) clients' (at least one) corrupted; which clients: drawn from ``rng``."""
    n = train_sizes.size
    m = max(1, int(round(float(noise["noisy_clients"]) * n)))
    offsets = np.concatenate([[0], np.cumsum(train_sizes)])
    y = y.copy()
    for k in np.sort(rng.permutation(n)[:m]):
        a, b = offsets[k], offsets[k + 1]
        if noise["label_noise"] == "random":
            y[a:b] = rng.integers(0, num_classes, size=b - a)
        else:
            y[a:b] = (y[a:b] + 1) % num_classes
    return y


def _test_sizes(train_sizes: np.ndarray, test_fraction: float) -> np.ndarray:
    return np.array([test_size(int(n), test_fraction) for n in train_sizes], dtype=np.int64)


def _train_sizes(cfg: Dict[str, Any], pool_size: int, name: str, rng: np.random.Generator) -> np.ndarray:
    """Training sizes n_k: ``samples_per_client`` each (skewed around it), or the whole pool's share."""
    n, tf, skew = cfg["num_clients"], cfg["test_fraction"], cfg["quantity_skew"]
    per = cfg["samples_per_client"]

    def needed(sizes: np.ndarray) -> int:
        return int(sizes.sum() + _test_sizes(sizes, tf).sum())

    fits = int((pool_size // n) / (1 + tf)) + 1  # then down to the largest equal size whose train + test fit
    while fits > 0 and fits + test_size(fits, tf) > pool_size // n:
        fits -= 1
    weights = rng.lognormal(0.0, skew, n) if skew > 0 else None

    def too_large(need: int) -> ValueError:
        return ValueError(
            f"config field 'samples_per_client' = {per} is too large: dataset {name!r} holds {pool_size} "
            f"samples, but {n} clients need {need} (train + test_fraction {tf:g} test"
            f"{', with quantity skew' if weights is not None else ''}); samples_per_client <= {fits} fits "
            f"with equal sizes, or set samples_per_client=None to split the whole pool")

    if per is not None:
        total = n * per
        if total + n > pool_size:  # at least n·per training and n test samples: refused before the sizes
            raise too_large(n * (per + test_size(per, tf)))  # exist (their int64 sum could overflow)
        sizes = sizes_from_weights(weights, n, total, max(2, min(cfg["batch_size"], per)))
        if needed(sizes) > pool_size:
            raise too_large(needed(sizes))
        return sizes
    if fits < 1:
        raise ValueError(f"config field 'num_clients' = {n} is too large: dataset {name!r} holds {pool_size} "
                         f"samples, fewer than one training and one test sample per client")
    total = n * fits
    while True:
        sizes = sizes_from_weights(weights, n, total, max(2, min(cfg["batch_size"], total // n)))
        over = needed(sizes) - pool_size
        if over <= 0:
            return sizes
        total -= max(1, int(np.ceil(over / (1 + tf))))


def split_by_label(parts: List[np.ndarray], labels: np.ndarray, num_classes: int, test_sizes: np.ndarray,
                   rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray]:
    """Split every client's indices into train and test, stratified by label.

    In client k, label j gives its share c_kj · t_k / |parts[k]| to the test split
    (largest remainder per client, ties broken at random); the partition already ordered
    each client's indices at random, so the first rows of each label go to test.

    :param parts: N arrays of pool indices, client k's train and test together.
    :param test_sizes: (N,) t_k.
    :return: (train indices, test indices), each client's rows contiguous and in client order.
    """
    n = len(parts)
    lengths = np.array([len(p) for p in parts], np.int64)
    idx = np.concatenate(parts).astype(np.int64)
    key = np.repeat(np.arange(n), lengths) * num_classes + labels[idx]  # (client, label) group of each row
    counts = np.bincount(key, minlength=n * num_classes).reshape(n, num_classes)
    real = counts * (np.asarray(test_sizes) / np.maximum(lengths, 1))[:, None]
    take = np.floor(real + 1e-9).astype(np.int64)
    short = np.asarray(test_sizes) - take.sum(axis=1)
    order = np.lexsort((rng.random((n, num_classes)), -(real - take)))  # per row: largest fraction first
    up = np.zeros_like(take)
    np.put_along_axis(up, order, (np.arange(num_classes)[None, :] < short[:, None]).astype(np.int64), axis=1)
    take += up
    by_group = np.argsort(key, kind="stable")
    group_start = np.concatenate([[0], np.cumsum(counts.ravel())[:-1]])
    rank = np.empty(idx.size, np.int64)
    rank[by_group] = np.arange(idx.size) - group_start[key[by_group]]
    is_test = rank < take.ravel()[key]
    if is_test.sum() != np.sum(test_sizes):  # a label cannot give more test rows than it has
        raise RuntimeError("split_by_label: stratified split lost rows; this is a bug")
    return idx[~is_test], idx[is_test]


# --- digits ----------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _digits_arrays() -> Tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = d.images.astype(np.uint8)[:, None, :, :]  # values are the integers 0..16
    y = d.target.astype(np.int64)
    x.flags.writeable = False
    y.flags.writeable = False
    return x, y


def _load_digits(params: Dict[str, Any], cfg: Dict[str, Any], rng: np.random.Generator) -> DataPool:
    x, y = _digits_arrays()
    return DataPool(x=x, y=y, num_classes=10, input_shape=(1, 8, 8), scale=1.0 / 16.0)


DATASETS.register("digits")(DataSource(load=_load_digits))


# --- synthetic -------------------------------------------------------------------------------------

SYNTHETIC_DIM = 60
SYNTHETIC_CLASSES = 10
#: The largest alpha / beta (std of the devices' model and input means): at 1e300 the features overflow.
SYNTHETIC_MAX_SPREAD = 1e6


def generate_synthetic(train_sizes: np.ndarray, test_sizes: np.ndarray, alpha: float, beta: float,
                       rng: np.random.Generator) -> Tuple[np.ndarray, np.ndarray]:
    """Synthetic(α, β): device k's n_k + t_k samples, stored device after device.

    :param train_sizes: (N,) n_k.
    :param test_sizes: (N,) t_k, generated from the same device distribution.
    :param alpha: std of u_k (the means of W_k, b_k): how much the devices' models differ.
    :param beta: std of B_k (the means of v_k): how much the devices' inputs differ.
    :return: x (Σ(n_k + t_k), 60) float32 and y int64.
    """
    n = train_sizes.size
    d, c = SYNTHETIC_DIM, SYNTHETIC_CLASSES
    rows = (train_sizes + test_sizes).astype(np.int64)
    u = rng.normal(0.0, alpha, n)
    b_mean = rng.normal(0.0, beta, n)
    v = rng.normal(b_mean[:, None], 1.0, (n, d))
    w = rng.normal(u[:, None, None], 1.0, (n, d, c))
    b = rng.normal(u[:, None], 1.0, (n, c))
    sigma_sqrt = (np.arange(1, d + 1, dtype=np.float64) ** (-1.2 / 2)).astype(np.float32)
    x = rng.standard_normal((int(rows.sum()), d), dtype=np.float32)  # Σ is diagonal: x = v_k + Σ^½ z
    x *= sigma_sqrt
    y = np.empty(int(rows.sum()), np.int64)
    ends = np.cumsum(rows)
    for k in range(n):
        s = slice(ends[k] - rows[k], ends[k])
        x[s] += v[k].astype(np.float32)
        y[s] = np.argmax(x[s].astype(np.float64) @ w[k] + b[k], axis=1)  # argmax softmax(z) = argmax z
    return x, y


def _refuse_synthetic_beyond_memory(n: int, train_rows: float, cfg: Dict[str, Any]) -> None:
    """Refuse a synthetic pool whose features (float32, train and test) and device models cannot fit."""
    rows = train_rows * (1 + cfg["test_fraction"]) + n
    refuse_if_too_big(rows * 4 * (SYNTHETIC_DIM + 4) + n * 8.0 * SYNTHETIC_DIM * (SYNTHETIC_CLASSES + 2),
                      f"dataset 'synthetic' with config fields 'num_clients' = {n} and 'samples_per_client' = "
                      f"{cfg['samples_per_client']} ({rows:.3g} rows of {SYNTHETIC_DIM} features)",
                      "use fewer clients, or a smaller samples_per_client or dataset_params max_samples")


def _load_synthetic(params: Dict[str, Any], cfg: Dict[str, Any], rng: np.random.Generator) -> DataPool:
    for p in ("alpha", "beta"):  # std of a normal draw: numpy refuses -0.0 ("scale < 0") as it does -1
        v = params[p]
        if real_in(v, 0.0, SYNTHETIC_MAX_SPREAD) is None:
            allowed = reals_text(0.0, SYNTHETIC_MAX_SPREAD, given=v)
            raise ValueError(f"dataset parameter {p!r} = {short(v)} for 'synthetic' (config field "
                             f"'dataset_params.{p}') is invalid; allowed: {allowed} (FedProx and q-FFL use 0 to 1; "
                             f"beyond {SYNTHETIC_MAX_SPREAD:g} the features or logits overflow)")
    cap = params["max_samples"]
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise ValueError(f"dataset parameter 'max_samples' = {cap!r} for 'synthetic'; allowed: None or an "
                         f"integer >= 1")
    n, per = cfg["num_clients"], cfg["samples_per_client"]
    if per is not None:
        per = per if cap is None else min(per, cap)
        _refuse_synthetic_beyond_memory(n, float(n) * per, cfg)  # before an int64 array of a huge size
        train = np.full(n, per, np.int64)
    else:
        train = rng.lognormal(4.0, 2.0, n).astype(np.int64) + 50
        if cap is not None:
            train = np.minimum(train, cap)
        _refuse_synthetic_beyond_memory(n, float(np.sum(train, dtype=np.float64)), cfg)
    test = _test_sizes(train, cfg["test_fraction"])
    x, y = generate_synthetic(train, test, float(params["alpha"]), float(params["beta"]), rng)
    return DataPool(x=x, y=y, num_classes=SYNTHETIC_CLASSES, input_shape=(SYNTHETIC_DIM,),
                    device_sizes=train + test, device_train_sizes=train)


DATASETS.register("synthetic")(DataSource(
    load=_load_synthetic, defaults={"alpha": 1.0, "beta": 1.0, "max_samples": None}, natural=True))


def _load_idx_dataset(dataset: str, params: Dict[str, Any]) -> DataPool:
    files = locate_dataset(dataset, params["root"], params["download"])
    x_tr, y_tr, x_te, y_te = (read_idx(p) for p in files)
    for x, y, p in ((x_tr, y_tr, files[0]), (x_te, y_te, files[2])):
        if x.ndim != 3 or y.ndim != 1 or x.shape[0] != y.shape[0]:
            raise damaged(p, f"expected images (M, H, W) with M labels beside them, got {x.shape} and {y.shape}")
    x, y = concat_idx_cached(tuple(file_key(p) for p in files))
    mean, std = NORMALISATION[dataset]
    return DataPool(x=x, y=y, num_classes=10, input_shape=(1,) + x.shape[2:], scale=1.0 / 255.0,
                    mean=mean, std=std)


def load_idx_pool(dataset: str, root: Optional[str] = None, download: bool = False) -> Tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST or MNIST as uint8 images (70000, 1, 28, 28) and int64 labels (train then test files)."""
    pool = _load_idx_dataset(dataset, {"root": root, "download": download})
    return pool.x, pool.y


def _load_cifar10(params: Dict[str, Any], cfg: Dict[str, Any], rng: np.random.Generator) -> DataPool:
    files = locate_dataset("cifar10", params["root"], params["download"])
    x, y = read_cifar_cached(tuple(file_key(p) for p in files))
    mean, std = NORMALISATION["cifar10"]
    return DataPool(x=x, y=y, num_classes=10, input_shape=(3, 32, 32), scale=1.0 / 255.0, mean=mean, std=std)


_FILE_PARAMS = {"root": None, "download": False}
DATASETS.register("fashion_mnist")(DataSource(
    load=lambda params, cfg, rng: _load_idx_dataset("fashion_mnist", params), defaults=dict(_FILE_PARAMS)))
DATASETS.register("mnist")(DataSource(
    load=lambda params, cfg, rng: _load_idx_dataset("mnist", params), defaults=dict(_FILE_PARAMS)))
DATASETS.register("cifar10")(DataSource(load=_load_cifar10, defaults=dict(_FILE_PARAMS)))
