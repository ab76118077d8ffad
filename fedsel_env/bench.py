"""FedSelect-Bench (issue #28): scenarios where client selection can matter, each with the objective that scores it.

A scenario is an env config (fields of ``DEFAULT_CONFIG``) registered as ``fedsel/Bench-<Name>-v0``, a
one-paragraph statement of what makes selection matter there, and one objective:

- ``rounds_to_target`` — rounds until the global test accuracy reaches Ω (lower is better; an episode that
  misses Ω counts as the round cap, a lower bound);
- ``time_to_target`` — simulated seconds until Ω (lower; a miss counts as the clock at the cap);
- ``final_accuracy`` — global test accuracy after the round budget (higher; Ω = 1 makes episodes fixed-length);
- ``acc_worst10`` — the mean test accuracy of the worst 10% of clients after the round budget (higher).

Ω of the to-target scenarios is calibrated on :data:`TUNING_SEEDS` by ``experiments/favor_study.py``'s rule
(the 0.01-grid accuracy random's median curve reaches at half the round cap, rounded down:
``python experiments/bench_reference.py --part calibrate``) and written here; reference scores are measured on
:data:`REPORTING_SEEDS` (``experiments/bench_reference.py``, docs/BENCHMARK.md), which nothing was tuned on.
Each scenario registers itself (``fedsel_env.scenarios.register_scenario``, issue #46: with its id, the objective
as the reward); :func:`scenario` also reads a user's YAML scenario file (docs/BENCHMARK.md, Your own scenario).
"""
from __future__ import annotations

import math
from typing import Any, List, Mapping, Optional, Sequence

# the scenario and its registry (issue #46); re-exported here, where the bench's callers have always found them
from .scenarios import OBJECTIVES, REPORTING_SEEDS, SCENARIO_IDS, SCENARIOS, TUNING_SEEDS, Scenario, lookup, \
    register_scenario

_FMNIST = {"dataset": "fashion_mnist", "test_fraction": 0.2, "track_improvement": False}
_ALWAYS = {"availability": 1.0}
_SCENARIOS: List[Scenario] = [
    Scenario(
        "QuantitySkew",
        {**_FMNIST, "num_clients": 100, "samples_per_client": 100, "quantity_skew": 1.5, "partition": "dirichlet",
         "partition_params": {"alpha": 0.3}, "model": "logreg", "local_epochs": 1, "batch_size": 10, "lr": 0.05,
         "clients_per_round": 5, "system": _ALWAYS, "max_rounds": 60, "target_accuracy": 0.77},
        "rounds_to_target",
        "Fashion-MNIST over 100 clients with Dirichlet(0.3) labels and heavy-tailed (lognormal σ = 1.5) sizes, "
        "softmax regression, 5 clients a round. A few clients hold most of the data and each holds few labels, "
        "so which five train decides how much data and which labels a round sees; uniform sampling mostly picks "
        "small clients. Scored on rounds to Ω.",
        "power-law sizes are drawn as lognormal(σ = 1.5) weights (heavy-tailed, not a Pareto law)"),
    Scenario(
        "PowerOfChoice",
        {**_FMNIST, "num_clients": 100, "samples_per_client": 100, "quantity_skew": 1.5, "partition": "shards",
         "partition_params": {"shards_per_client": 2}, "model": "mlp", "model_params": {"hidden": 64},
         "local_epochs": 1, "batch_size": 32, "lr": 0.05, "clients_per_round": 3, "system": _ALWAYS,
         "max_rounds": 80, "target_accuracy": 0.65},
        "rounds_to_target",
        "Power-of-Choice's own setting (Cho, Wang, Joshi 2020, Fashion-MNIST): 100 clients of two label-sorted "
        "shards each (about two labels per client) with skewed sizes, an MLP, K = 3 (C = 0.03). With three "
        "clients a round most labels are missing from any one round, so picking the clients the model currently "
        "fits worst (the paper's high-loss bias) can speed convergence. Scored on rounds to Ω.",
        "10,000 training samples instead of 60,000 (100 per client on average); sizes lognormal(σ = 1.5) instead "
        "of the paper's power law; one local epoch at batch 32 and η = 0.05 instead of τ = 30 iterations at batch "
        "64 and η = 0.005; an MLP with one hidden layer of 64; rounds to Ω instead of the paper's loss and "
        "accuracy curves"),
    Scenario(
        "NoisyLabels",
        {"num_clients": 40, "partition": "sigma", "partition_params": {"sigma": 0.5},
         "dataset_params": {"noisy_clients": 0.3, "label_noise": "random"}, "clients_per_round": 5,
         "local_epochs": 1, "system": _ALWAYS, "track_improvement": False, "max_rounds": 60,
         "target_accuracy": 0.71},
        "rounds_to_target",
        "Digits over 40 clients (σ = 0.5), 30% of them holding training labels replaced by uniform noise (their "
        "test split is clean). A noisy client's update pulls the model away from the task and its loss stays "
        "high, so loss-seeking selection is drawn to exactly the clients to avoid. Scored on rounds to Ω."),
    Scenario(
        "FreeRiders",
        {"num_clients": 40, "partition": "sigma", "partition_params": {"sigma": 0.5}, "clients_per_round": 5,
         "local_epochs": 1, "system": _ALWAYS, "track_improvement": False, "max_rounds": 60,
         "adversary": {"attacker_fraction": 0.25, "free_rider": True, "loss_scale": 3.0},
         "target_accuracy": 0.76},
        "rounds_to_target",
        "Digits over 40 clients, a quarter of them free riders that return the global model untrained and report "
        "three times their loss (``adversary``). A round spent on free riders is partly wasted (FedAvg averages "
        "their unchanged models in), and the inflated losses lure loss-based selectors to them. Scored on rounds "
        "to Ω."),
    Scenario(
        "Stragglers",
        {"num_clients": 40, "partition": "sigma", "partition_params": {"sigma": 0.5}, "clients_per_round": 8,
         "local_epochs": 1, "track_improvement": False, "max_rounds": 60,
         "adversary": {"straggler_fraction": 0.3, "straggler_scale": 5.0, "straggler_shape": 1.5,
                       "deadline": 8.0},
         "target_accuracy": 0.81},
        "time_to_target",
        "Digits over 40 clients with RBCS-F's four speed classes and 80% availability; 30% of the clients are "
        "stragglers with Pareto delays (x_m = 5 s, α = 1.5) and the server stops waiting at 8 s. A straggler in "
        "the round makes it last the full deadline and its update is lost, while the fastest clients alone see "
        "a narrow slice of the data. Scored on simulated time to Ω."),
    Scenario(
        "Churn",
        {"num_clients": 40, "partition": "sigma", "partition_params": {"sigma": 0.8}, "clients_per_round": 5,
         "local_epochs": 1, "track_improvement": False, "max_rounds": 30, "target_accuracy": 1.0,
         "system": {"availability": [0.1] * 20 + [1.0] * 20}},
        "acc_worst10",
        "Digits over 40 label-skewed clients (σ = 0.8); half of them are available only 10% of the rounds. "
        "Uniform sampling rarely meets the intermittent clients, so their labels are under-trained and their "
        "accuracy lags; a selector that seizes them when they appear lifts the worst clients. Scored on the "
        "worst-10% client accuracy after 30 rounds."),
    Scenario(
        "Large",
        {**_FMNIST, "num_clients": 1000, "partition": "dirichlet", "partition_params": {"alpha": 0.3},
         "quantity_skew": 1.0, "samples_per_client": 30, "model": "logreg", "local_epochs": 1, "batch_size": 10,
         "lr": 0.05, "clients_per_round": 20, "system": _ALWAYS, "max_rounds": 60, "target_accuracy": 0.77,
         "pca_components": 20},
        "rounds_to_target",
        "A large federation: Fashion-MNIST over 1,000 clients (Dirichlet(0.3) labels, lognormal(σ = 1) sizes) with "
        "20 a round — the AFL regime of docs/REPRODUCTION.md §3 (where loss-valued selection cut rounds to Ω by "
        "51%), scaled to 30 samples per client on average. Each round sees 2% of the clients, so whom it sees "
        "matters. Scored on rounds to Ω.",
        "against experiments/afl_regime.py: 30,000 instead of 58,000 training samples, η = 0.05, "
        "PCA d = 20, its own Ω"),
    Scenario(
        "FMNISTControl",
        {"dataset": "fashion_mnist", "num_clients": 100, "samples_per_client": 600, "test_fraction": 1 / 12,
         "partition": "sigma", "partition_params": {"sigma": 0.8}, "model": "mlp", "model_params": {"hidden": 64},
         "local_epochs": 1, "batch_size": 10, "lr": 0.05, "clients_per_round": 10, "max_rounds": 80,
         "track_improvement": False, "target_accuracy": 0.82},
        "rounds_to_target",
        "The low-headroom control: Fashion-MNIST σ = 0.8, 100 clients of 600 samples, the MLP, E = 1, K = 10 — "
        "experiments/favor_study.py's fmnist_e1 setting, where no heuristic beat random on the tuning seeds. "
        "Equal sizes and mild skew leave little for selection to gain. Scored on rounds to Ω (calibrated here at 0.82; "
        "favor_study.py's rule gave 0.83 on its fixed federation).",
        "a new federation per seed (favor_study fixes federation 0); track_improvement off (no effect on training)"),
]

for _sc in _SCENARIOS:  # each with its Gymnasium id fedsel/Bench-<Name>-v0, the objective as the reward
    register_scenario(_sc)
#: FedSelect-Bench's own scenarios (a user's registered ones are not among them): what a scenario family never draws
BENCH_SCENARIOS = tuple(_SCENARIOS)
#: ``fedsel/Bench-<Name>-v0`` → name, for every registered scenario (the registry's own dict)
BENCH_IDS = SCENARIO_IDS


def scenario(name: Any) -> Scenario:
    """A scenario by registered name (``QuantitySkew``), id (``fedsel/Bench-QuantitySkew-v0``) or the path of a
    YAML scenario file (``fedsel_env.scenarios.lookup``).

    :raises ValueError: for an unknown one (naming the closest name), a missing or malformed scenario file.
    """
    return lookup(name)


def select(names: Any = None) -> List[Scenario]:
    """The scenarios named in ``names`` (a list or a comma-separated string of names, ids or YAML paths; None or
    ``all``: every registered one)."""
    if names is None or names == "all" or names == ["all"]:
        return list(SCENARIOS.values())
    if isinstance(names, str):
        names = [n for n in names.split(",") if n.strip()]
    out = [scenario(n.strip()) for n in names]
    if len({s.name for s in out}) != len(out):
        raise ValueError(f"--scenarios {names!r} names a scenario twice")
    if not out:
        raise ValueError("--scenarios is empty: name at least one scenario, or leave it out for all")
    return out


def episode_objective(sc: Scenario, record: Mapping[str, Any]) -> tuple:
    """One episode's objective value and whether it is censored (Ω missed: the value is a bound).

    :param record: an episode record of ``fedsel_eval`` (``metrics``, ``reached``).
    """
    m = record["metrics"]
    if sc.objective == "rounds_to_target":
        return (float(m["rounds_to_target"]), False) if record["reached"] else (float(m["rounds"]), True)
    if sc.objective == "time_to_target":
        return (float(m["time_to_target"]), False) if record["reached"] else (float(m["sim_time"]), True)
    value = m[sc.objective]
    return (float("nan") if value is None else float(value)), False


def federation_seed(seed: int) -> int:
    """The partition seed ``env.reset(seed)`` draws when the config leaves ``federation_seed`` null (the first
    draw of Gymnasium's ``np_random(seed)``, a PCG64 seeded by ``SeedSequence(seed)``)."""
    import numpy as np

    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(int(seed))))
    return int(rng.integers(0, 2**31 - 1, size=5)[0])


def training_env_config(name: Any, overrides: Mapping[str, Any], seed: Optional[int] = None) -> dict:
    """A learned selector's training env: the scenario's config (name, id or YAML path), ``overrides`` over it,
    the Dict observation. On a scenario family (``family:<Name>``, ``fedsel_env/families.py``) with ``seed``: the
    federation the family draws from that seed (without: its first tuning draw's)."""
    sc = scenario(name)
    cfg = sc.config_for(seed) if seed is not None and hasattr(sc, "config_for") else sc.env_config()
    cfg.update(overrides)
    cfg["observation"] = "dict"
    return cfg


def curve_seeds(who: str, seeds: Sequence[int], sc: Optional[Scenario] = None) -> List[int]:
    """The seeds of a learning curve, as ints; refused when one is a reporting seed of ``sc`` (None: the bench's)
    — a curve uses tuning seeds."""
    out = [int(s) for s in seeds]
    reporting = sc.reporting_seeds if sc is not None else REPORTING_SEEDS
    bad = sorted(set(out) & set(reporting))
    if bad:
        raise ValueError(f"{who}: eval_seeds {out} include reporting seeds {bad} of "
                         f"{'scenario ' + repr(sc.name) if sc is not None else 'the bench'}: the learning curve must "
                         f"use tuning seeds (eval_seeds = its tuning_seeds)")
    return out


def check_fresh_federations(seeds: Mapping[str, int], sc: Optional[Scenario] = None) -> None:
    """Refuse training episodes (``{"what": seed}``) of which one would play a tuning or reporting federation of
    ``sc`` (None: the bench's seeds, which every bench scenario shares)."""
    held_seeds = [*sc.reporting_seeds, *sc.tuning_seeds] if sc is not None else [*REPORTING_SEEDS, *TUNING_SEEDS]
    held = {federation_seed(s) for s in held_seeds}
    for what, seed in seeds.items():
        if federation_seed(seed) in held:
            raise ValueError(f"{what} (seed {seed}) would play a tuning/reporting federation of "
                             f"{'scenario ' + repr(sc.name) if sc is not None else 'the bench'}: change the "
                             f"training seed")


def normalised_score(random: float, oracle: float, policy: float) -> float:
    """(random − policy) / (random − oracle): 0 at random, 1 at the oracle, the same formula in either direction
    of the objective. NaN when the oracle is level with random (no headroom to normalise by)."""
    gap = random - oracle
    return float("nan") if gap == 0 or not math.isfinite(gap) else (random - policy) / gap


__all__ = ["BENCH_IDS", "BENCH_SCENARIOS", "OBJECTIVES", "REPORTING_SEEDS", "SCENARIOS", "Scenario", "TUNING_SEEDS", "register_scenario",
           "check_fresh_federations", "curve_seeds", "episode_objective", "federation_seed", "normalised_score",
           "scenario", "select", "training_env_config"]
