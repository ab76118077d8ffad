"""Fused local SGD of ReLU MLPs (``fedsel_env/sim/fused_sgd.py``): the vmapped autograd result, bit for bit.

The trainer takes the fused path by itself for ``mlp`` (and ``logreg`` off the CPU's closed form); these
tests check it against ``vmap(grad)`` over unequal sizes, masked tails, momentum, FedProx and a deeper
MLP, that a client's result does not depend on the clients beside it (what the vector env relies on),
and that the evaluation forward equals ``functional_call``'s.
"""
import numpy as np
import pytest
import torch
from torch import nn
from torch.func import functional_call

from fedsel_env.sim.fused_sgd import forward, fused_net, train_fused
from fedsel_env.sim.models import init_params, make_model
from fedsel_env.sim.training import BatchedTrainer

SIZES = [63, 17, 41, 10, 1, 26]  # at B = 4: short clients finish early, masked tails


def _data(shape, sizes=SIZES, seed=0):
    g = torch.Generator().manual_seed(seed)
    total = int(sum(sizes))
    return (torch.randn((total, *shape), generator=g), torch.randint(0, 10, (total,), generator=g),
            np.concatenate([[0], np.cumsum(sizes)]))


def _gens(clients, seed=7):
    return [np.random.default_rng([seed, c]) for c in clients]


def _deep(d):
    return nn.Sequential(nn.Flatten(), nn.Linear(d, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 10))


@pytest.mark.parametrize("momentum,prox_mu", [(0.0, 0.0), (0.9, 0.0), (0.0, 0.1), (0.9, 0.1)])
@pytest.mark.parametrize("shape,build", [((1, 8, 8), "mlp"), ((60,), "mlp"), ((60,), "deep")])
def test_same_weights_as_vmap_bit_for_bit(shape, build, momentum, prox_mu):
    model = make_model("mlp", shape, 10) if build == "mlp" else _deep(60)
    x, y, offsets = _data(shape)
    kw = dict(batch_size=4, lr=0.05, local_epochs=2, momentum=momentum)
    fast = BatchedTrainer(model, x, y, offsets, **kw)
    slow = BatchedTrainer(model, x, y, offsets, fused=False, **kw)
    assert fast.fused is not None and slow.fused is None
    w0 = fast.layout.flatten(init_params(model, torch.Generator().manual_seed(1)))
    clients = [3, 0, 5, 1, 4, 2]  # not in size order: the fused path reorders them and must put them back
    a = fast.train(w0, clients, _gens(clients), prox_mu=prox_mu)
    b = slow.train(w0, clients, _gens(clients), prox_mu=prox_mu)
    assert not torch.equal(a[clients.index(0)], w0)
    assert torch.equal(a, b), f"max relative difference {float((a - b).abs().max() / b.abs().max()):.3g}"


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_a_client_does_not_depend_on_its_neighbours_nor_on_dropping_finished_ones(momentum):
    """Each client trained alone, in a batch, from its own start and anchor, with or without dropping the
    finished clients: the same weights bit for bit (the vector env trains many federations' clients together)."""
    model = make_model("mlp", (60,), 10)
    x, y, offsets = _data((60,))
    trainer = BatchedTrainer(model, x, y, offsets, batch_size=4, lr=0.05, momentum=momentum)
    layout, net = trainer.layout, trainer.fused
    clients = [0, 2, 3, 5]
    starts = torch.stack([layout.flatten(init_params(model, torch.Generator().manual_seed(10 + c))) for c in clients])
    idx, mask = trainer.batch_plan(clients, _gens(clients))

    def run(cols, drop):
        flat = starts[cols].clone()
        anchor = layout.unflatten(starts[cols].clone())  # one anchor per client
        train_fused(layout.unflatten(flat), net, x, y, idx[:, cols], mask[:, cols], anchor, 0.05, momentum, 0.1,
                    drop_finished=drop)
        return flat

    together = run(list(range(len(clients))), True)
    assert torch.equal(together, run(list(range(len(clients))), False))
    for j in range(len(clients)):
        alone = run([j], True)
        assert torch.equal(together[j], alone[0]), f"client {clients[j]}"


def test_forward_equals_functional_call():
    for model, shape in [(make_model("mlp", (1, 8, 8), 10), (1, 8, 8)), (make_model("logreg", (60,), 10), (60,)),
                         (_deep(60), (60,))]:
        x, _, _ = _data(shape)
        params = init_params(model, torch.Generator().manual_seed(3))
        net = fused_net(model, x)
        assert torch.equal(forward(net, params, x), functional_call(model, params, (x,)))


def test_which_models_qualify():
    x2, x4 = torch.zeros(3, 60), torch.zeros(3, 1, 8, 8)
    assert fused_net(make_model("mlp", (1, 8, 8), 10), x4).layers == (("1.weight", "1.bias"), ("3.weight", "3.bias"))
    assert fused_net(make_model("logreg", (60,), 10), x2).layers == (("1.weight", "1.bias"),)
    assert fused_net(nn.Sequential(nn.Linear(60, 10, bias=False)), x2).layers == (("0.weight", None),)
    for model, x in [(make_model("fedmgda_cnn", (1, 28, 28), 10), torch.zeros(3, 1, 28, 28)),
                     (nn.Sequential(nn.Flatten(), nn.Linear(60, 10), nn.ReLU()), x2),  # ends in a ReLU
                     (nn.Sequential(nn.Flatten(), nn.Linear(60, 8), nn.Tanh(), nn.Linear(8, 10)), x2),
                     (nn.Sequential(nn.Flatten(), nn.Linear(60, 8), nn.ReLU(inplace=True), nn.Linear(8, 10)), x2),
                     (nn.Sequential(nn.Linear(8, 10)), torch.zeros(3, 8, 8)),  # per-row Linear
                     (nn.Linear(60, 10), x2),  # not a Sequential
                     (make_model("mlp", (60,), 10), x2.double())]:
        assert fused_net(model, x) is None, model
