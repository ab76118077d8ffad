"""The captured local round (fedsel_env/sim/captured.py, issue #33).

On the CPU: the fixed-shape steps (plan uploaded once, the step's row read from a device counter, the
masked update in every step) run eagerly and must equal today's path bit for bit — the vmapped CNN, the
fused MLP and logistic regression, momentum, FedProx, clients of unequal sizes, several rounds through one
set of buffers, a plan longer than the buffers. On a GPU (skipped here; ``bench/gpu_check.sh`` runs them)
the rounds replayed from CUDA graphs must equal the eager GPU path to float tolerance.
"""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch

import fedsel_env.sim.training as training
from fedsel_env.env import FedSelectEnv
from fedsel_env.sim.captured import BLOCKS, CapturedTrainer, capture_default, replay_counts
from fedsel_env.sim.models import init_params, make_model
from fedsel_env.sim.training import BatchedTrainer

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (bench/gpu_check.sh runs these on one)")

SIZES = [9, 4, 12, 7, 1, 16]


def _trainers(model_name, device="cpu", momentum=0.5, **extra):
    g = torch.Generator().manual_seed(0)
    offsets = np.concatenate([[0], np.cumsum(SIZES)])
    shape = (1, 8, 8) if model_name != "fedmgda_cnn" else (1, 28, 28)
    x = torch.randn(offsets[-1], *shape, generator=g).to(device)
    y = torch.randint(0, 10, (offsets[-1],), generator=g).to(device)
    model = make_model(model_name, shape, 10)
    kw = dict(batch_size=4, lr=0.1, local_epochs=2, momentum=momentum, analytic_linear=False, **extra)
    eager = BatchedTrainer(model, x, y, offsets, captured=False, **kw)
    fixed = BatchedTrainer(model, x, y, offsets, captured=True, **kw)
    w0 = eager.layout.flatten(init_params(model, torch.Generator().manual_seed(1))).to(device)
    return eager, fixed, w0


def _gens(clients, round_):
    return [np.random.default_rng([5, round_, c]) for c in clients]


def test_replay_counts_cover_every_step_once():
    assert replay_counts(0) == []
    assert replay_counts(8) == [(8, 1)]
    assert replay_counts(300) == [(64, 4), (8, 5), (1, 4)]
    for s in range(0, 600, 7):
        assert sum(t * n for t, n in replay_counts(s)) == s
        assert sum(n for _, n in replay_counts(s)) <= s // BLOCKS[0] + 7 + 7


def test_capture_is_the_default_on_cuda_only(monkeypatch):
    assert not capture_default(torch.device("cpu"))
    assert capture_default(torch.device("cuda"))
    monkeypatch.setenv("FEDSEL_CUDA_GRAPHS", "0")
    assert not capture_default(torch.device("cuda"))
    eager, fixed, _ = _trainers("mlp")
    assert BatchedTrainer(eager.model, eager.x, eager.y, eager.offsets, 4, 0.1).captured is None  # CPU default
    assert fixed.captured is not None and not fixed.captured.capture


def test_cuda_graphs_on_a_cpu_trainer_are_refused():
    eager, _, _ = _trainers("mlp")
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device"):
        CapturedTrainer(eager, capture=True)


@pytest.mark.parametrize("model_name, momentum, prox_mu", [
    (m, mom, mu) for m in ("mlp", "logreg") for mom, mu in [(0.0, 0.0), (0.5, 0.0), (0.9, 0.1)]]
    + [("fedmgda_cnn", 0.9, 0.1)])  # the CNN (vmap(grad)) once: its steps are the slow ones on a CPU
def test_fixed_shape_steps_equal_todays_path_bit_for_bit(model_name, momentum, prox_mu):
    """Three rounds through the same buffers: K = 6, then K = 3 (another key), then 6 again with 3 epochs
    (a plan longer than the buffers: they grow)."""
    eager, fixed, w = _trainers(model_name, momentum=momentum)
    for r, (clients, epochs) in enumerate([([5, 0, 2, 1, 3, 4], None), ([2, 4, 1], None),
                                           ([0, 1, 2, 3, 4, 5], 3)]):
        a = eager.train(w, clients, _gens(clients, r), prox_mu, epochs)
        b = fixed.train(w, clients, _gens(clients, r), prox_mu, epochs)
        assert torch.equal(a, b), (model_name, r, (a - b).abs().max().item())
        w = a.mean(dim=0)
    assert len(fixed.captured._states) == 2


def test_the_fused_mlp_and_the_vmapped_mlp_agree_in_fixed_shapes():
    """The same fixed-shape structure over vmap(grad) (fused=False) equals the fused step bit for bit."""
    pytest.importorskip("fedsel_env.sim.fused_sgd", reason="fedsel_env/sim/fused_sgd.py (issue #27) is not in this tree")
    _, fused, w = _trainers("mlp", momentum=0.9)
    _, vmapped, _ = _trainers("mlp", momentum=0.9, fused=False)
    clients = [3, 1, 5, 0]
    assert torch.equal(fused.train(w, clients, _gens(clients, 0), 0.0),
                       vmapped.train(w, clients, _gens(clients, 0), 0.0))


@pytest.mark.parametrize("model", ["mlp", "fedmgda_cnn"])
def test_an_env_episode_in_fixed_shapes_is_the_default_episode(model, monkeypatch):
    """The federation's trainer switched to the fixed-shape steps (as on CUDA): the same episode bit for bit."""
    config = {"num_clients": 8, "clients_per_round": 3, "max_rounds": 3, "samples_per_client": 20,
              "model": model, "momentum": 0.5, "target_accuracy": 0.99}
    if model == "fedmgda_cnn":
        from fedsel_env.sim.data_files import DEBIAN_FASHION_MNIST

        if not DEBIAN_FASHION_MNIST.is_dir():
            pytest.skip("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")
        config["dataset"] = "fashion_mnist"

    def play():
        env = FedSelectEnv(config=config)
        try:
            obs, info = env.reset(seed=4)
            out = [obs["weights"].copy()]
            for t in range(3):
                obs, r, term, trunc, info = env.step(np.arange(8, dtype=np.float32) * ((-1) ** t))
                out += [obs["weights"].copy(), np.float64(r), np.float64(info["accuracy"])]
            return out, env.federation.trainer.captured
        finally:
            env.close()

    today, none = play()
    assert none is None
    monkeypatch.setattr(training, "capture_default", lambda device: True)
    fixed, cap = play()
    assert cap is not None and not cap.capture and cap._states
    for a, b in zip(today, fixed):
        np.testing.assert_array_equal(a, b)


def test_the_replay_schedule_with_stand_in_graphs(monkeypatch):
    """The CUDA path's bookkeeping on the CPU: each "graph" stands in for T eager steps; the blocks a round
    needs are captured once, when first needed, the counter walks the plan, and the result is today's."""
    eager, fixed, w = _trainers("mlp", momentum=0.9)
    cap = fixed.captured
    cap.capture = True  # (the constructor refuses CUDA graphs on a CPU trainer; _capture is replaced below)
    captured = []

    def stand_in(st, prox_mu, blocks):
        for t in blocks:
            captured.append((st.k, st.cap, t))
            st.graphs[t] = type("G", (), {"replay": lambda self, t=t, st=st: [cap._step(st, prox_mu)
                                                                             for _ in range(t)]})()

    monkeypatch.setattr(cap, "_capture", stand_in)
    rounds = [([5, 0, 2, 1, 3, 4], None), ([2, 4, 1], None), ([5, 0, 2, 1, 3, 4], None), ([0, 1, 2, 3, 4, 5], 20)]
    for r, (clients, epochs) in enumerate(rounds):
        a = eager.train(w, clients, _gens(clients, r), 0.0, epochs)
        b = fixed.train(w, clients, _gens(clients, r), 0.0, epochs)
        assert torch.equal(a, b), r
        w = a.mean(dim=0)
    # S = 8 (K = 6), S = 6 (K = 3), S = 8 again (nothing new), S = 80 (the buffers grow: 64 + 2 x 8)
    assert captured == [(6, 8, 8), (3, 6, 1), (6, 80, 64), (6, 80, 8)]


def test_a_trainer_is_freed_without_the_cyclic_collector():
    """No reference cycle through the captured path: a dropped trainer (and on a GPU its graphs) is freed at
    once, not by the cyclic collector at some later allocation — a capture in progress, say."""
    _, fixed, w = _trainers("mlp")
    fixed.train(w, [0, 1, 2], _gens([0, 1, 2], 0))
    ref = weakref.ref(fixed)
    was = gc.isenabled()
    gc.disable()
    try:
        del fixed
        assert ref() is None
    finally:
        if was:
            gc.enable()


# ------------------------------------------------------------------------------------------------ CUDA
@pytest.fixture
def float32_gpu(monkeypatch):
    """fp32 arithmetic (no TF32) and cuDNN's deterministic algorithms, for comparisons on the GPU."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)


@needs_cuda
@pytest.mark.parametrize("model_name", ["mlp", "logreg", "fedmgda_cnn"])
@pytest.mark.parametrize("momentum, prox_mu", [(0.0, 0.0), (0.9, 0.1)])
def test_cuda_graph_rounds_equal_the_eager_gpu_rounds(model_name, momentum, prox_mu, float32_gpu):
    eager, _, w = _trainers(model_name, device="cuda", momentum=momentum)
    graphs = BatchedTrainer(eager.model, eager.x, eager.y, eager.offsets, 4, 0.1, local_epochs=2, momentum=momentum,
                            analytic_linear=False)  # the default on CUDA
    assert graphs.captured is not None and graphs.captured.capture
    for r, (clients, epochs) in enumerate([([5, 0, 2, 1, 3, 4], None), ([2, 4, 1], None),
                                           ([0, 1, 2, 3, 4, 5], 3)]):
        a = eager.train(w, clients, _gens(clients, r), prox_mu, epochs)
        b = graphs.train(w, clients, _gens(clients, r), prox_mu, epochs)
        assert graphs.captured.failed is None, graphs.captured.failed
        # the same kernels but for cuBLAS's choice at other batch counts (eager drops finished clients)
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
        w = a.mean(dim=0)
    assert all(st.graphs for st in graphs.captured._states.values())
    # graphs are captured when first needed: K = 3 clients of 12, 4 and 1 samples, 2 epochs at B = 4 -> S = 6:
    # six replays of the 1-step graph, no 8- or 64-step graph; K = 6 with 3 epochs -> S = 12: 8 + 4 x 1
    states = graphs.captured._states
    assert sorted(states[(3, 4, float(prox_mu), torch.float32)].graphs) == [1]
    assert sorted(states[(6, 4, float(prox_mu), torch.float32)].graphs) == [1, 8]


@needs_cuda
def test_cuda_graph_replays_are_repeatable(float32_gpu):
    _, _, w = _trainers("fedmgda_cnn", device="cuda")
    eager, _, _ = _trainers("fedmgda_cnn", device="cuda")
    graphs = BatchedTrainer(eager.model, eager.x, eager.y, eager.offsets, 4, 0.1, local_epochs=2, momentum=0.5)
    clients = [1, 2, 3]
    first = graphs.train(w, clients, _gens(clients, 0))
    graphs.train(w, [0, 4, 5], _gens([0, 4, 5], 1))  # the same buffers in between
    assert torch.equal(graphs.train(w, clients, _gens(clients, 0)), first)


@needs_cuda
def test_a_capture_survives_the_collector_freeing_another_trainer(float32_gpu):
    """Seen on an H100 (gpu_check.sh, gpu_presets.py): the second reset of FAVOR's preset built a new
    federation, the first one's trainer and CUDA graphs were garbage in a reference cycle, the cyclic
    collector freed them during the new capture, and the capture failed. Here the old trainer sits in a
    cycle on purpose and the collector runs at every allocation: the new capture must hold."""
    old, _, w = _trainers("fedmgda_cnn", device="cuda")  # momentum 0.5, as every trainer here
    old = BatchedTrainer(old.model, old.x, old.y, old.offsets, 4, 0.1, local_epochs=2, momentum=0.5)
    old.train(w, [0, 1, 2], _gens([0, 1, 2], 0))
    cycle = [old]
    cycle.append(cycle)
    del old, cycle
    eager, _, _ = _trainers("fedmgda_cnn", device="cuda")
    new = BatchedTrainer(eager.model, eager.x, eager.y, eager.offsets, 4, 0.1, local_epochs=2, momentum=0.5)
    thresholds = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    try:
        got = new.train(w, [3, 4, 5], _gens([3, 4, 5], 1))
    finally:
        gc.set_threshold(*thresholds)
    assert new.captured.failed is None, new.captured.failed
    torch.testing.assert_close(got, eager.train(w, [3, 4, 5], _gens([3, 4, 5], 1)), rtol=1e-4, atol=1e-5)
