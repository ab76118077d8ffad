"""Scenario families (issue #42): seeded generators of federations, to train a selector that works where it was
not trained.

A real federation cannot be replayed thousands of times to train a selector for it; a learned selector is useful
only if it is trained in simulation and then works on a federation it never saw. A **family** draws such training
federations: ``family.scenario_for(seed)`` is a :class:`~fedsel_env.scenarios.Scenario` — an env config and the
family's objective — drawn from the family's parameter ranges (:class:`Ranges`) by a generator seeded with the
family's name and ``seed`` alone, so every machine draws the same federation from the same seed.

- **What a draw varies** (:class:`Ranges`, the built-in ones in :data:`MIXED`): the data set (digits, Fashion-MNIST,
  Synthetic(α, β)), N and K, label skew (σ, Dirichlet α, shards; Synthetic's natural split), size skew, noisy-label
  clients, free riders with and without inflated losses, stragglers (fraction, Pareto shape and scale, deadline),
  availability and churn, the round cap.
- **The objective** is the family's (one of ``rounds_to_target``, ``time_to_target``, ``acc_worst10``): a
  generalist is one model per objective. Why not the objective as an input: ``set_es``'s set value is linear in each
  client's standardised token, and a column that is the same for every client (the objective) adds the same number
  to every client's score and cannot change which K are picked; a design whose scores could use it would have to
  multiply it into every weight, which is one model per objective again.
- **Ω of a to-target draw** is calibrated on the draw itself by the bench's rule (``experiments/bench_reference.py``'s
  ``calibrate_target``): the 0.01-grid accuracy the median of random selection's curves reaches at half the round
  cap, rounded down, from :data:`CALIBRATION_EPISODES` episodes of uniformly random K-of-the-available selection on
  calibration seeds drawn with the config (:func:`calibrate_omega`). A draw whose calibrated Ω would be reached at
  round 0 or whose curves never rise above chance is still a federation: Ω is then the median accuracy at the cap
  (an episode that misses counts as the cap, the bench's convention).
- **Held apart from the bench**: a draw whose config and objective equal a registered bench scenario's is never
  returned (the next attempt of the same seed is drawn instead; the ranges may cover the bench scenarios, the exact
  configs are excluded), and :func:`check_family_seeds` refuses a training or tuning seed that would play a bench
  federation (``fedsel_env.bench.check_fresh_federations``).

Families are registered by name (:func:`register_family`); ``family:<Name>`` is what ``train_agent.py --env``
and the trainers take (:func:`fedsel_env.scenarios.lookup` returns the family, which answers the scenario
questions a trainer asks: name, objective, tuning seeds, and each episode's config by :meth:`Family.config_for`).
"""
from __future__ import annotations

import copy
import difflib
import math
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .scenarios import KEY_PREFIXES, OBJECTIVES, Scenario

#: the prefix of a family's key where a scenario is expected (``--env family:MixedRounds``)
PREFIX = "family:"
#: random selection's episodes a to-target draw's Ω is calibrated on (the bench used 10 tuning seeds per scenario)
CALIBRATION_EPISODES = 3
#: the family's own tuning seeds (its learning curves; disjoint from the bench's and from the ES training seeds)
FAMILY_TUNING_SEEDS: Tuple[int, ...] = tuple(range(3_000_000, 3_000_010))
#: seeds a family's draws are reported on (never tuned on)
FAMILY_REPORTING_SEEDS: Tuple[int, ...] = tuple(range(3_100_000, 3_100_030))
#: attempts a seed gets to draw a config that is none of the bench scenarios' before the family is refused
MAX_ATTEMPTS = 20


def _interval(v: Any, what: str, lo: float = -math.inf, hi: float = math.inf) -> Tuple[float, float]:
    ok = isinstance(v, (list, tuple)) and len(v) == 2 and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v)
    if not ok or not (lo <= v[0] <= v[1] <= hi):
        raise ValueError(f"family ranges: {what} = {v!r} is invalid: expected [low, high] with {lo} <= low <= high "
                         f"<= {hi}")
    return float(v[0]), float(v[1])


def _probability(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
        raise ValueError(f"family ranges: {what} = {v!r} is invalid: expected a probability in [0, 1]")
    return float(v)


def _weights(v: Any, what: str, allowed: Sequence[str]) -> Dict[str, float]:
    if not isinstance(v, Mapping) or not v or any(k not in allowed for k in v) or any(
            isinstance(p, bool) or not isinstance(p, (int, float)) or p < 0 for p in v.values()) or sum(v.values()) <= 0:
        raise ValueError(f"family ranges: {what} = {v!r} is invalid: expected a mapping of {list(allowed)} to "
                         f"weights >= 0, not all 0")
    return {k: float(p) for k, p in v.items()}


@dataclass(frozen=True)
class Ranges:
    """What a family's draws vary, and over what (each interval ``[low, high]``, drawn uniformly unless said).

    :param datasets: data set → weight (``digits``, ``fashion_mnist``, ``synthetic``).
    :param num_clients: N, log-uniform; digits' 1,797 images cap it at ``digits_max_clients``.
    :param clients_fraction: K = round(fraction · N), at least 2 and at most ``max_k``.
    :param label_skew: partition → weight (``sigma``, ``dirichlet``, ``shards``; Synthetic(α, β) is always split
        naturally, its skew is α and β), with ``sigma``, ``alpha`` (log-uniform) and ``shards_per_client``.
    :param quantity_skew: with probability ``quantity_skew_p``, clients' sizes lognormal with σ in the interval.
    :param noisy_p: probability that a fraction ``noisy_fraction`` of the clients hold uniformly noisy labels.
    :param free_riders_p: probability of free riders (``free_rider_fraction`` of N, returning w_t untrained),
        reporting ``loss_scale`` times their loss with probability ``inflated_p`` (else their true loss).
    :param stragglers_p: probability of Pareto stragglers (fraction, shape α, scale x_m in seconds), the server
        waiting at most ``deadline`` seconds with probability ``deadline_p`` (else it waits for everyone).
    :param availability: each client available each round with this probability (one value a federation) ...
    :param churn_p: ... except that with this probability a fraction ``churn_fraction`` of the clients is available
        only ``churn_availability`` of the rounds.
    :param max_rounds: the round cap (an integer in the interval).
    """

    datasets: Mapping[str, float] = field(default_factory=lambda: {"digits": 0.5, "synthetic": 0.3,
                                                                   "fashion_mnist": 0.2})
    num_clients: Tuple[float, float] = (20, 200)
    digits_max_clients: int = 80
    clients_fraction: Tuple[float, float] = (0.05, 0.2)
    max_k: int = 20
    label_skew: Mapping[str, float] = field(default_factory=lambda: {"sigma": 0.4, "dirichlet": 0.4, "shards": 0.2})
    sigma: Tuple[float, float] = (0.3, 0.9)
    alpha: Tuple[float, float] = (0.1, 1.0)
    shards_per_client: Tuple[float, float] = (1, 3)
    quantity_skew_p: float = 0.5
    quantity_skew: Tuple[float, float] = (0.5, 1.5)
    noisy_p: float = 0.2
    noisy_fraction: Tuple[float, float] = (0.1, 0.4)
    free_riders_p: float = 0.2
    free_rider_fraction: Tuple[float, float] = (0.1, 0.3)
    inflated_p: float = 0.5
    loss_scale: Tuple[float, float] = (2.0, 4.0)
    stragglers_p: float = 0.3
    straggler_fraction: Tuple[float, float] = (0.1, 0.4)
    straggler_shape: Tuple[float, float] = (1.1, 2.5)
    straggler_scale: Tuple[float, float] = (3.0, 8.0)
    deadline_p: float = 0.5
    deadline: Tuple[float, float] = (6.0, 12.0)
    availability: Tuple[float, float] = (0.6, 1.0)
    churn_p: float = 0.2
    churn_fraction: Tuple[float, float] = (0.3, 0.6)
    churn_availability: Tuple[float, float] = (0.05, 0.3)
    max_rounds: Tuple[float, float] = (30, 60)

    def __post_init__(self) -> None:
        _weights(self.datasets, "datasets", ("digits", "fashion_mnist", "synthetic"))
        _weights(self.label_skew, "label_skew", ("sigma", "dirichlet", "shards"))
        _interval(self.num_clients, "num_clients", 2, 100_000)
        _interval(self.clients_fraction, "clients_fraction", 0.0, 1.0)
        for name in ("sigma", "quantity_skew", "straggler_scale", "deadline", "loss_scale"):
            _interval(getattr(self, name), name, 0.0)
        _interval(self.alpha, "alpha", 1e-6)
        _interval(self.shards_per_client, "shards_per_client", 1)
        _interval(self.straggler_shape, "straggler_shape", 1e-6)
        _interval(self.max_rounds, "max_rounds", 2)
        for name in ("noisy_fraction", "free_rider_fraction", "straggler_fraction", "availability", "churn_fraction",
                     "churn_availability"):
            _interval(getattr(self, name), name, 0.0, 1.0)
        for name in ("quantity_skew_p", "noisy_p", "free_riders_p", "inflated_p", "stragglers_p", "deadline_p",
                     "churn_p"):
            _probability(getattr(self, name), name)
        for name in ("digits_max_clients", "max_k"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 2:
                raise ValueError(f"family ranges: {name} = {v!r} is invalid: expected an integer >= 2")


def _uniform(rng: np.random.Generator, interval: Sequence[float]) -> float:
    """A uniform draw from ``[low, high]``: one number taken from ``rng`` whatever the interval (so that a
    degenerate interval moves no later draw)."""
    return float(interval[0] + (interval[1] - interval[0]) * rng.random())


def _pick(rng: np.random.Generator, weights: Mapping[str, float]) -> str:
    keys = sorted(weights)
    p = np.cumsum([weights[k] for k in keys], dtype=np.float64)
    return keys[min(int(np.searchsorted(p / p[-1], rng.random(), side="right")), len(keys) - 1)]


def draw_config(ranges: Ranges, objective: str, rng: np.random.Generator) -> Dict[str, Any]:
    """One federation's env config from ``ranges`` (Ω left at 1.0: :func:`calibrate_omega` sets it). Every
    parameter is drawn in a fixed order whether or not it is used, so changing one range moves no other draw."""
    u = {name: float(rng.random()) for name in ("quantity_skew", "noisy", "free_riders", "inflated", "stragglers",
                                                  "deadline", "churn")}
    dataset = _pick(rng, ranges.datasets)
    skew = _pick(rng, ranges.label_skew)
    lo, hi = ranges.num_clients
    hi = min(hi, ranges.digits_max_clients) if dataset == "digits" else hi
    lo = min(lo, hi)
    n = int(round(math.exp(_uniform(rng, (math.log(lo), math.log(hi))))))
    k = int(min(ranges.max_k, n - 1, max(2, round(_uniform(rng, ranges.clients_fraction) * n))))
    sigma = round(_uniform(rng, ranges.sigma), 3)
    alpha = round(math.exp(_uniform(rng, (math.log(ranges.alpha[0]), math.log(ranges.alpha[1])))), 3)
    shards = int(math.floor(_uniform(rng, (ranges.shards_per_client[0], ranges.shards_per_client[1] + 1 - 1e-9))))
    qskew = round(_uniform(rng, ranges.quantity_skew), 3)
    noisy = round(_uniform(rng, ranges.noisy_fraction), 3)
    riders, scale = round(_uniform(rng, ranges.free_rider_fraction), 3), round(_uniform(rng, ranges.loss_scale), 3)
    strag = [round(_uniform(rng, getattr(ranges, f)), 3) for f in ("straggler_fraction", "straggler_shape",
                                                                    "straggler_scale", "deadline")]
    avail = round(_uniform(rng, ranges.availability), 3)
    churn_frac = round(_uniform(rng, ranges.churn_fraction), 3)
    churn_avail = round(_uniform(rng, ranges.churn_availability), 3)
    synth = [(0.0, 0.5, 1.0)[min(int(3 * rng.random()), 2)] for _ in range(2)]
    cap = int(math.floor(_uniform(rng, (ranges.max_rounds[0], ranges.max_rounds[1] + 1 - 1e-9))))

    cfg: Dict[str, Any] = {"num_clients": n, "clients_per_round": k, "local_epochs": 1, "max_rounds": cap,
                           "target_accuracy": 1.0, "track_improvement": False}
    if dataset == "digits":
        cfg.update(dataset="digits")
    elif dataset == "fashion_mnist":
        cfg.update(dataset="fashion_mnist", samples_per_client=100, test_fraction=0.2, model="logreg",
                   batch_size=10, lr=0.05)
    else:
        cfg.update(dataset="synthetic", dataset_params={"alpha": synth[0], "beta": synth[1]}, partition="natural",
                   partition_params={}, model="logreg", batch_size=10, lr=0.05)
    if dataset != "synthetic":
        cfg["partition"], cfg["partition_params"] = {
            "sigma": ("sigma", {"sigma": sigma}), "dirichlet": ("dirichlet", {"alpha": alpha}),
            "shards": ("shards", {"shards_per_client": shards})}[skew]
        if u["quantity_skew"] < ranges.quantity_skew_p:
            cfg["quantity_skew"] = qskew
        if u["noisy"] < ranges.noisy_p:
            cfg["dataset_params"] = {"noisy_clients": noisy, "label_noise": "random"}
    adversary: Dict[str, Any] = {}
    if u["free_riders"] < ranges.free_riders_p:
        adversary.update(attacker_fraction=riders, free_rider=True,
                         loss_scale=scale if u["inflated"] < ranges.inflated_p else 1.0)
    if u["stragglers"] < ranges.stragglers_p:
        adversary.update(straggler_fraction=strag[0], straggler_shape=strag[1], straggler_scale=strag[2],
                         deadline=strag[3] if u["deadline"] < ranges.deadline_p else None)
    if adversary:
        cfg["adversary"] = adversary
    if u["churn"] < ranges.churn_p:
        rare = max(1, int(round(churn_frac * n)))
        cfg["system"] = {"availability": [churn_avail] * rare + [avail] * (n - rare)}
    else:
        cfg["system"] = {"availability": avail}
    if objective == "acc_worst10":
        cfg["max_rounds"] = min(cap, 30)  # the bench's worst-10% scenario plays 30 rounds; Ω = 1: fixed length
    return cfg


class _RandomScores:
    """Uniformly random K of the available clients, as ``topk`` scores (the bench's ``random`` in distribution)."""

    def __init__(self, n: int, seed: int) -> None:
        self.n, self.rng = n, np.random.default_rng(seed)

    def predict(self, obs: Any, deterministic: bool = True) -> Tuple[np.ndarray, None]:
        return self.rng.random(self.n).astype(np.float32), None


def calibrate_omega(config: Mapping[str, Any], seeds: Sequence[int]) -> float:
    """Ω of a to-target federation by the bench's rule: the 0.01-grid accuracy the median of random selection's
    curves reaches at round cap/2 (rounded down), over one episode per seed of ``config`` with Ω = 1 (no early end),
    played to cap/2. Where that median is reached at round 0 already (the model starts there), the median at the cap
    is taken instead, so that Ω asks for some progress."""
    from .env import FedSelectEnv
    from .rollout import run_episode

    cap = int(config["max_rounds"])
    half = max(1, cap // 2)
    env = FedSelectEnv(config={**config, "target_accuracy": 1.0, "max_rounds": cap, "action_mode": "topk",
                               "observation": "dict"})
    try:
        curves = [run_episode(env, _RandomScores(int(config["num_clients"]), int(s)), int(s))["curves"]["accuracy"]
                  for s in seeds]
    finally:
        env.close()
    at = lambda r: float(np.median([c[min(r, len(c) - 1)] for c in curves]))  # noqa: E731
    omega = math.floor(at(half) * 100 + 1e-9) / 100
    if omega <= math.floor(at(0) * 100 + 1e-9) / 100:
        omega = math.floor(at(cap) * 100 + 1e-9) / 100
    return float(min(max(omega, 0.01), 1.0))


def _bench_key(config: Mapping[str, Any], objective: str) -> str:
    import json

    from .config import DEFAULT_CONFIG

    merged = {**copy.deepcopy(DEFAULT_CONFIG), **copy.deepcopy(dict(config))}
    merged.pop("target_accuracy", None)  # a draw's Ω is calibrated after the draw; the bench's is its own
    return json.dumps({"config": merged, "objective": objective}, sort_keys=True, default=str)


def is_bench_config(config: Mapping[str, Any], objective: str) -> bool:
    """Whether ``config`` with ``objective`` is one of FedSelect-Bench's scenarios (``fedsel_env/bench.py``), its Ω
    aside."""
    from .bench import BENCH_SCENARIOS

    key = _bench_key(config, objective)
    return any(_bench_key(sc.config, sc.objective) == key for sc in BENCH_SCENARIOS)


@dataclass(frozen=True)
class Family:
    """A named generator of federations with one objective (see the module's docstring).

    :param name: ``family:<name>`` (letters, digits and _ . + -).
    :param objective: every draw's objective (:data:`~fedsel_env.scenarios.OBJECTIVES`).
    :param ranges: what the draws vary (:class:`Ranges`).
    :param statement: what the family is for.
    """

    name: str
    objective: str
    ranges: Ranges = field(default_factory=Ranges)
    statement: str = ""
    tuning_seeds: Tuple[int, ...] = FAMILY_TUNING_SEEDS
    reporting_seeds: Tuple[int, ...] = FAMILY_REPORTING_SEEDS
    source: Optional[str] = None

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES or self.objective == "final_accuracy":
            allowed = [o for o in OBJECTIVES if o != "final_accuracy"]
            close = difflib.get_close_matches(str(self.objective), allowed, n=1)
            raise ValueError(f"family {self.name!r}: objective = {self.objective!r} is invalid: expected one of "
                             f"{allowed}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        if not isinstance(self.ranges, Ranges):
            raise ValueError(f"family {self.name!r}: ranges must be a fedsel_env.families.Ranges")
        Scenario(self.name, {}, self.objective, tuning_seeds=self.tuning_seeds, reporting_seeds=self.reporting_seeds)

    # --- what a trainer asks of a scenario ---------------------------------------------------------------------
    @property
    def env_id(self) -> str:
        return PREFIX + self.name

    @property
    def lower_is_better(self) -> bool:
        return OBJECTIVES[self.objective]

    @property
    def config(self) -> Dict[str, Any]:
        """The config of the family's first tuning draw (what a trainer builds its first env from)."""
        return self.config_for(self.tuning_seeds[0])

    def env_config(self) -> Dict[str, Any]:
        return self.config

    def reward_config(self) -> Dict[str, Any]:
        return {"reward": "objective", "reward_params": {"objective": self.objective}}

    def objective_env_config(self) -> Dict[str, Any]:
        return {**self.env_config(), **self.reward_config()}

    # --- the draws ------------------------------------------------------------------------------------------------
    def rng(self, seed: int, attempt: int = 0) -> np.random.Generator:
        """The generator of draw ``seed`` (its ``attempt``-th try): seeded by the family's name and the seed alone."""
        return np.random.default_rng(np.random.SeedSequence([zlib.crc32(self.name.encode()), int(seed), attempt]))

    def uncalibrated(self, seed: int) -> Dict[str, Any]:
        """Draw ``seed``'s config before Ω is calibrated (Ω = 1), a bench scenario's config never."""
        for attempt in range(MAX_ATTEMPTS):
            cfg = draw_config(self.ranges, self.objective, self.rng(seed, attempt))
            if not is_bench_config(cfg, self.objective):
                return cfg
        raise ValueError(f"family {self.name!r}: {MAX_ATTEMPTS} draws of seed {seed} were all bench scenarios' "
                         f"configs: widen the family's ranges")

    def config_for(self, seed: int) -> Dict[str, Any]:
        """Draw ``seed``'s env config, Ω calibrated for a to-target objective (:func:`calibrate_omega`)."""
        return copy.deepcopy(_calibrated(self, int(seed)))

    def scenario_for(self, seed: int) -> Scenario:
        """Draw ``seed`` as a scenario (named ``<family>-<seed>``), the family's objective."""
        return Scenario(f"{self.name}-{int(seed)}"[:64], self.config_for(seed), self.objective,
                        statement=f"draw {int(seed)} of family {self.name}")

    def calibration_seeds(self, seed: int) -> List[int]:
        """The reset seeds Ω of draw ``seed`` is calibrated on (drawn with the draw, above every bench seed)."""
        rng = np.random.default_rng(np.random.SeedSequence([zlib.crc32(self.name.encode()), int(seed), 10**6]))
        return [int(s) for s in rng.integers(10**7, 2**31 - 1, size=CALIBRATION_EPISODES)]

    def describe(self) -> Dict[str, Any]:
        return {"name": self.name, "objective": self.objective, "ranges": asdict(self.ranges),
                "statement": self.statement}


_CALIBRATED: Dict[Tuple[str, int], Dict[str, Any]] = {}


def _calibrated(family: Family, seed: int) -> Dict[str, Any]:
    """Draw ``seed`` of ``family`` with Ω calibrated, kept in this process (the calibration plays episodes)."""
    import json

    key = (json.dumps(family.describe(), sort_keys=True, default=str), seed)
    if key not in _CALIBRATED:
        cfg = family.uncalibrated(seed)
        if family.objective in ("rounds_to_target", "time_to_target"):
            cfg["target_accuracy"] = calibrate_omega(cfg, family.calibration_seeds(seed))
        if len(_CALIBRATED) >= 4096:
            _CALIBRATED.clear()
        _CALIBRATED[key] = cfg
    return _CALIBRATED[key]


#: every registered family by name
FAMILIES: Dict[str, Family] = {}


def register_family(family: Family) -> Family:
    """Add ``family`` to the registry (``--env family:<name>``). :raises ValueError: when the name is taken."""
    if not isinstance(family, Family):
        raise ValueError(f"register_family takes a Family, got {type(family).__name__}")
    held = FAMILIES.get(family.name)
    if held is not None and held != family:
        raise ValueError(f"family name {family.name!r} is taken: give yours another name")
    FAMILIES[family.name] = family
    return family


def is_family_key(key: Any) -> bool:
    return isinstance(key, str) and key.startswith(PREFIX)


def family(key: Any) -> Family:
    """A family by ``family:<name>`` or ``<name>``. :raises ValueError: naming the registered ones."""
    name = key[len(PREFIX):] if is_family_key(key) else key
    if isinstance(name, str) and name in FAMILIES:
        return FAMILIES[name]
    close = difflib.get_close_matches(str(name), list(FAMILIES), n=1)
    raise ValueError(f"unknown scenario family {key!r}" + (f" (did you mean 'family:{close[0]}'?)" if close else "")
                     + f": registered families are {['family:' + f for f in sorted(FAMILIES)]}")


def check_family_seeds(fam: Family, seeds: Mapping[str, int]) -> None:
    """Refuse training seeds (``{"what": seed}``) that are the family's tuning or reporting seeds, or that would
    play a federation of the bench's tuning or reporting seeds."""
    from .bench import check_fresh_federations

    held = set(fam.tuning_seeds) | set(fam.reporting_seeds)
    for what, s in seeds.items():
        if int(s) in held:
            raise ValueError(f"{what} (seed {s}) is one of family {fam.name!r}'s tuning or reporting seeds: change "
                             f"the training seed")
    check_fresh_federations(seeds, None)


KEY_PREFIXES[PREFIX] = family  # fedsel_env.scenarios.lookup("family:<Name>") → the family

#: the built-in families' ranges: every kind of federation issue #42 names
MIXED = Ranges()
for _objective, _name, _ranges, _statement in (
        ("rounds_to_target", "MixedRounds", MIXED,
         "digits, Fashion-MNIST and Synthetic(α, β) federations of 20-200 clients with every kind of skew and "
         "adversary, scored on rounds to a calibrated Ω"),
        ("time_to_target", "MixedTime", Ranges(stragglers_p=0.6),
         "the same federations, stragglers more often (60% of the draws), scored on simulated seconds to Ω"),
        ("acc_worst10", "MixedWorst10", Ranges(churn_p=0.5),
         "the same federations, churn more often (half the draws), scored on the worst-10% client accuracy after "
         "at most 30 rounds")):
    register_family(Family(_name, _objective, _ranges, _statement))

__all__ = ["CALIBRATION_EPISODES", "FAMILIES", "FAMILY_REPORTING_SEEDS", "FAMILY_TUNING_SEEDS", "Family", "MIXED",
           "PREFIX", "Ranges", "calibrate_omega", "check_family_seeds", "draw_config", "family", "is_bench_config",
           "is_family_key", "register_family"]
