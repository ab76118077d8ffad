"""The training episode stream, carried across ``--resume`` (issue #15, item 4).

Each training env draws its episodes' seeds from its own generator (``env.np_random``): SB3 seeds it at
the first reset (``seed + i`` for env ``i``) and every later reset continues it. A resumed process has new
envs, and SB3 seeds them again from ``seed`` when it loads the model: without more, the resumed run plays
the run's first episodes again. So a checkpoint carries where the stream stood, as
``model.episode_stream`` (saved inside the model zip with the rest of the model):

* ``envs``: per env, how its current episode began — the generator's state just before that reset (or
  the seed it was given) — and the actions it has taken since. The :class:`StreamRecorder` wrapper, in
  the env's process, reports the first in the reset ``info``; :class:`StreamTracker` (run by the
  checkpoint callback) collects both in the learner's process, so a Ctrl-C that also ends the env worker
  processes loses nothing;
* ``rng``, written with each checkpoint: the learner's generators — NumPy's, Python's and torch's global
  ones (SB3 draws replay batches from NumPy's and PPO's actions from torch's) and the action space's
  (FAVOR's ``exploration_rng`` is an attribute of the model, saved anyway).

:func:`restore` rebuilds it in the resumed process: each env replays its current episode (same start,
same actions; the env is deterministic) up to where the checkpoint left it, the model goes on from the
replayed observation instead of a reset, and the generators are set back. A checkpoint written at a
rollout boundary (every periodic one, and the last) thus continues exactly as the uninterrupted run
would have: the same episodes, exploration, replay buffer and updates (``tests/test_train_agent.py``).
A Ctrl-C lands anywhere; its checkpoint keeps the episode stream but may lose the interrupted step.
"""
from __future__ import annotations

import random
from typing import Any, Dict, List, Optional, Sequence

import gymnasium as gym
import numpy as np
import torch

#: the reset ``info`` key under which :class:`StreamRecorder` reports how the episode began
START_KEY = "episode_start"


class StreamRecorder(gym.Wrapper):
    """Reports how each episode began (reset ``info[START_KEY]``) and replays an episode on request."""

    def reset(self, *, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None):
        if seed is not None:
            start: Dict[str, Any] = {"seed": int(seed)}
        else:  # the state the episode's seeds are about to be drawn from
            start = {"rng": self.env.unwrapped.np_random.bit_generator.state}
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, {**info, START_KEY: start}

    def replay_episode(self, start: Dict[str, Any], actions: Sequence[Any]) -> Dict[str, Any]:
        """Start the episode ``start`` describes and take ``actions``; return ``{"obs", "ok", "why"}``, and for
        Dict observations also ``first_obs`` and ``selected`` (each step's ``selected_last_round`` column as
        booleans): what a learner-side wrapper that follows the episode (``agents/cover_tokens.py``) rebuilds
        its state from.

        Never raises (it runs inside SB3's worker loop, which would die): ``ok`` is False when the
        replay did not follow the recorded episode.
        """
        try:
            if "seed" in start:
                obs, _ = self.env.reset(seed=start["seed"])
            else:
                self.env.unwrapped.np_random.bit_generator.state = start["rng"]
                obs, _ = self.env.reset()
            trace = isinstance(obs, dict) and "clients" in obs
            first, selected = obs, []
            for n, action in enumerate(actions):
                obs, _, terminated, truncated, _ = self.env.step(action)
                if trace:
                    selected.append(self.env.unwrapped.selection_spec.feature(obs, "selected_last_round") > 0.5)
                if terminated or truncated:
                    return {"obs": obs, "ok": False, "why": f"the replayed episode ended after {n + 1} of "
                                                            f"{len(actions)} steps"}
            return {"obs": obs, "ok": True, "why": "", **({"first_obs": first, "selected": selected} if trace else {})}
        except Exception as e:  # noqa: BLE001 - reported to the learner, which says what happened
            return {"obs": None, "ok": False, "why": f"{type(e).__name__}: {e}"}


def capture_rngs(model: Any) -> Dict[str, Any]:
    """The learner's generators (those that SB3 seeds on load) as they are now."""
    out: Dict[str, Any] = {"numpy": np.random.get_state(), "python": random.getstate(),
                           "torch": torch.get_rng_state()}
    space_rng = getattr(model.action_space, "_np_random", None)
    if space_rng is not None:
        out["action_space"] = space_rng.bit_generator.state
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def restore_rngs(model: Any, rngs: Dict[str, Any]) -> None:
    np.random.set_state(rngs["numpy"])
    random.setstate(rngs["python"])
    torch.set_rng_state(rngs["torch"])
    if "action_space" in rngs:
        model.action_space.np_random.bit_generator.state = rngs["action_space"]
    if "cuda" in rngs and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rngs["cuda"])


class StreamTracker:
    """Keeps ``model.episode_stream`` up to date from the learner's side of a ``VecEnv`` (a callback's helper)."""

    def start(self, model: Any, vec_env: Any) -> None:
        """At the start of ``learn``: a restored stream goes on; else the envs were just reset."""
        if getattr(model, "episode_stream", None) is not None:
            return
        infos = list(getattr(vec_env, "reset_infos", None) or [])
        if len(infos) != vec_env.num_envs or not all(START_KEY in i for i in infos):
            model.episode_stream = None  # envs without StreamRecorder: nothing to carry
            return
        model.episode_stream = {"envs": [{"start": i[START_KEY], "actions": []} for i in infos], "rng": None}

    def step(self, model: Any, vec_env: Any, local_vars: Dict[str, Any]) -> None:
        """After one step of every env (a callback's ``on_step``): record the actions, note new episodes."""
        stream = getattr(model, "episode_stream", None)
        if stream is None:
            return
        # on-policy algorithms send the clipped actions to the envs; off-policy ones, ``actions``
        actions = local_vars.get("clipped_actions", local_vars.get("actions"))
        dones = local_vars["dones"]
        for i, env in enumerate(stream["envs"]):
            if dones[i]:  # the env has reset itself: its new episode began as its reset info says
                stream["envs"][i] = {"start": vec_env.reset_infos[i][START_KEY], "actions": []}
            else:
                a = actions[i]
                env["actions"].append(a.copy() if isinstance(a, np.ndarray) else a)

    @staticmethod
    def snapshot(model: Any) -> None:
        """Before a checkpoint is written: the generators, as they are at this point of the run."""
        if getattr(model, "episode_stream", None) is not None:
            model.episode_stream["rng"] = capture_rngs(model)


def _stack(obs: List[Any]) -> Any:
    if isinstance(obs[0], dict):
        return {k: np.stack([o[k] for o in obs]) for k in obs[0]}
    return np.stack(obs)


def _replay_all(vec_env: Any, envs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Every env replays its episode; SubprocVecEnv's workers at the same time."""
    remotes = getattr(vec_env, "remotes", None)
    if remotes is not None and len(remotes) == len(envs):  # SB3's worker protocol: ("env_method", (name, args, kwargs))
        for remote, e in zip(remotes, envs):
            remote.send(("env_method", ("replay_episode", (e["start"], e["actions"]), {})))
        return [remote.recv() for remote in remotes]
    return [vec_env.env_method("replay_episode", e["start"], e["actions"], indices=[i])[0] for i, e in enumerate(envs)]


def restore(model: Any, vec_env: Any) -> Optional[str]:
    """Continue a loaded checkpoint's episode stream in ``vec_env`` (the new process's training envs).

    :return: None when the stream was restored; else why not (a checkpoint written before streams were
        saved, or a replay that did not follow the recorded episode): the envs then start new episodes.
    """
    stream = getattr(model, "episode_stream", None)
    why = None
    if stream is None or stream.get("rng") is None:
        why = "the checkpoint holds no episode stream (written by an older version)"
    elif len(stream["envs"]) != vec_env.num_envs:
        why = f"the checkpoint's stream has {len(stream['envs'])} envs, the run {vec_env.num_envs}"
    else:
        replies = _replay_all(vec_env, stream["envs"])
        failed = [f"env {i}: {r['why']}" for i, r in enumerate(replies) if not r["ok"]]
        if failed:
            why = "replaying the interrupted episodes failed (" + "; ".join(failed) + ")"
        else:
            model._last_obs = _stack([r["obs"] for r in replies])
            model._last_episode_starts = np.array([not e["actions"] for e in stream["envs"]], dtype=bool)
            for name in ("_reset_seeds", "_reset_options"):  # the seeds SB3 set on load are not for these envs
                if hasattr(vec_env, name):
                    getattr(vec_env, name)()
            restore_rngs(model, stream["rng"])
            return None
    model.episode_stream = None  # learn() resets the envs; the tracker starts a new stream from there
    model._last_obs = None
    return why
