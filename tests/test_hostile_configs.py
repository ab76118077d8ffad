"""Hostile configs (issue #15, item 6 and "What must hold"): whatever a user writes, the env builds, resets and
steps with finite, in-space values, or refuses with a ValueError naming a field — nothing else, and no hang.

- ``test_any_config_over_every_field``: hypothesis draws configs over *every* documented field of
  ``DEFAULT_CONFIG`` (its ``system`` and ``adversary`` keys and the registered components' parameters
  too), valid and hostile (wrong types, NaN, ±inf, huge, tiny, unknown names); each built env is reset and
  stepped with valid and invalid actions of its action mode. It fails on any exception but ``ValueError``,
  on a hang (``EXAMPLE_SECONDS`` per example, by ``SIGALRM``), on a non-finite observation, reward or
  numeric ``info`` entry, and on an observation outside its space. 200 examples in the default suite;
  ``pytest -m fuzz_long tests/test_hostile_configs.py`` runs 2,000 (``FEDSEL_FUZZ_EXAMPLES`` changes it).
- every defect of the issue's item 6 as an explicit example, and the boundaries that still build.

``tests/test_env_fuzz.py`` (issue #8) checks that a rejected action changes nothing; here a rejected action
only has to be a ValueError that leaves the round count alone.
"""
from __future__ import annotations

import math
import os
import signal
import warnings
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedsel_env.config import DEFAULT_CONFIG
from fedsel_env.env import FedSelectEnv
from fedsel_env.sim import limits

from conftest import SMALL

torch.set_num_threads(1)

BASE = {**SMALL, "max_rounds": 3}
EXAMPLE_SECONDS = 60       # far above any example's time (well under a second); past it is a hang
STEPS = 4                  # steps tried per built env (valid and invalid actions mixed)
LONG_EXAMPLES = int(os.environ.get("FEDSEL_FUZZ_EXAMPLES", "2000"))

# --- values --------------------------------------------------------------------------------------
INF, NAN = math.inf, math.nan
HOSTILE = st.sampled_from([
    None, True, False, -1, 0, 1, 2, 7, 10**9, 10**12, 2**63, 2**64, 10**400,
    -0.5, 0.5, 1.5, 5e-324, 1e-39, 1e300, 1e308, -1e308, NAN, INF, -INF,
    "", "abc", "1/K", "fedavg", [], [0], [1, 2], [[1]], [INF, INF], [1e-40, 1], {}, {"x": 1}])
NUMBERS = st.one_of(st.integers(-5, 40), st.floats(allow_nan=True, allow_infinity=True), HOSTILE)


def maybe(valid):
    """Mostly a valid value (so a fair share of configs builds), sometimes a hostile one."""
    return st.one_of(valid, valid, HOSTILE)


def params(**keys):
    """A ``*_params`` mapping: some of ``keys`` (each valid or hostile) and now and then an unknown name."""
    keys = {**keys, "bogus_param": HOSTILE}
    return st.one_of(st.fixed_dictionaries({}, optional={k: maybe(v) for k, v in keys.items()}), HOSTILE)


def pair(lo, hi):
    return st.tuples(st.floats(lo, hi), st.floats(lo, hi)).map(lambda t: sorted(t))


SYSTEM_FIELDS = {
    "classes": maybe(st.lists(st.lists(st.floats(0, 5), min_size=3, max_size=3), min_size=1, max_size=4)),
    "cpu_share": maybe(pair(1e-6, 1e6)), "bandwidth": maybe(pair(1.0, 1e15)),
    "availability": maybe(st.floats(0.01, 1)), "noise_std": maybe(st.floats(0, 1e6)),
}
ADVERSARY_FIELDS = {
    "attackers": maybe(st.lists(st.integers(0, 5), max_size=3, unique=True)),
    "attacker_fraction": maybe(st.floats(0, 0.9)), "loss_scale": NUMBERS, "loss_shift": NUMBERS,
    "update_scale": NUMBERS, "update_bias": NUMBERS, "free_rider": maybe(st.booleans()),
    "dropout": maybe(st.floats(0, 1)), "straggler_fraction": maybe(st.floats(0, 1)),
    "straggler_distribution": maybe(st.sampled_from(["pareto", "lognormal"])),
    "straggler_scale": NUMBERS, "straggler_shape": NUMBERS, "deadline": maybe(st.floats(0.1, 1e300)),
}
FIELDS = {
    "dataset": maybe(st.sampled_from(["digits", "digits", "synthetic", "fashion_mnist", "mnist", "cifar10"])),
    "dataset_params": params(root=st.sampled_from(["/nonexistent", "/usr/share/datasets/fashion-mnist"]),
                             download=st.booleans(), alpha=st.floats(0, 3), beta=st.floats(0, 3),
                             max_samples=st.integers(1, 200)),
    "num_clients": maybe(st.integers(2, 12)),
    "samples_per_client": maybe(st.one_of(st.none(), st.integers(1, 60))),
    "test_fraction": maybe(st.floats(0.01, 1)),
    "partition": maybe(st.sampled_from(["iid", "sigma", "two_label", "shards", "dirichlet", "natural"])),
    "partition_params": params(sigma=st.floats(0.01, 1), alpha=st.floats(0.01, 10),
                               shards_per_client=st.integers(1, 40)),
    "quantity_skew": maybe(st.floats(0, 5)),
    "model": maybe(st.sampled_from(["logreg", "logreg", "mlp", "fedmgda_cnn", "favor_cnn", "cifar_cnn"])),
    "model_params": params(hidden=st.integers(1, 128)),
    "local_epochs": maybe(st.integers(1, 3)),
    "batch_size": maybe(st.integers(1, 64)),
    "lr": maybe(st.floats(1e-4, 1.0)),
    "momentum": maybe(st.floats(0, 0.999)),
    "aggregator": maybe(st.sampled_from(["fedavg", "qfedavg", "qfedsgd", "fedmgda+", "fedprox", "median",
                                         "trimmed_mean", "krum", "norm_clipping"])),
    "aggregator_params": params(q=st.floats(0, 5), L=st.floats(0.1, 100), epsilon=st.floats(0, 1),
                                global_lr=st.floats(0.01, 2), decay=st.floats(0.1, 1), decay_every=st.integers(1, 9),
                                mu=st.floats(0, 1), weighting=st.sampled_from(["num_samples", "uniform"]),
                                solver=st.sampled_from(["daqp", "clarabel"]), beta=st.floats(0, 0.6),
                                f=st.integers(0, 6), m=st.integers(1, 12), max_norm=st.floats(0, 1e6)),
    "system": st.one_of(HOSTILE, st.fixed_dictionaries({}, optional=SYSTEM_FIELDS)),
    "clients_per_round": maybe(st.integers(1, 12)),
    "action_mode": maybe(st.sampled_from(["one", "topk", "subset"])),
    "one_mode_step": maybe(st.one_of(st.just("1/K"), st.floats(1e-6, 1))),
    "target_accuracy": maybe(st.floats(0.01, 1)),
    "max_rounds": maybe(st.integers(1, 4)),
    "reward": maybe(st.sampled_from(["favor", "accuracy_gain", "time_penalised"])),
    "reward_params": params(xi=st.floats(1.01, 1e6), scale=st.floats(0.01, 1e6), time_weight=st.floats(0, 1e6)),
    "pca_components": maybe(st.one_of(st.none(), st.integers(1, 13))),
    "pca_fit": maybe(st.sampled_from(["auto", "svd", "gram"])),
    "pca_dtype": maybe(st.sampled_from(["float64", "float32"])),
    "observation": maybe(st.sampled_from(["dict", "flat"])),
    "flat_parts": maybe(st.lists(st.sampled_from(["weights", "clients", "progress"]), min_size=1, max_size=3,
                                 unique=True)),
    "eval_every": maybe(st.integers(1, 3)),
    "track_improvement": maybe(st.booleans()),
    "workers": maybe(st.sampled_from([1, 1, 1, 1, 1, 2])),
    "divergence_loss": maybe(st.floats(1, 1e300)),
    "federation_seed": maybe(st.one_of(st.none(), st.integers(0, 2**64 + 5))),
    "init": maybe(st.sampled_from(["episode", "federation"])),
    "adversary": st.one_of(HOSTILE, st.fixed_dictionaries({}, optional=ADVERSARY_FIELDS)),
    "device": maybe(st.sampled_from(["cpu", "cpu", "auto", "cuda", "cuda:7", "tpu"])),
    "torch_threads": maybe(st.one_of(st.none(), st.integers(1, 2))),
    "an_unknown_field": HOSTILE,
}


def test_the_strategy_covers_every_documented_field():
    """A field added to DEFAULT_CONFIG (or to its system / adversary mappings) must be added here."""
    assert not sorted(set(DEFAULT_CONFIG) - set(FIELDS)), "fields without a strategy"
    assert set(SYSTEM_FIELDS) == set(DEFAULT_CONFIG["system"])
    assert set(ADVERSARY_FIELDS) == set(DEFAULT_CONFIG["adversary"])


CONFIGS = st.lists(st.sampled_from(sorted(k for k in FIELDS if k in DEFAULT_CONFIG or k == "an_unknown_field")),
                   min_size=1, max_size=4, unique=True).flatmap(
    lambda keys: st.fixed_dictionaries({k: FIELDS[k] for k in keys}))


# --- the property ----------------------------------------------------------------------------------
class Hang(Exception):
    """An example ran past EXAMPLE_SECONDS."""


@contextmanager
def time_limit(seconds: int):
    def on_alarm(signum, frame):
        raise Hang(f"no answer in {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def names_a_field(message: str, overrides) -> bool:
    """Whether a refusal names one of the fields set (a nested one by its parent, a ``*_params`` by its stem)."""
    return any(f in message or (f.endswith("_params") and f[:-len("_params")] in message)
               or (f == "an_unknown_field" and "unknown config field" in message) for f in overrides)


def check_finite_and_in_space(env: FedSelectEnv, obs, info, reward=0.0) -> None:
    parts = obs.values() if isinstance(obs, dict) else [obs]
    assert all(np.all(np.isfinite(np.asarray(p))) for p in parts), "non-finite observation"
    assert env.observation_space.contains(obs), "observation outside its space"
    assert isinstance(reward, float) and math.isfinite(reward), f"reward {reward!r}"
    for key, value in info.items():
        if isinstance(value, (bool, np.bool_, str)) or value is None:
            continue
        arr = np.asarray(value)
        if not np.issubdtype(arr.dtype, np.number):
            continue
        if key == "improved_fraction":  # left out when not measured (track_improvement: false, no responder)
            assert 0.0 <= float(arr) <= 1.0, f"info[{key!r}] = {value!r}"
            continue
        assert np.all(np.isfinite(arr)), f"info[{key!r}] = {value!r} is not finite"


def invalid_actions(env: FedSelectEnv) -> list:
    """Actions every mode refuses, and those its own mode refuses (a topk vector of 2s is a valid score vector)."""
    n = env.num_clients
    bad = [None, "a", -1, 1.5, np.full(n, np.nan, np.float32), np.ones((1, n)), [[0]], np.zeros(n + 1),
           [0] * (n + 2), np.zeros(n, np.complex64)]
    if env.config["action_mode"] != "topk":
        bad += [n, np.full(n, 2, np.int8)]
    return bad


def outcome(overrides, seed: int, rng: np.random.Generator) -> str:
    """Build, reset and step ``BASE`` + ``overrides``: "built" or "refused"; fails on anything else."""
    env = None
    try:
        with warnings.catch_warnings(), time_limit(EXAMPLE_SECONDS):
            warnings.simplefilter("ignore")
            try:
                env = FedSelectEnv(config={**BASE, **overrides})
                obs, info = env.reset(seed=seed)
            except ValueError as e:
                assert str(e) and names_a_field(str(e), overrides), \
                    f"{overrides!r} refused by a message naming none of its fields: {e}"
                return "refused"
            check_finite_and_in_space(env, obs, info)
            bad = invalid_actions(env)
            for step in range(STEPS):
                if step % 2 == 1:
                    before = env._round
                    with pytest.raises(ValueError):
                        env.step(bad[int(rng.integers(len(bad)))])
                    assert env._round == before, "a rejected action changed the round"
                obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
                assert isinstance(terminated, bool) and isinstance(truncated, bool)
                check_finite_and_in_space(env, obs, info, reward)
                if terminated or truncated:
                    obs, info = env.reset(seed=seed + 1)
                    check_finite_and_in_space(env, obs, info)
            return "built"
    finally:
        if env is not None:
            env.close()


def run_property(examples: int, derandomize: bool) -> dict:
    counts = {"built": 0, "refused": 0}

    @settings(max_examples=examples, deadline=None, derandomize=derandomize, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
    @given(CONFIGS, st.integers(0, 2**31 - 1))
    def check(overrides, seed):
        counts[outcome(overrides, seed, np.random.default_rng(seed))] += 1

    check()
    return counts


def test_any_config_over_every_field():
    counts = run_property(200, derandomize=True)
    total = counts["built"] + counts["refused"]
    assert total >= 150, counts
    assert counts["built"] >= total // 5 and counts["refused"] >= total // 5, counts  # both sides exercised


@pytest.mark.fuzz_long
def test_any_config_over_every_field_long(request):
    if "fuzz_long" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the long run: pytest -m fuzz_long tests/test_hostile_configs.py")
    counts = run_property(LONG_EXAMPLES, derandomize=False)
    print(f"\nhostile configs: {counts['built'] + counts['refused']} examples, {counts['built']} built and "
          f"stepped, {counts['refused']} refused with a ValueError naming a field")


# --- the issue's item 6, one by one ------------------------------------------------------------------
REFUSED = [  # (overrides, a field the message must name)
    ({"model": "mlp", "model_params": {"hidden": 0}}, "hidden"),
    ({"model": "mlp", "model_params": {"hidden": "64"}}, "hidden"),
    ({"model": "mlp", "model_params": {"hidden": 2.5}}, "hidden"),
    ({"model": "mlp", "model_params": {"hidden": -1}}, "hidden"),
    ({"model": "mlp", "model_params": {"hidden": True}}, "hidden"),
    ({"model": "mlp", "model_params": {"hidden": 10**9}}, "model_params"),
    ({"samples_per_client": 10**18}, "samples_per_client"),
    ({"samples_per_client": 10**18, "num_clients": 8}, "samples_per_client"),  # int64 overflow: used to hang
    ({"samples_per_client": 10**18, "num_clients": 20, "clients_per_round": 2}, "samples_per_client"),
    ({"samples_per_client": 10**30}, "samples_per_client"),
    ({"num_clients": 10**12}, "num_clients"),
    ({"partition": "shards", "partition_params": {"shards_per_client": 10**9}}, "shards_per_client"),
    ({"partition": "shards", "partition_params": {"shards_per_client": 37}}, "shards_per_client"),
    ({"system": {"cpu_share": [1, INF]}}, "system.cpu_share"),
    ({"system": {"bandwidth": [INF, INF]}}, "system.bandwidth"),
    ({"system": {"cpu_share": [1e-39, 1e-39]}}, "system.cpu_share"),
    ({"system": {"bandwidth": [1e-39, 1]}}, "system.bandwidth"),
    ({"system": {"classes": [[INF, 1, 1]]}}, "system.classes"),
    ({"system": {"classes": [[1e308] * 3]}}, "system.classes"),
    ({"system": {"classes": [[10**400, 1, 1]]}}, "system.classes"),
    ({"system": {"classes": [["x", 1, 1]]}}, "system.classes"),
    ({"system": {"noise_std": INF}}, "system.noise_std"),
    ({"action_mode": "one", "one_mode_step": 5e-324}, "one_mode_step"),
    ({"max_rounds": 10**400}, "max_rounds"),
    ({"max_rounds": 10**9 + 1}, "max_rounds"),
    ({"reward": "accuracy_gain", "reward_params": {"scale": INF}}, "scale"),
    ({"reward": "time_penalised", "reward_params": {"time_weight": INF}}, "time_weight"),
    ({"reward": "time_penalised", "reward_params": {"time_weight": 1e300}}, "time_weight"),
    ({"reward": "favor", "reward_params": {"xi": INF}}, "xi"),
    ({"reward": "favor", "reward_params": {"xi": 10**400}}, "xi"),
    ({"reward": "favor", "reward_params": {"xi": NAN}}, "xi"),
    ({"dataset": "synthetic", "partition": "natural", "partition_params": {}, "dataset_params": {"alpha": 1e300}},
     "alpha"),
    ({"dataset": "synthetic", "partition": "natural", "partition_params": {}, "dataset_params": {"beta": 1e300}},
     "beta"),
    ({"dataset": "synthetic", "partition": "natural", "partition_params": {}, "samples_per_client": 10**19},
     "samples_per_client"),
    # found by the long fuzzing run
    ({"flat_parts": [[1]]}, "flat_parts"),  # was TypeError: unhashable type
    ({"lr": 10**400}, "lr"),  # was OverflowError in math.isfinite
    ({"samples_per_client": 10**400}, "samples_per_client"),  # was OverflowError sizing the test split
    ({"num_clients": 10**400}, "num_clients"),  # was OverflowError in the memory estimate
]


@pytest.mark.parametrize("overrides, field", REFUSED, ids=[repr(o)[:60] for o, _ in REFUSED])
def test_issue_15_configs_are_refused_naming_the_field(overrides, field):
    with warnings.catch_warnings(), time_limit(EXAMPLE_SECONDS):
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=field.replace(".", r"\.")) as err:
            FedSelectEnv(config={**BASE, **overrides})
    assert "allowed" in str(err.value) or "expected" in str(err.value) or "memory" in str(err.value) \
        or "fits" in str(err.value)


BOUNDARIES = [  # the largest and smallest values still allowed build and play finite episodes
    {"system": {"cpu_share": [1e-6, 1e-6], "bandwidth": [1.0, 1.0], "classes": [[1e6, 1e6, 1e6]],
                "noise_std": 1e6}, "reward": "time_penalised", "reward_params": {"time_weight": 1e6}},
    {"system": {"cpu_share": [1e6, 1e6], "bandwidth": [1e15, 1e15], "classes": [[0, 0, 0]], "noise_std": 0}},
    {"action_mode": "one", "one_mode_step": 1e-6, "max_rounds": 10**9},
    {"reward": "favor", "reward_params": {"xi": 1e308}},
    {"reward": "accuracy_gain", "reward_params": {"scale": 1e308}},
    {"dataset": "synthetic", "partition": "natural", "partition_params": {},
     "dataset_params": {"alpha": 1e6, "beta": 1e6}},
    {"partition": "shards", "partition_params": {"shards_per_client": 36}},  # 6 clients × 36 = 216 samples
    {"model": "mlp", "model_params": {"hidden": 1}},
    {"lr": 2**64},  # an integer beyond int64: was OverflowError in the local SGD step (torch's int scalar)
]


@pytest.mark.parametrize("overrides", BOUNDARIES, ids=[repr(o)[:60] for o in BOUNDARIES])
def test_boundary_configs_build_and_stay_finite(overrides):
    assert outcome(overrides, 0, np.random.default_rng(0)) == "built"


def test_one_mode_takes_a_scalar_or_one_element_vector_only(make_env):
    env = make_env(action_mode="one", system={"availability": 1.0})
    env.reset(seed=0)
    for bad in ([[1]], np.array([[1]]), np.ones((1, 1, 1), np.int64)):
        with pytest.raises(ValueError, match="one integer client index"):
            env.step(bad)
    for good in (1, np.int64(2), np.array(3), np.array([4]), [5]):
        env.reset(seed=0)  # a step after the episode's end is refused (issue #44): each one on a fresh episode
        env.step(good)


# --- issue #44, "Config values": one number or one name, refused naming its field ----------------------------
BIG = int("9" * 401)  # under the 8,192-bit limit of limits.check_value_shape, beyond float's range
SYNTHETIC = {"dataset": "synthetic", "partition": "natural", "partition_params": {}}
ISSUE_44 = [  # (overrides, the field the message must name); each was OverflowError, numpy's message or accepted
    *[({"adversary": {f: BIG}}, f"adversary.{f}")
      for f in ("loss_scale", "update_scale", "update_bias", "straggler_scale", "straggler_fraction", "deadline",
                "loss_shift", "dropout", "attacker_fraction", "straggler_shape")],  # OverflowError in float()
    ({"adversary": {"update_scale": -BIG, "attacker_fraction": 0.2}}, "adversary.update_scale"),
    ({**SYNTHETIC, "dataset_params": {"beta": -0.0}}, "dataset_params.beta"),  # numpy's "scale < 0", nothing else
    ({**SYNTHETIC, "dataset_params": {"alpha": -0.0}}, "dataset_params.alpha"),
    ({"observation": np.array(["dict", "flat"])}, "observation"),  # numpy's "truth value ... is ambiguous"
    ({"action_mode": np.array(["one", "topk"])}, "action_mode"),
    ({"init": np.array(["episode", "federation"])}, "init"),
    ({"action_mode": "one", "one_mode_step": np.array([0.5, 0.5])}, "one_mode_step"),
    ({"adversary": {"straggler_distribution": np.array(["pareto", "lognormal"])}}, "adversary.straggler_distribution"),
    ({"dataset_params": {"label_noise": np.array(["random", "shift"])}}, "dataset_params.label_noise"),
    ({"aggregator": "fedavg", "aggregator_params": {"weighting": np.array(["uniform", "num_samples"])}}, "weighting"),
    ({"aggregator": "fedmgda+", "aggregator_params": {"solver": np.array(["daqp", "clarabel"])}}, "solver"),
    ({"partition": "dirichlet", "partition_params": {"alpha": BIG}}, "alpha"),  # OverflowError
    ({"model": "mlp", "model_params": {"hidden": BIG}}, "hidden"),  # TypeError from torch's int64 sizes
    # -0.0 where a range starts at 0: numpy reads its sign; refused wherever such a range is checked
    ({"quantity_skew": -0.0}, "quantity_skew"),
    ({"system": {"noise_std": -0.0}}, "system.noise_std"),
    ({"adversary": {"dropout": -0.0}}, "adversary.dropout"),
    ({"reward": "time_penalised", "reward_params": {"time_weight": -0.0}}, "time_weight"),
    # a bool is not a number (true read as 1)
    ({"system": {"classes": [[True, 1, 1]]}}, "system.classes"),
    ({"system": {"cpu_share": [True, 2.0]}}, "system.cpu_share"),
    ({"system": {"availability": [True] * 6}}, "system.availability"),
]


@pytest.mark.parametrize("overrides, field", ISSUE_44, ids=[repr(o)[:70] for o, _ in ISSUE_44])
def test_issue_44_config_values_are_refused_naming_the_field(overrides, field):
    with warnings.catch_warnings(), time_limit(EXAMPLE_SECONDS):
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=field.replace(".", r"\.").replace("+", r"\+")) as err:
            FedSelectEnv(config={**BASE, **overrides})
    message = str(err.value)
    assert "allowed" in message or "expected" in message, message
    assert "truth value" not in message and "scale < 0" not in message
    if "-0.0" in repr(overrides):
        assert "write 0" in message, message


def test_issue_44_neighbours_of_the_refused_values_still_build():
    """+0.0 where -0.0 is refused, a name as a plain string, the largest finite values and .inf where it means
    "never" all build (and the defaults are untouched: tests/test_golden.py)."""
    for overrides in ({**SYNTHETIC, "dataset_params": {"alpha": 0.0, "beta": 0.0}},
                      {"quantity_skew": 0.0, "momentum": 0, "system": {"noise_std": 0.0, "classes": [[0, 0, 1]]}},
                      {"observation": "flat", "action_mode": "one", "one_mode_step": "1/K", "init": "federation"},
                      {"divergence_loss": BIG}, {"divergence_loss": math.inf},
                      {"adversary": {"attacker_fraction": 0.2, "update_scale": -30, "loss_scale": 1e300,
                                     "deadline": 1e300, "straggler_fraction": 1, "dropout": 0.0}},
                      {"adversary": {"attackers": [1], "update_scale": np.float64(-30.0), "loss_shift": np.int64(2)}},
                      {"model": "mlp", "model_params": {"hidden": 3}}):
        FedSelectEnv(config={**BASE, **overrides}).close()


def test_the_number_and_name_readers():
    """``limits.real_in`` / ``reals_text`` / ``is_choice``: what every check above is made of."""
    assert limits.as_real(BIG) == INF and limits.as_real(-BIG) == -INF and limits.as_real(np.int64(3)) == 3.0
    for not_a_number in (True, np.bool_(False), "1", None, [1.0], np.array([1.0, 2.0]), np.array(1.0)):
        assert limits.as_real(not_a_number) is None, not_a_number
    assert limits.real_in(0.0, 0.0) == 0.0 and limits.real_in(-0.0, 0.0) is None  # a range from 0 refuses -0.0
    assert limits.real_in(-0.0, -1.0) == 0.0 and limits.real_in(-0.0, 0.0, lo_open=True) is None
    assert limits.real_in(BIG) is None and limits.real_in(NAN) is None and limits.real_in(INF) is None
    assert limits.real_in(1.0, 0.0, 1.0) == 1.0 and limits.real_in(1.0, 0.0, 1.0, hi_open=True) is None
    assert limits.reals_text(0.0, 1.0, hi_open=True) == "a finite number in [0, 1)"
    assert "write 0" in limits.reals_text(0.0, given=-0.0) and "write 0" not in limits.reals_text(0.0, given=0.0)
    assert limits.is_choice("dict", ("dict", "flat")) and not limits.is_choice(np.array(["dict", "flat"]), ["dict"])
    assert not limits.is_choice(["dict"], ("dict",)) and not limits.is_choice(None, ("dict",))


# --- memory: refused up front with the figure ---------------------------------------------------------
def test_memory_is_estimated_before_it_is_allocated(monkeypatch):
    """A machine of 64 MiB: what cannot fit is refused with the estimate and the machine's memory."""
    monkeypatch.setattr(limits, "memory_budget", lambda: 64 << 20)
    FedSelectEnv(config=BASE)  # the small federation fits
    cases = [({"model": "mlp", "model_params": {"hidden": 10**5}}, "model_params", "PCA"),   # 6.5M parameters
             ({"model": "mlp", "model_params": {"hidden": 10**6}}, "model_params", "parameters"),
             ({"num_clients": 40_000, "clients_per_round": 2}, "num_clients", "records"),
             ({"dataset": "synthetic", "partition": "natural", "partition_params": {}, "num_clients": 6,
               "samples_per_client": 10**6}, "samples_per_client", "rows")]
    for overrides, field, why in cases:
        with pytest.raises(ValueError, match=rf"{field}.*{why}.*needs about [\d.]+ [KMGTPE]?i?B of memory, "
                                             rf"more than this machine's 64 MiB") as err:
            FedSelectEnv(config={**BASE, **overrides})
        assert "fewer" in str(err.value) or "smaller" in str(err.value)


def test_memory_budget_reads_this_machine():
    assert 1 << 26 <= limits.memory_budget() <= limits.FALLBACK_MEMORY
    assert limits.format_bytes(931 * 2**30) == "931 GiB"
