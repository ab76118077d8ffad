"""What the reproduction scripts share: arguments, evaluation runs, Markdown fragments, figures, timing.

Every script in ``experiments/`` regenerates one of docs/SPEC.md §6's published results from seeds:

1. it resolves its env configs (the paper's setup, scaled to this machine, or a ``--smoke`` one);
2. it runs its episodes through :func:`fedsel_eval.run` — the one call behind ``evaluate.py``, so
   the numbers come from the same code path users run — into ``runs/repro/<name>/<part>/`` (each an
   evaluate.py run folder: ``config.json``, ``episodes.jsonl``, ``summary.csv``/``.md``, plots);
3. it writes its Markdown table fragment (``table.md``), a JSON of the numbers in it
   (``results.json``) and its PNG figures into ``runs/repro/<name>/``;
4. unless ``--smoke`` or ``--no-publish``, it copies the figures to ``docs/img/repro_<name>*.png``, the
   JSON to ``experiments/results/<name>.json``, and splices the fragment into
   ``docs/REPRODUCTION.md`` between ``<!-- repro:<name> begin -->`` and ``<!-- repro:<name> end -->``,
   so the document only ever shows numbers a committed script produced.

A run folder whose ``config.json`` matches is resumed (finished episodes are kept), so an
interrupted script continues where it stopped; a changed config starts that part afresh (the old part's
files are moved to ``superseded-<time>/`` in its folder, not deleted).

Every results JSON and table fragment records the git commit the script ran at (:func:`provenance`,
taken when the script starts): ``commit``, and ``dirty`` / ``dirty_files`` — uncommitted changes to
tracked files of the code that computes the numbers (``CODE_PATHS``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from agents.training.atomic import atomic_write_text, jsonable  # one write helper, one JSON-cleaning rule

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "REPRODUCTION.md"
IMG_DIR = ROOT / "docs" / "img"
RESULTS_DIR = ROOT / "experiments" / "results"
RUNS_DIR = ROOT / "runs" / "repro"



def threads_to_one() -> None:
    """One torch / BLAS thread per process (the machine's two cores are shared)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)


# ============================================================================================ arguments
def parser(name: str, description: str) -> argparse.ArgumentParser:
    """The arguments every script takes (a script adds its own).

    :param name: the experiment's name (its folder under ``runs/repro``).
    :param description: the first line of the script's docstring.
    """
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--smoke", action="store_true",
                   help="a tiny configuration (few clients, few rounds) that checks the script runs; "
                        "publishes nothing")
    p.add_argument("--out", default=str(RUNS_DIR / name), help="the experiment's folder (default: %(default)s)")
    p.add_argument("--workers", type=int, default=1, help="evaluation worker processes (default: 1)")
    p.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="run the evaluation episodes as Ray tasks (same results): alone, a Ray started here; "
                        "'auto' or ray://HOST:10001, a cluster (docs/EVALUATION.md)")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="episode seeds (default: the script's)")
    p.add_argument("--no-publish", action="store_true",
                   help="leave docs/ and experiments/results/ alone (outputs go to --out only)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def check_args(args: argparse.Namespace) -> None:
    """Shared argument checks (``ValueError`` naming the option)."""
    if args.workers < 1:
        raise ValueError(f"--workers = {args.workers} is invalid: expected >= 1")
    if getattr(args, "ray", None) is not None:
        import fedsel_eval

        fedsel_eval.check_ray_address(args.ray, args.workers)
    if args.seeds is not None and (len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0):
        raise ValueError(f"--seeds {args.seeds} is invalid: expected distinct integers >= 0")


def run_cli(main: Any, script: str) -> None:
    """A script's ``if __name__ == "__main__"``: run ``main()``; a ``ValueError`` (a bad option or config
    value) exits with status 1 and ``<script>: error: <message>`` instead of a traceback."""
    try:
        main()
    except ValueError as e:
        sys.exit(f"{script}: error: {e}")


def publishing(args: argparse.Namespace) -> bool:
    """Whether this run writes into docs/ and experiments/results/."""
    return not (args.smoke or args.no_publish)


# ========================================================================================== evaluation
#: Where the script's evaluations run: ``ray`` is its ``--ray`` (set by :func:`start`), None = not on Ray.
_EXECUTION: Dict[str, Optional[str]] = {"ray": None}


def evaluate(out: Path, env: Mapping[str, Any], policies: Sequence[str], seeds: Sequence[int],
             aggregators: Sequence[str] = (), workers: int = 1, progress: bool = True,
             env_name: str = "custom", plots: bool = True,
             ray: Optional[str] = None) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]], Any]:
    """Run one evaluation (:func:`fedsel_eval.run`, as evaluate.py does) into the run folder ``out``.

    A folder of the same configuration is resumed; one of a different configuration is started afresh, its
    old files moved to ``superseded-<time>/`` (``fedsel_eval.run``'s ``restart_if_changed``).

    :param env: env-config fields, with an optional ``preset`` (as an eval config file's ``env``).
    :param policies: ``--policy`` values (``random``, ``rbcsf:v=10``, ``favor=runs/.../model_dir``).
    :param aggregators: ``--aggregator`` values (``qfedavg:q=1``); empty = the env config's.
    :param ray: run the episodes as Ray tasks (``fedsel_eval.run``'s ``ray``); default: the script's ``--ray``.
    :return: (episode records, summary rows, the plan).
    """
    import fedsel_eval

    result = fedsel_eval.run(out, env=dict(env), policies=list(policies), aggregators=list(aggregators),
                             seeds=list(seeds), env_name=env_name, resume=True, restart_if_changed=True,
                             workers=workers, progress=progress, plots=plots,
                             ray=ray if ray is not None else _EXECUTION["ray"])
    return result.records, result.rows, result.plan


def episodes_of(records: Sequence[Mapping[str, Any]], policy: str, backend: Optional[str] = None) -> List[Mapping[str, Any]]:
    """The records of one policy (and backend), by seed."""
    return sorted((r for r in records if r["policy"] == policy and (backend is None or r["backend"] == backend)),
                  key=lambda r: r["seed"])


def row_of(rows: Sequence[Mapping[str, Any]], policy: str, backend: Optional[str] = None) -> Mapping[str, Any]:
    """The summary row of one policy (and backend)."""
    for r in rows:
        if r["policy"] == policy and (backend is None or r["backend"] == backend):
            return r
    raise KeyError(f"no summary row for policy {policy!r}, backend {backend!r}")


def rounds_cell(eps: Sequence[Mapping[str, Any]], cap: int) -> str:
    """Rounds to Ω over seeds: ``mean ± std`` when every episode reached Ω, else what is known.

    An episode that never reached Ω within the ``cap`` rounds counts as "> cap": the cell then
    gives the mean over the episodes that reached it and how many did, e.g. ``31 (2/3; 1 > 120)``.
    """
    reached = [r["metrics"]["rounds_to_target"] for r in eps if r["reached"]]
    n, k = len(eps), len(reached)
    if k == 0:
        return f"> {cap} (0/{n})"
    mean, std = float(np.mean(reached)), float(np.std(reached))
    if k == n:
        return f"{mean:.1f} ± {std:.1f}"
    return f"{mean:.1f} ({k}/{n}; {n - k} > {cap})"


def rounds_lower_bound(eps: Sequence[Mapping[str, Any]], cap: int) -> float:
    """Mean rounds to Ω counting an episode that never reached it as ``cap`` (a lower bound): the
    convention of evaluate.py's tables (:func:`fedsel_eval.stats.to_target`)."""
    from fedsel_eval.stats import to_target

    return float(np.mean([to_target(r, "rounds_to_target", cap)[0] for r in eps]))


# ============================================================================================ Markdown
def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: Optional[str] = None) -> str:
    """A Markdown table: :func:`fedsel_eval.markdown.table` (the library's one builder)."""
    from fedsel_eval.markdown import table

    return table(headers, rows, align)


def fmt(x: Any, spec: str = ".3f") -> str:
    """A number for a table; ``—`` for None / NaN."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return format(x, spec)


def mean_std(values: Sequence[float], spec: str = ".3f") -> str:
    """``mean ± std`` of the finite values (``—`` if none)."""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return "—"
    return f"{v.mean():{spec}} ± {v.std():{spec}}"


def t_interval(values: Sequence[float], confidence: float = 0.95) -> Any:
    """The mean of the finite ``values`` with its Student-t interval: :func:`fedsel_eval.stats.t_interval` (the
    library's one t-interval; no interval below two values)."""
    from fedsel_eval.stats import t_interval as library_t_interval

    return library_t_interval(values, confidence)


def wall_time_note(seconds: float, workers: int, command: str, compute_seconds: Optional[float] = None,
                   compute_what: str = "its episodes (single-process time, summed from their records)",
                   longest: Optional[Mapping[str, Any]] = None) -> str:
    """The line every fragment ends with: how it was made and what it cost on this machine.

    :param seconds: this invocation's wall time (small when it resumed finished episodes).
    :param compute_seconds: the single-process time of the work behind the table, summed from the
        episode records (a resumed invocation does not change it).
    :param compute_what: what ``compute_seconds`` covers.
    :param longest: the longest invocation so far (``Outputs.longest_invocation``): the full run when
        this one only resumed it.
    """
    cost = f"; {compute_what}: {compute_seconds / 60:.1f} min in all" if compute_seconds is not None else ""
    full = ""
    if longest is not None and longest["seconds"] > seconds + 1.0:
        shown = re.sub(r"^python ", ".venv/bin/python ", str(longest["command"]))  # runs recorded before #35
        full = (f" The run that computed it, `{shown}`, took {longest['seconds'] / 60:.1f} min "
                f"wall time here.")
    return (f"\n*Generated by `{command}`: {seconds / 60:.1f} min wall time for this invocation on this machine "
            f"(2 CPU cores shared with other jobs, {workers} worker process{'es' if workers > 1 else ''}){cost}."
            f"{full}*\n")


def episode_seconds(*record_lists: Sequence[Mapping[str, Any]]) -> float:
    """The summed wall time of every episode in the given record lists (as each worker measured it)."""
    return float(sum(r["wall_time_s"] for records in record_lists for r in records))


# ========================================================================================== provenance
#: The code behind every number: uncommitted changes to tracked files here make a result "dirty".
#: experiments/results/ is left out: the scripts themselves rewrite those files.
CODE_PATHS = ("fedsel_env", "agents", "fedsel_eval", "experiments")
_NOT_CODE = ("experiments/results",)


def provenance(root: Path = ROOT, git: str = "git") -> Dict[str, Any]:
    """The git commit the code in ``root`` is at, and whether tracked code files differ from it.

    :param git: the git executable (tests pass a missing one).
    :return: ``{"commit": sha, "dirty": bool, "dirty_files": [paths]}``; where git or the repository is
        missing (a tarball), ``{"commit": None, "dirty": None, "dirty_files": None, "commit_note": why}``.
    """
    from fedsel_eval.records import git_provenance

    return git_provenance(root, CODE_PATHS, exclude=_NOT_CODE, git=git)


def provenance_note(prov: Mapping[str, Any]) -> str:
    """The fragment's line on the commit the numbers were produced at."""
    if prov.get("commit") is None:
        return f"*Commit: none recorded ({prov.get('commit_note', 'git unavailable')}).*"
    if not prov.get("dirty"):
        return f"*Produced at commit `{prov['commit'][:12]}` (no uncommitted changes to {', '.join(CODE_PATHS)}).*"
    files = prov["dirty_files"]
    shown = ", ".join(f"`{f}`" for f in files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    return (f"*Produced at commit `{prov['commit'][:12]}` **with uncommitted changes** to {shown}: "
            f"the numbers may not be reproducible from the commit alone.*")


# ============================================================================================ outputs
class Outputs:
    """Where an experiment writes: its folder, and (when publishing) docs/ and experiments/results/.

    :param name: the experiment's name (doc markers, figure and JSON names).
    :param out: its folder (``runs/repro/<name>``).
    :param publish: also write into docs/ and experiments/results/.
    """

    def __init__(self, name: str, out: Path, publish: bool) -> None:
        self.name, self.out, self.publish = name, Path(out), publish
        self.out.mkdir(parents=True, exist_ok=True)
        self.figures: List[str] = []
        #: the commit this script runs at, taken now (others may commit while it runs)
        self.provenance: Dict[str, Any] = provenance()

    def invocation(self, seconds: float, command: str) -> Dict[str, Any]:
        """Log this invocation in ``<out>/invocations.jsonl``; return the longest one logged (this included)."""
        path = self.out / "invocations.jsonl"
        with open(path, "a") as f:
            f.write(json.dumps({"command": command, "seconds": seconds, "time": time.time()}) + "\n")
        runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return max(runs, key=lambda r: r["seconds"])

    def figure(self, fig: Any, stem: str) -> Path:
        """Save a matplotlib figure as ``<out>/<stem>.png`` (and ``docs/img/repro_<stem>.png``)."""
        path = self.out / f"{stem}.png"
        fig.savefig(path, format="png", dpi=100)
        if self.publish:
            IMG_DIR.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, IMG_DIR / f"repro_{stem}.png")
        self.figures.append(stem)
        return path

    def results(self, data: Mapping[str, Any]) -> Path:
        """Write the numbers behind the table as ``results.json``, with the commit they were produced at
        (:func:`provenance`) first, and as a record (``fedsel_eval.records``: one row per episode, every
        printed figure a summary recomputed from the rows; ``experiments/records_of.py``) in ``record.json``;
        when publishing, the record is ``experiments/results/<name>.json``."""
        from experiments import records_of

        full = jsonable({**self.provenance, **data})
        path = self.out / "results.json"
        path.write_text(json.dumps(full, indent=1, allow_nan=False) + "\n")
        if not records_of.has_converter(self.name) and not self.publish:
            return path  # an experiment without a record yet may run, not publish
        rec = records_of.convert(self.name, full)  # ValueError when a printed figure is not its rows'
        rec.write(self.out / "record.json")
        if self.publish:
            rec.write(RESULTS_DIR / f"{self.name}.json")
        return path

    def fragment(self, markdown: str) -> Path:
        """Write ``table.md``; when publishing, splice it (with its figures) into docs/REPRODUCTION.md."""
        images = "".join(f"\n![{stem}](img/repro_{stem}.png)\n" for stem in self.figures)
        record = (f"*Record: `experiments/results/{self.name}.json` (`python -m fedsel_eval.recompute` recomputes "
                  f"every figure above from its rows).*\n" if records_of_exists(self.name) else "")
        text = markdown.rstrip() + "\n\n" + provenance_note(self.provenance) + "\n" + record + images
        path = self.out / "table.md"
        path.write_text(text)
        if self.publish:
            splice(DOC, self.name, text)
        return path


def records_of_exists(name: str) -> bool:
    """Whether experiment ``name`` publishes a record (``experiments/records_of.py``)."""
    from experiments import records_of

    return records_of.has_converter(name)


def splice(doc: Path, name: str, text: str) -> None:
    """Put ``text`` between the ``repro:<name>`` markers of ``doc``: :func:`fedsel_eval.markdown.splice` (the
    library's one splicer; appended with its markers where they are absent)."""
    from fedsel_eval.markdown import splice as library_splice

    library_splice(doc, f"repro:{name}", text)


class Clock:
    """Wall time since the script started."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self.start


def command_line(script: str, argv: Sequence[str]) -> str:
    """How this run was invoked, for the fragment (the machine-specific --out is left out)."""
    shown, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--out":
            skip = True
            continue
        if a.startswith("--out="):
            continue
        shown.append(a)
    return " ".join([".venv/bin/python", f"experiments/{script}"] + shown)


def figure(width: float = 7.5, height: float = 4.5, ncols: int = 1, nrows: int = 1) -> Tuple[Any, Any]:
    """A matplotlib figure (no pyplot state) and its axes."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes if (nrows, ncols) != (1, 1) else axes[0, 0]


def held(curve: Sequence[float], length: int) -> np.ndarray:
    """A per-round curve held at its last value up to ``length`` points (the job ended at Ω)."""
    v = np.asarray([np.nan if c is None else c for c in curve], dtype=np.float64)
    return np.concatenate([v, np.full(length - v.size, v[-1])]) if v.size < length else v[:length]


def start_setting(name: str, args: argparse.Namespace, setting_choice: str) -> "tuple[str, Clock, Outputs]":
    """:func:`start` for a script with ``--setting``: ``--smoke`` is the setting ``smoke``, the default
    ``--out`` becomes ``runs/repro/<name>/<setting>`` and the outputs are published as ``<name>_<setting>``.

    :return: (setting, clock, outputs).
    """
    setting = "smoke" if args.smoke else setting_choice
    if args.out == str(RUNS_DIR / name):
        args.out = str(RUNS_DIR / name / setting)
    clock, out = start(f"{name}_{setting}", args)
    return setting, clock, out


def start(name: str, args: argparse.Namespace) -> "tuple[Clock, Outputs]":
    """What every experiment does once its arguments are parsed: check them, one thread per
    process, take ``--ray`` for every :func:`evaluate` of the script, start the wall clock, open the
    outputs. Returns (clock, outputs)."""
    check_args(args)
    if args.smoke and args.out == str(RUNS_DIR / name):
        # a smoke run never shares the real run's folder: a run folder of another config starts afresh,
        # so a smoke run there would delete the real run's finished episodes
        args.out = str(RUNS_DIR / name / "smoke")
    _EXECUTION["ray"] = getattr(args, "ray", None)
    threads_to_one()
    return Clock(), Outputs(name, Path(args.out), publishing(args))


# ============================================================================================ training
def train_dqn(run_dir: Path, algo: str, config: Mapping[str, Any], train: Mapping[str, Any], seed: int,
              progress: bool) -> Tuple[Path, Dict[str, List[float]], bool]:
    """Train ``algo`` (``favor``, ``favor+``, ``dqn``) in the ``one`` mode on ``config`` through the front door's SB3
    loop (``agents.training.sb3.learn``, what ``train_agent.py`` runs; issue #46), recording every training episode;
    reuse a finished run of the same settings in ``run_dir``.

    ``train``: ``n_timesteps``, ``n_envs``, ``max_rounds`` (the training episodes' round budget) and
    ``hyperparams`` (overrides of ``configs/<algo>.yml``'s entry).

    :return: (the run folder with ``model.zip``, ``env_config.yaml``, ``args.yaml`` — what evaluate.py
        loads —, the per-episode training record: return, length, finishing step).
    """
    import yaml
    from stable_baselines3.common.callbacks import BaseCallback

    from agents.training.atomic import lock_run_folder
    from agents.training.cli import parse_args
    from agents.training.sb3 import learn
    from agents.training.settings import prepare

    run_dir = Path(run_dir)
    out = run_dir.parent
    key = {"algo": algo, "config": dict(config), "train": dict(train), "seed": seed}
    key_file, curve_file = run_dir / "experiment_key.json", run_dir / "episodes.json"
    time_file = run_dir / "train_time.json"
    if (run_dir / "model.zip").is_file() and key_file.is_file() and curve_file.is_file() \
            and json.loads(key_file.read_text()) == json.loads(json.dumps(key)):
        print(f"{algo}: reusing the trained model in {run_dir}")
        return run_dir, json.loads(curve_file.read_text()), False
    shutil.rmtree(run_dir, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    env_yaml = out / f"{run_dir.name}_env.yaml"
    env_yaml.write_text(yaml.safe_dump({**dict(config), "max_rounds": train["max_rounds"]}, sort_keys=False))
    argv = ["--algo", algo, "--env", str(env_yaml), "--n-timesteps", str(train["n_timesteps"]),
            "--n-envs", str(train["n_envs"]), "--seed", str(seed), "--runs-dir", str(out), "--name", run_dir.name,
            "--eval-freq", "0", "--save-freq", "0", "--progress-bar" if progress else "--no-progress-bar",
            "--verbose", "0", "--hyperparams", *[f"{k}={v}" for k, v in train["hyperparams"].items()]]
    setup = prepare(parse_args(argv))

    class EpisodeRecorder(BaseCallback):
        """Each finished training episode's return and length (SB3's Monitor puts them in ``info``)."""

        def __init__(self) -> None:
            super().__init__()
            self.record: Dict[str, List[float]] = {"return": [], "length": [], "step": [], "success": []}

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    self.record["return"].append(float(info["episode"]["r"]))
                    self.record["length"].append(int(info["episode"]["l"]))
                    self.record["step"].append(int(self.num_timesteps))
                    self.record["success"].append(bool(info.get("is_success", False)))
            return True

    recorder = EpisodeRecorder()
    setup["callbacks"] = [*setup["callbacks"], recorder]
    start = time.perf_counter()
    with lock_run_folder(run_dir, "experiments/common.py"):
        learn(setup)  # train_agent.py's own loop: model.zip with env_config.yaml and args.yaml beside it
    seconds = time.perf_counter() - start
    curve_file.write_text(json.dumps(recorder.record) + "\n")
    time_file.write_text(json.dumps({"seconds": seconds, "how": "time.perf_counter around agents.training.sb3.learn "
                                                                "(train_agent.py's loop, its envs built included)"}) + "\n")
    key_file.write_text(json.dumps(key) + "\n")
    return run_dir, recorder.record, True
