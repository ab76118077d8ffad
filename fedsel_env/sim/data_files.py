"""Reading data sets from local files (docs/SPEC.md §3.1): idx images and labels (MNIST, Fashion-MNIST), plain
or gzip'ed, and CIFAR-10's python-pickle batches; where to look for them, and what to say when they are
not there. ``fedsel_env/sim/data.py`` turns what is read here into the ``DATASETS`` sources.

Decoded files are cached in-process (keyed on path, modification time and size), so building an
environment a second time does not decode Fashion-MNIST again.
"""
from __future__ import annotations

import functools
import gzip
import os
import zlib
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np

from .safe_pickle import NUMPY_GLOBALS, RefusedGlobal, restricted_load

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
CIFAR10_FILES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)

class DatasetNotFoundError(ValueError):
    """A dataset's files are in none of the folders searched."""



# --- files: idx (MNIST, Fashion-MNIST) and CIFAR-10 pickles -----------------------------------------

_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def file_key(path: Path) -> Tuple[str, int, int]:
    st = path.stat()
    return str(path.resolve()), st.st_mtime_ns, st.st_size


#: What to do about a damaged data file (every reader's error ends with it).
REPLACE_FILE = ("the file is damaged or was cut short (an interrupted copy or download): delete it and copy it "
                "again, or let torchvision fetch the data set afresh with dataset_params={'root': '<folder>', "
                "'download': True}")


def damaged(path: Union[str, os.PathLike], problem: str) -> ValueError:
    """The error for a data file that cannot be decoded: the file, what is wrong, and the fix."""
    return ValueError(f"data file {str(path)!r}: {problem}; {REPLACE_FILE}")


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ValueError(f"cannot read data file {path!r}: {e.strerror or e}") from None
    if not path.endswith(".gz"):
        return raw
    # One zlib call is faster than gzip's chunked reader; a multi-member file falls back to gzip.
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(raw)
    except zlib.error as e:
        raise damaged(path, f"not a valid gzip file ({e})") from None
    if not d.eof:
        raise damaged(path, f"truncated: its {len(raw)} bytes end before the gzip end-of-stream marker")
    if not d.unused_data:
        return out
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as e:
        raise damaged(path, f"a later gzip member is damaged or truncated ({e})") from None


@functools.lru_cache(maxsize=16)
def _read_idx_cached(path: str, mtime_ns: int, size: int) -> np.ndarray:
    data = _read_bytes(path)
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise damaged(path, f"not an idx file (bad magic number {data[:4].hex()!r})")
    ndim = data[3]
    header = 4 + 4 * ndim
    if ndim == 0 or len(data) < header:
        raise damaged(path, "truncated idx header")
    shape = tuple(int(s) for s in np.frombuffer(data, ">i4", ndim, offset=4))
    dtype = np.dtype(_IDX_DTYPES[data[2]])
    expected = header + int(np.prod(shape)) * dtype.itemsize
    if len(data) != expected:
        raise damaged(path, f"idx header promises shape {shape} ({expected} bytes), file has {len(data)}")
    arr = np.frombuffer(data, dtype, offset=header).reshape(shape)
    return arr  # frombuffer over bytes is read-only, so the cached array cannot be altered


def read_idx(path: Union[str, os.PathLike]) -> np.ndarray:
    """Read an idx file (plain or .gz) into a read-only array; cached on (path, mtime, size).

    :raises ValueError: when the file is not a well-formed idx file.
    """
    return _read_idx_cached(*file_key(Path(path)))


def _find_files(folders: Sequence[Path], names: Sequence[str], gz_ok: bool) -> Tuple[Optional[List[Path]], List[str]]:
    """The first folder holding every file of ``names`` (each plain or .gz): (paths, report per folder)."""
    report = []
    for folder in folders:
        if not folder.is_dir():
            report.append(f"{folder} (no such folder)")
            continue
        found, missing = [], []
        for nm in names:
            options = [folder / nm] + ([folder / f"{nm}.gz"] if gz_ok else [])
            hit = next((p for p in options if p.is_file()), None)
            (found if hit else missing).append(hit or nm)
        if not missing:
            return found, report
        report.append(f"{folder} (missing {', '.join(missing)})")
    return None, report


def _candidate_folders(dataset: str, root: Optional[str]) -> List[Path]:
    """Where to look: a root the user names is the only place (``<root>/<sub>``, then ``<root>``); without
    one, Debian's Fashion-MNIST."""
    sub = {"fashion_mnist": "FashionMNIST/raw", "mnist": "MNIST/raw", "cifar10": "cifar-10-batches-py"}[dataset]
    if root is not None:
        r = Path(root).expanduser()
        return [r / sub, r]
    return [DEBIAN_FASHION_MNIST] if dataset == "fashion_mnist" else []


def _torchvision_download(dataset: str, root: str) -> None:
    """Fill ``root`` with torchvision's downloader (network needed)."""
    import torchvision.datasets as tvd

    cls = {"fashion_mnist": tvd.FashionMNIST, "mnist": tvd.MNIST, "cifar10": tvd.CIFAR10}[dataset]
    cls(root=str(Path(root).expanduser()), train=True, download=True)


def locate_dataset(dataset: str, root: Optional[str] = None, download: bool = False) -> List[Path]:
    """The files of ``dataset`` (``fashion_mnist``, ``mnist`` or ``cifar10``), downloading only if asked.

    With a ``root``, only ``<root>/FashionMNIST/raw`` (``MNIST/raw``, ``cifar-10-batches-py``) and
    ``<root>`` are searched: a root the user names is never silently replaced by another copy.
    Without one, Fashion-MNIST is looked for in Debian's ``/usr/share/datasets/fashion-mnist``.

    :raises DatasetNotFoundError: naming every folder searched and how to get the data.
    """
    if root is not None and not isinstance(root, (str, os.PathLike)):
        raise ValueError(f"dataset parameter 'root' = {root!r} for {dataset!r}; allowed: None or a folder path")
    if not isinstance(download, bool):
        raise ValueError(f"dataset parameter 'download' = {download!r} for {dataset!r}; allowed: True or False")
    if download and root is None:
        raise ValueError(f"dataset parameter 'download' = True for {dataset!r} needs a 'root' folder to fill")
    names, gz_ok = (CIFAR10_FILES, False) if dataset == "cifar10" else (IDX_FILES, True)
    folders = _candidate_folders(dataset, root)
    files, report = _find_files(folders, names, gz_ok)
    if files is None and download:
        _torchvision_download(dataset, root)
        files, report = _find_files(folders, names, gz_ok)
    if files is None:
        searched = "; ".join(report) if report else "no folder (no 'root' was given)"
        ways = []
        if root is not None:
            ways.append(f"put the missing files in {str(Path(root).expanduser())!r} (only the root you name "
                        f"is searched)")
        if dataset == "fashion_mnist":
            ways.append(f"install Debian's package (`apt-get install dataset-fashion-mnist`, which puts the "
                        f"files in {DEBIAN_FASHION_MNIST})" + (" and drop 'root'" if root is not None else ""))
        ways.append("pass dataset_params={'root': '<folder>', 'download': True} to let torchvision download "
                    "it into <folder> (network needed)")
        if root is None:
            ways.append("put the files in a folder and pass dataset_params={'root': '<folder>'}")
        raise DatasetNotFoundError(
            f"dataset {dataset!r}: files {list(names)}{' (plain or .gz)' if gz_ok else ''} not found; searched: "
            f"{searched}. To get the data: " + "; or ".join(ways) + ".")
    return files


@functools.lru_cache(maxsize=4)
def concat_idx_cached(keys: Tuple[Tuple[str, int, int], ...]) -> Tuple[np.ndarray, np.ndarray]:
    x_tr, y_tr, x_te, y_te = (_read_idx_cached(*k) for k in keys)
    x = np.concatenate([x_tr, x_te])[:, None, :, :]
    y = np.concatenate([y_tr, y_te]).astype(np.int64)
    if y.size and (y.min() < 0 or y.max() > 9):
        raise damaged(keys[1][0] if (y_tr.size and (y_tr.min() < 0 or y_tr.max() > 9)) else keys[3][0],
                      f"labels must lie in 0..9, got {y.min()}..{y.max()}")
    x.flags.writeable = False
    y.flags.writeable = False
    return x, y


def _read_pickle(path: str):
    """One CIFAR-10 batch (the official python pickle), read by a restricted unpickler: numpy arrays,
    dicts, lists, strings, bytes and numbers only, so a crafted file cannot run code."""
    try:
        with open(path, "rb") as f:
            return restricted_load(f, NUMPY_GLOBALS, encoding="bytes")
    except OSError as e:
        raise ValueError(f"cannot read data file {path!r}: {e.strerror or e}") from None
    except RefusedGlobal as e:
        raise ValueError(f"data file {path!r} is not a CIFAR-10 batch: {e}; refused. Use the official batches "
                         f"(dataset_params={{'root': '<folder>', 'download': True}} fetches them)") from None
    except Exception as e:  # a cut or garbled pickle: EOFError, UnpicklingError, ValueError, ...
        raise damaged(path, f"not a readable CIFAR-10 pickle ({type(e).__name__}: {e})") from None


@functools.lru_cache(maxsize=2)
def read_cifar_cached(keys: Tuple[Tuple[str, int, int], ...]) -> Tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for path, _, _ in keys:
        batch = _read_pickle(path)
        data = batch.get(b"data") if isinstance(batch, dict) else None
        labels = batch.get(b"labels") if isinstance(batch, dict) else None
        try:
            data, labels = np.asarray(data, np.uint8), np.asarray(labels, np.int64)
        except (TypeError, ValueError, OverflowError):
            data = None
        if data is None or data.ndim != 2 or data.shape[1:] != (3072,) or labels.shape != (len(data),):
            raise damaged(path, "not a CIFAR-10 batch (expected a dict of b'data' (M, 3072) uint8 and M b'labels')")
        if labels.size and (labels.min() < 0 or labels.max() > 9):
            raise damaged(path, f"CIFAR-10 labels must lie in 0..9, got {labels.min()}..{labels.max()}")
        xs.append(data.reshape(-1, 3, 32, 32))
        ys.append(labels)
    x, y = np.concatenate(xs), np.concatenate(ys)
    x.flags.writeable = False
    y.flags.writeable = False
    return x, y
