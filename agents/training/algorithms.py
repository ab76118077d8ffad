"""What ``train_agent.py`` asks of an algorithm, read off the one table (``agents/deploy.py``: ``ALGORITHMS``).

FAVOR's Double DQN and SB3's DQN act in the ``one`` mode (``Discrete(N)``, one client a step) and are
deployed as FAVOR's top-K agent (:class:`agents.favor.FavorAgent`, the K highest Q-values, in a ``topk``
env); PPO and A2C act in any mode, sb3-contrib's MaskablePPO in ``one`` and ``subset`` (never picking an
unavailable client), SAC in ``topk``; these are deployed as they were trained. In the ``subset`` mode every
algorithm acts through :class:`fedsel_env.wrappers.SubsetRepair` (``agents/training/envs.py``): its
policies mark clients independently, so an over-full or empty subset gets the wrapper's documented rule.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Dict, Mapping

from agents.deploy import ALGORITHMS, algorithm, model_class, trainable_algorithms

#: The action space of each action mode, for error messages.
MODE_SPACES = {"one": "Discrete(N)", "topk": "Box(N)", "subset": "MultiBinary(N)"}


def check_algo(algo: str) -> None:
    """:raises ValueError: for an algorithm neither trainable in the table nor an SB3 algorithm class's import path."""
    if not algorithm(algo).trainable:
        raise ValueError(f"--algo {algo}: its saved models load (evaluate.py --policy {algo}:MODEL.zip), but "
                         f"train_agent.py does not train it; algorithms: {trainable_algorithms()}")


def check_action_mode(algo: str, mode: Any) -> None:
    """:raises ValueError: when the user asked for an action mode ``algo`` cannot act in, naming those that can."""
    entry = algorithm(algo)
    if mode is not None and mode not in entry.modes:
        fits = sorted(a.name for a in ALGORITHMS.values() if a.trainable and mode in a.modes)
        raise ValueError(
            f"--algo {algo} cannot act in action_mode {mode!r} ({MODE_SPACES.get(mode, '?')}): it needs "
            f"{[f'{m} ({MODE_SPACES[m]})' for m in entry.modes]}. Algorithms for {mode!r}: {fits}"
            + (" (FAVOR is trained in 'one' and deployed in 'topk' automatically)" if entry.deploy == "top_k" else ""))


def algorithm_class(algo: str) -> type:
    """The SB3 class behind ``--algo``."""
    return model_class(algo)


def is_off_policy(algo: str) -> bool:
    """Whether ``algo`` keeps a replay buffer (saved with its checkpoints)."""
    return algorithm(algo).off_policy


def deploy_fn(algo: str, env_config: Mapping[str, Any], spec: Any) -> Callable[[Any], Any]:
    """model → the policy that is evaluated during training (in :func:`eval_env_config`'s env): the
    algorithm's deployed form (FAVOR's top-K agent, the per-client agent), or the model itself where it
    acts in its training env as trained."""
    dep = algorithm(algo).deployment
    if dep.env_config is None:
        return lambda model: model
    return lambda model: dep.selector(model, spec, env_config, None)


def eval_env_config(algo: str, env_config: Mapping[str, Any]) -> Dict[str, Any]:
    """The env the deployed form is evaluated in (FAVOR: top-K with Dict observations)."""
    dep = algorithm(algo).deployment
    return dep.env_config(env_config) if dep.env_config is not None else copy.deepcopy(dict(env_config))
