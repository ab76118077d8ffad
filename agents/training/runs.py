"""The run folder ``<runs_dir>/<name>/``: its settings files, its checkpoints, and resuming from them.

A new run writes ``args.yaml``, ``env_config.yaml`` and ``hyperparams.yaml`` first (atomically); a
``--resume`` call reads them back, so the run's own settings win over the new call's, except for the
bookkeeping flags of this call and a new ``--n-timesteps``. Checkpoints are
``checkpoints/ckpt_<steps>_steps.zip`` with ``ckpt_replay_buffer_<steps>_steps.pkl`` beside them (written
by :class:`agents.training.callbacks.AtomicCheckpointCallback`); a model zip marks a complete one, and
carries the training envs' episode stream (:mod:`agents.training.stream`), which a resume continues.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from fedsel_env.config import read_yaml

from .algorithms import algorithm_class, is_off_policy
from .atomic import atomic_write_bytes, atomic_write_yaml

CKPT_PREFIX = "ckpt"
#: The flags of a ``--resume`` call that replace the run's saved ones (they change no result).
RESUME_KEEPS = ("resume", "runs_dir", "progress_bar", "verbose", "torch_threads", "trust_file", "ray")


def default_run_name(algo: str, env: str, seed: int) -> str:
    """``<algo>_<env>_seed<seed>``, the env as a YAML file's stem or an env id's last part (an algorithm's
    import path ``package.module:Class`` as ``Class``)."""
    tag = Path(env).stem if env.endswith((".yml", ".yaml")) else env.split("/")[-1]
    return f"{algo.split(':')[-1]}_{tag}_seed{seed}"


def check_new_run(run_dir: Path) -> None:
    """:raises ValueError: when ``run_dir`` already holds a run."""
    if (run_dir / "args.yaml").exists():
        raise ValueError(f"run folder {str(run_dir)!r} already exists: pass --resume to continue it, "
                         f"or another --name")


def resumed_settings(args: Any) -> Tuple[Any, Dict[str, Any], Dict[str, Any]]:
    """The arguments, env config and hyper-parameters of the run ``--name`` that ``args`` resumes.

    :raises ValueError: without ``--name``, or when there is no run to continue.
    """
    if not args.name:
        raise ValueError("--resume needs --name of the run to continue")
    run_dir = Path(args.runs_dir) / args.name
    saved = run_dir / "args.yaml"
    if not saved.is_file():
        raise ValueError(f"--resume: no run to continue at {str(run_dir)!r} (no args.yaml)")
    old = _settings(saved)
    # the run's own settings win; only the bookkeeping flags of this call are kept
    keep = {k: getattr(args, k) for k in RESUME_KEEPS}
    if args.n_timesteps is not None:  # a longer (or shorter) run may be asked for when resuming
        keep["n_timesteps"] = args.n_timesteps
    args = dataclasses.replace(args, **{**old, **keep})
    copy = scenario_copy(run_dir, args.env)
    if copy is not None and copy.is_file():
        if not Path(args.env).is_file():  # called from another directory, or the file is gone: the run's copy
            args = dataclasses.replace(args, env=str(copy))
        elif Path(args.env).read_bytes() != copy.read_bytes():
            raise ValueError(f"--resume: the run's scenario file {args.env} has changed since the run started, "
                             f"which would change the run; the run kept a copy: put it back (cp {copy} {args.env}), "
                             f"or train the new file under another --name")
    return args, _settings(run_dir / "env_config.yaml"), _settings(run_dir / "hyperparams.yaml")


def scenario_copy(run_dir: Path, env: Any) -> Optional[Path]:
    """Where a run keeps its copy of a YAML scenario / env file (``scenario/<file name>``: the same file name, so
    the scenario keeps its default name), which a ``--resume`` checks the file against, or reads when the file is
    not where the run's settings name it; None for a preset or an env id."""
    if not isinstance(env, str) or not env.endswith((".yml", ".yaml")):
        return None
    return Path(run_dir) / "scenario" / Path(env).name


def _settings(path: Path) -> Dict[str, Any]:
    """One of a run's settings files: a mapping. :raises ValueError: naming the file and the fix."""
    data = read_yaml(path, "run settings file")  # missing, not UTF-8, bad YAML
    if not isinstance(data, dict):
        raise ValueError(f"run settings file {str(path)!r} must hold a mapping; it was damaged: restore it, "
                         f"or start the run again under another --name")
    return data


def save_settings(run_dir: Path, args: Any, env_config: Mapping[str, Any], hp: Mapping[str, Any]) -> None:
    """Write the run's settings (read back by ``--resume``); ``args.yaml`` last, as it marks the run as started.
    A YAML scenario or env file is copied into the run (:func:`scenario_copy`): a resume from another directory, or
    after the file was moved, reads the copy; one edited since is refused."""
    copy = scenario_copy(run_dir, args.env)
    if copy is not None and Path(args.env).is_file():
        copy.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(copy, Path(args.env).read_bytes())
    atomic_write_yaml(run_dir / "env_config.yaml", env_config)
    atomic_write_yaml(run_dir / "hyperparams.yaml", hp)
    atomic_write_yaml(run_dir / "args.yaml", vars(args))


#: one JSON line a ``train_agent.py`` call (a resumed run has several): the code and machine it trained on
MACHINES_FILE = "machines.jsonl"


def machine_facts() -> Dict[str, Any]:
    """What a trained model may depend on beyond its settings: the code's commit (and whether ``fedsel_env/`` or
    ``agents/`` differ from it) and the machine's CPU, kernels and library versions — float rounding differs by
    CPU and kernel path (docs/ENVIRONMENT.md#determinism-and-common-random-numbers), so a later replay that does
    not match can tell a rounding difference from a code change. A fact that cannot be had is None."""
    import datetime
    import os
    import platform
    import subprocess

    import numpy
    import torch

    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> Optional[str]:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    status = git("status", "--porcelain", "--", "fedsel_env", "agents")
    info = Path("/proc/cpuinfo")  # Linux; elsewhere platform.processor()
    lines = info.read_text().splitlines() if info.is_file() else []
    cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), None)
    return {"utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status),
            "cpu": cpu or platform.processor() or None, "cores": os.cpu_count(),
            "torch": torch.__version__, "torch_kernels": torch.backends.cpu.get_cpu_capability(),
            "numpy": numpy.__version__, "python": platform.python_version()}


def note_machine(run_dir: Path) -> None:
    """Append this call's :func:`machine_facts` to the run folder's :data:`MACHINES_FILE` (whole lines only)."""
    import json
    import os

    run_dir.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(machine_facts(), sort_keys=True) + "\n").encode()
    fd = os.open(run_dir / MACHINES_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_machines(run_dir: Path) -> List[Dict[str, Any]]:
    """The calls :func:`note_machine` recorded for a run (none for a run trained before it existed)."""
    import json

    path = Path(run_dir) / MACHINES_FILE
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a line cut short by a kill: the calls before it stand
            continue
    return out


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


def _damaged_checkpoint_fix(checkpoints: List[Path]) -> str:
    """What to do when the last of ``checkpoints`` cannot be loaded."""
    last = checkpoints[-1]
    files = f"{last.name} and {replay_buffer_path(last).name}"
    if len(checkpoints) > 1:
        return (f"delete {files} from {str(last.parent)!r} to resume from the checkpoint before it, "
                f"{checkpoints[-2].name}")
    return (f"delete {files} from {str(last.parent)!r} to resume from step 0, or start the run again under "
            f"another --name")


def resume_model(args: Any, env: Any, run_dir: Path) -> Optional[Any]:
    """With ``--resume``, the run's last checkpoint: model, optimizer, step count, replay buffer and the
    training envs' episode stream (:func:`agents.training.stream.restore`); else None.

    Returns None (a new model is to be built) without ``--resume`` or when the run has no checkpoint yet.

    :raises ValueError: naming the file and the fix when the checkpoint's model or replay buffer is
        missing or damaged.
    """
    from agents.saved_models import load_model, load_replay_buffer

    from .stream import restore

    if not args.resume:
        return None
    checkpoints = list_checkpoints(run_dir / "checkpoints")
    if not checkpoints:
        print(f"Resuming {run_dir}: no checkpoint yet, starting from step 0")
        return None
    last, fix = checkpoints[-1], _damaged_checkpoint_fix(checkpoints)
    trust = True if getattr(args, "trust_file", False) else None  # None: FEDSEL_TRUST_FILES decides
    model = load_model(algorithm_class(args.algo), last, what="checkpoint", fix=fix, trust=trust, env=env,
                       device=args.device, tensorboard_log=str(run_dir / "tb"))
    if is_off_policy(args.algo):
        load_replay_buffer(model, replay_buffer_path(last), what=f"the replay buffer of checkpoint {last.name}",
                           fix=fix, trust=trust)
    why_not = restore(model, env)  # the episodes go on where the checkpoint left them
    print(f"Resuming {run_dir} from {last.name}: step {model.num_timesteps} of {args.n_timesteps}"
          + (f" (the training envs start new episodes: {why_not})" if why_not else ""))
    return model
