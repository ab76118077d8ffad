"""Cover-aware tokens for SB3 learners: ``kcenter_cover``'s state appended to every client's row (issue #41).

The best single heuristic of FedSelect-Bench, ``kcenter_cover`` (``agents/kcenter_cover.py``), and the learned
``set_es`` both read a state the observation does not hold: which clients the current farthest-point cover has
used, each client's distance to it, and the cover's pick this round (:class:`agents.set_distill.CoverTracker`,
:data:`agents.set_distill.COVER_FEATURES`). It is a function of the episode so far — the profiling round's model
rows and every round's selection — so a memoryless SB3 policy cannot compute it from one observation.
:class:`CoverFeatures` keeps one tracker per training env and appends the three columns to ``obs["clients"]``,
the way ``set_distill_cover`` and ``set_es`` see them; at deployment :class:`agents.per_client.PerClientAgent`
keeps its own tracker for a model trained so (the columns come from the clients actually selected, so the
learner and the deployed agent see the same numbers).

The wrapper is applied by ``train_agent.py`` for a policy class that says ``cover_features = True``
(``agents/plackett_luce.py``'s :class:`~agents.plackett_luce.CoverPlackettLucePolicy`, the ``pl_ppo_cover``
design). It follows SB3's ``VecEnvWrapper`` contract: the batched vector env, ``DummyVecEnv`` and
``SubprocVecEnv`` beneath it, auto-reset (the ``terminal_observation`` carries the ended episode's columns) and
``--resume``'s replay of the interrupted episodes (:meth:`CoverFeatures.env_method`: the tracker is rebuilt from
the replayed episode's first observation and each step's selection).
"""
from __future__ import annotations

from typing import Any, List, Sequence

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from fedsel_env.spec import SelectionSpec

from .set_distill import COVER_FEATURES, CoverTracker, with_cover_columns


def cover_columns(space: spaces.Dict, spec: SelectionSpec) -> int:
    """How many columns ``space``'s ``clients`` rows hold beyond ``spec``'s client features: 0, or
    ``len(COVER_FEATURES)`` for cover-aware observations.

    :raises ValueError: for any other width."""
    extra = int(space["clients"].shape[1]) - len(spec.client_features)
    if extra not in (0, len(COVER_FEATURES)):
        raise ValueError(f"obs['clients'] has {space['clients'].shape[1]} columns: expected the env's "
                         f"{len(spec.client_features)} client features, or those and kcenter_cover's "
                         f"{list(COVER_FEATURES)} (agents/cover_tokens.py)")
    return extra


def _row(obs: Any, i: int) -> dict:
    return {k: np.asarray(v[i]) for k, v in obs.items()}


class CoverFeatures(VecEnvWrapper):
    """A ``VecEnv`` whose Dict observations carry :data:`~agents.set_distill.COVER_FEATURES` after each client's
    features, one :class:`~agents.set_distill.CoverTracker` per env (module docstring).

    :param venv: the training envs (Dict observations, every env the same N and K).
    :param spec: the problem's public description (K and the client features' names).
    """

    #: not a SubprocVecEnv itself: ``agents.training.stream``'s replay must come through :meth:`env_method`
    remotes = None

    def __init__(self, venv: VecEnv, spec: SelectionSpec) -> None:
        space = venv.observation_space
        if not isinstance(space, spaces.Dict) or "clients" not in space.spaces or "weights" not in space.spaces:
            raise ValueError(f"cover-aware tokens read Dict observations with 'weights' and 'clients' (env config "
                             f"observation: dict), got {space}")
        if cover_columns(space, spec):
            raise ValueError("these observations carry kcenter_cover's columns already: wrap the envs once")
        super().__init__(venv, observation_space=with_cover_columns(space))
        self.spec = spec
        self.trackers = [CoverTracker(spec.clients_per_round, spec) for _ in range(self.num_envs)]

    def _augment(self, i: int, obs: dict, start: bool) -> dict:
        tracker = self.trackers[i]
        if start:
            tracker.points = None
        tracker.observe(obs)
        return tracker.augment(obs)

    def _stack(self, rows: Sequence[dict]) -> dict:
        return {k: np.stack([r[k] for r in rows]) for k in rows[0]}

    def reset(self) -> Any:
        obs = self.venv.reset()
        self.reset_infos = self.venv.reset_infos  # how each episode began: the episode stream (--resume) reads it
        return self._stack([self._augment(i, _row(obs, i), True) for i in range(self.num_envs)])

    def step_wait(self) -> Any:
        obs, rewards, dones, infos = self.venv.step_wait()
        self.reset_infos = self.venv.reset_infos  # the envs that reset themselves just now
        rows = []
        for i in range(self.num_envs):
            if dones[i]:
                terminal = infos[i].get("terminal_observation")
                if terminal is not None:  # the ended episode's last observation, with that episode's cover
                    infos[i]["terminal_observation"] = self._augment(i, dict(terminal), False)
            rows.append(self._augment(i, _row(obs, i), bool(dones[i])))
        return self._stack(rows), rewards, dones, infos

    def env_method(self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any) -> List[Any]:
        """As the envs' own; ``replay_episode`` (``--resume``) also rebuilds the replayed envs' trackers from the
        replay's first observation and each step's selection (``agents.training.stream.StreamRecorder``), and
        returns the replayed observation with the cover's columns."""
        out = self.venv.env_method(method_name, *method_args, indices=indices, **method_kwargs)
        if method_name != "replay_episode":
            return out
        ids = list(range(self.num_envs)) if indices is None else (
            [int(indices)] if np.isscalar(indices) else [int(i) for i in indices])
        for i, reply in zip(ids, out):
            if not reply.get("ok") or reply.get("obs") is None:
                continue
            if "first_obs" not in reply:
                reply.update(ok=False, why="cover-aware tokens: the replay did not report the episode's first "
                                           "observation and selections (agents.training.stream.StreamRecorder)")
                continue
            tracker = self.trackers[i]
            tracker.points = None
            tracker.observe(reply["first_obs"])
            for selected in reply["selected"]:
                tracker.fold(np.asarray(selected, dtype=bool))
            reply["obs"] = tracker.augment(reply["obs"])
        return out


__all__ = ["CoverFeatures", "cover_columns"]
