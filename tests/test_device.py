"""The simulator on any torch device (issue #18): the ``device`` field, its resolution, the chunking, the plumbing.

On the CPU (CI) everything is checked that can be: the field's validation, ``auto`` and an explicit ``cpu``
giving the default's trajectory bit for bit, the memory-based chunk choice with fake memory figures, chunked
training equal to unchunked, ``--device`` reaching the env configs, the benchmark's smoke run. The tests
that need a GPU run where torch sees one and are skipped otherwise.
"""
from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import SMALL
from fedsel_env import make_config
from fedsel_env.env import FedSelectEnv
from fedsel_env.sim import device as device_mod
from fedsel_env.sim.device import (CPU_CHUNK, activation_floats, choose_chunk, client_step_bytes, gradient_chunk,
                                   resolve_device, training_chunk)
from fedsel_env.sim.models import init_params, make_model
from fedsel_env.sim.training import BatchedTrainer
from golden import _action

ROOT = Path(__file__).resolve().parents[1]
CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="torch sees no CUDA GPU on this machine (CPU-only CI)")


def _no_gpu(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _fake_gpus(monkeypatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


# ----------------------------------------------------------------------------------------------- the field
@pytest.mark.parametrize("value", ["gpu", "cuda:", "cuda:-1", "cuda:x", "CUDA", "cpu ", "mps", "", 0, None, ["cpu"]])
def test_bad_device_values_are_refused(value):
    with pytest.raises(ValueError, match=r"config field 'device' = .* is invalid: expected 'cpu', 'cuda', 'cuda:N'"):
        make_config({"device": value})


@pytest.mark.parametrize("value", ["cpu", "cuda", "cuda:0", "cuda:3", "auto"])
def test_good_device_values_pass_the_config_check(value):
    # whether torch sees a GPU is not the config's business: a config may be written for another machine
    assert make_config({"device": value})["device"] == value


def test_default_device_is_cpu():
    assert make_config()["device"] == "cpu"


@pytest.mark.parametrize("value", ["cuda", "cuda:1"])
def test_workers_beside_a_gpu_device_are_refused(value):
    with pytest.raises(ValueError, match=r"'workers' = 2 is invalid beside device '" + value + r"'.*set workers: 1"):
        make_config({"device": value, "workers": 2})
    assert make_config({"device": "cpu", "workers": 2})["workers"] == 2


def test_cuda_without_a_gpu_is_a_value_error_naming_the_fix(monkeypatch):
    _no_gpu(monkeypatch)
    for value in ("cuda", "cuda:0"):
        with pytest.raises(ValueError, match=r"torch sees no CUDA GPU here.*Set device: cpu \(or auto"):
            resolve_device(value)
    with pytest.raises(ValueError, match="torch sees no CUDA GPU"):  # when the env is built, before any data
        FedSelectEnv(config={**SMALL, "device": "cuda"})


@pytest.mark.skipif(CUDA, reason="this machine has a GPU: the real refusal cannot happen here")
def test_cuda_is_refused_on_this_gpu_less_machine():
    with pytest.raises(ValueError, match="torch sees no CUDA GPU"):
        FedSelectEnv(config={**SMALL, "device": "cuda"})


def test_auto_and_gpu_indices_resolve(monkeypatch):
    _no_gpu(monkeypatch)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("auto", workers=2) == torch.device("cpu")  # no GPU: workers stay as they are
    _fake_gpus(monkeypatch, 2)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ValueError, match=r"torch sees 2 CUDA GPU\(s\), cuda:0 to cuda:1"):
        resolve_device("cuda:2")
    with pytest.raises(ValueError, match=r"'workers' = 2 is invalid beside device 'auto'.*set workers: 1"):
        resolve_device("auto", workers=2)
    assert resolve_device("cpu", workers=2) == torch.device("cpu")


def test_auto_takes_the_gpu_for_convolutional_models_only(monkeypatch):
    """Issue #33: ``auto`` never gives the slower device: a GPU for a CNN, the CPU for an MLP or logreg."""
    from torch import nn

    from fedsel_env.sim.device import gpu_is_faster

    _fake_gpus(monkeypatch, 1)
    for name in ("fedmgda_cnn", "favor_cnn", "cifar_cnn"):
        assert resolve_device("auto", model=name) == torch.device("cuda")
    for name in ("mlp", "logreg"):
        assert resolve_device("auto", model=name) == torch.device("cpu")
        assert resolve_device("auto", workers=2, model=name) == torch.device("cpu")  # workers stay usable
    assert resolve_device("cuda", model="mlp") == torch.device("cuda")  # an explicit GPU is taken as asked
    assert gpu_is_faster(make_model("favor_cnn", (1, 28, 28), 10)) and not gpu_is_faster(make_model("mlp", (64,), 10))
    assert gpu_is_faster(nn.Sequential(nn.Conv1d(1, 2, 3))) and gpu_is_faster("my_pkg.models:Net")
    _no_gpu(monkeypatch)
    assert resolve_device("auto", model="favor_cnn") == torch.device("cpu")


def test_cpu_asks_torch_nothing_about_gpus(monkeypatch):
    def boom():
        raise AssertionError("device: cpu must not query CUDA")

    monkeypatch.setattr(torch.cuda, "is_available", boom)
    assert resolve_device("cpu") == torch.device("cpu")
    device_mod.use_deterministic(torch.device("cpu"))  # nothing to set on the CPU


# ----------------------------------------------------------------------------------------------- trajectories
def _play(config, steps=4, seed=3):
    """Observations, rewards and numeric info of a few steps (actions drawn as tests/golden.py draws them)."""
    env = FedSelectEnv(config=copy.deepcopy(config))
    rng = np.random.default_rng(7)
    obs, info = env.reset(seed=seed)
    out = {"obs0": obs, "acc0": info["accuracy"], "params": [], "n_test": int(env.federation.data.y_test.shape[0])}
    for t in range(steps):
        obs, r, term, trunc, info = env.step(_action(env, rng, obs))
        out[f"obs{t + 1}"], out[f"r{t + 1}"], out[f"flags{t + 1}"] = obs, r, (term, trunc)
        for key in ("accuracy", "loss", "client_accuracies", "improved_fraction", "responders"):
            # improved_fraction is absent when not measured: NaN here
            out[f"{key}{t + 1}"] = np.asarray(info.get(key, np.nan), dtype=np.float64)
        out["params"].append(env.federation.global_params.cpu().numpy().copy())
        if term or trunc:
            break
    env.close()
    return out


def _assert_identical(a, b):
    assert a.keys() == b.keys()
    for key in a:
        va, vb = a[key], b[key]
        if isinstance(va, dict):
            for part in va:
                np.testing.assert_array_equal(va[part], vb[part], err_msg=f"{key}/{part}")
        elif key == "params":
            for x, y in zip(va, vb):
                np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_array_equal(np.asarray(va), np.asarray(vb), err_msg=key)


@pytest.mark.parametrize("extra", [{}, {"aggregator": "qfedsgd", "adversary": {"attackers": [1], "update_bias": 0.5}},
                                   {"aggregator": "fedmgda+", "momentum": 0.9}])
def test_explicit_cpu_and_auto_without_gpu_replay_the_default_bit_for_bit(monkeypatch, extra):
    _no_gpu(monkeypatch)
    base = {**SMALL, **extra}
    default = _play(base)
    _assert_identical(default, _play({**base, "device": "cpu"}))
    _assert_identical(default, _play({**base, "device": "auto"}))


def test_the_federation_lives_on_the_cpu_with_todays_chunks(make_env):
    env = make_env(device="cpu")
    env.reset(seed=0)
    fed = env.federation
    assert env.device == fed.device == torch.device("cpu")
    assert fed.trainer.chunk == CPU_CHUNK and fed.trainer.gradient_chunk is None
    assert fed.trainer.x.device.type == "cpu" and fed.global_params.device.type == "cpu"


# ----------------------------------------------------------------------------------------------- chunks
def test_choose_chunk_from_a_memory_figure():
    assert choose_chunk(10**9, 10**6) == 500  # half of the free memory, per client
    assert choose_chunk(10**9, 10**6, fraction=1.0) == 1000
    assert choose_chunk(0, 10**6) == 1 and choose_chunk(10**5, 10**6) == 1  # never below one client
    assert choose_chunk(10**15, 10, cap=4096) == 4096


def test_activation_count_of_a_known_model():
    # logreg on 8x8: Flatten outputs 64 floats, Linear 10
    assert activation_floats(make_model("logreg", (1, 8, 8), 10), (1, 8, 8)) == 74
    # fedmgda_cnn: conv 10x24x24, pool and ReLU 10x12x12 each, conv 20x8x8, pool and ReLU 20x4x4 each, 320, 50, 50, 10
    expected = 5760 + 1440 * 2 + 1280 + 320 * 2 + 320 + 50 + 50 + 10
    assert activation_floats(make_model("fedmgda_cnn", (1, 28, 28), 10), (1, 28, 28)) == expected


def test_training_chunk_follows_the_memory_a_gpu_has():
    cpu = torch.device("cpu")
    shape = (1, 28, 28)
    small, big = make_model("fedmgda_cnn", shape, 10), make_model("favor_cnn", shape, 10)
    assert training_chunk(cpu, small, shape, 10) == CPU_CHUNK  # the CPU keeps today's behaviour
    assert gradient_chunk(cpu, small, shape) is None
    gib = 2**30
    per = client_step_bytes(431_080, activation_floats(big, shape), 784, 10)
    assert training_chunk(cpu, big, shape, 10, free_bytes=40 * gib) == choose_chunk(40 * gib, per)
    # K = 1,000 favor_cnn clients fit in one call with 40 GiB free (an H100 with the data on it), not with 4 GiB
    assert training_chunk(cpu, big, shape, 10, free_bytes=40 * gib) >= 1000
    assert 1 <= training_chunk(cpu, big, shape, 10, free_bytes=4 * gib) < 1000
    assert training_chunk(cpu, small, shape, 10, free_bytes=4 * gib) > training_chunk(cpu, big, shape, 10,
                                                                                      free_bytes=4 * gib)
    assert gradient_chunk(cpu, big, shape, free_bytes=4 * gib) < training_chunk(cpu, big, shape, 10,
                                                                                 free_bytes=4 * gib)


def test_a_gpu_federation_takes_its_chunk_from_mem_get_info(monkeypatch):
    calls = []

    def fake_free(device):
        calls.append(device)
        return 3 * 2**30

    monkeypatch.setattr(device_mod, "_free_bytes", fake_free)
    gpu = torch.device("cuda", 0)
    model = make_model("favor_cnn", (1, 28, 28), 10)
    got = training_chunk(gpu, model, (1, 28, 28), 10)
    assert calls == [gpu] and got == training_chunk(torch.device("cpu"), model, (1, 28, 28), 10, free_bytes=3 * 2**30)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_chunked_training_and_gradients_equal_one_call(momentum):
    g = torch.Generator().manual_seed(0)
    sizes = [9, 4, 12, 7, 1]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    x, y = torch.randn(offsets[-1], 1, 8, 8, generator=g), torch.randint(0, 10, (offsets[-1],), generator=g)
    model = make_model("mlp", (1, 8, 8), 10)
    kw = dict(batch_size=4, lr=0.1, local_epochs=2, momentum=momentum)
    whole = BatchedTrainer(model, x, y, offsets, **kw)
    chunked = BatchedTrainer(model, x, y, offsets, chunk_clients=2, gradient_chunk=2, **kw)
    w0 = whole.layout.flatten(init_params(model, torch.Generator().manual_seed(1)))
    clients = [4, 0, 2, 1, 3]

    def gens():
        return [np.random.default_rng([5, c]) for c in clients]

    torch.testing.assert_close(chunked.train(w0, clients, gens()), whole.train(w0, clients, gens()),
                               rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(chunked.full_gradients(w0, clients), whole.full_gradients(w0, clients),
                               rtol=1e-6, atol=1e-7)


# ----------------------------------------------------------------------------------------------- plumbing
def _load(name: str, path: Path):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


def test_train_agent_device_sets_the_env_config_and_the_learner(tmp_path, monkeypatch):
    train_agent = sys.modules.get("train_agent") or _load("train_agent", ROOT / "train_agent.py")
    setup = train_agent.prepare(train_agent.parse_args(["--algo", "favor", "--env", "tiny", "--device", "cpu",
                                                        "--runs-dir", str(tmp_path)]))
    assert setup["env_config"]["device"] == "cpu" and setup["args"].device == "cpu"
    setup = train_agent.prepare(train_agent.parse_args(["--algo", "favor", "--env", "tiny", "--runs-dir",
                                                        str(tmp_path), "--env-kwargs", "device=cpu"]))
    assert setup["args"].device == "cpu"  # no --device: the learner follows the env config
    _no_gpu(monkeypatch)
    with pytest.raises(ValueError, match="torch sees no CUDA GPU"):  # before any env process starts
        train_agent.prepare(train_agent.parse_args(["--algo", "favor", "--env", "tiny", "--device", "cuda",
                                                    "--runs-dir", str(tmp_path)]))


def test_evaluate_device_reaches_the_env_config(tmp_path, monkeypatch):
    import json

    if str(ROOT) not in sys.path:  # evaluate.py is a script at the repository root (as tests/test_evaluate.py)
        sys.path.insert(0, str(ROOT))
    import evaluate
    out = tmp_path / "run"
    evaluate.main(["--env", "tiny", "--policy", "random", "--seeds", "0", "--rounds", "2", "--device", "cpu",
                   "--out", str(out), "--no-plots", "--no-progress"])
    assert json.loads((out / "config.json").read_text())["env_config"]["device"] == "cpu"
    _no_gpu(monkeypatch)
    with pytest.raises(ValueError, match="torch sees no CUDA GPU"):
        evaluate.main(["--env", "tiny", "--policy", "random", "--seeds", "0", "--device", "cuda",
                       "--out", str(tmp_path / "gpu"), "--no-plots", "--no-progress"])


def test_device_scale_bench_runs_on_the_cpu(capsys):
    bench = _load("device_scale_bench", ROOT / "bench" / "device_scale.py")
    result = bench.main(["--quick", "--device", "cpu"])
    assert result["device"] == "cpu"
    assert [(r["model"], r["k"]) for r in result["training"]] == [(m, k) for m in bench.MODELS for k in (2, 4)]
    for r in result["training"]:
        assert r["batched"] > 0 and r["single"] > 0 and r["loop"] > 0 and r["chunk"] == r["k"]
    printed = capsys.readouterr().out
    assert "| `favor_cnn` | 4 |" in printed and "device cpu" in printed
    if result["favor"] is not None:  # Fashion-MNIST is there (scripts/setup.sh installs it)
        assert result["favor"]["step_s"] > 0 and "Table 2" in printed


# ----------------------------------------------------------------------------------------------- on a GPU
GPU_CASES = {
    "tiny": ("tiny", {}),
    "qfedsgd_forged": ("tiny", {"aggregator": "qfedsgd", "adversary": {"attackers": [1, 2], "update_scale": 2.0,
                                                                        "update_bias": 0.5}}),
    "fedmgda_momentum": ("tiny", {"aggregator": "fedmgda+", "momentum": 0.9, "eval_every": 2}),
    "fedprox_mlp": ("default", {"aggregator": "fedprox", "max_rounds": 4}),
    "cnn": ("favor_fmnist", {"num_clients": 12, "samples_per_client": 30, "local_epochs": 1, "clients_per_round": 3,
                             "model": "fedmgda_cnn", "max_rounds": 3}),
}


@pytest.fixture
def float32_gpu(monkeypatch):
    """fp32 (no TF32) GPU arithmetic for the comparison with the CPU; the determinism switch restored after."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    was, warn_only = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.use_deterministic_algorithms(was, warn_only=warn_only)


def _case_config(case, device):
    preset, extra = GPU_CASES[case]
    from fedsel_env.config import PRESETS

    return {**copy.deepcopy(PRESETS[preset]), **copy.deepcopy(extra), "device": device}


def _play_or_skip(config, steps=3):
    from fedsel_env.sim.data import DatasetNotFoundError

    try:
        return _play(config, steps=steps)
    except DatasetNotFoundError as e:
        pytest.skip(f"dataset not installed: {e}")


@needs_cuda
@pytest.mark.parametrize("case", list(GPU_CASES))
def test_a_few_rounds_on_cuda_match_the_cpu_to_float_tolerance(case, float32_gpu):
    cpu, gpu = _play_or_skip(_case_config(case, "cpu")), _play_or_skip(_case_config(case, "cuda"))
    assert cpu.keys() == gpu.keys()
    for a, b in zip(cpu["params"], gpu["params"]):  # the global model after each round
        np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-4)
    for key in cpu:
        a, b = cpu[key], gpu[key]
        if key == "params":
            continue
        if isinstance(a, dict):
            # the PCA basis is fitted (scikit-learn, on the host) on profiling models that differ in the last
            # bits, and components with near-equal variances may turn: the weights part is compared through
            # the global model above; the other parts here
            for part in ("clients", "progress"):
                np.testing.assert_allclose(b[part], a[part], rtol=1e-3, atol=2e-2, err_msg=f"{key}/{part}")
            assert b["weights"].shape == a["weights"].shape and b["weights"].dtype == np.float32
        elif key.startswith(("flags", "responders")):
            np.testing.assert_array_equal(b, a, err_msg=key)
        elif key.startswith("client_accuracies"):  # a test sample at the decision boundary may flip
            assert np.sum(np.abs(b - a) > 1e-9) <= 1, key
        elif key.startswith("acc"):  # the global accuracy: at most that one test sample
            assert abs(float(b) - float(a)) <= 1.0 / cpu["n_test"] + 1e-9, key
        elif key.startswith("improved_fraction"):  # at most one responder's loss on the other side of equal
            k = max(len(cpu["responders" + key[len("improved_fraction"):]]), 1)
            assert np.isnan(a) == np.isnan(b) and (np.isnan(a) or abs(float(b) - float(a)) <= 1.0 / k + 1e-9), key
        elif key.startswith("r"):  # FAVOR's reward moves by at most ln(64) x 64^(acc - target) / n_test with it
            np.testing.assert_allclose(b, a, rtol=1e-3, atol=5.0 / cpu["n_test"], err_msg=key)
        else:
            np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-3, err_msg=key)


@needs_cuda
def test_equal_seeds_give_equal_trajectories_on_the_same_gpu(float32_gpu):
    config = _case_config("cnn", "cuda")
    _assert_identical(_play_or_skip(config), _play_or_skip(config))


@needs_cuda
def test_on_cuda_the_federation_lives_on_the_gpu_and_the_server_gets_numpy(float32_gpu):
    env = FedSelectEnv(config={**SMALL, "device": "cuda"})
    obs, info = env.reset(seed=0)
    fed = env.federation
    assert fed.device.type == "cuda" and fed.trainer.x.device.type == "cuda" and fed.x_test.device.type == "cuda"
    assert fed.global_params.device.type == "cuda"
    assert fed.trainer.chunk >= 1 and fed.trainer.gradient_chunk >= 1
    assert all(isinstance(v, np.ndarray) for v in obs.values())
    assert isinstance(info["client_accuracies"], np.ndarray)
    assert torch.are_deterministic_algorithms_enabled()
    env.close()
