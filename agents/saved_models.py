"""Reading saved Stable-Baselines3 files with errors that name the file and the fix (issue #15, item 7).

SB3's loaders fail on a damaged file with whatever the layer below raised: a ``RuntimeError`` from
torch for a ``policy.pth`` cut short inside a valid zip, an ``UnpicklingError`` for a truncated replay
buffer, a ``FileNotFoundError`` for ``<name>.pkl.pkl`` when a buffer is missing (SB3 retries the path
with its suffix added). These turn every such failure into a ``ValueError`` that names the file, says
what went wrong, and what to do (``fix``).

It also knows which class loads a model zip (:func:`model_class`: ``train_agent.py``'s algorithms,
Stable-Baselines3's, sb3-contrib's under their rl-zoo3 names, or any class by import path) and which
algorithm saved a zip that came without a ``train_agent.py`` run folder (:func:`detect_algorithm`).
"""
from __future__ import annotations

import base64
import binascii
import json
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any, Dict, Optional, Union

from fedsel_env.sim.safe_pickle import (NUMPY_GLOBALS, NUMPY_RANDOM_GLOBALS, PLAIN_GLOBALS, RefusedGlobal,
                                        restricted_load, restricted_loads)

#: what to do about a damaged model file, unless the caller knows better
DEFAULT_FIX = "the file is damaged (cut short by a crash or a partial copy?): copy it again, or train it again"


#: The class that loads a saved model of each algorithm name (``train_agent.py --algo``, rl-zoo3's ``--algo``).
MODEL_CLASSES: Dict[str, str] = {
    "favor": "agents.favor:DoubleDQN", "favor+": "agents.favor:DoubleDQN",
    "a2c": "stable_baselines3:A2C", "ddpg": "stable_baselines3:DDPG", "dqn": "stable_baselines3:DQN",
    "ppo": "stable_baselines3:PPO", "sac": "stable_baselines3:SAC", "td3": "stable_baselines3:TD3",
    "ars": "sb3_contrib:ARS", "crossq": "sb3_contrib:CrossQ", "maskable_ppo": "sb3_contrib:MaskablePPO",
    "qrdqn": "sb3_contrib:QRDQN", "recurrent_ppo": "sb3_contrib:RecurrentPPO",
    "ppo_lstm": "sb3_contrib:RecurrentPPO", "tqc": "sb3_contrib:TQC", "trpo": "sb3_contrib:TRPO",
    "pc_ppo": "stable_baselines3:PPO", "pc_dqn": "agents.favor:DoubleDQN",  # the per-client selector (#19)
}
#: A saved policy's module → the algorithm, where the module alone tells (SB3 saves ``policy_class`` in ``data``).
_POLICY_MODULES = {
    "stable_baselines3.dqn.policies": "favor",  # SB3's DQN and FAVOR's DoubleDQN: deployed alike (top-K)
    "stable_baselines3.sac.policies": "sac", "stable_baselines3.td3.policies": "td3",  # TD3's also DDPG's
    "sb3_contrib.common.maskable.policies": "maskable_ppo", "sb3_contrib.common.recurrent.policies": "recurrent_ppo",
    "sb3_contrib.qrdqn.policies": "qrdqn", "sb3_contrib.tqc.policies": "tqc", "sb3_contrib.ars.policies": "ars",
    "sb3_contrib.crossq.policies": "crossq",
}


def model_class(algo: str) -> type:
    """The class whose ``load`` reads a model of ``algo``: a name of :data:`MODEL_CLASSES` or an import path.

    :raises ValueError: for an unknown name (listing the known ones) or a class that is no SB3 algorithm.
    """
    from stable_baselines3.common.base_class import BaseAlgorithm

    from fedsel_env.registry import is_import_path, load_import_path

    if algo not in MODEL_CLASSES and not is_import_path(algo):
        raise ValueError(f"unknown model algorithm {algo!r}: expected one of {sorted(MODEL_CLASSES)} or the import "
                         f"path of its class ('package.module:Class')")
    cls = load_import_path(MODEL_CLASSES.get(algo, algo), "model algorithm")
    if not (isinstance(cls, type) and issubclass(cls, BaseAlgorithm)):
        raise ValueError(f"model algorithm {algo!r} is {cls!r}, not a Stable-Baselines3 algorithm class "
                         f"(a subclass of stable_baselines3.common.base_class.BaseAlgorithm)")
    return cls


def detect_algorithm(path: Union[str, Path]) -> Optional[str]:
    """The algorithm that saved the SB3 zip ``path``, read from its ``data`` (``None`` when it cannot be told).

    The policy's module tells most algorithms apart; PPO, A2C and TRPO share SB3's ``ActorCriticPolicy``,
    and are told apart by what each saves (``clip_range`` and ``n_epochs``: PPO; ``cg_max_steps``: TRPO).
    A DQN policy is taken as FAVOR's (both are deployed as the top-K agent); a TD3 policy as TD3's.

    :raises ValueError: when ``path`` is no SB3 model zip.
    """
    try:
        with zipfile.ZipFile(path) as z:
            data = json.loads(z.read("data"))
    except (OSError, zipfile.BadZipFile, KeyError, json.JSONDecodeError) as e:
        raise ValueError(f"{str(path)!r} is not a saved Stable-Baselines3 model: {e}") from None
    policy = data.get("policy_class")
    module = str(policy.get("__module__", "")) if isinstance(policy, dict) else ""
    if module in _POLICY_MODULES:
        return _POLICY_MODULES[module]
    if module == "agents.per_client_net":  # the per-client selector: PPO saves clip_range, DQN does not
        return "pc_ppo" if "clip_range" in data else "pc_dqn"
    if module == "stable_baselines3.common.policies":
        if "cg_max_steps" in data:
            return "trpo"
        if "clip_range" in data and "n_epochs" in data:
            return "ppo"
        if "n_steps" in data and "batch_size" not in data:
            return "a2c"
    return None


# --- the safe path: pickled entries and replay buffers through a restricted unpickler (issue #30) -------------

#: Set to ``1`` by ``evaluate.py --trust-file`` / ``train_agent.py --trust-file`` (inherited by worker processes):
#: model zips and replay buffers are then loaded by SB3's own unpickler, which runs whatever they name.
TRUST_ENV = "FEDSEL_TRUST_FILES"
#: The opt-in, as the refusals name it.
TRUST_FIX = ("if you trust this file (you made it, or know who did), pass --trust-file (evaluate.py, "
             "train_agent.py --resume) or set FEDSEL_TRUST_FILES=1 to let it run the code it names")

#: The plain-data globals SB3 zips and replay buffers hold: arrays, spaces' generators, tensors, schedules.
MODEL_GLOBALS = NUMPY_GLOBALS | NUMPY_RANDOM_GLOBALS | PLAIN_GLOBALS | frozenset({
    ("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_parameter"), ("torch", "device"),
    ("torch.storage", "_load_from_bytes"),  # answered by a weights_only stand-in (safe_pickle.SAFE_REPLACEMENTS)
    ("stable_baselines3.common.utils", "FloatSchedule"), ("stable_baselines3.common.utils", "LinearSchedule"),
    ("stable_baselines3.common.utils", "ConstantSchedule"),
    ("stable_baselines3.common.type_aliases", "TrainFreq"),
    ("stable_baselines3.common.type_aliases", "TrainFrequencyUnit"),
})
#: Packages whose classes of the kinds in :func:`_admit_class` a saved model may name (SB3's policies,
#: buffers, spaces, activations, optimizers; this package's policies and schedules).
_CLASS_PACKAGES = ("stable_baselines3.", "sb3_contrib.", "gymnasium.spaces.", "torch.nn.modules.", "torch.optim.",
                   "agents.")


def _admit_class(module: str, name: str) -> Any:
    """A class a saved model may name: from :data:`_CLASS_PACKAGES`, and a policy, buffer, space, torch
    module or optimizer, or one of this package's schedules (else None: refused)."""
    import importlib

    if not module.startswith(_CLASS_PACKAGES) or name.startswith("_"):
        return None
    try:
        obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    if not isinstance(obj, type):
        return None
    import gymnasium
    import torch
    from stable_baselines3.common.buffers import BaseBuffer
    from stable_baselines3.common.policies import BasePolicy

    from agents.training.hyperparams import LinearDecay

    kinds = (BasePolicy, BaseBuffer, gymnasium.spaces.Space, torch.nn.Module, torch.optim.Optimizer, LinearDecay)
    return obj if issubclass(obj, kinds) else None


def trusted() -> bool:
    """Whether this process was told (``--trust-file``) to load model files with SB3's own unpickler."""
    return os.environ.get(TRUST_ENV, "") == "1"


def safe_data_objects(path: Union[str, Path], what: str = "model", skip: Any = ()) -> Dict[str, Any]:
    """Every pickled entry of the SB3 zip ``path``'s ``data``, unpickled by the restricted unpickler, as
    SB3's ``custom_objects`` (so SB3 unpickles none of them itself).

    :raises ValueError: naming the file, the entry and what it would load, with the opt-in, when an
        entry names anything but plain data and the classes of :func:`_admit_class`.
    """
    try:
        with zipfile.ZipFile(path) as z:
            data = json.loads(z.read("data")) if "data" in z.namelist() else {}
    except (OSError, zipfile.BadZipFile, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot load {what} {str(path)!r} ({_reason(e)}); {DEFAULT_FIX}") from None
    objects: Dict[str, Any] = {}
    for key, item in (data.items() if isinstance(data, dict) else ()):
        if key in skip or not (isinstance(item, dict) and ":serialized:" in item):  # skip: the caller's own
            continue
        try:
            objects[key] = restricted_loads(base64.b64decode(str(item[":serialized:"])), MODEL_GLOBALS, _admit_class)
        except RefusedGlobal as e:
            raise ValueError(f"{what} {str(path)!r}: its pickled entry {key!r} is refused: {e}; {TRUST_FIX}") from None
        except (pickle.UnpicklingError, binascii.Error, EOFError, ValueError, TypeError, AttributeError) as e:
            raise ValueError(f"cannot load {what} {str(path)!r}: its pickled entry {key!r} is damaged "
                             f"({_reason(e)}); {DEFAULT_FIX}") from None
    return objects


def _reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def load_model(cls: Any, path: Union[str, Path], what: str = "model", fix: Optional[str] = None,
               trust: Optional[bool] = None, **kwargs: Any) -> Any:
    """``cls.load(path, **kwargs)``, its pickled ``data`` entries read by the restricted unpickler
    (:func:`safe_data_objects`) unless ``trust`` (default: :func:`trusted`).

    :raises ValueError: naming ``path`` and the ``fix`` when the file is missing or cannot be loaded, and
        naming the entry and the opt-in when it names code.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{what} {str(p)!r} does not exist")
    if not (trusted() if trust is None else trust):  # the caller's own custom_objects win
        given = kwargs.get("custom_objects") or {}
        kwargs["custom_objects"] = {**safe_data_objects(p, what, skip=given), **given}
    try:
        return cls.load(p, **kwargs)
    except Exception as e:  # noqa: BLE001 - torch, zipfile, json, pickle, SB3: all mean "not loadable"
        raise ValueError(f"cannot load {what} {str(p)!r} ({_reason(e)}); {fix or DEFAULT_FIX}") from e


def load_replay_buffer(model: Any, path: Union[str, Path], what: str = "replay buffer",
                       fix: Optional[str] = None, trust: Optional[bool] = None) -> None:
    """``model.load_replay_buffer(path)``, checking that the file exists first (else SB3 names ``path.pkl``);
    unless ``trust`` (default: :func:`trusted`), the buffer is read by the restricted unpickler.

    :raises ValueError: naming ``path`` and the ``fix`` when the file is missing or cannot be loaded, and
        the opt-in when it names code.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{what} {str(p)!r} does not exist; {fix or DEFAULT_FIX}")
    try:
        if trusted() if trust is None else trust:
            model.load_replay_buffer(p)
            return
        from stable_baselines3.common.buffers import ReplayBuffer

        with open(p, "rb") as f:
            buffer = restricted_load(f, MODEL_GLOBALS, _admit_class)
        if not isinstance(buffer, ReplayBuffer):
            raise TypeError(f"it holds a {type(buffer).__name__}, not a replay buffer")
        buffer.device = model.device  # as SB3's load_replay_buffer does
        model.replay_buffer = buffer
    except RefusedGlobal as e:
        raise ValueError(f"{what} {str(p)!r} is refused: {e}; {TRUST_FIX}") from None
    except Exception as e:  # noqa: BLE001 - pickle, EOF, zip: all mean "not loadable"
        raise ValueError(f"cannot load {what} {str(p)!r} ({_reason(e)}); {fix or DEFAULT_FIX}") from e
