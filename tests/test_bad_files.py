"""Bad data files (issue #15, items 1 and 2): each is a ValueError naming the file and the fix, never a
traceback from deep inside gzip or pickle (``tests/test_bad_config_files.py`` does YAML and run folders).

- truncated or garbled idx files (plain and .gz) and CIFAR-10 pickles;
- a dataset ``root`` the user names is the only place looked (no silent fallback to Debian's copy).
"""
from __future__ import annotations

import gzip
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from fedsel_env.config import make_config
from fedsel_env.sim import data_files
from fedsel_env.sim.data import DatasetNotFoundError, build_federated_data, read_idx

IDX_NAMES = data_files.IDX_FILES


def write_idx(path: Path, arr: np.ndarray, gz: bool) -> Path:
    payload = bytes([0, 0, 0x08, arr.ndim]) + np.asarray(arr.shape, ">i4").tobytes() + arr.astype(np.uint8).tobytes()
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(payload))
    else:
        path.write_bytes(payload)
    return path


def fake_mnist(folder: Path, gz: bool = True, n_train: int = 60, n_test: int = 20) -> list:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    xs = rng.integers(0, 256, (n_train + n_test, 28, 28), dtype=np.uint8)
    ys = np.arange(n_train + n_test) % 10
    arrays = (xs[:n_train], ys[:n_train], xs[n_train:], ys[n_train:])
    return [write_idx(folder / name, arr, gz) for name, arr in zip(IDX_NAMES, arrays)]


def build(root: Path, dataset: str = "fashion_mnist"):
    cfg = make_config({"dataset": dataset, "dataset_params": {"root": str(root)}, "num_clients": 4,
                       "clients_per_round": 2, "partition": "iid", "partition_params": {}, "batch_size": 2})
    return build_federated_data(cfg, np.random.default_rng(0))


def assert_names_file_and_fix(err: pytest.ExceptionInfo, path: Path) -> None:
    msg = str(err.value)
    assert str(path) in msg, msg
    assert "copy it again" in msg and "'download': True" in msg, msg


# --- item 1: data files -----------------------------------------------------------------------------
@pytest.mark.skipif(not data_files.DEBIAN_FASHION_MNIST.is_dir(), reason="Debian's dataset-fashion-mnist")
def test_truncated_debian_gz_names_the_file_and_the_fix(tmp_path):
    """The issue's reproduction: the four Debian files, the training images cut to 1,000,000 bytes."""
    for f in data_files.DEBIAN_FASHION_MNIST.iterdir():
        shutil.copy(f, tmp_path / f.name)
    images = tmp_path / "train-images-idx3-ubyte.gz"
    with open(images, "r+b") as f:
        f.truncate(1_000_000)
    from fedsel_env.env import FedSelectEnv

    with pytest.raises(ValueError, match="truncated") as err:
        FedSelectEnv(config={"dataset": "fashion_mnist", "dataset_params": {"root": str(tmp_path)},
                             "model": "logreg"})
    assert_names_file_and_fix(err, images)


@pytest.mark.parametrize("which", range(4))
@pytest.mark.parametrize("gz", [True, False])
def test_truncated_idx_files_name_the_file_and_the_fix(tmp_path, which, gz):
    files = fake_mnist(tmp_path, gz=gz)
    raw = files[which].read_bytes()
    files[which].write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError) as err:
        build(tmp_path)
    assert_names_file_and_fix(err, files[which])


@pytest.mark.parametrize("content", [b"", b"\x1f\x8b", b"not gzip at all", b"\x1f\x8b\x08\x00" + b"\xff" * 40])
def test_garbled_gz_names_the_file(tmp_path, content):
    path = tmp_path / "x-idx1-ubyte.gz"
    path.write_bytes(content)
    with pytest.raises(ValueError) as err:
        read_idx(path)
    assert_names_file_and_fix(err, path)


def test_damaged_second_gzip_member_names_the_file(tmp_path):
    path = write_idx(tmp_path / "x-idx1-ubyte", np.arange(10), gz=True)
    second = gzip.compress(b"\x00" * 100)
    path.write_bytes(path.read_bytes() + second[: len(second) // 2])
    with pytest.raises(ValueError) as err:
        read_idx(path)
    assert_names_file_and_fix(err, path)


def test_idx_labels_out_of_range_name_the_file(tmp_path):
    files = fake_mnist(tmp_path, gz=False)
    write_idx(tmp_path / IDX_NAMES[3], np.full(20, 12), gz=False)
    with pytest.raises(ValueError, match="0..9") as err:
        build(tmp_path)
    assert_names_file_and_fix(err, files[3])


def cifar_folder(root: Path) -> Path:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in data_files.CIFAR10_FILES:
        with open(folder / name, "wb") as f:
            pickle.dump({b"data": rng.integers(0, 256, (10, 3072), dtype=np.uint8), b"labels": list(range(10))}, f)
    return folder


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "a list", "no labels", "short rows", "label 10"])
def test_damaged_cifar_batches_name_the_file_and_the_fix(tmp_path, damage):
    folder = cifar_folder(tmp_path)
    build(tmp_path, "cifar10")  # intact: builds
    path = folder / "data_batch_3"
    raw = path.read_bytes()
    batch = {b"data": np.zeros((10, 3072), np.uint8), b"labels": list(range(10))}
    if damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x80\x04garbage" * 10)
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        if damage == "a list":
            batch = [1, 2, 3]
        elif damage == "no labels":
            del batch[b"labels"]
        elif damage == "short rows":
            batch[b"data"] = np.zeros((10, 100), np.uint8)
        else:
            batch[b"labels"] = [10] * 10
        path.write_bytes(pickle.dumps(batch))
    with pytest.raises(ValueError) as err:
        build(tmp_path, "cifar10")
    assert_names_file_and_fix(err, path)


# --- item 2: a root the user names is the only place looked -------------------------------------------
def test_explicit_root_holding_some_files_is_not_replaced_by_another_copy(tmp_path, monkeypatch):
    """A root with 2 of the 4 files used to build silently from Debian's copy; now it lists what is missing."""
    debian = tmp_path / "debian"
    fake_mnist(debian)  # a complete copy where Debian's would be
    monkeypatch.setattr(data_files, "DEBIAN_FASHION_MNIST", debian)
    assert build_federated_data(make_config({"dataset": "fashion_mnist", "num_clients": 4, "clients_per_round": 2,
                                             "partition": "iid", "partition_params": {}}),
                                np.random.default_rng(0)).num_clients == 4  # no root: Debian's copy
    root = tmp_path / "mine"
    for f in fake_mnist(root)[2:]:
        f.unlink()  # the two test files are missing
    with pytest.raises(DatasetNotFoundError) as err:
        build(root)
    msg = str(err.value)
    assert "missing t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte" in msg and str(root) in msg
    assert "searched: " + str(root / "FashionMNIST" / "raw") in msg
    assert str(debian) not in msg.split("To get the data")[0]  # not searched
    assert f"put the missing files in {str(root)!r}" in msg
