"""The FedSelect environment's configuration: one dict of every knob, and presets.

As in HighwayEnv, ``DEFAULT_CONFIG`` lists every knob with its default and a
comment; a user's config (a dict, or a YAML file of the same keys) is merged over
it by :func:`make_config`, which validates every field and raises ``ValueError``
naming the field and what is allowed. SPEC.md §2–§3 says what each knob means.
"""
from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from .sim.adversary import validate_adversary
from .sim.limits import as_real, check_value_shape, is_choice, real_in, reals_text, refuse_if_too_big, short
from .sim.device import check_device_field
from .spec import SelectionSpec

DEFAULT_CONFIG: Dict[str, Any] = {
    # --- data (docs/SPEC.md §3.1, §3.2) -------------------------------------------
    "dataset": "digits",          # digits | synthetic | fashion_mnist | mnist | cifar10
    "dataset_params": {},         # per dataset: e.g. {"root": ..., "download": False} or {"alpha": 1, "beta": 1}
    "num_clients": 20,            # N
    "samples_per_client": None,   # training samples per client; None = split the whole pool
    "test_fraction": 0.2,         # each client's own held-out test split, as a fraction of its training size
    "partition": "sigma",         # iid | sigma | two_label | shards | dirichlet (synthetic is natural)
    "partition_params": {"sigma": 0.8},  # e.g. {"sigma": 0.8}, {"shards_per_client": 2}, {"alpha": 0.5}
    "quantity_skew": 0.0,         # lognormal sigma of client sizes; 0 = equal sizes
    # --- model and local training (docs/SPEC.md §3.3, §3.4) -------------------------
    "model": "mlp",               # logreg | mlp | fedmgda_cnn | favor_cnn | cifar_cnn
    "model_params": {},           # e.g. {"hidden": 64} for mlp
    "local_epochs": 2,            # E
    "batch_size": 10,             # B
    "lr": 0.1,                    # η, local SGD step
    "momentum": 0.0,              # local SGD momentum (0 = plain SGD)
    # --- aggregation (docs/SPEC.md §3.5) ------------------------------------------
    "aggregator": "fedavg",       # fedavg | qfedavg | qfedsgd | fedmgda+ | fedprox | ...
    "aggregator_params": {},      # e.g. {"q": 1.0} for qfedavg
    # --- system heterogeneity (docs/SPEC.md §3.6) -----------------------------------
    "system": {
        "classes": [[1.0, 1.0, 0.1447648273], [2.0, 1.0, 0.2166804714],
                    [3.0, 1.0, 0.4170323914], [4.0, 1.0, 1.4426950409]],  # θ* = [τ_b, τ_s, 1/ln(1+SNR)] per class
        "cpu_share": [0.5, 2.0],      # μ ~ U(lo, hi)
        "bandwidth": [2.0e6, 4.0e6],  # B ~ U(lo, hi) bytes/s
        "availability": 0.8,          # p_n: I_{t,n} ~ Bernoulli(p_n); a float or a list of N
        "noise_std": 0.1,             # std of the zero-mean exchange-time noise ε
    },
    # --- the selection problem (docs/SPEC.md §2) -------------------------------------
    "clients_per_round": 5,       # K
    "action_mode": "topk",        # one | topk | subset
    "one_mode_step": 1.0,         # `one` mode only: the fraction of a round a step stands for: the global model
                                  # moves this fraction of the way from w_t to the aggregate, and the round clock
                                  # and budget count the step as this fraction; 1 = the paper's; "1/K" = one
                                  # client's share of a K-client FedAvg round (FAVOR's training, docs/TRAINING.md)
    "target_accuracy": 0.9,       # Ω: the episode terminates when the global accuracy reaches it
    "max_rounds": 60,             # round budget: truncated after it
    "reward": "favor",            # favor | accuracy_gain | time_penalised | objective | vector
    "reward_params": {},          # e.g. {"xi": 64} for favor
    "pca_components": None,       # d; None = min(100, N + 1)
    "pca_fit": "auto",            # FAVOR's PCA fit: auto (scikit-learn's SVD on the CPU, the Gram fit on CUDA) | svd |
                                  # gram (the N+1 x N+1 Gram matrix's eigenvectors: 3-6x faster a reset on the MLP
                                  # scenarios, the same axes to ~1e-11; docs/PERFORMANCE.md)
    "pca_dtype": "float64",       # the dtype FAVOR's projections compute in: float64 (the committed records') |
                                  # float32 (the named variant "float32 projections": half the bytes, ~1e-7 relative)
    "observation": "dict",        # dict | flat (a Box for SB3's MlpPolicy)
    "flat_parts": ["weights"],    # which parts the flat observation concatenates: weights, clients, progress
    "eval_every": 1,              # evaluate the global model every this many rounds (1 = every round)
    "track_improvement": True,    # measure the responders' loss under w_{t+1} (info["improved_fraction"]);
                                  # False saves one forward pass over their data per round (then NaN)
    "workers": 1,                 # processes sharing a round's training and evaluation (forkserver workers):
                                  # 2 on a 2-core machine with one torch thread each (docs/PERFORMANCE.md)
    "torch_threads": 1,           # CPU threads torch computes on during reset/step (restored after); null = leave
                                  # torch's setting (one thread: 4-6x faster with another core busy, ENVIRONMENT.md)
    "device": "cpu",              # torch device of the simulation: cpu | cuda | cuda:N | auto (a GPU when torch
                                  # sees one and the model is a CNN, else the CPU); workers > 1 is a CPU feature
                                  # (docs/ENVIRONMENT.md, PERFORMANCE.md)
    "divergence_loss": 1.0e4,     # a global test loss above this (or a non-finite model) counts as divergence
    "federation_seed": None,      # int: fix the partition and the clients' hidden speeds across episodes
                                  # (RL training on one federation); None: they follow the reset seed
    "init": "episode",            # episode: a new w_0 (and profiling round, PCA basis) per episode; federation:
                                  # w_0, the profiling round and FAVOR's PCA map fixed by the federation's seed,
                                  # as in FAVOR (every device downloads the same initial weights), so the weight
                                  # state means the same thing in every episode of one federation (docs/SPEC.md §2)
    # --- attackers and unreliable clients (fedsel_env/sim/adversary.py, docs/ROBUSTNESS.md); all off -----------
    "adversary": {
        "attackers": [],               # client ids of the attackers ...
        "attacker_fraction": 0.0,      # ... or this fraction of N (>= 1 client if > 0) drawn from the federation seed
        "loss_scale": 1.0,             # attackers report each per-sample loss l as loss_scale * l + loss_shift
        "loss_shift": 0.0,             #   (observation's loss / loss_rms, and the aggregator's losses_before)
        "update_scale": 1.0,           # attackers send w_t + update_scale * (w_k - w_t) + update_bias * u
        "update_bias": 0.0,            #   (u: a unit vector drawn from the federation seed, shared by attackers)
        "free_rider": False,           # attackers return w_t unchanged (no training)
        "dropout": 0.0,                # per round, a selected and available client fails to report with this probability
        "straggler_fraction": 0.0,     # this fraction of N (>= 1 if > 0), drawn from the federation seed, straggles:
        "straggler_distribution": "pareto",  # pareto | lognormal: its exchange time gets a heavy-tailed extra delay
        "straggler_scale": 5.0,        #   seconds: Pareto x_m (the smallest delay) / lognormal median
        "straggler_shape": 1.5,        #   Pareto alpha / lognormal sigma
        "deadline": None,              # seconds: the server stops waiting; later clients do not count (None: wait)
    },
}

PRESETS: Dict[str, Dict[str, Any]] = {
    # The fast default: scikit-learn's bundled digits, 20 clients (σ = 0.8), an MLP, 5 per round, target 90%
    # (random selection needs ~25-35 rounds; an episode takes about a second).
    "default": {},
    # A tiny federation for tests and smoke runs.
    "tiny": {"num_clients": 8, "clients_per_round": 3, "max_rounds": 5, "model": "logreg", "local_epochs": 1,
             "target_accuracy": 0.95, "samples_per_client": 40},
    # FAVOR's Fashion-MNIST setup (seed 002): 100 clients, 600 samples each, σ = 0.8, 10 per round,
    # 5 local epochs at batch 10, target 85%.
    "favor_fmnist": {"dataset": "fashion_mnist", "num_clients": 100, "samples_per_client": 600,
                     "test_fraction": 1 / 6, "partition": "sigma", "partition_params": {"sigma": 0.8},
                     "model": "favor_cnn", "local_epochs": 5, "batch_size": 10, "lr": 0.01,
                     "clients_per_round": 10, "target_accuracy": 0.85, "max_rounds": 300, "init": "federation"},
    # Synthetic(1, 1) of FedProx / q-FFL: 100 devices, natural partition, logistic regression.
    "synthetic": {"dataset": "synthetic", "dataset_params": {"alpha": 1.0, "beta": 1.0},
                  "num_clients": 100, "partition": "natural", "partition_params": {},
                  "model": "logreg", "batch_size": 10, "lr": 0.05, "clients_per_round": 10,
                  "target_accuracy": 0.85, "max_rounds": 100},
    # RBCS-F-style heterogeneous system (seed 004): four client classes, availability 0.8.
    "hetero": {"num_clients": 40, "clients_per_round": 8, "partition": "dirichlet",
               "partition_params": {"alpha": 0.5}, "max_rounds": 200, "target_accuracy": 0.99},
    # The default federation ready for a plain SB3 DQN (configs/dqn.yml's env_kwargs): one client a step,
    # counted as 1/K of a round; the flat observation with a 5-component PCA, the client features and
    # progress; one federation (federation_seed 0). Deploy the model in topk (docs/TRAINING.md#quick-start).
    "dqn": {"action_mode": "one", "one_mode_step": "1/K", "observation": "flat", "pca_components": 5,
            "flat_parts": ["weights", "clients", "progress"], "federation_seed": 0},
    # The same federation for SB3's PPO / A2C / SAC (configs/ppo.yml's env_kwargs): N scores, the K best taken.
    "ppo": {"action_mode": "topk", "observation": "flat", "flat_parts": ["weights", "clients", "progress"],
            "federation_seed": 0},
}

ENV_IDS: Dict[str, str] = {
    "default": "fedsel/FedSelect-v0",
    "tiny": "fedsel/FedSelect-Tiny-v0",
    "favor_fmnist": "fedsel/FedSelect-FAVOR-FMNIST-v0",
    "synthetic": "fedsel/FedSelect-Synthetic-v0",
    "hetero": "fedsel/FedSelect-HeteroSystem-v0",
    "dqn": "fedsel/FedSelect-DQN-v0",
    "ppo": "fedsel/FedSelect-PPO-v0",
}

ACTION_MODES = ("one", "topk", "subset")
OBSERVATION_KINDS = ("dict", "flat")
PCA_FITS = ("auto", "svd", "gram")          # fedsel_env/server_view.py fit_profiling_pca
PCA_DTYPES = ("float64", "float32")         # fedsel_env/server_view.py WeightPCA.project

# Bounds that keep every derived quantity finite (exchange times, the clock, the observation's float32
# bounds, step counts); each is far beyond any meaningful setting (issue #15).
MAX_ROUNDS = 10**9                  # max_rounds
MAX_SAMPLES_PER_CLIENT = 10**12     # samples_per_client (every pool is far smaller; synthetic's is memory-checked)
MIN_ONE_MODE_STEP = 1e-6            # one_mode_step: a millionth of a round per step
MAX_THETA = 1e6                     # system.classes: seconds per unit of context
CPU_SHARE_RANGE = (1e-6, 1e6)       # system.cpu_share: a fraction of one CPU
BANDWIDTH_RANGE = (1.0, 1e15)       # system.bandwidth: bytes per second
MAX_NOISE_STD = 1e6                 # system.noise_std: seconds
INIT_MODES = ("episode", "federation")


def _fail(field: str, value: Any, allowed: str) -> None:
    raise ValueError(f"config field {field!r} = {short(value)} is invalid: {allowed}")


def _int(cfg: Dict[str, Any], field: str, lo: int, hi: Optional[int] = None, allow_none: bool = False) -> None:
    v = cfg[field]
    if v is None and allow_none:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        _fail(field, v, f"expected an integer {rng}" + (" or null" if allow_none else ""))


def _float(cfg: Dict[str, Any], field: str, lo: float, hi: Optional[float] = None,
           lo_open: bool = False, allow_inf: bool = False) -> None:
    """A plain int or float in the range (``limits.real_in``: finite, no bool, no integer beyond float's
    range, no -0.0 where the range starts at 0; ``allow_inf``: +inf too, and so an integer beyond it)."""
    v = cfg[field]
    hi = math.inf if hi is None else hi
    ok = isinstance(v, (int, float)) and (real_in(v, lo, hi, lo_open) is not None
                                          or (allow_inf and as_real(v) == math.inf))
    if not ok:
        _fail(field, v, "expected " + reals_text(lo, hi, lo_open, given=v) + (" or .inf" if allow_inf else ""))


def resolve_preset(preset: Union[str, Mapping[str, Any], None]) -> Dict[str, Any]:
    """The overrides of a preset given by name (or a dict passed through)."""
    if preset is None:
        return {}
    if isinstance(preset, Mapping):
        return dict(preset)
    if not isinstance(preset, str):
        raise ValueError(f"preset {preset!r} is invalid: expected a preset name {sorted(PRESETS)} or a mapping")
    if preset in PRESETS:
        return copy.deepcopy(PRESETS[preset])
    by_id = {v: k for k, v in ENV_IDS.items()}
    if preset in by_id:
        return copy.deepcopy(PRESETS[by_id[preset]])
    raise ValueError(f"unknown preset {preset!r}; presets: {sorted(PRESETS)} (env ids: {sorted(by_id)})")


def resolve_env(env: Union[str, Mapping[str, Any], None]) -> Tuple[Optional[str], Dict[str, Any]]:
    """An ``--env`` value → (preset name or None, the config overrides it carries): the one resolver.

    ``train_agent.py``, ``evaluate.py`` and ``fedsel_eval`` all read ``--env`` here, by one rule:

    - a preset name (``tiny``) or a registered env id (``fedsel/FedSelect-Tiny-v0``) → that preset;
    - a registered scenario's id (``fedsel/Bench-Stragglers-v0``) or name (``Stragglers``) → its config with its
      objective as the reward;
    - any other string is the path of a YAML env config (``DEFAULT_CONFIG``'s keys plus an optional
      ``preset:``, itself a name or an id); a missing file is an error that says so. A file that names an
      ``objective:`` is a scenario file (``fedsel_env.scenarios``): its env config, with the objective as the
      reward unless it names a ``reward`` (its scenario keys — name, statement, seeds — are checked and dropped);
    - a mapping of config fields (an eval config's ``env:``) may name a ``preset`` the same way;
    - ``None`` → the default preset.

    :raises ValueError: for an unknown preset / env id or a missing or malformed YAML file, listing what fits.
    """
    if env is None:
        return "default", {}
    by_id = {v: k for k, v in ENV_IDS.items()}
    if isinstance(env, Mapping):
        overrides = dict(env)
    elif not isinstance(env, str):
        raise ValueError(f"env {env!r} is invalid: expected a preset name, an env id, a YAML path or a mapping")
    elif env in PRESETS:
        return env, {}
    elif env in by_id:
        return by_id[env], {}
    elif env.startswith("fedsel/Bench-") or _is_scenario_name(env):  # a registered scenario by id or name
        from .bench import scenario  # (fedsel_env/scenarios.py, fedsel_env/bench.py)

        # the id's own config: the scenario's, with its objective as the reward (issue #41)
        overrides = scenario(env).objective_env_config()
        if "preset" not in overrides:
            return "default", overrides
    elif env.endswith((".yml", ".yaml")) or Path(env).is_file():
        overrides = load_config(env)  # ValueError when missing
        from .scenarios import SCENARIO_KEYS, scenario_from_mapping

        if any(k in overrides for k in SCENARIO_KEYS):  # a scenario file (issue #46): its env, the objective as the
            # default reward (a scenario key without an objective: refused, naming the objective)

            overrides = scenario_from_mapping(overrides, env, Path(env).stem).objective_env_config()
    else:
        import difflib

        from .scenarios import SCENARIO_IDS, SCENARIOS

        close = difflib.get_close_matches(env, [*PRESETS, *by_id, *SCENARIOS, *SCENARIO_IDS], n=1)
        raise ValueError(f"unknown --env {env!r}: give a preset {sorted(PRESETS)}, an env id {sorted(by_id)}, "
                         f"a scenario (a name such as Stragglers or an id fedsel/Bench-<Name>-v0), "
                         f"or the path of a YAML env config (a file ending in .yml / .yaml)"
                         + (f"; did you mean {close[0]!r}?" if close else ""))
    preset = overrides.pop("preset", None)
    if preset is not None:
        if not isinstance(preset, str) or (preset not in PRESETS and preset not in by_id):
            raise ValueError(f"unknown preset {preset!r} in env {env!r}; presets: {sorted(PRESETS)} "
                             f"(env ids: {sorted(by_id)})")
        preset = by_id.get(preset, preset)
    return preset, overrides


def _is_scenario_name(text: str) -> bool:
    """Whether ``text`` is a registered scenario's name (``Stragglers``; fedsel_env/scenarios.py)."""
    from .scenarios import SCENARIOS

    return text in SCENARIOS


def env_id(preset: Optional[str]) -> str:
    """The registered env id of a preset (``None`` → the default preset's)."""
    return ENV_IDS.get(preset or "default", ENV_IDS["default"])


def load_config(path: Union[str, Path]) -> Dict[str, Any]:
    """Read a YAML config file of ``DEFAULT_CONFIG``'s keys (plus an optional ``preset`` key).

    :raises ValueError: naming the file and the fix (see :func:`read_yaml`), or when it is not a mapping.
    """
    data = read_yaml(path, "config file") or {}
    if not isinstance(data, dict):
        raise ValueError(f"config file {str(path)!r} must hold a mapping of config keys")
    return data


# --- YAML: the one strict reader (fedsel_env/yaml_reader.py), re-exported here --------------------------
from .yaml_reader import MAX_YAML_BYTES, parse_yaml, read_yaml  # noqa: E402,F401


def make_config(overrides: Optional[Mapping[str, Any]] = None,
                preset: Union[str, Mapping[str, Any], None] = None) -> Dict[str, Any]:
    """Merge ``preset`` then ``overrides`` over ``DEFAULT_CONFIG`` and validate every field.

    ``overrides`` may itself carry a ``preset`` key (as a YAML file may).

    :return: a new, complete, validated config dict.
    :raises ValueError: naming the first bad field and what is allowed.
    """
    if overrides is not None and not isinstance(overrides, Mapping):
        raise ValueError(f"config {short(overrides)} is invalid: expected a mapping of config fields (a dict) or None")
    overrides = dict(overrides or {})
    for k, v in overrides.items():  # too big, too deep, too long an integer: refused before anything walks it
        check_value_shape(v, k if isinstance(k, str) else short(k))
    if "preset" in overrides:  # applied when it is the only preset named; refused when it contradicts one
        given = overrides.pop("preset")
        if preset is not None and given != preset:
            raise ValueError(f"config field 'preset' = {short(given)} in the overrides contradicts the preset "
                             f"already chosen ({short(preset)}, by the env id or --env): name one preset, there")
        preset = given
    cfg = copy.deepcopy(DEFAULT_CONFIG)
    for layer in (resolve_preset(preset), overrides):
        for k, v in layer.items():
            if k not in DEFAULT_CONFIG:
                raise ValueError(f"unknown config field {short(k)}; known fields: {sorted(DEFAULT_CONFIG)}")
            if k in ("system", "adversary"):  # mappings merged key by key; null keeps the defaults
                if v is None:
                    continue
                if not isinstance(v, Mapping):
                    _fail(k, v, f"expected a mapping of {k} fields")
                unknown = sorted(set(v) - set(DEFAULT_CONFIG[k]), key=str)
                if unknown:
                    raise ValueError(f"unknown config field(s) {k}.{short(unknown)}; known: "
                                     f"{sorted(DEFAULT_CONFIG[k])}")
                cfg[k].update(copy.deepcopy(dict(v)))
            else:
                cfg[k] = copy.deepcopy(v)
    validate(cfg)
    return cfg


def validate(cfg: Dict[str, Any]) -> None:
    """Check every generic field of a complete config (registry names are checked by their registries)."""
    for f in ("dataset", "partition", "model", "aggregator", "reward"):
        if not isinstance(cfg[f], str):
            _fail(f, cfg[f], "expected a registered name (a string)")
    for f in ("dataset_params", "partition_params", "model_params", "aggregator_params", "reward_params"):
        if cfg[f] is None:
            cfg[f] = {}
        if not isinstance(cfg[f], Mapping):
            _fail(f, cfg[f], "expected a mapping of parameter names to values")
    _int(cfg, "num_clients", 2)
    _int(cfg, "samples_per_client", 1, MAX_SAMPLES_PER_CLIENT, allow_none=True)
    _float(cfg, "test_fraction", 0.0, 1.0, lo_open=True)
    _float(cfg, "quantity_skew", 0.0, 5.0)
    _int(cfg, "local_epochs", 1, 1000)
    _int(cfg, "batch_size", 1)
    _float(cfg, "lr", 0.0, lo_open=True)  # finite: 10**400 is no float
    cfg["lr"] = float(cfg["lr"])  # an integer lr as the float it equals: torch takes no integer scalar beyond int64
    _float(cfg, "momentum", 0.0, 0.999)
    _int(cfg, "clients_per_round", 1, cfg["num_clients"])
    if not is_choice(cfg["action_mode"], ACTION_MODES):
        _fail("action_mode", cfg["action_mode"], f"allowed: {list(ACTION_MODES)}")
    step = cfg["one_mode_step"]
    if not (isinstance(step, str) and step == "1/K") and (not isinstance(step, (int, float))
                                                          or real_in(step, MIN_ONE_MODE_STEP, 1.0) is None):
        _fail("one_mode_step", step, f'expected a number in [{MIN_ONE_MODE_STEP:g}, 1] or the string "1/K"')
    _float(cfg, "target_accuracy", 0.0, 1.0, lo_open=True)
    _int(cfg, "max_rounds", 1, MAX_ROUNDS)
    if cfg["pca_components"] is not None:
        _int(cfg, "pca_components", 1, cfg["num_clients"] + 1)
    if not is_choice(cfg["pca_fit"], PCA_FITS):
        _fail("pca_fit", cfg["pca_fit"], f"allowed: {list(PCA_FITS)}")
    if not is_choice(cfg["pca_dtype"], PCA_DTYPES):
        _fail("pca_dtype", cfg["pca_dtype"], f"allowed: {list(PCA_DTYPES)}")
    _refuse_clients_beyond_memory(cfg)
    if not is_choice(cfg["observation"], OBSERVATION_KINDS):
        _fail("observation", cfg["observation"], f"allowed: {list(OBSERVATION_KINDS)}")
    from .server_view import OBSERVATION_PARTS  # the parts registry (a user may add one)

    parts = cfg["flat_parts"]
    if (not isinstance(parts, (list, tuple)) or not parts
            or any(not isinstance(p, str) or p not in OBSERVATION_PARTS for p in parts)
            or len(set(parts)) != len(parts)):
        _fail("flat_parts", parts, f"expected a non-empty list of distinct parts from {sorted(OBSERVATION_PARTS)}")
    cfg["flat_parts"] = list(parts)
    _int(cfg, "eval_every", 1)
    _int(cfg, "workers", 1, 64)
    _int(cfg, "torch_threads", 1, 1024, allow_none=True)
    check_device_field(cfg["device"], cfg["workers"])  # whether torch sees a GPU: checked when the env is built
    _int(cfg, "federation_seed", 0, allow_none=True)
    if not is_choice(cfg["init"], INIT_MODES):
        _fail("init", cfg["init"], f"allowed: {list(INIT_MODES)}")
    _float(cfg, "divergence_loss", 0.0, lo_open=True, allow_inf=True)  # .inf: never counted as divergence
    if not isinstance(cfg["track_improvement"], bool):
        _fail("track_improvement", cfg["track_improvement"], "expected true or false")
    _validate_system(cfg["system"], cfg["num_clients"])
    validate_adversary(cfg["adversary"], cfg["num_clients"])


def _refuse_clients_beyond_memory(cfg: Dict[str, Any]) -> None:
    """N clients' observation space and the server's records, estimated before any is allocated: per client,
    a row of d PCA coordinates (space bounds, observation, record: about 22 bytes each) and about 520 bytes of
    client features, contexts and counts."""
    n = cfg["num_clients"]
    d = SelectionSpec.pca_width(cfg)
    refuse_if_too_big(22 * (n + 1) * d + 520 * n,  # exact integers: n may be 10**400
                      f"config field 'num_clients' = {n} (the observation and the server's records of "
                      f"{n} clients, {d} PCA components each)", "use fewer clients (or fewer pca_components)")


def _validate_system(sysc: Dict[str, Any], n: int) -> None:
    def number(x: Any, lo: float, hi: float, lo_open: bool = False) -> bool:  # a plain int or float in range
        return isinstance(x, (int, float)) and real_in(x, lo, hi, lo_open) is not None

    classes = sysc["classes"]
    if (not isinstance(classes, (list, tuple)) or not classes
            or not all(isinstance(c, (list, tuple)) and len(c) == 3 and all(number(x, 0.0, MAX_THETA) for x in c)
                       for c in classes)):
        negative_zero = -0.0 if "-0.0" in short(classes) else None
        _fail("system.classes", classes, f"expected a list of [tau_b, tau_s, inv_spectral_eff] triples, each "
                                         f"{reals_text(0.0, MAX_THETA, given=negative_zero)}")
    for f, (lo, hi) in (("cpu_share", CPU_SHARE_RANGE), ("bandwidth", BANDWIDTH_RANGE)):
        v = sysc[f]
        if (not isinstance(v, (list, tuple)) or len(v) != 2 or not all(number(x, lo, hi) for x in v)
                or not v[0] <= v[1]):
            _fail(f"system.{f}", v, f"expected [lo, hi] with {lo:g} <= lo <= hi <= {hi:g} (finite numbers)")
    a = sysc["availability"]
    if isinstance(a, (list, tuple)):
        if len(a) != n or not all(number(x, 0.0, 1.0, lo_open=True) for x in a):
            _fail("system.availability", a, f"expected a probability in (0, 1] or a list of {n} of them")
    elif not number(a, 0.0, 1.0, lo_open=True):
        _fail("system.availability", a, "expected a probability in (0, 1] or a list of N of them")
    ns = sysc["noise_std"]
    if not number(ns, 0.0, MAX_NOISE_STD):
        _fail("system.noise_std", ns, f"expected {reals_text(0.0, MAX_NOISE_STD, given=ns)} (seconds)")
