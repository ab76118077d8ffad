"""The callbacks of a training run: evaluation of the deployed agent, consistent atomic checkpoints, and the FL
metrics of every training episode in TensorBoard (:class:`FLMetricsCallback`, also rl-zoo3's ``callback:``).

Their frequencies are in callback calls; one call is one step of every env of the ``VecEnv``, so a
frequency in env steps is divided by ``n_envs`` (:func:`per_call`). They count calls from the run's
start (``num_timesteps // n_envs``), not from this process's: a resumed run evaluates and checkpoints at
the steps the uninterrupted run would have (:func:`due`).
"""
from __future__ import annotations

import importlib
import inspect
import os
from pathlib import Path
from typing import Any, Callable, List, Tuple

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback, EvalCallback
from stable_baselines3.common.evaluation import evaluate_policy

from .atomic import atomic_save
from .runs import list_checkpoints, replay_buffer_path
from .stream import StreamTracker


def per_call(freq: int, n_envs: int) -> int:
    """A frequency in env steps → in callback calls (0 stays 0: never)."""
    return max(freq // n_envs, 1) if freq else 0


def due(callback: Any, freq: int) -> bool:
    """Whether a callback with frequency ``freq`` (in calls; 0 = never) acts at this call.

    Calls are counted from the run's start, ``num_timesteps // n_envs``, not by the callback's own
    ``n_calls``, which starts again at 0 in a resumed process (evaluations at 500, 1000, then 1500 + 800
    after a resume at 1500; never, if interruptions came more often than ``freq``).
    """
    return freq > 0 and (callback.num_timesteps // callback.training_env.num_envs) % freq == 0


class DeployedEvalCallback(EvalCallback):
    """SB3's ``EvalCallback`` on the deployed form of the agent.

    ``deploy(model)`` turns the live model into the policy that is evaluated (FAVOR: a
    :class:`agents.favor.FavorAgent` in ``topk`` mode). Every evaluation replays the same episode
    seeds (common random numbers). Logs ``eval/mean_reward``, ``eval/mean_ep_length`` (rounds),
    ``eval/success_rate`` (target reached) and ``eval/mean_rounds_to_target`` (over the successes).
    Saves ``evaluations.npz`` and ``best_model.zip`` atomically.
    """

    def __init__(self, eval_env: Any, deploy: Callable[[Any], Any], eval_seed: int, **kwargs: Any) -> None:
        super().__init__(eval_env, **kwargs)
        self.deploy = deploy
        self.eval_seed = eval_seed

    def _init_callback(self) -> None:
        # as EvalCallback's, without its warning that the training envs (SubprocVecEnv) and the
        # evaluation env (one DummyVecEnv in this process) are of different types: that is intended
        for folder in (self.best_model_save_path, self.log_path and os.path.dirname(self.log_path)):
            if folder:
                os.makedirs(folder, exist_ok=True)
        if self.callback_on_new_best is not None:
            self.callback_on_new_best.init_callback(self.model)

    def restore(self, npz_path: Path, upto: int) -> None:
        """Take up the history of an earlier (interrupted) run, up to the resumed checkpoint's step."""
        if not npz_path.is_file():
            return
        with np.load(npz_path) as d:
            keep = d["timesteps"] <= upto
            self.evaluations_timesteps = d["timesteps"][keep].tolist()
            self.evaluations_results = d["results"][keep].tolist()
            self.evaluations_length = d["ep_lengths"][keep].tolist()
            self.evaluations_successes = d["successes"][keep].tolist() if "successes" in d else []
        if self.evaluations_results:
            self.best_mean_reward = float(max(np.mean(r) for r in self.evaluations_results))

    def evaluate(self) -> Tuple[List[float], List[int], List[bool]]:
        """Run the deployed policy for ``n_eval_episodes`` episodes from the fixed seeds."""
        self._is_success_buffer = []
        self.eval_env.seed(self.eval_seed)
        policy = self.deploy(self.model)
        run = evaluate_policy
        if "action_masks" in inspect.signature(policy.predict).parameters:  # MaskablePPO: acts on the masks
            from sb3_contrib.common.maskable.evaluation import evaluate_policy as run
        rewards, lengths = run(policy, self.eval_env, n_eval_episodes=self.n_eval_episodes, deterministic=True,
                               return_episode_rewards=True, warn=False, callback=self._log_success_callback)
        return list(rewards), list(lengths), list(self._is_success_buffer)

    def _on_step(self) -> bool:
        if not due(self, self.eval_freq):
            return True
        rewards, lengths, successes = self.evaluate()
        self.evaluations_timesteps.append(self.num_timesteps)
        self.evaluations_results.append(rewards)
        self.evaluations_length.append(lengths)
        self.evaluations_successes.append(successes)
        if self.log_path is not None:
            def write(tmp: Path) -> None:
                with open(tmp, "wb") as f:
                    np.savez(f, timesteps=self.evaluations_timesteps, results=self.evaluations_results,
                             ep_lengths=self.evaluations_length, successes=self.evaluations_successes)

            atomic_save(write, Path(self.log_path + ".npz"))
        mean_reward = float(np.mean(rewards))
        self.last_mean_reward = mean_reward
        reached = [n for n, s in zip(lengths, successes) if s]
        self.logger.record("eval/mean_reward", mean_reward)
        self.logger.record("eval/mean_ep_length", float(np.mean(lengths)))
        self.logger.record("eval/success_rate", float(np.mean(successes)) if successes else 0.0)
        if reached:
            self.logger.record("eval/mean_rounds_to_target", float(np.mean(reached)))
        if self.verbose >= 1:
            print(f"Eval at {self.num_timesteps} steps: return {mean_reward:.3f}, rounds {np.mean(lengths):.1f}, "
                  f"target reached {sum(successes)}/{len(successes)}")
        self.logger.record("time/total_timesteps", self.num_timesteps, exclude="tensorboard")
        self.logger.dump(self.num_timesteps)
        if mean_reward > self.best_mean_reward:
            self.best_mean_reward = mean_reward
            if self.best_model_save_path is not None:
                atomic_save(self.model.save, Path(self.best_model_save_path) / "best_model.zip")
            if self.callback_on_new_best is not None and not self.callback_on_new_best.on_step():
                return False
        return True


class AtomicCheckpointCallback(CheckpointCallback):
    """SB3's ``CheckpointCallback``, made consistent and atomic, with the episode stream.

    SB3's saves inside ``on_step``, before the step's transition enters the replay buffer (one
    transition per env lost at each resume). This one marks a checkpoint as due in ``on_step`` and
    writes it at the next ``on_rollout_start``, when every collected transition is stored and
    every gradient step done; and once more at the end of training. The replay buffer is written
    first, then the model, whose presence marks a complete checkpoint; each through a temp file and
    ``os.replace``. Only the last ``keep`` checkpoints are kept. The model carries the training
    envs' episode stream and the learner's generators (:mod:`.stream`), which ``--resume`` restores.
    """

    def __init__(self, *args: Any, keep: int = 2, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.keep = keep
        self._due = False
        self.stream = StreamTracker()

    def _on_training_start(self) -> None:
        self.stream.start(self.model, self.training_env)

    def save_now(self) -> Path:
        """Write a checkpoint of the model's current state; return the model zip's path."""
        self.num_timesteps = self.model.num_timesteps
        model_path = Path(self._checkpoint_path(extension="zip"))
        if self.save_replay_buffer and getattr(self.model, "replay_buffer", None) is not None:
            atomic_save(self.model.save_replay_buffer, Path(self._checkpoint_path("replay_buffer_", extension="pkl")))
        self.stream.snapshot(self.model)  # the generators as they are now, saved with the model
        try:
            atomic_save(self.model.save, model_path)
        finally:  # other saves of the model (best_model.zip) are no checkpoints: no generators with them
            if getattr(self.model, "episode_stream", None) is not None:
                self.model.episode_stream["rng"] = None
        for old in list_checkpoints(Path(self.save_path))[: -self.keep]:
            old.unlink(missing_ok=True)
            replay_buffer_path(old).unlink(missing_ok=True)
        return model_path

    def save_on_interrupt(self, model: Any) -> Path:
        """Ctrl-C during ``learn``: checkpoint ``model`` at once (the callback may not be set up yet)."""
        self.init_callback(model)
        self.num_timesteps = model.num_timesteps
        return self.save_now()

    def _on_step(self) -> bool:
        self.stream.step(self.model, self.training_env, self.locals)
        if due(self, self.save_freq):
            self._due = True
        return True

    def _on_rollout_start(self) -> None:
        if self._due:
            self.save_now()
            self._due = False

    def _on_training_end(self) -> None:
        done = [p.name for p in list_checkpoints(Path(self.save_path))]
        if self.save_freq > 0 and f"{self.name_prefix}_{self.model.num_timesteps}_steps.zip" not in done:
            self.save_now()


class FLMetricsCallback(BaseCallback):
    """The FL outcome of every training episode, logged as SB3 scalars (TensorBoard's ``fl/`` section).

    At each episode's end it reads that step's ``info`` (``fedsel_env/episode_info.py``) and records
    ``fl/final_accuracy`` (the global model's accuracy), ``fl/jain_index`` (Jain's index of the clients'
    participation counts), ``fl/clock_s`` (the simulated FL wall clock, seconds, profiling round excluded)
    and, when the target accuracy was reached, ``fl/rounds_to_target`` (communication rounds: steps times
    the env's ``server_step``, 1/K of a round per step in the ``one`` mode with ``one_mode_step: 1/K``)
    and ``fl/time_to_target_s``. Values are means over the episodes that ended since SB3's last dump
    (``logger.record_mean``), written at SB3's own dumps (every ``log_interval`` episodes off-policy, every
    rollout on-policy) and at the end of training. Needs no arguments, so rl-zoo3's hyper-parameter files
    can name it: ``callback: agents.training.callbacks.FLMetricsCallback``.
    """

    def __init__(self, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.server_step: List[float] = []
        self._pending = False

    def _on_training_start(self) -> None:
        try:  # the fraction of a round one step stands for, per env (fedsel_env.env.FedSelectEnv.server_step)
            self.server_step = [float(s) for s in self.training_env.get_attr("server_step")]
        except AttributeError:  # not a FedSelect env: steps are rounds
            self.server_step = [1.0] * self.training_env.num_envs

    def _on_step(self) -> bool:
        for i, (done, info) in enumerate(zip(self.locals["dones"], self.locals["infos"])):
            if not done or "clock" not in info:
                continue
            self.logger.record_mean("fl/final_accuracy", float(info["accuracy"]))
            self.logger.record_mean("fl/jain_index", float(info["jain_index"]))
            self.logger.record_mean("fl/clock_s", float(info["clock"]))
            if info.get("is_success"):
                self.logger.record_mean("fl/rounds_to_target", info["round"] * self.server_step[i])
                self.logger.record_mean("fl/time_to_target_s", float(info["clock"]))
            self._pending = True
        return True

    def _on_training_end(self) -> None:
        if self._pending and "fl/final_accuracy" in self.logger.name_to_value:  # episodes since the last dump
            self.logger.dump(self.num_timesteps)


def config_callbacks(spec: Any) -> List[BaseCallback]:
    """The callbacks a hyper-parameter entry's ``callback`` names, as rl-zoo3 reads it: a class path
    (``pkg.module.Class`` or ``pkg.module:Class``), a list of them, or one-key mappings ``{path: kwargs}``;
    :class:`FLMetricsCallback` is always among them (once).

    :raises ValueError: for a path that does not import or is not an SB3 callback class.
    """
    items = [] if spec is None else spec if isinstance(spec, list) else [spec]
    callbacks: List[BaseCallback] = []
    for item in items:
        path, kwargs = next(iter(item.items())) if isinstance(item, dict) and len(item) == 1 else (item, {})
        module, _, name = str(path).replace(":", ".").rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name, None) if module else None
        except ImportError as e:
            raise ValueError(f"hyper-parameter callback {path!r} does not import ({e}); expected a class path "
                             f"such as agents.training.callbacks.FLMetricsCallback") from None
        if not (isinstance(cls, type) and issubclass(cls, BaseCallback)):
            raise ValueError(f"hyper-parameter callback {path!r} is not an SB3 callback class; expected a class path "
                             f"such as agents.training.callbacks.FLMetricsCallback")
        try:
            callbacks.append(cls(**(kwargs or {})))
        except TypeError as e:
            raise ValueError(f"hyper-parameter callback {path!r}: {e}; give its arguments as {{path: {{arg: value}}}}") from None
    if not any(isinstance(c, FLMetricsCallback) for c in callbacks):
        callbacks.append(FLMetricsCallback())
    return callbacks
