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
@pytest.mark.slow
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


# --- saved models, checkpoints and replay buffers ------------------------------------------------------
def _scripts():
    import importlib.util
    import sys

    root = Path(__file__).resolve().parents[1]
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    import evaluate

    if "train_agent" not in sys.modules:
        spec = importlib.util.spec_from_file_location("train_agent", root / "train_agent.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["train_agent"] = module
        spec.loader.exec_module(module)
    return evaluate, sys.modules["train_agent"]


@pytest.fixture(scope="module")
def favor_run(tmp_path_factory):
    """A 40-step FAVOR run on the tiny preset with checkpoints (and replay buffers) at steps 20 and 40."""
    _, train_agent = _scripts()
    runs = tmp_path_factory.mktemp("runs")
    return train_agent.main(["--algo", "favor", "--env", "tiny", "--n-timesteps", "40", "--runs-dir", str(runs),
                             "--name", "f", "--eval-freq", "0", "--save-freq", "20", "--no-progress-bar",
                             "--verbose", "0", "--hyperparams", "learning_starts=10", "batch_size=8",
                             "policy_kwargs={net_arch: [16]}"])


def _poison_zip(path: Path, marker: Path, key: str = "exploration_rng") -> None:
    """Replace the pickled ``data`` entry ``key`` of the SB3 zip ``path`` by one that creates ``marker``."""
    import base64
    import json
    import zipfile

    with zipfile.ZipFile(path) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    data = json.loads(entries["data"])
    assert ":serialized:" in data[key]
    data[key][":serialized:"] = base64.b64encode(pickle.dumps(Payload(marker))).decode()
    entries["data"] = json.dumps(data).encode()
    with zipfile.ZipFile(path, "w") as z:
        for n, b in entries.items():
            z.writestr(n, b)


def _copy_run(run: Path, dest: Path) -> Path:
    import shutil

    shutil.copytree(run, dest / run.name)
    return dest / run.name


def test_own_models_checkpoints_and_buffers_load_through_the_safe_path(favor_run, monkeypatch):
    from agents.favor import DoubleDQN
    from agents.saved_models import TRUST_ENV, load_model, load_replay_buffer

    monkeypatch.delenv(TRUST_ENV, raising=False)
    ckpt = favor_run / "checkpoints" / "ckpt_40_steps.zip"
    model = load_model(DoubleDQN, ckpt, device="cpu")
    load_replay_buffer(model, favor_run / "checkpoints" / "ckpt_replay_buffer_40_steps.pkl")
    plain = DoubleDQN.load(ckpt, device="cpu")  # SB3's own unpickler: the same objects
    plain.load_replay_buffer(favor_run / "checkpoints" / "ckpt_replay_buffer_40_steps.pkl")
    assert model.num_timesteps == plain.num_timesteps == 40
    assert model.exploration_rate == plain.exploration_rate
    assert model.exploration_rng.bit_generator.state == plain.exploration_rng.bit_generator.state
    assert np.array_equal(model.replay_buffer.observations, plain.replay_buffer.observations)
    assert model.replay_buffer.pos == plain.replay_buffer.pos
    assert model.observation_space == plain.observation_space and model.action_space == plain.action_space


def test_evaluate_refuses_a_model_zip_whose_data_runs_code(favor_run, tmp_path, monkeypatch):
    from agents.saved_models import TRUST_ENV

    evaluate, _ = _scripts()
    monkeypatch.delenv(TRUST_ENV, raising=False)
    run = _copy_run(favor_run, tmp_path)
    marker = tmp_path / "ran"
    _poison_zip(run / "model.zip", marker)
    argv = ["--env", "tiny", "--rounds", "2", "--seeds", "0", "--no-progress", "--no-plots", "--policy", str(run),
            "--out", str(tmp_path / "eval")]
    with pytest.raises(ValueError, match=r"model\.zip.*'exploration_rng'.*io\.open.*--trust-file"):
        evaluate.main(argv)
    assert not marker.exists()


def test_trust_file_is_the_explicit_opt_in(favor_run, tmp_path, monkeypatch):
    """With the opt-in, SB3's own unpickler reads the file, and runs what it names (so it is for trusted files)."""
    from agents.favor import DoubleDQN
    from agents.saved_models import TRUST_ENV, load_model

    monkeypatch.delenv(TRUST_ENV, raising=False)
    path = tmp_path / "m.zip"
    path.write_bytes((favor_run / "model.zip").read_bytes())
    marker = tmp_path / "ran"
    _poison_zip(path, marker)
    with pytest.raises(ValueError, match="--trust-file"):
        load_model(DoubleDQN, path, device="cpu")
    assert not marker.exists()
    monkeypatch.setenv(TRUST_ENV, "1")  # what --trust-file sets
    load_model(DoubleDQN, path, device="cpu")
    assert marker.exists()


@pytest.mark.parametrize("poisoned", ["checkpoint", "replay buffer"])
def test_resume_refuses_a_checkpoint_or_replay_buffer_that_runs_code(favor_run, tmp_path, monkeypatch, poisoned):
    from agents.saved_models import TRUST_ENV

    _, train_agent = _scripts()
    monkeypatch.delenv(TRUST_ENV, raising=False)
    run = _copy_run(favor_run, tmp_path)
    marker = tmp_path / "ran"
    if poisoned == "checkpoint":
        _poison_zip(run / "checkpoints" / "ckpt_40_steps.zip", marker)
    else:
        buf = run / "checkpoints" / "ckpt_replay_buffer_40_steps.pkl"
        buf.write_bytes(pickle.dumps({"buffer": Payload(marker)}))
    with pytest.raises(ValueError, match=r"ckpt_.*40_steps.*io\.open.*--trust-file"):
        train_agent.main(["--name", "f", "--runs-dir", str(tmp_path), "--resume", "--n-timesteps", "60",
                          "--no-progress-bar", "--verbose", "0"])
    assert not marker.exists()


def test_zoo_trained_agent_is_read_as_data_first(favor_run, tmp_path, monkeypatch):
    """``python -m agents.training.zoo -i model.zip`` hands the zip to rl-zoo3 (SB3's loader) only once the
    restricted unpickler has admitted every pickled entry (and ``replay_buffer.pkl`` beside it)."""
    pytest.importorskip("rl_zoo3", reason="the optional extra 'zoo' is not installed: pip install '.[zoo]'")
    from agents.training.zoo import check_trained_agent

    good = tmp_path / "good.zip"
    good.write_bytes((favor_run / "model.zip").read_bytes())
    assert check_trained_agent(["--algo", "favor", "-i", str(good)]) == ["--algo", "favor", "-i", str(good)]
    bad = tmp_path / "bad" / "model.zip"
    bad.parent.mkdir()
    bad.write_bytes((favor_run / "model.zip").read_bytes())
    marker = tmp_path / "ran"
    _poison_zip(bad, marker)
    with pytest.raises(ValueError, match=r"trained agent .*'exploration_rng'.*--trust-file"):
        check_trained_agent(["-i", str(bad)])
    (good.parent / "replay_buffer.pkl").write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(ValueError, match=r"replay_buffer\.pkl.*io\.open.*--trust-file"):
        check_trained_agent([f"--trained-agent={good}"])
    assert not marker.exists()
    assert check_trained_agent(["-i", str(bad), "--trust-file"]) == ["-i", str(bad)]  # the opt-in
