"""FedSelect-Bench's generalist track (issue #42): selectors trained on a scenario family only, scored on the bench.

A generalist is trained by the front door on a family of federations (``fedsel_env/families.py``), never on a bench
scenario: ``train_agent.py --algo set_es --env family:<Family> --seed <t>``, one model per objective (the family of
the scenario's objective: :data:`FAMILY_OF`; why one per objective: the families module's docstring), its budget in
``configs/set_es.yml``'s ``family:<Family>`` entry. Each training seed's weights then play each bench scenario
unchanged, beside random and the scenario's best heuristic (the committed reference's), on the scenario's
reporting seeds (``--on reporting``, the track's record ``experiments/results/bench_generalist.json`` and
docs/BENCHMARK.md's block) or on its tuning seeds (``--on tuning``: a probe, its own record
``experiments/results/bench_generalist_tuning.json``, never the track's figures). The leaderboard gives, per
scenario and design, an entry with ``"generalist": true``, the difference against random and the best heuristic
with the 95% CI across training seeds, the normalised score and a Holm correction over every comparison in it.

    .venv/bin/python experiments/bench_generalist.py --part train --objectives rounds_to_target
    .venv/bin/python experiments/bench_generalist.py --part eval --on tuning --scenarios NoisyLabels,FreeRiders
    .venv/bin/python experiments/bench_generalist.py --part report --on tuning
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedsel_env.bench import BENCH_SCENARIOS, normalised_score, scenario  # noqa: E402
from fedsel_eval import markdown, records  # noqa: E402
from fedsel_eval.bench import reference_rows, run_scenario  # noqa: E402
from fedsel_eval.learned import best_heuristic  # noqa: E402
from fedsel_eval.stats import holm  # noqa: E402

#: the family a generalist of each objective is trained on (fedsel_env/families.py)
FAMILY_OF = {"rounds_to_target": "MixedRounds", "time_to_target": "MixedTime", "acc_worst10": "MixedWorst10"}
#: design → its --algo (budget and settings: configs/<algo>.yml's family:<Family> entry)
DESIGNS = {"set_es": {"algo": "set_es"}}
TRAIN_SEEDS = (0, 1, 2)
RESULT = {"reporting": ROOT / "experiments" / "results" / "bench_generalist.json",
          "tuning": ROOT / "experiments" / "results" / "bench_generalist_tuning.json"}
#: --smoke: set_es on MixedWorst10 (Churn's objective) for one generation of 2 federations × 2 candidates at 3 rounds,
#: played on Churn's first 2 reporting seeds at 3 rounds; publishes nothing
SMOKE = {"objectives": ["acc_worst10"], "scenarios": ["Churn"], "hyperparams": ["generations=1", "episodes=2",
         "popsize=2", "eval_every=1", "eval_seeds=[3000000]"], "env_kwargs": ["max_rounds=3"],
         "overrides": {"max_rounds": 3}, "train_seeds": [0, 1], "seeds": [9000, 9001]}


def run_folder(out: Path, design: str, objective: str, seed: int) -> Path:
    return out / design / FAMILY_OF[objective] / f"seed{seed}"


def trained(folder: Path) -> bool:
    """Whether the run in ``folder`` has played all its generations (``summary.json``'s ``complete``)."""
    path = folder / "summary.json"
    return path.is_file() and bool(json.loads(path.read_text()).get("complete"))


def part_train(args: argparse.Namespace) -> None:
    for design, d in DESIGNS.items():
        for objective in args.objectives:
            for seed in args.train_seeds:
                folder = run_folder(args.out, design, objective, seed)
                if trained(folder):
                    continue
                cmd = [sys.executable, str(ROOT / "train_agent.py"), "--algo", d["algo"], "--env",
                       f"family:{FAMILY_OF[objective]}", "--seed", str(seed), "--runs-dir", str(folder.parent),
                       "--name", folder.name, "--no-progress-bar",
                       *(["--hyperparams", *args.hyperparams] if args.hyperparams else []),
                       *(["--env-kwargs", *args.env_kwargs] if args.env_kwargs else [])]
                if (folder / "progress.jsonl").is_file():
                    cmd += ["--resume"]
                print(" ".join(cmd[1:]), flush=True)
                subprocess.run(cmd, check=True, cwd=ROOT)


def models(args: argparse.Namespace, name: str) -> List[str]:
    """``<design>_gen_s<t>=<run folder>`` for each trained seed of the scenario's objective's family."""
    objective = scenario(name).objective
    out = []
    for design in DESIGNS:
        folders = [run_folder(args.out, design, objective, t) for t in args.train_seeds]
        if objective in FAMILY_OF and all(trained(f) for f in folders):
            out += [f"{design}_gen_s{t}={f}" for t, f in zip(args.train_seeds, folders)]
    return out


def part_eval(args: argparse.Namespace) -> None:
    ref = reference_rows()
    for name in args.scenarios:
        found = models(args, name)
        if not found:
            print(f"{name}: no generalist of its objective is trained yet (--part train)", flush=True)
            continue
        sc = scenario(name)
        seeds = args.seeds or list(sc.reporting_seeds if args.on == "reporting" else sc.tuning_seeds)
        run_scenario(args.out / f"eval_{args.on}" / name, sc, ["random", best_heuristic(name, ref), *found], seeds,
                     {**sc.env_config(), **args.overrides}, log=lambda line: print(line, flush=True))


def build_record(args: argparse.Namespace) -> records.Record:
    import numpy as np

    ref = reference_rows()
    rec = records.Record(f"bench_generalist{'' if args.on == 'reporting' else '_tuning'}",
                         config={"designs": DESIGNS, "families": FAMILY_OF, "train_seeds": list(args.train_seeds),
                                 "on": args.on})
    chunk = rec.chunk(records.git_provenance(ROOT, ("fedsel_env", "agents", "fedsel_eval", "experiments")),
                      note=f"episodes played by --part eval --on {args.on}, gathered here")
    entries = []
    for name in args.scenarios:
        path = args.out / f"eval_{args.on}" / name / "episodes.jsonl"
        if not path.is_file():
            continue
        sc, best = scenario(name), best_heuristic(name, ref)
        rows = {(r["policy"], r["seed"]): r for r in map(json.loads, path.read_text().splitlines()) if r}
        for (pol, seed), r in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            design, _, t = pol.rpartition("_gen_s") if "_gen_s" in pol else (None, "", "")
            rec.add_row(chunk, scenario=name, policy=design or pol, training_seed=int(t) if design else None,
                        generalist=bool(design), family=FAMILY_OF.get(sc.objective) if design else None,
                        role="generalist" if design else ("best_heuristic" if pol == best else "random"), seed=seed,
                        objective=sc.objective, value=r["value"], censored=r["censored"], rounds=r["rounds"],
                        config_sha=r["config_sha"])
        oracle = [r["value"] for r in ref if r["scenario"] == name and r["policy"] == "lookahead"
                  and (args.on == "reporting" or r["seed"] in sc.tuning_seeds)]
        oracle_mean = float(np.mean(oracle)) if oracle else math.nan
        ep = {"scenario": name}
        mean = {p: rec.summarise(f"{name}: {p} mean {sc.objective}", "mean", "value", where={**ep, "policy": p})
                for p in ("random", best)}
        for design in sorted({r["policy"].rpartition("_gen_s")[0] for r in rows.values() if "_gen_s" in r["policy"]}):
            m = rec.summarise(f"{name}: {design} (generalist) mean {sc.objective}", "mean", "value",
                              where={**ep, "policy": design})
            e = {"generalist": True, "scenario": name, "design": design, "family": FAMILY_OF[sc.objective],
                 "objective": sc.objective, "lower_is_better": sc.lower_is_better, "best_heuristic": best, "mean": m,
                 "normalised": normalised_score(mean["random"], oracle_mean, m) if oracle else None,
                 "best_heuristic_normalised": normalised_score(mean["random"], oracle_mean, mean[best]) if oracle else None}
            for other, tag in (("random", "random"), (best, "best_heuristic")):
                rec.compare(f"{name}: {design} (generalist) − {tag} ({other})", {**ep, "policy": design},
                            {**ep, "policy": other}, tag, e)
            entries.append(e)
    family = [(i, tag) for i in range(len(entries)) for tag in ("random", "best_heuristic")]
    for (i, tag), p in zip(family, holm([entries[i][f"p_vs_{tag}"] for i, tag in family])):
        entries[i][f"p_holm_vs_{tag}"] = p
    rec.notes["leaderboard"] = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in e.items()}
                                for e in entries]
    # what each generalist leans on: set_es's weights by token column (standardised columns, so comparable)
    rec.notes["weights"] = {FAMILY_OF[o]: {str(t): json.loads((run_folder(args.out, "set_es", o, t) / "set_es.json")
                                                              .read_text())["params"]
                                           for t in args.train_seeds
                                           if (run_folder(args.out, "set_es", o, t) / "set_es.json").is_file()}
                            for o in FAMILY_OF}
    return rec


def weights_table(rec: records.Record) -> str:
    """The generalists' set_es weights by token column, one column per family and training seed."""
    cols = [(fam, t, w) for fam, seeds in rec.notes.get("weights", {}).items() for t, w in seeds.items()]
    if not cols:
        return ""
    names = list(cols[0][2])
    return markdown.table(["token column", *[f"{fam} seed {t}" for fam, t, _ in cols]],
                          [[f"`{n}`", *[f"{w.get(n, float('nan')):+.2f}" for _f, _t, w in cols]] for n in names],
                          align="l" + "r" * len(cols)).rstrip("\n")


def table(rec: records.Record) -> str:
    def ci(v: Sequence[Optional[float]], spec: str) -> str:
        return "—" if None in v else f"[{format(v[0], spec)}, {format(v[1], spec)}]"

    def num(x: Optional[float]) -> str:
        return "—" if x is None else f"{x:.3g}"

    rows = []
    for e in rec.notes["leaderboard"]:
        spec = "+.1f" if e["objective"] in ("rounds_to_target", "time_to_target") else "+.3f"
        norm = "—" if e["normalised"] is None else f"{e['normalised']:+.2f} ({e['best_heuristic_normalised']:+.2f})"
        rows.append([e["scenario"], f"`{e['design']}` on `family:{e['family']}`", format(e["mean"], spec[1:]),
                     f"{format(e['delta_vs_random'], spec)} {ci(e['delta_vs_random_ci_across'], spec)} "
                     f"({ci(e['delta_vs_random_ci'], spec)})", num(e["p_holm_vs_random"]),
                     f"{format(e['delta_vs_best_heuristic'], spec)} {ci(e['delta_vs_best_heuristic_ci_across'], spec)} "
                     f"({ci(e['delta_vs_best_heuristic_ci'], spec)}) vs `{e['best_heuristic']}`",
                     num(e["p_holm_vs_best_heuristic"]), norm])
    return markdown.table(["scenario", "generalist", "mean", "Δ vs random, across training seeds (conditional)",
                           "p_holm", "Δ vs best heuristic, across training seeds (conditional)", "p_holm",
                           "normalised (best heuristic's)"],
                          rows, align="lllrlrlr").rstrip("\n")


def main(argv: Optional[Sequence[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=("train", "eval", "report", "all"), default="all")
    p.add_argument("--objectives", default=",".join(FAMILY_OF), help="comma-separated objectives to train for")
    p.add_argument("--scenarios", default=",".join(sc.name for sc in BENCH_SCENARIOS))
    p.add_argument("--on", choices=("reporting", "tuning"), default="reporting",
                   help="the scenarios' reporting seeds (the track) or their tuning seeds (a probe, its own record)")
    p.add_argument("--train-seeds", type=int, nargs="+", default=list(TRAIN_SEEDS))
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_generalist")
    p.add_argument("--no-publish", action="store_true", help="write the record to --out only")
    p.add_argument("--smoke", action="store_true", help="tiny: " + json.dumps(SMOKE) + "; publishes nothing")
    args = p.parse_args(argv)
    args.objectives = [o for o in args.objectives.split(",") if o]
    bad = [o for o in args.objectives if o not in FAMILY_OF]
    if bad:
        p.error(f"--objectives {bad}: expected some of {list(FAMILY_OF)}")
    args.scenarios = [scenario(s).name for s in args.scenarios.split(",") if s]
    args.hyperparams, args.env_kwargs, args.overrides, args.seeds = [], [], {}, None
    if args.smoke:
        args.objectives, args.scenarios, args.hyperparams = SMOKE["objectives"], SMOKE["scenarios"], SMOKE["hyperparams"]
        args.env_kwargs, args.overrides, args.train_seeds = SMOKE["env_kwargs"], SMOKE["overrides"], SMOKE["train_seeds"]
        args.seeds, args.no_publish, args.on = SMOKE["seeds"], True, "reporting"
    if args.part in ("train", "all"):
        part_train(args)
    if args.part in ("eval", "all"):
        part_eval(args)
    if args.part in ("report", "all"):
        rec = build_record(args)
        rec.write(args.out / f"record_{args.on}.json",
                  written_by={"command": " ".join(["experiments/bench_generalist.py", *(argv or sys.argv[1:])])})
        if rec.notes["leaderboard"] and not args.no_publish:
            rec.write(RESULT[args.on], written_by={"command": " ".join(["experiments/bench_generalist.py",
                                                                        *(argv or sys.argv[1:])])})
            if args.on == "reporting":
                markdown.splice(ROOT / "docs" / "BENCHMARK.md", "bench:generalist",
                                table(rec) + "\n\nThe generalists' weights by token column:\n\n" + weights_table(rec))
        print(table(rec) + "\n\n" + weights_table(rec) if rec.notes["leaderboard"] else "nothing evaluated yet")


if __name__ == "__main__":
    main()
