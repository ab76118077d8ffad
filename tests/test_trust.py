"""Trust boundaries (issue #30): files a user may have downloaded never run code when read.

Each payload test writes a pickle whose ``__reduce__`` would create a marker file in ``tmp_path`` when
unpickled, and asserts that the marker is absent after fedsel has read (and refused) the file.
"""
from __future__ import annotations

import builtins
import pickle
from pathlib import Path

import numpy as np
import pytest

from fedsel_env.config import make_config
from fedsel_env.sim import data_files
from fedsel_env.sim.data import build_federated_data


class Payload:
    """Unpickling this calls ``open(marker, "w")``: the marker file appears if the loader runs it."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return builtins.open, (self.marker, "w")


# --- CIFAR-10 batches ---------------------------------------------------------------------------------
def _cifar_folder(root: Path) -> Path:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in data_files.CIFAR10_FILES:
        batch = {b"batch_label": b"x", b"data": rng.integers(0, 256, (10, 3072), dtype=np.uint8),
                 b"labels": list(range(10)), b"filenames": [b"f%d.png" % i for i in range(10)]}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    return folder


def _build_cifar(root: Path):
    cfg = make_config({"dataset": "cifar10", "dataset_params": {"root": str(root)}, "num_clients": 4,
                       "clients_per_round": 2, "partition": "iid", "partition_params": {}, "batch_size": 2})
    return build_federated_data(cfg, np.random.default_rng(0))


def test_cifar_batch_with_a_payload_is_refused_without_running_it(tmp_path):
    folder = _cifar_folder(tmp_path)
    assert _build_cifar(tmp_path).num_classes == 10  # the plain batches (numpy arrays, lists, bytes) load
    marker = tmp_path / "ran"
    batch = {b"data": np.zeros((10, 3072), np.uint8), b"labels": list(range(10)), b"x": Payload(marker)}
    (folder / "data_batch_2").write_bytes(pickle.dumps(batch))
    data_files.read_cifar_cached.cache_clear()
    with pytest.raises(ValueError, match=r"data_batch_2.*io\.open.*refused"):
        _build_cifar(tmp_path)
    assert not marker.exists()


# --- rl-zoo3 config files -----------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["policy_kwargs", "normalize"])
def test_zoo_does_not_eval_strings_of_its_config_file(tmp_path, key):
    """rl-zoo3 ``eval``s string-valued policy_kwargs / normalize / ... of ``-conf``; ``agents.training.zoo`` refuses."""
    pytest.importorskip("rl_zoo3", reason="the optional extra 'zoo' is not installed: pip install '.[zoo]'")
    import os
    import subprocess
    import sys

    import yaml

    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w')"
    value = f"dict(net_arch=[8], x={code})" if key == "policy_kwargs" else code
    conf = tmp_path / "conf.yml"
    conf.write_text(yaml.safe_dump({"fedsel/FedSelect-Tiny-v0": {
        "policy": "MlpPolicy", "n_timesteps": 50, "learning_starts": 10,
        "env_kwargs": {"action_mode": "one", "observation": "flat", "flat_parts": ["weights"]}, key: value}}))
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-m", "agents.training.zoo", "--algo", "favor", "--env",
                          "fedsel/FedSelect-Tiny-v0", "-conf", str(conf), "-f", str(tmp_path / "logs"),
                          "--num-threads", "1", "--verbose", "0"], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}, timeout=300)
    assert not marker.exists()
    assert out.returncode != 0
    assert key in out.stderr and "Traceback" not in out.stderr, out.stderr[-2000:]
