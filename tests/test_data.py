"""Data sources and the federated dataset (docs/SPEC.md §3.1): loaders, Synthetic(α, β), per-client splits."""
from __future__ import annotations

import gzip
import os
import pickle
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from fedsel_env.sim import data as data_mod
from fedsel_env.sim import data_files
from fedsel_env.config import make_config
from fedsel_env.sim.data import (DATASETS, DatasetNotFoundError, FederatedData, build_federated_data,
                             generate_synthetic, load_idx_pool, read_idx)
from fedsel_env.sim.partitions import test_size

FMNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                "t10k-labels-idx1-ubyte")


def build(seed=0, **overrides) -> FederatedData:
    overrides.setdefault("clients_per_round", min(5, overrides.get("num_clients", 20)))
    return build_federated_data(make_config(overrides), np.random.default_rng(seed))


def histograms(y: torch.Tensor, offsets: np.ndarray, num_classes: int) -> np.ndarray:
    y = y.numpy()
    return np.stack([np.bincount(y[a:b], minlength=num_classes) for a, b in zip(offsets[:-1], offsets[1:])])


def write_idx(path: Path, arr: np.ndarray, gz: bool) -> None:
    header = bytes([0, 0, 0x08, arr.ndim]) + np.asarray(arr.shape, ">i4").tobytes()
    payload = header + arr.astype(np.uint8).tobytes()
    if gz:
        with gzip.open(str(path) + ".gz", "wb") as f:
            f.write(payload)
    else:
        path.write_bytes(payload)


def write_fake_mnist(folder: Path, n_train=60, n_test=20, gz=True, seed=0) -> tuple:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    xs = rng.integers(0, 256, (n_train + n_test, 28, 28), dtype=np.uint8)
    xs[0] = 0
    xs[1] = 255
    ys = np.arange(n_train + n_test) % 10
    for name, arr in zip(FMNIST_FILES, (xs[:n_train], ys[:n_train], xs[n_train:], ys[n_train:])):
        write_idx(folder / name, arr, gz)
    return xs, ys


# --- digits, the embedded default -------------------------------------------------------------------

def test_digits_default_federation_layout():
    cfg = make_config()
    fd = build_federated_data(cfg, np.random.default_rng(0))
    n = cfg["num_clients"]
    assert fd.input_shape == (1, 8, 8) and fd.num_classes == 10 and fd.num_clients == n
    assert fd.x_train.dtype == torch.float32 and fd.y_train.dtype == torch.int64
    assert fd.x_train.shape[1:] == (1, 8, 8) and fd.x_test.shape[1:] == (1, 8, 8)
    assert 0.0 <= fd.x_train.min() and fd.x_train.max() <= 1.0 and fd.x_train.max() == 1.0  # /16 scaling
    assert fd.train_offsets[0] == 0 and fd.train_offsets[-1] == len(fd.y_train) == fd.x_train.shape[0]
    assert fd.test_offsets[-1] == len(fd.y_test)
    # the whole pool split evenly: 74 train + round(0.2 * 74) = 15 test each fits 20 x 89 <= 1797
    assert fd.num_samples.tolist() == [74] * n and fd.num_test_samples.tolist() == [15] * n
    x0, y0 = fd.client_train(3)
    assert torch.equal(y0, fd.y_train[fd.train_offsets[3]:fd.train_offsets[4]]) and len(x0) == 74


def test_same_seed_same_federation_other_seed_differs():
    a, b, c = build(5, samples_per_client=30), build(5, samples_per_client=30), build(6, samples_per_client=30)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert not torch.equal(a.x_train, c.x_train)


def test_no_pool_sample_is_given_twice(tmp_path):
    xs, _ = write_fake_mnist(tmp_path, n_train=300, n_test=100)  # 400 distinct random images
    fd = build(1, dataset="fashion_mnist", dataset_params={"root": str(tmp_path)}, num_clients=7,
               partition="dirichlet", partition_params={"alpha": 0.3}, quantity_skew=1.0, batch_size=4)
    rows = torch.cat([fd.x_train, fd.x_test]).reshape(len(fd.x_train) + len(fd.x_test), -1)
    assert torch.unique(rows, dim=0).shape[0] == rows.shape[0]
    assert 400 - 7 <= rows.shape[0] <= 400


def test_train_and_test_follow_the_same_label_distribution():
    fd = build(2, num_clients=10, samples_per_client=120, test_fraction=0.25)
    tr = histograms(fd.y_train, fd.train_offsets, 10)
    te = histograms(fd.y_test, fd.test_offsets, 10)
    assert (tr.argmax(axis=1) == te.argmax(axis=1)).all()
    assert (tr.max(axis=1) == 96).all()  # sigma 0.8 of the 150 partitioned, split 120 / 30 by label
    assert (te.max(axis=1) == 24).all()
    # stratified: each label's test count is its share of the client's 150 samples, to within one
    assert np.abs(te - (tr + te) * 30 / 150).max() < 1.0


def test_quantity_skew_gives_unequal_sizes_that_sum_correctly():
    fd = build(0, num_clients=8, samples_per_client=40, quantity_skew=1.0, batch_size=10)
    sizes = fd.num_samples
    assert sizes.sum() == 320 and sizes.min() >= 10 and sizes.max() > 2 * sizes.min()
    assert fd.num_test_samples.tolist() == [test_size(int(n), 0.2) for n in sizes]
    whole = build(0, quantity_skew=2.0, partition="iid", partition_params={})
    assert whole.num_samples.sum() + whole.num_test_samples.sum() <= 1797
    assert whole.num_samples.sum() + whole.num_test_samples.sum() > 1797 - 30
    assert whole.num_samples.min() >= 10


def test_pool_too_small_names_the_field_and_what_fits():
    with pytest.raises(ValueError, match=r"'samples_per_client' = 100 is too large.*1797.*<= 74 fits"):
        build(0, samples_per_client=100)
    with pytest.raises(ValueError, match=r"'num_clients' = 1000 is too large"):
        build(0, num_clients=1000)


def test_unknown_names_are_rejected_with_the_allowed_ones():
    with pytest.raises(ValueError, match=r"unknown dataset 'fmnist'.*cifar10.*digits.*fashion_mnist.*mnist"):
        build(dataset="fmnist")
    with pytest.raises(ValueError, match=r"unknown dataset parameter.*\['rooot'\].*allowed: \['download', 'root'\]"):
        build(dataset="fashion_mnist", dataset_params={"rooot": "/x"})
    with pytest.raises(ValueError, match=r"unknown dataset parameter.*allowed: \[\]"):
        build(dataset_params={"root": "/x"})
    with pytest.raises(ValueError, match=r"unknown partition 'niid'.*dirichlet.*iid"):
        build(partition="niid")
    with pytest.raises(ValueError, match=r"unknown partition parameter.*\['s'\].*shards_per_client"):
        build(partition="shards", partition_params={"s": 2})
    with pytest.raises(ValueError, match=r"'natural' is only valid for \['synthetic'\]"):
        build(partition="natural", partition_params={})


# --- synthetic ---------------------------------------------------------------------------------------

def synthetic_cfg(**kw):
    base = {"dataset": "synthetic", "partition": "natural", "partition_params": {}, "num_clients": 30}
    return {**base, **kw}


def test_synthetic_shapes_sizes_labels_and_determinism():
    fd = build(0, **synthetic_cfg())
    assert fd.input_shape == (60,) and fd.x_train.shape[1:] == (60,) and fd.num_classes == 10
    assert fd.num_clients == 30 and (fd.num_samples >= 50).all()
    assert fd.y_train.min() >= 0 and fd.y_train.max() <= 9
    assert fd.num_test_samples.tolist() == [test_size(int(n), 0.2) for n in fd.num_samples]
    assert np.median(fd.num_samples) > 60  # int(lognormal(4, 2)) + 50 has median e^4 + 50 ~ 105
    again, other = build(0, **synthetic_cfg()), build(1, **synthetic_cfg())
    assert torch.equal(fd.x_train, again.x_train) and torch.equal(fd.y_train, again.y_train)
    assert not np.array_equal(fd.num_samples, other.num_samples)


def test_synthetic_max_samples_and_samples_per_client():
    capped = build(0, **synthetic_cfg(dataset_params={"max_samples": 80}))
    assert capped.num_samples.max() == 80 and capped.num_samples.min() >= 50
    fixed = build(0, **synthetic_cfg(samples_per_client=25))
    assert fixed.num_samples.tolist() == [25] * 30 and fixed.num_test_samples.tolist() == [5] * 30


def test_synthetic_follows_its_generating_process():
    # Covariance of x within a device is diag(j^-1.2).
    x, _ = generate_synthetic(np.array([40000]), np.array([0]), 1.0, 1.0, np.random.default_rng(0))
    var = x.astype(np.float64).var(axis=0)
    expected = np.arange(1, 61) ** -1.2
    assert np.allclose(var, expected, rtol=0.05)
    corr = np.corrcoef(x[:, :5].T.astype(np.float64))
    assert np.abs(corr - np.eye(5)).max() < 0.03
    # beta spreads the devices' input means: the mean of v_k's elements is B_k ~ N(0, beta^2).
    sizes = np.full(300, 200)
    for beta, lo, hi in ((0.0, 0.0, 0.3), (3.0, 2.4, 3.6)):
        x, _ = generate_synthetic(sizes, np.zeros(300, np.int64), 1.0, beta, np.random.default_rng(1))
        device_means = x.reshape(300, 200, 60).mean(axis=(1, 2))
        assert lo <= device_means.std() <= hi
    # y = argmax(x W_k + b_k), with W_k, b_k drawn after u, B, v in that order.
    rng = np.random.default_rng(2)
    x, y = generate_synthetic(np.array([50, 70]), np.array([10, 14]), 0.5, 0.5, rng)
    replay = np.random.default_rng(2)
    u = replay.normal(0.0, 0.5, 2)
    replay.normal(0.0, 0.5, 2)
    replay.normal(0.0, 1.0, (2, 60))
    w = replay.normal(u[:, None, None], 1.0, (2, 60, 10))
    b = replay.normal(u[:, None], 1.0, (2, 10))
    for k, rows in enumerate((slice(0, 60), slice(60, 144))):
        logits = x[rows].astype(np.float64) @ w[k] + b[k]
        assert np.array_equal(y[rows], logits.argmax(axis=1))


def test_synthetic_takes_only_the_natural_partition_and_no_quantity_skew():
    with pytest.raises(ValueError, match=r"partitioned naturally.*partition='natural'"):
        build(0, dataset="synthetic", partition="iid", partition_params={})
    with pytest.raises(ValueError, match=r"'quantity_skew'.*set it to 0"):
        build(0, **synthetic_cfg(quantity_skew=0.5))
    with pytest.raises(ValueError, match=r"'max_samples' = 0"):
        build(0, **synthetic_cfg(dataset_params={"max_samples": 0}))
    with pytest.raises(ValueError, match=r"'alpha' = -1"):
        build(0, **synthetic_cfg(dataset_params={"alpha": -1}))


# --- files: idx and CIFAR-10 ------------------------------------------------------------------------

@pytest.mark.parametrize("gz", [True, False])
def test_idx_reader_round_trip_and_cache(tmp_path, gz):
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    write_idx(tmp_path / "a-idx3-ubyte", arr, gz)
    path = tmp_path / ("a-idx3-ubyte.gz" if gz else "a-idx3-ubyte")
    first = read_idx(path)
    assert np.array_equal(first, arr) and not first.flags.writeable
    assert read_idx(path) is first  # decoded once
    write_idx(tmp_path / "a-idx3-ubyte", arr[::-1].copy(), gz)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert np.array_equal(read_idx(path), arr[::-1])  # a changed file is read again


def test_idx_reader_rejects_corrupt_files(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="not an idx file"):
        read_idx(bad)
    short = tmp_path / "short"
    short.write_bytes(bytes([0, 0, 8, 1]) + np.asarray([10], ">i4").tobytes() + b"\x00" * 3)
    with pytest.raises(ValueError, match=r"promises shape \(10,\)"):
        read_idx(short)


@pytest.mark.parametrize("dataset,sub,gz", [("fashion_mnist", "FashionMNIST/raw", True),
                                            ("fashion_mnist", "", False), ("mnist", "MNIST/raw", False)])
def test_idx_datasets_load_and_standardise(tmp_path, dataset, sub, gz):
    xs, ys = write_fake_mnist(tmp_path / sub if sub else tmp_path, gz=gz)
    fd = build(0, dataset=dataset, dataset_params={"root": str(tmp_path)}, num_clients=4, partition="iid",
               partition_params={}, batch_size=2)
    assert fd.input_shape == (1, 28, 28) and fd.x_train.shape[1:] == (1, 28, 28)
    assert fd.num_samples.sum() + fd.num_test_samples.sum() == 80  # 4 x (16 + 4) of 80 (train + test files)
    mean, std = data_mod.NORMALISATION[dataset]
    lo, hi = (0 - mean[0]) / std[0], (1 - mean[0]) / std[0]
    allx = torch.cat([fd.x_train, fd.x_test])
    assert allx.min().item() == pytest.approx(lo, abs=1e-5) and allx.max().item() == pytest.approx(hi, abs=1e-5)
    pool_x, pool_y = load_idx_pool(dataset, str(tmp_path))
    assert pool_x.shape == (80, 1, 28, 28) and np.array_equal(pool_x[:, 0], xs) and np.array_equal(pool_y, ys)


def test_cifar10_batches_load(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name in data_files.CIFAR10_FILES:
        batch = {b"data": rng.integers(0, 256, (10, 3072), dtype=np.uint8), b"labels": list(range(10))}
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f)
    fd = build(0, dataset="cifar10", dataset_params={"root": str(tmp_path)}, num_clients=5, partition="iid",
               partition_params={}, batch_size=2)
    assert fd.input_shape == (3, 32, 32) and fd.x_train.shape[1:] == (3, 32, 32)
    with open(folder / "data_batch_1", "rb") as f:
        raw = pickle.load(f)[b"data"].reshape(10, 3, 32, 32)
    mean, std = data_mod.NORMALISATION["cifar10"]
    pool = DATASETS["cifar10"].load({"root": str(tmp_path), "download": False}, {}, None)
    expected = (raw[0].astype(np.float32) / 255 - np.array(mean, np.float32)[:, None, None]) \
        / np.array(std, np.float32)[:, None, None]
    assert np.allclose(pool.features(np.array([0]))[0], expected, atol=1e-5)


def test_missing_data_names_the_folders_and_the_two_fixes(tmp_path, monkeypatch):
    monkeypatch.setattr(data_files, "DEBIAN_FASHION_MNIST", tmp_path / "no-debian")
    root = tmp_path / "empty"
    root.mkdir()
    with pytest.raises(DatasetNotFoundError) as err:
        build(dataset="fashion_mnist", dataset_params={"root": str(root)})
    msg = str(err.value)
    assert isinstance(err.value, ValueError)
    for folder in (root / "FashionMNIST" / "raw", root, tmp_path / "no-debian"):
        assert str(folder) in msg
    assert "apt-get install dataset-fashion-mnist" in msg and "'download': True" in msg
    with pytest.raises(DatasetNotFoundError, match=r"no folder \(no 'root' was given\).*'download': True"):
        build(dataset="mnist")
    write_fake_mnist(root, n_train=5, gz=False)
    (root / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DatasetNotFoundError, match=r"missing t10k-labels-idx1-ubyte"):
        build(dataset="fashion_mnist", dataset_params={"root": str(root)})


def test_download_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setattr(data_files, "DEBIAN_FASHION_MNIST", tmp_path / "no-debian")
    calls = []

    def fake_download(dataset, root):  # stands in for torchvision's downloader: no network in tests
        calls.append((dataset, root))
        write_fake_mnist(Path(root) / "FashionMNIST" / "raw")

    monkeypatch.setattr(data_files, "_torchvision_download", fake_download)
    params = {"root": str(tmp_path / "dl")}
    with pytest.raises(DatasetNotFoundError):
        build(dataset="fashion_mnist", dataset_params=params, num_clients=4, partition="iid", partition_params={})
    assert calls == []
    fd = build(dataset="fashion_mnist", dataset_params={**params, "download": True}, num_clients=4,
               partition="iid", partition_params={})
    assert calls == [("fashion_mnist", str(tmp_path / "dl"))] and fd.num_clients == 4
    build(dataset="fashion_mnist", dataset_params={**params, "download": True}, num_clients=4, partition="iid",
          partition_params={})
    assert len(calls) == 1  # found now: no second download
    with pytest.raises(ValueError, match=r"'download' = True .* needs a 'root'"):
        build(dataset="mnist", dataset_params={"download": True})


@pytest.mark.skipif(not data_files.DEBIAN_FASHION_MNIST.is_dir(),
                    reason="needs Debian's dataset-fashion-mnist package (/usr/share/datasets/fashion-mnist); "
                           "CI installs it")
def test_debian_fashion_mnist_loads_and_favor_preset_builds():
    x, y = load_idx_pool("fashion_mnist")
    assert x.shape == (70000, 1, 28, 28) and x.dtype == np.uint8
    assert np.bincount(y).tolist() == [7000] * 10
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fd = build_federated_data(make_config(preset="favor_fmnist"), np.random.default_rng(0))
    assert fd.num_samples.tolist() == [600] * 100 and fd.num_test_samples.tolist() == [100] * 100
    tr = histograms(fd.y_train, fd.train_offsets, 10)
    te = histograms(fd.y_test, fd.test_offsets, 10)
    assert (tr.max(axis=1) == 480).all() and (te.max(axis=1) == 80).all()  # sigma = 0.8 of 600 and of 100
    assert abs(fd.x_train.mean().item()) < 0.02 and abs(fd.x_train.std().item() - 1) < 0.02
