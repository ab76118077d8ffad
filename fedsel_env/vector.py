"""``FedSelectVectorEnv``: E federations stepped together in one process (issue #27).

Registered as every fedsel env id's ``vector_entry_point``, so
``gym.make_vec("fedsel/FedSelect-v0", num_envs=64)`` (``vectorization_mode="vector_entry_point"``, the
default when an id has one) returns it; ``FedSelectVectorEnv(64, preset="default")`` directly, or with
``configs=[...]`` one config per sub-env (their models must share an architecture to train together;
their federations, seeds, aggregators, adversaries and action modes may differ as long as the spaces agree).

Each sub-env is a :class:`~fedsel_env.env.FedSelectEnv`; its ``reset`` and ``step`` run as generators
(``reset_steps`` / ``step_steps``) that yield their local training as a ``TrainRequest`` and their loss and
evaluation passes as ``LossRequest`` / ``EvalRequest``. :func:`~fedsel_env.vector_training.drive` advances
the E generators together, answers the passes first and then trains every request of a round in one fused
call (:mod:`fedsel_env.vector_training`: all E × K selected clients' local SGD of an MLP / logistic
regression as one batched computation; other models per sub-env; the passes batched on a GPU). Everything
else — action decoding, availability, drop-outs, deadlines, the adversary, aggregation, the PCA projection,
the reward and ``info`` — is each sub-env's own code, so a sub-env's trajectory is the single env's with the
same seed and config, bit for bit (``tests/test_vector_env.py``). Sub-envs of one config build each
federation's data once (``fedsel_env.sim.data.SharedBuilds``).

Gymnasium 1.x's vector contract: ``reset(seed=s)`` seeds sub-env i with s + i (or a list of seeds),
``options={"reset_mask": mask}`` resets some; the autoreset mode is ``next_step`` by default (the step
after an episode ends resets that sub-env, ignores its action and returns reward 0, not terminated, not
truncated), ``same_step`` (the reset observation at once; the last one in ``info["final_obs"]``) or
``disabled``; ``info`` is batched with Gymnasium's ``_key`` masks. ``action_masks()`` gives (E, N).
Actions are checked for every sub-env before any of them moves: a batch that is not E actions (``(E - 1, N)``,
``(E + 1, N)``, a scalar, ``None``) or a bad action is a ``ValueError`` naming the sub-env, and nothing changes.
``reset_some`` / ``step_some`` move only the named sub-envs and return their results unbatched
(``fedsel_eval.vector_episodes`` plays whole episodes per sub-env with them); their indices must be integers in
[0, E) (a negative index, ``1.7``, ``True``, a list instead of a mapping: ``ValueError``, nothing moves). After
``close()`` every step and reset is refused. The memory check (:func:`refuse_too_many`) runs on the first sub-env,
before anything per sub-env is built or listed (``num_envs = 10**12`` is a ``ValueError`` naming the E that fits).
"""
from __future__ import annotations

import copy
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from .env import FedSelectEnv
from .reset_cache import ResetCache
from .server_view import PCA_BYTES_PER_WEIGHT
from .sim.data import SharedBuilds, sharing_builds
from .sim.limits import format_bytes, memory_budget
from .threads import torch_threads
from .vector_training import drive


def env_bytes(env: FedSelectEnv, shared_data: bool = False) -> tuple:
    """Lower bounds of the memory of sub-envs like ``env``: (once, per sub-env) bytes.

    Per sub-env: its federated data (unless the sub-envs share one federation's data), and the profiling
    round's N + 1 models, all held at once while their training is batched (twice: trained, and sent).
    Once: FAVOR's PCA over them (``PCA_BYTES_PER_WEIGHT``), fitted one sub-env at a time.
    """
    _, data = env._probe
    held = sum(t.numel() * t.element_size() for t in (data.x_train, data.y_train, data.x_test, data.y_test))
    models = 2 * 4 * (env.num_clients + 1) * env.model_size
    once = PCA_BYTES_PER_WEIGHT * (env.num_clients + 1) * env.model_size + (held if shared_data else 0)
    return int(once), int(models + (0 if shared_data else held))


def refuse_too_many(num_envs: int, once: int, per_env: int) -> None:
    """``ValueError`` naming the most sub-envs that fit when ``num_envs`` of them do not."""
    budget = memory_budget()
    need = once + num_envs * per_env
    if need > budget:
        fits = max((budget - once) // max(per_env, 1), 0)
        raise ValueError(f"num_envs = {num_envs} needs about {format_bytes(need)} of memory "
                         f"({format_bytes(per_env)} a sub-env: its data and the profiling round's models; "
                         f"{format_bytes(once)} once: the PCA), more than this machine's {format_bytes(budget)}: "
                         f"use num_envs <= {fits}")


def _autoreset_mode(value: Any) -> AutoresetMode:
    """An ``AutoresetMode``, its value (``"NextStep"``) or its name in snake case (``"next_step"``)."""
    if isinstance(value, AutoresetMode):
        return value
    for mode in AutoresetMode:
        if value in (mode.value, mode.name.lower()):
            return mode
    raise ValueError(f"autoreset_mode = {value!r} is invalid: expected one of "
                     f"{[m.name.lower() for m in AutoresetMode]} (or a gymnasium.vector.AutoresetMode)")


class FedSelectVectorEnv(VectorEnv):
    """E ``FedSelect`` envs in one batched simulator.

    :param num_envs: E.
    :param config: one config for every sub-env (``FedSelectEnv``'s ``config``), or ...
    :param configs: ... one config per sub-env (E of them; ``num_envs`` may then be left out).
    :param preset: a preset applied under each config.
    :param autoreset_mode: ``next_step`` (Gymnasium's default), ``same_step`` or ``disabled``.
    :param fields: config fields as keywords, merged over every sub-env's config.
    :raises ValueError: for E < 1, a configs list of another length, ``workers`` > 1, sub-envs whose spaces
        differ, or an E whose memory would not fit (naming the E that fits).
    """

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: Optional[int] = None, config: Optional[Mapping[str, Any]] = None,
                 preset: Optional[str] = None, configs: Optional[Sequence[Mapping[str, Any]]] = None,
                 autoreset_mode: Any = AutoresetMode.NEXT_STEP, render_mode: Optional[str] = None,
                 max_episode_steps: Optional[int] = None, **fields: Any) -> None:
        if max_episode_steps is not None:
            raise ValueError(f"max_episode_steps = {max_episode_steps!r}: FedSelect's episode length is the config's "
                             f"'max_rounds'; set that instead")
        if configs is None:
            if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
                raise ValueError(f"num_envs = {num_envs!r} is invalid: expected an integer >= 1")
            n = int(num_envs)  # one config for all: no list of E of them (E may be refused by the memory check)
        else:
            configs = list(configs)
            if not configs or (num_envs is not None and num_envs != len(configs)):
                raise ValueError(f"configs has {len(configs)} entries but num_envs = {num_envs!r}: give one config "
                                 f"per sub-env (and num_envs equal to their number, or leave it out)")
            n = len(configs)
        self.num_envs = n
        self.closed = False
        self.autoreset_mode = _autoreset_mode(autoreset_mode)
        self.metadata = {**self.metadata, "autoreset_mode": self.autoreset_mode}
        self.render_mode = render_mode
        self.envs: List[FedSelectEnv] = []
        # sub-envs of one config build its data once: the probe federation here, and at a reset every
        # federation that another sub-env holds (sim/data.py's SharedBuilds; 64 Fashion-MNIST sub-envs
        # took 0.45 s each to build one by one)
        self._builds = SharedBuilds()
        self._reset_cache = ResetCache()  # one for all sub-envs: equal resets are played once (reset_cache.py)
        for i in range(n):
            cfg = config if configs is None else configs[i]
            merged = {**copy.deepcopy(dict(cfg or {})), **fields}
            with sharing_builds(self._builds):
                env = FedSelectEnv(config=merged, preset=preset)
            if env.config["workers"] > 1:
                raise ValueError(f"sub-env {i}: config field 'workers' = {env.config['workers']} is invalid in the "
                                 f"vector env, which trains every sub-env's clients in one call: set workers: 1")
            if i == 0:
                # sub-envs of one config on one federation share its data (read-only)
                shared = env.config["federation_seed"] is not None and \
                    (configs is None or all(c == configs[0] for c in configs))
                refuse_too_many(self.num_envs, *env_bytes(env, shared))
                if shared:  # its federation's data, built once (the env keeps it as its probe)
                    with sharing_builds(self._builds):
                        env._federation(env.config["federation_seed"])
                self.single_observation_space, self.single_action_space = env.observation_space, env.action_space
            elif shared:
                env._probe = self.envs[0]._probe
            elif env.observation_space != self.single_observation_space or env.action_space != self.single_action_space:
                raise ValueError(f"sub-env {i}'s observation or action space differs from sub-env 0's "
                                 f"(num_clients, action_mode, observation, pca_components must agree)")
            env.reset_cache = self._reset_cache
            self.envs.append(env)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._threads = self.envs[0].config["torch_threads"]
        self._obs = create_empty_array(self.single_observation_space, n=self.num_envs, fn=np.zeros)
        self._env_obs: List[Any] = [None] * self.num_envs
        self._rewards = self._reward_array()
        self._terminations = np.zeros(self.num_envs, dtype=np.bool_)
        self._truncations = np.zeros(self.num_envs, dtype=np.bool_)
        self._autoreset = np.zeros(self.num_envs, dtype=np.bool_)

    def _reward_array(self) -> np.ndarray:
        dim = getattr(self.envs[0], "reward_dim", None)
        return np.zeros((self.num_envs, dim) if dim else (self.num_envs,), dtype=np.float64)

    # ------------------------------------------------------------------- reset
    def reset(self, *, seed: Any = None, options: Optional[Dict[str, Any]] = None):
        """Reset every sub-env (or those in ``options["reset_mask"]``); sub-env i gets seed ``seed + i``."""
        self._check_open("reset")
        if seed is None:
            seeds: List[Optional[int]] = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"reset seed list has {len(seeds)} entries: expected num_envs = {self.num_envs}")
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if mask is None:
            mask = np.ones(self.num_envs, dtype=np.bool_)
        elif not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (self.num_envs,) \
                or not mask.any():
            raise ValueError(f"options['reset_mask'] must be a bool numpy array of shape ({self.num_envs},) with at "
                             f"least one True")
        results = self._drive_resets({int(i): seeds[i] for i in np.flatnonzero(mask)}, options or None)
        infos: Dict[str, Any] = {}
        for i in sorted(results):
            self._env_obs[i], info = results[i]
            infos = self._add_info(infos, info, i)
        self._terminations[mask] = self._truncations[mask] = self._autoreset[mask] = False
        self._obs = concatenate(self.single_observation_space, self._env_obs, self._obs)
        return copy.deepcopy(self._obs), infos

    # -------------------------------------------------------------------- step
    def step(self, actions: Any):
        """One round in every sub-env (a reset in those whose episode ended last step, in ``next_step`` mode)."""
        self._check_open("step")
        if any(e is None for e in self._env_obs):
            raise RuntimeError("call reset() before step()")
        actions = self._split(actions)
        resetting = self._autoreset.copy() if self.autoreset_mode == AutoresetMode.NEXT_STEP else \
            np.zeros(self.num_envs, dtype=np.bool_)
        if self.autoreset_mode == AutoresetMode.DISABLED and self._autoreset.any():
            raise ValueError(f"sub-envs {np.flatnonzero(self._autoreset).tolist()} ended their episodes: with "
                             f"autoreset_mode 'disabled', reset them (options={{'reset_mask': ...}}) before stepping")
        self._check_actions({i: actions[i] for i in range(self.num_envs) if not resetting[i]})
        results = self._drive({i: (self.envs[i].reset_steps() if resetting[i] else self.envs[i].step_steps(actions[i]))
                               for i in range(self.num_envs)})
        finals = {}
        if self.autoreset_mode == AutoresetMode.SAME_STEP:
            ended = [i for i in range(self.num_envs) if results[i][2] or results[i][3]]
            finals = {i: results[i] for i in ended}
            restarted = self._drive({i: self.envs[i].reset_steps() for i in ended})
        infos: Dict[str, Any] = {}
        for i in range(self.num_envs):
            if resetting[i]:
                self._env_obs[i], info = results[i]
                self._rewards[i], self._terminations[i], self._truncations[i] = 0.0, False, False
            else:
                self._env_obs[i], self._rewards[i], self._terminations[i], self._truncations[i], info = results[i]
            if i in finals:
                infos = self._add_info(infos, {"final_obs": finals[i][0], "final_info": finals[i][4]}, i)
                self._env_obs[i], info = restarted[i]
            infos = self._add_info(infos, info, i)
        self._obs = concatenate(self.single_observation_space, self._env_obs, self._obs)
        self._autoreset = np.logical_or(self._terminations, self._truncations)
        return (copy.deepcopy(self._obs), np.copy(self._rewards), np.copy(self._terminations),
                np.copy(self._truncations), infos)

    def _drive(self, steps: Dict[int, Any]) -> Dict[int, Any]:
        """:func:`~fedsel_env.vector_training.drive` on the config's torch threads, data builds shared."""
        with torch_threads(self._threads), sharing_builds(self._builds):
            return drive(steps)

    def _drive_resets(self, seeds: Mapping[int, Optional[int]], options: Optional[Dict[str, Any]]) -> Dict[int, Any]:
        """The sub-envs' resets together; of those with equal reset keys (the same config and seeds) one plays the
        profiling round and the others restore its state from the shared reset cache afterwards
        (``fedsel_env/reset_cache.py``: the same results, bit for bit)."""
        first: Dict[int, Optional[int]] = {}
        later: Dict[int, Optional[int]] = {}
        keys = set()
        for i, s in seeds.items():
            key = self.envs[i].reset_key(s, options)
            if key is not None and (key in keys or key in self._reset_cache):
                later[i] = s
            else:
                first[i] = s
                keys.add(key)
        results = self._drive({i: self.envs[i].reset_steps(seed=s, options=options) for i, s in first.items()})
        if later:
            results.update(self._drive({i: self.envs[i].reset_steps(seed=s, options=options)
                                        for i, s in later.items()}))
        return {i: results[i] for i in seeds}

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise RuntimeError(f"{what}() on a closed FedSelectVectorEnv: close() released its sub-envs; make a new "
                               f"one")

    def _split(self, actions: Any) -> List[Any]:
        """The batch of E actions, one per sub-env. :raises ValueError: when it is not E of the single shape."""
        want = (self.num_envs, *self.single_action_space.shape)
        try:
            arr = np.asarray(actions)
        except ValueError:  # a ragged batch
            arr = np.asarray(None)
        if actions is None or arr.dtype == object or arr.shape != want:
            got = "None" if actions is None else f"shape {arr.shape}" if arr.dtype != object else "a ragged batch"
            raise ValueError(f"actions: expected one action per sub-env, an array of shape {want} (num_envs = "
                             f"{self.num_envs}, then the single action's shape {self.single_action_space.shape}); "
                             f"got {got}. Nothing moved")
        return list(iterate(self.action_space, arr))

    def _index(self, i: Any, what: str) -> int:
        """A sub-env index: an integer in [0, E). :raises ValueError: otherwise (a negative one is not counted
        from the end, a float is not rounded, a bool is not an index)."""
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)) or not 0 <= i < self.num_envs:
            raise ValueError(f"{what}: sub-env index {i!r} is invalid: expected an integer in [0, {self.num_envs}) "
                             f"(num_envs = {self.num_envs}). Nothing moved")
        return int(i)

    def _indexed(self, given: Any, what: str) -> Dict[int, Any]:
        """``given`` as {index: value}, every index checked. :raises ValueError: not a mapping, a bad index."""
        if not isinstance(given, Mapping):
            raise ValueError(f"{what}: expected a mapping of sub-env index to its value (e.g. {{0: ...}}), got a "
                             f"{type(given).__name__}. Nothing moved")
        return {self._index(i, what): v for i, v in given.items()}

    def _check_actions(self, actions: Mapping[int, Any]) -> None:
        """Every action decoded before any sub-env moves: a ``ValueError`` naming the first bad one."""
        for i, action in actions.items():
            env = self.envs[i]
            if env.federation is None:
                raise RuntimeError(f"sub-env {i}: call reset() before step()")
            try:
                env.action_mode.decode(action, env.view.available)
            except ValueError as e:
                raise ValueError(f"sub-env {i}: {e}") from None

    # ------------------------------------------------- some sub-envs, unbatched
    def reset_some(self, seeds: Mapping[int, Optional[int]],
                   options: Optional[Dict[str, Any]] = None) -> Dict[int, tuple]:
        """Reset the sub-envs named in ``seeds`` (index → seed) together; {index: (obs, info)}, each as the
        single env returns it (not batched). For drivers that play whole episodes per sub-env and leave
        some idle (``fedsel_eval``): the others do not move, and a later :meth:`step` sees these as reset.

        :raises ValueError: for an index that is not an integer in [0, E), before any sub-env moves."""
        self._check_open("reset_some")
        seeds = self._indexed(seeds, "reset_some")
        results = self._drive_resets(seeds, options)
        for i, (obs, _) in results.items():
            self.adopt(i, obs)
        return results

    def step_some(self, actions: Mapping[int, Any]) -> Dict[int, tuple]:
        """One step of the sub-envs named in ``actions`` (index → action) together, no autoreset;
        {index: (obs, reward, terminated, truncated, info)}, each as the single env returns it. The
        others do not move. Every index and action is checked before any sub-env moves (``ValueError`` naming it)."""
        self._check_open("step_some")
        actions = self._indexed(actions, "step_some")
        self._check_actions(actions)
        results = self._drive({i: self.envs[i].step_steps(a) for i, a in actions.items()})
        for i, (obs, _, terminated, truncated, _) in results.items():
            self._env_obs[i] = obs
            self._terminations[i], self._truncations[i] = terminated, truncated
            self._autoreset[i] = terminated or truncated
        return results

    def adopt(self, index: int, obs: Any) -> None:
        """Sub-env ``index`` was moved on its own (an episode replayed for ``--resume``): go on from ``obs``."""
        self._env_obs[index] = obs
        self._autoreset[index] = self._terminations[index] = self._truncations[index] = False

    # ----------------------------------------------------------------- queries
    def action_masks(self) -> np.ndarray:
        """(E, N): which clients are available in each sub-env's coming round (sb3-contrib's convention)."""
        return np.stack([env.action_masks() for env in self.envs])

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple:
        """Each sub-env's attribute ``name`` (called with the arguments when it is a method), as SyncVectorEnv."""
        out = []
        for env in self.envs:
            attr = getattr(env, name)
            out.append(attr(*args, **kwargs) if callable(attr) else attr)
        return tuple(out)

    def get_attr(self, name: str) -> tuple:
        """Each sub-env's attribute ``name``."""
        return tuple(getattr(env, name) for env in self.envs)

    def close_extras(self, **kwargs: Any) -> None:
        for env in getattr(self, "envs", []):  # none yet when the constructor refused its arguments
            env.close()


__all__ = ["FedSelectVectorEnv", "env_bytes", "refuse_too_many"]
