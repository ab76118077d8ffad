"""How a trained model becomes a selector: the one table of algorithms, :func:`deploy` and :class:`ModelPolicy`.

Every algorithm ``train_agent.py --algo`` trains, and every one whose saved model ``evaluate.py --policy``
loads, is one :class:`Algorithm` of :data:`ALGORITHMS`: the class that trains and loads it, the action modes
it acts in while training, whether it keeps a replay buffer, how it is deployed (a :class:`Deployment`, by
name) and the policy modules its saved zips name (how :func:`detect_algorithm` tells a bare zip's algorithm).
The deployments:

- ``top_k``: FAVOR's — the K available clients with the highest Q-values (``agents.favor.FavorAgent``) in a
  ``topk`` env with Dict observations; FAVOR, FAVOR+ and SB3's DQN, trained in the ``one`` mode;
- ``per_client``: the per-client scorer (``agents.per_client.PerClientAgent``): top-K of its scores, at any N;
- ``policy``: the SB3 policy acting in its own action mode (:class:`ModelPolicy`).

``top_k`` and ``per_client`` are registered by ``agents/favor.py`` and ``agents/per_client.py`` (with
:func:`register_deployment`; ``agents/__init__.py`` imports both), and so are the algorithms whose class or
policy is an agent module's (FAVOR's Double DQN, the per-client and Plackett-Luce designs: with
:func:`register_algorithm`, passing their classes): this module names no agent module, by import or by string
(issue #46), and imports neither ``agents.training`` nor ``fedsel_eval``, which read it (``train_agent.py``,
``evaluate.py``, the Flower strategy, rl-zoo3's tables); the table below holds Stable-Baselines3's and
sb3-contrib's algorithms. Adding a trained algorithm is one :func:`register_algorithm` (or one
entry below) and ``configs/<algo>.yml``: docs/ARCHITECTURE.md, "Adding a trained algorithm".
"""
from __future__ import annotations

import copy
import inspect
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np
from gymnasium import spaces

from fedsel_env.actions import SubsetSpace
from fedsel_env.config import make_config, read_yaml
from fedsel_env.registry import is_import_path, load_import_path
from fedsel_env.server_view import flatten
from fedsel_env.wrappers import repair_subset, subset_masks

from .saved_models import load_model, read_zip_data

ALL_MODES = ("one", "topk", "subset")
#: Name of the env-config file saved beside a trained model (train_agent.py writes it).
ENV_CONFIG_FILE = "env_config.yaml"


@dataclass(frozen=True)
class Deployment:
    """How a trained model acts as a selector.

    :param selector: ``(model_or_path, spec, train_config, seed) ->`` an object with SB3's ``predict`` for an
        env with Dict observations in ``spec``'s action mode.
    :param from_path: built from the saved file (the selector loads its model itself, for the episode's N),
        not from a loaded model.
    :param env_config: the training env config → the env the deployed form acts in (``train_agent.py``'s
        evaluation); ``None``: the training env itself, where the model is its own selector.
    :param agent: the registered agent that deploys such a model from ``model_path=``.
    :param check: ``(path, pca_components, num_clients)``, refusing a saved model before any env is built.
    """

    selector: Callable[..., Any]
    from_path: bool = False
    env_config: Optional[Callable[[Mapping[str, Any]], Dict[str, Any]]] = None
    agent: Optional[str] = None
    check: Optional[Callable[[Any, int, int], None]] = None
    about: str = ""


@dataclass(frozen=True)
class Algorithm:
    """One trained algorithm.

    :param name: ``train_agent.py --algo`` / ``evaluate.py --policy NAME:PATH``.
    :param cls: the SB3 algorithm class that trains and loads it, or its import path ``package.module:Class``
        (a class of a package that need not be imported until a model is loaded).
    :param modes: the action modes it acts in while training.
    :param off_policy: it keeps a replay buffer (saved with its checkpoints).
    :param deploy: the name of its :class:`Deployment` (:data:`DEPLOYMENTS`).
    :param policy_modules: the modules of the policies its saved zips name (:func:`detect_algorithm`; the
        first entry that matches wins, so several entries deployed alike may share one).
    :param saves: keys its saved ``data`` holds, and ``lacks`` keys it does not: how it is told apart from
        algorithms sharing its policy module (PPO, A2C and TRPO share SB3's ``ActorCriticPolicy``).
    :param trainable: ``train_agent.py`` trains it; ``False``: its saved models only load (rl-zoo3's names).
    :param zoo_search: FedSelect's DQN-family search space in rl-zoo3 (``agents/training/zoo.py``).
    """

    name: str
    cls: Union[str, type]
    modes: Tuple[str, ...] = ALL_MODES
    off_policy: bool = False
    deploy: str = "policy"
    policy_modules: Tuple[str, ...] = ()
    saves: Tuple[str, ...] = ()
    lacks: Tuple[str, ...] = ()
    trainable: bool = True
    zoo_search: bool = False
    about: str = ""

    @property
    def deployment(self) -> Deployment:
        return deployment(self.deploy)


#: the algorithms by name, in detection order
ALGORITHMS: Dict[str, Algorithm] = {}
#: the deployments by name (``top_k`` and ``per_client`` registered by their agents' modules)
DEPLOYMENTS: Dict[str, Deployment] = {}


def register_algorithm(entry: Algorithm, replace: bool = False, before: Optional[str] = None) -> Algorithm:
    """Add ``entry`` to :data:`ALGORITHMS` (``replace``: over an entry of the same name).

    :param before: the registered algorithm it goes before in detection order (:func:`detect_algorithm` takes the
        first entry that matches a zip): FAVOR's entries go before SB3's ``dqn``, whose policy they share.
    :raises ValueError: for a name already taken, an action mode that does not exist, or an unknown ``before``.
    """
    if entry.name in ALGORITHMS and not replace:
        raise ValueError(f"algorithm {entry.name!r} is registered already (replace=True to replace it)")
    bad = [m for m in entry.modes if m not in ALL_MODES]
    if bad or not entry.modes:
        raise ValueError(f"algorithm {entry.name!r}: action modes {list(entry.modes)} are invalid; expected some of "
                         f"{list(ALL_MODES)}")
    if before is not None and before not in ALGORITHMS:
        raise ValueError(f"algorithm {entry.name!r}: before={before!r} is not registered; registered: {list(ALGORITHMS)}")
    ALGORITHMS[entry.name] = entry
    if before is not None:
        order = [n for n in ALGORITHMS if n != entry.name]
        order.insert(order.index(before), entry.name)
        moved = {n: ALGORITHMS[n] for n in order}
        ALGORITHMS.clear()
        ALGORITHMS.update(moved)
    return entry


#: a run folder's policy file → the agent that deploys it (``evaluate.py --policy runs/train/<run>``): the designs
#: that save no SB3 ``model.zip`` register theirs (``agents/set_es.py``: ``set_es.json``; ``agents/set_distill.py``)
RUN_FOLDER_AGENTS: Dict[str, str] = {}


def register_run_folder(policy_file: str, agent: str) -> None:
    """A run folder holding ``policy_file`` is deployed as ``agents.make(agent, spec, model=<folder>)``."""
    RUN_FOLDER_AGENTS[policy_file] = agent


def run_folder_agent(path: Union[str, Path]) -> Optional[str]:
    """The agent that deploys the run folder ``path`` (:data:`RUN_FOLDER_AGENTS`), or None (no such folder)."""
    p = Path(path)
    return next((a for f, a in RUN_FOLDER_AGENTS.items() if (p / f).is_file()), None) if p.is_dir() else None


def register_deployment(name: str, entry: Deployment, replace: bool = False) -> Deployment:
    """Add ``entry`` to :data:`DEPLOYMENTS`. :raises ValueError: for a name already taken."""
    if name in DEPLOYMENTS and not replace and DEPLOYMENTS[name] != entry:
        raise ValueError(f"deployment {name!r} is registered already (replace=True to replace it)")
    DEPLOYMENTS[name] = entry
    return entry


def deployment(name: str) -> Deployment:
    """:raises ValueError: for a name no module registered (listing those that are)."""
    if name not in DEPLOYMENTS:  # importing this module imported agents/__init__, which registered the built-in ones
        raise ValueError(f"unknown deployment {name!r}; registered: {sorted(DEPLOYMENTS)}")
    return DEPLOYMENTS[name]


def algorithm(name: str) -> Algorithm:
    """The entry of ``name``; for an import path ``package.module:Class`` (an SB3 algorithm class from outside
    the package) one that acts in every mode and is deployed as its policy.

    :raises ValueError: for an unknown name (listing the trainable algorithms), or a path that is no SB3 class.
    """
    if name in ALGORITHMS:
        return ALGORITHMS[name]
    if is_import_path(name):
        from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

        cls = model_class(name)  # ValueError: missing module or class, or no SB3 algorithm
        return Algorithm(name, name, off_policy=issubclass(cls, OffPolicyAlgorithm),
                         about=f"the SB3 algorithm class {name}, acting in the env's own action mode")
    raise ValueError(f"unknown --algo {name!r}; algorithms: "
                     + "; ".join(f"{a.name} ({a.about})" for a in ALGORITHMS.values() if a.trainable)
                     + "; or an SB3 algorithm class's import path 'package.module:Class'")


def trainable_algorithms() -> List[str]:
    """The names ``train_agent.py --algo`` trains, sorted."""
    return sorted(a.name for a in ALGORITHMS.values() if a.trainable)


def model_class(algo: str) -> type:
    """The class whose ``load`` reads a model of ``algo``: a name of :data:`ALGORITHMS` or an import path.

    :raises ValueError: for an unknown name (listing the known ones) or a class that is no SB3 algorithm.
    """
    from stable_baselines3.common.base_class import BaseAlgorithm

    if algo not in ALGORITHMS and not is_import_path(algo):
        raise ValueError(f"unknown model algorithm {algo!r}: expected one of {sorted(ALGORITHMS)} or the import "
                         f"path of its class ('package.module:Class')")
    cls = ALGORITHMS[algo].cls if algo in ALGORITHMS else algo
    cls = load_import_path(cls, "model algorithm") if isinstance(cls, str) else cls
    if not (isinstance(cls, type) and issubclass(cls, BaseAlgorithm)):
        raise ValueError(f"model algorithm {algo!r} is {cls!r}, not a Stable-Baselines3 algorithm class "
                         f"(a subclass of stable_baselines3.common.base_class.BaseAlgorithm)")
    return cls


def detect_algorithm(saved: Any) -> Optional[str]:
    """The algorithm that saved the SB3 zip ``saved`` (a path; or a loaded model), read from its ``data``:
    the first entry of :data:`ALGORITHMS` whose policy module, ``saves`` and ``lacks`` match (``None``
    when none does). A DQN policy is taken as FAVOR's (deployed alike); a TD3 policy as TD3's.

    :raises ValueError: when the path is no SB3 model zip.
    """
    if isinstance(saved, (str, os.PathLike)):
        try:
            with zipfile.ZipFile(saved) as z:
                if "data" not in z.namelist():
                    raise KeyError("There is no item named 'data' in the archive")
        except (OSError, zipfile.BadZipFile, KeyError) as e:
            raise ValueError(f"{str(saved)!r} is not a saved Stable-Baselines3 model: {e}") from None
        data = read_zip_data(saved, "model")  # size and nesting checked before parsing: ValueError naming it
        policy = data.get("policy_class")
        module = str(policy.get("__module__", "")) if isinstance(policy, dict) else ""
    else:  # a loaded model: its policy's class, its attributes for what it saves
        data, module = vars(saved), type(getattr(saved, "policy", None)).__module__
    for entry in ALGORITHMS.values():
        if module in entry.policy_modules and all(k in data for k in entry.saves) \
                and not any(k in data for k in entry.lacks):
            return entry.name
    return None


def read_env_config(model_path: Union[str, Path]) -> Dict[str, Any]:
    """The training env config saved beside a model (``env_config.yaml`` in its folder or the folder above).

    :raises ValueError: if no such file exists.
    """
    p = Path(model_path)
    for folder in (p.parent, p.parent.parent):
        f = folder / ENV_CONFIG_FILE
        if f.is_file():
            cfg = read_yaml(f, "env config")  # ValueError naming the file: not UTF-8, bad YAML
            if not isinstance(cfg, dict):
                raise ValueError(f"{str(f)!r} must hold a mapping of env config keys")
            return cfg
    raise ValueError(f"no {ENV_CONFIG_FILE} beside model {str(p)!r} (looked in {str(p.parent)!r} and "
                     f"{str(p.parent.parent)!r}); pass flat_parts= or env_config= explicitly")


def deployment_config(train_config: Mapping[str, Any]) -> Dict[str, Any]:
    """The env config a ``top_k`` or ``per_client`` model is deployed in: the training config in the ``topk``
    mode with Dict observations."""
    cfg = copy.deepcopy(dict(train_config))
    cfg["action_mode"] = "topk"
    cfg["observation"] = "dict"
    return cfg


def resolve_model(path: Union[str, Path], algo: Optional[str] = None,
                  env_config: Optional[Mapping[str, Any]] = None) -> Tuple[Path, str, Dict[str, Any]]:
    """A model path → (its ``.zip``, the algorithm that trained it, the env config it was trained in).

    ``path`` is a ``.zip`` (the suffix may be left off) or a train_agent.py run folder (``model.zip``
    in it). The algorithm is ``algo`` when given, else the run's ``args.yaml``'s, else what the zip
    tells (:func:`detect_algorithm`). The env config is ``env_config.yaml`` in the model's folder or the
    one above (train_agent.py writes it), else ``env_config``.

    :raises ValueError: for a missing model, an algorithm that cannot be told, or no env config.
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
    if algo is None:
        for folder in (zip_path.parent, zip_path.parent.parent):
            if (folder / "args.yaml").is_file():
                saved = read_yaml(folder / "args.yaml", "run settings file")  # ValueError naming it: bad YAML
                algo = saved.get("algo") if isinstance(saved, dict) else None
                break
    if algo is None:
        algo = detect_algorithm(zip_path)  # ValueError: not an SB3 zip
    if algo is None:
        raise ValueError(f"cannot tell which algorithm trained {str(zip_path)!r} (no train_agent.py args.yaml "
                         f"beside it, and its saved policy is shared by several algorithms): name it as "
                         f"--policy ALGO:{zip_path}, ALGO one of {sorted(ALGORITHMS)} or a class's import "
                         f"path")
    model_class(str(algo))  # an unknown name or a class that is no SB3 algorithm: ValueError now
    beside = [f / ENV_CONFIG_FILE for f in (zip_path.parent, zip_path.parent.parent)]
    if any(f.is_file() for f in beside) or env_config is None:
        train_config = read_env_config(zip_path)  # ValueError when there is none and no env config was given
    else:
        train_config = make_config(dict(env_config))
    return zip_path, str(algo), train_config


def deploy(model_or_path: Any, spec: Any, train_config: Optional[Mapping[str, Any]] = None,
           seed: Optional[int] = None, algo: Optional[str] = None) -> Any:
    """A trained model → the selector its algorithm's entry deploys: an object with SB3's ``predict`` for an
    env with Dict observations in ``spec``'s action mode (``evaluate.py``, the Flower strategy, scripts).

    :param model_or_path: a loaded SB3 model, or a saved one: a ``.zip`` or a ``train_agent.py`` run folder.
    :param spec: the problem (``env.unwrapped.selection_spec``).
    :param train_config: the env config the model was trained in; for a saved model, the ``env_config.yaml``
        beside it wins (:func:`resolve_model`). Required with a loaded model.
    :param seed: the selector's own seed (:class:`ModelPolicy`'s subset repair draws from it).
    :param algo: its algorithm (a name of :data:`ALGORITHMS` or an import path); default: the run's
        ``args.yaml``, else what the model tells (:func:`detect_algorithm`).
    :raises ValueError: for a missing or damaged model, an algorithm that cannot be told, a model that does
        not fit ``spec``.
    """
    if isinstance(model_or_path, (str, os.PathLike)):
        if algo is None or train_config is None:
            model_or_path, algo, train_config = resolve_model(model_or_path, algo, train_config)
        elif Path(model_or_path).is_dir():
            model_or_path = Path(model_or_path) / "model.zip"
        dep = algorithm(algo).deployment
        if not dep.from_path:
            model_or_path = load_model(model_class(algo), model_or_path, what="model", device="cpu")
    else:
        if train_config is None:
            raise ValueError("deploy: with a loaded model give train_config= (the env config it was trained in)")
        algo = algo or detect_algorithm(model_or_path)
        if algo is None:
            raise ValueError(f"deploy: cannot tell the algorithm of a {type(model_or_path).__name__} model from its "
                             f"policy; give algo= (one of {sorted(ALGORITHMS)})")
        dep = algorithm(algo).deployment
    return dep.selector(model_or_path, spec, dict(train_config), seed)


def check_saved_models(agent: str, params: Mapping[str, Any], pca_components: int, num_clients: int) -> None:
    """Refuse, before any env is built, the saved model(s) ``params["model_path"]`` that the agent ``agent``
    would load and that cannot act here (its deployment's ``check``: a per-client model's PCA width d).

    :raises ValueError: naming the model and the config field that fixes it.
    """
    paths = params.get("model_path")
    for dep in DEPLOYMENTS.values():
        if dep.agent == agent and dep.check is not None and paths is not None:
            for path in paths if isinstance(paths, (list, tuple)) else [paths]:
                dep.check(path, pca_components, num_clients)


class ModelPolicy:
    """A saved SB3 / sb3-contrib model (PPO, A2C, SAC, MaskablePPO, ...) acting in the env's own action mode.

    The evaluation env gives Dict observations; a model trained on the flat observation gets the
    same flat vector the env would build (``flat_parts`` of its training config). As in training:
    a model with ``action_masks`` in its ``predict`` (MaskablePPO) gets the availability mask in its
    space's layout; a ``MultiBinary`` model in the ``subset`` mode has an over-full or empty subset
    turned into a round by :func:`fedsel_env.wrappers.repair_subset` (its draws from this episode's
    seed); a recurrent model (RecurrentPPO) carries its state through the episode.

    :param model: a loaded SB3 model.
    :param train_config: the env config it was trained in.
    :param spec: the evaluation env's selection spec (``None``: no masks, no repair).
    :param seed: the seed of the repair's draws.
    """

    def __init__(self, model: Any, train_config: Mapping[str, Any], spec: Any = None, seed: Optional[int] = None) -> None:
        self.model = model
        self.flat_parts = list(train_config.get("flat_parts", ["weights"])) \
            if train_config.get("observation") == "flat" else None
        self.spec = spec
        self.masked = "action_masks" in inspect.signature(model.predict).parameters
        self.repair = (spec is not None and spec.action_mode == "subset"
                       and isinstance(model.action_space, spaces.MultiBinary)
                       and not isinstance(model.action_space, SubsetSpace))
        self.rng = np.random.default_rng(seed)
        self._state: Any = None
        self._started = False

    def predict(self, observation: Dict[str, np.ndarray], state: Any = None, episode_start: Any = None,
                deterministic: bool = True) -> Tuple[np.ndarray, Any]:
        """SB3's ``predict`` on the observation in the form the model was trained on."""
        available = self.spec.feature(observation, "available") > 0.5 if self.spec is not None else None
        extra: Dict[str, Any] = {}
        if self.masked and available is not None:
            extra["action_masks"] = subset_masks(available) \
                if isinstance(self.model.action_space, spaces.MultiBinary) else available
        if state is None and episode_start is None:  # run_episode's call: this object carries the episode
            state, episode_start = self._state, np.array([not self._started])
        if self.flat_parts is not None:
            observation = flatten(observation, self.flat_parts)
        action, self._state = self.model.predict(observation, state=state, episode_start=episode_start,
                                                 deterministic=deterministic, **extra)
        self._started = True
        if self.repair:
            action = repair_subset(action, self.spec.clients_per_round, available, self.rng)
        return action, self._state


def deploy_policy(model: Any, spec: Any, train_config: Mapping[str, Any], seed: Optional[int] = None) -> ModelPolicy:
    """The ``policy`` deployment: a loaded SB3 model as :class:`ModelPolicy`."""
    return ModelPolicy(model, train_config, spec, seed)


register_deployment("policy", Deployment(selector=deploy_policy, about="the SB3 policy acting in its own action mode"))

_SB3, _CONTRIB = "stable_baselines3", "sb3_contrib"
#: the policy modules of SB3's DQN family and of its actor-critic algorithms (what a saved zip names)
DQN_POLICY, AC_POLICY = "stable_baselines3.dqn.policies", "stable_baselines3.common.policies"
for _entry in (  # train_agent.py's algorithms, then those whose models only load (rl-zoo3's names); FAVOR's and
    # the per-client designs' entries are registered by agents/favor.py and agents/per_client.py, in this order
    Algorithm("dqn", f"{_SB3}:DQN", ("one",), True, "top_k", (DQN_POLICY,), zoo_search=True,
              about="SB3's vanilla DQN, deployed as top-K like FAVOR"),
    Algorithm("ppo", f"{_SB3}:PPO", policy_modules=(AC_POLICY,), saves=("clip_range", "n_epochs"),
              lacks=("cg_max_steps",),
              about="SB3's PPO, acting in the env's own action mode"),
    Algorithm("a2c", f"{_SB3}:A2C", policy_modules=(AC_POLICY,), saves=("n_steps",),
              lacks=("batch_size", "cg_max_steps"),
              about="SB3's A2C, acting in the env's own action mode"),
    Algorithm("maskable_ppo", f"{_CONTRIB}:MaskablePPO", ("subset", "one"),
              policy_modules=(f"{_CONTRIB}.common.maskable.policies",),
              about="sb3-contrib's MaskablePPO: PPO that never picks a client env.action_masks() marks "
                    "unavailable, in the 'subset' or 'one' mode"),
    Algorithm("sac", f"{_SB3}:SAC", ("topk",), True, policy_modules=(f"{_SB3}.sac.policies",),
              about="SB3's SAC, scoring clients in the 'topk' mode (a Box of N scores)"),
    Algorithm("ddpg", f"{_SB3}:DDPG", off_policy=True, trainable=False),  # saves TD3's policy: told as td3
    Algorithm("td3", f"{_SB3}:TD3", off_policy=True, policy_modules=(f"{_SB3}.td3.policies",), trainable=False),
    Algorithm("ars", f"{_CONTRIB}:ARS", policy_modules=(f"{_CONTRIB}.ars.policies",), trainable=False),
    Algorithm("crossq", f"{_CONTRIB}:CrossQ", off_policy=True, policy_modules=(f"{_CONTRIB}.crossq.policies",),
              trainable=False),
    Algorithm("qrdqn", f"{_CONTRIB}:QRDQN", off_policy=True, policy_modules=(f"{_CONTRIB}.qrdqn.policies",),
              trainable=False),
    Algorithm("recurrent_ppo", f"{_CONTRIB}:RecurrentPPO", policy_modules=(f"{_CONTRIB}.common.recurrent.policies",),
              trainable=False),
    Algorithm("ppo_lstm", f"{_CONTRIB}:RecurrentPPO", trainable=False),
    Algorithm("tqc", f"{_CONTRIB}:TQC", off_policy=True, policy_modules=(f"{_CONTRIB}.tqc.policies",), trainable=False),
    Algorithm("trpo", f"{_CONTRIB}:TRPO", policy_modules=(AC_POLICY,), saves=("cg_max_steps",), trainable=False),
):
    register_algorithm(_entry)

__all__ = ["AC_POLICY", "ALGORITHMS", "DEPLOYMENTS", "DQN_POLICY", "ENV_CONFIG_FILE", "Algorithm", "Deployment",
           "ModelPolicy", "algorithm",
           "check_saved_models", "deploy", "deployment", "deployment_config", "detect_algorithm", "model_class",
           "read_env_config", "register_algorithm", "register_deployment", "resolve_model", "trainable_algorithms"]
