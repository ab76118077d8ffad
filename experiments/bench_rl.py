"""Standard RL on FedSelect-Bench (issue #41): SB3-trained selectors on the scenario's own objective as the reward.

Each design is trained by the front door, ``train_agent.py --algo <algo> --env fedsel/Bench-<Name>-v0`` (the id's
default reward is the scenario's objective, so an episode's return is its score), on the batched vector env with a
new federation every episode (training seeds disjoint from every bench seed), the scenario's own PCA width so the
model deploys on it unchanged. Then every training seed's model plays the 30 reporting seeds beside random and the
scenario's best heuristic (from the committed reference), deployed two ways: ``<design>`` — the K largest logits
(``agents/deploy.py``'s ``per_client``), and ``<design>_sampled`` — the stochastic policy it was trained as
(``per_client:...,sample=true``; Plackett-Luce designs only). The designs: ``pl_ppo`` (PPO with the Plackett-Luce
K-of-N policy) and ``pc_dqn`` (the per-client Double DQN, one client a step, deployed as its K highest Q-values),
each with its budget and settings in ``configs/<algo>.yml``. The record (``experiments/results/bench_rl.json``)
holds every episode and the training curves (``rollout/ep_rew_mean`` in env rounds: ``fedsel_eval.rl_curves``,
drawn against random, the best heuristic, ``set_es`` and the oracle in docs/img/bench_rl_curves.png); its
leaderboard gives, per scenario and deployed design, the paired difference against random and the best heuristic
with the 95% CI across training seeds (the method's CI, ``paired_t_across``) as the headline, the conditional CI
beside it, a Holm correction over every comparison in the record, the normalised score and each seed's training
rounds and minutes.

    .venv/bin/python experiments/bench_rl.py --part train --scenarios Stragglers
    .venv/bin/python experiments/bench_rl.py --part eval --scenarios Stragglers
    .venv/bin/python experiments/bench_rl.py --part report
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedsel_env.bench import REPORTING_SEEDS, SCENARIOS, normalised_score, scenario  # noqa: E402
from fedsel_eval import markdown, records, rl_curves  # noqa: E402
from fedsel_eval.bench import reference_rows, run_scenario  # noqa: E402
from fedsel_eval.learned import best_heuristic  # noqa: E402
from fedsel_eval.stats import holm, t_interval  # noqa: E402

RESULT = ROOT / "experiments" / "results" / "bench_rl.json"
TRAIN_SEEDS = (0, 1, 2)
N_ENVS = 16
#: design → its --algo, hyper-parameter overrides (none: each design's settings and budget are its configs/<algo>.yml
#: entry, issue #46) and the scenarios it is trained on, fixed before any reporting episode was played. pl_ppo's
#: default entry holds the settings chosen on Stragglers' tuning seeds (docs/TRAINING.md, the quick start) and 16,384
#: rounds (one step = one round); Stragglers' pl_ppo is the README's quick start, measured by bench/quickstart.py
#: (experiments/results/quickstart.json). The FreeRiders, NoisyLabels and Churn runs of the record passed those
#: settings as --hyperparams (learning_rate:0.001 gamma:0.9 n_steps:32 n_epochs:8): the same values.
#: ``pc_dqn`` (issue #41's DQN form: the per-client Double DQN, one client a step, on the objective reward) takes its
#: budget and settings from its ``fedsel/Bench-<Name>-v0`` entry in configs/pc_dqn.yml (50,000 steps,
#: 16 sub-envs, chosen before issue #41 for FAVOR's reward; untuned on the objective reward); its reward is set to the
#: scenario's objective on the command line (the QuantitySkew entry pins FAVOR's reward for issue #29's record).
DESIGNS: Dict[str, Dict[str, Any]] = {
    "pl_ppo": {"algo": "pl_ppo", "hyperparams": [], "sampled": True,
               "scenarios": ("FreeRiders", "NoisyLabels", "Churn", "QuantitySkew", "Large", "PowerOfChoice",
                             "FMNISTControl")},
    # the named variant pl_ppo_cover (cover-aware tokens, logits started at kcenter_cover's picks; configs/
    # pl_ppo_cover.yml): pl_ppo's settings and budget unchanged, on the four digits scenarios first (their rounds are
    # the cheapest; the Fashion-MNIST ones follow when a session has the hours)
    "pl_ppo_cover": {"algo": "pl_ppo_cover", "hyperparams": [], "sampled": True,
                     "scenarios": ("FreeRiders", "NoisyLabels", "Churn", "Stragglers", "QuantitySkew", "Large",
                                   "PowerOfChoice", "FMNISTControl")},
    # the named variant pl_ppo_cover_long (configs/pl_ppo_cover_long.yml: cover_prior 1, 98,304 rounds), the
    # settings of the one tuning probe that kept learning (FreeRiders, bench_rl_probes.json); on FreeRiders, where
    # it was chosen, and on NoisyLabels, the other digits scenario whose best heuristic is kcenter_cover
    "pl_ppo_cover_long": {"algo": "pl_ppo_cover_long", "hyperparams": [], "sampled": True,
                          "scenarios": ("FreeRiders", "NoisyLabels")},
    "pc_dqn": {"algo": "pc_dqn", "hyperparams": [], "sampled": False,
               "scenarios": ("NoisyLabels", "FreeRiders", "Churn", "Stragglers", "QuantitySkew", "Large",
                             "PowerOfChoice", "FMNISTControl")},
}
#: --smoke: every design on Churn at 3 rounds, 64 steps of 4 sub-envs, 2 training seeds, 2 reporting seeds; publishes nothing
SMOKE = {"scenario": "Churn", "overrides": {"max_rounds": 3}, "steps": 64, "n_envs": 4, "train_seeds": [0, 1],
         "seeds": [9000, 9001]}


def run_folder(out: Path, design: str, name: str, seed: int) -> Path:
    return out / design / name / f"seed{seed}"


def config_steps(algo: str, env_id: str) -> int:
    """The training steps of ``env_id``'s entry in configs/<algo>.yml, else of its ``default`` one (the budget lives
    there, issue #46; train_agent.py reads the same entry)."""
    import yaml

    entries = yaml.safe_load((ROOT / "configs" / f"{algo}.yml").read_text())
    return int(entries[env_id if env_id in entries else "default"]["n_timesteps"])


def finished(folder: Path) -> bool:
    import yaml

    if not (folder / "summary.yaml").is_file():
        return False
    want = yaml.safe_load((folder / "args.yaml").read_text())["n_timesteps"]
    return int(yaml.safe_load((folder / "summary.yaml").read_text())["num_timesteps"]) >= int(want)


def part_train(args: argparse.Namespace) -> None:
    from fedsel_env.config import DEFAULT_CONFIG
    from fedsel_env.spec import SelectionSpec

    for design in args.designs:
        d = DESIGNS[design]
        for name in [n for n in args.scenarios if n in d["scenarios"] or args.smoke]:
            sc = scenario(name)
            for seed in args.train_seeds:
                folder = run_folder(args.out, design, name, seed)
                if finished(folder):
                    continue
                steps = args.steps or config_steps(d["algo"], sc.env_id)
                cmd = [sys.executable, str(ROOT / "train_agent.py"), "--algo", d["algo"], "--env", sc.env_id,
                       "--n-envs", str(args.n_envs), "--vec-env", "batched", "-n", str(steps),
                       "--seed", str(seed), "--runs-dir", str(folder.parent), "--name", folder.name,
                       "--no-progress-bar", "--eval-freq", "0", *(["--hyperparams", *d["hyperparams"]] if d["hyperparams"]
                                                                   else []), "--env-kwargs",
                       f"pca_components={SelectionSpec.pca_width({**DEFAULT_CONFIG, **sc.env_config()})}",
                       "federation_seed=null", *[f"{k}={json.dumps(v)}" for k, v in
                                                 {**sc.reward_config(), **args.overrides}.items()]]
                if (folder / "checkpoints").is_dir() and any((folder / "checkpoints").iterdir()):
                    cmd = cmd[:2] + ["--runs-dir", str(folder.parent), "--name", folder.name, "--resume"]
                print(" ".join(cmd[1:]), flush=True)
                subprocess.run(cmd, check=True, cwd=ROOT)


def rounds_per_step(design: str, name: str) -> float:
    """The env rounds one training step of ``design`` plays on scenario ``name``: 1/K for the one-client-a-step DQN
    form (``pc_dqn``, ``one_mode_step: 1/K``), 1 for a design that picks a whole round a step."""
    return 1.0 / scenario(name).config["clients_per_round"] if DESIGNS[design]["algo"] == "pc_dqn" else 1.0


def training_cost(args: argparse.Namespace, design: str, name: str) -> Dict[str, List[float]]:
    """Per training seed, the env rounds a run played (``pc_dqn``'s one-client steps are 1/K of a round), the
    wall minutes of its ``train_agent.py`` call (its ``summary.yaml``; a resumed run's last call only) and, for runs
    that recorded them (``machines.jsonl``, issue #46), each call's commit and CPU."""
    import yaml

    from agents.training.runs import read_machines

    out: Dict[str, List[Any]] = {"train_rounds": [], "train_minutes": []}
    if design not in DESIGNS:
        return out
    per_round = rounds_per_step(design, name)
    for t in args.train_seeds:
        summary = run_folder(args.out, design, name, t) / "summary.yaml"
        if summary.is_file():
            s = yaml.safe_load(summary.read_text())
            out["train_rounds"].append(round(int(s["num_timesteps"]) * per_round, 1))
            out["train_minutes"].append(round(float(s["train_seconds_this_call"]) / 60.0, 2))
        calls = read_machines(run_folder(args.out, design, name, t))
        if calls:
            out.setdefault("train_machines", []).append(
                [{k: c.get(k) for k in ("commit", "dirty", "cpu", "torch_kernels")} for c in calls])
    return out


def policies(args: argparse.Namespace, name: str) -> List[str]:
    out = []
    for design, d in DESIGNS.items():
        runs = [run_folder(args.out, design, name, t) for t in args.train_seeds]
        if (name in d["scenarios"] or args.smoke) and all(finished(f) for f in runs):
            for t, f in zip(args.train_seeds, runs):
                out.append(f"{design}_s{t}={f}")
                if d["sampled"]:  # a Plackett-Luce model also as the stochastic policy it was trained as
                    out.append(f"{design}_sampled_s{t}=per_client:model_path={f / 'model.zip'},sample=true")
    return out


def part_eval(args: argparse.Namespace) -> None:
    ref = reference_rows()
    for name in args.scenarios:
        models = policies(args, name)
        if models:
            cfg = {**scenario(name).env_config(), **args.overrides}
            run_scenario(args.out / "eval" / name, scenario(name), ["random", best_heuristic(name, ref), *models],
                         args.seeds, cfg, n_envs=args.eval_envs, log=lambda line: print(line, flush=True))


def build_record(args: argparse.Namespace) -> records.Record:
    import numpy as np

    ref = reference_rows()
    rec = records.Record("bench_rl", config={"designs": DESIGNS, "train_seeds": list(args.train_seeds),
                                             "reporting_seeds": list(args.seeds), "n_envs": N_ENVS})
    chunk = rec.chunk(records.git_provenance(ROOT, ("fedsel_env", "agents", "fedsel_eval", "experiments")),
                      note="episodes played by --part eval (runs/bench_rl/eval/), gathered here")
    old = carried_record(args)

    def chunk_of(r: Dict[str, Any]) -> str:
        return rec.chunk_of(r, chunk, "models not on this machine")

    entries = []
    for name in args.scenarios:
        path = args.out / "eval" / name / "episodes.jsonl"
        if not path.is_file() and name not in old["reference"]:
            continue
        sc, best = scenario(name), best_heuristic(name, ref)
        # the scenario played here, or (no design of it trained here) its committed random and best-heuristic rows
        rows = {(r["policy"], r["seed"]): r for r in map(json.loads, path.read_text().splitlines()) if r} \
            if path.is_file() else dict(old["reference"][name])
        rows.update(carried_rows(old, name, {p.rpartition("_s")[0] for p, _ in rows if p not in ("random", best)}))
        oracle = float(np.mean([r["value"] for r in ref if r["scenario"] == name and r["policy"] == "lookahead"]))
        for (pol, seed), r in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            design, _, t = pol.rpartition("_s") if pol not in ("random", best) else (None, "", "")
            rec.add_row(chunk_of(r), scenario=name, policy=design or pol, training_seed=int(t) if design else None,
                        role="learned" if design else ("best_heuristic" if pol == best else "random"), seed=seed,
                        objective=sc.objective, value=r["value"], censored=r["censored"], rounds=r["rounds"],
                        reached=r["reached"], sim_time=r["sim_time"], final_accuracy=r["final_accuracy"],
                        config_sha=r["config_sha"])
        ep = {"scenario": name}
        mean = {p: rec.summarise(f"{name}: {p} mean {sc.objective}", "mean", "value", where={**ep, "policy": p})
                for p in ("random", best)}
        for design in sorted({p.rpartition("_s")[0] for p, _ in rows if p not in ("random", best)}):
            m = rec.summarise(f"{name}: {design} mean {sc.objective}", "mean", "value", where={**ep, "policy": design})
            e = {"scenario": name, "policy": design, "design": design, "learned": True, "trainer": "sb3",
                 "objective": sc.objective, "lower_is_better": sc.lower_is_better, "best_heuristic": best, "mean": m,
                 "normalised": normalised_score(mean["random"], oracle, m),
                 "best_heuristic_normalised": normalised_score(mean["random"], oracle, mean[best]),
                 **(training_cost(args, design.removesuffix("_sampled"), name) if design not in old["designs"].get(name, ())
                    else old["cost"][(name, design)])}
            for other, tag in (("random", "random"), (best, "best_heuristic")):
                rec.compare(f"{name}: {design} − {tag} ({other})", {**ep, "policy": design}, {**ep, "policy": other},
                            tag, e)
            entries.append(e)
        for design, d in DESIGNS.items():  # the training episodes' curves (fedsel_eval.rl_curves), in env rounds
            per_round = rounds_per_step(design, name)
            for t in args.train_seeds:
                folder = run_folder(args.out, design, name, t)
                if design in old["designs"].get(name, ()):  # carried: the committed record's curve rows
                    if t == args.train_seeds[0]:
                        for row in old["curves"].get((name, design), []):
                            rec.carry(row, chunk, "models not on this machine")
                    continue
                if design in {e["design"] for e in entries if e["scenario"] == name} and finished(folder):
                    scale = per_round if sc.objective == "rounds_to_target" else 1.0  # one mode: −1 a pick
                    for row in rl_curves.curve_rows(folder, per_round, sc.lower_is_better, scale, scenario=name,
                                                    design=design, training_seed=t):
                        rec.add_row(chunk, **row)
    # Holm over every comparison in the record (each design x scenario, against random and the best heuristic)
    family = [(i, tag) for i in range(len(entries)) for tag in ("random", "best_heuristic")]
    adjusted = holm([entries[i][f"p_vs_{tag}"] for i, tag in family])
    for (i, tag), p in zip(family, adjusted):
        entries[i]["p_holm" if tag == "best_heuristic" else "p_holm_vs_random"] = p
    for e in entries:
        lo, hi = e["delta_vs_best_heuristic_ci_across"]
        e["beats_best_heuristic"] = bool(e["p_holm"] < 0.05 and ((hi is not None and hi < 0) if e["lower_is_better"]
                                                                 else (lo is not None and lo > 0)))
    rec.notes["leaderboard"] = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in e.items()}
                                for e in entries]
    rec.notes["holm_family"] = [f"{entries[i]['scenario']}: {entries[i]['policy']} vs {tag}" for i, tag in family]
    return rec


def carried_record(args: argparse.Namespace) -> Dict[str, Any]:
    """What the committed record holds of designs whose runs are not on this machine (``--out``): the campaign grows
    across sessions and machines, and a design trained elsewhere keeps its rows, curves and training cost, each in a
    chunk naming the commit it was recorded at. Nothing is carried for a smoke run, or for a design × scenario whose
    training runs are here (those are played again)."""
    out: Dict[str, Any] = {"rows": {}, "curves": {}, "cost": {}, "designs": {}, "reference": {}}
    if args.smoke or not RESULT.is_file():
        return out
    here = {(name, design) for design in DESIGNS for name in args.scenarios
            if any(finished(run_folder(args.out, design, name, t)) for t in args.train_seeds)}
    committed = records.load(RESULT)
    for r in records.carried_rows(committed):
        design = r.get("design") if r.get("role") == "curve" else r.get("policy")
        base = (design or "").removesuffix("_sampled")
        if r["scenario"] not in args.scenarios:
            continue
        if r.get("role") in ("random", "best_heuristic"):
            out["reference"].setdefault(r["scenario"], {})[(r["policy"], r["seed"])] = r
            continue
        if r.get("role") not in ("learned", "curve") or (r["scenario"], base) in here:
            continue
        if r["role"] == "curve":
            out["curves"].setdefault((r["scenario"], design), []).append(r)
        else:
            out["rows"].setdefault(r["scenario"], {})[(f"{design}_s{r['training_seed']}", r["seed"])] = r
            out["designs"].setdefault(r["scenario"], set()).add(design)
    for e in committed["notes"].get("leaderboard", []):
        out["cost"][(e["scenario"], e["design"])] = {"train_rounds": e.get("train_rounds", []),
                                                     "train_minutes": e.get("train_minutes", []),
                                                     **({"train_machines": e["train_machines"]}
                                                        if "train_machines" in e else {})}
    return out


def carried_rows(old: Dict[str, Any], name: str, here: Set[str]) -> Dict[Tuple[str, int], Dict[str, Any]]:
    """The committed learned rows of scenario ``name`` for designs not played here (:func:`carried_record`)."""
    return {k: r for k, r in old["rows"].get(name, {}).items() if k[0].rpartition("_s")[0] not in here}


LEARNED = ROOT / "experiments" / "results" / "bench_learned.json"
#: seeds no record of the project had been played on (checked over experiments/, fedsel_eval/ and the records) before
#: issue #41's pl_ppo_cover was reported: a claimed win is re-played there (``--part confirm``), beside random and the
#: scenario's best heuristic, in a record of its own (so no reporting-seed summary takes them in)
CONFIRM_SEEDS = tuple(range(50_000, 50_030))
CONFIRM_RESULT = ROOT / "experiments" / "results" / "bench_rl_confirm.json"


def part_confirm(args: argparse.Namespace) -> None:
    """The ``--designs`` models of each scenario on :data:`CONFIRM_SEEDS`, beside random and the best heuristic."""
    ref = reference_rows()
    for name in args.scenarios:
        models = [m for m in policies(args, name)
                  if m.split("=", 1)[0].rpartition("_s")[0].removesuffix("_sampled") in args.designs]
        if models:
            cfg = {**scenario(name).env_config(), **args.overrides}
            run_scenario(args.out / "confirm" / name, scenario(name), ["random", best_heuristic(name, ref), *models],
                         args.confirm_seeds, cfg, n_envs=args.eval_envs, log=lambda line: print(line, flush=True))


def build_confirm_record(args: argparse.Namespace) -> records.Record:
    """The confirmation episodes: per scenario and design, the difference against random and the best heuristic
    across training seeds (and paired by seed)."""
    ref = reference_rows()
    rec = records.Record("bench_rl_confirm", config={"confirm_seeds": list(args.confirm_seeds),
                                                     "train_seeds": list(args.train_seeds)})
    chunk = rec.chunk(records.git_provenance(ROOT, ("fedsel_env", "agents", "fedsel_eval", "experiments")),
                      note="episodes played by --part confirm (runs/bench_rl/confirm/), gathered here")
    entries = []
    carried = carried_confirm(args)
    for name in sorted(set(args.scenarios) | set(carried)):
        path = args.out / "confirm" / name / "episodes.jsonl"
        if not path.is_file() and name not in carried:
            continue
        sc, best = scenario(name), best_heuristic(name, ref)
        played = {(r["policy"], r["seed"]): r for r in map(json.loads, path.read_text().splitlines()) if r} \
            if path.is_file() else {}
        here = {p.rpartition("_s")[0] for p, _ in played if p not in ("random", best)}
        # the committed confirmation rows of designs not re-played here (and, for a scenario not played here at all,
        # its random and best-heuristic rows), each in a chunk naming the commit it was recorded at
        old = {k: r for k, r in carried.get(name, {}).items()
               if (k[0] in ("random", best) and not played) or (k[0] not in ("random", best)
                                                               and k[0].rpartition("_s")[0] not in here)}
        for (pol, seed), r in sorted({**old, **played}.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            design, _, t = pol.rpartition("_s") if pol not in ("random", best) else (None, "", "")
            rec.add_row(rec.chunk_of(r, chunk, "models not on this machine"), scenario=name, policy=design or pol, training_seed=int(t) if design else None,
                        role="learned" if design else ("best_heuristic" if pol == best else "random"), seed=seed,
                        objective=sc.objective, value=r["value"], censored=r["censored"], config_sha=r["config_sha"])
        rows = {**old, **played}
        ep = {"scenario": name}
        for design in sorted({p.rpartition("_s")[0] for p, _ in rows if p not in ("random", best)}):
            e = {"scenario": name, "design": design, "best_heuristic": best, "objective": sc.objective,
                 "lower_is_better": sc.lower_is_better,
                 "mean": rec.summarise(f"{name} confirm: {design} mean", "mean", "value", where={**ep, "policy": design})}
            for other, tag in (("random", "random"), (best, "best_heuristic")):
                rec.compare(f"{name} confirm: {design} − {tag} ({other})", {**ep, "policy": design},
                            {**ep, "policy": other}, tag, e)
                del e[f"p_vs_{tag}"]  # the confirmation record's entries as they were first written
            entries.append(e)
    rec.notes["confirm"] = entries
    return rec


def carried_confirm(args: argparse.Namespace) -> Dict[str, Dict[Tuple[str, int], Dict[str, Any]]]:
    """The committed confirmation record's rows by scenario, keyed as the episodes files are (``<design>_s<t>`` or the
    heuristic's name, seed), each with the chunk it was recorded in: a session re-plays only its own designs' models
    and keeps what earlier sessions confirmed (nothing is carried for a smoke run)."""
    if args.smoke or not CONFIRM_RESULT.is_file():
        return {}
    out: Dict[str, Dict[Tuple[str, int], Dict[str, Any]]] = {}
    for r in records.carried_rows(records.load(CONFIRM_RESULT)):
        key = r["policy"] if r["training_seed"] is None else f"{r['policy']}_s{r['training_seed']}"
        out.setdefault(r["scenario"], {})[(key, r["seed"])] = r
    return out


def confirm_table(rec: records.Record) -> str:
    def ci(v: Sequence[Optional[float]]) -> str:
        return "[" + ", ".join("n/a" if x is None else f"{x:+.3g}" for x in v) + "]"

    rows = [[e["scenario"], f"`{e['design']}`", f"{e['mean']:.4g}",
             f"{e['delta_vs_random']:+.3g} {ci(e['delta_vs_random_ci_across'])} ({ci(e['delta_vs_random_ci'])})",
             f"{e['delta_vs_best_heuristic']:+.3g} {ci(e['delta_vs_best_heuristic_ci_across'])} "
             f"({ci(e['delta_vs_best_heuristic_ci'])}) vs `{e['best_heuristic']}`"] for e in rec.notes["confirm"]]
    return markdown.table(["scenario", "design", "mean", "Δ vs random, across seeds (conditional)",
                           "Δ vs best heuristic, across seeds (conditional)"], rows)


CURVES_PNG = ROOT / "docs" / "img" / "bench_rl_curves.png"


def references(rec: records.Record) -> Dict[str, Dict[str, Optional[float]]]:
    """Per scenario, the reference levels of the learning curves on the reporting seeds: random and the best
    heuristic (this record), ``set_es`` (issue #29's record, where it was trained) and the oracle (the reference)."""
    import numpy as np

    ref = reference_rows()
    learned = json.loads(LEARNED.read_text())["rows"] if LEARNED.is_file() else []
    out: Dict[str, Dict[str, Optional[float]]] = {}
    for e in rec.notes["leaderboard"]:
        def mean(rows: Sequence[Dict[str, Any]], policy: str) -> Optional[float]:
            v = [r["value"] for r in rows if r.get("scenario") == e["scenario"] and r.get("policy") == policy
                 and r.get("seed") in REPORTING_SEEDS and r.get("role") not in ("larger_n", "confirm", "curve")]
            return float(np.mean(v)) if v else None

        out[e["scenario"]] = {"random": mean(rec.rows, "random"),
                              f"{e['best_heuristic']} (best heuristic)": mean(rec.rows, e["best_heuristic"]),
                              "set_es": mean(learned, "set_es"), "oracle (lookahead)": mean(ref, "lookahead")}
    return out


def plot(rec: records.Record, path: Path = CURVES_PNG) -> Optional[Path]:
    curves = [r for r in rec.rows if r.get("role") == "curve"]
    if not curves:
        return None
    objectives = {e["scenario"]: (e["objective"], e["lower_is_better"]) for e in rec.notes["leaderboard"]}
    return rl_curves.plot_curves(curves, references(rec), objectives, path)


def normalised_means(rec: records.Record) -> str:
    """Each deployed design's mean normalised score over the scenarios it was measured on, beside the best
    heuristic's on the same scenarios (issue #41's goal compares it with kcenter_cover's +0.65 over all 8)."""
    import numpy as np

    lines = []
    for design in sorted({e["policy"] for e in rec.notes["leaderboard"]}):
        es = [e for e in rec.notes["leaderboard"] if e["policy"] == design and e["normalised"] is not None]
        if es:
            lines.append(f"- `{design}`: mean normalised score {np.mean([e['normalised'] for e in es]):+.2f} over "
                         f"{len(es)} scenarios ({', '.join(e['scenario'] for e in es)}); their best heuristics' "
                         f"{np.mean([e['best_heuristic_normalised'] for e in es]):+.2f}")
    return "\n".join(lines)


def table(rec: records.Record) -> str:
    digits = "1"  # rounds and seconds to one decimal, accuracies to three (set per row below)

    def ci(v: Sequence[Optional[float]]) -> str:
        return "—" if None in v else f"[{v[0]:+.{digits}f}, {v[1]:+.{digits}f}]"

    def num(x: Optional[float], spec: str) -> str:
        return "—" if x is None else format(x, spec.replace(".1f", f".{digits}f"))

    def cost(e: Dict[str, Any]) -> str:
        mins, rounds = e.get("train_minutes") or [], e.get("train_rounds") or []
        return (f"{min(mins):.1f}–{max(mins):.1f} min, {max(rounds):,.0f} rounds" if mins and rounds else "—")

    rows = []
    for e in rec.notes["leaderboard"]:
        digits = "1" if e["objective"] in ("rounds_to_target", "time_to_target") else "3"
        rows.append([e["scenario"], f"`{e['policy']}`", num(e["mean"], ".1f"),
                     f"{num(e['delta_vs_random'], '+.1f')} {ci(e['delta_vs_random_ci_across'])} "
                     f"({ci(e['delta_vs_random_ci'])})",
                     f"{num(e['delta_vs_best_heuristic'], '+.1f')} {ci(e['delta_vs_best_heuristic_ci_across'])} "
                     f"({ci(e['delta_vs_best_heuristic_ci'])}) vs `{e['best_heuristic']}`",
                     num(e.get("p_holm"), ".3g"),
                     f"{num(e['normalised'], '+.2f')} ({num(e['best_heuristic_normalised'], '+.2f')})",
                     cost(e)])
    return markdown.table(["scenario", "design", "mean", "Δ vs random, across seeds (conditional)",
                           "Δ vs best heuristic, across seeds (conditional)", "p_holm",
                           "normalised (best heuristic's)", "training per seed"], rows, align="llrllrrr").rstrip("\n")


def learned_holm(path: Path = ROOT / "experiments" / "results" / "bench_learned.json") -> str:
    """Issue #41's check of the earlier learned designs (issue #29's record): every design x scenario difference
    against the best heuristic across training seeds, its t-test p-value over the per-seed differences and the
    Holm-adjusted one over all of them (the comparisons tried and dropped included), as a table."""
    rec = json.loads(Path(path).read_text())
    found = [(s["name"].split(", across")[0], s["value"]) for s in rec["summaries"]
             if "best_heuristic" in s["name"] and s["name"].endswith("across training seeds")]
    ps = [t_interval(v.get("per_training_seed") or []).p for _n, v in found]
    adjusted = holm(ps)
    rows = [[name, f"{v['mean']:+.3g} [{v['lo']:+.3g}, {v['hi']:+.3g}]", f"{p:.3g}", f"{p_holm:.3g}"]
            for (name, v), p, p_holm in zip(found, ps, adjusted)]
    return markdown.table(["comparison", "Δ across training seeds [95% CI]", "p", f"p (Holm, all {len(found)})"],
                          rows, align="llrr").rstrip("\n")


def main(argv: Optional[Sequence[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=("train", "eval", "report", "all", "confirm", "learned_holm"), default="all",
                   help="confirm: the --designs models re-played on the confirmation seeds 50000-50029 (their own "
                        "record); learned_holm: the Holm-corrected table of issue #29's learned designs (BENCHMARK.md)")
    p.add_argument("--scenarios", default=None, help="comma-separated scenario names (default: every one with a budget)")
    p.add_argument("--designs", default=",".join(DESIGNS))
    p.add_argument("--train-seeds", type=int, nargs="+", default=list(TRAIN_SEEDS))
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_rl")
    p.add_argument("--eval-envs", type=int, default=1,
                   help="--part eval and confirm: play up to this many episodes at once through the vector env (the "
                        "same rows as one at a time, fedsel_eval.vector_episodes; faster on the Fashion-MNIST scenarios)")
    p.add_argument("--no-publish", action="store_true", help="write the record to --out only")
    p.add_argument("--smoke", action="store_true", help="tiny: " + json.dumps(SMOKE) + "; publishes nothing")
    args = p.parse_args(argv)
    args.designs = [d for d in args.designs.split(",") if d]
    args.scenarios = [scenario(s).name for s in args.scenarios.split(",")] if args.scenarios else \
        sorted({n for d in DESIGNS.values() for n in d["scenarios"]})
    args.seeds, args.overrides, args.steps, args.n_envs = list(REPORTING_SEEDS), {}, None, N_ENVS
    args.confirm_seeds = list(CONFIRM_SEEDS)
    if args.part == "learned_holm":
        text = learned_holm()
        if not args.no_publish:
            markdown.splice(ROOT / "docs" / "BENCHMARK.md", "bench:learned_holm", text)
        print(text)
        return
    if args.smoke:
        args.scenarios, args.overrides, args.steps = [SMOKE["scenario"]], SMOKE["overrides"], SMOKE["steps"]
        args.designs = list(DESIGNS)
        args.n_envs, args.train_seeds, args.seeds, args.no_publish = SMOKE["n_envs"], SMOKE["train_seeds"], \
            SMOKE["seeds"], True
    if args.smoke and args.part == "confirm":
        args.confirm_seeds = [s + 50_000 - 9000 for s in SMOKE["seeds"]]
    if args.part == "confirm":
        part_confirm(args)
        rec = build_confirm_record(args)
        rec.write(args.out / "confirm" / "record.json", written_by={
            "command": " ".join(["experiments/bench_rl.py", *(argv or sys.argv[1:])])})
        if rec.notes["confirm"] and not args.no_publish:
            rec.write(CONFIRM_RESULT)
            markdown.splice(ROOT / "docs" / "BENCHMARK.md", "bench:rl_confirm", confirm_table(rec))
        print(confirm_table(rec) if rec.notes["confirm"] else "nothing confirmed yet")
        return
    if args.part in ("train", "all"):
        part_train(args)
    if args.part in ("eval", "all"):
        part_eval(args)
    if args.part in ("report", "all"):
        rec = build_record(args)
        rec.write(args.out / "record.json", written_by={"command": " ".join(["experiments/bench_rl.py", *(argv or sys.argv[1:])])})
        if rec.notes["leaderboard"] and not args.no_publish:
            rec.write(RESULT)
            markdown.splice(ROOT / "docs" / "BENCHMARK.md", "bench:rl", table(rec) + "\n\n" + normalised_means(rec))
            plot(rec)
        plot(rec, args.out / CURVES_PNG.name)
        print(table(rec) + "\n\n" + normalised_means(rec) if rec.notes["leaderboard"] else "nothing evaluated yet")


if __name__ == "__main__":
    main()
