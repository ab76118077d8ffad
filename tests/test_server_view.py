"""FAVOR's PCA fitted from the Gram matrix on a GPU (fedsel_env/server_view.py: gram_pca, issue #33).

On a real profiling round (the default preset's 20 clients + w_0, and a CNN's 50 + 1) the Gram axes are
scikit-learn's full-SVD axes with the same signs, and new models' coordinates agree to rounding; the axis of
no variance (n centred rows have rank n − 1) is zero instead of an arbitrary unit vector; rows all equal give
zero axes and no NaN. On a GPU (skipped here) the env's reset takes this path and its coordinates match the CPU's.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.decomposition import PCA

import fedsel_env.server_view as sv
from fedsel_env.env import FedSelectEnv
from fedsel_env.server_view import WeightPCA, gram_pca


def _profiling_rows(config):
    """The (N+1, P) float64 rows a reset's profiling round fits the PCA on."""
    got = {}
    real = sv.fit_profiling_pca

    def spy(w0, local, components, seed, **kw):
        got["x"] = torch.cat([w0.unsqueeze(0), local]).to(torch.float64).cpu()
        got["args"] = (components, seed)
        return real(w0, local, components, seed, **kw)

    sv.fit_profiling_pca = spy
    try:
        env = FedSelectEnv(config=config)
        env.reset(seed=3)
        env.close()
    finally:
        sv.fit_profiling_pca = real
    return got["x"], got["args"]


def _fashion_mnist_or_skip():
    from fedsel_env.sim.data_files import DEBIAN_FASHION_MNIST

    if not DEBIAN_FASHION_MNIST.is_dir():
        pytest.skip("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")


@pytest.mark.parametrize("config", [{}, {"dataset": "fashion_mnist", "model": "fedmgda_cnn", "num_clients": 50,
                                         "samples_per_client": 100}], ids=["default", "fedmgda_cnn"])
def test_gram_axes_are_scikit_learns_full_svd_axes(config):
    if config:
        _fashion_mnist_or_skip()
    x, (components, seed) = _profiling_rows(config)
    n = x.shape[0]
    d = min(components, *x.shape)
    assert d == n  # both presets fit all n axes: the last one has no variance
    sk = PCA(n_components=d, random_state=seed, svd_solver="full").fit(x.numpy())
    mean, vt = gram_pca(x, d)
    torch.testing.assert_close(mean, torch.from_numpy(sk.mean_), rtol=0, atol=1e-15)
    axes = torch.from_numpy(sk.components_)
    agree = (axes[:n - 1] * vt[:n - 1]).sum(dim=1)
    assert agree.min() > 1 - 1e-9, agree.min()  # the same unit axes, the same signs
    assert torch.count_nonzero(vt[n - 1]) == 0  # no variance along it: zero, not an arbitrary direction
    new = x + 0.01 * torch.randn(x.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    want = (new - torch.from_numpy(sk.mean_)) @ axes[:n - 1].T
    got = (new - mean) @ vt[:n - 1].T
    assert (got - want).abs().max() < 1e-9 * want.abs().max()


def test_rows_all_equal_give_zero_axes_and_no_nan():
    x = torch.ones(5, 30, dtype=torch.float64) * 0.7
    mean, vt = gram_pca(x, 5)
    assert torch.equal(mean, x[0]) and torch.count_nonzero(vt) == 0
    pca = WeightPCA(x, 7, seed=0)  # a CPU tensor: scikit-learn's fit, as before
    assert pca.components.shape == (7, 30)
    assert np.isfinite(pca.project(x)).all()


def test_the_gram_fit_replaces_broken_models_with_w0_as_the_host_fit_does():
    """The device path's own handling of a local model that blew up (inf / NaN rows), run on the CPU."""
    x, (components, seed) = _profiling_rows({})
    w0, local = x[0].float(), x[1:].float().clone()
    local[2, 5] = float("inf")
    local[7, 0] = float("nan")
    host_pca, host_rows, host_broken = sv.fit_profiling_pca(w0, local, components, seed, gram=False)
    pca, rows, broken = sv.fit_profiling_pca(w0, local, components, seed, gram=True)
    assert broken == host_broken == 2 and np.isfinite(rows).all()
    # rows 3 and 8 (the broken models) sit at w_0's coordinates, as on the host
    np.testing.assert_array_equal(rows[3], rows[0])
    np.testing.assert_array_equal(rows[8], rows[0])
    n = x.shape[0] - 2  # distinct rows left; the axes with variance are n - 1
    dist = lambda r: np.linalg.norm(r[:, None] - r[None], axis=2)  # noqa: E731 (rotation-free comparison)
    np.testing.assert_allclose(dist(rows[:, :n - 1]), dist(host_rows[:, :n - 1]), atol=1e-9 * dist(host_rows).max())


def test_the_cpu_keeps_scikit_learns_fit():
    """The records' coordinates come from scikit-learn on the CPU: a CPU tensor or numpy fits there, bit for bit."""
    x, (components, seed) = _profiling_rows({"num_clients": 6, "clients_per_round": 2})
    d = min(components, *x.shape)
    sk = PCA(n_components=d, random_state=seed).fit(x.numpy())
    for given in (x, x.numpy()):
        pca = WeightPCA(given, components, seed)
        assert torch.equal(pca.components[:d], torch.from_numpy(sk.components_))


def _episode(config, seed=4, rounds=4):
    """A reset and ``rounds`` steps of fixed scores: each observation's weights, and every reward and accuracy."""
    env = FedSelectEnv(config=config)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(0)
    weights, outcome = [obs["weights"]], []
    for _ in range(rounds):
        obs, reward, term, trunc, info = env.step(rng.random(env.num_clients).astype(np.float32))
        weights.append(obs["weights"])
        outcome.append((reward, info["accuracy"], tuple(info["selected"])))
    env.close()
    return np.stack(weights), outcome


def test_the_default_pca_settings_are_the_records_and_the_variants_move_only_the_coordinates():
    """``pca_fit: auto`` and ``pca_dtype: float64`` are the records' map (bit for bit what ``svd`` gives on the CPU);
    the named variants ``pca_fit: gram`` and ``pca_dtype: float32`` (issue #43) move the PCA coordinates by rounding
    only — where the profiling models have variance — and leave what the clients train, and so the rewards, alone."""
    base = {"num_clients": 12, "clients_per_round": 3, "pca_components": 8, "max_rounds": 6}
    w, out = _episode(base)
    w_svd, out_svd = _episode({**base, "pca_fit": "svd"})
    assert np.array_equal(w, w_svd) and out == out_svd
    scale = np.abs(w).max()
    for variant, tol in (({"pca_fit": "gram"}, 1e-9), ({"pca_dtype": "float32"}, 1e-5),
                         ({"pca_fit": "gram", "pca_dtype": "float32"}, 1e-5)):
        w_v, out_v = _episode({**base, **variant})
        assert out_v == out, variant  # the selection, the rewards and the accuracies: untouched
        assert not np.array_equal(w_v, w) or variant == {"pca_fit": "gram"}
        np.testing.assert_allclose(w_v, w, rtol=0, atol=tol * scale, err_msg=str(variant))


def test_the_float32_projection_computes_in_float32_and_refuses_other_dtypes():
    x = torch.randn(6, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    exact = WeightPCA(x, 4, seed=0)
    fast = WeightPCA(x, 4, seed=0, dtype=torch.float32)
    assert torch.equal(fast.components, exact.components)  # the same fit ...
    assert fast.project(x.float()).dtype == np.float32      # ... projected in float32
    np.testing.assert_allclose(fast.project(x.float()), exact.project(x), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="expected torch.float64 or torch.float32"):
        WeightPCA(x, 4, seed=0, dtype=torch.float16)


def test_the_projection_of_float32_weights_is_the_converted_weights_projection_bit_for_bit():
    # project() subtracts the float64 mean from float32 weights in one kernel (issue #43): the same numbers as
    # converting them first; float64 weights into a float32 projection are still converted first
    g = torch.Generator().manual_seed(2)
    x = torch.randn(30, 500, dtype=torch.float64, generator=g)
    new = torch.randn(5, 500, generator=g)
    pca = WeightPCA(x, 8, seed=0)
    mean, comps = pca.mean, pca.components
    assert np.array_equal(pca.project(new), ((new.double() - mean) @ comps.T).numpy())
    assert np.array_equal(pca.project(new[0]), ((new[0].double() - mean) @ comps.T).numpy())
    f32 = WeightPCA(x, 8, seed=0, dtype=torch.float32)
    assert np.array_equal(f32.project(new.double()), ((new - mean.float()) @ comps.float().T).numpy())


@pytest.mark.parametrize("make", [lambda: torch.randn(5, 7), lambda: torch.randn(5, 7, dtype=torch.float64),
                                  lambda: torch.randn(4, 6)[:, ::2], lambda: torch.randn(3, requires_grad=True),
                                  lambda: torch.randn(3).to(torch.bfloat16), lambda: torch.zeros(0)])
@pytest.mark.parametrize("bad", [None, float("nan"), float("inf"), -float("inf")])
def test_all_finite_is_torchs_isfinite_all(make, bad):
    from fedsel_env.sim.training import all_finite

    t = make()
    if bad is not None and t.numel():
        t = t.detach().clone()
        t.view(-1)[-1] = bad
    assert all_finite(t) is bool(torch.isfinite(t).all())


@pytest.mark.parametrize("field, value", [("pca_fit", "qr"), ("pca_fit", None), ("pca_dtype", "float16"),
                                          ("pca_dtype", 32)])
def test_a_bad_pca_setting_names_the_field_and_the_choices(field, value):
    with pytest.raises(ValueError, match=f"{field}.*allowed"):
        FedSelectEnv(config={field: value})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (bench/gpu_check.sh runs it on one)")
def test_a_cuda_reset_fits_on_the_device_and_matches_the_cpu():
    """All 13 axes, so the map is a rotation of the data's span on both devices: the distances between the
    profiling models' coordinates (w_0 and the 12 local models) are the same up to the GPU's float32 rounding,
    however nearly equal singular values turn the individual axes."""
    config = {"num_clients": 12, "clients_per_round": 3, "pca_components": 13}
    dist = {}
    for device in ("cpu", "cuda"):
        env = FedSelectEnv(config={**config, "device": device})
        obs, _ = env.reset(seed=5)
        w = obs["weights"].astype(np.float64)
        dist[device] = np.linalg.norm(w[:, None] - w[None], axis=2)
        if device == "cuda":
            assert env.view.pca.components.device.type == "cuda"
        env.close()
    np.testing.assert_allclose(dist["cuda"], dist["cpu"], rtol=0, atol=1e-3 * dist["cpu"].max())
