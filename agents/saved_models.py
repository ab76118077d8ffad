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

import json
import zipfile
from pathlib import Path
from typing import Any, Dict, Optional, Union

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


def _reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def load_model(cls: Any, path: Union[str, Path], what: str = "model", fix: Optional[str] = None,
               **kwargs: Any) -> Any:
    """``cls.load(path, **kwargs)``.

    :raises ValueError: naming ``path`` and the ``fix`` when the file is missing or cannot be loaded.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{what} {str(p)!r} does not exist")
    try:
        return cls.load(p, **kwargs)
    except Exception as e:  # noqa: BLE001 - torch, zipfile, json, pickle, SB3: all mean "not loadable"
        raise ValueError(f"cannot load {what} {str(p)!r} ({_reason(e)}); {fix or DEFAULT_FIX}") from e


def load_replay_buffer(model: Any, path: Union[str, Path], what: str = "replay buffer",
                       fix: Optional[str] = None) -> None:
    """``model.load_replay_buffer(path)``, checking that the file exists first (else SB3 names ``path.pkl``).

    :raises ValueError: naming ``path`` and the ``fix`` when the file is missing or cannot be loaded.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{what} {str(p)!r} does not exist; {fix or DEFAULT_FIX}")
    try:
        model.load_replay_buffer(p)
    except Exception as e:  # noqa: BLE001 - pickle, EOF, zip: all mean "not loadable"
        raise ValueError(f"cannot load {what} {str(p)!r} ({_reason(e)}); {fix or DEFAULT_FIX}") from e
