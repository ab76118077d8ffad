"""K stacked Sequential models as one batched forward (fedsel_env/sim/stacked_net.py, issue #33).

The plan covers the registered CNNs and MLPs and refuses what it cannot run; its flat gradient equals
``vmap(grad)``'s to float rounding (masked clients, FedProx, strides, padding and dilation); a captured round
stepped through it equals the vmapped round; ``FEDSEL_CNN_STEP`` picks the step and refuses other values. On a
GPU (skipped here; ``bench/gpu_check.sh`` runs it) the graph-replayed stacked round equals the eager vmapped one.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from fedsel_env.sim import stacked_net as sn
from fedsel_env.sim.captured import stacked_step
from fedsel_env.sim.models import init_params, make_model
from fedsel_env.sim.training import BatchedTrainer, ParamLayout

CUDA = torch.cuda.is_available()
SHAPES = {"favor_cnn": (1, 28, 28), "fedmgda_cnn": (1, 28, 28), "cifar_cnn": (3, 32, 32), "mlp": (20,),
          "logreg": (20,)}


def _vmap_and_stacked_gradients(model, shape, k=4, b=5, prox_mu=0.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    layout = ParamLayout(model)
    flat = torch.randn(k, layout.size, generator=g) * 0.1
    anchor = torch.randn(layout.size, generator=g) * 0.1
    x = torch.randn(k, b, *shape, generator=g)
    y = torch.randint(0, 10, (k, b), generator=g)
    mask = (torch.rand(k, b, generator=g) > 0.3).float()
    mask[1] = 0.0  # a client without samples in this step: a zero gradient (bar FedProx)
    tr = BatchedTrainer(model, torch.zeros(1, *shape), torch.zeros(1, dtype=torch.int64), np.array([0, 1]), 1, 0.1,
                        fused=False, analytic_linear=False)
    want = layout.flatten(tr._grad(layout.unflatten(flat), x, y, mask, layout.unflatten(anchor), prox_mu),
                          batched=True)
    net = sn.stacked_net(model)
    assert net is not None
    got = sn.flat_gradient(net, layout.unflatten, flat, x, y, mask, anchor, prox_mu)
    return want, got


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("prox_mu", [0.0, 0.3])
def test_the_flat_gradient_is_vmaps_gradient(name, prox_mu):
    want, got = _vmap_and_stacked_gradients(make_model(name, SHAPES[name], 10), SHAPES[name], prox_mu=prox_mu)
    scale = float(want.abs().max())
    assert scale > 1e-3  # a real gradient
    # float32 sums in another order: every entry within 1e-6 of the gradient's largest entry
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6 * scale)
    if prox_mu == 0.0:
        assert torch.count_nonzero(got[1]) == 0


def test_strides_padding_dilation_and_pooling_options():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1, dilation=2), nn.ReLU(),
                          nn.MaxPool2d(3, stride=1, padding=1, ceil_mode=True),
                          nn.Conv2d(4, 5, (2, 3), stride=(1, 2), padding=(1, 0), bias=False),
                          nn.Flatten(), nn.Linear(5 * 5 * 1, 7, bias=False), nn.ReLU(), nn.Linear(7, 10))
    want, got = _vmap_and_stacked_gradients(model, (3, 9, 9), k=3, b=4, prox_mu=0.1)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6 * float(want.abs().max()))


def test_the_forward_is_each_models_own_forward():
    model = make_model("favor_cnn", (1, 28, 28), 10)
    layout = ParamLayout(model)
    ws = [layout.flatten(init_params(model, torch.Generator().manual_seed(s))) for s in range(3)]
    x = torch.randn(3, 6, 1, 28, 28, generator=torch.Generator().manual_seed(9))
    logits = sn.forward(sn.stacked_net(model), layout.unflatten(torch.stack(ws)), x)
    for j, w in enumerate(ws):
        one = torch.func.functional_call(model, layout.unflatten(w), (x[j],))
        torch.testing.assert_close(logits[j], one, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model", [
    nn.Sequential(nn.Conv2d(2, 4, 3, groups=2), nn.Flatten(), nn.Linear(4, 2)),       # grouped
    nn.Sequential(nn.Conv2d(1, 2, 3, padding="same"), nn.Flatten(), nn.Linear(8, 2)),  # string padding
    nn.Sequential(nn.Conv2d(1, 2, 3, padding_mode="reflect"), nn.Flatten(), nn.Linear(8, 2)),
    nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)),                # a layer it has not
    nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2)),
    nn.Sequential(nn.Linear(4, 2), nn.ReLU()),                                           # logits not a Linear's
    nn.Linear(4, 2),                                                                     # not a Sequential
])
def test_models_it_cannot_run_keep_the_vmap_path(model):
    assert sn.stacked_net(model) is None


def test_the_step_switch(monkeypatch):
    monkeypatch.delenv("FEDSEL_CNN_STEP", raising=False)
    assert stacked_step(torch.device("cuda")) and not stacked_step(torch.device("cpu"))
    monkeypatch.setenv("FEDSEL_CNN_STEP", "vmap")
    assert not stacked_step(torch.device("cuda"))
    monkeypatch.setenv("FEDSEL_CNN_STEP", "stacked")
    assert stacked_step(torch.device("cpu"))
    monkeypatch.setenv("FEDSEL_CNN_STEP", "fast")
    with pytest.raises(ValueError, match="FEDSEL_CNN_STEP='fast' is not a choice: use 'stacked' or 'vmap'"):
        stacked_step(torch.device("cpu"))


SIZES = [9, 4, 12, 7, 1, 16]


def _trainer(device, captured, momentum):
    g = torch.Generator().manual_seed(0)
    offsets = np.concatenate([[0], np.cumsum(SIZES)])
    x = torch.randn(offsets[-1], 1, 28, 28, generator=g).to(device)
    y = torch.randint(0, 10, (offsets[-1],), generator=g).to(device)
    model = make_model("fedmgda_cnn", (1, 28, 28), 10)
    tr = BatchedTrainer(model, x, y, offsets, 4, 0.1, local_epochs=2, momentum=momentum, captured=captured)
    return tr, tr.layout.flatten(init_params(model, torch.Generator().manual_seed(1))).to(device)


def _rounds(tr, w, prox_mu):
    out = []
    for r, clients in enumerate([[5, 0, 2, 1, 3, 4], [2, 4, 1], [0, 1, 2, 3, 4, 5]]):
        out.append(tr.train(w, clients, [np.random.default_rng([5, r, c]) for c in clients], prox_mu))
        w = out[-1].mean(dim=0)
    return out


@pytest.mark.parametrize("momentum, prox_mu", [(0.0, 0.0), (0.9, 0.1)])
def test_a_round_stepped_through_the_stack_is_the_vmapped_round(momentum, prox_mu, monkeypatch):
    """Clients of unequal sizes (some finish early and must not move), momentum, FedProx, three rounds."""
    eager, w = _trainer("cpu", False, momentum)
    monkeypatch.setenv("FEDSEL_CNN_STEP", "stacked")
    stacked, _ = _trainer("cpu", True, momentum)
    want, got = _rounds(eager, w, prox_mu), _rounds(stacked, w, prox_mu)
    assert all(st.stacked is not None for st in stacked.captured._states.values())
    for a, b in zip(want, got):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (bench/gpu_check.sh runs it on one)")
@pytest.mark.parametrize("step", ["", "vmap"])  # "": CUDA's default (the stacked step)
@pytest.mark.parametrize("momentum, prox_mu", [(0.0, 0.0), (0.9, 0.1)])
def test_cuda_graph_rounds_of_either_step_equal_the_eager_vmapped_round(step, momentum, prox_mu, monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setenv("FEDSEL_CNN_STEP", step)
    eager, w = _trainer("cuda", False, momentum)
    graphs, _ = _trainer("cuda", None, momentum)  # captured: CUDA's default
    want, got = _rounds(eager, w, prox_mu), _rounds(graphs, w, prox_mu)
    assert graphs.captured.capture and graphs.captured.failed is None, graphs.captured.failed
    assert all((st.stacked is not None) == (step == "") and st.graphs for st in graphs.captured._states.values())
    for a, b in zip(want, got):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
