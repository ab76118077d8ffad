"""The algorithms ``train_agent.py --algo`` knows: which class, which action modes, how each is deployed.

FAVOR's Double DQN and SB3's DQN act in the ``one`` mode (``Discrete(N)``, one client a step) and are
deployed as FAVOR's top-K agent (:class:`agents.favor.FavorAgent`, the K highest Q-values, in a ``topk``
env); PPO and A2C act in any mode, sb3-contrib's MaskablePPO in ``one`` and ``subset`` (never picking an
unavailable client), SAC in ``topk``; these are deployed as they were trained. In the ``subset`` mode every
algorithm acts through :class:`fedsel_env.wrappers.SubsetRepair` (``agents/training/envs.py``): its
policies mark clients independently, so an over-full or empty subset gets the wrapper's documented rule.
"""
from __future__ import annotations

import copy
import importlib
from typing import Any, Callable, Dict, Mapping

#: What each algorithm is and which action modes (spaces) it can act in.
ALGOS: Dict[str, Dict[str, Any]] = {
    "favor": {"cls": "agents.favor:DoubleDQN", "modes": ("one",), "off_policy": True,
              "about": "FAVOR's Double DQN (seed 002) as the paper trains it (configs/favor.yml), in the "
                       "'one' mode, deployed as top-K"},
    "favor+": {"cls": "agents.favor:DoubleDQN", "modes": ("one",), "off_policy": True,
               "about": "FAVOR+, this suite's variant of FAVOR: the departures listed in configs/favor+.yml"},
    "dqn": {"cls": "stable_baselines3:DQN", "modes": ("one",), "off_policy": True,
            "about": "SB3's vanilla DQN, deployed as top-K like FAVOR"},
    "ppo": {"cls": "stable_baselines3:PPO", "modes": ("one", "topk", "subset"), "off_policy": False,
            "about": "SB3's PPO, acting in the env's own action mode"},
    "a2c": {"cls": "stable_baselines3:A2C", "modes": ("one", "topk", "subset"), "off_policy": False,
            "about": "SB3's A2C, acting in the env's own action mode"},
    "maskable_ppo": {"cls": "sb3_contrib:MaskablePPO", "modes": ("subset", "one"), "off_policy": False,
                     "about": "sb3-contrib's MaskablePPO: PPO that never picks a client "
                              "env.action_masks() marks unavailable, in the 'subset' or 'one' mode"},
    "pc_ppo": {"cls": "stable_baselines3:PPO", "modes": ("topk",), "off_policy": False, "deploy": "per_client",
               "about": "the per-client selector (agents/per_client_net.py, issue #19) trained by PPO on the "
                        "'topk' scores (configs/pc_ppo.yml); runs at any N"},
    "pc_dqn": {"cls": "agents.favor:DoubleDQN", "modes": ("one",), "off_policy": True, "deploy": "per_client",
               "about": "the per-client selector as per-client Q-values, Double DQN in the 'one' mode "
                        "(configs/pc_dqn.yml), deployed as top-K; runs at any N"},
    "sac": {"cls": "stable_baselines3:SAC", "modes": ("topk",), "off_policy": True,
            "about": "SB3's SAC, scoring clients in the 'topk' mode (a Box of N scores)"},
}
#: The action space of each action mode, for error messages.
MODE_SPACES = {"one": "Discrete(N)", "topk": "Box(N)", "subset": "MultiBinary(N)"}


def algo_entry(algo: str) -> Dict[str, Any]:
    """The :data:`ALGOS` entry of ``algo``; for an import path ``package.module:Class`` (any Stable-Baselines3
    algorithm class from outside the package) one that acts in every mode and is deployed as trained.

    :raises ValueError: for an unknown name (listing the algorithms), or a path that is no SB3 algorithm class.
    """
    from fedsel_env.registry import is_import_path

    if algo in ALGOS:
        return ALGOS[algo]
    if is_import_path(algo):
        from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

        from agents.saved_models import model_class

        cls = model_class(algo)  # ValueError: missing module or class, or no SB3 algorithm
        return {"cls": algo, "modes": ("one", "topk", "subset"), "off_policy": issubclass(cls, OffPolicyAlgorithm),
                "about": f"the SB3 algorithm class {algo}, acting in the env's own action mode"}
    raise ValueError(f"unknown --algo {algo!r}; algorithms: "
                     + "; ".join(f"{k} ({v['about']})" for k, v in ALGOS.items())
                     + "; or an SB3 algorithm class's import path 'package.module:Class'")


def check_algo(algo: str) -> None:
    """:raises ValueError: for an algorithm neither in :data:`ALGOS` nor an SB3 algorithm class's import path."""
    algo_entry(algo)


def check_action_mode(algo: str, mode: Any) -> None:
    """:raises ValueError: when the user asked for an action mode ``algo`` cannot act in, naming those that can."""
    modes = algo_entry(algo)["modes"]
    if mode is not None and mode not in modes:
        fits = sorted(a for a, s in ALGOS.items() if mode in s["modes"])
        raise ValueError(
            f"--algo {algo} cannot act in action_mode {mode!r} ({MODE_SPACES.get(mode, '?')}): it needs "
            f"{[f'{m} ({MODE_SPACES[m]})' for m in modes]}. Algorithms for {mode!r}: {fits}"
            + (" (FAVOR is trained in 'one' and deployed in 'topk' automatically)" if algo in ("favor", "favor+", "dqn") else ""))


def algorithm_class(algo: str) -> type:
    """The SB3 class behind ``--algo``."""
    module, name = algo_entry(algo)["cls"].split(":")
    return getattr(importlib.import_module(module), name)


def is_off_policy(algo: str) -> bool:
    """Whether ``algo`` keeps a replay buffer (saved with its checkpoints)."""
    return bool(algo_entry(algo)["off_policy"])


def deploy_fn(algo: str, env_config: Mapping[str, Any], spec: Any) -> Callable[[Any], Any]:
    """model → the policy that is evaluated: FAVOR's top-K agent for DQN-family models, the per-client
    agent for the per-client selector, the model otherwise."""
    if algo_entry(algo).get("deploy") == "per_client":
        from agents.per_client import PerClientAgent

        return lambda model: PerClientAgent(spec, model=model)
    if algo_entry(algo)["modes"] == ("one",):
        from agents.favor import FavorAgent

        return lambda model: FavorAgent.from_model(model, spec, env_config["flat_parts"])
    return lambda model: model


def eval_env_config(algo: str, env_config: Mapping[str, Any]) -> Dict[str, Any]:
    """The env the deployed form is evaluated in (FAVOR: top-K with Dict observations)."""
    if algo_entry(algo)["modes"] == ("one",):
        from agents.favor import deployment_config

        return deployment_config(env_config)
    return copy.deepcopy(dict(env_config))
