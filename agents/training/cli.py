"""The command line of ``train_agent.py``: the :class:`Args` dataclass, the parser built from it, the checks.

Each field of :class:`Args` is one flag (``n_envs`` → ``--n-envs``) with its default and help text; a
``bool`` becomes ``--flag / --no-flag``, a ``List`` field takes ``KEY=VALUE`` (or rl-zoo3's ``KEY:VALUE``)
items (read by :func:`parse_key_values`), an ``int`` field an integer, anything else a string. A field's
``metadata["aliases"]`` adds rl-zoo3's spellings of the same flag (``-n``, ``-params``, ``-conf``, ``-f``).
"""
from __future__ import annotations

import argparse
import re
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Dict, List, Optional, Sequence

from agents.deploy import trainable_algorithms
from fedsel_env.config import parse_yaml
from fedsel_env.sim.limits import short


@dataclass
class Args:
    """The flags of ``train_agent.py`` (``python train_agent.py --help`` lists them)."""

    algo: str = field(default="favor", metadata={
        "help": f"trainer (agents/training/trainers.py): set_es, set_es_q, set_distill, set_distill_cover, the SB3 "
                f"algorithms {trainable_algorithms()}, or an SB3 algorithm class's import path package.module:Class"})
    env: str = field(default="default", metadata={"help": "a preset name, an env id, a YAML env-config path; for a "
                                                          "design (set_es, …) a scenario: name, id or YAML scenario file"})
    env_kwargs: List[str] = field(default_factory=list, metadata={
        "help": "env-config overrides KEY=VALUE or KEY:VALUE (VALUE read as YAML), e.g. max_rounds=30 "
                "'flat_parts=[weights,clients]'"})
    hyperparams: List[str] = field(default_factory=list, metadata={"aliases": ["-params"],
        "help": "hyper-parameter overrides KEY=VALUE or rl-zoo3's KEY:VALUE (VALUE read as YAML), e.g. learning_rate=1e-3"})
    conf_file: Optional[str] = field(default=None, metadata={"aliases": ["-conf"],
        "help": "hyper-parameter YAML (default configs/<algo>.yml)"})
    n_timesteps: Optional[int] = field(default=None, metadata={"aliases": ["-n"],
        "help": "training steps (rounds); default from the config"})
    n_envs: Optional[int] = field(default=None, metadata={"help": "parallel envs; default from the config or 1 (set_es / set_es_q: the episodes of a generation played "
        "at once through one vector env, default 16, the same results)"})
    vec_env: str = field(default="batched", metadata={
        "help": "how the --n-envs envs run: batched (one FedSelectVectorEnv in this process, every sub-env's local "
                "training in one call; not for action_mode subset, which runs sync), sync (SB3's DummyVecEnv, one "
                "after another), async (SB3's SubprocVecEnv, a worker process each)"})
    seed: int = field(default=0, metadata={"help": "seed of the model and of the envs' episodes"})
    name: Optional[str] = field(default=None, metadata={"help": "run name (folder under --runs-dir); default <algo>_<env>_seed<seed>"})
    runs_dir: str = field(default="runs/train", metadata={"aliases": ["-f", "--log-folder"],
        "help": "where run folders go (rl-zoo3's -f/--log-folder)"})
    resume: bool = field(default=False, metadata={"help": "continue the run --name from its last checkpoint"})
    trust_file: bool = field(default=False, metadata={
        "help": "with --resume: load the checkpoint and replay buffer with Stable-Baselines3's own unpickler, which "
                "runs any code they name (only for files you trust; by default they are read as plain data and a "
                "file naming code is refused)"})
    eval_freq: int = field(default=2000, metadata={"help": "evaluate the deployed agent every this many steps (0 = never)"})
    eval_episodes: int = field(default=5, metadata={"help": "episodes per evaluation"})
    save_freq: int = field(default=2000, metadata={"help": "checkpoint every this many steps (0 = never)"})
    keep_checkpoints: int = field(default=2, metadata={"help": "how many checkpoints to keep"})
    torch_threads: int = field(default=1, metadata={"help": "torch threads of the learner process"})
    device: Optional[str] = field(default=None, metadata={
        "help": "torch device of the run: the simulator's (env config 'device': cpu, cuda, cuda:N, auto) and the "
                "learner's; default: the env config's (cpu)"})
    ray: Optional[str] = field(default=None, metadata={"const": "local", "metavar": "ADDRESS", "help":
        "play each set_es / set_es_q generation's episodes as Ray tasks (the same run as one process; "
        "docs/TRAINING.md): --ray alone starts Ray on this machine, --ray auto joins the cluster this machine is "
        "part of (`ray start`), --ray HOST:6379 or ray://HOST:10001 that cluster"})
    progress_bar: bool = field(default=True, metadata={"help": "show SB3's progress bar"})
    verbose: int = field(default=1, metadata={"help": "0 quiet, 1 info"})


def build_parser(cls: type, description: str) -> argparse.ArgumentParser:
    """An argparse parser with one flag per field of the dataclass ``cls`` (its ``metadata["help"]`` as help)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for f in fields(cls):
        flag = ["--" + f.name.replace("_", "-"), *f.metadata.get("aliases", ())]
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        if f.type in ("bool", bool):
            parser.add_argument(*flag, action=argparse.BooleanOptionalAction, default=default, help=f.metadata["help"])
        elif "const" in f.metadata:  # --flag alone means the const (--ray: a local Ray)
            parser.add_argument(*flag, nargs="?", const=f.metadata["const"], default=default,
                                metavar=f.metadata.get("metavar"), help=f.metadata["help"])
        elif str(f.type).startswith(("List", "list")):
            parser.add_argument(*flag, nargs="*", default=default, metavar="KEY=VALUE", help=f.metadata["help"])
        else:
            kind = int if "int" in str(f.type) else str
            parser.add_argument(*flag, type=kind, default=default, help=f.metadata["help"])
    return parser


def parse_args(argv: Optional[Sequence[str]] = None, description: str = "") -> Args:
    """Parse ``argv`` (default ``sys.argv[1:]``) into :class:`Args`."""
    return Args(**vars(build_parser(Args, description).parse_args(argv)))


def parse_key_values(items: Sequence[str], what: str) -> Dict[str, Any]:
    """``["a=1", "b:[x, y]"]`` → ``{"a": 1, "b": ["x", "y"]}`` (values read as YAML).

    An item is ``KEY=VALUE`` or rl-zoo3's ``KEY:VALUE``: the key ends at the first ``=`` or ``:``
    (``policy_kwargs:dict(net_arch=[64])`` and ``net=a:b`` both split where they should).

    :raises ValueError: for an item with neither, naming the flag ``--<what>``.
    """
    out: Dict[str, Any] = {}
    for item in items:
        cut = min((i for i in (item.find("="), item.find(":")) if i >= 0), default=-1)
        key, value = (item[:cut], item[cut + 1:]) if cut >= 0 else ("", "")
        if cut < 0 or not key.strip():
            raise ValueError(f"--{what} expects KEY=VALUE (or rl-zoo3's KEY:VALUE) items, got {short(item)}")
        parsed = parse_yaml(value, f"--{what} value {short(value)} of {short(key.strip())}", field=key.strip())
        if isinstance(parsed, str) and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+", parsed.strip()):
            parsed = float(parsed)  # 1e-3: a number, as rl-zoo3 reads it (YAML 1.1, PyYAML's, wants 1.0e-3)
        out[key.strip()] = parsed
    return out


def check_counts(args: Args) -> None:
    """Counts must be >= 1, frequencies >= 0 (0 = never). :raises ValueError: naming the flag."""
    for name in ("n_timesteps", "n_envs", "eval_episodes", "keep_checkpoints", "torch_threads"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} = {getattr(args, name)} is invalid: expected >= 1")
    for name in ("eval_freq", "save_freq"):
        if getattr(args, name) < 0:
            raise ValueError(f"--{name.replace('_', '-')} = {getattr(args, name)} is invalid: expected >= 0 "
                             f"(0 = never, where rl-zoo3 takes -1)")
    if args.vec_env not in ("batched", "sync", "async"):
        raise ValueError(f"--vec-env {args.vec_env!r} is invalid: expected batched, sync or async")
