"""The closed-form local SGD of single-``nn.Linear`` models (``fedsel_env/sim/linear_sgd.py``).

It is taken automatically on the CPU because it gives the vmapped autograd path's weights bit for bit:
these tests check that over hundreds of steps (unequal client sizes, masked tail batches, momentum,
FedProx, several epochs), through whole env trajectories, and that any other model keeps ``vmap``.
"""
import copy

import numpy as np
import pytest
import torch
from torch import nn

import fedsel_env.sim.training as training
from fedsel_env.sim.linear_sgd import linear_layer, train_linear
from fedsel_env.sim.models import init_params, make_model
from fedsel_env.sim.training import BatchedTrainer

from golden import CASES, trajectory


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The fast and slow paths agree bit for bit at one torch thread (as the env runs them, fedsel_env/threads.py);
    with two threads torch may split a reduction differently between them, whatever ran before in the process."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

# unequal sizes at B = 4: 301 steps for the largest client per epoch, short clients done early, masked tails
SIZES = [1203, 57, 333, 10, 1, 96]


def _data(shape, sizes=SIZES, seed=0):
    g = torch.Generator().manual_seed(seed)
    total = int(sum(sizes))
    x = torch.randn((total, *shape), generator=g)
    y = torch.randint(0, 10, (total,), generator=g)
    return x, y, np.concatenate([[0], np.cumsum(sizes)])


def _trainers(model, x, y, offsets, **kw):
    fast = BatchedTrainer(model, x, y, offsets, analytic_linear=True, **kw)
    slow = BatchedTrainer(model, x, y, offsets, analytic_linear=False, **kw)
    assert fast.linear is not None and slow.linear is None
    return fast, slow


def _gens(clients, seed=7):
    return [np.random.default_rng([seed, c]) for c in clients]


@pytest.mark.parametrize("momentum,prox_mu", [(0.0, 0.0), (0.9, 0.0), (0.0, 0.1), (0.9, 0.1)])
@pytest.mark.parametrize("shape", [(1, 8, 8), (60,)])
def test_same_weights_as_autograd_bit_for_bit(shape, momentum, prox_mu):
    model = make_model("logreg", shape, 10)
    x, y, offsets = _data(shape)
    fast, slow = _trainers(model, x, y, offsets, batch_size=4, lr=0.05, local_epochs=2, momentum=momentum)
    w0 = fast.layout.flatten(init_params(model, torch.Generator().manual_seed(1)))
    clients = [3, 0, 5, 1, 4, 2]  # not in size order: the fast path reorders them and must put them back
    a = fast.train(w0, clients, _gens(clients), prox_mu=prox_mu)
    b = slow.train(w0, clients, _gens(clients), prox_mu=prox_mu)
    assert not torch.equal(a[clients.index(0)], w0)  # 602 steps moved the largest client's weights
    # bit for bit (so also within 1e-5 relative): the same ATen operations on the same values
    assert torch.equal(a, b), f"max relative difference {float((a - b).abs().max() / b.abs().max()):.3g}"


@pytest.mark.parametrize("model", [nn.Linear(60, 10), nn.Linear(60, 10, bias=False),
                                   nn.Sequential(nn.Linear(60, 10))], ids=["Linear", "no-bias", "Sequential"])
def test_other_single_linear_forms(model):
    x, y, offsets = _data((60,))
    fast, slow = _trainers(model, x, y, offsets, batch_size=5, lr=0.1, momentum=0.5)
    w0 = fast.layout.flatten(init_params(model, torch.Generator().manual_seed(2)))
    clients = list(range(len(SIZES)))
    assert torch.equal(fast.train(w0, clients, _gens(clients), prox_mu=0.01),
                       slow.train(w0, clients, _gens(clients), prox_mu=0.01))


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_keeping_finished_clients_gives_the_same_weights(momentum):
    """``drop_finished=False`` (masked as the vmapped path does; only for the benchmark) changes nothing."""
    model = make_model("logreg", (60,), 10)
    x, y, offsets = _data((60,))
    trainer = BatchedTrainer(model, x, y, offsets, batch_size=4, lr=0.05, momentum=momentum)
    w0 = trainer.layout.flatten(init_params(model, torch.Generator().manual_seed(1)))
    clients = list(range(len(SIZES)))
    idx, mask = trainer.batch_plan(clients, _gens(clients))
    out = []
    for drop in (True, False):
        flat = w0.unsqueeze(0).repeat(len(clients), 1)
        train_linear(trainer.layout.unflatten(flat), *trainer.linear, x, y, idx, mask, trainer.layout.unflatten(w0),
                     0.05, momentum, 0.1, drop_finished=drop)
        out.append(flat)
    assert torch.equal(out[0], out[1])
    assert torch.equal(out[0], trainer.train(w0, clients, _gens(clients), prox_mu=0.1))


class TanhLinear(nn.Module):
    """One ``nn.Linear`` but not a linear model: the closed form would be wrong for it."""

    def __init__(self, d: int, c: int) -> None:
        super().__init__()
        self.fc = nn.Linear(d, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 3 * torch.tanh(self.fc(x.flatten(1)))


class ScaledLinear(nn.Linear):
    """A subclass of ``nn.Linear`` with its own forward."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2 * super().forward(x)


def test_which_models_qualify():
    x2, x4 = torch.zeros(3, 60), torch.zeros(3, 1, 8, 8)
    assert linear_layer(make_model("logreg", (1, 8, 8), 10), x4) == ("1.weight", "1.bias")
    assert linear_layer(make_model("logreg", (60,), 10), x2) == ("1.weight", "1.bias")
    assert linear_layer(nn.Linear(60, 10), x2) == ("weight", "bias")
    assert linear_layer(nn.Linear(60, 10, bias=False), x2) == ("weight", None)
    for model, x in [(make_model("mlp", (60,), 10), x2), (make_model("fedmgda_cnn", (1, 28, 28), 10),
                                                           torch.zeros(3, 1, 28, 28)),
                     (TanhLinear(60, 10), x2), (ScaledLinear(60, 10), x2),
                     (nn.Sequential(nn.Flatten(), nn.Linear(60, 10), nn.ReLU()), x2),
                     (nn.Sequential(nn.Flatten(start_dim=2), nn.Linear(8, 10)), x4),  # per-row Linear, not logreg
                     (nn.Sequential(nn.Linear(8, 10)), torch.zeros(3, 8, 8)),
                     (nn.Linear(8, 10), torch.zeros(3, 8, 8)),
                     (make_model("logreg", (60,), 10), x2.double()),  # only float32 was checked bit for bit
                     (nn.Linear(60, 10).double(), x2)]:
        assert linear_layer(model, x) is None, model


@pytest.mark.parametrize("model", [TanhLinear(64, 10), make_model("mlp", (1, 8, 8), 10)], ids=["tanh-linear", "mlp"])
def test_other_models_keep_vmap_and_train_as_themselves(model):
    """A model that does not qualify falls back to ``vmap(grad)``: the same result as per-client autograd."""
    from test_training import _reference

    sizes = [23, 7, 15]
    x, y, offsets = _data((1, 8, 8), sizes)
    trainer = BatchedTrainer(model, x, y, offsets, batch_size=4, lr=0.05, local_epochs=2, momentum=0.9)
    assert trainer.linear is None
    w0 = trainer.layout.flatten(init_params(model, torch.Generator().manual_seed(1)))
    clients = [0, 1, 2]
    batched = trainer.train(w0, clients, _gens(clients))
    idx, mask = trainer.batch_plan(clients, _gens(clients))
    for j, c in enumerate(clients):
        ref = _reference(model, trainer.layout, x, y, offsets, c, w0, idx[:, j], mask[:, j], 0.05, 0.9, 0.0)
        torch.testing.assert_close(batched[j], ref, rtol=1e-4, atol=1e-5)


def _vmap_only(monkeypatch):
    monkeypatch.setattr(training, "linear_layer", lambda model, x: None)


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][0] == "tiny"])
def test_golden_trajectories_do_not_depend_on_the_path(case, monkeypatch):
    """Every observation, reward and info entry of the golden cases (logistic regression) is the same bit
    for bit whichever path trains (``tests/test_golden.py`` compares them with the recording)."""
    fast = trajectory(case)
    _vmap_only(monkeypatch)
    slow = trajectory(case)
    assert set(fast) == set(slow)
    for key in fast:
        assert np.array_equal(fast[key], slow[key], equal_nan=True), f"{case}/{key}"


@pytest.mark.parametrize("aggregator,params,momentum", [("qfedavg", {"q": 1.0}, 0.0), ("fedprox", {"mu": 0.1}, 0.5)])
def test_synthetic_rounds_do_not_depend_on_the_path(aggregator, params, momentum, monkeypatch):
    """The synthetic preset's logistic regression (60 features, sizes as generated) through reset and rounds."""
    from fedsel_env.env import FedSelectEnv

    cfg = {"preset": "synthetic", "num_clients": 12, "clients_per_round": 4, "max_rounds": 3,
           "aggregator": aggregator, "aggregator_params": params, "momentum": momentum, "local_epochs": 1}

    def play():
        env = FedSelectEnv(config=copy.deepcopy(cfg))
        env.reset(seed=4)
        rng = np.random.default_rng(0)
        for _ in range(3):
            env.step(rng.random(12).astype(np.float32))
        w = env.federation.global_params.clone()
        env.close()
        return w

    fast = play()
    _vmap_only(monkeypatch)
    assert torch.equal(fast, play())
