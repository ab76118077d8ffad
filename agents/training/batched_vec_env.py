"""SB3's ``VecEnv`` over :class:`fedsel_env.vector.FedSelectVectorEnv`: E federations in one process (issue #27).

``train_agent.py --n-envs E`` trains on it by default (``--vec-env batched``; ``sync`` / ``async`` give SB3's
``DummyVecEnv`` / ``SubprocVecEnv`` of single envs). It gives SB3 what those give it, so every algorithm,
FAVOR's Double DQN and the callbacks run unchanged:

- SB3's autoreset: an episode's end resets that sub-env in the same ``step_wait`` (the sub-envs that ended
  are reset together, their profiling rounds trained in one call), with the last observation in
  ``info["terminal_observation"]`` and ``info["TimeLimit.truncated"]``;
- Monitor's ``info["episode"]`` (``r``, ``l``, ``t``) at each episode's end;
- :mod:`agents.training.stream`'s episode stream: how each episode began in ``reset_infos[i]["episode_start"]``,
  and ``env_method("replay_episode", ...)`` for ``--resume``;
- ``env_method("action_masks")`` for MaskablePPO, ``get_attr`` / ``set_attr`` / ``env_method`` on the sub-envs.

The ``subset`` action mode (``SubsetRepair``'s learner-facing wrapper) is not batched: ``make_vec_env`` uses
``sync`` for it.
"""
from __future__ import annotations

import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv

from .stream import START_KEY, StreamRecorder


def unbatch_info(info: Mapping[str, Any], n: int) -> List[Dict[str, Any]]:
    """Gymnasium's batched ``info`` (arrays with ``_key`` masks) → one dict per sub-env."""
    out: List[Dict[str, Any]] = [{} for _ in range(n)]
    for key, value in info.items():
        if key.startswith("_") and key[1:] in info:
            continue
        present = info.get(f"_{key}", np.ones(n, dtype=bool))
        per_env = unbatch_info(value, n) if isinstance(value, dict) else value
        for i in np.flatnonzero(present):
            out[i][key] = per_env[i]
    return out


class BatchedVecEnv(VecEnv):
    """SB3 ``VecEnv`` of ``n_envs`` sub-envs of one config, stepped by one ``FedSelectVectorEnv``.

    :param config: the (validated) env config every sub-env gets.
    :param n_envs: E.
    """

    def __init__(self, config: Mapping[str, Any], n_envs: int) -> None:
        from fedsel_env.vector import FedSelectVectorEnv

        self.venv = FedSelectVectorEnv(n_envs, config=dict(config), autoreset_mode="disabled")
        super().__init__(n_envs, self.venv.single_observation_space, self.venv.single_action_space)
        self._actions: Any = None
        self._ep_return = np.zeros(n_envs)
        self._ep_length = np.zeros(n_envs, dtype=np.int64)
        self._t0 = time.time()

    def _row(self, obs: Any, i: int) -> Any:
        return {k: v[i].copy() for k, v in obs.items()} if isinstance(obs, dict) else obs[i].copy()

    def _starts(self, ids: Sequence[int], seeds: Sequence[Optional[int]]) -> List[Dict[str, Any]]:
        """How the episodes about to begin start (the stream's record): the seed, or the generator's state."""
        return [{"seed": int(s)} if s is not None else {"rng": self.venv.envs[i].np_random.bit_generator.state}
                for i, s in zip(ids, seeds)]

    def reset(self) -> Any:
        seeds = [None if s is None else int(s) for s in self._seeds]
        starts = self._starts(range(self.num_envs), seeds)
        obs, info = self.venv.reset(seed=seeds)
        self.reset_infos = [{**d, START_KEY: s} for d, s in zip(unbatch_info(info, self.num_envs), starts)]
        self._ep_return[:], self._ep_length[:] = 0.0, 0
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> Any:
        obs, rewards, terminated, truncated, info = self.venv.step(self._actions)
        infos = unbatch_info(info, self.num_envs)
        dones = terminated | truncated
        for i in range(self.num_envs):  # as DummyVecEnv sets it on every step
            infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        self._ep_return += rewards
        self._ep_length += 1
        ended = np.flatnonzero(dones)
        if ended.size:
            now = round(time.time() - self._t0, 6)
            for i in ended:
                infos[i]["terminal_observation"] = self._row(obs, i)
                infos[i]["episode"] = {"r": round(float(self._ep_return[i]), 6), "l": int(self._ep_length[i]), "t": now}
            starts = self._starts(ended, [None] * ended.size)
            new_obs, new_info = self.venv.reset(options={"reset_mask": dones})
            new_infos = unbatch_info(new_info, self.num_envs)
            for j, i in enumerate(ended):
                if isinstance(obs, dict):
                    for k in obs:
                        obs[k][i] = new_obs[k][i]
                else:
                    obs[i] = new_obs[i]
                self.reset_infos[i] = {**new_infos[i], START_KEY: starts[j]}
            self._ep_return[ended], self._ep_length[ended] = 0.0, 0
        return obs, rewards.astype(np.float32), dones, infos

    # ------------------------------------------------------------- sub-envs
    def _indices(self, indices: Any) -> List[int]:
        """SB3's ``indices``: None (all), one index or an iterable of them, each an integer in [0, n_envs).

        :raises ValueError: for anything else (a negative index is not counted from the end, 1.7 is not rounded)."""
        if indices is None:
            return list(range(self.num_envs))
        many = indices if isinstance(indices, (list, tuple, range, np.ndarray)) else [indices]
        for i in many:
            if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)) or not 0 <= i < self.num_envs:
                raise ValueError(f"indices {indices!r:.60} is invalid: expected None, or integers in "
                                 f"[0, {self.num_envs}) (n_envs = {self.num_envs})")
        return [int(i) for i in many]

    def env_method(self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any) -> List[Any]:
        out = []
        for i in self._indices(indices):
            if method_name == "replay_episode":  # agents.training.stream's --resume: the sub-env replays alone
                reply = StreamRecorder(self.venv.envs[i]).replay_episode(*method_args, **method_kwargs)
                self.venv.adopt(i, reply.get("obs"))
                self._ep_return[i], self._ep_length[i] = 0.0, len(method_args[1]) if len(method_args) > 1 else 0
                out.append(reply)
            else:
                out.append(getattr(self.venv.envs[i], method_name)(*method_args, **method_kwargs))
        return out

    def get_attr(self, attr_name: str, indices: Any = None) -> List[Any]:
        return [getattr(self.venv.envs[i], attr_name) for i in self._indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        for i in self._indices(indices):
            setattr(self.venv.envs[i], attr_name, value)

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> List[bool]:
        from stable_baselines3.common.monitor import Monitor

        return [wrapper_class is Monitor for _ in self._indices(indices)]  # it does Monitor's bookkeeping

    def close(self) -> None:
        self.venv.close()


__all__ = ["BatchedVecEnv", "unbatch_info"]
