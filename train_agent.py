"""Train a client-selection agent on FedSelect: FAVOR's Double DQN (SPEC §4) or a Stable-Baselines3 algorithm.

    python train_agent.py --algo favor --env default                 # FAVOR on the default preset
    python train_agent.py --algo favor --env fedsel/FedSelect-Tiny-v0 --n-timesteps 400 --n-envs 2
    python train_agent.py --algo ppo --env my_federation.yaml        # any YAML env config
    python train_agent.py --algo favor --env default --name run1 --resume   # continue an interrupted run

The script reads top to bottom (CleanRL style):
1. the arguments (:class:`Args`);
2. the env config: the preset / env id / YAML file, the algorithm's own ``env_config`` from its
   hyper-parameter file, then ``--env-kwargs``; checked against what the algorithm can act in;
3. the hyper-parameters: ``configs/<algo>.yml``, keyed by env id as in rl-zoo3, then ``--hyperparams``;
4. the training envs (``SubprocVecEnv`` when ``--n-envs`` > 1, one torch thread per worker);
5. the model, new or resumed from the run's last checkpoint (model + replay buffer + step count);
6. the callbacks: evaluation of the *deployed* form (FAVOR: the ``topk`` agent taking the K highest
   Q-values; logged as mean return, success rate and rounds to the target), checkpoints;
7. ``learn`` with TensorBoard logs and a progress bar;
8. the final model, saved with the exact env config beside it.

Everything goes to ``runs/train/<name>/``; every file is written atomically (temp file + ``os.replace``).
Training randomness: ``--seed`` is given to SB3, which seeds its own generators (and, as SB3 does,
Python's, NumPy's and torch's global ones — this script is the top-level program); the envs derive
theirs from ``reset(seed)``.
"""
from __future__ import annotations

import argparse
import ast
import copy
import os
import re
import sys
import time
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import yaml

CONFIG_DIR = Path(__file__).resolve().parent / "configs"

#: What each algorithm is and which action modes (spaces) it can act in.
ALGOS: Dict[str, Dict[str, Any]] = {
    "favor": {"cls": "agents.favor:DoubleDQN", "modes": ("one",), "off_policy": True,
              "about": "FAVOR's Double DQN (seed 002), trained in the 'one' mode, deployed as top-K"},
    "dqn": {"cls": "stable_baselines3:DQN", "modes": ("one",), "off_policy": True,
            "about": "SB3's vanilla DQN, deployed as top-K like FAVOR"},
    "ppo": {"cls": "stable_baselines3:PPO", "modes": ("one", "topk", "subset"), "off_policy": False,
            "about": "SB3's PPO, acting in the env's own action mode"},
    "a2c": {"cls": "stable_baselines3:A2C", "modes": ("one", "topk", "subset"), "off_policy": False,
            "about": "SB3's A2C, acting in the env's own action mode"},
}
MODE_SPACES = {"one": "Discrete(N)", "topk": "Box(N)", "subset": "MultiBinary(N)"}
#: Keys of a hyper-parameter entry that are not arguments of the algorithm (rl-zoo3's, plus env_config).
ZOO_KEYS = ("n_timesteps", "policy", "n_envs", "env_config")


# ---------------------------------------------------------------------------------------------- 1. args
@dataclass
class Args:
    algo: str = field(default="favor", metadata={"help": f"algorithm: {sorted(ALGOS)}"})
    env: str = field(default="default", metadata={"help": "a preset name, an env id, or a YAML env-config path"})
    env_kwargs: List[str] = field(default_factory=list, metadata={
        "help": "env-config overrides KEY=VALUE (VALUE read as YAML), e.g. max_rounds=30 'flat_parts=[weights,clients]'"})
    hyperparams: List[str] = field(default_factory=list, metadata={
        "help": "hyper-parameter overrides KEY=VALUE (VALUE read as YAML), e.g. learning_rate=1e-3"})
    conf_file: Optional[str] = field(default=None, metadata={"help": "hyper-parameter YAML (default configs/<algo>.yml)"})
    n_timesteps: Optional[int] = field(default=None, metadata={"help": "training steps (rounds); default from the config"})
    n_envs: Optional[int] = field(default=None, metadata={"help": "parallel envs (worker processes); default from the config or 1"})
    seed: int = field(default=0, metadata={"help": "seed of the model and of the envs' episodes"})
    name: Optional[str] = field(default=None, metadata={"help": "run name (folder under --runs-dir); default <algo>_<env>_seed<seed>"})
    runs_dir: str = field(default="runs/train", metadata={"help": "where run folders go"})
    resume: bool = field(default=False, metadata={"help": "continue the run --name from its last checkpoint"})
    eval_freq: int = field(default=2000, metadata={"help": "evaluate the deployed agent every this many steps (0 = never)"})
    eval_episodes: int = field(default=5, metadata={"help": "episodes per evaluation"})
    save_freq: int = field(default=2000, metadata={"help": "checkpoint every this many steps (0 = never)"})
    keep_checkpoints: int = field(default=2, metadata={"help": "how many checkpoints to keep"})
    torch_threads: int = field(default=1, metadata={"help": "torch threads of the learner process"})
    device: str = field(default="cpu", metadata={"help": "torch device of the learner"})
    progress_bar: bool = field(default=True, metadata={"help": "show SB3's progress bar"})
    verbose: int = field(default=1, metadata={"help": "0 quiet, 1 info"})


def parse_args(argv: Optional[Sequence[str]] = None) -> Args:
    """Build an argparse parser from :class:`Args` and parse ``argv``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for f in fields(Args):
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        if f.type in ("bool", bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=f.metadata["help"])
        elif f.name in ("env_kwargs", "hyperparams"):
            parser.add_argument(flag, nargs="*", default=default, metavar="KEY=VALUE", help=f.metadata["help"])
        else:
            kind = int if "int" in str(f.type) else str
            parser.add_argument(flag, type=kind, default=default, help=f.metadata["help"])
    return Args(**vars(parser.parse_args(argv)))


def parse_key_values(items: Sequence[str], what: str) -> Dict[str, Any]:
    """``["a=1", "b=[x, y]"]`` → ``{"a": 1, "b": ["x", "y"]}`` (values read as YAML)."""
    out: Dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--{what} expects KEY=VALUE items, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


# ----------------------------------------------------------------------------------------- 2. env config
def resolve_env(env: str) -> Tuple[Optional[str], Dict[str, Any], str]:
    """``--env`` → (preset name or None, the user's explicit config overrides, env id for the hyper-parameters).

    :raises ValueError: for an unknown preset / env id or a missing file, listing what fits.
    """
    from fedsel_env.config import ENV_IDS, PRESETS, load_config

    by_id = {v: k for k, v in ENV_IDS.items()}
    if env in PRESETS:
        return env, {}, ENV_IDS[env]
    if env in by_id:
        return by_id[env], {}, env
    if env.endswith((".yml", ".yaml")) or os.path.sep in env or Path(env).is_file():
        overrides = load_config(env)  # raises ValueError when the file is missing
        preset = overrides.pop("preset", None)
        if preset is not None and preset not in PRESETS:
            preset = by_id.get(preset, preset)  # an env id is accepted as a preset too
        return preset, overrides, ENV_IDS.get(preset or "default", ENV_IDS["default"])
    raise ValueError(f"unknown --env {env!r}: give a preset {sorted(PRESETS)}, an env id {sorted(by_id)}, "
                     f"or the path of a YAML env config")


def build_env_config(args: Args, algo_env_config: Mapping[str, Any]) -> Dict[str, Any]:
    """The complete, validated training env config, checked against the algorithm.

    Layers, later wins: the preset, the algorithm's ``env_config`` (its natural action mode and
    observation), the YAML file, ``--env-kwargs``. An action mode the user set explicitly and the
    algorithm cannot act in is an error; one that only came from the defaults is replaced.
    """
    from fedsel_env.config import make_config

    preset, file_overrides, _ = resolve_env(args.env)
    explicit = {**file_overrides, **parse_key_values(args.env_kwargs, "env-kwargs")}
    algo = ALGOS[args.algo]
    mode = explicit.get("action_mode")
    if mode is not None and mode not in algo["modes"]:
        fits = sorted(a for a, s in ALGOS.items() if mode in s["modes"])
        raise ValueError(
            f"--algo {args.algo} cannot act in action_mode {mode!r} ({MODE_SPACES.get(mode, '?')}): it needs "
            f"{[f'{m} ({MODE_SPACES[m]})' for m in algo['modes']]}. Algorithms for {mode!r}: {fits}"
            + (" (FAVOR is trained in 'one' and deployed in 'topk' automatically)" if args.algo in ("favor", "dqn") else ""))
    cfg = make_config({**dict(algo_env_config), **explicit}, preset=preset)
    if args.algo == "favor" and cfg["observation"] != "flat":
        raise ValueError("--algo favor needs observation: flat (FAVOR's Q-network reads the flattened state); "
                         f"got observation {cfg['observation']!r}")
    return cfg


# ------------------------------------------------------------------------------------ 3. hyper-parameters
def linear_schedule(initial: float) -> Callable[[float], float]:
    """rl-zoo3's ``lin_<value>``: the value decays linearly to 0 over training."""
    return lambda progress_remaining: progress_remaining * initial


def parse_policy_kwargs(value: Any) -> Dict[str, Any]:
    """A mapping, or rl-zoo3's string form ``"dict(net_arch=[512], activation_fn=nn.ReLU)"`` (parsed, not eval'd)."""
    import torch.nn as nn

    if value is None:
        return {}
    if isinstance(value, Mapping):
        kwargs = dict(value)
    elif isinstance(value, str):
        try:
            node = ast.parse(value, mode="eval").body
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict"
                    and not node.args):
                raise SyntaxError
            kwargs = {}
            for kw in node.keywords:
                kwargs[kw.arg] = (ast.unparse(kw.value) if isinstance(kw.value, (ast.Attribute, ast.Name))
                                  else ast.literal_eval(kw.value))
        except (SyntaxError, ValueError):
            raise ValueError(f"policy_kwargs {value!r} is invalid: expected a mapping or 'dict(key=literal, ...)'") from None
    else:
        raise ValueError(f"policy_kwargs {value!r} is invalid: expected a mapping or 'dict(key=literal, ...)'")
    act = kwargs.get("activation_fn")
    if isinstance(act, str):
        cls = getattr(nn, act.split(".")[-1], None)
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise ValueError(f"policy_kwargs.activation_fn {act!r} is not a torch.nn module (e.g. nn.ReLU, nn.Tanh)")
        kwargs["activation_fn"] = cls
    return kwargs


def algorithm_class(algo: str) -> type:
    """The SB3 class behind ``--algo``."""
    import importlib

    module, name = ALGOS[algo]["cls"].split(":")
    return getattr(importlib.import_module(module), name)


def load_hyperparams(args: Args, env_id: str) -> Dict[str, Any]:
    """The hyper-parameters for ``env_id``: its entry in the algorithm's YAML (or the ``default`` entry), then overrides.

    :raises ValueError: for a missing file, no entry, or a key the algorithm does not take.
    """
    import inspect

    path = Path(args.conf_file) if args.conf_file else CONFIG_DIR / f"{args.algo}.yml"
    if not path.is_file():
        raise ValueError(f"hyper-parameter file {str(path)!r} does not exist")
    with open(path) as f:
        table = yaml.safe_load(f) or {}
    if env_id in table:
        hp = dict(table[env_id] or {})
    elif "default" in table:
        hp = dict(table["default"] or {})
    else:
        raise ValueError(f"{str(path)!r} has no entry for {env_id!r} (nor a 'default' entry); entries: {sorted(table)}")
    hp.update(parse_key_values(args.hyperparams, "hyperparams"))
    cls = algorithm_class(args.algo)
    accepted = set()
    for klass in cls.__mro__:  # a subclass taking *args/**kwargs (DoubleDQN) passes the rest to its parent
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(klass.__init__).parameters.values()
        accepted |= {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "self"}
        if not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
            break
    accepted -= {"env", "_init_setup_model", "seed", "device", "tensorboard_log", "verbose"}
    unknown = sorted(set(hp) - accepted - set(ZOO_KEYS))
    if unknown:
        raise ValueError(f"unknown hyper-parameter(s) {unknown} for --algo {args.algo}; "
                         f"allowed: {sorted(accepted | set(ZOO_KEYS))}")
    return hp


def model_kwargs(hp: Mapping[str, Any]) -> Dict[str, Any]:
    """The hyper-parameters as keyword arguments of the algorithm class (schedules and policy_kwargs parsed)."""
    kwargs = {k: v for k, v in hp.items() if k not in ZOO_KEYS}
    for key in ("learning_rate", "clip_range"):
        v = kwargs.get(key)
        if isinstance(v, str):
            m = re.fullmatch(r"lin_([0-9.eE+-]+)", v)
            if not m:
                raise ValueError(f"hyper-parameter {key} = {v!r} is invalid: a number or 'lin_<number>'")
            kwargs[key] = linear_schedule(float(m.group(1)))
    if "policy_kwargs" in kwargs:
        kwargs["policy_kwargs"] = parse_policy_kwargs(kwargs["policy_kwargs"])
    if isinstance(kwargs.get("train_freq"), list):
        kwargs["train_freq"] = tuple(kwargs["train_freq"])
    return kwargs


# ------------------------------------------------------------------------------------------------ 4. envs
def make_env_fn(config: Mapping[str, Any], rank: int) -> Callable[[], Any]:
    """A picklable env factory for a VecEnv worker (one torch thread per worker)."""

    def _init():
        import torch
        from stable_baselines3.common.monitor import Monitor

        import fedsel_env  # noqa: F401  (registers the ids)
        from fedsel_env.env import FedSelectEnv

        torch.set_num_threads(1)
        return Monitor(FedSelectEnv(config=copy.deepcopy(dict(config))))

    return _init


def make_vec_env(config: Mapping[str, Any], n_envs: int) -> Any:
    """``n_envs`` envs: in this process for one, in ``SubprocVecEnv`` worker processes for more."""
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    fns = [make_env_fn(config, i) for i in range(n_envs)]
    return DummyVecEnv(fns) if n_envs == 1 else SubprocVecEnv(fns)


# ------------------------------------------------------------------------------------------- atomic I/O
def atomic_write_yaml(path: Path, data: Any) -> None:
    """Write ``data`` as YAML to ``path`` through a temp file and ``os.replace``."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        yaml.safe_dump(_plain(data), f, sort_keys=False)
    os.replace(tmp, path)


def atomic_save(obj_save: Callable[[Path], None], path: Path) -> None:
    """Call ``obj_save(tmp)`` then move ``tmp`` onto ``path`` (SB3 keeps a ``.tmp`` suffix as it is)."""
    tmp = path.with_name(path.name + ".tmp")
    obj_save(tmp)
    os.replace(tmp, path)


def _plain(x: Any) -> Any:
    """Numpy scalars and tuples → plain YAML types."""
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


# -------------------------------------------------------------------------------------------- 6. callbacks
def _callbacks_module():
    from stable_baselines3.common.callbacks import CheckpointCallback, EvalCallback
    from stable_baselines3.common.evaluation import evaluate_policy

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
            rewards, lengths = evaluate_policy(self.deploy(self.model), self.eval_env,
                                               n_eval_episodes=self.n_eval_episodes, deterministic=True,
                                               return_episode_rewards=True, warn=False,
                                               callback=self._log_success_callback)
            return list(rewards), list(lengths), list(self._is_success_buffer)

        def _on_step(self) -> bool:
            if self.eval_freq <= 0 or self.n_calls % self.eval_freq != 0:
                return True
            rewards, lengths, successes = self.evaluate()
            self.evaluations_timesteps.append(self.num_timesteps)
            self.evaluations_results.append(rewards)
            self.evaluations_length.append(lengths)
            self.evaluations_successes.append(successes)
            if self.log_path is not None:
                path = Path(self.log_path + ".npz")
                with open(path.with_name(path.name + ".tmp"), "wb") as f:
                    np.savez(f, timesteps=self.evaluations_timesteps, results=self.evaluations_results,
                             ep_lengths=self.evaluations_length, successes=self.evaluations_successes)
                os.replace(path.with_name(path.name + ".tmp"), path)
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
        """SB3's ``CheckpointCallback``, made consistent and atomic.

        SB3's saves inside ``on_step``, before the step's transition enters the replay buffer (one
        transition per env lost at each resume). This one marks a checkpoint as due in ``on_step`` and
        writes it at the next ``on_rollout_start``, when every collected transition is stored and
        every gradient step done; and once more at the end of training. The replay buffer is written
        first, then the model, whose presence marks a complete checkpoint; each through a temp file and
        ``os.replace``. Only the last ``keep`` checkpoints are kept.
        """

        def __init__(self, *args: Any, keep: int = 2, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.keep = keep
            self._due = False

        def save_now(self) -> Path:
            self.num_timesteps = self.model.num_timesteps
            model_path = Path(self._checkpoint_path(extension="zip"))
            if self.save_replay_buffer and getattr(self.model, "replay_buffer", None) is not None:
                atomic_save(self.model.save_replay_buffer, Path(self._checkpoint_path("replay_buffer_", extension="pkl")))
            atomic_save(self.model.save, model_path)
            for old in list_checkpoints(Path(self.save_path))[: -self.keep]:
                old.unlink(missing_ok=True)
                replay_buffer_path(old).unlink(missing_ok=True)
            return model_path

        def _on_step(self) -> bool:
            if self.save_freq > 0 and self.n_calls % self.save_freq == 0:
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

    return DeployedEvalCallback, AtomicCheckpointCallback


CKPT_PREFIX = "ckpt"


def list_checkpoints(folder: Path) -> List[Path]:
    """Complete checkpoints (model zips) in ``folder``, oldest first."""
    found = []
    for p in folder.glob(f"{CKPT_PREFIX}_*_steps.zip"):
        m = re.fullmatch(rf"{CKPT_PREFIX}_(\d+)_steps\.zip", p.name)
        if m:
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def replay_buffer_path(model_zip: Path) -> Path:
    """The replay buffer saved with checkpoint ``model_zip``."""
    steps = re.fullmatch(rf"{CKPT_PREFIX}_(\d+)_steps\.zip", model_zip.name).group(1)  # type: ignore[union-attr]
    return model_zip.with_name(f"{CKPT_PREFIX}_replay_buffer_{steps}_steps.pkl")


def deploy_fn(algo: str, env_config: Mapping[str, Any], spec: Any) -> Callable[[Any], Any]:
    """model → the policy that is evaluated: FAVOR's top-K agent for DQN-family models, the model otherwise."""
    if ALGOS[algo]["modes"] == ("one",):
        from agents.favor import FavorAgent

        return lambda model: FavorAgent.from_model(model, spec, env_config["flat_parts"])
    return lambda model: model


def eval_env_config(algo: str, env_config: Mapping[str, Any]) -> Dict[str, Any]:
    """The env the deployed form is evaluated in (FAVOR: top-K with Dict observations)."""
    if ALGOS[algo]["modes"] == ("one",):
        from agents.favor import deployment_config

        return deployment_config(env_config)
    return copy.deepcopy(dict(env_config))


# ------------------------------------------------------------------------------------------------- main
def prepare(args: Args) -> Dict[str, Any]:
    """Check every argument and work out the run's settings before anything is built (fails fast)."""
    if args.algo not in ALGOS:
        raise ValueError(f"unknown --algo {args.algo!r}; algorithms: "
                         + "; ".join(f"{k} ({v['about']})" for k, v in ALGOS.items()))
    run_dir = Path(args.runs_dir) / (args.name or "")
    if args.resume:
        if not args.name:
            raise ValueError("--resume needs --name of the run to continue")
        saved = run_dir / "args.yaml"
        if not saved.is_file():
            raise ValueError(f"--resume: no run to continue at {str(run_dir)!r} (no args.yaml)")
        with open(saved) as f:
            old = yaml.safe_load(f)
        # the run's own settings win; only the bookkeeping flags of this call are kept
        keep = {k: getattr(args, k) for k in ("resume", "runs_dir", "progress_bar", "verbose", "torch_threads")}
        if args.n_timesteps is not None:  # a longer (or shorter) run may be asked for when resuming
            keep["n_timesteps"] = args.n_timesteps
        args = Args(**{**old, **keep})
        with open(run_dir / "env_config.yaml") as f:
            env_config = yaml.safe_load(f)
        with open(run_dir / "hyperparams.yaml") as f:
            hp = yaml.safe_load(f)
    else:
        _, _, env_id = resolve_env(args.env)
        hp = load_hyperparams(args, env_id)
        env_config = build_env_config(args, hp.get("env_config") or {})
        if args.name is None:
            tag = Path(args.env).stem if args.env.endswith((".yml", ".yaml")) else args.env.split("/")[-1]
            args.name = f"{args.algo}_{tag}_seed{args.seed}"
        run_dir = Path(args.runs_dir) / args.name
        if (run_dir / "args.yaml").exists():
            raise ValueError(f"run folder {str(run_dir)!r} already exists: pass --resume to continue it, "
                             f"or another --name")
    if args.n_timesteps is None:
        args.n_timesteps = int(hp.get("n_timesteps", 10_000))
    if args.n_envs is None:
        args.n_envs = int(hp.get("n_envs", 1))
    for name in ("n_timesteps", "n_envs", "eval_episodes", "keep_checkpoints", "torch_threads"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} = {getattr(args, name)} is invalid: expected >= 1")
    for name in ("eval_freq", "save_freq"):
        if getattr(args, name) < 0:
            raise ValueError(f"--{name.replace('_', '-')} = {getattr(args, name)} is invalid: expected >= 0 (0 = never)")
    policy = hp.get("policy", "MlpPolicy")
    if env_config["observation"] == "dict" and policy != "MultiInputPolicy":
        raise ValueError(f"policy {policy!r} cannot read Dict observations: use policy=MultiInputPolicy or "
                         f"env observation: flat")
    if env_config["observation"] == "flat" and policy == "MultiInputPolicy":
        raise ValueError("policy 'MultiInputPolicy' needs Dict observations: use MlpPolicy with observation: flat")
    kwargs = model_kwargs(hp)  # parses schedules and policy_kwargs: errors surface now
    return {"args": args, "run_dir": run_dir, "env_config": env_config, "hp": hp, "policy": policy, "kwargs": kwargs}


def main(argv: Optional[Sequence[str]] = None) -> Path:
    """Train as ``argv`` says; return the run folder."""
    args = parse_args(argv)
    setup = prepare(args)  # ValueError on any bad argument, before any env or process is started
    args, run_dir, env_config, hp = setup["args"], setup["run_dir"], setup["env_config"], setup["hp"]

    import torch

    from fedsel_env.env import FedSelectEnv

    torch.set_num_threads(args.torch_threads)
    ckpt_dir = run_dir / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    if not args.resume:
        atomic_write_yaml(run_dir / "env_config.yaml", env_config)
        atomic_write_yaml(run_dir / "hyperparams.yaml", hp)
        atomic_write_yaml(run_dir / "args.yaml", vars(args))

    # 4. envs: training (the algorithm's mode) and evaluation (the deployed form, one env in this process)
    env = make_vec_env(env_config, args.n_envs)
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    eval_cfg = eval_env_config(args.algo, env_config)
    eval_env = DummyVecEnv([lambda: Monitor(FedSelectEnv(config=eval_cfg))])
    spec = eval_env.envs[0].unwrapped.selection_spec

    # 5. model: new, or the last checkpoint with its replay buffer and step count
    cls = algorithm_class(args.algo)
    checkpoints = list_checkpoints(ckpt_dir)
    if args.resume and checkpoints:
        last = checkpoints[-1]
        model = cls.load(last, env=env, device=args.device, tensorboard_log=str(run_dir / "tb"))
        if ALGOS[args.algo]["off_policy"]:
            model.load_replay_buffer(replay_buffer_path(last))
        print(f"Resuming {run_dir} from {last.name}: step {model.num_timesteps} of {args.n_timesteps}")
    else:
        if args.resume:
            print(f"Resuming {run_dir}: no checkpoint yet, starting from step 0")
        model = cls(setup["policy"], env, seed=args.seed, device=args.device, verbose=args.verbose,
                    tensorboard_log=str(run_dir / "tb"), **setup["kwargs"])

    # 6. callbacks (frequencies are in env steps; a callback call is one step of all n_envs envs)
    DeployedEvalCallback, AtomicCheckpointCallback = _callbacks_module()
    eval_cb = DeployedEvalCallback(eval_env, deploy_fn(args.algo, env_config, spec), eval_seed=args.seed + 10_000,
                                   n_eval_episodes=args.eval_episodes,
                                   eval_freq=max(args.eval_freq // args.n_envs, 1) if args.eval_freq else 0,
                                   log_path=str(run_dir), best_model_save_path=str(run_dir), verbose=args.verbose)
    ckpt_cb = AtomicCheckpointCallback(save_freq=max(args.save_freq // args.n_envs, 1) if args.save_freq else 0,
                                       save_path=str(ckpt_dir), name_prefix=CKPT_PREFIX,
                                       save_replay_buffer=ALGOS[args.algo]["off_policy"], keep=args.keep_checkpoints)
    if args.resume:
        eval_cb.restore(run_dir / "evaluations.npz", upto=model.num_timesteps)

    # 7. learn (on resume, only the remaining steps; counters, schedules and the buffer carry on)
    remaining = args.n_timesteps - model.num_timesteps
    start = time.perf_counter()
    try:
        if remaining > 0:
            model.learn(total_timesteps=remaining, callback=[eval_cb, ckpt_cb], progress_bar=args.progress_bar,
                        tb_log_name=args.algo.upper(), reset_num_timesteps=not (args.resume and checkpoints))
    except KeyboardInterrupt:
        ckpt_cb.init_callback(model)
        ckpt_cb.num_timesteps = model.num_timesteps
        path = ckpt_cb.save_now()
        print(f"\nInterrupted at step {model.num_timesteps}: checkpoint {path}; continue with "
              f"`python train_agent.py --name {args.name} --runs-dir {args.runs_dir} --resume`")
        raise SystemExit(130)
    elapsed = time.perf_counter() - start

    # 8. the final model with its env config beside it (env_config.yaml, written at the start)
    atomic_save(model.save, run_dir / "model.zip")
    atomic_write_yaml(run_dir / "summary.yaml", {
        "algo": args.algo, "env": args.env, "num_timesteps": int(model.num_timesteps), "n_envs": args.n_envs,
        "train_seconds_this_call": round(elapsed, 2), "best_eval_mean_reward": float(eval_cb.best_mean_reward),
        "model": "model.zip", "env_config": "env_config.yaml"})
    env.close()
    if args.verbose:
        print(f"Saved {run_dir / 'model.zip'} after {model.num_timesteps} steps ({elapsed:.1f} s)")
    return run_dir


if __name__ == "__main__":
    from fedsel_env.allocator import reexec_with_tcmalloc

    reexec_with_tcmalloc()  # a CNN round runs 1.2-1.4x faster under tcmalloc (docs/PERFORMANCE.md)
    try:
        main()
    except ValueError as e:
        sys.exit(f"train_agent.py: error: {e}")
