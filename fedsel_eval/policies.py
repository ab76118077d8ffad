"""The policies of an evaluation: ``--policy`` specs, saved SB3 models, and the objects that act.

Owns reading a ``--policy`` value (:func:`parse_policy`: a registered agent with parameters, or a
saved model), finding a model's ``.zip``, algorithm and training env config (:func:`resolve_model`)
and its sha256, listing the hand-written agents that act in a mode, loading models (once per
process), checking a model fits the evaluation env, and building a fresh policy object with SB3's
``predict`` for each episode (:func:`build_policy`), seeded by :func:`agent_seed`.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np
import stable_baselines3

import agents
from agents.favor import DoubleDQN, read_env_config
from agents.saved_models import load_model
from fedsel_env.config import make_config, read_yaml
from fedsel_env.server_view import flatten

from .params import label as _label
from .params import parse_params

#: SB3 algorithms (train_agent.py's ``--algo``) whose models are deployed as FAVOR's top-K agent.
DQN_FAMILY = ("favor", "favor+", "dqn")
#: Agents that live in modules ``agents/__init__`` does not import (they need Stable-Baselines3).
OPTIONAL_AGENT_MODULES = {"favor": "agents.favor"}


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
            saved = read_yaml(folder / "args.yaml", "run settings file")  # ValueError naming it: bad YAML
            algo = saved.get("algo") if isinstance(saved, dict) else None
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
            observation = flatten(observation, self.flat_parts)
        return self.model.predict(observation, state=state, episode_start=episode_start,
                                  deterministic=deterministic)


_MODEL_CACHE: Dict[Tuple[str, str], Any] = {}


def _load_model(p: PolicySpec) -> Any:
    """The SB3 model of a model policy, loaded once per process."""
    key = (p.source, p.sha256 or "")
    if key not in _MODEL_CACHE:
        if p.algo in DQN_FAMILY:
            cls = DoubleDQN
        else:
            cls = getattr(stable_baselines3, str(p.algo).upper(), None)
            if cls is None:
                raise ValueError(f"model {p.source!r}: unknown algorithm {p.algo!r}; "
                                 f"known: {list(DQN_FAMILY)} and Stable-Baselines3's (ppo, a2c, ...)")
        # a damaged file (a policy.pth cut short inside a valid zip: torch's RuntimeError) → ValueError naming it
        model = load_model(cls, p.source, what="model", device="cpu")
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
            shape = flatten(obs, policy.flat_parts).shape
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


__all__ = ["DQN_FAMILY", "OPTIONAL_AGENT_MODULES", "ModelPolicy", "PolicySpec", "agent_seed", "build_policy",
           "check_model_fits", "hand_written_agents", "parse_policy", "resolve_model"]
