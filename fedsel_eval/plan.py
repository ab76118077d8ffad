"""The plan of an evaluation: one env config, the policies, the aggregation backends and the seeds.

Owns reading an eval config file (``--config``: :data:`EVAL_CONFIG_KEYS`), the backends
(``--aggregator``: :func:`parse_backend`), the episodes to run (:class:`EpisodeTask`: policy ×
backend × seed) and :func:`make_plan`, which checks every input before any episode runs: the
``--env`` (read by :func:`fedsel_env.config.resolve_env`), overrides, seeds, backends and policies
(agents built once, saved models checked against the env; the env takes the PCA size the models
were trained with). Bad input raises ``ValueError`` naming what was wrong and what fits. The env the
plan is checked in (:attr:`EvalPlan.probe`, the first backend's) serves that backend's episodes in this
process (``fedsel_eval.executors``).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

import agents
from agents.training.atomic import jsonable
from fedsel_env.config import make_config, read_yaml, resolve_env
from fedsel_env.env import FedSelectEnv
from fedsel_env.sim.aggregators import AGGREGATORS, aggregator_factory, make_aggregator

from .params import label as _label
from .params import parse_params
from .policies import PolicySpec, check_model_fits, hand_written_agents, parse_policy

#: Version of the run-folder layout (stored in config.json by :meth:`EvalPlan.record`).
FORMAT_VERSION = 1


@dataclass(frozen=True)
class BackendSpec:
    """One aggregation backend of the evaluation: ``label`` (unique), registry ``name``, ``params``."""

    label: str
    name: str
    params: Dict[str, Any] = field(default_factory=dict)


def parse_backend(text: str, extra_params: Optional[Mapping[str, Any]] = None) -> BackendSpec:
    """Read an ``--aggregator`` value ``NAME[:KEY=VALUE,...]`` (``qfedavg:q=1``; NAME may be an import path,
    ``my_pkg.aggs:Median:k=2``), its parameters' names checked (:func:`make_plan` has their values checked
    by the backend itself before any episode runs: :func:`check_backend`).

    :param extra_params: more parameters (``--aggregator-param``), merged over those in ``text``.
    :raises ValueError: for an unknown backend (listing the registered ones) or an unknown parameter.
    """
    name, params_text = AGGREGATORS.split(text)
    params = parse_params(params_text, f"aggregator {name!r}")
    params.update(extra_params or {})
    aggregator_factory(name, params)  # unknown name: lists the registered backends; unknown parameter names
    shown = ",".join(f"{k}={v}" for k, v in params.items())
    return BackendSpec(label=_label(name, shown), name=name, params=params)


def check_backend(backend: BackendSpec) -> None:
    """Have the backend check its parameters' values (its constructor does), for a backend that no env of this
    process builds before its episodes run. :raises ValueError: naming the bad value."""
    try:
        make_aggregator(backend.name, backend.params)
    except TypeError as e:
        raise ValueError(f"bad parameters {sorted(backend.params)} for aggregator {backend.name!r}: {e}") from None


@dataclass(frozen=True)
class EpisodeTask:
    """One episode to run: a policy, a backend and a seed."""

    policy: PolicySpec
    backend: BackendSpec
    seed: int

    @property
    def key(self) -> str:
        """The episode's identity in ``episodes.jsonl``."""
        return episode_key(self.policy.label, self.backend.label, self.seed)


def episode_key(policy: str, backend: str, seed: int) -> str:
    """``"<policy>|<backend>|<seed>"``."""
    return f"{policy}|{backend}|{seed}"


@dataclass
class EvalPlan:
    """Everything an evaluation runs: the env config, the policies, the backends and the seeds.

    :param env_config: the complete, validated env config (Dict observations; the aggregator fields
        are those of the first backend — each backend's episodes use :meth:`env_config_for`).
    :param env_name: the ``--env`` it came from (for titles).
    :param notes: remarks for the user (skipped agents, models trained on another federation).
    :param probe: the env the plan was checked in, of the first backend's config (not part of the record).
    """

    env_config: Dict[str, Any]
    policies: List[PolicySpec]
    backends: List[BackendSpec]
    seeds: List[int]
    env_name: str = "default"
    notes: List[str] = field(default_factory=list)
    probe: Any = field(default=None, repr=False, compare=False)

    def env_config_for(self, backend: BackendSpec) -> Dict[str, Any]:
        """The env config of ``backend``'s episodes."""
        cfg = json.loads(json.dumps(self.env_config))
        cfg["aggregator"], cfg["aggregator_params"] = backend.name, dict(backend.params)
        return cfg

    def tasks(self) -> List[EpisodeTask]:
        """Every episode, policy by policy, backend by backend, seed by seed."""
        return [EpisodeTask(p, b, s) for p in self.policies for b in self.backends for s in self.seeds]

    def series(self) -> List[Tuple[str, str]]:
        """The (policy, backend) pairs the summary has a row for, in order."""
        return [(p.label, b.label) for p in self.policies for b in self.backends]

    def record(self) -> Dict[str, Any]:
        """The resolved evaluation as stored in ``config.json`` (JSON types only)."""
        return jsonable({"format": FORMAT_VERSION, "env": self.env_name, "env_config": self.env_config,
                         "policies": [p.describe() for p in self.policies],
                         "backends": [asdict(b) for b in self.backends], "seeds": list(self.seeds)})


#: Keys of an eval config file (``--config``): the command-line options of the same names.
EVAL_CONFIG_KEYS = ("env", "env_kwargs", "policy", "aggregator", "aggregator_param", "seeds", "rounds",
                    "target", "name", "reference")


def load_eval_config(path: Union[str, Path]) -> Dict[str, Any]:
    """Read an eval config file: a YAML mapping of :data:`EVAL_CONFIG_KEYS`.

    ``env`` is a preset / env id / env YAML path or a mapping of env-config fields; ``policy`` and
    ``aggregator`` a string or a list of them (the ``--policy`` / ``--aggregator`` syntax);
    ``env_kwargs`` and ``aggregator_param`` mappings; ``seeds`` an integer list.

    :raises ValueError: for a missing file, a non-mapping, or an unknown key (listing the allowed ones).
    """
    p = Path(path)
    data = read_yaml(p, "eval config file") or {}  # ValueError naming the file: missing, not UTF-8, bad YAML
    if not isinstance(data, dict):
        raise ValueError(f"eval config file {str(p)!r} must hold a mapping of {list(EVAL_CONFIG_KEYS)}")
    unknown = sorted(set(data) - set(EVAL_CONFIG_KEYS))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in eval config {str(p)!r}; allowed: {list(EVAL_CONFIG_KEYS)}")
    for key in ("policy", "aggregator"):
        if isinstance(data.get(key), str):
            data[key] = [data[key]]
    for key in ("policy", "aggregator", "seeds"):
        if key in data and not isinstance(data[key], list):
            raise ValueError(f"key {key!r} of eval config {str(p)!r} must be a list, got {data[key]!r}")
    for key in ("env_kwargs", "aggregator_param"):
        if key in data and not isinstance(data[key], dict):
            raise ValueError(f"key {key!r} of eval config {str(p)!r} must be a mapping, got {data[key]!r}")
    return data


def make_plan(env: Union[str, Mapping[str, Any]] = "default", policies: Sequence[str] = (),
              aggregators: Sequence[str] = (), aggregator_params: Optional[Mapping[str, Any]] = None,
              seeds: Sequence[int] = (0, 1, 2), rounds: Optional[int] = None, target: Optional[float] = None,
              env_overrides: Optional[Mapping[str, Any]] = None, env_name: Optional[str] = None) -> EvalPlan:
    """Check every input and resolve the evaluation.

    :param env: a preset name, an env id (``fedsel/FedSelect-Tiny-v0``), a YAML env-config path, or a
        mapping of env-config fields (with an optional ``preset``).
    :param policies: ``--policy`` values (:func:`parse_policy`); ``all`` = every hand-written agent
        acting in the env's action mode; empty = ``all``.
    :param aggregators: ``--aggregator`` values (:func:`parse_backend`); empty = the env config's.
    :param aggregator_params: parameters of the (single) aggregator (``--aggregator-param``).
    :param seeds: episode seeds (distinct integers >= 0).
    :param rounds: the round budget (``max_rounds``); None = the config's.
    :param target: the target accuracy Ω (``target_accuracy``); None = the config's.
    :param env_overrides: more env-config fields.
    :param env_name: what to call the env in titles (default: ``env`` when it is a string).
    :raises ValueError: naming the bad input and what fits.
    """
    preset, overrides = resolve_env(env)
    overrides.update(env_overrides or {})
    if rounds is not None:
        overrides["max_rounds"] = rounds
    if target is not None:
        overrides["target_accuracy"] = target
    # A model saved without env_config.yaml (rl-zoo3's, a user's script's) was trained in the env as given here
    as_given = make_config(overrides, preset=preset)
    # Hand-written agents read the Dict observation; a trained model gets its flat view from it.
    overrides["observation"] = "dict"
    adopted = _adopt_model_observation(policies, overrides, preset, as_given)
    cfg = make_config(overrides, preset=preset)

    seeds = list(seeds)
    if not seeds or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0 for s in seeds):
        raise ValueError(f"--seeds {seeds!r} is invalid: expected one or more integers >= 0")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {seeds!r} is invalid: a seed is repeated")
    seeds = [int(s) for s in seeds]

    extra = dict(aggregator_params or {})
    if extra and len(aggregators) > 1:
        raise ValueError("--aggregator-param applies to a single --aggregator; to compare several backends "
                         "give each its parameters as NAME:KEY=VALUE,... (e.g. --aggregator qfedavg:q=1)")
    if not aggregators:
        backends = [parse_backend(cfg["aggregator"], {**cfg["aggregator_params"], **extra})]
    else:
        backends = [parse_backend(a, extra) for a in aggregators]
    _unique([b.label for b in backends], "--aggregator")

    name = env_name or (env if isinstance(env, str) else "custom")
    plan = EvalPlan(env_config=cfg, policies=[], backends=backends, seeds=seeds, env_name=name)
    # the first backend is built (and its parameters checked) by the env the plan is checked in, which serves
    # its episodes in this process; the others check theirs now, before any episode runs
    plan.probe = probe = FedSelectEnv(config=plan.env_config_for(backends[0]))
    for b in backends[1:]:
        check_backend(b)
    spec = probe.selection_spec
    plan.notes += adopted
    for text in (list(policies) or ["all"]):
        if text.strip() == "all":
            names, skipped = hand_written_agents(spec)
            plan.policies += [PolicySpec(label=n, kind="agent", source=n) for n in names]
            plan.notes += [f"agent {n!r} left out of 'all': {why}" for n, why in skipped.items()]
            continue
        p = parse_policy(text, as_given)
        if p.kind == "agent":
            agents.make(p.source, spec, seed=0, **p.params)  # bad parameters / unsupported mode fail now
        else:
            differs = check_model_fits(p, probe)
            if differs:
                plan.notes.append(f"model {p.label!r} was trained on an env config that differs from the "
                                  f"evaluation's in: {', '.join(differs)}")
        plan.policies.append(p)
    if not plan.policies:
        raise ValueError(f"no policy to evaluate: no registered agent acts in action_mode {cfg['action_mode']!r}")
    _unique([p.label for p in plan.policies], "--policy",
            hint="name them apart with LABEL=, e.g. --policy fast=rbcsf:v=50 --policy fair=rbcsf:v=1")
    return plan


#: env-config fields that set the size of a trained model's observation without changing the federation
OBSERVATION_FIELDS = ("pca_components",)


def _adopt_model_observation(policies: Sequence[str], overrides: Dict[str, Any], preset: Optional[str],
                             as_given: Optional[Mapping[str, Any]] = None) -> List[str]:
    """Give the evaluation env the PCA size the saved models were trained with, unless the user set it.

    The PCA coordinates are the env's side of a FAVOR model's input: a model trained with
    ``pca_components: 5`` can only act in an env that projects onto 5 components. The hand-written agents
    read the same Dict observation at any size. When every model agrees on a field the user did not set,
    the evaluation env takes it (and says so in the notes); when they disagree, :func:`check_model_fits`
    names the model that does not fit.
    """
    notes: List[str] = []
    models = [parse_policy(t, as_given) for t in policies if t.strip() != "all"]
    configs = [make_config(p.train_config or {}) for p in models if p.kind == "model"]
    base = make_config({k: v for k, v in overrides.items() if k not in OBSERVATION_FIELDS}, preset=preset)
    for key in OBSERVATION_FIELDS:
        values = {json.dumps(c[key]) for c in configs}
        if key in overrides or len(values) != 1:
            continue
        value = json.loads(values.pop())
        if value != base[key]:
            overrides[key] = value
            notes.append(f"{key} = {value!r} in the evaluation env, as the saved model(s) were trained with "
                         f"(set it with --env-kwargs {key}=... to override)")
    return notes


def _unique(labels: Sequence[str], what: str, hint: str = "") -> None:
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise ValueError(f"{what}: {dup} given more than once" + (f"; {hint}" if hint else ""))


__all__ = ["EVAL_CONFIG_KEYS", "BackendSpec", "EpisodeTask", "EvalPlan", "check_backend", "episode_key",
           "load_eval_config", "make_plan", "parse_backend"]
