"""Hyper-parameters, rl-zoo3 style: ``configs/<algo>.yml``, one entry per env id, checked, turned into kwargs.

An entry holds rl-zoo3's keys (:data:`ZOO_KEYS`: ``n_timesteps``, ``policy``, ``n_envs``, ``env_kwargs``,
``callback``; ``env_config`` is read as an alias of ``env_kwargs``, the key before rl-zoo3 could read the
files) and the algorithm's own arguments. Those are checked against the constructor's
signature (walking the class's MRO past subclasses that forward ``*args, **kwargs``), so a typo fails
before anything is built. :func:`model_kwargs` parses ``lin_<value>`` schedules and ``policy_kwargs``
(a mapping, or rl-zoo3's string ``"dict(net_arch=[512], activation_fn=nn.ReLU)"``, parsed, not eval'd).
"""
from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Set, Union

from agents.schedules import LinearDecay
from fedsel_env.config import read_yaml

from .algorithms import algorithm_class
from .cli import parse_key_values

#: The hyper-parameter files, one per algorithm (``configs/<algo>.yml`` at the repository root).
CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
#: Keys of a hyper-parameter entry that are not arguments of the algorithm: rl-zoo3's (``env_kwargs``: the
#: env-config fields ``gym.make(env_id, **env_kwargs)`` takes; ``callback``: class paths of SB3 callbacks), and
#: ``env_config``, the alias of ``env_kwargs`` that older files and run folders' ``hyperparams.yaml`` hold.
ZOO_KEYS = ("n_timesteps", "policy", "n_envs", "env_kwargs", "env_config", "callback")
#: Constructor arguments that the training script sets itself.
SET_BY_SCRIPT = {"env", "_init_setup_model", "seed", "device", "tensorboard_log", "verbose"}


def load_hyperparams(algo: str, env_id: Union[str, Sequence[str]], overrides: Sequence[str] = (),
                     conf_file: Optional[str] = None) -> Dict[str, Any]:
    """The hyper-parameters for ``env_id``: its entry in the algorithm's YAML (or the ``default`` entry), then
    the ``KEY=VALUE`` ``overrides`` (``--hyperparams``). ``env_id`` may be several keys, the first with an entry
    winning (a FedSelect-Bench scenario's id, then its preset's: ``agents.training.settings.prepare``).

    :raises ValueError: for a missing file, no entry, or a key the algorithm does not take.
    """
    path = Path(conf_file) if conf_file else CONFIG_DIR / f"{algo}.yml"
    # missing, not UTF-8, a YAML syntax error (line and column) or a key given twice: a ValueError naming the file;
    # an algorithm named by its import path has no file of ours: its defaults, unless --conf-file names one
    table = {"default": {}} if conf_file is None and ":" in algo else read_yaml(path, "hyper-parameter file") or {}
    if not isinstance(table, dict) or not all(isinstance(v, dict) or v is None for v in table.values()):
        raise ValueError(f"hyper-parameter file {str(path)!r} must map env ids (or 'default') to entries of "
                         f"hyper-parameters, as configs/{algo}.yml does; correct it there")
    keys = [env_id] if isinstance(env_id, str) else list(env_id)
    env_id = next((k for k in keys if k in table), keys[-1])
    if env_id in table:
        hp = dict(table[env_id] or {})
    elif "default" in table:
        hp = dict(table["default"] or {})
    else:
        raise ValueError(f"{str(path)!r} has no entry for {env_id!r} (nor a 'default' entry); entries: {sorted(table)}")
    hp.update(parse_key_values(overrides, "hyperparams"))
    if "env_config" in hp:  # the alias: files written before rl-zoo3 could read them
        if "env_kwargs" in hp:
            raise ValueError(f"{str(path)!r} entry {env_id!r} has both env_kwargs and env_config (its older name): "
                             f"keep env_kwargs only")
        hp["env_kwargs"] = hp.pop("env_config")
    accepted = accepted_arguments(algorithm_class(algo)) - SET_BY_SCRIPT
    unknown = sorted(set(hp) - accepted - set(ZOO_KEYS))
    if unknown:
        raise ValueError(f"unknown hyper-parameter(s) {unknown} for --algo {algo}; "
                         f"allowed: {sorted(accepted | set(ZOO_KEYS))}")
    return hp


def accepted_arguments(cls: type) -> Set[str]:
    """The named constructor arguments of ``cls``, and of its parents while a class forwards ``*args/**kwargs``."""
    accepted: Set[str] = set()
    for klass in cls.__mro__:  # a subclass taking *args/**kwargs (DoubleDQN) passes the rest to its parent
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(klass.__init__).parameters.values()
        accepted |= {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "self"}
        if not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
            break
    return accepted


def check_policy(hp: Mapping[str, Any], env_config: Mapping[str, Any]) -> str:
    """The entry's ``policy`` (default ``MlpPolicy``), checked against the env's observation.

    :raises ValueError: for a policy that cannot read the observation, saying which fits.
    """
    policy = hp.get("policy", "MlpPolicy")
    if isinstance(policy, str) and ":" in policy:  # a policy class by import path (the per-client selector's)
        return policy_class(policy)
    if env_config["observation"] == "dict" and policy != "MultiInputPolicy":
        raise ValueError(f"policy {policy!r} cannot read Dict observations: use policy=MultiInputPolicy or "
                         f"env observation: flat")
    if env_config["observation"] == "flat" and policy == "MultiInputPolicy":
        raise ValueError("policy 'MultiInputPolicy' needs Dict observations: use MlpPolicy with observation: flat")
    return policy


def policy_class(path: str) -> type:
    """The SB3 policy class named by ``package.module:Class``.

    :raises ValueError: for a missing module or class, or a class that is no SB3 policy.
    """
    import importlib

    from stable_baselines3.common.policies import BasePolicy

    module, _, name = path.partition(":")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"policy {path!r} cannot be imported ({e}): expected 'package.module:Class' of an SB3 "
                         f"policy, e.g. agents.per_client_net:PerClientActorCriticPolicy") from None
    if not (isinstance(cls, type) and issubclass(cls, BasePolicy)):
        raise ValueError(f"policy {path!r} is not a Stable-Baselines3 policy class (a subclass of BasePolicy)")
    return cls


def model_kwargs(hp: Mapping[str, Any]) -> Dict[str, Any]:
    """The hyper-parameters as keyword arguments of the algorithm class (schedules and policy_kwargs parsed)."""
    kwargs = {k: v for k, v in hp.items() if k not in ZOO_KEYS}
    for key in ("learning_rate", "clip_range"):
        v = kwargs.get(key)
        if isinstance(v, str):
            m = re.fullmatch(r"lin_([0-9.eE+-]+)", v)
            if not m:
                raise ValueError(f"hyper-parameter {key} = {v!r} is invalid: a number or 'lin_<number>'")
            kwargs[key] = linear_schedule(float(m.group(1)))
    if "policy_kwargs" in kwargs:
        kwargs["policy_kwargs"] = parse_policy_kwargs(kwargs["policy_kwargs"])
    if isinstance(kwargs.get("train_freq"), list):
        kwargs["train_freq"] = tuple(kwargs["train_freq"])
    return kwargs


def linear_schedule(initial: float) -> Callable[[float], float]:
    """rl-zoo3's ``lin_<value>`` (:class:`LinearDecay`)."""
    return LinearDecay(initial)


def parse_policy_kwargs(value: Any) -> Dict[str, Any]:
    """A mapping, or rl-zoo3's string form ``"dict(net_arch=[512], activation_fn=nn.ReLU)"`` (parsed, not eval'd)."""
    import torch.nn as nn

    if value is None:
        return {}
    if isinstance(value, Mapping):
        kwargs = dict(value)
    elif isinstance(value, str):
        try:
            node = ast.parse(value, mode="eval").body
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict"
                    and not node.args):
                raise SyntaxError
            kwargs = {}
            for kw in node.keywords:
                kwargs[kw.arg] = (ast.unparse(kw.value) if isinstance(kw.value, (ast.Attribute, ast.Name))
                                  else ast.literal_eval(kw.value))
        except (SyntaxError, ValueError):
            raise ValueError(f"policy_kwargs {value!r} is invalid: expected a mapping or 'dict(key=literal, ...)'") from None
    else:
        raise ValueError(f"policy_kwargs {value!r} is invalid: expected a mapping or 'dict(key=literal, ...)'")
    act = kwargs.get("activation_fn")
    if isinstance(act, str):
        cls = getattr(nn, act.split(".")[-1], None)
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise ValueError(f"policy_kwargs.activation_fn {act!r} is not a torch.nn module (e.g. nn.ReLU, nn.Tanh)")
        kwargs["activation_fn"] = cls
    return kwargs
