"""The policies of an evaluation: ``--policy`` specs, saved SB3 models, and the objects that act.

Owns reading a ``--policy`` value (:func:`parse_policy`: a registered agent or one named by its import
path ``package.module:Class``, with parameters, or a saved model — any SB3 or sb3-contrib zip, its
algorithm read from it or given as ``ALGO:PATH``; ``agents.deploy.resolve_model`` finds its ``.zip``,
algorithm and training env config) and its sha256, listing the hand-written agents that act in a mode,
loading models (once per process), checking a model fits the evaluation env, and building a fresh policy
object with SB3's ``predict`` for each episode (:func:`build_policy`: agents by ``agents.make``, models
as the algorithms' table deploys them, ``agents.deploy.deploy``), seeded by :func:`agent_seed`.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
from gymnasium import spaces

import agents
from agents.deploy import ALGORITHMS, ModelPolicy, algorithm, deploy, model_class, resolve_model, run_folder_agent
from agents.saved_models import load_model
from fedsel_env.config import make_config
from fedsel_env.registry import is_import_path
from fedsel_env.server_view import flatten

from .params import label as _label
from .params import parse_params


@dataclass(frozen=True)
class PolicySpec:
    """One policy of the evaluation.

    :param label: its name in tables, plots and episode keys (unique within an evaluation).
    :param kind: ``"agent"`` (a registered agent) or ``"model"`` (a saved SB3 model).
    :param source: the agent's registry name, or the model's ``.zip`` path.
    :param params: the agent's keyword parameters.
    :param algo: for a model, the algorithm it was trained with (train_agent.py's ``--algo``, a name of
        ``agents.deploy.ALGORITHMS`` or an import path).
    :param train_config: for a model, the env config it was trained in (``env_config.yaml``; for a model
        saved without one, the evaluation's env config as given on the command line).
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


def _looks_like_path(source: str) -> bool:
    return source.endswith(".zip") or "/" in source or os.sep in source or Path(source).exists()


def parse_policy(text: str, env_config: Optional[Mapping[str, Any]] = None) -> PolicySpec:
    """Read a ``--policy`` value: ``[LABEL=]AGENT[:KEY=VALUE,...]``, ``[LABEL=]MODEL_PATH`` or ``[LABEL=]ALGO:MODEL_PATH``.

    AGENT is a registered agent name (``afl``, ``rbcsf:v=10,beta=0.1``) or an agent class's import path
    (``my_pkg.agents:Greedy:k=2``). MODEL_PATH is a saved SB3 / sb3-contrib model: a ``.zip`` or a
    train_agent.py run folder (its ``model.zip``); its algorithm comes from the run's ``args.yaml``, else
    from the zip itself (:func:`agents.deploy.detect_algorithm`), else from ``ALGO:`` (a name of
    ``agents.deploy.ALGORITHMS``, e.g. ``a2c:my_model.zip``, or a class's import path; it also
    overrides what the zip says). LABEL names the policy in the outputs (default: the agent name with its
    parameters, or ``<algo>:<run folder>``).

    :param env_config: the env config the model was trained in when no ``env_config.yaml`` lies beside it
        (``make_plan`` passes the evaluation's env config as the user gave it).
    :raises ValueError: for an unknown agent (listing the registered ones), a bad parameter, or a
        missing model.
    """
    m = re.fullmatch(r"(?:(?P<label>[\w.+-]+)=)?(?P<rest>.+)", text.strip())
    if not m or not m.group("rest").strip():
        raise ValueError(f"bad --policy {text!r}: expected [LABEL=]AGENT[:KEY=VALUE,...] or [LABEL=]MODEL_PATH")
    rest, given_label = m.group("rest").strip(), m.group("label")
    head, sep, tail = rest.partition(":")
    params_follow = re.match(r"\s*[A-Za-z_]\w*\s*=", tail) is not None  # AGENT:KEY=VALUE, not ALGO:PATH
    if sep and head in ALGORITHMS and not params_follow:
        return _model_spec(tail.strip(), given_label, head, env_config)
    cls_name, sep2, model_path = tail.partition(":")
    if sep2 and is_import_path(f"{head}:{cls_name}") and _looks_like_path(model_path):  # module:Class:PATH
        return _model_spec(model_path.strip(), given_label, f"{head}:{cls_name}", env_config)
    if sep and not params_follow and re.fullmatch(r"[\w+.-]+", head) and _looks_like_path(tail) \
            and not Path(rest).exists():
        raise ValueError(f"bad --policy {text!r}: {head!r} is no model algorithm; ALGO:PATH takes one of "
                         f"{sorted(ALGORITHMS)} or a class's import path (package.module:Class:PATH)")
    design = run_folder_agent(rest)  # a run folder of a design that saves its own policy file (set_es, set_distill)
    if design is not None:
        return PolicySpec(label=given_label or f"{design}:{Path(rest).name}", kind="agent", source=design,
                          params={"model": str(Path(rest).resolve())})
    source, params_text = agents.AGENTS.split(rest)
    if agents.AGENTS.knows(source) and not _looks_like_path(source):
        agents.AGENTS.lookup(source)  # an import path: the module, the class and its interface are checked now
        params = parse_params(params_text, f"agent {source!r}")
        return PolicySpec(label=given_label or _label(source, params_text), kind="agent",
                          source=source, params=params)
    if _looks_like_path(rest):
        return _model_spec(rest, given_label, None, env_config)
    raise ValueError(f"unknown policy {source!r}: give a registered agent {sorted(agents.AGENTS)}, an agent "
                     f"class's import path ('package.module:Class'), 'all' for every hand-written agent, or the path of "
                     f"a saved model (.zip or a train_agent.py run folder, optionally ALGO:PATH)")


def _model_spec(source: str, label: Optional[str], algo: Optional[str],
                env_config: Optional[Mapping[str, Any]]) -> PolicySpec:
    zip_path, algo, train_config = resolve_model(source, algo=algo, env_config=env_config)
    tag = zip_path.parent.name if zip_path.name == "model.zip" else zip_path.stem
    return PolicySpec(label=label or f"{algo.split(':')[-1]}:{tag}", kind="model", source=str(zip_path.resolve()),
                      algo=algo, train_config=train_config, sha256=_sha256(zip_path))


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
        if getattr(cls, "privileged", False):  # reads the simulator (lookahead): a bound, not a selection policy
            skipped[name] = "privileged: it reads the simulator (name it to evaluate it as a bound)"
            continue
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


_MODEL_CACHE: Dict[Tuple[str, str], Any] = {}


def _load_model(p: PolicySpec) -> Any:
    """The SB3 model of a model policy, loaded once per process."""
    key = (p.source, p.sha256 or "")
    if key not in _MODEL_CACHE:
        cls = model_class(str(p.algo))  # ValueError: an unknown name, or no SB3 algorithm class
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

    Registered agents come from ``agents.make``; a model is deployed as its algorithm's entry of the
    table says (``agents.deploy.deploy``: FAVOR's top-K agent for a DQN-family model, the per-client agent
    — which loads itself for the env's N — for a per-client one, :class:`~agents.deploy.ModelPolicy` for
    any other SB3 model), from the model this process loaded once.
    """
    if p.kind == "agent":
        return agents.make(p.source, spec, seed=agent_seed(seed), **p.params)
    model = p.source if algorithm(str(p.algo)).deployment.from_path else _load_model(p)
    return deploy(model, spec, p.train_config or {}, agent_seed(seed), algo=p.algo)


def check_model_fits(p: PolicySpec, env: Any) -> List[str]:
    """Check that a model policy can act in the evaluation env; return notes on how its training env differs.

    :raises ValueError: when it cannot act here (wrong number of clients, observation or action space).
    """
    policy = build_policy(p, env.selection_spec, 0)  # FavorAgent checks its input and output sizes
    if isinstance(policy, ModelPolicy):
        model = policy.model
        if not (model.action_space == env.action_space or policy.repair and model.action_space.n == env.num_clients):
            raise ValueError(f"model {p.source!r} acts in {model.action_space} but the evaluation env's "
                             f"action space is {env.action_space} (action_mode "
                             f"{env.config['action_mode']!r}): evaluate it in the mode it was trained in "
                             f"(its action_mode {(p.train_config or {}).get('action_mode')!r})")
        obs, _ = env.reset(seed=0)
        if policy.flat_parts is not None:
            shape = flatten(obs, policy.flat_parts).shape
            ok = model.observation_space.shape == shape
        elif not isinstance(model.observation_space, spaces.Dict):
            raise ValueError(f"model {p.source!r} reads a flat observation of shape {model.observation_space.shape}, "
                             f"but the env "
                             f"config it is evaluated with says observation: dict; give the one it was trained "
                             f"with: --env-kwargs observation=flat 'flat_parts=[...]' (the parts it read, in order)")
        else:
            ok = all(k in model.observation_space.spaces and model.observation_space[k].shape == np.asarray(v).shape
                     for k, v in obs.items())
        if not ok:
            train = make_config(p.train_config or {})
            shaping = ("num_clients", "pca_components", "model", "dataset")
            differ = [f"{k}={train[k]!r} (here {env.config[k]!r})" for k in shaping if train[k] != env.config[k]]
            given = (f"; the env gives {shape} from flat_parts {policy.flat_parts} (the model's own env config "
                     f"says which parts it read: --env-kwargs 'flat_parts=[...]')" if policy.flat_parts else "")
            expects = model.observation_space if isinstance(model.observation_space, spaces.Dict) else \
                f"of shape {model.observation_space.shape}"
            raise ValueError(f"model {p.source!r} expects observations {expects}, which this "
                             f"evaluation env does not give: it was trained with "
                             f"{', '.join(differ) or 'a different federation'}; evaluate it in an env with "
                             f"those values (--env-kwargs KEY=VALUE){given}")
    ignore = {"action_mode", "observation", "flat_parts", "aggregator", "aggregator_params", "one_mode_step"}
    train = make_config(p.train_config or {})
    return [k for k in sorted(train) if k not in ignore and train[k] != env.config.get(k)]


__all__ = ["PolicySpec", "agent_seed", "build_policy", "check_model_fits", "hand_written_agents", "parse_policy"]
