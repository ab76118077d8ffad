"""bench/bench_floor.py (issue #43): the FLOPs of a round counted by hand on a tiny shape, and the floor's local SGD
step is the real gradient step (so its time is that of the arithmetic the env does)."""
import numpy as np
import pytest
import torch
from torch import nn

from bench.bench_floor import Floor, RoundShape, reset_flops, round_flops


def test_round_flops_of_a_tiny_mlp_by_hand():
    # layers 4→3→2: 18 multiply-adds a sample forward, 6 of them above the first layer; P = 12 + 3 + 6 + 2 = 23
    shape = RoundShape(((4, 3), (3, 2)), np.array([5, 15, 25]), k=2, epochs=2, batch=10, test_rows=7, d=2)
    assert shape.params == 23
    f = round_flops(shape, selected_sizes=[5, 15])
    assert f["loss pass"] == 2 * 18 * 20
    # per epoch: 20 samples × 2 × (forward 18 + weight gradients 18 + input gradients above the first layer 6)
    # and ⌈5/10⌉ + ⌈15/10⌉ = 3 steps × 2 × P for p −= η g
    assert f["training"] == 2 * (20 * 2 * 42 + 3 * 2 * 23)
    assert f["aggregation"] == 2 * 2 * 23
    assert f["evaluation"] == 2 * 18 * 7
    assert f["projections"] == 2 * 3 * 23 * 2
    # without a selection: the expected sizes of K clients drawn uniformly (mean 15, mean ⌈n/10⌉ = 2)
    expected = round_flops(shape)
    assert expected["loss pass"] == 2 * 18 * 30
    assert expected["training"] == 2 * (30 * 2 * 42 + 4 * 2 * 23)


def test_the_floors_sgd_step_is_the_gradient_step_of_the_mean_cross_entropy():
    torch.manual_seed(0)
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 1, 0, 1, 0])
    shape = RoundShape(((4, 3), (3, 2)), np.array([6]), k=1, epochs=1, batch=6, test_rows=6, d=2)
    floor = Floor(shape, x, y, np.array([0, 6]), x, y, torch.zeros(6, dtype=torch.long), e=1)
    start = torch.cat([t.reshape(1, -1) for w, b in floor.w for t in (w, b)], dim=1)
    out = floor._train(start, np.array([6]), np.array([0]))  # one full-batch step: the shuffle does not matter
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    torch.nn.utils.vector_to_parameters(start[0], [p for m in (model[0], model[2]) for p in (m.weight, m.bias)])
    nn.functional.cross_entropy(model(x), y).backward()
    expected = torch.cat([(p - 0.05 * p.grad).detach().reshape(-1)
                          for m in (model[0], model[2]) for p in (m.weight, m.bias)])
    assert torch.allclose(out[0], expected, atol=1e-6)
    assert not torch.equal(out[0], start[0])


def test_reset_flops_are_a_round_of_every_client_and_the_gram_fit():
    # N = 3 clients of 5, 15, 25 samples; layers 4→3→2 (18 multiply-adds a sample, P = 23); d = 2
    shape = RoundShape(((4, 3), (3, 2)), np.array([5, 15, 25]), k=2, epochs=1, batch=10, test_rows=7, d=2)
    f = reset_flops(shape)
    assert f["loss pass"] == 2 * 18 * 45                      # every client's rows at w_0
    assert f["training"] == 45 * 2 * 42 + (1 + 2 + 3) * 2 * 23  # one epoch of every client, ⌈n/10⌉ steps each
    assert f["aggregation"] == 2 * 3 * 23 and f["evaluation"] == 2 * 18 * 7
    assert f["projections"] == 2 * 4 * 23 * 2                 # the N + 1 = 4 profiling models
    assert f["PCA fit"] == 2 * 4 * 4 * 23 + 2 * 2 * 4 * 23    # X_c X_cᵀ and the d axes Uᵀ X_c


def test_the_env_rates_time_the_resets_apart():
    # bench_scale's rates (bench_floor's env columns): every episode of 2 rounds ends in a reset, timed apart from
    # the steps; the steps alone are faster than the steps with their resets, and an episode is 2 rounds
    from bench.bench_scale import batched_rate, single_rate
    from fedsel_env.config import PRESETS

    cfg = {**PRESETS["tiny"], "max_rounds": 2, "federation_seed": None}
    with_resets, _reset_s, alone, episode = single_rate(cfg, seconds=0.0)
    assert alone > with_resets > 0 and episode == 2
    with_resets, _build, alone, episode = batched_rate(cfg, 3, seconds=0.0)
    assert alone > with_resets > 0 and episode == 2
