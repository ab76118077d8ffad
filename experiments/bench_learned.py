"""Learned selectors on FedSelect-Bench (issue #29): train on fresh federations, report on the reporting seeds.

A thin client of the front door (issue #46): every design is trained by the trainer registry
(``agents.training.trainers``, what ``train_agent.py --algo <design> --env <scenario>`` runs) with its budget from
``configs/<design>.yml`` (the scenario's entry), the SB3 designs by ``train_agent.py`` itself; the record, its tables
and figures are ``fedsel_eval.learned`` and ``fedsel_eval.learned_tables``. For each scenario and training seed (0, 1,
2) a run trains on new federations (checked to be none of the bench's tuning or reporting ones); the report plays every
trained model on the 30 reporting seeds 9000–9029 and pairs it, seed by seed, with random, the scenario's best
heuristic and the oracle (``fedsel_eval/data/bench_reference.json``; common random numbers).

The designs (``--design``): ``set_distill`` and ``set_distill_cover`` (DAgger from the lookahead oracle), ``set_es``
and ``set_es_q`` (CMA-ES over a linear set value; ``set_es_q`` asks 2K clients their loss), ``pc_dqn``, ``pc_ppo`` and
``favor_plus`` (SB3 on the batched vector env). ``--part larger_n`` plays the per-client models at 2 × N, ``--part
confirm`` the ES models on seeds 20000–20029, ``--part fresh`` set_es_q on 30000–30029, ``--part picks`` the ES models
beside the oracle round by round.

    .venv/bin/python experiments/bench_learned.py --part train --design set_es --scenarios Churn --max-minutes 30
    .venv/bin/python experiments/bench_learned.py --part eval      # the reporting episodes (resumable)
    .venv/bin/python experiments/bench_learned.py --part report    # experiments/results/bench_learned.json
    .venv/bin/python experiments/bench_learned.py --smoke          # every part, tiny, in seconds; publishes nothing

Every part resumes: training from each run's last finished generation / episode, evaluation from the episodes already
in ``runs/bench_learned/eval/<scenario>/episodes.jsonl``. The report grows the record cell by cell: a (scenario,
design) cell whose models are trained and played here replaces the committed one, every other committed cell is
carried row for row (``fedsel_eval.learned.build_record``). The record's summaries are recomputable from its rows
(``python -m fedsel_eval.recompute experiments/results/bench_learned.json``).
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from agents.training import trainers
from fedsel_env.bench import REPORTING_SEEDS, TUNING_SEEDS, scenario
from fedsel_eval import records
from fedsel_eval.bench import reference_policies, reference_rows, run_scenario
from fedsel_eval.markdown import splice
from fedsel_eval.learned import (CONFIRM_SETS, DESIGNS, ES_DESIGNS, LARGER_N_DESIGNS, PICK_SEEDS,
                                 SB3_DESIGNS, best_heuristic, build_record, larger_config, picks_episode, policy_text,
                                 run_folder, trained_designs, training_summary)
from fedsel_eval.learned_tables import (confirm_table, es_weights_table, front_door_table, larger_table, picks_table,
                                        plot_curves, plot_es_curves, table)

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "experiments" / "results" / "bench_learned.json"
TRAIN_SEEDS = (0, 1, 2)
#: the scenarios with a set_distill budget in configs/set_distill.yml (the default --scenarios)
SCENARIOS = ("QuantitySkew", "PowerOfChoice", "NoisyLabels", "FreeRiders", "Stragglers", "Churn", "Large",
             "FMNISTControl")
#: the SB3 designs' sub-envs of the batched vector env (also in their configs' bench entries)
SB3_ENVS = 16


def sb3_steps(design: str) -> Dict[str, int]:
    """An SB3 design's training steps per scenario: ``n_timesteps`` of the scenario's entry in ``configs/<algo>.yml``
    (a step is one client for pc_dqn and favor_plus: K a round)."""
    from fedsel_env.config import read_yaml

    table = read_yaml(trainers.CONFIG_DIR / f"{SB3_DESIGNS[design][0]}.yml", "hyper-parameter file")
    return {scenario(k).name: int(v["n_timesteps"]) for k, v in table.items() if k.startswith("fedsel/Bench-")}


SMOKE = {"scenario": "Churn", "overrides": {"max_rounds": 3}, "train_seeds": (0,), "seeds": [9000, 9001],
         "es": {"generations": 2, "episodes": 2, "popsize": 3, "eval_every": 1},
         "distill": {"episodes": 2, "candidates": 3, "beta_episodes": 1, "eval_every": 1}}


def settings(args: argparse.Namespace, design: str, name: str) -> Dict[str, Any]:
    """A design's overrides over ``configs/<design>.yml``'s entry for ``name``: the smoke's tiny budget, or the
    command line's ``--generations`` / ``--episodes`` / ``--candidates`` / ``--eval-every``."""
    if design in ES_DESIGNS:
        over = dict(SMOKE["es"]) if args.smoke else {}
        over.update({"generations": args.generations} if args.generations else {})
    else:
        over = dict(SMOKE["distill"]) if args.smoke else {}
        if args.episodes:
            over.update(episodes=args.episodes, beta_episodes=max(1, args.episodes // 6))
        over.update({k: v for k, v in (("candidates", args.candidates), ("eval_every", args.eval_every)) if v})
    return {**over, **({"env_overrides": dict(args.overrides)} if args.overrides else {})}


def budgets(args: argparse.Namespace) -> Dict[str, Any]:
    """The designs' budgets, as the record's config holds them (read from configs/<design>.yml)."""
    es = {n: trainers.load_settings("set_es", n, settings(args, "set_es", n)) for n in args.scenarios}
    distill = {n: trainers.load_settings("set_distill", n, settings(args, "set_distill", n)) for n in args.scenarios}
    return {"set_distill_episodes": {n: distill[n]["episodes"] for n in args.scenarios},
            "set_distill_candidates": distill[args.scenarios[0]]["candidates"],
            "pc_dqn_steps": sb3_steps("pc_dqn"), "pc_dqn_envs": SB3_ENVS,
            "sb3_designs": {d: {"algo": a, "steps": sb3_steps(d), "step_is_one_client": o}
                            for d, (a, o) in SB3_DESIGNS.items()},
            "es_budget": {n: [es[n]["generations"], es[n]["episodes"]] for n in args.scenarios},
            "es_settings": {n: {k: es[n][k] for k in ("start", "sigma0", "popsize") if k in es[n]}
                            for n in args.scenarios if {"start", "sigma0", "popsize"} & set(es[n])}}


def sb3_command(args: argparse.Namespace, name: str, seed: int, design: str) -> list:
    """``train_agent.py --algo <design's>`` on the scenario's id: its entry in ``configs/<algo>.yml`` holds the budget,
    the 16 sub-envs, the scenario's own PCA width (so the model deploys on it unchanged) and a new federation every
    episode; the batched vector env."""
    folder = run_folder(args.out, name, seed, design)
    return [sys.executable, str(ROOT / "train_agent.py"), "--algo", SB3_DESIGNS[design][0], "--env",
            scenario(name).env_id, "--vec-env", "batched", "--seed", str(seed), "--runs-dir", str(folder.parent),
            "--name", folder.name, "--no-progress-bar", "--eval-freq", "0", *(["-n", str(args.steps)] if args.steps else []),
            *(["--env-kwargs", *[f"{k}={json.dumps(v)}" for k, v in args.overrides.items()]] if args.overrides else []),
            *(["--resume"] if (folder / "args.yaml").is_file() else [])]


def part_train(args: argparse.Namespace, deadline: float) -> None:
    """Train ``--design`` on every scenario and training seed through the front door (resuming a cut run)."""
    for name in args.scenarios:
        for seed in args.train_seeds:
            if time.time() >= deadline:
                return
            folder = run_folder(args.out, name, seed, args.design)
            if args.design in SB3_DESIGNS:
                if training_summary(args.out, name, seed, args.design) is None:
                    subprocess.run(sb3_command(args, name, seed, args.design), check=True, cwd=ROOT)
                summary = training_summary(args.out, name, seed, args.design)
            else:
                summary = trainers.train(args.design, name, seed, folder, settings(args, args.design, name),
                                         resume=True, deadline=deadline)
            print(f"{name} seed {seed}: {summary}", flush=True)


def _play(args: argparse.Namespace, part: str, name: str, designs: Sequence[str], seeds: Sequence[int],
          cfg: Dict[str, Any], deadline: float, extra: Sequence[str] = (), ref: Sequence[Any] = ()) -> None:
    best = best_heuristic(name, reference_rows()) if not args.smoke else "pow_d"
    policies = [*extra, "random" if not extra else None, best,
                *[policy_text(args, name, s, d) for d in designs for s in args.train_seeds]]
    run_scenario(args.out / part / name, scenario(name), [p for p in policies if p], list(seeds),
                 {**cfg, **args.overrides}, deadline, ref, log=lambda line: print(line, flush=True))


def part_eval(args: argparse.Namespace, deadline: float) -> None:
    """Every trained model, random, the best heuristic and the oracle on the reporting seeds (and, for the ES
    designs, random and the best heuristic on the tuning seeds: the lines their learning curves are read against)."""
    for name in args.scenarios:
        designs = trained_designs(args, name)
        if not designs:
            print(f"{name}: no design has all its training seeds trained to the end yet: nothing to evaluate")
            continue
        sc = scenario(name)
        _play(args, "eval", name, designs, args.seeds, sc.env_config(), deadline, reference_policies(sc),
              reference_rows())
        if set(designs) & set(ES_DESIGNS):
            _play(args, "tuning", name, (), TUNING_SEEDS, sc.env_config(), deadline)


def part_larger_n(args: argparse.Namespace, deadline: float) -> None:
    """The per-client models at 2 × the N they were trained at, beside random and the best heuristic."""
    from fedsel_env.env import FedSelectEnv

    for name in args.scenarios:
        designs = [d for d in LARGER_N_DESIGNS if d in trained_designs(args, name)]
        if designs:
            cfg = larger_config(name)
            try:  # FMNISTControl's and Large's 2 × N clients need more samples than Fashion-MNIST holds
                FedSelectEnv(config=cfg).close()
            except ValueError as e:
                print(f"{name} at N = {cfg['num_clients']}: not played ({e})", flush=True)
                continue
            _play(args, "eval_2n", name, designs, args.seeds, cfg, deadline)


def part_confirm(args: argparse.Namespace, deadline: float, role: str = "confirm") -> None:
    """The designs of ``CONFIRM_SETS[role]``, random and the best heuristic on its seeds."""
    from fedsel_env.bench import check_fresh_federations

    seeds, _label, candidates = CONFIRM_SETS[role]
    check_fresh_federations({f"{role} seed {s}": s for s in seeds})
    for name in args.scenarios:
        designs = [d for d in candidates if d in trained_designs(args, name)]
        if designs:
            _play(args, role, name, designs, seeds, scenario(name).env_config(), deadline)


def part_picks(args: argparse.Namespace, deadline: float) -> None:
    """Where the ES models' picks differ from the oracle's (``fedsel_eval.learned.picks_episode``) on the first
    ``PICK_SEEDS`` reporting seeds; resumable (``<out>/picks/<scenario>/<design>.jsonl``)."""
    from agents.training.atomic import append_line
    from fedsel_env.env import FedSelectEnv

    for name in args.scenarios:
        for design in [d for d in ES_DESIGNS if d in trained_designs(args, name)]:
            path = args.out / "picks" / name / f"{design}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            done = {(r["training_seed"], r["seed"]) for r in map(json.loads, path.read_text().splitlines())} \
                if path.is_file() else set()
            env = FedSelectEnv(config={**scenario(name).env_config(), **args.overrides})
            try:
                for t, s in [(t, s) for t in args.train_seeds for s in args.seeds[:PICK_SEEDS] if (t, s) not in done]:
                    if time.time() >= deadline:
                        return
                    row = picks_episode(env, scenario(name), run_folder(args.out, name, t, design), s)
                    append_line(path, json.dumps({"scenario": name, "design": design, "training_seed": t, "seed": s,
                                                  **row}))
                    print(f"{name} {design} s{t} seed {s}: overlap {row['overlap']:.2f}", flush=True)
            finally:
                env.close()


def report(args: argparse.Namespace, argv: Optional[Sequence[str]]) -> None:
    """The record (``<out>/record.json``; published to ``RESULT`` and the docs unless ``--smoke``/``--no-publish``)."""
    committed = records.load(RESULT) if RESULT.is_file() and not args.smoke else None  # its cells not played here
    rec = build_record(args, budgets(args), ROOT, code_paths=("fedsel_env", "agents", "fedsel_eval", "experiments"),
                       committed=committed)
    rec.write(args.out / "record.json", written_by={"command": " ".join(["experiments/bench_learned.py",
                                                                          *(argv or sys.argv[1:])])})
    board = rec.notes["leaderboard"]
    es_designs = [d for d in ES_DESIGNS if any(e["policy"] == d for e in board)]
    roles = [role for role in CONFIRM_SETS if any(r.get("role") == role for r in rec.rows)]
    picks = any(r.get("role") == "picks" for r in rec.rows)
    publish = not args.smoke and not args.no_publish and board
    img = ROOT / "docs" / "img" if publish else args.out
    if board:
        plot_curves(rec, img / ("bench_learned_curves.png" if publish else "curves.png"))
        if es_designs:
            plot_es_curves(rec, img / ("bench_learned_es_curves.png" if publish else "es_curves.png"))
    if publish:
        rec.write(RESULT)
        for design in es_designs:
            splice(ROOT / "docs" / "TRAINING.md", f"bench:{design}_weights", es_weights_table(rec, design))
        for role in roles:
            splice(ROOT / "docs" / "BENCHMARK.md", f"bench:learned_{role}", confirm_table(rec, role))
        if picks:
            splice(ROOT / "docs" / "TRAINING.md", "bench:learned_picks", picks_table(rec))
        splice(ROOT / "docs" / "BENCHMARK.md", "bench:learned", table(rec))
        splice(ROOT / "docs" / "BENCHMARK.md", "bench:learned_front_door", front_door_table(rec))
        splice(ROOT / "docs" / "BENCHMARK.md", "bench:learned_larger_n", larger_table(rec))
    print(table(rec) if board else "nothing complete to report yet")
    print(larger_table(rec))
    for text in [*[es_weights_table(rec, d) for d in es_designs], *[confirm_table(rec, r) for r in roles],
                 *([picks_table(rec)] if picks else [])]:
        print(text)


def main(argv: Optional[Sequence[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=("train", "eval", "larger_n", "confirm", "fresh", "picks", "report", "all"),
                   default="all", help="larger_n: the per-client models at 2 × N; fresh: set_es_q on seeds "
                                       "30000-30029; picks: the ES models' picks beside the oracle's, round by round")
    p.add_argument("--scenarios", default=None, help="comma-separated scenario names (default: SCENARIOS)")
    p.add_argument("--train-seeds", type=int, nargs="+", default=None)
    p.add_argument("--design", choices=DESIGNS, default="set_distill", help="what --part train trains")
    p.add_argument("--steps", type=int, default=None, help="an SB3 design's training steps (default: its config's)")
    p.add_argument("--episodes", type=int, default=None, help="set_distill's episodes (default: configs/set_distill.yml)")
    p.add_argument("--generations", type=int, default=None, help="set_es's generations (default: configs/set_es.yml)")
    p.add_argument("--candidates", type=int, default=None, help="the oracle's candidates per round (default: the config's)")
    p.add_argument("--eval-every", type=int, default=None, help="set_distill's learning curve every N episodes")
    p.add_argument("--max-minutes", type=float, default=math.inf, help="stop starting new work after this")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_learned")
    p.add_argument("--smoke", action="store_true", help="tiny: Churn, 3 rounds, 2 episodes, 2 seeds; publishes nothing")
    p.add_argument("--no-publish", action="store_true", help="write the record to --out only")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    deadline = time.time() + 60 * args.max_minutes
    if args.smoke:
        args.scenarios, args.overrides, args.seeds = [SMOKE["scenario"]], SMOKE["overrides"], SMOKE["seeds"]
        args.train_seeds = args.train_seeds or list(SMOKE["train_seeds"])
        args.out = args.out if args.out != ROOT / "runs" / "bench_learned" else ROOT / "runs" / "bench_learned_smoke"
    else:
        args.overrides, args.seeds = {}, list(REPORTING_SEEDS)
        args.scenarios = [scenario(s).name for s in args.scenarios.split(",")] if args.scenarios else list(SCENARIOS)
        args.train_seeds = args.train_seeds or list(TRAIN_SEEDS)
    for part, run in (("train", part_train), ("eval", part_eval), ("larger_n", part_larger_n),
                      ("confirm", part_confirm), ("fresh", lambda a, d: part_confirm(a, d, "fresh")),
                      ("picks", part_picks)):
        if args.part in (part, "all"):
            run(args, deadline)
    if args.part in ("report", "all"):
        report(args, argv)


if __name__ == "__main__":
    main()
