"""FedSelect-Bench (issue #28): any policy over the benchmark's scenarios, scored against random and the oracle.

For each scenario (``fedsel_env/bench.py``) every policy plays one episode per seed from ``env.reset(seed)``
(common random numbers: the same federations for every policy), always with ``random`` and the ``lookahead``
oracle beside it (``agents/lookahead.py``, scored by the scenario's objective). Per scenario:

- each policy's **objective** (a missed Ω counts as the cap: a bound, marked ``*``) with a 95% bootstrap CI;
- the **headroom** = random − oracle in the objective's better direction (positive: the oracle is better),
  the mean of the paired per-seed differences with its 95% Student-t CI; a scenario whose headroom CI
  includes 0 is **low-headroom**;
- each policy's **normalised score** (random − policy) / (random − oracle) of the means (0 = random, 1 = the
  oracle, the same formula whichever direction is better), with a 95% percentile-bootstrap CI over seeds
  resampled in pairs.

The **mean normalised score** averages a policy's scores over the scenarios that have headroom (the others
cannot normalise: their denominator may be 0 or of either sign).

Episodes are stored one JSON line each in ``<out>/<scenario>/episodes.jsonl``, appended whole or not at all
(``agents.training.atomic.append_line``: a full disk is a ``ValueError`` naming the file, the file cut back to its
last whole line) while the run holds the folder's lock (a second run on the same ``--out`` is refused). Each row
carries the key it was played under (issue #44): the hash of the **resolved** env config (every default
included: :func:`config_sha`), the simulator's code version (:func:`code_version`) and the hash of any model
file the policy reads (:func:`policy_files_sha`). A rerun skips what is there (resumable, also after a deadline:
``deadline``; a last line cut short by a crash is cut back first, any other damaged line is a ``ValueError``), and
rows of the committed reference (``fedsel_eval/data/bench_reference.json``, shipped with the package:
:data:`REFERENCE_JSON`, written by ``experiments/bench_reference.py``) are used instead of being replayed only
when their whole key matches; a missing reference is an error (:func:`reference_rows`), never an empty one.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from fedsel_env.bench import Scenario, episode_objective, federation_seed, normalised_score, select

from agents.training.atomic import append_line, atomic_write_bytes, lock_run_folder

from .leaderboard import leaderboard_markdown, plot_leaderboard
from .policies import build_policy, parse_policy
from .ray_executor import check_address as check_ray_address
from .run_folder import atomic_write_text, jsonable
from .stats import Interval, bootstrap_ci, t_interval

EPISODES = "episodes.jsonl"
#: the committed reference record (random, the heuristics and the oracle on every scenario): package data of
#: ``fedsel_eval`` (pyproject.toml's ``package-data``), so an installed wheel has it; ``experiments/bench_reference.py``
#: writes it
REFERENCE_JSON = Path(__file__).resolve().parent / "data" / "bench_reference.json"
RESAMPLES = 4000


def config_sha(config: Mapping[str, Any]) -> str:
    """A short hash of a scenario's env config **resolved** (``fedsel_env.config.make_config``: every default it
    inherits included, so a changed ``DEFAULT_CONFIG`` is another config): rows made under another config are
    not reused."""
    from fedsel_env.config import make_config

    resolved = make_config(dict(config))
    return hashlib.sha256(json.dumps(jsonable(resolved), sort_keys=True).encode()).hexdigest()[:16]


#: the sources whose code decides an episode's numbers: the simulator and env, and the selectors
_CODE_GLOBS = ("fedsel_env/**/*.py", "agents/*.py")
_ROOT = Path(__file__).resolve().parents[1]


def code_version() -> str:
    """A short hash of the simulator's code (``fedsel_env/``) and the selectors' (``agents/*.py``), every file's
    path and bytes: rows played by other code are not reused (any edit counts, so a stale number is never
    reported; the price is a replay after each change of that code)."""
    h = hashlib.sha256()
    for pattern in _CODE_GLOBS:
        for f in sorted(_ROOT.glob(pattern)):
            h.update(f.relative_to(_ROOT).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def policy_files_sha(spec: Any) -> Optional[str]:
    """A short hash of the files a policy reads (a saved model's zip; an agent parameter naming a file, or a folder:
    its files, e.g. ``set_es:model=<folder>``'s ``set_es.json``), None when it reads none: a model rewritten in place
    is another policy."""
    paths: List[Path] = [Path(spec.source)] if spec.kind == "model" else []
    for value in (spec.params or {}).values():
        for v in (value if isinstance(value, (list, tuple)) else [value]):
            if isinstance(v, (str, Path)) and str(v) and Path(v).exists():
                paths.append(Path(v))
    if not paths:
        return None
    h = hashlib.sha256()
    for p in paths:
        files = sorted(f for f in p.iterdir() if f.is_file()) if p.is_dir() else [p]
        for f in files:
            h.update(f.name.encode() + b"\0")
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()[:16]


def row_key(row: Mapping[str, Any]) -> Tuple[Any, ...]:
    """What a stored row must match to be reused: scenario, policy text, seed, resolved config, code, model files."""
    return (row.get("scenario"), row.get("policy_spec"), row.get("seed"), row.get("config_sha"),
            row.get("code_version"), row.get("model_sha"))


def objectives(env: Any, sc: Scenario, make_policy: Callable[[Any], Any],
               seeds: Sequence[int]) -> Tuple[List[float], int]:
    """The scenario's objective of the policy ``make_policy(spec)`` builds, on each seed's episode of ``env``
    (a missed Ω counts as the cap), and the env rounds they took in all: :func:`fedsel_env.rollout.scenario_objectives`,
    the loop the trainers play (``agents/training/set_es.py``)."""
    from fedsel_env.rollout import scenario_objectives

    return scenario_objectives(env, sc, make_policy, seeds)


def reference_policies(sc: Scenario, lookahead: str = "") -> List[str]:
    """random and the oracle, scored by the scenario's objective (``lookahead`` adds parameters)."""
    extra = f",{lookahead}" if lookahead else ""
    return ["random", f"lookahead=lookahead:objective={sc.objective}{extra}"]


@dataclass
class ScenarioRun:
    """One scenario's episodes (rows) and the config they were played under."""

    scenario: Scenario
    config: Dict[str, Any]
    rows: List[Dict[str, Any]] = field(default_factory=list)


def _read_rows(path: Path) -> List[Dict[str, Any]]:
    """The rows of a scenario's ``episodes.jsonl``. A last line cut short (a crash or a full disk mid-append) is cut
    back from the file, so its episode is replayed and appended on a line of its own.

    :raises ValueError: naming the file, the line and the fix for any other damaged line (not UTF-8, not JSON, not
        an episode row): it is not skipped silently.
    """
    if not path.is_file():
        return []
    raw = path.read_bytes()
    complete, _, partial = raw.rpartition(b"\n")
    if partial:  # an append interrupted mid-line: keep the whole lines only
        atomic_write_bytes(path, complete + b"\n" if complete else b"")
    rows = []
    for number, line in enumerate(complete.split(b"\n") if complete else [], 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:  # JSONDecodeError is a ValueError
            row = e
        if not isinstance(row, dict) or not {"scenario", "policy_spec", "seed", "value"} <= set(row):
            problem = f"not valid JSON ({row})" if isinstance(row, Exception) else "not an episode row"
            raise ValueError(f"{str(path)!r}, line {number}, is damaged: {problem}. Delete that line (its episode "
                             f"is played again on the next run), or give another --out")
        rows.append(row)
    return rows


def reference_rows(path: Path = REFERENCE_JSON) -> List[Dict[str, Any]]:
    """Every episode row of a reference record (default: the committed one, :data:`REFERENCE_JSON`).

    :raises ValueError: when the file is absent, naming it and the ways on: a missing reference is never taken
        for an empty one (which would quietly replay, or drop, every reference episode).
    """
    if not Path(path).is_file():
        raise ValueError(f"the bench reference {path} is missing (an installed fedsel ships it as "
                         f"fedsel_eval/data/bench_reference.json): reinstall fedsel, write one with "
                         f"experiments/bench_reference.py, or pass the seeds and reuse_reference=False to play "
                         f"every episode here")
    doc = json.loads(Path(path).read_text())
    if "rows" in doc:  # the committed record (fedsel_eval.records' format): episode rows naming their chunk
        return [{k: v for k, v in r.items() if k != "chunk"} for r in doc["rows"] if "scenario" in r]
    return [r for s in doc.get("scenarios", {}).values() for r in s.get("episodes", [])]


def run_scenario(folder: Path, sc: Scenario, policies: Sequence[str], seeds: Sequence[int],
                 config: Optional[Mapping[str, Any]] = None, deadline: float = math.inf,
                 reuse: Sequence[Mapping[str, Any]] = (), log: Callable[[str], Any] = lambda _l: None,
                 n_envs: int = 1, ray: Optional[str] = None) -> ScenarioRun:
    """Play what ``folder`` lacks of ``policies`` × ``seeds`` on ``sc`` (in seed order) until ``deadline``.

    :param config: the env config (default: the scenario's; e.g. a smaller ``max_rounds`` for a smoke run).
    :param reuse: rows from elsewhere (the committed reference) taken when config, policy and seed match.
    :param n_envs: play up to this many episodes at once through the vector env (``fedsel_eval.vector_episodes``;
        the same rows, appended as each ends).
    :param ray: play every episode as a Ray task (``fedsel_eval.ray_executor.suite_episodes``: ``"local"``,
        ``"auto"`` or a cluster address; the same rows, appended as each ends).
    :return: the rows of the requested policies and seeds that exist now (fewer when the deadline came first).
    :raises ValueError: when another run holds ``folder`` (its lock), a line of its ``episodes.jsonl`` is damaged
        (other than a last line cut short), or the disk is full (naming the file).
    """
    from fedsel_env.env import FedSelectEnv

    cfg = dict(config if config is not None else sc.env_config())
    cfg["observation"] = "dict"
    sha, code = config_sha(cfg), code_version()
    specs = [parse_policy(p, cfg) for p in policies]
    labels = [sp.label for sp in specs]
    if len(set(labels)) != len(labels):
        dup = sorted({x for x in labels if labels.count(x) > 1})
        raise ValueError(f"policy labels {dup} are given twice on {sc.name} (random and lookahead are always run, "
                         f"as the reference): give the other one a label, e.g. mine=lookahead:candidates=32")
    env = None
    kept = []
    for text, spec in zip(policies, specs):  # a saved model must fit the scenario (N, observation, action space)
        if spec.kind != "agent":
            from .policies import check_model_fits

            env = env or FedSelectEnv(config=cfg)
            try:
                check_model_fits(spec, env)
            except ValueError as e:
                log(f"{sc.name}: {spec.label} left out: {e}")
                continue
        kept.append((text, spec))
    models = {text: policy_files_sha(spec) for text, spec in kept}
    folder = Path(folder)
    try:
        with lock_run_folder(folder, "fedsel_eval.bench"):  # one writer per scenario folder: a second is refused
            return _play(folder, sc, cfg, sha, code, kept, models, seeds, deadline, reuse, log, n_envs, env, ray)
    except BaseException:
        if env is not None:
            env.close()
        raise


def _play(folder: Path, sc: Scenario, cfg: Dict[str, Any], sha: str, code: str, kept: List[Tuple[str, Any]],
          models: Mapping[str, Optional[str]], seeds: Sequence[int], deadline: float,
          reuse: Sequence[Mapping[str, Any]], log: Callable[[str], Any], n_envs: int, env: Any,
          ray: Optional[str] = None) -> ScenarioRun:
    """:func:`run_scenario`'s episodes, with the folder locked."""
    from fedsel_env.env import FedSelectEnv

    from .episodes import run_episode

    path = folder / EPISODES
    wanted = {(sc.name, text, int(seed), sha, code, models[text]) for seed in seeds for text, _ in kept}
    have = {(r["policy_spec"], r["seed"]): r for r in [*reuse, *_read_rows(path)] if row_key(r) in wanted}
    run = ScenarioRun(sc, cfg)

    def maker(spec: Any, seed: int, made: List[Any]) -> Callable[[Any], Any]:
        def make(selection_spec: Any) -> Any:
            made.append(build_policy(spec, selection_spec, seed))
            return made[-1]
        return make

    def keep(seed: int, text: str, spec: Any, rec: Mapping[str, Any], policy: Any) -> None:
        row = episode_row(sc, cfg, sha, spec.label, text, seed, rec, policy)
        row.update(code_version=code, model_sha=models[text])
        append_line(path, json.dumps(jsonable(row)))  # whole or not at all; a full disk: ValueError naming the file
        have[(text, seed)] = row
        log(f"{sc.name} seed {seed} {spec.label}: {row['objective']} = {row['value']:.4g}"
            f"{' (missed Ω)' if row['censored'] else ''}, {row['wall_time_s']:.1f} s")

    todo = [(int(seed), text, spec) for seed in seeds for text, spec in kept if (text, int(seed)) not in have]
    if ray is not None and todo:  # every episode a Ray task (the same rows), kept as each ends
        from .ray_executor import suite_episodes

        for i, rec, cost in suite_episodes(cfg, [(spec, seed) for seed, _, spec in todo], ray, deadline, log):
            keep(*todo[i], rec, cost)
    elif n_envs > 1 and todo:  # several episodes at once through the vector env (the same rows)
        from .vector_episodes import EpisodeJob, play

        jobs = []
        for seed, text, spec in todo:
            made: List[Any] = []
            jobs.append(EpisodeJob(seed, maker(spec, seed, made), (seed, text, spec, made)))
        for (seed, text, spec, made), rec in play(cfg, jobs, n_envs, deadline=deadline):
            keep(seed, text, spec, rec, made[0])
    else:
        for seed, text, spec in todo:
            if time.time() >= deadline:
                break
            env = env or FedSelectEnv(config=cfg)
            made = []
            keep(seed, text, spec, run_episode(env, None, seed, make_policy=maker(spec, seed, made)), made[0])
    for seed in seeds:
        for text, spec in kept:
            if (text, int(seed)) in have:
                run.rows.append({**have[(text, int(seed))], "policy": spec.label})
    if env is not None:
        env.close()
    return run


def episode_row(sc: Scenario, cfg: Mapping[str, Any], sha: str, label: str, text: str, seed: int,
                rec: Mapping[str, Any], policy: Any) -> Dict[str, Any]:
    """One episode as the benchmark stores it (no summary without its episodes)."""
    value, censored = episode_objective(sc, rec)
    m = rec["metrics"]
    row = {"scenario": sc.name, "policy": label, "policy_spec": text, "seed": seed,
           "federation_seed": cfg["federation_seed"] if cfg.get("federation_seed") is not None else federation_seed(seed),
           "objective": sc.objective, "value": value, "censored": censored, "rounds": int(m["rounds"]),
           "reached": bool(rec["reached"]), "sim_time": float(m["sim_time"]), "final_accuracy": float(m["final_accuracy"]),
           "acc_worst10": float(m["acc_worst10"]), "diverged": bool(rec["diverged"]),
           "loss_queries": float(m["loss_queries"]), "wall_time_s": float(rec["wall_time_s"]), "config_sha": sha}
    if hasattr(policy, "planned_rounds"):  # the oracle's cost
        row["planned_rounds"] = int(policy.planned_rounds)
        row["planning_seconds"] = float(policy.planning_seconds)
    return row


# ============================================================================================ statistics
def normalised_interval(random: np.ndarray, oracle: np.ndarray, policy: np.ndarray, seed: int = 0) -> Interval:
    """The normalised score of the means with a percentile-bootstrap 95% CI, seeds resampled in triples."""
    n = random.size
    est = normalised_score(float(random.mean()), float(oracle.mean()), float(policy.mean()))
    if n < 2 or not math.isfinite(est):
        return Interval(est, math.nan, math.nan, int(n))
    idx = np.random.default_rng(seed).integers(0, n, size=(RESAMPLES, n))
    r, o, p = random[idx].mean(1), oracle[idx].mean(1), policy[idx].mean(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = (r - p) / (r - o)
    s = s[np.isfinite(s)]
    lo, hi = (np.percentile(s, [2.5, 97.5]) if s.size else (math.nan, math.nan))
    return Interval(est, float(lo), float(hi), int(n))


def summarise(run: ScenarioRun) -> Dict[str, Any]:
    """Per policy: objective CI, censored count, the paired difference from random (``vs_random``: policy − random
    per seed, objective units, Student-t CI), normalised score CI; the scenario's headroom CI."""
    sc = run.scenario
    by: Dict[str, Dict[int, float]] = {}
    censored: Dict[str, int] = {}
    wall: Dict[str, List[float]] = {}
    for r in run.rows:
        by.setdefault(r["policy"], {})[r["seed"]] = r["value"]
        censored[r["policy"]] = censored.get(r["policy"], 0) + int(r["censored"])
        wall.setdefault(r["policy"], []).append(r["wall_time_s"])
    seeds = sorted(set.intersection(*(set(v) for v in by.values()))) if by else []
    sign = 1.0 if sc.lower_is_better else -1.0
    out: Dict[str, Any] = {"scenario": sc.name, "env_id": sc.env_id, "objective": sc.objective,
                           "lower_is_better": sc.lower_is_better, "seeds": seeds, "policies": {}}
    if "random" not in by or "lookahead" not in by or not seeds:
        return out
    vec = {p: np.array([v[s] for s in seeds], dtype=np.float64) for p, v in by.items()}
    head = t_interval(sign * (vec["random"] - vec["lookahead"]))
    out["headroom"] = vars(head)
    out["low_headroom"] = not (head.lo > 0)
    for p, v in vec.items():
        out["policies"][p] = {"objective": vars(bootstrap_ci(v, missed=censored.get(p, 0))),
                              "vs_random": vars(t_interval(v - vec["random"])),
                              "normalised": vars(normalised_interval(vec["random"], vec["lookahead"], v)),
                              "mean_wall_s": float(np.mean(wall[p]))}
    return out


# ============================================================================================ the suite
#: the files of a suite's run folder besides its scenarios' ``episodes.jsonl``
LEADERBOARD_FILES = ("leaderboard.md", "leaderboard.json", "leaderboard.png")

#: ``evaluate.py`` with no arguments, or ``--suite first-look`` (issue #45): a few minutes' live look at where
#: selection matters — three digits scenarios whose headroom CI excludes 0 in the reference, six reporting seeds,
#: every heuristic with random and the oracle, every episode played (none taken from the committed reference)
FIRST_LOOK: Dict[str, Any] = {"scenarios": ["NoisyLabels", "FreeRiders", "Stragglers"],
                              "seeds": [9000, 9001, 9002, 9003, 9004, 9005]}
#: the suites ``evaluate.py --suite`` runs: name → (scenarios, seeds, reuse the committed reference's rows)
SUITES: Dict[str, Dict[str, Any]] = {
    "bench": {"scenarios": None, "seeds": None, "reuse_reference": True},
    "first-look": {**FIRST_LOOK, "reuse_reference": False},
}


def heuristic_policies() -> List[str]:
    """Every hand-written agent that acts with its defaults in the scenarios' ``topk`` mode (random included; the
    oracle and the agents that need a model left out): what a suite shows beside the policies it is given."""
    from fedsel_env.env import FedSelectEnv

    from .policies import hand_written_agents

    return hand_written_agents(FedSelectEnv(preset="tiny").selection_spec)[0]  # every scenario acts in topk


def suite_files(out: Path) -> List[Path]:
    """What a suite run left in ``out``: its leaderboard files and its scenarios' episode files (a user's scenario
    file's too, issue #46: a sub-folder whose first line is a suite's row, never a plain evaluation's folder)."""
    from fedsel_env.bench import SCENARIOS

    out = Path(out)
    found = [out / n for n in LEADERBOARD_FILES if (out / n).is_file()]
    named = [out / n / EPISODES for n in SCENARIOS if (out / n / EPISODES).is_file()]
    return found + named + [p for p in sorted(out.glob(f"*/{EPISODES}")) if p not in named and _suite_rows(p)]


def _suite_rows(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            row = json.loads(fh.readline())  # bytes: not UTF-8 is a ValueError too
    except (OSError, ValueError):
        return False
    return isinstance(row, dict) and {"scenario", "policy_spec", "seed", "value"} <= set(row)


def check_suite_folder(out: Path, resume: bool = False, overwrite: bool = False) -> None:
    """Refuse a folder that holds a suite run unless ``resume`` (its episodes are kept, the leaderboard rewritten
    with the new ones) or ``overwrite`` (its leaderboard and episode files are deleted first) — as a plain
    evaluation's run folder is never silently overwritten (``fedsel_eval.run_folder.RunFolder.open``).

    :raises ValueError: naming the folder, what it holds and the three ways on.
    """
    if resume and overwrite:
        raise ValueError("--resume and --overwrite exclude each other")
    found = suite_files(out)
    if found and overwrite:
        for f in found:
            f.unlink()
    elif found and not resume:
        shown = ", ".join(str(f.relative_to(out)) for f in found[:4]) + (", …" if len(found) > 4 else "")
        raise ValueError(f"run folder {str(out)!r} already holds a suite run ({shown}): pass --resume to continue "
                         f"it (its episodes are kept; the leaderboard is rewritten with the new ones), --overwrite "
                         f"to start over, or another --name / --out")


def run_suite(out: Path, policies: Sequence[str], scenarios: Any = None, seeds: Optional[Sequence[int]] = None,
              rounds: Optional[int] = None, deadline: float = math.inf, lookahead: str = "",
              plots: bool = True, log: Callable[[str], Any] = print, n_envs: int = 1, resume: bool = False,
              overwrite: bool = False, heuristics: bool = True, reuse_reference: bool = True,
              title: str = "", torch_threads: Optional[int] = 1, ray: Optional[str] = None) -> List[Dict[str, Any]]:
    """``evaluate.py --suite bench``: ``policies`` (plus random, the oracle and every heuristic) on each scenario;
    the leaderboard.

    :param seeds: default: the committed reference's seeds of each scenario, else the first 5 of its reporting
        seeds (a user's scenario file has no reference: the first 5 of its ``reporting_seeds``).
    :param scenarios: names, ids or YAML scenario files (``fedsel_env.bench.select``; None: every registered one).
    :param rounds: a smaller round budget (smoke runs; the reference rows then do not apply).
    :param n_envs: episodes played at once through the vector env (the same rows).
    :param ray: every episode a Ray task (:func:`run_scenario`; ``evaluate.py --suite bench --ray [ADDRESS]``).
    :param resume: continue the suite run in ``out`` (its episodes kept); without it (or ``overwrite``) a folder
        that holds one is refused (:func:`check_suite_folder`).
    :param heuristics: show every hand-written agent (:func:`heuristic_policies`) beside ``policies``.
    :param reuse_reference: take matching rows of the committed reference instead of playing them.
    :param title: a paragraph above the leaderboard in ``leaderboard.md`` (what was run).
    :param torch_threads: torch (and BLAS) threads of the whole run (None: the caller's). The env computes on its
        config's, but the oracle plays rounds on the federation directly: on torch's default of one thread a core,
        with the cores busy, its episodes took 10-18x longer (38-63 s against 3.5 s on 2 cores at load 7).
    :return: the per-scenario summaries (also in ``<out>/leaderboard.json``, ``.md`` and ``.png``; ``evaluate.py``
        prints the ``.md``).
    :raises ValueError: when another run holds ``out`` (a second ``--suite bench`` on the same ``--out``), or
        ``out`` holds a suite run and neither ``resume`` nor ``overwrite`` is given.
    """
    scs = select(scenarios)
    out = Path(out)
    from fedsel_env.threads import torch_threads as threads

    if ray is not None and n_envs > 1:  # refused before anything runs
        raise ValueError(f"--ray and --n-envs {n_envs} exclude each other: with --ray every episode is a Ray task of "
                         f"its own; drop one")
    check_ray_address(ray)

    with lock_run_folder(out, "evaluate.py --suite bench"), threads(torch_threads):  # a second suite on one --out
        check_suite_folder(out, resume=resume, overwrite=overwrite)                    # is refused
        shown = list(dict.fromkeys([*(heuristic_policies() if heuristics else []), *policies]))
        return _suite(out, scs, shown, seeds, rounds, deadline, lookahead, plots, log, n_envs,
                      reference_rows() if reuse_reference else [], title, ray)


def _suite(out: Path, scs: Sequence[Scenario], policies: Sequence[str], seeds: Optional[Sequence[int]],
           rounds: Optional[int], deadline: float, lookahead: str, plots: bool, log: Callable[[str], Any],
           n_envs: int, reuse: Sequence[Mapping[str, Any]], title: str,
           ray: Optional[str] = None) -> List[Dict[str, Any]]:
    """:func:`run_suite` with ``out`` locked and checked."""
    summaries = []
    for sc in scs:
        cfg = sc.env_config()
        if rounds is not None:
            cfg["max_rounds"] = int(rounds)
        todo = list(dict.fromkeys([*reference_policies(sc, lookahead), *policies]))
        these = seeds
        if these is None:
            ref = sorted({r["seed"] for r in reference_rows() if r["scenario"] == sc.name
                          and r["policy"] == "lookahead"})
            these = ref or list(sc.reporting_seeds[:5])  # a user's scenario has no reference: its first 5
        run = run_scenario(out / sc.name, sc, todo, these, cfg, deadline, reuse, log, n_envs=n_envs, ray=ray)
        summaries.append(summarise(run))
    md = leaderboard_markdown(summaries)
    atomic_write_text(out / "leaderboard.md", (f"{title}\n\n" if title else "") + md + "\n")
    atomic_write_text(out / "leaderboard.json", json.dumps(jsonable(summaries), indent=1) + "\n")
    if plots:
        plot_leaderboard(summaries, out / "leaderboard.png")
    return summaries
