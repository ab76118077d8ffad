"""Train any client-selection design on FedSelect: a registered trainer (set_es, set_es_q, set_distill, …) or a Stable-Baselines3 algorithm.

    .venv/bin/python train_agent.py --algo set_es --env Churn --seed 0          # a design on a bench scenario
    .venv/bin/python train_agent.py --algo set_es --env examples/my_federation.yaml   # on your own scenario file
    .venv/bin/python train_agent.py --algo favor --env default                 # FAVOR on the default preset
    .venv/bin/python train_agent.py --algo favor --env fedsel/FedSelect-Tiny-v0 --n-timesteps 400 --n-envs 2
    .venv/bin/python train_agent.py --algo ppo --env my_federation.yaml        # any YAML env config
    .venv/bin/python train_agent.py --algo favor --env default --name run1 --resume   # continue an interrupted run

Every ``--algo`` is a trainer of :mod:`agents.training.trainers` (``--algo nope`` lists them). A design of that
registry (``set_es``, ``set_es_q``, ``set_distill``, ``set_distill_cover``) trains on a scenario — a registered name,
its id ``fedsel/Bench-<Name>-v0`` or a YAML scenario file — with its settings from ``configs/<algo>.yml`` (the
scenario's entry, else ``default``), ``--hyperparams`` over them and ``--env-kwargs`` as its env overrides; it writes
the same run folder (``args.yaml``, ``hyperparams.yaml``, ``env_config.yaml``, its model, ``progress.jsonl``, ``tb/``),
shows a progress bar, resumes with ``--resume`` and is evaluated by ``evaluate.py --policy runs/train/<name>``.
The SB3 algorithms take the steps below (the script reads top to bottom, CleanRL style; the machinery lives in
:mod:`agents.training`, steps 4-8 in :mod:`agents.training.sb3`):
1. the arguments (:class:`~agents.training.cli.Args`);
2. the env config: the preset / env id / YAML file (``fedsel_env.config.resolve_env``), the algorithm's
   own ``env_kwargs`` from its hyper-parameter file, then ``--env-kwargs``; checked against what the
   algorithm can act in;
3. the hyper-parameters: ``configs/<algo>.yml``, keyed by env id as in rl-zoo3, then ``--hyperparams``
   (2 and 3, with every other check, before anything is built: :func:`agents.training.settings.prepare`,
   which the experiments' training calls too);
4. the training envs (``SubprocVecEnv`` when ``--n-envs`` > 1, one torch thread per worker);
5. the model, new or resumed from the run's last checkpoint (model + replay buffer + step count);
6. the callbacks: evaluation of the *deployed* form (FAVOR: the ``topk`` agent taking the K highest
   Q-values; logged as mean return, success rate and rounds to the target), checkpoints, each training
   episode's FL metrics (``fl/`` in TensorBoard) and any the hyper-parameters' ``callback`` names;
7. ``learn`` with TensorBoard logs and a progress bar;
8. the final model, saved with the exact env config beside it.

Everything goes to ``runs/train/<name>/``; every file is written atomically (temp file + ``os.replace``).
Training randomness: ``--seed`` is given to SB3, which seeds its own generators (and, as SB3 does,
Python's, NumPy's and torch's global ones — this script is the top-level program); the envs derive
theirs from ``reset(seed)``.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

if __name__ == "__main__":  # restart under tcmalloc before the heavy imports below (docs/PERFORMANCE.md)
    from fedsel_env.allocator import reexec_with_tcmalloc

    reexec_with_tcmalloc()  # a CNN round runs 1.2-1.4x faster under tcmalloc

import torch

from agents.training import cli
from agents.training.atomic import lock_run_folder
from agents.training.cli import Args
from agents.training.runs import note_machine, save_settings
from agents.training.sb3 import learn
from agents.training.settings import prepare as prepare_sb3
from agents.training.trainers import prepare_design, trainer
from fedsel_env.config import read_yaml


def parse_args(argv: Optional[Sequence[str]] = None) -> Args:
    """The command line as :class:`~agents.training.cli.Args` (``--help`` lists the flags)."""
    return cli.parse_args(argv, description=__doc__.split("\n")[0])


def prepare(args: Args) -> Dict[str, Any]:
    """Every setting of the run, checked before anything is built: an SB3 algorithm's
    (:func:`agents.training.settings.prepare`) or a registered design's (:func:`~agents.training.trainers.prepare_design`).

    :raises ValueError: for an unknown ``--algo`` (listing the registered trainers) or any bad argument.
    """
    saved = Path(args.runs_dir) / (args.name or "") / "args.yaml"
    if args.resume and args.name and saved.is_file():  # the run's own algorithm decides which path resumes it
        algo = (read_yaml(saved, "run settings file") or {}).get("algo")
        args.algo = algo if isinstance(algo, str) else args.algo
    return prepare_sb3(args) if trainer(args.algo).sb3 else prepare_design(args)


def main(argv: Optional[Sequence[str]] = None) -> Path:
    """Train as ``argv`` says; return the run folder."""
    args = parse_args(argv)
    setup = prepare(args)  # ValueError on any bad argument, before any env or process is started
    setup["mapper"] = design_mapper(args, setup)
    with lock_run_folder(setup["run_dir"], "train_agent.py"):  # one writer per run folder: a second is refused
        note_machine(setup["run_dir"])  # machines.jsonl: this call's commit, CPU and library versions
        return train_design(setup) if "trainer" in setup else learn(setup)


def design_mapper(args: Args, setup: Dict[str, Any]) -> Any:
    """Who plays each set_es / set_es_q generation's episodes: ``--ray [ADDRESS]`` (issue #46) a
    :class:`~agents.training.ray_map.RayMapper` (Ray tasks); ``--n-envs E`` a
    :class:`~agents.training.set_es.VectorMapper` of E episodes at once (E = 1: one after another); neither: None,
    the trainer's default (16 at once). The results are the same bit for bit whichever plays them.
    :raises ValueError: for ``--ray`` with an SB3 algorithm, either with a design trained in one process
        (``set_distill``), both together, a bad address or Ray not installed — before anything is written."""
    if "trainer" not in setup:
        if args.ray is not None:
            raise ValueError(f"--ray: {args.algo} is a Stable-Baselines3 algorithm, trained in one process; --ray "
                             f"plays the generations of set_es / set_es_q: drop --ray")
        return None  # --n-envs is the SB3 algorithm's own setting
    if not setup["trainer"].mapped and (args.ray is not None or args.n_envs is not None):
        raise ValueError(f"{args.algo} trains in one process (each episode learns from the ones before): drop "
                         f"{'--ray' if args.ray is not None else '--n-envs'}")
    if args.ray is not None:
        if args.n_envs is not None:
            raise ValueError(f"--ray and --n-envs {args.n_envs} exclude each other: with --ray every episode of a "
                             f"generation is a Ray task; drop one")
        from agents.training.ray_map import RayMapper

        return RayMapper(args.ray)
    if args.n_envs is None:
        return None
    from agents.training.set_es import SerialMapper, VectorMapper

    return SerialMapper() if args.n_envs == 1 else VectorMapper(args.n_envs)


def train_design(setup: Dict[str, Any]) -> Path:
    """Train a design of the trainer registry (set_es, set_es_q, set_distill, set_distill_cover, or one a user
    registered) into the run folder, new or resumed; ``setup`` is :func:`prepare`'s."""
    args, run_dir, hp = setup["args"], setup["run_dir"], setup["hp"]
    torch.set_num_threads(args.torch_threads)
    run_dir.mkdir(parents=True, exist_ok=True)
    if not args.resume:
        save_settings(run_dir, args, setup["env_config"], hp)
    mapper = setup.get("mapper")  # None: the trainer plays a set_es generation in this process, 16 episodes at once
    try:
        summary = setup["trainer"].train(args.env, args.seed, run_dir, hp, resume=args.resume,
                                         progress=args.progress_bar, mapper=mapper,
                                         log=print if args.verbose else (lambda _line: None))
    except KeyboardInterrupt:  # every finished generation / episode is on disk: --resume goes on from there
        print(f"\nInterrupted; continue with `.venv/bin/python train_agent.py --name {args.name} --runs-dir "
              f"{args.runs_dir} --resume`")
        raise SystemExit(130)
    if args.verbose:
        print(f"Saved {run_dir}: {summary}")
    return run_dir


if __name__ == "__main__":
    try:
        main()
    except ValueError as e:
        sys.exit(f"train_agent.py: error: {e}")
