"""Learned selectors on FedSelect-Bench (issue #29): train on fresh federations, report on the reporting seeds.

Design ``set_distill`` (``agents/set_distill.py``, trained by ``agents/training/set_distill.py``): a per-client
scorer with a set-level value, distilled by DAgger from the bench's lookahead oracle. For each scenario and
training seed (0, 1, 2 by default) a run trains on episodes of new federations (seeds from 1,000,000 up,
checked to be none of the bench's tuning or reporting federations); its learning curve is played on the
tuning seeds 100–104. The report plays every trained model on the 30 reporting seeds 9000–9029 (never used
for anything else) and pairs it, seed by seed, with random, the scenario's best heuristic (the hand-written
agent with the best mean objective in the committed reference) and the oracle, whose episodes come from
``experiments/results/bench_reference.json`` (same config, same seeds: common random numbers).

    .venv/bin/python experiments/bench_learned.py --part train --scenarios Churn --max-minutes 30
    .venv/bin/python experiments/bench_learned.py --part eval      # the reporting episodes (resumable)
    .venv/bin/python experiments/bench_learned.py --part report    # experiments/results/bench_learned.json
    .venv/bin/python experiments/bench_learned.py --smoke          # every part, tiny, in seconds; publishes nothing

Every part resumes: training from each run's last finished episode, evaluation from the episodes already in
``runs/bench_learned/eval/<scenario>/episodes.jsonl``. The record's summaries are recomputable from its rows
(``python -m fedsel_eval.recompute experiments/results/bench_learned.json``).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from agents.training.set_distill import DistillConfig, train
from fedsel_env.bench import REPORTING_SEEDS, SCENARIOS, TUNING_SEEDS, normalised_score, scenario
from fedsel_eval import records
from fedsel_eval.bench import reference_policies, reference_rows, run_scenario

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "experiments" / "results" / "bench_learned.json"
DESIGN = "set_distill"
TRAIN_SEEDS = (0, 1, 2)
#: training episodes per scenario, fixed before any reporting episode was played (a scenario's episode costs
#: differ: chosen so that one training seed takes at most ~30 min on this machine; docs/TRAINING.md)
EPISODES: Dict[str, int] = {"QuantitySkew": 300, "PowerOfChoice": 150, "NoisyLabels": 300, "FreeRiders": 200,
                            "Stragglers": 300, "Churn": 300, "Large": 150, "FMNISTControl": 40}
SMOKE = {"scenario": "Churn", "overrides": {"max_rounds": 3}, "episodes": 2, "candidates": 3,
         "train_seeds": (0,), "seeds": [9000, 9001]}


def best_heuristic(sc_name: str, rows: Sequence[Mapping[str, Any]]) -> str:
    """The hand-written agent with the best mean objective on the scenario in the committed reference."""
    sc = scenario(sc_name)
    means: Dict[str, List[float]] = {}
    for r in rows:
        if r["scenario"] == sc_name and r["policy"] not in ("random", "lookahead"):
            means.setdefault(r["policy"], []).append(float(r["value"]))
    if not means:
        raise ValueError(f"no reference rows for {sc_name}: run experiments/bench_reference.py first")
    pick = min if sc.lower_is_better else max
    return pick(sorted(means), key=lambda p: float(np.mean(means[p])))


def run_folder(out: Path, sc_name: str, seed: int) -> Path:
    return out / DESIGN / sc_name / f"seed{seed}"


def greedy_eval(model: Any, cfg: DistillConfig) -> List[float]:
    """The learner's objective on ``cfg.eval_seeds`` (tuning seeds), played through ``fedsel_eval`` (a missed Ω
    counts as the cap): the learning curve of a training run."""
    from agents.set_distill import SetDistillAgent
    from fedsel_env.bench import episode_objective
    from fedsel_env.env import FedSelectEnv
    from fedsel_eval.episodes import run_episode

    sc = scenario(cfg.scenario)
    env = FedSelectEnv(config=cfg.env_config())
    try:
        return [episode_objective(sc, run_episode(env, None, int(s),
                                                  make_policy=lambda spec: SetDistillAgent(spec, model=model)))[0]
                for s in cfg.eval_seeds]
    finally:
        env.close()


def part_train(args: argparse.Namespace, deadline: float) -> None:
    for name in args.scenarios:
        for seed in args.train_seeds:
            cfg = DistillConfig(scenario=name, seed=seed, episodes=args.episodes or EPISODES[name],
                                candidates=args.candidates, env_overrides=dict(args.overrides),
                                eval_seeds=list(TUNING_SEEDS[:5]), eval_every=args.eval_every,
                                beta_episodes=max(1, (args.episodes or EPISODES[name]) // 6))
            summary = train(cfg, run_folder(args.out, name, seed), deadline=deadline, evaluate=greedy_eval)
            print(f"{name} seed {seed}: {summary}", flush=True)
            if time.time() >= deadline:
                return


def _policy_text(args: argparse.Namespace, name: str, seed: int) -> str:
    return f"{DESIGN}_s{seed}={DESIGN}:model={run_folder(args.out, name, seed)}"


def part_eval(args: argparse.Namespace, deadline: float) -> None:
    ref = reference_rows()
    for name in args.scenarios:
        sc = scenario(name)
        missing = [s for s in args.train_seeds if not (run_folder(args.out, name, s) / "summary.json").is_file()
                   or not json.loads((run_folder(args.out, name, s) / "summary.json").read_text())["complete"]]
        if missing:
            print(f"{name}: training seeds {missing} are not trained to the end yet: left out of this evaluation")
            continue
        cfg = sc.env_config()
        cfg.update(args.overrides)
        best = best_heuristic(name, ref) if not args.smoke else "pow_d"
        policies = [*reference_policies(sc), best, *[_policy_text(args, name, s) for s in args.train_seeds]]
        run_scenario(args.out / "eval" / name, sc, policies, args.seeds, cfg, deadline, ref,
                     log=lambda line: print(line, flush=True))


def build_record(args: argparse.Namespace) -> records.Record:
    """The record: every reporting episode of every model, and of random, the best heuristic and the oracle."""
    ref = reference_rows()
    rec = records.Record("bench_learned", config={
        "design": DESIGN, "train_seeds": list(args.train_seeds), "reporting_seeds": list(args.seeds),
        "episodes": {n: (args.episodes or EPISODES[n]) for n in args.scenarios}, "candidates": args.candidates,
        "overrides": dict(args.overrides)})
    chunk = rec.chunk(records.git_provenance(ROOT, ("fedsel_env", "agents", "fedsel_eval", "experiments")),
                      note="the report: trained models' episodes played and every episode gathered at this commit")
    leaderboard = []
    for name in args.scenarios:
        sc = scenario(name)
        path = args.out / "eval" / name / "episodes.jsonl"
        if not path.is_file():
            continue
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        best = best_heuristic(name, ref) if not args.smoke else "pow_d"
        want = {"random", "lookahead", best, *[f"{DESIGN}_s{s}" for s in args.train_seeds]}
        seeds = set(args.seeds)
        by_key = {}
        for r in [*ref, *rows]:
            if r["scenario"] == name and r["policy"] in want and r["seed"] in seeds:
                by_key[(r["policy"], r["seed"])] = r
        # only complete scenarios are reported: every policy on every seed
        if len(by_key) != len(want) * len(seeds):
            print(f"{name}: {len(by_key)} of {len(want) * len(seeds)} episodes so far: not reported yet")
            continue
        for (pol, seed), r in sorted(by_key.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            learned = pol.startswith(DESIGN + "_s")
            rec.add_row(chunk, scenario=name, policy=DESIGN if learned else pol,
                        role="learned" if learned else ("best_heuristic" if pol == best else pol),
                        training_seed=int(pol.rsplit("_s", 1)[1]) if learned else None, seed=seed,
                        objective=sc.objective, value=r["value"], censored=r["censored"], rounds=r["rounds"],
                        sim_time=r["sim_time"], final_accuracy=r["final_accuracy"], acc_worst10=r["acc_worst10"],
                        wall_time_s=r["wall_time_s"], config_sha=r["config_sha"])
        for s in args.train_seeds:
            summ = json.loads((run_folder(args.out, name, s) / "summary.json").read_text())
            rec.add_row(chunk, scenario=name, design=DESIGN, role="training", training_seed=s,
                        train_seconds=summ["train_seconds"], env_rounds=summ["env_rounds"],
                        oracle_rounds=summ["oracle_rounds"], episodes=summ["episodes_done"])
        w = {"scenario": name}
        ep = {**w, "role": ["learned", "random", "lookahead", "best_heuristic"]}  # episode rows, not training rows
        mean = {p: rec.summarise(f"{name}: {p} mean {sc.objective}", "mean", "value",
                                 where={**ep, "policy": p}) for p in ("random", "lookahead", best, DESIGN)}
        diffs = {}
        for ref_pol, tag in (("random", "random"), (best, "best_heuristic")):
            diffs[tag] = rec.summarise(f"{name}: {DESIGN} − {tag} ({ref_pol}), paired by seed", "paired_t", "value",
                                       where={**ep, "policy": DESIGN}, minus={**ep, "policy": ref_pol})
            rec.summarise(f"{name}: {DESIGN} − {tag} ({ref_pol}), across training seeds", "paired_t_across",
                          "value", where={**ep, "policy": DESIGN}, minus={**ep, "policy": ref_pol})
        train_s = rec.summarise(f"{name}: training wall seconds per training seed", "mean", "train_seconds",
                                where={**w, "role": "training"})
        env_rounds = rec.summarise(f"{name}: env rounds per training seed", "mean", "env_rounds",
                                   where={**w, "role": "training"})
        lo, hi = diffs["best_heuristic"]["lo"], diffs["best_heuristic"]["hi"]
        better = (hi < 0) if sc.lower_is_better else (lo > 0)
        leaderboard.append({
            "scenario": name, "policy": DESIGN, "learned": True, "objective": sc.objective,
            "lower_is_better": sc.lower_is_better, "best_heuristic": best, "mean": mean[DESIGN],
            "normalised": normalised_score(mean["random"], mean["lookahead"], mean[DESIGN]),
            "best_heuristic_normalised": normalised_score(mean["random"], mean["lookahead"], mean[best]),
            "delta_vs_random_ci": [diffs["random"]["lo"], diffs["random"]["hi"]],
            "delta_vs_random": diffs["random"]["mean"],
            "delta_vs_best_heuristic": diffs["best_heuristic"]["mean"],
            "delta_vs_best_heuristic_ci": [lo, hi], "beats_best_heuristic": bool(better),
            "train_seconds_per_seed": train_s, "env_rounds_per_seed": env_rounds})
    rec.notes["leaderboard"] = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in e.items()}
                                for e in leaderboard]  # a normalised score without headroom is None, not NaN
    rec.notes["reading"] = ("normalised = (random − policy) / (random − oracle) of the means over the reporting "
                            "seeds; deltas are policy − reference in the objective's units, paired by seed, the "
                            "learned policy's value averaged over its training seeds; 'beats_best_heuristic': the "
                            "95% t CI lies on the better side of 0")
    return rec


def table(rec: records.Record) -> str:
    lines = ["| scenario | objective | best heuristic | learned mean | normalised (heuristic's) | Δ vs random [95% CI] "
             "| Δ vs best heuristic [95% CI] | beats it | training per seed |",
             "|---|---|---|---:|---:|---:|---:|---|---:|"]
    for e in rec.notes["leaderboard"]:
        arrow = "↓" if e["lower_is_better"] else "↑"
        f = ".3f" if e["objective"] == "acc_worst10" else ".1f"
        lines.append(
            f"| {e['scenario']} | {e['objective']} {arrow} | `{e['best_heuristic']}` | {e['mean']:{f}} | "
            f"{_num(e['normalised'])} ({_num(e['best_heuristic_normalised'])}) | {e['delta_vs_random']:+{f}} "
            f"[{e['delta_vs_random_ci'][0]:+{f}}, {e['delta_vs_random_ci'][1]:+{f}}] | "
            f"{e['delta_vs_best_heuristic']:+{f}} [{e['delta_vs_best_heuristic_ci'][0]:+{f}}, "
            f"{e['delta_vs_best_heuristic_ci'][1]:+{f}}] | {'yes' if e['beats_best_heuristic'] else 'no'} | "
            f"{e['train_seconds_per_seed'] / 60:.1f} min, {e['env_rounds_per_seed']:,.0f} rounds |")
    return "\n".join(lines)


def _num(x: Any) -> str:
    return "—" if x is None else f"{x:+.2f}"


def main(argv: Optional[Sequence[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=("train", "eval", "report", "all"), default="all")
    p.add_argument("--scenarios", default=None, help="comma-separated scenario names (default: every one with an "
                                                     "episode budget)")
    p.add_argument("--train-seeds", type=int, nargs="+", default=None)
    p.add_argument("--episodes", type=int, default=None, help="training episodes (default: EPISODES per scenario)")
    p.add_argument("--candidates", type=int, default=16, help="the oracle's candidates per round (default 16)")
    p.add_argument("--eval-every", type=int, default=50, help="learning-curve evaluation every N episodes")
    p.add_argument("--max-minutes", type=float, default=math.inf, help="stop starting new work after this")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_learned")
    p.add_argument("--smoke", action="store_true", help="tiny: Churn, 3 rounds, 2 episodes, 2 seeds; publishes nothing")
    p.add_argument("--no-publish", action="store_true", help="write the record to --out only")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    deadline = time.time() + 60 * args.max_minutes
    if args.smoke:
        args.scenarios, args.overrides = [SMOKE["scenario"]], SMOKE["overrides"]
        args.episodes, args.candidates = args.episodes or SMOKE["episodes"], SMOKE["candidates"]
        args.train_seeds, args.seeds, args.eval_every = args.train_seeds or list(SMOKE["train_seeds"]), SMOKE["seeds"], 1
        args.out = args.out if args.out != ROOT / "runs" / "bench_learned" else ROOT / "runs" / "bench_learned_smoke"
    else:
        args.overrides, args.seeds = {}, list(REPORTING_SEEDS)
        args.scenarios = [scenario(s).name for s in args.scenarios.split(",")] if args.scenarios else list(EPISODES)
        args.train_seeds = args.train_seeds or list(TRAIN_SEEDS)
    if args.part in ("train", "all"):
        part_train(args, deadline)
    if args.part in ("eval", "all"):
        part_eval(args, deadline)
    if args.part in ("report", "all"):
        rec = build_record(args)
        rec.write(args.out / "record.json", written_by={"command": " ".join(["experiments/bench_learned.py", *(argv or sys.argv[1:])])})
        if not args.smoke and not args.no_publish and rec.notes["leaderboard"]:
            rec.write(RESULT)
        print(table(rec) if rec.notes["leaderboard"] else "nothing complete to report yet")


if __name__ == "__main__":
    main()
