"""The envs of a training run: the env config checked against the algorithm, the training and evaluation envs.

The training env config is layered, later wins: the preset, the algorithm's ``env_config`` (from its
hyper-parameter entry: its natural action mode and observation), the YAML file's keys, ``--env-kwargs``.
Training envs run in ``SubprocVecEnv`` worker processes when there are several (one torch thread each);
the evaluation env, in the deployed form, runs in the learner's process. In the ``subset`` action mode both
are wrapped in :class:`fedsel_env.wrappers.SubsetRepair` (a learner's policy marks clients independently;
the wrapper's rule turns an over-full or empty subset into a round, and gives MaskablePPO its 2N masks).
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Dict, Mapping, Optional

from .algorithms import check_action_mode


def build_env_config(algo: str, preset: Optional[str], explicit: Mapping[str, Any],
                     algo_env_config: Mapping[str, Any]) -> Dict[str, Any]:
    """The complete, validated training env config, checked against the algorithm.

    ``explicit`` is what the user set (the YAML file's keys, then ``--env-kwargs``). An action mode the
    user set explicitly and the algorithm cannot act in is an error; one that only came from the
    defaults is replaced by the algorithm's.
    """
    from fedsel_env.config import make_config

    check_action_mode(algo, explicit.get("action_mode"))
    cfg = make_config({**dict(algo_env_config), **dict(explicit)}, preset=preset)
    if algo in ("favor", "favor+") and cfg["observation"] != "flat":
        raise ValueError(f"--algo {algo} needs observation: flat (FAVOR's Q-network reads the flattened state); "
                         f"got observation {cfg['observation']!r}")
    return cfg


def make_env_fn(config: Mapping[str, Any], rank: int) -> Callable[[], Any]:
    """A picklable env factory for a VecEnv worker (one torch thread per worker)."""

    def _init():
        import torch
        from stable_baselines3.common.monitor import Monitor

        import fedsel_env  # noqa: F401  (registers the ids)
        from fedsel_env.env import FedSelectEnv

        from agents.training.stream import StreamRecorder

        torch.set_num_threads(1)
        # StreamRecorder: how each episode began, so that --resume can continue the stream (stream.py)
        return StreamRecorder(Monitor(for_learners(FedSelectEnv(config=copy.deepcopy(dict(config))))))

    return _init


#: how ``--n-envs`` envs run (``train_agent.py --vec-env``)
VEC_ENVS = ("batched", "sync", "async")


def make_vec_env(config: Mapping[str, Any], n_envs: int, kind: str = "batched") -> Any:
    """``n_envs`` training envs: one env in this process (``DummyVecEnv``) for one; for more, ``kind``:

    ``batched`` — :class:`agents.training.batched_vec_env.BatchedVecEnv`, E federations in one
    ``FedSelectVectorEnv`` (the ``subset`` mode, whose learner-facing wrapper is per env, runs ``sync``);
    ``sync`` — SB3's ``DummyVecEnv``; ``async`` — SB3's ``SubprocVecEnv`` (a worker process each).
    """
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    if kind not in VEC_ENVS:
        raise ValueError(f"--vec-env {kind!r} is invalid: expected one of {list(VEC_ENVS)}")
    fns = [make_env_fn(config, i) for i in range(n_envs)]
    if n_envs == 1 or (kind == "batched" and config["action_mode"] == "subset") or kind == "sync":
        return DummyVecEnv(fns)
    if kind == "batched":
        from .batched_vec_env import BatchedVecEnv

        return BatchedVecEnv(config, n_envs)
    return SubprocVecEnv(fns)


def close_envs(*vec_envs: Any) -> None:
    """Close ``vec_envs`` and their worker processes, even when those are gone already (a Ctrl-C reaches
    the ``SubprocVecEnv`` workers too)."""
    for vec_env in vec_envs:
        try:
            vec_env.close()
        except (OSError, EOFError):  # BrokenPipeError, ConnectionResetError: a worker had ended
            for proc in getattr(vec_env, "processes", []):
                proc.join(timeout=5)
                if proc.is_alive():
                    proc.kill()


def make_eval_env(config: Mapping[str, Any]) -> Any:
    """One env in this process (a ``DummyVecEnv``) for evaluating the deployed form."""
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from fedsel_env.env import FedSelectEnv

    return DummyVecEnv([lambda: Monitor(for_learners(FedSelectEnv(config=config)))])


def for_learners(env: Any) -> Any:
    """``env`` as a learner acts in it: wrapped in ``SubsetRepair`` in the ``subset`` mode, as it is otherwise."""
    from fedsel_env.wrappers import SubsetRepair

    return SubsetRepair(env) if env.unwrapped.config["action_mode"] == "subset" else env


def steps_note(config: Mapping[str, Any], n_envs: int = 1) -> str:
    """The first line of a training log: what one SB3 step (``total_timesteps``, ``ep_len_mean``) is in rounds.

    In the ``one`` mode a step is one client pick, so SB3's episode length counts picks while
    ``rounds_to_target`` and the ``fl/`` metrics count rounds (a pick is ``one_mode_step`` of a round).
    """
    k = int(config["clients_per_round"])
    if config["action_mode"] != "one":
        return (f"action_mode {config['action_mode']!r}: one step = one round of up to K = {k} clients, so SB3's "
                f"ep_len_mean counts rounds; {n_envs} env(s) step together")
    step = config.get("one_mode_step", 1.0)
    share = 1.0 / k if step == "1/K" else float(step)
    if share == 1.0:
        return (f"action_mode 'one': one step = one client picked, a whole round of one client (one_mode_step 1, "
                f"FAVOR's), so SB3's ep_len_mean counts those one-client rounds; {n_envs} env(s) step together")
    return (f"action_mode 'one': one step = one client picked, counted as {share:g} of a round (one_mode_step "
            f"{step!r}), so SB3's ep_len_mean counts picks: about {1 / share:g} steps a round; rounds_to_target "
            f"and the fl/ metrics count rounds; {n_envs} env(s) step together")
