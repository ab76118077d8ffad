"""FedSelect-Bench's reference scores (issue #28): random, every hand-written agent and the lookahead oracle on
every scenario, on reporting seeds fixed in code; the headroom and normalised scores; docs/BENCHMARK.md's table.

    python experiments/bench_reference.py --part calibrate                # Ω of each to-target scenario (tuning seeds)
    python experiments/bench_reference.py --max-minutes 30                # the reference, in resumable chunks
    python experiments/bench_reference.py --max-minutes 30 --seeds-count 5 --scenarios Churn,Large
    python experiments/bench_reference.py --smoke                         # seconds: 2 rounds, 2 seeds, 2 scenarios
    python experiments/bench_reference.py --part figure                   # redraw docs/img/bench_reference.png

**Calibrate** (``--part calibrate``): random plays each to-target scenario's whole round cap with an
unreachable Ω on ``--tuning-count`` of the tuning seeds (``fedsel_env.bench.TUNING_SEEDS``); Ω is the 0.01-grid
accuracy random's median accuracy curve reaches at half the cap, rounded down — ``experiments/favor_study.py``'s
rule. The Ω it prints are the ones written into ``fedsel_env/bench.py`` (the run says whether they match).
Heuristics run at their default parameters (nothing else is tuned); the oracle's M and depth are fixed in
advance (its defaults: 16 candidates, depth 1).

**Reference** (default): every policy on each scenario, one seed of ``REPORTING_SEEDS`` after another (seed-major,
so a partial run covers every scenario with the same seeds), episode rows appended to
``runs/bench_reference/<scenario>/episodes.jsonl`` as they end (``fedsel_eval.bench``: resumable; a run stops
cleanly at ``--max-minutes`` and the next continues). After each seed the record
(``fedsel_eval/data/bench_reference.json``, package data of ``fedsel_eval``, which reads it at run time;
``fedsel_eval.records``' format: the scenarios' configs, one row per
episode naming the chunk that played it, each chunk's commit and dirty flag, and every policy's mean objective
and every headroom as summaries computed from the rows — ``python -m fedsel_eval.recompute`` checks them), the
script's own state (``experiments/results/bench_reference_progress.json``: the same rows with the bootstrap
summaries, what a resume continues from), the figure (``docs/img/bench_reference.png``) and docs/BENCHMARK.md's table (between
``<!-- bench:reference begin/end -->``) are rewritten, stating how many seeds each scenario has.

**Figure** (``--part figure``): the figure redrawn from the committed record's rows alone (each scenario's
summary recomputed by ``fedsel_eval.bench.summarise``; nothing is played) — after a change to the drawing
(issue #45: CI bars beyond the axis).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from fedsel_eval.bench import REFERENCE_JSON  # noqa: E402
from fedsel_eval import markdown  # noqa: E402

from experiments.common import provenance, threads_to_one  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = REFERENCE_JSON  # fedsel_eval/data/bench_reference.json: shipped with the package, read by fedsel_eval.bench
PROGRESS = ROOT / "experiments" / "results" / "bench_reference_progress.json"
FIGURE = ROOT / "docs" / "img" / "bench_reference.png"
DOC = ROOT / "docs" / "BENCHMARK.md"
RUNS = ROOT / "runs" / "bench_reference"


def calibrate_target(curves: Sequence[Sequence[float]], cap: int) -> float:
    """Ω: the 0.01-grid accuracy random's median curve reaches at round cap/2, rounded down (favor_study's rule)."""
    acc = np.array([[np.nan if a is None else a for a in c[: cap + 1]] for c in curves], dtype=np.float64)
    return math.floor(float(np.nanmedian(acc[:, cap // 2])) * 100 + 1e-9) / 100


def calibrate(args: argparse.Namespace) -> Dict[str, Any]:
    from fedsel_env.bench import TUNING_SEEDS, select
    from fedsel_env.env import FedSelectEnv
    from fedsel_eval import build_policy, parse_policy
    from fedsel_eval.episodes import run_episode

    seeds = TUNING_SEEDS[: args.tuning_count]
    out: Dict[str, Any] = {"tuning_seeds": seeds, "omega": {}}
    for sc in select(args.scenarios):
        if sc.objective not in ("rounds_to_target", "time_to_target"):
            continue
        cfg = {**sc.env_config(), "target_accuracy": 1.0}
        if args.smoke:
            cfg["max_rounds"] = 4
        env, curves, t0 = FedSelectEnv(config=cfg), [], time.perf_counter()
        spec = parse_policy("random", cfg)
        for s in seeds:
            rec = run_episode(env, None, s, make_policy=lambda ss, s=s: build_policy(spec, ss, s))
            curves.append(rec["curves"]["accuracy"])
        omega = calibrate_target(curves, cfg["max_rounds"])
        coded = sc.config["target_accuracy"]
        out["omega"][sc.name] = {"calibrated": omega, "in_code": coded, "seconds": time.perf_counter() - t0}
        print(f"{sc.name}: Ω = {omega:.2f} (random's median accuracy at round {cfg['max_rounds'] // 2} of "
              f"{cfg['max_rounds']} on tuning seeds {seeds[0]}-{seeds[-1]}); in fedsel_env/bench.py: {coded:.2f}"
              f"{'' if abs(omega - coded) < 1e-9 else '  <-- DIFFERS: write the calibrated value there'}"
              f"  [{time.perf_counter() - t0:.0f} s]", flush=True)
    return out


# ============================================================================================ reference
def reference(args: argparse.Namespace) -> None:
    from fedsel_env.bench import REPORTING_SEEDS, select
    from fedsel_env.env import FedSelectEnv
    from fedsel_eval import hand_written_agents
    from fedsel_eval.bench import reference_policies, reference_rows, run_scenario, summarise

    started, deadline = time.time(), time.time() + 60 * args.max_minutes
    scs = select(args.scenarios)
    seeds = REPORTING_SEEDS[: args.seeds_count] if not args.smoke else REPORTING_SEEDS[:2]
    heuristics = hand_written_agents(FedSelectEnv(preset="tiny").selection_spec)[0]
    runs_dir = Path(args.out)
    # a published run continues the committed state; a smoke or --no-publish run its own folder's
    doc = _load(PROGRESS if not (args.smoke or args.no_publish) else runs_dir / "bench_reference_progress.json")
    chunk_id = f"c{len({c['id'] for c in doc.get('chunks', [])})}"
    chunk = {"id": chunk_id, **provenance(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
             "max_minutes": args.max_minutes}
    doc.setdefault("chunks", []).append(chunk)
    # a published run also takes the committed record's episodes (a fresh clone continues, not replays, them;
    # the very first run has no record yet)
    reuse = reference_rows(RESULTS) if RESULTS.is_file() and not (args.smoke or args.no_publish) else []
    played_in = {name: {(r["policy"], r["seed"]): r["chunk"] for r in e.get("episodes", []) if "chunk" in r}
                 for name, e in doc.get("scenarios", {}).items()}
    for seed in seeds:
        for sc in scs:
            cfg = sc.env_config()
            if args.smoke:
                cfg["max_rounds"] = 2
            policies = list(dict.fromkeys([*reference_policies(sc), *heuristics]))
            run = run_scenario(runs_dir / sc.name, sc, policies, [s for s in seeds if s <= seed], cfg, deadline,
                               reuse=reuse, log=print)
            entry = doc.setdefault("scenarios", {}).setdefault(sc.name, {})
            earlier = played_in.setdefault(sc.name, {})
            for r in run.rows:  # which chunk played each row: earlier ones keep theirs, new ones are this chunk's
                r["chunk"] = earlier.setdefault((r["policy"], r["seed"]), chunk_id)
            entry.update({"env_id": sc.env_id, "objective": sc.objective, "config": cfg, "statement": sc.statement,
                          "departures": sc.departures, "episodes": run.rows, "summary": summarise(run)})
        if time.time() >= deadline:
            break
        _publish(doc, chunk, started, args)
    _publish(doc, chunk, started, args)
    print(f"reference: {time.time() - started:.0f} s this chunk; {_seed_counts(doc)}")


def _seed_counts(doc: Mapping[str, Any]) -> str:
    return ", ".join(f"{n}: {len(e['summary'].get('seeds', []))} seeds" for n, e in doc.get("scenarios", {}).items())


def _load(path: Path) -> Dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _publish(doc: Dict[str, Any], chunk: Dict[str, Any], started: float, args: argparse.Namespace) -> None:
    from fedsel_eval.leaderboard import plot_leaderboard
    from fedsel_eval.run_folder import jsonable

    chunk["seconds"] = time.time() - started
    calibration = Path(args.out) / "calibration.json"  # --part calibrate's output: how Ω was chosen
    if calibration.is_file():
        doc["calibration"] = json.loads(calibration.read_text())
    rows = [r for e in doc.get("scenarios", {}).values() for r in e["episodes"]]
    doc["compute_seconds"] = float(sum(r["wall_time_s"] for r in rows))
    text = json.dumps(jsonable(doc), indent=1) + "\n"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_reference_progress.json").write_text(text)
    record = to_record(doc)
    record.write(out / "bench_reference.json")
    summaries = [e["summary"] for e in doc["scenarios"].values()]
    plot_leaderboard(summaries, out / "bench_reference.png")
    table = reference_table(doc)
    (out / "table.md").write_text(table)
    if args.smoke or args.no_publish:
        return
    PROGRESS.write_text(text)
    record.write(RESULTS)
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    plot_leaderboard(summaries, FIGURE)
    markdown.splice(DOC, "bench:reference", table)


def record_summaries(path: Path = RESULTS) -> List[Dict[str, Any]]:
    """Each scenario's summary recomputed from the committed record's episode rows (``fedsel_eval.bench.summarise``),
    in the record's scenario order."""
    from fedsel_env.bench import scenario
    from fedsel_eval.bench import ScenarioRun, reference_rows, summarise

    rows = reference_rows(path)
    names = list(dict.fromkeys(r["scenario"] for r in rows))
    return [summarise(ScenarioRun(scenario(n), scenario(n).env_config(), [r for r in rows if r["scenario"] == n]))
            for n in names]


def figure(args: argparse.Namespace) -> None:
    """``--part figure``: :data:`FIGURE` redrawn from the committed record (``--no-publish``: into ``--out``)."""
    from fedsel_eval.leaderboard import plot_leaderboard

    target = Path(args.out) / "bench_reference.png" if args.no_publish else FIGURE
    target.parent.mkdir(parents=True, exist_ok=True)
    plot_leaderboard(record_summaries(RESULTS), target)
    print(f"figure: {target}")


def to_record(doc: Mapping[str, Any]):
    """The reference as a ``fedsel_eval.records`` record (issue #34): the scenarios' configs and Ω calibration,
    one chunk per invocation id (with its commit and dirty flag), every episode row, and per scenario each
    policy's mean objective and the headroom (a paired Student-t CI on the seeds every policy played) as
    summaries computed from the rows — checked here against ``fedsel_eval.bench.summarise``'s headroom. The
    normalised scores' bootstrap CIs are not a record statistic: ``fedsel_eval.bench.summarise`` recomputes
    them from these rows (the point estimate is (random − policy) / (random − lookahead) of the means)."""
    from fedsel_eval import records

    scen = doc.get("scenarios", {})
    keep = ("env_id", "objective", "config", "statement", "departures")
    rec = records.Record("bench_reference",
                         config={"scenarios": {n: {k: e.get(k) for k in keep} for n, e in scen.items()},
                                 "calibration": doc.get("calibration")},
                         notes={"compute_seconds": doc.get("compute_seconds"),
                                "normalised_score": "(random - policy) / (random - lookahead) on the objective's "
                                                    "means; CIs by fedsel_eval.bench.summarise (bootstrap)"})
    groups: Dict[str, List[Mapping[str, Any]]] = {}
    for c in doc.get("chunks", []):
        groups.setdefault(c["id"], []).append(c)
    for cid, cs in groups.items():
        if {(c.get("commit"), bool(c.get("dirty"))) for c in cs} != {(cs[0].get("commit"), bool(cs[0].get("dirty")))}:
            raise ValueError(f"bench reference: chunk {cid} groups invocations at different commits")
        got = rec.chunk(cs[0], note=f"{len(cs)} invocation(s) of experiments/bench_reference.py",
                        started=[c.get("started") for c in cs], seconds=sum(c.get("seconds", 0.0) for c in cs))
        if got != cid:
            raise ValueError(f"bench reference: chunk ids out of order ({cid} became {got})")
    for name, e in scen.items():
        for r in e.get("episodes", []):
            rec.add_row(r["chunk"], **{k: v for k, v in r.items() if k != "chunk"})
        s = e.get("summary", {})
        if "headroom" not in s:
            continue
        seeds = list(s["seeds"])
        for pol in s["policies"]:
            rec.summarise(f"{name}: {pol}, mean {s['objective']}", "mean", "value",
                          where={"scenario": name, "policy": pol, "seed": seeds})
        a, b = ("random", "lookahead") if s["lower_is_better"] else ("lookahead", "random")
        head = rec.summarise(f"{name}: headroom ({a} − {b})", "paired_t", "value",
                             where={"scenario": name, "policy": a, "seed": seeds},
                             minus={"scenario": name, "policy": b, "seed": seeds})
        want = s["headroom"]
        def agree(x: Any, y: Any) -> bool:  # one seed: no interval (None in the record, NaN in the summary)
            if x is None or y is None or not math.isfinite(float(y)):
                return (x is None or not math.isfinite(float(x))) and (y is None or not math.isfinite(float(y)))
            return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)

        if not all(agree(head[k], want[k]) for k in ("mean", "lo", "hi")):
            raise ValueError(f"bench reference: {name}'s headroom from the rows {head} differs from the summary's {want}")
    return rec


def reference_table(doc: Mapping[str, Any]) -> str:
    """The reference table: per scenario, random, the best heuristic, the oracle, the headroom; then every
    policy's normalised score per scenario, and the cost of an episode."""
    from fedsel_eval.leaderboard import mean_normalised, objective_format
    from fedsel_eval.stats import Interval, TInterval

    scen = doc.get("scenarios", {})
    rows = []
    for name, e in scen.items():
        s = e["summary"]
        if "headroom" not in s:
            rows.append([name, e["objective"], 0, "—", "—", "—", "—", "—", "—"])
            continue
        f = objective_format(s["objective"])
        pol = s["policies"]
        heur = {p: v for p, v in pol.items() if p not in ("random", "lookahead")}
        best = max(heur, key=lambda p: _num(heur[p]["normalised"]["mean"])) if heur else None
        head = TInterval(**s["headroom"]).text("+" + f) + (" **low**" if s["low_headroom"] else "")
        arrow = "↓" if s["lower_is_better"] else "↑"
        score = _num(heur[best]["normalised"]["mean"]) if best else -math.inf
        best_txt = (f"`{best}` {Interval(**heur[best]['objective']).text(f)}"
                    + (f" ({score:+.2f})" if math.isfinite(score) else "")) if best else "—"
        rows.append([name, f"{s['objective']} {arrow}", len(s["seeds"]), Interval(**pol["random"]["objective"]).text(f),
                     best_txt, Interval(**pol["lookahead"]["objective"]).text(f), head,
                     f"{pol['random']['mean_wall_s']:.1f}", f"{pol['lookahead']['mean_wall_s']:.1f}"])
    lines = [markdown.table(["scenario", "objective", "seeds", "random", "best heuristic", "lookahead",
                             "headroom [95% CI]", "random episode (s)", "lookahead episode (s)"], rows,
                            align="llrrlrrrr").rstrip("\n")]
    names = sorted({p for e in scen.values() for p in e["summary"].get("policies", {})} - {"random", "lookahead"})
    order = [n for n in scen if "headroom" in scen[n]["summary"]]
    means = mean_normalised([scen[n]["summary"] for n in order])
    rows = []
    for p in sorted(names, key=lambda q: -means.get(q, {"mean": -math.inf})["mean"]):
        cells = []
        for n in order:
            v = scen[n]["summary"]["policies"].get(p)
            cells.append("—" if v is None else Interval(**v["normalised"]).text("+.2f"))
        m = means.get(p)
        rows.append([p, *cells, f"{m['mean']:+.2f}" if m else "—"])
    lines += ["", "Normalised score (0 = random, 1 = lookahead; a scenario marked *low* has a headroom CI that "
                  "includes 0, and is left out of the mean):", "",
              markdown.table(["policy", *order, "mean"], rows).rstrip("\n")]
    prov = [c for c in doc.get("chunks", []) if c.get("commit")]
    commits = sorted({(c["commit"][:12], bool(c["dirty"])) for c in prov})
    lines += ["", f"*Compute: {doc.get('compute_seconds', 0) / 60:.1f} min of episode wall time in all (single "
                  f"process, 2 shared CPU cores), over {len(doc.get('chunks', []))} chunk(s); commits "
                  + ", ".join(f"`{c}`{' (dirty)' if d else ''}" for c, d in commits) + ".*"]
    return "\n".join(lines) + "\n"


def _num(x: Any) -> float:
    return -math.inf if x is None or not math.isfinite(float(x)) else float(x)


def main(argv: Sequence[str] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=("calibrate", "reference", "figure"), default="reference")
    p.add_argument("--scenarios", default=None, help="comma-separated scenario names (default: all)")
    p.add_argument("--seeds-count", type=int, default=30, help="how many of the reporting seeds (default: all 30)")
    p.add_argument("--tuning-count", type=int, default=5, help="how many tuning seeds calibrate Ω (default: 5)")
    p.add_argument("--max-minutes", type=float, default=math.inf, help="stop cleanly after this long (resume later)")
    p.add_argument("--out", default=str(RUNS), help="the run folder (default: %(default)s)")
    p.add_argument("--smoke", action="store_true", help="2 rounds, 2 seeds: checks the script runs; publishes nothing")
    p.add_argument("--no-publish", action="store_true", help="leave docs/ and experiments/results/ alone")
    args = p.parse_args(argv)
    if args.seeds_count < 1 or args.tuning_count < 1 or not args.max_minutes > 0:
        raise ValueError("--seeds-count and --tuning-count must be >= 1 and --max-minutes > 0")
    if args.smoke and args.out == str(RUNS):
        args.out = str(RUNS / "smoke")
    threads_to_one()
    if args.part == "calibrate":
        res = calibrate(args)
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "calibration.json").write_text(json.dumps({**provenance(), **res}, indent=1) + "\n")
    elif args.part == "figure":
        figure(args)
    else:
        reference(args)


if __name__ == "__main__":
    try:
        main()
    except ValueError as e:
        sys.exit(f"bench_reference.py: error: {e}")
