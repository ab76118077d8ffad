"""The env under hostile input (issue #8): property-based tests over configs, seeds and action sequences.

Whatever a user passes, the env either works or raises ``ValueError`` with a message — no other
exception; no NaN or infinity in any observation or reward; a rejected ``step`` changes nothing.
Configs are tiny (6–8 clients, logistic regression, 30 samples each) so each example takes a
fraction of a second; ``max_examples`` is modest.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedsel_env.config import DEFAULT_CONFIG
from fedsel_env.env import FedSelectEnv

from conftest import SMALL

torch.set_num_threads(1)

BASE = {**SMALL, "max_rounds": 3}  # conftest's 6-client federation, a 3-round episode per example

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Values nobody should pass, mixed with ordinary ones: every field gets some of each.
HOSTILE = st.sampled_from([None, -1, 0, 1, 2, 3, 7, -0.5, 0.5, 1.5, 1e300, -1e300, math.nan, math.inf, -math.inf,
                           "", "abc", "fedavg", True, False, [], [0], [1, 2], {}, {"x": 1}, 10**12, 2**63])
NUMBERS = st.one_of(st.integers(-5, 40), st.floats(allow_nan=True, allow_infinity=True, width=64))
FIELD_VALUES = {
    "dataset": st.sampled_from(["digits", "mnist", "imagenet", None]),
    "dataset_params": st.one_of(HOSTILE, st.fixed_dictionaries({}, optional={"root": HOSTILE, "alpha": NUMBERS})),
    "num_clients": st.one_of(st.integers(-2, 12), HOSTILE),
    "clients_per_round": st.one_of(st.integers(-1, 9), HOSTILE),
    "samples_per_client": st.one_of(st.integers(-1, 60), HOSTILE),
    "test_fraction": st.one_of(st.floats(-1, 2), HOSTILE),
    "quantity_skew": st.one_of(st.floats(-1, 6), HOSTILE),
    "partition": st.sampled_from(["iid", "sigma", "two_label", "shards", "dirichlet", "natural", "zipf", 3]),
    "partition_params": st.one_of(HOSTILE, st.fixed_dictionaries({}, optional={
        "sigma": NUMBERS, "alpha": NUMBERS, "shards_per_client": NUMBERS, "bogus": NUMBERS})),
    "model": st.sampled_from(["logreg", "mlp", "resnet", None]),
    "model_params": st.one_of(HOSTILE, st.fixed_dictionaries({}, optional={"hidden": NUMBERS})),
    "local_epochs": st.one_of(st.integers(-1, 3), HOSTILE),
    "batch_size": st.one_of(st.integers(-1, 64), HOSTILE),
    "lr": st.one_of(st.floats(allow_nan=True, allow_infinity=True), HOSTILE),
    "momentum": st.one_of(st.floats(-1, 1.5), HOSTILE),
    "aggregator": st.sampled_from(["fedavg", "qfedavg", "qfedsgd", "fedmgda+", "fedprox", "fedsum", None]),
    "aggregator_params": st.one_of(HOSTILE, st.fixed_dictionaries({}, optional={
        "q": NUMBERS, "L": NUMBERS, "epsilon": NUMBERS, "mu": NUMBERS, "global_lr": NUMBERS})),
    "system": st.one_of(HOSTILE, st.fixed_dictionaries({}, optional={
        "availability": st.one_of(st.floats(-1, 2), HOSTILE), "noise_std": st.one_of(NUMBERS, HOSTILE),
        "cpu_share": st.one_of(HOSTILE, st.lists(NUMBERS, max_size=3)),
        "bandwidth": st.one_of(HOSTILE, st.lists(NUMBERS, max_size=3)),
        "classes": st.one_of(HOSTILE, st.lists(st.lists(NUMBERS, max_size=4), max_size=3))})),
    "action_mode": st.sampled_from(["one", "topk", "subset", "all", 0]),
    "target_accuracy": st.one_of(st.floats(-1, 2), HOSTILE),
    "max_rounds": st.one_of(st.integers(-1, 4), HOSTILE),
    "reward": st.sampled_from(["favor", "accuracy_gain", "time_penalised", "gold", None]),
    "reward_params": st.one_of(HOSTILE, st.fixed_dictionaries({}, optional={
        "xi": NUMBERS, "scale": NUMBERS, "time_weight": NUMBERS})),
    "pca_components": st.one_of(st.integers(-1, 10), HOSTILE),
    "observation": st.sampled_from(["dict", "flat", "image", None]),
    "flat_parts": st.one_of(HOSTILE, st.lists(st.sampled_from(["weights", "clients", "progress", "pixels"]),
                                              max_size=4)),
    "eval_every": st.one_of(st.integers(-1, 3), HOSTILE),
    "divergence_loss": st.one_of(st.floats(allow_nan=True, allow_infinity=True), HOSTILE),
    "federation_seed": st.one_of(st.integers(-3, 2**40), HOSTILE),
    "adversary": st.one_of(HOSTILE, st.fixed_dictionaries({}, optional={
        "attackers": st.one_of(HOSTILE, st.lists(st.integers(-2, 8), max_size=4)),
        "attacker_fraction": st.one_of(st.floats(-0.5, 1.5), HOSTILE),
        "loss_scale": NUMBERS, "loss_shift": NUMBERS, "update_scale": NUMBERS, "update_bias": NUMBERS,
        "free_rider": st.one_of(st.booleans(), HOSTILE), "dropout": st.one_of(st.floats(-0.5, 1.5), HOSTILE),
        "straggler_fraction": st.one_of(st.floats(-0.5, 1.5), HOSTILE),
        "straggler_distribution": st.sampled_from(["pareto", "lognormal", "cauchy", None]),
        "straggler_scale": NUMBERS, "straggler_shape": NUMBERS,
        "deadline": st.one_of(NUMBERS, HOSTILE)})),
    "bogus_field": HOSTILE,
}


def finite_observation(obs) -> bool:
    parts = obs.values() if isinstance(obs, dict) else [obs]
    return all(np.all(np.isfinite(np.asarray(v))) for v in parts)


def snapshot(env: FedSelectEnv):
    """Everything a step could change: counters, clock, model, generators, the observation."""
    fed, view = env.federation, env.view
    return (env._round, env.tally.updates_sent, fed.round, fed.system.clock, fed.global_params.clone(),
            fed.system.available.copy(), fed.system.took_part_last.copy(),
            str(fed.system.rng.bit_generator.state), str(fed.adversary.rng.bit_generator.state),
            str(env.np_random.bit_generator.state), view.step, view.participation.copy(), view.loss.copy(),
            view.observe())


def same_snapshot(a, b) -> bool:
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor):
            if not torch.equal(x, y):
                return False
        elif isinstance(x, dict):
            if x.keys() != y.keys() or not all(np.array_equal(x[k], y[k]) for k in x):
                return False
        elif isinstance(x, np.ndarray):
            if not np.array_equal(x, y):
                return False
        elif x != y:
            return False
    return True


def play(env: FedSelectEnv, actions) -> None:
    """Step through ``actions``; each either works (finite, in-space observation and reward) or is a
    ValueError that leaves the env exactly as it was."""
    for action in actions:
        before = snapshot(env)
        try:
            obs, reward, terminated, truncated, info = env.step(action)
        except ValueError as e:
            assert str(e), "a ValueError needs a message"
            assert same_snapshot(before, snapshot(env)), f"rejected action {action!r} changed the env"
            continue
        assert finite_observation(obs) and math.isfinite(reward)
        assert env.observation_space.contains(obs)
        assert isinstance(terminated, bool) and isinstance(truncated, bool)
        if terminated or truncated:
            obs, info = env.reset(seed=1)
            assert finite_observation(obs)


def names_a_field(message: str, fields) -> bool:
    """Whether an error message names one of ``fields`` (a ``*_params`` field may be named by its stem:
    "unknown aggregator parameter(s) ...")."""
    return any(f in message or (f.endswith("_params") and f[:-len("_params")] in message) for f in fields)


def builds_and_plays(overrides, seed) -> bool:
    """Build the env from ``BASE`` + ``overrides`` and play a whole episode and a step past it: True; or False
    when the config is rejected. ``BASE`` alone is valid, so a rejection must be a ValueError whose message
    names one of the overridden fields; any other exception fails."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # solvers and overflow warnings are fine; exceptions are not
        try:
            env = FedSelectEnv(config={**BASE, **overrides})
        except ValueError as e:
            assert names_a_field(str(e), overrides), f"{overrides!r} rejected by a message naming none of them: {e}"
            return False
        obs, info = env.reset(seed=seed)
        assert finite_observation(obs)
        assert env.observation_space.contains(obs)
        play(env, [env.action_space.sample() for _ in range(env.config["max_rounds"] + 1)])
        return True


# regressions the fuzzing found: a batch of 10^12 rows, an exploding learning rate in the profiling round,
# non-finite learning rates and losses, q-FedAvg with a huge q, heavy straggler tails past the deadline
@pytest.mark.parametrize("overrides, builds", [
    ({"batch_size": 10**12}, True),
    ({"lr": 1e300}, True),
    ({"lr": math.inf}, False),
    ({"aggregator": "qfedavg", "aggregator_params": {"q": 1e300}}, True),
    ({"adversary": {"straggler_fraction": 1.0, "straggler_shape": 1e-3, "deadline": 1e300}}, True),
    ({"adversary": {"attackers": [0], "loss_scale": 1e300, "update_scale": 1e300}, "aggregator": "qfedavg"}, True),
])
def test_configs_the_fuzzing_found(overrides, builds):
    assert builds_and_plays(overrides, 0) is builds


def test_any_config_works_or_raises_value_error():
    """Any config builds and plays, or is rejected with a ValueError naming a field it sets; and the fuzzing
    checks something: a fair share of the drawn configs build and play, and a fair share are rejected."""
    outcomes = []

    @FUZZ
    @given(st.lists(st.sampled_from(sorted(FIELD_VALUES)), max_size=3, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({k: FIELD_VALUES[k] for k in keys})), st.integers(0, 2**31 - 1))
    def check(overrides, seed):
        outcomes.append(builds_and_plays(overrides, seed))

    check()
    built, total = sum(outcomes), len(outcomes)
    assert total >= 20, f"hypothesis drew only {total} configs"
    assert built >= total // 5, f"only {built} of {total} fuzzed configs built and played"
    assert total - built >= total // 5, f"only {total - built} of {total} fuzzed configs were rejected"


# ------------------------------------------------------------------------------------------- actions
def hostile_actions(n: int):
    """Actions of every kind: valid ones for each mode, wrong shapes and dtypes, NaN, strings, nesting."""
    return st.one_of(
        st.integers(-3, n + 2), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(), st.none(), st.text(max_size=3), st.just({}), st.just([[1, 2], [3]]),
        st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=n, max_size=n).map(
            lambda v: np.asarray(v, dtype=np.float32)),
        st.lists(st.floats(-1, 1, width=32), min_size=n, max_size=n).map(lambda v: np.asarray(v, np.float32)),
        st.lists(st.integers(0, 1), min_size=n, max_size=n).map(lambda v: np.asarray(v, np.int8)),
        st.lists(st.integers(-1, 2), min_size=0, max_size=n + 2).map(np.asarray),
        st.lists(st.sampled_from(["a", "1"]), min_size=n, max_size=n),
        st.lists(st.booleans(), min_size=n, max_size=n).map(np.asarray),
        st.lists(st.floats(-2, 2), min_size=n, max_size=n).map(lambda v: np.asarray(v, np.float64).reshape(1, -1)),
        st.just(np.zeros(n, dtype=np.complex64)), st.just(np.array("x")),
    )


ENV_CACHE = {}


def tiny_env(mode: str, aggregator: str, adversary: bool) -> FedSelectEnv:
    key = (mode, aggregator, adversary)
    if key not in ENV_CACHE:
        adv = {"attackers": [0, 3], "loss_scale": 1e6, "update_scale": -50.0, "dropout": 0.3,
               "straggler_fraction": 0.5, "deadline": 6.0} if adversary else {}
        ENV_CACHE[key] = FedSelectEnv(config={**BASE, "action_mode": mode, "aggregator": aggregator,
                                              "max_rounds": 4, "adversary": adv})
    return ENV_CACHE[key]


@FUZZ
@given(st.sampled_from(["one", "topk", "subset"]), st.sampled_from(["fedavg", "qfedavg", "fedmgda+", "qfedsgd"]),
       st.booleans(), st.integers(0, 1000), st.lists(hostile_actions(BASE["num_clients"]), min_size=1, max_size=8))
def test_any_action_sequence_works_or_is_rejected_without_side_effects(mode, aggregator, adversary, seed, actions):
    env = tiny_env(mode, aggregator, adversary)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obs, _ = env.reset(seed=seed)
        assert finite_observation(obs)
        play(env, actions)


@FUZZ
@given(st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=True), st.text(max_size=3), st.booleans(),
                 st.just([1, 2]), st.just(np.int64(3)), st.just(np.float32(2.0))))
def test_reset_seed_works_or_raises_value_error(seed):
    """An integer >= 0 (Python or numpy, not a bool) seeds the episode; anything else is a ValueError naming it."""
    env = tiny_env("topk", "fedavg", False)
    valid = isinstance(seed, (int, np.integer)) and not isinstance(seed, (bool, np.bool_)) and seed >= 0
    if not valid:
        with pytest.raises(ValueError, match="seed"):
            env.reset(seed=seed)
        return
    obs, _ = env.reset(seed=seed)
    assert finite_observation(obs)


@pytest.mark.parametrize("config", ["tiny", 5, [("num_clients", 4)], None])
def test_config_that_is_not_a_mapping(config):
    if config is None:
        FedSelectEnv(config=config, preset="tiny")  # None means "the preset as it is"
        return
    with pytest.raises(ValueError, match="config"):
        FedSelectEnv(config=config)


@pytest.mark.parametrize("preset", [5, ["tiny"], "huge"])
def test_bad_preset_raises_value_error(preset):
    with pytest.raises(ValueError, match="preset"):
        FedSelectEnv(preset=preset)


def test_user_config_is_not_mutated():
    cfg = {**BASE, "system": {"availability": 0.5}, "adversary": {"attackers": (1, 0), "dropout": 0.1},
           "flat_parts": ("weights",), "aggregator_params": None}
    frozen = repr(cfg)
    FedSelectEnv(config=cfg)
    assert repr(cfg) == frozen
    assert DEFAULT_CONFIG["adversary"]["attackers"] == [] and DEFAULT_CONFIG["system"]["availability"] == 0.8
