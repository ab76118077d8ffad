"""The model zoo (docs/SPEC.md §3.3): parameter counts, and Pool2x2 equal to nn.MaxPool2d(2)."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedsel_env.sim.models import Pool2x2, init_params, make_model, num_parameters


def _with_ties_and_nan(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    x[..., :4, :] = 0.25          # whole windows of equal values: the tie rule matters for gradients
    x[..., 5, 6] = x[..., 4, 7]   # a tie inside one window
    x[0, 0, 1, 1] = float("nan")  # max-pool propagates NaN
    return x


@pytest.mark.parametrize("shape", [(3, 2, 24, 24), (2, 4, 8, 8), (2, 3, 11, 9), (4, 1, 28, 28)])
def test_pool2x2_forward_equals_maxpool_without_autograd(shape):
    x = _with_ties_and_nan(shape)
    ref = nn.MaxPool2d(2)(x)
    with torch.no_grad():
        fast = Pool2x2()(x)
    with torch.inference_mode():
        fast_inf = Pool2x2()(x)
    assert fast.shape == ref.shape
    assert torch.equal(torch.nan_to_num(fast, nan=-7.0), torch.nan_to_num(ref, nan=-7.0))
    assert torch.equal(torch.nan_to_num(fast_inf, nan=-7.0), torch.nan_to_num(ref, nan=-7.0))
    assert bool(torch.isnan(fast[0, 0, 0, 0])) and bool(torch.isnan(ref[0, 0, 0, 0]))


def test_pool2x2_gradient_is_maxpools_including_ties():
    x = _with_ties_and_nan((2, 3, 24, 24))
    x[0, 0, 1, 1] = 0.25  # no NaN in a gradient test
    g = torch.randn(2, 3, 12, 12, generator=torch.Generator().manual_seed(1))
    grads = []
    for pool in (nn.MaxPool2d(2), Pool2x2()):
        xr = x.clone().requires_grad_()
        (pool(xr) * g).sum().backward()
        grads.append(xr.grad)
    assert torch.equal(grads[0], grads[1])
    # the first maximum of a tied window takes the whole gradient, as in nn.MaxPool2d
    assert grads[1][0, 1, 0, 0] == g[0, 1, 0, 0] and grads[1][0, 1, 0, 1] == 0


@pytest.mark.parametrize("name,shape,count", [("fedmgda_cnn", (1, 28, 28), 21_840),
                                              ("favor_cnn", (1, 28, 28), 431_080),
                                              ("cifar_cnn", (3, 32, 32), 62_006)])
def test_cnn_parameter_counts_and_eval_forward_matches_training_forward(name, shape, count):
    net = make_model(name, shape, 10)
    assert num_parameters(net) == count
    params = init_params(net, torch.Generator().manual_seed(0))
    x = torch.randn(5, *shape, generator=torch.Generator().manual_seed(2))
    out_grad_mode = torch.func.functional_call(net, params, (x,))
    with torch.no_grad():
        out_eval = torch.func.functional_call(net, params, (x,))
    torch.testing.assert_close(out_eval, out_grad_mode, rtol=0, atol=0)


def test_pool2x2_under_vmap_grad_matches_per_sample_loop():
    net = make_model("fedmgda_cnn", (1, 28, 28), 10)
    p = init_params(net, torch.Generator().manual_seed(0))
    stacked = {k: torch.stack([v, v * 1.01]) for k, v in p.items()}
    x = torch.randn(2, 4, 1, 28, 28, generator=torch.Generator().manual_seed(3))
    y = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])

    def loss(params, xb, yb):
        return F.cross_entropy(torch.func.functional_call(net, params, (xb,)), yb)

    batched = torch.func.vmap(torch.func.grad(loss))(stacked, x, y)
    for i in range(2):
        single = torch.func.grad(loss)({k: v[i] for k, v in stacked.items()}, x[i], y[i])
        for k in single:
            torch.testing.assert_close(batched[k][i], single[k])
