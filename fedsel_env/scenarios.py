"""Scenarios as data (issue #46): the registry of named scenarios and the YAML scenario format.

A **scenario** is an env config (``DEFAULT_CONFIG``'s fields) plus the **objective** that scores an episode on it
(:data:`OBJECTIVES`, docs/BENCHMARK.md): what FedSelect-Bench's scenarios are (``fedsel_env/bench.py``, issue #28),
and what a user's own federation becomes when its YAML env config names an ``objective:``. Every command that
takes a scenario reads it through :func:`lookup`, which accepts

- a registered name (``Stragglers``; :func:`register_scenario` adds one — the 8 bench scenarios register
  themselves when ``fedsel_env`` is imported, and each registered scenario gets the Gymnasium id
  ``fedsel/Bench-<Name>-v0``, its objective as the reward);
- such an id (``fedsel/Bench-Stragglers-v0``);
- ``family:<Name>``, a registered scenario family (``fedsel_env/families.py``, issue #42): a generator of
  federations with one objective, which answers a trainer's questions as a scenario does (each episode's config
  drawn from its seed);
- the path of a YAML scenario file (:func:`load_scenario`): the keys of a YAML env config
  (``fedsel_env.config.resolve_env``; ``preset:`` included) plus :data:`SCENARIO_KEYS` —
  ``objective`` (required), and optionally ``name`` (default: the file's stem), ``statement``, ``tuning_seeds``
  and ``reporting_seeds`` (default: the bench's, :data:`TUNING_SEEDS` / :data:`REPORTING_SEEDS`; the two sets
  must not overlap: nothing is tuned on the seeds a result is reported on).

A scenario file is not registered: it is read again where it is named. Its env fields are checked where the env
is built (``fedsel_env.config.make_config``, naming the field); this module checks the scenario keys. The
objectives are SPEC.md §5's metrics (docs/SPEC.md §5; the ``objective`` reward, §4, adds up to one of them).
"""
from __future__ import annotations

import copy
import difflib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

#: seeds Ω (and anything else about a scenario) may be calibrated on: the bench's, and a scenario's by default
TUNING_SEEDS: List[int] = list(range(100, 110))
#: seeds the reference scores are reported on: never used for tuning (disjoint from TUNING_SEEDS)
REPORTING_SEEDS: List[int] = list(range(9000, 9030))

#: objective → True when lower is better
OBJECTIVES: Dict[str, bool] = {"rounds_to_target": True, "time_to_target": True,
                               "final_accuracy": False, "acc_worst10": False}

#: the keys a scenario file adds to a YAML env config
SCENARIO_KEYS = ("objective", "name", "statement", "tuning_seeds", "reporting_seeds")
#: a scenario's name: a folder name and the ``<Name>`` of its Gymnasium id
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")


def _seed_tuple(value: Any, field_name: str, where: str) -> Tuple[int, ...]:
    """A non-empty list of distinct integers >= 0 as a tuple, or a ``ValueError`` naming the field and the fix."""
    ok = isinstance(value, (list, tuple)) and len(value) > 0 and all(
        isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**63 for s in value)
    if not ok:
        shown = list(value) if isinstance(value, tuple) else value  # as the YAML wrote it
        raise ValueError(f"{where}: {field_name} = {shown!r} is invalid: expected a non-empty list of integers >= 0 "
                         f"(e.g. {field_name}: [100, 101, 102])")
    if len(set(value)) != len(value):
        raise ValueError(f"{where}: {field_name} = {list(value)!r} names a seed twice: list each seed once")
    return tuple(int(s) for s in value)


@dataclass(frozen=True)
class Scenario:
    """One scenario.

    :param name: ``<Name>`` of ``fedsel/Bench-<Name>-v0`` (and the folder of its episodes in a suite run).
    :param config: env-config fields over ``DEFAULT_CONFIG`` (Ω included).
    :param objective: one of :data:`OBJECTIVES`.
    :param statement: what makes selection matter here, and what scores it.
    :param departures: how it differs from the paper setting it is built after (empty: none claimed).
    :param tuning_seeds: the seeds anything about the scenario may be tuned on (learning curves included).
    :param reporting_seeds: the seeds results are reported on (disjoint from ``tuning_seeds``); training
        federations are checked to be none of either (``fedsel_env.bench.check_fresh_federations``).
    :param source: the YAML file it was read from (None: defined in Python).
    """

    name: str
    config: Mapping[str, Any]
    objective: str
    statement: str = ""
    departures: str = ""
    tags: Sequence[str] = field(default_factory=tuple)
    tuning_seeds: Tuple[int, ...] = tuple(TUNING_SEEDS)
    reporting_seeds: Tuple[int, ...] = tuple(REPORTING_SEEDS)
    source: Optional[str] = None

    def __post_init__(self) -> None:
        where = f"scenario {self.source or self.name!r}"
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(f"{where}: name = {self.name!r} is invalid: expected letters, digits and _ . + - "
                             f"(at most 64, starting with a letter or digit), e.g. name: MyFederation")
        if not isinstance(self.objective, str) or self.objective not in OBJECTIVES:
            close = difflib.get_close_matches(str(self.objective), list(OBJECTIVES), n=1)
            raise ValueError(f"{where}: objective = {self.objective!r} is invalid: expected one of "
                             f"{list(OBJECTIVES)}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        if not isinstance(self.config, Mapping) or not all(isinstance(k, str) for k in self.config):
            raise ValueError(f"{where}: its env config must be a mapping of config fields")
        tuning = _seed_tuple(self.tuning_seeds, "tuning_seeds", where)
        reporting = _seed_tuple(self.reporting_seeds, "reporting_seeds", where)
        both = sorted(set(tuning) & set(reporting))
        if both:
            raise ValueError(f"{where}: tuning_seeds and reporting_seeds share {both}: nothing may be tuned on the "
                             f"seeds a result is reported on; remove them from one of the two lists")
        object.__setattr__(self, "tuning_seeds", tuning)
        object.__setattr__(self, "reporting_seeds", reporting)

    @property
    def env_id(self) -> str:
        """What ``--env`` takes for this scenario: its Gymnasium id, or the file it was read from."""
        return self.source if self.source else f"fedsel/Bench-{self.name}-v0"

    @property
    def lower_is_better(self) -> bool:
        return OBJECTIVES[self.objective]

    def env_config(self) -> Dict[str, Any]:
        """A fresh copy of the scenario's config (safe to modify)."""
        return copy.deepcopy(dict(self.config))

    def reward_config(self) -> Dict[str, Any]:
        """The config fields of the scenario's objective as the reward (``reward: objective``, issue #41): what
        ``fedsel/Bench-<Name>-v0`` adds to :meth:`env_config`, so that an episode's return is the score."""
        return {"reward": "objective", "reward_params": {"objective": self.objective}}

    def objective_env_config(self) -> Dict[str, Any]:
        """The env of ``--env <scenario>`` and of its Gymnasium id: :meth:`env_config` with the objective as the
        reward (:meth:`reward_config`), unless the scenario's config names a ``reward`` of its own."""
        cfg = self.env_config()
        return cfg if "reward" in cfg else {**cfg, **self.reward_config()}


#: key prefix → what :func:`lookup` returns for a key that starts with it: ``family:`` → a scenario family
#: (``fedsel_env/families.py`` registers it, so this module imports nothing above it)
KEY_PREFIXES: Dict[str, Any] = {}
#: every registered scenario by name (the 8 bench scenarios register themselves: ``fedsel_env/bench.py``)
SCENARIOS: Dict[str, Scenario] = {}
#: ``fedsel/Bench-<Name>-v0`` → name, for every registered scenario
SCENARIO_IDS: Dict[str, str] = {}


def register_scenario(sc: Scenario, gym_id: bool = True) -> Scenario:
    """Add ``sc`` to the registry (and, with ``gym_id``, register ``fedsel/Bench-<Name>-v0`` with Gymnasium: its
    config with the objective as the reward, :meth:`Scenario.objective_env_config`). Registering the same
    scenario again changes nothing.

    :raises ValueError: when another scenario holds the name.
    """
    if not isinstance(sc, Scenario):
        raise ValueError(f"register_scenario takes a Scenario, got {type(sc).__name__}: build one with "
                         f"Scenario(name, config, objective), or read a YAML file with load_scenario(path)")
    held = SCENARIOS.get(sc.name)
    if held is not None and held != sc:
        raise ValueError(f"scenario name {sc.name!r} is taken by another registered scenario: give yours "
                         f"another name")
    SCENARIOS[sc.name] = sc
    SCENARIO_IDS[f"fedsel/Bench-{sc.name}-v0"] = sc.name
    if gym_id:
        from gymnasium.envs.registration import register
        from gymnasium.envs.registration import registry as gym_registry

        env_id = f"fedsel/Bench-{sc.name}-v0"
        if env_id not in gym_registry:
            register(id=env_id, entry_point="fedsel_env.env:FedSelectEnv",
                     kwargs={"config": sc.objective_env_config()},
                     vector_entry_point="fedsel_env.vector:FedSelectVectorEnv")
    return sc


def is_scenario_file(text: Any) -> bool:
    """Whether ``text`` names a file (an existing one, or a path ending in .yml / .yaml)."""
    return isinstance(text, (str, os.PathLike)) and (str(text).endswith((".yml", ".yaml")) or Path(text).is_file())


def scenario_from_mapping(data: Any, source: str, default_name: str) -> Scenario:
    """The scenario a YAML scenario document holds (``data``, read from ``source``).

    :raises ValueError: naming ``source``, the field and the fix: not a mapping, no ``objective``, an unknown
        objective, a bad name, statement or seed list, tuning and reporting seeds that overlap.
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"scenario file {source!r} must hold a mapping of env config keys plus 'objective:'")
    data = dict(data)
    if "objective" not in data:
        raise ValueError(f"scenario file {source!r} names no objective: it is a plain env config. A scenario adds "
                         f"'objective:' (one of {list(OBJECTIVES)}), e.g. objective: time_to_target")
    name = data.pop("name", default_name)
    statement = data.pop("statement", "")
    if not isinstance(statement, str):
        raise ValueError(f"scenario file {source!r}: statement = {statement!r} is invalid: expected text")
    if isinstance(name, str) and name in SCENARIOS:
        raise ValueError(f"scenario file {source!r}: name {name!r} is a registered scenario's "
                         f"({SCENARIOS[name].env_id}): give yours another name (name: My{name})")
    objective = data.pop("objective")
    seeds = {k: data.pop(k) for k in ("tuning_seeds", "reporting_seeds") if k in data}
    for k, v in seeds.items():  # a YAML list; anything else is refused by Scenario, naming the field
        seeds[k] = tuple(v) if isinstance(v, list) else v
    return Scenario(name=name, config=data, objective=objective, statement=statement, source=source, **seeds)


def load_scenario(path: Union[str, os.PathLike]) -> Scenario:
    """The scenario in the YAML file ``path`` (read strictly: ``fedsel_env.yaml_reader.read_yaml``).

    :raises ValueError: for a missing or malformed file (naming it and the fix), or a bad scenario key
        (:func:`scenario_from_mapping`).
    """
    from .yaml_reader import read_yaml

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"scenario file {str(p)!r} does not exist: give the path of a YAML file, a registered "
                         f"scenario {sorted(SCENARIOS)}, or an id fedsel/Bench-<Name>-v0")
    return scenario_from_mapping(read_yaml(p, "scenario file"), str(p), p.stem)


def env_scenario(env: Any) -> Optional[Scenario]:
    """The scenario an ``--env`` value names, or None: a registered scenario's name or id, or a YAML file that
    names an ``objective:`` (a plain env config, a preset or a mapping: None)."""
    if isinstance(env, str) and (env in SCENARIOS or env in SCENARIO_IDS):
        return SCENARIOS[SCENARIO_IDS.get(env, env)]
    if not is_scenario_file(env) or not Path(env).is_file():
        return None
    from .yaml_reader import read_yaml

    data = read_yaml(env, "config file")
    if not isinstance(data, Mapping) or "objective" not in data:
        return None
    return scenario_from_mapping(data, str(env), Path(env).stem)


def lookup(key: Union[str, os.PathLike, Scenario]) -> Scenario:
    """A scenario by registered name (``Stragglers``), id (``fedsel/Bench-Stragglers-v0``) or YAML file path.

    :raises ValueError: for anything else, naming the closest registered name or id when there is one, or for a
        scenario file that is missing or malformed (:func:`load_scenario`).
    """
    if isinstance(key, Scenario):
        return key
    for prefix, resolve in KEY_PREFIXES.items():  # family:<Name> (fedsel_env/families.py registers it)
        if isinstance(key, str) and key.startswith(prefix):
            return resolve(key)
    if isinstance(key, str) and key in SCENARIOS:
        return SCENARIOS[key]
    if isinstance(key, str) and key in SCENARIO_IDS:
        return SCENARIOS[SCENARIO_IDS[key]]
    if is_scenario_file(key):
        return load_scenario(key)
    if not isinstance(key, str):
        raise ValueError(f"scenario {key!r} is invalid: expected a registered name, an id fedsel/Bench-<Name>-v0 "
                         f"or the path of a YAML scenario file")
    known = [*SCENARIOS, *SCENARIO_IDS]
    lowered = {k.lower(): k for k in known}
    close = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.6)
    hint = f" (did you mean {lowered[close[0]]!r}?)" if close else ""
    raise ValueError(f"unknown bench scenario {key!r}{hint}: not a registered name or id, nor a YAML file; give "
                     f"a registered scenario {sorted(SCENARIOS)}, an id fedsel/Bench-<Name>-v0, or the path of a "
                     f"YAML scenario file (an env config plus 'objective:', docs/BENCHMARK.md, Your own scenario)")


__all__ = ["KEY_PREFIXES", "OBJECTIVES", "REPORTING_SEEDS", "SCENARIOS", "SCENARIO_IDS", "SCENARIO_KEYS", "Scenario",
           "TUNING_SEEDS", "env_scenario", "is_scenario_file", "load_scenario", "lookup", "register_scenario",
           "scenario_from_mapping"]
