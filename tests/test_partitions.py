"""Partitions and client sizes (docs/SPEC.md §3.2): each partition's defining property, exact disjoint sizes."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from fedsel_env.sim.partitions import (PARTITIONS, client_sizes, label_histograms, partition_indices,
                                   sizes_from_weights, test_size)


def balanced_labels(per_class: int, num_classes: int = 10, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(num_classes), per_class))


def check_exact_disjoint(parts, sizes, pool_size):
    assert [len(p) for p in parts] == list(sizes)
    everything = np.concatenate(parts)
    assert np.unique(everything).size == everything.size, "an index went to two clients"
    assert everything.min() >= 0 and everything.max() < pool_size


CASES = [("iid", {}), ("sigma", {"sigma": 0.8}), ("sigma", {"sigma": 1.0}), ("two_label", {}),
         ("shards", {"shards_per_client": 2}), ("shards", {"shards_per_client": 5}), ("dirichlet", {"alpha": 0.1}),
         ("dirichlet", {"alpha": 10.0})]


@pytest.mark.filterwarnings("ignore:partition .* too few samples")  # big clients' primaries run short here
@pytest.mark.parametrize("name,params", CASES)
def test_sizes_are_exact_and_no_index_is_shared(name, params):
    labels = balanced_labels(100)
    sizes = np.array([5, 80, 33, 120, 2, 61, 90, 47, 150, 12, 40, 70])  # unequal, sum 710 of 1000
    parts = partition_indices(name, labels, sizes, 10, np.random.default_rng(3), params)
    check_exact_disjoint(parts, sizes, labels.size)


@pytest.mark.parametrize("name,params", CASES)
def test_whole_pool_is_used_exactly_when_asked(name, params):
    labels = balanced_labels(60)
    sizes = np.full(20, 30)  # 600 = the whole pool
    parts = partition_indices(name, labels, sizes, 10, np.random.default_rng(1), params)
    check_exact_disjoint(parts, sizes, labels.size)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(600))


def test_sigma_gives_primary_fraction_and_even_rest():
    labels = balanced_labels(300)
    sizes = np.full(20, 100)
    parts = partition_indices("sigma", labels, sizes, 10, np.random.default_rng(0), {"sigma": 0.8})
    hist = label_histograms(labels, parts, 10)
    primary = hist.argmax(axis=1)
    assert (hist.max(axis=1) == 80).all()  # 80% of 100, exact here
    rest = np.where(np.arange(10)[None, :] == primary[:, None], -1, hist)
    others = np.sort(rest, axis=1)[:, 1:]  # the nine minor labels: 20 spread as 2 or 3 each
    assert others.sum(axis=1).tolist() == [20] * 20
    assert (others.min(axis=1) >= 2).all() and (others.max(axis=1) <= 3).all()
    assert np.bincount(primary, minlength=10).tolist() == [2] * 10  # round-robin: each label primary twice


def test_sigma_within_rounding_for_awkward_sizes():
    labels = balanced_labels(500)
    sizes = np.array([37, 91, 55, 123, 10, 77, 64, 49, 88, 101, 23, 69])
    parts = partition_indices("sigma", labels, sizes, 10, np.random.default_rng(5), {"sigma": 0.5})
    hist = label_histograms(labels, parts, 10)
    assert np.all(np.abs(hist.max(axis=1) - 0.5 * sizes) <= 0.5 + 1e-9)


def test_sigma_one_is_single_label():
    labels = balanced_labels(100)
    parts = partition_indices("sigma", labels, np.full(10, 90), 10, np.random.default_rng(2), {"sigma": 1.0})
    hist = label_histograms(labels, parts, 10)
    assert ((hist > 0).sum(axis=1) == 1).all()
    assert sorted(hist.argmax(axis=1).tolist()) == list(range(10))


def test_favor_preset_pool_fits_exactly_without_warning():
    # FAVOR on Fashion-MNIST: 100 clients x (600 + 100) of 70,000 images, 7,000 per label, sigma = 0.8.
    labels = balanced_labels(7000)
    sizes = np.full(100, 700)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parts = partition_indices("sigma", labels, sizes, 10, np.random.default_rng(0), {"sigma": 0.8})
    check_exact_disjoint(parts, sizes, labels.size)
    hist = label_histograms(labels, parts, 10)
    assert (hist.max(axis=1) == 560).all()
    assert hist.sum() == 70000


def test_sigma_pool_too_small_warns_and_still_gives_exact_sizes():
    labels = balanced_labels(50)  # 50 per label, but 3 clients of 60 want label primaries of 60
    sizes = np.full(3, 60)
    with pytest.warns(UserWarning, match="too few samples"):
        parts = partition_indices("sigma", labels, sizes, 10, np.random.default_rng(0), {"sigma": 1.0})
    check_exact_disjoint(parts, sizes, labels.size)
    hist = label_histograms(labels, parts, 10)
    assert (hist.max(axis=1) == 50).all()  # every sample of the primary label, the shortfall from others


def test_small_label_shortage_is_taken_from_minor_labels_not_the_primary():
    # Label 0 holds 92 samples; 10 clients x 99 at sigma 0.8 ask 79.2 + 9 x 2.2 = 99 of it.
    labels = np.random.default_rng(0).permutation(np.concatenate([np.repeat(np.arange(1, 10), 100), [0] * 92]))
    sizes = np.full(10, 99)
    for seed in range(5):
        parts = partition_indices("sigma", labels, sizes, 10, np.random.default_rng(seed), {"sigma": 0.8})
        hist = label_histograms(labels, parts, 10)
        assert (np.abs(hist.max(axis=1) - 79.2) < 1).all()  # the primary stays within rounding
        assert hist[:, 0].sum() == 92 and hist.sum() == 990


def test_two_label_gives_two_labels_half_each():
    labels = balanced_labels(200)
    parts = partition_indices("two_label", labels, np.full(30, 60), 10, np.random.default_rng(4))
    hist = label_histograms(labels, parts, 10)
    assert ((hist > 0).sum(axis=1) == 2).all()
    assert (np.sort(hist, axis=1)[:, -2:] == 30).all()
    assert np.bincount(np.nonzero(hist)[1], minlength=10).tolist() == [6] * 10  # 60 slots over 10 labels


def test_two_label_with_odd_number_of_classes_never_repeats_a_label():
    labels = balanced_labels(400, num_classes=5)
    for seed in range(10):
        parts = partition_indices("two_label", labels, np.full(17, 40), 5, np.random.default_rng(seed))
        hist = label_histograms(labels, parts, 5)
        assert ((hist > 0).sum(axis=1) == 2).all()


@pytest.mark.parametrize("s", [1, 2, 3])
def test_shards_give_at_most_s_labels(s):
    labels = balanced_labels(120)  # 10 x 120; 20 clients x 60 = 1200: shards of 60/s fit every label exactly
    parts = partition_indices("shards", labels, np.full(20, 60), 10, np.random.default_rng(s),
                              {"shards_per_client": s})
    hist = label_histograms(labels, parts, 10)
    assert ((hist > 0).sum(axis=1) <= s).all()
    assert (hist % (60 // s) == 0).all()  # whole shards only
    assert hist.sum(axis=0).tolist() == [120] * 10


def test_shards_straddle_only_when_labels_cannot_hold_whole_shards():
    labels = np.concatenate([np.repeat(np.arange(10), 99), [0] * 10])  # 109 of label 0, 99 of the others
    parts = partition_indices("shards", labels, np.full(10, 100), 10, np.random.default_rng(0),
                              {"shards_per_client": 2})
    check_exact_disjoint(parts, np.full(10, 100), labels.size)
    hist = label_histograms(labels, parts, 10)
    assert ((hist > 0).sum(axis=1) <= 4).all()


def test_iid_histograms_are_close_to_the_pool():
    rng = np.random.default_rng(0)
    labels = rng.choice(10, size=20000, p=np.linspace(1, 3, 10) / np.linspace(1, 3, 10).sum())
    parts = partition_indices("iid", labels, np.full(10, 1000), 10, np.random.default_rng(1))
    pool_frac = np.bincount(labels, minlength=10) / labels.size
    frac = label_histograms(labels, parts, 10) / 1000
    assert np.abs(frac - pool_frac).max() < 0.05  # std of a fraction here is <= 0.015


def test_dirichlet_is_reproducible_and_alpha_controls_concentration():
    labels = balanced_labels(1000)
    sizes = np.full(20, 200)
    a = partition_indices("dirichlet", labels, sizes, 10, np.random.default_rng(7), {"alpha": 0.5})
    b = partition_indices("dirichlet", labels, sizes, 10, np.random.default_rng(7), {"alpha": 0.5})
    c = partition_indices("dirichlet", labels, sizes, 10, np.random.default_rng(8), {"alpha": 0.5})
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))

    def top_share(alpha):
        parts = partition_indices("dirichlet", labels, sizes, 10, np.random.default_rng(0), {"alpha": alpha})
        hist = label_histograms(labels, parts, 10)
        return (hist.max(axis=1) / sizes).mean()

    assert top_share(0.05) > 0.6 > 0.25 > top_share(100.0)


def test_natural_is_contiguous_devices():
    parts = PARTITIONS["natural"](np.zeros(10, np.int64), np.array([3, 0, 7]), 10, np.random.default_rng(0))
    assert [p.tolist() for p in parts] == [[0, 1, 2], [], [3, 4, 5, 6, 7, 8, 9]]


def test_unknown_partition_and_params_are_rejected_with_the_allowed_ones():
    labels = balanced_labels(10)
    sizes = np.full(2, 10)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"unknown partition 'sigmaa'.*dirichlet.*iid.*shards.*sigma.*two_label"):
        partition_indices("sigmaa", labels, sizes, 10, rng)
    with pytest.raises(ValueError, match=r"unknown partition parameter.*\['alpha'\].*allowed: \['sigma'\]"):
        partition_indices("sigma", labels, sizes, 10, rng, {"alpha": 1})
    with pytest.raises(ValueError, match=r"'sigma' = 1.5"):
        partition_indices("sigma", labels, sizes, 10, rng, {"sigma": 1.5})
    with pytest.raises(ValueError, match=r"'shards_per_client' = 0"):
        partition_indices("shards", labels, sizes, 10, rng, {"shards_per_client": 0})
    with pytest.raises(ValueError, match=r"'alpha' = -1"):
        partition_indices("dirichlet", labels, sizes, 10, rng, {"alpha": -1})
    with pytest.raises(ValueError, match=r"pool holds 100 samples but the client sizes sum to 120"):
        partition_indices("iid", labels, np.full(2, 60), 10, rng)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 5\)"):
        partition_indices("iid", labels, sizes, 5, rng)


def test_quantity_skew_gives_unequal_sizes_with_the_exact_sum():
    sizes = client_sizes(50, 5000, 1.5, np.random.default_rng(0), min_size=10)
    assert sizes.sum() == 5000 and sizes.min() >= 10
    assert sizes.max() > 3 * sizes.min()
    assert np.array_equal(sizes, client_sizes(50, 5000, 1.5, np.random.default_rng(0), min_size=10))
    equal = client_sizes(7, 100, 0.0, np.random.default_rng(0))
    assert equal.sum() == 100 and equal.max() - equal.min() <= 1
    w = np.array([1.0, 1.0, 2.0])
    assert sizes_from_weights(w, 3, 26, min_size=2).tolist() == [7, 7, 12]  # 2 + 20 * (1/4, 1/4, 1/2)
    assert sizes_from_weights(w, 3, 24, min_size=2).tolist() == [7, 6, 11]  # 2 + (4.5, 4.5, 9): one 4.5 rounds up
    with pytest.raises(ValueError, match="at least 10 samples need 100"):
        sizes_from_weights(w, 10, 50, min_size=10)


def test_test_size_rounds_half_up_and_is_at_least_one():
    assert test_size(600, 1 / 6) == 100
    assert test_size(74, 0.2) == 15  # 14.8
    assert test_size(5, 0.1) == 1  # 0.5 rounds up
    assert test_size(2, 0.1) == 1  # at least one test sample
