"""Evaluate client-selection policies head to head on the same federations (docs/SPEC.md §1, §5).

    python evaluate.py                                        # the first look: where selection matters (~3 min)
    python evaluate.py --env default                          # every hand-written agent, default preset, 5 seeds
    python evaluate.py --env tiny --policy random --policy afl --seeds 0 1 2 3 4
    python evaluate.py --policy all --policy runs/train/favor_default_seed0     # + a trained FAVOR model
    python evaluate.py --policy random --policy rbcsf:v=10,beta=0.1 --policy fast=rbcsf:v=50
    python evaluate.py --aggregator fedavg --aggregator qfedavg:q=1 --policy random --policy qffl
    python evaluate.py --config configs/eval/hetero_system.yaml --workers 2   # an eval config file
    python evaluate.py --env default --n-envs 16                               # 16 episodes at once (vector env)
    python evaluate.py --config configs/eval/hetero_system.yaml --resume      # finish an interrupted run
    python evaluate.py --config configs/eval/hetero_system.yaml --ray auto    # episodes as tasks on a Ray cluster
    python evaluate.py --suite bench --policy pow_d --scenarios Churn,Large   # FedSelect-Bench leaderboard (docs/BENCHMARK.md)
    python evaluate.py --env examples/my_federation.yaml     # a scenario of your own: every heuristic, its objective
    python evaluate.py --suite bench --scenarios examples/my_federation.yaml  # ... with the oracle: normalised scores

With no argument that says what to evaluate (only where to write it, ``--resume`` / ``--overwrite``, ``--n-envs``,
``--no-plots``, ``--no-progress``) it runs ``--suite first-look`` (:data:`fedsel_eval.bench.FIRST_LOOK`): every
heuristic, random and the lookahead oracle live on three digits scenarios of FedSelect-Bench where selection
matters, six seeds each, and prints and draws the leaderboard. The default preset (``--env default``) is not
it: there no policy beats random by more than the noise of a few seeds (docs/EVALUATION.md, Quick start).

The script reads top to bottom (CleanRL style):
1. the arguments (:class:`Args`), over those of an eval config file (``--config``);
2. the run folder's path (``runs/eval/<name>/``, numbered when taken; the latest with ``--resume``);
3. :func:`fedsel_eval.run`, which does the rest and prints as it goes: the plan (env config,
   policies, backends, seeds — every input checked before anything runs); the run folder (new, or
   resumed when its ``config.json`` matches); the episodes (every policy × backend × seed from
   ``env.reset(seed)``, common random numbers), each appended to ``episodes.jsonl`` as it finishes,
   under a progress bar; the tables (means over seeds with 95% bootstrap CIs, paired differences
   against ``--reference``: ``summary.md``, ``main_table.csv``, ``fairness_table.csv``, ``episodes.csv``,
   ``summary.csv``); the plots.

The work is done by the :mod:`fedsel_eval` package (the same ``run`` the reproduction scripts in
``experiments/`` call); docs/EVALUATION.md lists every option and output.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, List, Optional, Sequence

DEFAULT_SEEDS = [0, 1, 2, 3, 4]
#: options that keep a run the first look (``--suite first-look``) when they are all that is given: where it is
#: written and how it is shown, not what is evaluated
FIRST_LOOK_OPTIONS = {"name", "out", "runs_dir", "resume", "overwrite", "n_envs", "torch_threads", "plots", "progress"}


# ---------------------------------------------------------------------------------------------- 1. args
@dataclass
class Args:
    config: Optional[str] = field(default=None, metadata={
        "help": "an eval config YAML (configs/eval/*.yaml) with any of: env, env_kwargs, policy, aggregator, "
                "aggregator_param, seeds, rounds, target, name; options given here win"})
    policy: List[str] = field(default_factory=list, metadata={
        "help": "a policy: [LABEL=]AGENT[:KEY=VALUE,...] (e.g. rbcsf:v=10,beta=0.1; AGENT may be an import path "
                "my_pkg.agents:Greedy), [LABEL=]MODEL_PATH (a train_agent.py run folder or any SB3 / sb3-contrib "
                "model .zip, its algorithm read from it; a model saved without env_config.yaml is evaluated in the "
                "--env given here), [LABEL=]ALGO:MODEL_PATH (e.g. a2c:model.zip), or 'all' (every hand-written agent); "
                "repeat for several (default: all)"})
    env: Any = field(default="default", metadata={"help": "a preset name, an env id, or a YAML env-config path"})
    env_kwargs: Any = field(default_factory=list, metadata={
        "help": "env-config overrides KEY=VALUE (VALUE read as YAML), e.g. num_clients=40 'partition_params={sigma: 1.0}'"})
    aggregator: List[str] = field(default_factory=list, metadata={
        "help": "a backend NAME[:KEY=VALUE,...] (e.g. qfedavg:q=1; NAME may be an import path my_pkg.aggs:Median); "
                "repeat to compare several (default: the env config's)"})
    aggregator_param: Any = field(default_factory=list, metadata={
        "help": "KEY=VALUE parameter of the (single) --aggregator, e.g. q=1"})
    seeds: List[int] = field(default_factory=lambda: list(DEFAULT_SEEDS), metadata={"help": "episode seeds"})
    rounds: Optional[int] = field(default=None, metadata={"help": "round budget per episode (default: the config's max_rounds)"})
    target: Optional[float] = field(default=None, metadata={"help": "target accuracy Ω (default: the config's target_accuracy)"})
    reference: Optional[str] = field(default=None, metadata={
        "help": "the policy (label) every other is compared with, episode by episode on the same seed and backend "
                "(default: random, when evaluated); --resume with another reference re-summarises the same episodes"})
    name: Optional[str] = field(default=None, metadata={"help": "run name: folder under --runs-dir (default: the env's name, numbered -2, -3… when taken; --resume takes the latest)"})
    runs_dir: str = field(default="runs/eval", metadata={"help": "where run folders go"})
    out: Optional[str] = field(default=None, metadata={"help": "the run folder itself (overrides --runs-dir/--name)"})
    resume: bool = field(default=False, metadata={"help": "skip the episodes already in the run folder (same config only)"})
    overwrite: bool = field(default=False, metadata={"help": "discard an existing evaluation in the run folder"})
    workers: int = field(default=1, metadata={"help": "parallel worker processes (results are the same as with 1)"})
    n_envs: int = field(default=1, metadata={
        "help": "play up to this many episodes at once in this process through the vector env, their rounds' "
                "local training in one call (results are the same as with 1; docs/EVALUATION.md)"})
    ray: Optional[str] = field(default=None, metadata={
        "help": "run the episodes as Ray tasks (results are the same): --ray alone starts Ray on this machine; "
                "--ray auto joins the cluster this machine is part of (`ray start`); --ray ray://HOST:10001 "
                "another (docs/EVALUATION.md)"})
    torch_threads: int = field(default=1, metadata={"help": "torch threads per process"})
    device: Optional[str] = field(default=None, metadata={
        "help": "torch device of the simulated federations (env config 'device': cpu, cuda, cuda:N, auto); "
                "default: the env config's (cpu)"})
    trust_file: bool = field(default=False, metadata={
        "help": "load the --policy model files with Stable-Baselines3's own unpickler, which runs any code a file "
                "names: only for files you trust. Without it their pickled entries are read as plain data and a "
                "file that names code is refused (docs/ROBUSTNESS.md, Trust). Not settable from a --config file"})
    plots: bool = field(default=True, metadata={"help": "write the PNG plots"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    list: bool = field(default=False, metadata={"help": "list the agents, backends and presets, then exit"})
    suite: Optional[str] = field(default=None, metadata={
        "help": "'bench': run the policies (plus random, the lookahead oracle and every heuristic) over "
                "FedSelect-Bench's scenarios and print the leaderboard (docs/BENCHMARK.md); --seeds default: the "
                "reference's seeds. 'first-look': three digits scenarios, six seeds, every episode played live "
                "(what evaluate.py runs with no arguments; docs/EVALUATION.md)"})
    scenarios: Optional[str] = field(default=None, metadata={
        "help": "with --suite bench: comma-separated scenarios, each a registered name, an id "
                "fedsel/Bench-<Name>-v0 or a YAML scenario file (an env config plus objective:; default: all)"})


def _numbered_folder(runs_dir: Path, name: str, latest: bool, holds_run: Any = None) -> Path:
    """``runs_dir/name``, ``name-2``, ``name-3``…: the latest that holds a run (``latest``) or the first free one.

    :param holds_run: whether a folder holds a run (default: it has an evaluation's ``config.json``)."""
    holds_run = holds_run or (lambda p: (p / "config.json").exists())
    candidates = [runs_dir / name] + [runs_dir / f"{name}-{i}" for i in range(2, 10_000)]
    used = [p for p in candidates if holds_run(p)]
    if latest:
        return used[-1] if used else candidates[0]
    return next(p for p in candidates if not holds_run(p))


def parse_args(argv: Optional[Sequence[str]] = None) -> Args:
    """Build an argparse parser from :class:`Args`, parse ``argv``, and fill what it leaves out from
    the ``--config`` file, then from the defaults."""
    from fedsel_eval import EVAL_CONFIG_KEYS, load_eval_config, parse_params

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    defaults = {}
    for f in fields(Args):
        flag = "--" + f.name.replace("_", "-")
        defaults[f.name] = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        kind, helptext = str(f.type), f.metadata["help"]
        if "default" not in helptext and defaults[f.name] not in (None, [], False):
            helptext += f" (default: {defaults[f.name]})"
        if kind == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=helptext)
        elif f.name in ("policy", "aggregator", "aggregator_param"):
            parser.add_argument(flag, action="append", default=None, help=helptext,
                                metavar="KEY=VALUE" if f.name == "aggregator_param" else "SPEC")
        elif f.name == "env_kwargs":
            parser.add_argument(flag, nargs="*", default=None, metavar="KEY=VALUE", help=helptext)
        elif f.name == "seeds":
            parser.add_argument(flag, nargs="+", type=int, default=None, metavar="SEED", help=helptext)
        elif f.name == "ray":
            parser.add_argument(flag, nargs="?", const="local", default=None, metavar="ADDRESS", help=helptext)
        else:
            parser.add_argument(flag, type=int if "int" in kind else float if "float" in kind else str,
                                default=None, help=helptext)
    given = {k: v for k, v in vars(parser.parse_args(argv)).items() if v is not None}
    if set(given) <= FIRST_LOOK_OPTIONS:  # nothing says what to evaluate: the first look
        given["suite"] = "first-look"
    values = dict(defaults)
    if given.get("config"):
        from_file = load_eval_config(given["config"])
        values.update({k: v for k, v in from_file.items() if k in EVAL_CONFIG_KEYS})
        if "name" not in from_file:
            values["name"] = Path(given["config"]).stem
        for key in ("env_kwargs", "aggregator_param"):  # mappings: the command line's items win key by key
            if key in given:
                given[key] = {**from_file.get(key, {}), **parse_params(given[key], "--" + key.replace("_", "-"))}
    values.update(given)
    for key in ("env_kwargs", "aggregator_param"):
        if not isinstance(values[key], dict):
            values[key] = parse_params(values[key], "--" + key.replace("_", "-"))
    return Args(**values)


def list_choices() -> str:
    """What can be evaluated: registered agents, backends, presets, every registered env id and the suites."""
    import inspect

    import gymnasium as gym

    import agents
    import fedsel_env
    from fedsel_env.bench import SCENARIOS
    from fedsel_env.sim.aggregators import AGGREGATORS
    from fedsel_env.config import ENV_IDS, PRESETS
    from fedsel_eval.bench import SUITES

    lines = ["agents (--policy NAME[:KEY=VALUE,...]):"]
    for n in sorted(agents.AGENTS):
        cls = agents.AGENTS[n]
        params = [f"{p.name}={p.default!r}" for p in list(inspect.signature(cls.__init__).parameters.values())[1:]
                  if p.name not in ("spec", "seed") and p.default is not p.empty]
        lines.append(f"  {n}: modes {list(cls.supported_modes)}; params {', '.join(params) or 'none'}")
    lines.append("backends (--aggregator): " + ", ".join(sorted(AGGREGATORS)))
    lines.append("presets (--env): " + ", ".join(f"{p} ({ENV_IDS.get(p, '-')})" for p in PRESETS))
    bench_ids = {sc.env_id: f"FedSelect-Bench {sc.name}: {sc.objective}" for sc in SCENARIOS.values()}
    about = {**{v: f"preset {k}" for k, v in ENV_IDS.items()}, **bench_ids,
             fedsel_env.MO_ENV_ID: "the default preset with the vector reward (MO-Gymnasium)"}
    lines.append("env ids (--env, gym.make):")
    lines += [f"  {i}: {about.get(i, 'registered')}" for i in sorted(gym.registry) if i.startswith("fedsel/")]
    lines.append("suites (--suite): " + ", ".join(sorted(SUITES)) + "; --scenarios: " + ", ".join(SCENARIOS)
                 + " (names or ids), or YAML scenario files (an env config plus objective:, docs/BENCHMARK.md)")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> Path:
    """Evaluate as ``argv`` says; return the run folder."""
    args = parse_args(argv)
    if args.list:
        print(list_choices())
        return Path(args.runs_dir)
    import fedsel_eval

    for name in ("workers", "torch_threads", "n_envs"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} = {getattr(args, name)} is invalid: expected >= 1")

    if args.trust_file:  # an environment variable, so worker processes inherit the opt-in
        from agents.saved_models import TRUST_ENV

        os.environ[TRUST_ENV] = "1"
    if args.device is not None:  # --device sets the env config's device (checked with the plan)
        args.env_kwargs = {**args.env_kwargs, "device": args.device}

    if args.suite is not None or args.scenarios is not None:
        return _bench(args)

    # 2. the run folder's path (nothing is written before the plan is checked)
    env_name = args.env if isinstance(args.env, str) else Path(args.config or "custom").stem
    if env_name in ("default", "fedsel/FedSelect-v0"):  # the default preset, with or without --env-kwargs
        print("note: the default preset has little headroom for selection: on a few seeds no policy reaches the "
              "target in fewer rounds than random beyond the noise (docs/EVALUATION.md). `evaluate.py` alone runs "
              "the first look, on scenarios where selection matters.")
    from fedsel_env.scenarios import env_scenario

    sc = env_scenario(args.env)  # a scenario (a bench id, a YAML file with `objective:`): its objective is shown too
    if sc is not None:
        print(f"scenario {sc.name}: scored on {sc.objective} ({'lower' if sc.lower_is_better else 'higher'} is "
              f"better); the env's reward is " + ("the objective" if sc.objective_env_config()["reward"] == "objective"
                                                  else f"the file's own ({sc.config['reward']})"))
    if sc is not None and sc.source:  # a user's scenario file has no reference record: what it is judged against is
        if args.policy and "all" not in args.policy:  # played here, as --suite bench does
            from fedsel_eval.bench import heuristic_policies

            args.policy = list(dict.fromkeys([*heuristic_policies(), *args.policy]))
            print("note: a scenario file: every heuristic is evaluated beside the given policies")
        if args.seeds == DEFAULT_SEEDS:
            args.seeds = list(sc.reporting_seeds)
            print(f"note: a scenario file: its reporting seeds {args.seeds} (--seeds picks others)")
    name = args.name or (Path(env_name).stem if env_name.endswith((".yml", ".yaml")) else env_name.split("/")[-1])
    if args.out:
        out = Path(args.out)
    elif args.name or args.overwrite:
        out = Path(args.runs_dir) / name
    else:  # default folders are numbered, so re-running the same command starts a new run (or resumes the latest)
        out = _numbered_folder(Path(args.runs_dir), name, latest=args.resume)

    # 3. plan → episodes → run folder → summary → plots (interrupted: what finished is in episodes.jsonl)
    try:
        result = fedsel_eval.run(out, env=args.env, policies=args.policy, aggregators=args.aggregator,
                                 aggregator_params=args.aggregator_param, seeds=args.seeds, rounds=args.rounds,
                                 target=args.target, env_overrides=args.env_kwargs, env_name=env_name,
                                 resume=args.resume, overwrite=args.overwrite, workers=args.workers,
                                 torch_threads=args.torch_threads, progress=args.progress, plots=args.plots,
                                 log=print, ray=args.ray, reference=args.reference, n_envs=args.n_envs)
    except fedsel_eval.Interrupted as e:
        print(f"\nInterrupted: finished episodes are in {e.episodes}; continue with the same "
              f"arguments plus --resume")
        raise SystemExit(130)
    if sc is not None:  # the table the scenario is judged by: its objective per policy, Δ vs the reference
        from fedsel_eval.objective import objective_markdown

        print("\n" + objective_markdown(result.records, sc, result.results.reference if result.results else None))
    if args.plots:
        print("plots: " + ", ".join(p.name for p in result.plots))
    print(f"outputs in {out}")
    return out


def _bench(args: Args) -> Path:
    """``--suite bench`` / ``first-look``: a leaderboard over FedSelect-Bench's scenarios (``fedsel_eval.bench``),
    in a run folder found as a plain evaluation's is (numbered when taken; ``--resume`` continues the latest)."""
    import time

    from fedsel_eval.bench import SUITES, check_suite_folder, run_suite, suite_files
    from fedsel_env.bench import select

    suite = args.suite or "bench"  # --scenarios alone: the bench suite
    if suite not in SUITES:
        raise ValueError(f"--suite {args.suite!r} is invalid: expected one of {sorted(SUITES)} (with --scenarios a,b)")
    preset = SUITES[suite]
    scenarios = args.scenarios or preset["scenarios"]
    select(scenarios)  # an unknown scenario: refused before anything runs
    policies = [p for p in args.policy if p != "all"]  # every heuristic is always shown beside them
    if args.out:
        out = Path(args.out)
    elif args.name or args.overwrite:
        out = Path(args.runs_dir) / (args.name or suite)
    else:  # numbered, as a plain evaluation's: a rerun starts a new folder (or continues the latest: --resume)
        out = _numbered_folder(Path(args.runs_dir), suite, latest=args.resume,
                               holds_run=lambda p: bool(suite_files(p)))
    if not args.overwrite:  # a folder that holds a suite run: refused before anything runs
        check_suite_folder(out, resume=args.resume)
    seeds = args.seeds if args.seeds != DEFAULT_SEEDS else preset["seeds"]
    title = (f"**First look** (`evaluate.py`, `--suite first-look`): every heuristic, random and the lookahead "
             f"oracle on {', '.join(sc.name for sc in select(scenarios))}, every episode played here; normalised "
             f"score 0 = random, 1 = the oracle.") if suite == "first-look" else ""
    if suite == "first-look":
        print(f"{title}\nRuns a few minutes (docs/EVALUATION.md); each episode is printed as it ends.")
    started = time.time()
    run_suite(out, policies, scenarios, seeds, rounds=args.rounds, plots=args.plots,
              log=print if args.progress else (lambda _line: None), n_envs=args.n_envs, resume=args.resume,
              overwrite=args.overwrite, reuse_reference=preset["reuse_reference"], title=title,
              torch_threads=args.torch_threads, ray=args.ray)
    print("\n" + (out / "leaderboard.md").read_text())
    print(f"{time.time() - started:.0f} s; outputs in {out} (leaderboard.md, .json" +
          (", .png)" if args.plots else ")"))
    return out


if __name__ == "__main__":
    from fedsel_env.allocator import reexec_with_tcmalloc

    reexec_with_tcmalloc()  # a CNN round runs 1.2-1.4x faster under tcmalloc (docs/PERFORMANCE.md)
    try:
        main()
    except ValueError as e:
        sys.exit(f"evaluate.py: error: {e}")
