"""Head-to-head evaluation of client-selection policies (SPEC §1, §5): the library behind ``evaluate.py``.

The pipeline, top to bottom:

1. **Plan** (:func:`make_plan`): one env config (a preset, an env id or a YAML file, with overrides),
   the policies (registered agents with parameters, or saved SB3 models), the aggregation backends and
   the seeds. Everything is checked here, before any episode runs; bad input raises ``ValueError``
   naming what was wrong and what fits.
2. **Episodes** (:func:`run_episode`): a policy acts for one episode from ``env.reset(seed=s)``. Every
   policy is a fresh object with SB3's ``predict`` and its own generator seeded from ``s``
   (:func:`agent_seed`), so all policies see the same partitions, model initialisations and system
   draws for the same seed (common random numbers) and a re-run gives the same numbers bit for bit.
   Hand-written agents and trained models go through the same loop.
3. **Run folder** (:class:`RunFolder`): ``config.json`` (the resolved evaluation, compared on
   ``--resume``), ``episodes.jsonl`` (one line per finished episode, appended and fsync'ed as it
   finishes), ``summary.csv`` / ``summary.md``, PNG plots. Every file but the JSONL is written whole
   through a temp file and ``os.replace``.
4. **Summary** (:func:`summarise`): the per-episode metrics of SPEC §5 (computed with
   :mod:`fedsel_env.metrics`), then mean ± standard deviation over seeds.
5. **Plots** (:func:`plot_all`): accuracy against round and against simulated time (mean with a
   ±1 std band), per-client accuracy distributions, participation per client, round time per round.

Episodes run in this process or in ``workers`` worker processes (forkserver or spawn, one torch
thread each); the records are the same either way.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import re
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .config import ENV_IDS, PRESETS, load_config, make_config

#: Files of a run folder.
CONFIG_FILE = "config.json"
EPISODES_FILE = "episodes.jsonl"
SUMMARY_CSV = "summary.csv"
SUMMARY_MD = "summary.md"
PLOT_FILES = ("accuracy_vs_round.png", "accuracy_vs_time.png", "client_accuracy.png",
              "participation.png", "round_time.png")
#: Version of the run-folder layout (stored in config.json).
FORMAT_VERSION = 1
#: SB3 algorithms (train_agent.py's ``--algo``) whose models are deployed as FAVOR's top-K agent.
DQN_FAMILY = ("favor", "dqn")
#: Agents that live in modules ``agents/__init__`` does not import (they need Stable-Baselines3).
OPTIONAL_AGENT_MODULES = {"favor": "agents.favor"}

#: Per-episode metrics (SPEC §5): key → (Markdown header, number format). The summary has
#: ``<key>_mean`` and ``<key>_std`` for each; the Markdown table shows them as "mean ± std".
METRICS: Dict[str, Tuple[str, str]] = {
    "rounds_to_target": ("rounds to Ω", ".1f"),
    "time_to_target": ("time to Ω (s)", ".0f"),
    "final_accuracy": ("final acc", ".3f"),
    "best_accuracy": ("best acc", ".3f"),
    "acc_mean": ("client acc mean", ".3f"),
    "acc_std": ("client acc std", ".3f"),
    "acc_var": ("client acc var", ".4f"),
    "acc_var_1e4": ("var ×10⁴", ".0f"),
    "acc_worst10": ("worst 10%", ".3f"),
    "acc_best10": ("best 10%", ".3f"),
    "jain_index": ("Jain", ".3f"),
    "min_participation_rate": ("min part. rate", ".3f"),
    "mean_round_time": ("round time (s)", ".2f"),
    "improved_fraction": ("improved", ".2f"),
    "updates_sent": ("updates", ".0f"),
    "rounds": ("rounds", ".1f"),
    "sim_time": ("sim. time (s)", ".0f"),
    "episode_return": ("return", ".2f"),
    # robustness (docs/ROBUSTNESS.md): meaningful when the env config has an ``adversary``
    "attacker_selected_rate": ("attacker rounds", ".2f"),
    "attacker_response_share": ("attacker share", ".2f"),
    "honest_acc_mean": ("honest acc", ".3f"),
    "dropouts": ("drop-outs", ".0f"),
    "late_arrivals": ("late", ".0f"),
}
#: The metrics the Markdown table (and the printed table) shows, in order; the CSV has all of them.
TABLE_METRICS = ("rounds_to_target", "time_to_target", "final_accuracy", "best_accuracy", "acc_mean",
                 "acc_std", "acc_var_1e4", "acc_worst10", "acc_best10", "jain_index",
                 "min_participation_rate", "mean_round_time", "improved_fraction", "updates_sent")


# =============================================================================================== parsing
def split_items(text: str) -> List[str]:
    """Split ``"a=1,b=[1, 2],c=x"`` at the commas outside brackets."""
    items, depth, cur = [], 0, []
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    items.append("".join(cur))
    return [i.strip() for i in items if i.strip()]


def parse_params(items: Union[str, Sequence[str]], what: str) -> Dict[str, Any]:
    """``"v=10,beta=0.1"`` (or ``["v=10", "beta=0.1"]``) → ``{"v": 10, "beta": 0.1}``, values read as YAML.

    :param what: what the parameters are for, named in errors.
    :raises ValueError: for an item that is not ``KEY=VALUE`` or a key given twice.
    """
    import yaml

    if isinstance(items, str):
        items = split_items(items)
    out: Dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"bad parameter {item!r} for {what}: expected KEY=VALUE with KEY a name "
                             f"(e.g. 'v=10,beta=0.1')")
        if key in out:
            raise ValueError(f"parameter {key!r} given twice for {what}")
        try:
            out[key] = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError as e:
            raise ValueError(f"bad value {value!r} of parameter {key!r} for {what}: {e}") from None
    return out


def _label(name: str, params_text: str) -> str:
    return f"{name}({params_text})" if params_text else name


# ============================================================================================== policies
@dataclass(frozen=True)
class PolicySpec:
    """One policy of the evaluation.

    :param label: its name in tables, plots and episode keys (unique within an evaluation).
    :param kind: ``"agent"`` (a registered agent) or ``"model"`` (a saved SB3 model).
    :param source: the agent's registry name, or the model's ``.zip`` path.
    :param params: the agent's keyword parameters.
    :param algo: for a model, the SB3 algorithm it was trained with (train_agent.py's ``--algo``).
    :param train_config: for a model, the env config it was trained in (``env_config.yaml``).
    :param sha256: for a model, the hash of its file (a retrained model is a different policy).
    """

    label: str
    kind: str
    source: str
    params: Dict[str, Any] = field(default_factory=dict)
    algo: Optional[str] = None
    train_config: Optional[Dict[str, Any]] = None
    sha256: Optional[str] = None

    def describe(self) -> Dict[str, Any]:
        """What identifies the policy in ``config.json``."""
        d = {"label": self.label, "kind": self.kind, "source": self.source, "params": self.params}
        if self.kind == "model":
            d.update(algo=self.algo, sha256=self.sha256)
        return d


def _ensure_agent_registered(name: str) -> None:
    import importlib

    import agents

    if name not in agents.AGENTS and name in OPTIONAL_AGENT_MODULES:
        importlib.import_module(OPTIONAL_AGENT_MODULES[name])


def _looks_like_path(source: str) -> bool:
    return source.endswith(".zip") or "/" in source or os.sep in source or Path(source).exists()


def parse_policy(text: str) -> PolicySpec:
    """Read a ``--policy`` value: ``[LABEL=]SOURCE[:KEY=VALUE,...]``.

    SOURCE is a registered agent name (``afl``, ``rbcsf:v=10,beta=0.1``) or the path of a saved SB3
    model: a ``.zip`` or a train_agent.py run folder (its ``model.zip``). LABEL names the policy in
    the outputs (default: the agent name with its parameters, or ``<algo>:<run folder>``).

    :raises ValueError: for an unknown agent (listing the registered ones), a bad parameter, or a
        missing model.
    """
    import agents

    m = re.fullmatch(r"(?:(?P<label>[\w.+-]+)=)?(?P<source>[^:]+?)(?::(?P<params>.*))?", text.strip())
    if not m or not m.group("source").strip():
        raise ValueError(f"bad --policy {text!r}: expected [LABEL=]AGENT[:KEY=VALUE,...] or [LABEL=]MODEL_PATH")
    source, params_text = m.group("source").strip(), (m.group("params") or "").strip()
    _ensure_agent_registered(source)
    if source in agents.AGENTS:
        params = parse_params(params_text, f"agent {source!r}")
        return PolicySpec(label=m.group("label") or _label(source, params_text), kind="agent",
                          source=source, params=params)
    if _looks_like_path(source):
        if params_text:
            raise ValueError(f"bad --policy {text!r}: a saved model takes no parameters")
        zip_path, algo, train_config = resolve_model(source)
        tag = zip_path.parent.name if zip_path.name == "model.zip" else zip_path.stem
        return PolicySpec(label=m.group("label") or f"{algo}:{tag}", kind="model", source=str(zip_path.resolve()),
                          algo=algo, train_config=train_config, sha256=_sha256(zip_path))
    raise ValueError(f"unknown policy {source!r}: give a registered agent {sorted(agents.AGENTS)} "
                     f"(optional: {sorted(set(OPTIONAL_AGENT_MODULES) - set(agents.AGENTS))}), "
                     f"'all' for every hand-written agent, or the path of a saved model (.zip or a "
                     f"train_agent.py run folder)")


def resolve_model(path: Union[str, Path]) -> Tuple[Path, str, Dict[str, Any]]:
    """A model path → (its ``.zip``, the algorithm that trained it, the env config it was trained in).

    ``path`` is a ``.zip`` (the suffix may be left off) or a train_agent.py run folder (``model.zip``
    in it). The algorithm comes from the run's ``args.yaml``; without one, a DQN-family model (the
    policy class stored in the zip) is taken as FAVOR's. The env config is ``env_config.yaml`` in the
    model's folder or the one above (train_agent.py writes it).

    :raises ValueError: for a missing model or env config, or an algorithm that cannot be told.
    """
    import yaml

    p = Path(path)
    if p.is_dir():
        zip_path = p / "model.zip"
        if not zip_path.is_file():
            found = sorted(str(z.relative_to(p)) for z in p.rglob("*.zip"))
            raise ValueError(f"model folder {str(p)!r} has no model.zip (train_agent.py's final model); "
                             f"models in it: {found or 'none'} — pass one of them as a path")
    elif p.is_file() and p.suffix == ".zip":
        zip_path = p
    elif p.with_name(p.name + ".zip").is_file():
        zip_path = p.with_name(p.name + ".zip")
    else:
        raise ValueError(f"model path {str(p)!r} does not exist (expected a saved SB3 model .zip or a "
                         f"train_agent.py run folder with model.zip)")
    algo = None
    for folder in (zip_path.parent, zip_path.parent.parent):
        if (folder / "args.yaml").is_file():
            with open(folder / "args.yaml") as f:
                algo = (yaml.safe_load(f) or {}).get("algo")
            break
    if algo is None:
        try:
            with zipfile.ZipFile(zip_path) as z:
                data = json.loads(z.read("data"))
            module = str(data.get("policy_class", {}).get("__module__", ""))
        except (zipfile.BadZipFile, KeyError, json.JSONDecodeError) as e:
            raise ValueError(f"{str(zip_path)!r} is not a saved Stable-Baselines3 model: {e}") from None
        if ".dqn." not in module:
            raise ValueError(f"cannot tell which algorithm trained {str(zip_path)!r}: no args.yaml beside it "
                             f"(train_agent.py writes one with 'algo') and its policy ({module!r}) is not DQN's")
        algo = "favor"
    from agents.favor import read_env_config

    return zip_path, str(algo), read_env_config(zip_path)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def hand_written_agents(spec: Any) -> Tuple[List[str], Dict[str, str]]:
    """The registered agents that act in ``spec``'s action mode with their default parameters.

    :return: (names, sorted; {skipped name: why}) — e.g. ``favor`` needs a model.
    """
    import agents

    names, skipped = [], {}
    for name in sorted(agents.AGENTS):
        cls = agents.AGENTS[name]
        if spec.action_mode not in getattr(cls, "supported_modes", ()):
            skipped[name] = f"does not act in action_mode {spec.action_mode!r}"
            continue
        try:
            agents.make(name, spec, seed=0)
        except ValueError as e:
            skipped[name] = f"needs parameters ({e})"
            continue
        names.append(name)
    return names, skipped


class ModelPolicy:
    """A saved SB3 policy model (PPO, A2C, ...) acting in the env's own action mode.

    The evaluation env gives Dict observations; a model trained on the flat observation gets the
    same flat vector the env would build (``flat_parts`` of its training config).

    :param model: a loaded SB3 model.
    :param train_config: the env config it was trained in.
    """

    def __init__(self, model: Any, train_config: Mapping[str, Any]) -> None:
        self.model = model
        self.flat_parts = list(train_config.get("flat_parts", ["weights"])) \
            if train_config.get("observation") == "flat" else None

    def predict(self, observation: Dict[str, np.ndarray], state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> Tuple[np.ndarray, Any]:
        """SB3's ``predict`` on the observation in the form the model was trained on."""
        if self.flat_parts is not None:
            from agents.favor import flatten_observation

            observation = flatten_observation(observation, self.flat_parts)
        return self.model.predict(observation, state=state, episode_start=episode_start,
                                  deterministic=deterministic)


_MODEL_CACHE: Dict[Tuple[str, str], Any] = {}


def _load_model(p: PolicySpec) -> Any:
    """The SB3 model of a model policy, loaded once per process."""
    key = (p.source, p.sha256 or "")
    if key not in _MODEL_CACHE:
        if p.algo in DQN_FAMILY:
            from agents.favor import DoubleDQN

            model = DoubleDQN.load(p.source, device="cpu")
        else:
            import stable_baselines3

            cls = getattr(stable_baselines3, str(p.algo).upper(), None)
            if cls is None:
                raise ValueError(f"model {p.source!r}: unknown algorithm {p.algo!r}; "
                                 f"known: {list(DQN_FAMILY)} and Stable-Baselines3's (ppo, a2c, ...)")
            model = cls.load(p.source, device="cpu")
        _MODEL_CACHE.clear()  # keep one model: an evaluation holds few, and they can be large
        _MODEL_CACHE[key] = model
    return _MODEL_CACHE[key]


def agent_seed(seed: int) -> int:
    """The seed of a policy's own generator in the episode of ``seed``: the same for every policy
    (common random numbers), and a stream independent of the env's ``reset(seed)``."""
    return int(np.random.SeedSequence([int(seed), 0x5E1EC7]).generate_state(1)[0])


def build_policy(p: PolicySpec, spec: Any, seed: int) -> Any:
    """A fresh policy object for one episode: anything with SB3's ``predict``.

    Registered agents come from ``agents.make``; a DQN-family model becomes FAVOR's deployed top-K
    agent (``agents.favor.FavorAgent``); any other SB3 model acts through :class:`ModelPolicy`.
    """
    import agents

    if p.kind == "agent":
        _ensure_agent_registered(p.source)
        return agents.make(p.source, spec, seed=agent_seed(seed), **p.params)
    model = _load_model(p)
    if p.algo in DQN_FAMILY:
        _ensure_agent_registered("favor")
        return agents.make("favor", spec, seed=agent_seed(seed), model=model,
                           flat_parts=(p.train_config or {}).get("flat_parts", ["weights"]))
    return ModelPolicy(model, p.train_config or {})


def check_model_fits(p: PolicySpec, env: Any) -> List[str]:
    """Check that a model policy can act in the evaluation env; return notes on how its training env differs.

    :raises ValueError: when it cannot act here (wrong number of clients, observation or action space).
    """
    policy = build_policy(p, env.selection_spec, 0)  # FavorAgent checks its input and output sizes
    if isinstance(policy, ModelPolicy):
        model = policy.model
        if model.action_space != env.action_space:
            raise ValueError(f"model {p.source!r} acts in {model.action_space} but the evaluation env's "
                             f"action space is {env.action_space} (action_mode "
                             f"{env.config['action_mode']!r}): evaluate it in the mode it was trained in "
                             f"(its action_mode {(p.train_config or {}).get('action_mode')!r})")
        obs, _ = env.reset(seed=0)
        if policy.flat_parts is not None:
            from agents.favor import flatten_observation

            shape = flatten_observation(obs, policy.flat_parts).shape
            ok = model.observation_space.shape == shape
        else:
            ok = all(model.observation_space[k].shape == np.asarray(v).shape for k, v in obs.items())
        if not ok:
            train = make_config(p.train_config or {})
            shaping = ("num_clients", "pca_components", "model", "dataset")
            differ = [f"{k}={train[k]!r} (here {env.config[k]!r})" for k in shaping if train[k] != env.config[k]]
            raise ValueError(f"model {p.source!r} expects observations {model.observation_space}, which this "
                             f"evaluation env does not give: it was trained with "
                             f"{', '.join(differ) or 'a different federation'}; evaluate it in an env with "
                             f"those values (--env-kwargs KEY=VALUE)")
    ignore = {"action_mode", "observation", "flat_parts", "aggregator", "aggregator_params", "one_mode_step"}
    train = make_config(p.train_config or {})
    return [k for k in sorted(train) if k not in ignore and train[k] != env.config.get(k)]


# ============================================================================================== backends
@dataclass(frozen=True)
class BackendSpec:
    """One aggregation backend of the evaluation: ``label`` (unique), registry ``name``, ``params``."""

    label: str
    name: str
    params: Dict[str, Any] = field(default_factory=dict)


def parse_backend(text: str, extra_params: Optional[Mapping[str, Any]] = None) -> BackendSpec:
    """Read an ``--aggregator`` value ``NAME[:KEY=VALUE,...]`` (``qfedavg:q=1``) and build it once to check it.

    :param extra_params: more parameters (``--aggregator-param``), merged over those in ``text``.
    :raises ValueError: for an unknown backend (listing the registered ones) or a bad parameter.
    """
    from .aggregators import AGGREGATORS, make_aggregator

    name, _, params_text = text.strip().partition(":")
    name = name.strip()
    params = parse_params(params_text, f"aggregator {name!r}")
    params.update(extra_params or {})
    AGGREGATORS.lookup(name)  # unknown name: lists the registered backends
    try:
        make_aggregator(name, params)
    except TypeError as e:
        raise ValueError(f"bad parameters {sorted(params)} for aggregator {name!r}: {e}") from None
    shown = ",".join(f"{k}={v}" for k, v in params.items())
    return BackendSpec(label=_label(name, shown), name=name, params=params)


# ================================================================================================== plan
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
    """

    env_config: Dict[str, Any]
    policies: List[PolicySpec]
    backends: List[BackendSpec]
    seeds: List[int]
    env_name: str = "default"
    notes: List[str] = field(default_factory=list)

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
        return _jsonable({"format": FORMAT_VERSION, "env": self.env_name, "env_config": self.env_config,
                          "policies": [p.describe() for p in self.policies],
                          "backends": [asdict(b) for b in self.backends], "seeds": list(self.seeds)})


def resolve_env(env: Union[str, Mapping[str, Any]]) -> Tuple[Optional[str], Dict[str, Any]]:
    """``--env`` → (preset name or None, the config overrides it carries).

    :param env: a preset name, an env id, a YAML env-config path, or a mapping of env-config fields
        (which may name a ``preset``), as an eval config file may give it.
    :raises ValueError: for an unknown preset / env id or a missing YAML file, listing what fits.
    """
    by_id = {v: k for k, v in ENV_IDS.items()}
    if isinstance(env, Mapping):
        overrides = dict(env)
        preset = overrides.pop("preset", None)
        return by_id.get(preset, preset), overrides
    if not isinstance(env, str):
        raise ValueError(f"env {env!r} is invalid: expected a preset name, an env id, a YAML path or a mapping")
    if env in PRESETS:
        return env, {}
    if env in by_id:
        return by_id[env], {}
    if env.endswith((".yml", ".yaml")) or os.sep in env or "/" in env and not env.startswith("fedsel/") \
            or Path(env).is_file():
        overrides = load_config(env)  # ValueError when missing
        preset = overrides.pop("preset", None)
        return by_id.get(preset, preset), overrides
    raise ValueError(f"unknown --env {env!r}: give a preset {sorted(PRESETS)}, an env id {sorted(by_id)}, "
                     f"or the path of a YAML env config")


#: Keys of an eval config file (``--config``): the command-line options of the same names.
EVAL_CONFIG_KEYS = ("env", "env_kwargs", "policy", "aggregator", "aggregator_param", "seeds", "rounds",
                    "target", "name")


def load_eval_config(path: Union[str, Path]) -> Dict[str, Any]:
    """Read an eval config file: a YAML mapping of :data:`EVAL_CONFIG_KEYS`.

    ``env`` is a preset / env id / env YAML path or a mapping of env-config fields; ``policy`` and
    ``aggregator`` a string or a list of them (the ``--policy`` / ``--aggregator`` syntax);
    ``env_kwargs`` and ``aggregator_param`` mappings; ``seeds`` an integer list.

    :raises ValueError: for a missing file, a non-mapping, or an unknown key (listing the allowed ones).
    """
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"eval config file {str(p)!r} does not exist")
    with open(p) as f:
        data = yaml.safe_load(f) or {}
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
    # Hand-written agents read the Dict observation; a trained model gets its flat view from it.
    overrides["observation"] = "dict"
    adopted = _adopt_model_observation(policies, overrides, preset)
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

    from .env import FedSelectEnv

    probe = FedSelectEnv(config=json.loads(json.dumps(_jsonable(cfg))))
    spec = probe.selection_spec
    _ENV_CACHE.clear()
    _ENV_CACHE[json.dumps(_jsonable(cfg), sort_keys=True)] = probe  # the first backend's episodes reuse it
    name = env_name or (env if isinstance(env, str) else "custom")
    plan = EvalPlan(env_config=cfg, policies=[], backends=backends, seeds=seeds, env_name=name)
    plan.notes += adopted
    for text in (list(policies) or ["all"]):
        if text.strip() == "all":
            names, skipped = hand_written_agents(spec)
            plan.policies += [PolicySpec(label=n, kind="agent", source=n) for n in names]
            plan.notes += [f"agent {n!r} left out of 'all': {why}" for n, why in skipped.items()]
            continue
        p = parse_policy(text)
        if p.kind == "agent":
            import agents

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


def _adopt_model_observation(policies: Sequence[str], overrides: Dict[str, Any], preset: Optional[str]) -> List[str]:
    """Give the evaluation env the PCA size the saved models were trained with, unless the user set it.

    The PCA coordinates are the env's side of a FAVOR model's input: a model trained with
    ``pca_components: 5`` can only act in an env that projects onto 5 components. The hand-written agents
    read the same Dict observation at any size. When every model agrees on a field the user did not set,
    the evaluation env takes it (and says so in the notes); when they disagree, :func:`check_model_fits`
    names the model that does not fit.
    """
    notes: List[str] = []
    models = [parse_policy(t) for t in policies if t.strip() != "all"]
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


# =============================================================================================== episodes
def run_episode(env: Any, policy: Any, seed: int) -> Dict[str, Any]:
    """Run ``policy`` for one episode of ``env`` from ``reset(seed=seed)``.

    :return: the episode record: ``metrics`` (SPEC §5), ``curves`` (per round: accuracy and clock
        from round 0, round time, fraction of improved participants, responders), ``clients``
        (final per-client accuracies, participation counts, sample counts) and bookkeeping.
    """
    from . import metrics

    start = time.perf_counter()
    obs, info = env.reset(seed=seed)
    num_samples = np.asarray(info["num_samples"])
    accuracy, clock, loss = [float(info["accuracy"])], [0.0], [float(info["loss"])]
    round_time, improved, responders = [], [], []
    episode_return, terminated, truncated = 0.0, False, False
    while not (terminated or truncated):
        action, _ = policy.predict(obs, deterministic=True)
        obs, reward, terminated, truncated, info = env.step(action)
        episode_return += float(reward)
        accuracy.append(float(info["accuracy"]))
        loss.append(float(info["loss"]))
        clock.append(float(info["clock"]))
        round_time.append(float(info["round_time"]))
        improved.append(float(info["improved_fraction"]))
        responders.append(int(len(info["responders"])))
    rounds = len(round_time)
    participation = np.asarray(info["participation"], dtype=np.int64)
    client_acc = np.asarray(info["client_accuracies"], dtype=np.float64)
    m: Dict[str, Any] = {
        "rounds_to_target": float(rounds) if terminated else math.nan,
        "time_to_target": clock[-1] if terminated else math.nan,
        "final_accuracy": accuracy[-1],
        "best_accuracy": float(max(accuracy[1:])),
        **metrics.client_accuracy_summary(client_acc),
        **metrics.participation_summary(participation, rounds),
        "mean_round_time": float(np.mean(round_time)),
        # a round nobody responded to has no participants to improve (NaN): left out of the mean
        "improved_fraction": float(np.nanmean(improved)) if np.isfinite(improved).any() else math.nan,
        "updates_sent": float(info["updates_sent"]),
        "rounds": float(rounds),
        "sim_time": clock[-1],
        "episode_return": episode_return,
        "attacker_selected_rate": float(info.get("attacker_selected_rate", math.nan)),
        "attacker_response_share": float(info.get("attacker_response_share", math.nan)),
        "honest_acc_mean": float(info.get("honest_acc_mean", math.nan)),
        "dropouts": float(info.get("dropouts", 0)),
        "late_arrivals": float(info.get("late_arrivals", 0)),
    }
    return {
        "reached": bool(terminated), "diverged": bool(info["diverged"]), "terminated": bool(terminated),
        "truncated": bool(truncated), "metrics": m,
        "curves": {"accuracy": accuracy, "loss": loss, "clock": clock, "round_time": round_time,
                   "improved_fraction": improved, "responders": responders},
        "clients": {"accuracy": client_acc.tolist(), "participation": participation.tolist(),
                    "num_samples": num_samples.tolist()},
        "profiling_time": float(info["profiling_time"]),
        "wall_time_s": time.perf_counter() - start,
    }


_ENV_CACHE: Dict[str, Any] = {}


def _env_for(config: Mapping[str, Any]) -> Any:
    """One env per config in each process (building the data takes a while); ``reset(seed)`` makes
    each episode independent of the ones before."""
    from .env import FedSelectEnv

    key = json.dumps(_jsonable(config), sort_keys=True)
    if key not in _ENV_CACHE:
        _ENV_CACHE.clear()
        _ENV_CACHE[key] = FedSelectEnv(config=json.loads(key))
    return _ENV_CACHE[key]


def evaluate_task(task: EpisodeTask, env_config: Mapping[str, Any]) -> Dict[str, Any]:
    """Run one task and return its JSON-ready record (the unit of work of a worker process)."""
    env = _env_for(env_config)
    policy = build_policy(task.policy, env.selection_spec, task.seed)
    record = run_episode(env, policy, task.seed)
    head = {"key": task.key, "policy": task.policy.label, "backend": task.backend.label, "seed": task.seed,
            "agent_seed": agent_seed(task.seed)}
    return _jsonable({**head, **record})


def _worker_context(plan: EvalPlan) -> Any:
    """Worker processes never fork this (possibly multi-threaded) process: ``forkserver`` where the
    platform has it — a clean server process imports the simulator once and forks each worker from
    it, so workers start in a fraction of a spawn's time — else ``spawn``."""
    import multiprocessing as mp

    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    preload = ["fedsel_env.evaluation", "fedsel_env.env", "agents"]
    if any(p.kind == "model" or p.source in OPTIONAL_AGENT_MODULES for p in plan.policies):
        preload.append("agents.favor")
    ctx.set_forkserver_preload(preload)
    return ctx


def _init_worker(torch_threads: int) -> None:
    os.environ["OMP_NUM_THREADS"] = str(torch_threads)
    import torch

    torch.set_num_threads(torch_threads)


def run_plan(plan: EvalPlan, run: "RunFolder", workers: int = 1, progress: bool = True,
             torch_threads: int = 1) -> List[Dict[str, Any]]:
    """Run every episode of ``plan`` not yet in ``run``'s ``episodes.jsonl``, appending each as it finishes.

    :param workers: 1 = in this process; more = that many worker processes (:func:`_worker_context`).
    :param progress: show a tqdm bar over the episodes with the current policy and seed.
    :param torch_threads: torch threads per process (1 keeps runs identical across ``workers``).
    :return: all the plan's records (earlier and new), in plan order.
    """
    from tqdm.auto import tqdm

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers = {workers!r} is invalid: expected an integer >= 1")
    done = {r["key"]: r for r in run.read_episodes()}
    tasks = plan.tasks()
    todo = [t for t in tasks if t.key not in done]
    bar = tqdm(total=len(tasks), initial=len(tasks) - len(todo), unit="episode", desc="evaluating",
               disable=not progress, dynamic_ncols=True)

    def finished(record: Dict[str, Any]) -> None:
        run.append_episode(record)
        done[record["key"]] = record
        if workers > 1:  # in this process the bar names the episode being run instead
            bar.set_postfix_str(f"finished {record['policy']} / {record['backend']} seed {record['seed']}",
                                refresh=False)
        bar.update(1)

    try:
        if workers == 1:
            import torch

            threads = torch.get_num_threads()
            torch.set_num_threads(torch_threads)
            try:
                for t in todo:
                    bar.set_postfix_str(f"{t.policy.label} / {t.backend.label} seed {t.seed}")
                    finished(evaluate_task(t, plan.env_config_for(t.backend)))
            finally:
                torch.set_num_threads(threads)
        elif todo:
            from concurrent.futures import ProcessPoolExecutor, as_completed

            with ProcessPoolExecutor(max_workers=min(workers, len(todo)), mp_context=_worker_context(plan),
                                     initializer=_init_worker, initargs=(torch_threads,)) as pool:
                futures = [pool.submit(evaluate_task, t, plan.env_config_for(t.backend)) for t in todo]
                try:
                    for fut in as_completed(futures):
                        finished(fut.result())
                except BaseException:
                    for fut in futures:
                        fut.cancel()
                    raise
    finally:
        bar.close()
    return [done[t.key] for t in tasks]


# =============================================================================================== summary
def summarise(records: Sequence[Mapping[str, Any]], plan: EvalPlan) -> List[Dict[str, Any]]:
    """Mean and standard deviation over seeds of every metric, one row per (policy, backend).

    Rounds and time to reach Ω are averaged over the episodes that reached it (NaN when none did;
    ``reached`` counts them). Standard deviations are over seeds (``ddof=0``, as SB3's ``evaluate_policy``).
    """
    rows = []
    for policy, backend in plan.series():
        eps = [r for r in records if r["policy"] == policy and r["backend"] == backend]
        row: Dict[str, Any] = {"policy": policy, "backend": backend, "episodes": len(eps),
                               "reached": sum(bool(r["reached"]) for r in eps),
                               "diverged": sum(bool(r["diverged"]) for r in eps)}
        for key in METRICS:
            values = np.array([_num(r["metrics"].get(key, math.nan)) for r in eps], dtype=np.float64)
            values = values[np.isfinite(values)]
            row[f"{key}_mean"] = float(values.mean()) if values.size else math.nan
            row[f"{key}_std"] = float(values.std()) if values.size else math.nan
        rows.append(row)
    return rows


def summary_columns() -> List[str]:
    """The columns of ``summary.csv``, in order."""
    cols = ["policy", "backend", "episodes", "reached", "diverged"]
    for key in METRICS:
        cols += [f"{key}_mean", f"{key}_std"]
    return cols


def summary_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """``summary.csv``'s text (NaN written as an empty cell)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=summary_columns(), lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if isinstance(v, float) and not math.isfinite(v) else
                        (repr(v) if isinstance(v, float) else v)) for k, v in row.items()})
    return buf.getvalue()


def _cell(row: Mapping[str, Any], key: str) -> str:
    mean, std = row[f"{key}_mean"], row[f"{key}_std"]
    if not math.isfinite(mean):
        return "—"
    fmt = METRICS[key][1]
    return f"{mean:{fmt}} ± {std:{fmt}}"


def summary_markdown(rows: Sequence[Mapping[str, Any]], plan: EvalPlan) -> str:
    """The summary as a Markdown table (mean ± std over seeds; "—" where Ω was never reached)."""
    cfg = plan.env_config
    head = (f"Evaluation on `{plan.env_name}`: N = {cfg['num_clients']} clients, K = {cfg['clients_per_round']} "
            f"per round ({cfg['action_mode']}), target Ω = {cfg['target_accuracy']}, at most "
            f"{cfg['max_rounds']} rounds, seeds {plan.seeds}. Mean ± std over seeds; rounds and time to Ω over "
            f"the episodes that reached it (\"reached\"); client accuracies are final per-client test accuracies.\n")
    cols = ["policy", "backend", "reached"] + [METRICS[k][0] for k in TABLE_METRICS] + ["diverged"]
    lines = [head, "| " + " | ".join(cols) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(cols) - 3)) + "|"]
    for row in rows:
        cells = [row["policy"], row["backend"], f"{row['reached']}/{row['episodes']}"]
        cells += [_cell(row, k) for k in TABLE_METRICS] + [f"{row['diverged']}/{row['episodes']}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ============================================================================================ run folder
class RunFolder:
    """An evaluation's folder: ``config.json``, ``episodes.jsonl``, summaries and plots.

    :param path: the folder.
    """

    def __init__(self, path: Union[str, Path]) -> None:
        self.path = Path(path)

    @classmethod
    def open(cls, path: Union[str, Path], config: Mapping[str, Any], resume: bool = False,
             overwrite: bool = False) -> "RunFolder":
        """Start a new run folder, or take up an existing one of the same config (``resume``).

        :raises ValueError: when the folder holds an evaluation and neither ``resume`` nor ``overwrite``
            is given, or when ``resume`` meets an evaluation of a different config (naming the differences).
        """
        run = cls(path)
        stored = run.path / CONFIG_FILE
        if overwrite and resume:
            raise ValueError("--resume and --overwrite exclude each other")
        if stored.is_file() and not overwrite:
            if not resume:
                raise ValueError(f"run folder {str(run.path)!r} already holds an evaluation: pass --resume to "
                                 f"finish it (finished episodes are kept), --overwrite to start over, or "
                                 f"another --name / --out")
            with open(stored) as f:
                old = json.load(f)
            # the env's name is only a title: the same config reached as a preset or an env id is the same run
            diffs = config_differences({k: v for k, v in old.items() if k != "env"},
                                       {k: v for k, v in _jsonable(config).items() if k != "env"})
            if diffs:
                raise ValueError(f"--resume: run folder {str(run.path)!r} was made by a different evaluation "
                                 f"({'; '.join(diffs)}); use another --name / --out, or --overwrite to start over")
            return run
        if overwrite:
            for name in (CONFIG_FILE, EPISODES_FILE, SUMMARY_CSV, SUMMARY_MD) + PLOT_FILES:
                (run.path / name).unlink(missing_ok=True)
        run.path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(stored, json.dumps(_jsonable(config), indent=2) + "\n")
        return run

    def read_episodes(self) -> List[Dict[str, Any]]:
        """The finished episodes; a last line cut short by a crash is dropped from the file."""
        path = self.path / EPISODES_FILE
        if not path.is_file():
            return []
        text = path.read_text()
        complete, _, partial = text.rpartition("\n")
        if partial:  # an append interrupted mid-line: keep the complete lines only
            atomic_write_text(path, complete + "\n" if complete else "")
        records, seen = [], set()
        for line in complete.splitlines():
            if line.strip():
                r = json.loads(line)
                if r["key"] not in seen:
                    seen.add(r["key"])
                    records.append(r)
        return records

    def append_episode(self, record: Mapping[str, Any]) -> None:
        """Append one record as a JSON line, flushed and fsync'ed (a crash loses at most this line)."""
        line = json.dumps(_jsonable(record), allow_nan=False)
        with open(self.path / EPISODES_FILE, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def write_summary(self, rows: Sequence[Mapping[str, Any]], plan: EvalPlan) -> str:
        """Write ``summary.csv`` and ``summary.md``; return the Markdown."""
        md = summary_markdown(rows, plan)
        atomic_write_text(self.path / SUMMARY_CSV, summary_csv(rows))
        atomic_write_text(self.path / SUMMARY_MD, md)
        return md


def config_differences(old: Any, new: Any, prefix: str = "") -> List[str]:
    """Where two stored configs differ, as ``"field: old → new"`` strings."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            name = f"{prefix}.{k}" if prefix else str(k)
            if k not in old or k not in new:
                out.append(f"{name}: {'absent' if k not in old else _short(old[k])} → "
                           f"{'absent' if k not in new else _short(new[k])}")
            else:
                out += config_differences(old[k], new[k], name)
        return out
    return [] if old == new else [f"{prefix}: {_short(old)} → {_short(new)}"]


def _short(v: Any) -> str:
    s = json.dumps(v)
    return s if len(s) <= 80 else s[:77] + "..."


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file in the same folder and ``os.replace``."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def _jsonable(x: Any) -> Any:
    """Plain JSON types: numpy scalars and arrays unpacked, tuples as lists, NaN/inf as null."""
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


# ================================================================================================= plots
def _series_label(policy: str, backend: str, plan: EvalPlan) -> str:
    return policy if len(plan.backends) == 1 else f"{policy} / {backend}"


def _held(values: Sequence[Optional[float]], length: int) -> np.ndarray:
    """A curve extended to ``length`` points by holding its last value (the training job has ended)."""
    v = np.array([_num(x) for x in values], dtype=np.float64)
    return np.concatenate([v, np.full(length - v.size, v[-1])]) if v.size < length else v[:length]


def _figure(width: float = 7.5, height: float = 4.5) -> Tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig, fig.add_subplot()


def _finish(ax: Any, integer_x: bool = False) -> None:
    """Legend outside the axes (it never hides a curve); whole-number ticks for rounds."""
    if integer_x:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _save(fig: Any, path: Path) -> Path:
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, format="png")
    os.replace(tmp, path)
    return path


def plot_all(records: Sequence[Mapping[str, Any]], plan: EvalPlan, out: Union[str, Path]) -> List[Path]:
    """Write the five PNG plots of an evaluation into ``out`` and return their paths.

    - ``accuracy_vs_round.png``: global test accuracy against the communication round;
    - ``accuracy_vs_time.png``: the same against simulated wall-clock time;
      (both: mean over seeds with a ±1 std band; an episode that reached Ω keeps its final accuracy);
    - ``client_accuracy.png``: box plots of the final per-client test accuracies (all clients, all seeds);
    - ``participation.png``: how many rounds each client took part in (mean over seeds);
    - ``round_time.png``: simulated round time against the round (mean ± std over the episodes still running).
    """
    out = Path(out)
    cfg = plan.env_config
    n_seeds = len(plan.seeds)
    groups = []
    for policy, backend in plan.series():
        eps = sorted((r for r in records if r["policy"] == policy and r["backend"] == backend),
                     key=lambda r: r["seed"])
        if eps:
            groups.append((_series_label(policy, backend, plan), eps))
    if not groups:
        return []
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(groups) <= 10 else "tab20"]
    colors = [cmap(i % cmap.N) for i in range(len(groups))]
    seeds_txt = f"mean ± std over {n_seeds} seed{'s' if n_seeds > 1 else ''}"
    omega = cfg["target_accuracy"]
    paths = []

    # accuracy against round
    fig, ax = _figure()
    length = max(len(r["curves"]["accuracy"]) for _, eps in groups for r in eps)
    x = np.arange(length)
    for (label, eps), c in zip(groups, colors):
        ys = np.stack([_held(r["curves"]["accuracy"], length) for r in eps])
        ax.plot(x, ys.mean(0), color=c, label=label)
        ax.fill_between(x, ys.mean(0) - ys.std(0), ys.mean(0) + ys.std(0), color=c, alpha=0.15, linewidth=0)
    ax.axhline(omega, color="black", linestyle="--", linewidth=1, label=f"target Ω = {omega:g}")
    ax.set(title=f"Global test accuracy by round ({seeds_txt})", xlabel="communication round",
           ylabel="global test accuracy (fraction)")
    _finish(ax, integer_x=True)
    paths.append(_save(fig, out / "accuracy_vs_round.png"))

    # accuracy against simulated time: each episode as a step function of its clock
    fig, ax = _figure()
    t_end = max(r["curves"]["clock"][-1] for _, eps in groups for r in eps)
    grid = np.linspace(0.0, max(t_end, 1e-9), 300)
    for (label, eps), c in zip(groups, colors):
        ys = []
        for r in eps:
            clock = np.asarray(r["curves"]["clock"], dtype=np.float64)
            acc = np.array([_num(a) for a in r["curves"]["accuracy"]])
            ys.append(acc[np.searchsorted(clock, grid, side="right") - 1])
        ys = np.stack(ys)
        ax.plot(grid, ys.mean(0), color=c, label=label)
        ax.fill_between(grid, ys.mean(0) - ys.std(0), ys.mean(0) + ys.std(0), color=c, alpha=0.15, linewidth=0)
    ax.axhline(omega, color="black", linestyle="--", linewidth=1, label=f"target Ω = {omega:g}")
    ax.set(title=f"Global test accuracy by simulated time ({seeds_txt})", xlabel="simulated time (s)",
           ylabel="global test accuracy (fraction)")
    _finish(ax)
    paths.append(_save(fig, out / "accuracy_vs_time.png"))

    # final per-client accuracy
    fig, ax = _figure(max(7.5, 0.8 * len(groups) + 2))
    data = [np.concatenate([np.asarray(r["clients"]["accuracy"], dtype=np.float64) for r in eps])
            for _, eps in groups]
    box = ax.boxplot(data, patch_artist=True, showmeans=True, widths=0.6, medianprops={"color": "black"},
                     meanprops={"marker": "^", "markerfacecolor": "white", "markeredgecolor": "black"})
    for patch, c in zip(box["boxes"], colors):
        patch.set_facecolor(c)
        patch.set_alpha(0.6)
    ax.set_xticks(range(1, len(groups) + 1), [g[0] for g in groups], rotation=30, ha="right")
    ax.set(title=f"Final per-client test accuracy ({cfg['num_clients']} clients × {n_seeds} seeds per box)\n"
                 f"box: quartiles, line: median, ▲: mean", xlabel="policy", ylabel="per-client test accuracy (fraction)")
    paths.append(_save(fig, out / "client_accuracy.png"))

    # participation per client
    n = cfg["num_clients"]
    fig, ax = _figure(max(7.5, 0.3 * n + 3), max(3.0, 0.45 * len(groups) + 1.8))
    counts = np.stack([np.mean([r["clients"]["participation"] for r in eps], axis=0) for _, eps in groups])
    im = ax.imshow(counts, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_yticks(range(len(groups)), [g[0] for g in groups])
    if n <= 40:  # every client labelled; beyond that the default ticks keep the axis legible
        ax.set_xticks(range(n), [str(i) for i in range(n)], fontsize="small")
    ax.set(title="Rounds each client took part in (mean over seeds)\nan episode ends at Ω or at the round budget",
           xlabel="client index", ylabel="policy")
    fig.colorbar(im, ax=ax, label="rounds participated (count)")
    paths.append(_save(fig, out / "participation.png"))

    # round time per round
    fig, ax = _figure()
    for (label, eps), c in zip(groups, colors):
        length = max(len(r["curves"]["round_time"]) for r in eps)
        ys = np.full((len(eps), length), np.nan)
        for i, r in enumerate(eps):
            ys[i, :len(r["curves"]["round_time"])] = r["curves"]["round_time"]
        x = np.arange(1, length + 1)
        mean, std = np.nanmean(ys, 0), np.nanstd(ys, 0)
        ax.plot(x, mean, color=c, label=label)
        ax.fill_between(x, mean - std, mean + std, color=c, alpha=0.08, linewidth=0)
    ax.set(title="Simulated round time (slowest responder)\nmean ± std over the episodes still running",
           xlabel="communication round", ylabel="round time (s, simulated)")
    _finish(ax, integer_x=True)
    paths.append(_save(fig, out / "round_time.png"))
    return paths


__all__ = ["BackendSpec", "EpisodeTask", "EvalPlan", "ModelPolicy", "PolicySpec", "RunFolder", "METRICS",
           "agent_seed", "build_policy", "evaluate_task", "hand_written_agents", "make_plan", "parse_backend",
           "parse_params", "parse_policy", "plot_all", "resolve_model", "run_episode", "run_plan", "summarise",
           "summary_markdown"]
