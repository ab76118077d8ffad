"""Batched local training (docs/SPEC.md §3.4) equals training each client on its own, with the same minibatches."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedsel_env.sim.models import init_params, make_model
from fedsel_env.sim.training import BatchedTrainer


def _setup(model_name, shape, sizes, seed=0):
    g = torch.Generator().manual_seed(seed)
    total = int(sum(sizes))
    x = torch.randn((total, *shape), generator=g)
    y = torch.randint(0, 10, (total,), generator=g)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    model = make_model(model_name, shape, 10)
    return model, x, y, offsets


def _reference(model, layout, x, y, offsets, client, w0, idx, mask, lr, momentum, prox_mu):
    """Plain per-client SGD with torch.optim over the client's own batch sequence."""
    params = {n: t.clone().requires_grad_(True) for n, t in layout.unflatten(w0.clone()).items()}
    anchor = {n: t.detach().clone() for n, t in params.items()}
    opt = torch.optim.SGD(list(params.values()), lr=lr, momentum=momentum)
    for s in range(idx.shape[0]):
        m = mask[s].bool()
        if not m.any():
            continue
        rows = idx[s][m]
        out = torch.func.functional_call(model, params, (x[rows],))
        loss = F.cross_entropy(out, y[rows])
        if prox_mu:
            loss = loss + 0.5 * prox_mu * sum(((params[n] - anchor[n]) ** 2).sum() for n in params)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return layout.flatten({n: t.detach() for n, t in params.items()})


@pytest.mark.parametrize("model_name,shape", [("logreg", (1, 8, 8)), ("mlp", (1, 8, 8)),
                                              ("fedmgda_cnn", (1, 28, 28))])
@pytest.mark.parametrize("momentum,prox_mu", [(0.0, 0.0), (0.9, 0.1)])
def test_batched_equals_per_client(model_name, shape, momentum, prox_mu):
    sizes = [23, 7, 15] if model_name != "fedmgda_cnn" else [13, 5]
    model, x, y, offsets = _setup(model_name, shape, sizes)
    trainer = BatchedTrainer(model, x, y, offsets, batch_size=4, lr=0.05, local_epochs=2, momentum=momentum)
    w0 = trainer.layout.flatten(init_params(model, torch.Generator().manual_seed(1)))
    clients = list(range(len(sizes)))
    gens = [np.random.default_rng([7, c]) for c in clients]
    batched = trainer.train(w0, clients, gens, prox_mu=prox_mu)
    idx, mask = trainer.batch_plan(clients, [np.random.default_rng([7, c]) for c in clients])
    for j, c in enumerate(clients):
        ref = _reference(model, trainer.layout, x, y, offsets, c, w0, idx[:, j], mask[:, j], 0.05, momentum, prox_mu)
        torch.testing.assert_close(batched[j], ref, rtol=1e-4, atol=1e-5)


def test_batch_plan_covers_each_client_once_per_epoch():
    model, x, y, offsets = _setup("logreg", (1, 8, 8), [10, 3])
    trainer = BatchedTrainer(model, x, y, offsets, batch_size=4, lr=0.1, local_epochs=3)
    idx, mask = trainer.batch_plan([0, 1], [np.random.default_rng(0), np.random.default_rng(1)])
    assert idx.shape == (9, 2, 4)  # client 0: 3 epochs × ceil(10/4)=3 steps
    for j, (lo, hi) in enumerate([(0, 10), (10, 13)]):
        rows = idx[:, j][mask[:, j].bool()].numpy()
        assert sorted(rows.tolist()) == sorted(list(range(lo, hi)) * 3)


def test_order_does_not_depend_on_other_clients():
    """A client's local result is the same whoever else is selected (common random numbers)."""
    model, x, y, offsets = _setup("mlp", (1, 8, 8), [12, 9, 17])
    trainer = BatchedTrainer(model, x, y, offsets, batch_size=5, lr=0.1)
    w0 = trainer.layout.flatten(init_params(model, torch.Generator().manual_seed(0)))
    a = trainer.train(w0, [1], [np.random.default_rng([3, 1])])
    b = trainer.train(w0, [0, 1, 2], [np.random.default_rng([3, c]) for c in (0, 1, 2)])
    torch.testing.assert_close(a[0], b[1], rtol=1e-5, atol=1e-6)


def test_full_gradient_matches_autograd():
    model, x, y, offsets = _setup("logreg", (1, 8, 8), [30, 700])
    trainer = BatchedTrainer(model, x, y, offsets, batch_size=4, lr=0.1)
    w0 = trainer.layout.flatten(init_params(model, torch.Generator().manual_seed(0)))
    g = trainer.full_gradients(w0, [1, 0], rows_per_step=256)
    for j, c in enumerate([1, 0]):
        p = {n: t.clone().requires_grad_(True) for n, t in trainer.layout.unflatten(w0.clone()).items()}
        lo, hi = offsets[c], offsets[c + 1]
        F.cross_entropy(torch.func.functional_call(model, p, (x[lo:hi],)), y[lo:hi]).backward()
        torch.testing.assert_close(g[j], trainer.layout.flatten({n: t.grad for n, t in p.items()}),
                                   rtol=1e-4, atol=1e-6)


def test_model_parameter_counts():
    from fedsel_env.sim.models import num_parameters
    assert num_parameters(make_model("fedmgda_cnn", (1, 28, 28), 10)) == 21840
    assert num_parameters(make_model("favor_cnn", (1, 28, 28), 10)) == 431080
    with pytest.raises(ValueError, match="needs inputs of shape"):
        make_model("favor_cnn", (1, 8, 8), 10)
    with pytest.raises(ValueError, match="unknown model"):
        make_model("resnet", (1, 8, 8), 10)


@pytest.mark.parametrize("model_name", ["mlp", "logreg"])
def test_loss_pass_without_copying_every_row_equals_the_gathered_pass(model_name):
    """Issue #43: F_k and the rms loss come from a view of consecutive clients' rows (the profiling round's all)
    or from rows gathered a pass at a time — bit for bit what one copy of every listed client's rows gave, over
    several passes (2,674 rows a pass of 28 × 28 inputs) with a short last one, and the stored training data stay as they were."""
    sizes = [1500, 5, 1800, 1, 1400]
    model, x, y, offsets = _setup(model_name, (1, 28, 28), sizes, seed=3)
    trainer = BatchedTrainer(model, x, y, offsets, batch_size=4, lr=0.05)
    assert trainer.rows_per_pass(x) < sum(sizes)  # several passes
    w = trainer.layout.flatten(init_params(model, torch.Generator().manual_seed(2)))
    x_before, y_before = x.clone(), y.clone()

    def gathered(ids):  # the loss pass as it was: one copy of all the listed clients' rows
        rows = trainer.client_rows(np.asarray(ids))
        loss, _ = trainer.per_sample_losses(w, x[rows], y[rows])
        return trainer.client_loss_summary(loss, np.asarray(ids))

    for ids in ([0, 1, 2, 3, 4], [1, 2, 3], [4, 0, 2], [2, 0], [3], [2, 2]):
        span = trainer.client_span(np.asarray(ids))
        assert (span is not None) == (ids in ([0, 1, 2, 3, 4], [1, 2, 3], [3]))
        mean, rms = trainer.client_losses(w, ids)
        want_mean, want_rms = gathered(ids)
        np.testing.assert_array_equal(mean, want_mean)
        np.testing.assert_array_equal(rms, want_rms)
    rows = trainer.client_rows(np.array([4, 0, 2]))
    for per_pass in (7, 1024, 9000):  # a pass at a time against the slices of one gathered copy
        got = trainer.per_sample_losses(w, x, y, rows_per_pass=per_pass, rows=rows)
        want = trainer.per_sample_losses(w, x[rows], y[rows], rows_per_pass=per_pass)
        for a, b in zip(got, want):
            assert torch.equal(a, b)
    assert torch.equal(x, x_before) and torch.equal(y, y_before)
