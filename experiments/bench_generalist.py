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

``--part transfer`` measures what transfers: each scenario's own ``set_es`` models (the weights
``experiments/bench_learned.py`` trained on it, kept as rows of ``experiments/results/bench_learned.json``) played on
every other scenario's seeds; with the diagonal (each model on its own scenario: bench_learned's rows) and the
generalists, the transfer table (:func:`fedsel_eval.generalist.transfer_table`).

    .venv/bin/python experiments/bench_generalist.py --part train --objectives rounds_to_target
    .venv/bin/python experiments/bench_generalist.py --part eval --on tuning --scenarios NoisyLabels,FreeRiders
    .venv/bin/python experiments/bench_generalist.py --part report --on tuning
    .venv/bin/python experiments/bench_generalist.py --part transfer --scenarios NoisyLabels,FreeRiders --n-envs 4
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedsel_env import families  # noqa: E402
from fedsel_env.bench import BENCH_SCENARIOS, normalised_score, scenario  # noqa: E402
from fedsel_eval import markdown, records  # noqa: E402
from fedsel_eval.generalist import (plot_family_curves, table, transfer_table, versus_table,  # noqa: E402
                                   weights_table)
from fedsel_eval.bench import reference_rows, run_scenario  # noqa: E402
from fedsel_eval.learned import best_heuristic  # noqa: E402
from fedsel_eval.stats import holm, t_interval  # noqa: E402

#: the family a generalist of each objective is trained on (fedsel_env/families.py)
FAMILY_OF = {"rounds_to_target": "MixedRounds", "time_to_target": "MixedTime", "acc_worst10": "MixedWorst10"}
#: design → its --algo (budget and settings: configs/<algo>.yml's family:<Family> entry)
DESIGNS = {"set_es": {"algo": "set_es"}}
TRAIN_SEEDS = (0, 1, 2)
#: the best single heuristic by mean normalised score over the 8 scenarios (docs/BENCHMARK.md): the goal's bar
BEST_SINGLE = "kcenter_cover"
#: bench_learned's record: each scenario's own set_es models (its "weights" rows) and their episodes ("learned")
LEARNED = ROOT / "experiments" / "results" / "bench_learned.json"
#: the scenarios whose own set_es models bench_learned never trained: trained by the front door instead,
#: ``train_agent.py --algo set_es --env <scenario> --seed <t>`` (budget: configs/set_es.yml's entry of the scenario),
#: in ``FRONT_DOOR_RUNS/set_es_<scenario>_seed<t>``; their weights kept in the record's ``source_weights`` note, their
#: diagonal (each model on its own scenario) played here
FRONT_DOOR_SOURCES = ("Large", "FMNISTControl")
FRONT_DOOR_RUNS = ROOT / "runs" / "train"
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
    """``<design>_gen_s<t>=<run folder>`` for each training seed of the scenario's objective's family: its run here,
    or where the run is not on this machine (``runs/`` does not outlive one), a playable folder of the weights the
    committed record keeps (its ``weights`` note; the deployed ``set_es.json``'s params), so a scenario whose
    episodes changed can be replayed without retraining."""
    objective = scenario(name).objective
    if objective not in FAMILY_OF:
        return []
    fam = FAMILY_OF[objective]
    kept = {} if args.smoke or not RESULT[args.on].is_file() else \
        records.load(RESULT[args.on])["notes"].get("weights", {}).get(fam, {})
    out = []
    for design in DESIGNS:
        folders = {}
        for t in args.train_seeds:
            f = run_folder(args.out, design, objective, t)
            if not trained(f) and str(t) in kept:
                f = weights_folder(args.out / "committed_weights" / design / fam / f"seed{t}", kept[str(t)],
                                   family=fam, training_seed=t,
                                   source=f"{RESULT[args.on].name}: the weights note of {design} on family:{fam}, "
                                          f"training seed {t}")
            elif not trained(f):
                break
            folders[t] = f
        else:
            out += [f"{design}_gen_s{t}={f}" for t, f in folders.items()]
    return out


def weights_folder(folder: Path, params: Mapping[str, float], **meta: Any) -> Path:
    """A run folder ``set_es:model=`` plays: ``set_es.json`` with ``params`` (and ``meta``), rewritten only when it
    differs (its files' hash is the policy's identity in the episode rows)."""
    text = json.dumps({"params": dict(params), **meta}, indent=1) + "\n"
    path = folder / "set_es.json"
    if not path.is_file() or path.read_text() != text:
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


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
                     {**sc.env_config(), **args.overrides}, n_envs=args.n_envs, log=lambda line: print(line, flush=True))


def per_scenario_models(out: Path, learned: Path = LEARNED, runs: Optional[Path] = FRONT_DOOR_RUNS,
                        kept: Optional[Mapping[str, Mapping[str, Mapping[str, float]]]] = None
                        ) -> Dict[str, Dict[int, Path]]:
    """Each scenario's own ``set_es`` models, by scenario and training seed, written as run folders under
    ``out/per_scenario`` that ``evaluate.py --policy`` and the bench play like any trained run (a folder is rewritten
    only when it differs): bench_learned's committed weights (its record's ``"weights"`` rows, design ``set_es``), and
    for :data:`FRONT_DOOR_SOURCES` the front door's finished runs in ``runs`` (``set_es_<scenario>_seed<t>``), or where
    a run is not on this machine, the weights ``kept`` by the committed record (its ``source_weights`` note); ``runs``
    None: none of the front door's (a smoke run)."""
    params: Dict[tuple, Dict[str, float]] = {}
    source: Dict[tuple, str] = {}
    for r in records.load(learned)["rows"]:
        if r.get("role") == "weights" and r.get("design") == "set_es":
            params.setdefault((r["scenario"], int(r["training_seed"])), {})[r["param"]] = r["value"]
            source[(r["scenario"], int(r["training_seed"]))] = learned.name
    for name in FRONT_DOOR_SOURCES if runs is not None else ():
        for t in TRAIN_SEEDS:
            run = runs / f"set_es_{name}_seed{t}"
            if trained(run):
                params[(name, t)] = json.loads((run / "set_es.json").read_text())["params"]
            elif str(t) in (kept or {}).get(name, {}):
                params[(name, t)] = dict(kept[name][str(t)])
            else:
                continue
            source[(name, t)] = f"train_agent.py --algo set_es --env {name} --seed {t}"
    found: Dict[str, Dict[int, Path]] = {}
    for (name, t), p in sorted(params.items()):
        how = (f"{source[(name, t)]}: the weights rows of set_es on {name}, training seed {t}"
               if source[(name, t)] == learned.name else source[(name, t)])
        found.setdefault(name, {})[t] = weights_folder(out / "per_scenario" / "set_es" / name / f"seed{t}", p,
                                                       scenario=name, training_seed=t, source=how)
    return found


def kept_source_weights(args: argparse.Namespace) -> Dict[str, Any]:
    """The committed record's weights of the front-door sources (none for a smoke run or a record not written)."""
    if args.smoke or not RESULT[args.on].is_file():
        return {}
    return {k: v for k, v in records.load(RESULT[args.on])["notes"].get("source_weights", {}).items()
            if k in FRONT_DOOR_SOURCES}


def part_transfer(args: argparse.Namespace) -> None:
    """Each scenario's own ``set_es`` models played on the other scenarios (``--scenarios``: the targets), beside
    random and the target's best heuristic, in the folder ``--part eval`` plays the generalists in (one set of
    reference episodes per scenario)."""
    ref = reference_rows()
    found = per_scenario_models(args.out, runs=None if args.smoke else FRONT_DOOR_RUNS,
                                kept=kept_source_weights(args))
    for name in args.scenarios:
        sc = scenario(name)
        policies = [f"set_es_from_{src}_s{t}={folder}" for src, by_seed in found.items()
                    if (src != name or src in FRONT_DOOR_SOURCES)  # the diagonal of bench_learned's: its episodes
                    and (args.sources is None or src in args.sources)
                    for t, folder in sorted(by_seed.items()) if t in args.train_seeds]
        seeds = args.seeds or list(sc.reporting_seeds)
        run_scenario(args.out / "eval_reporting" / name, sc, ["random", best_heuristic(name, ref), *policies], seeds,
                     {**sc.env_config(), **args.overrides}, n_envs=args.n_envs, log=lambda line: print(line, flush=True))


def family_references(folder: Path, cache: Path, policies: Sequence[str] = ("random", BEST_SINGLE)
                      ) -> Dict[str, Dict[int, float]]:
    """Reference lines for a learning curve: each of ``policies`` played on the curve's episodes of the run in
    ``folder`` (its ``config.json``: the family or scenario, the eval seeds, the env overrides) as the curve plays the
    search mean — the draw's env, reset with the draw's seed, the agent seeded with it. Kept in ``cache`` (a JSON
    file) by family or scenario, overrides, policy and seed, so a report plays each episode once."""
    from types import SimpleNamespace

    from agents.registry import make
    from agents.training.set_es import ESConfig
    from fedsel_env.rollout import env_for, scenario_objectives

    cfg = ESConfig(**json.loads((folder / "config.json").read_text()))
    objective = scenario(cfg.scenario).objective  # a family's or a scenario's
    done = json.loads(cache.read_text()) if cache.is_file() else {}
    key = json.dumps([cfg.scenario, cfg.env_overrides], sort_keys=True)
    out: Dict[str, Dict[int, float]] = {}
    for policy in policies:
        have = done.setdefault(key, {}).setdefault(policy, {})
        for seed in cfg.eval_seeds:
            if str(seed) not in have:
                values, _ = scenario_objectives(env_for(cfg.episode_env_config(int(seed))),
                                                SimpleNamespace(objective=objective),
                                                lambda spec, s=int(seed): make(policy, spec, seed=s), [int(seed)])
                have[str(seed)] = values[0]
                cache.parent.mkdir(parents=True, exist_ok=True)
                cache.write_text(json.dumps(done, indent=1))
        out[policy] = {int(sd): have[str(sd)] for sd in cfg.eval_seeds}
    return out


def add_family_curves(rec: records.Record, args: argparse.Namespace,
                      committed: Optional[Mapping[str, List[Dict[str, Any]]]] = None) -> None:
    """The learning curves into ``rec``: every curve point's episodes on the curve's seeds (role ``family_curve``:
    a generalist's, on its family's tuning draws; ``source_curve``: a front-door source's, on its scenario's tuning
    seeds), the reference policies' on the same seeds (``family_reference``, ``source_reference``: random and
    kcenter_cover, and for a source its scenario's best heuristic), and per curve the first and last points' means
    over training seeds. A curve none of whose runs is on this machine gets the committed record's rows
    (``committed``: by family or scenario, each with the chunk it came from)."""
    ref = reference_rows()
    made: List[Any] = []
    groups = [(fam, "family", objective, {t: run_folder(args.out, "set_es", objective, t) for t in args.train_seeds},
               ("random", BEST_SINGLE), f"set_es generalists' curve") for objective, fam in FAMILY_OF.items()]
    if not args.smoke:
        groups += [(name, "scenario", scenario(name).objective,
                    {t: FRONT_DOOR_RUNS / f"set_es_{name}_seed{t}" for t in args.train_seeds},
                    tuple(dict.fromkeys(("random", BEST_SINGLE, best_heuristic(name, ref)))),
                    f"set_es trained on {name}: curve") for name in FRONT_DOOR_SOURCES]
    def summarise(kind: str, field: str, key: str, objective: str, label: str) -> None:
        """The curve's summaries from its rows in ``rec``: each reference's mean, the first and last points'."""
        mine = [r for r in rec.rows if r.get(field) == key and r.get("role") in (f"{kind}_curve", f"{kind}_reference")]
        where = "on the curve's seeds" if kind == "source" else "on the tuning draws"
        for policy in dict.fromkeys(r["policy"] for r in mine if r["role"] == f"{kind}_reference"):
            rec.summarise(f"{key}: {policy} mean {objective} {where}", "mean", "value",
                          where={"role": f"{kind}_reference", field: key, "policy": policy})
        gens = [r["generation"] for r in mine if r["role"] == f"{kind}_curve"]
        for g in sorted({min(gens), max(gens)}):
            rec.summarise(f"{key}: {label} at generation {g}, mean over training seeds", "mean", "value",
                          where={"role": f"{kind}_curve", field: key, "generation": g})

    for key, field, objective, folders, policies, label in groups:
        kind = "family" if field == "family" else "source"
        folders = {t: f for t, f in folders.items() if trained(f)}
        if not folders and (committed or {}).get(key):
            for r in committed[key]:
                rec.carry(r, "", "runs not on this machine")
            summarise(kind, field, key, objective, label)
            continue
        if not folders:
            continue
        if not made:
            made.append(rec.chunk(records.git_provenance(ROOT, ("fedsel_env", "agents", "experiments")),
                                  note="the learning curves (the runs' progress.jsonl) and the reference policies' "
                                       "episodes on the same seeds, played here"))
        for t, f in sorted(folders.items()):
            cfg = json.loads((f / "config.json").read_text())
            for row in map(json.loads, (f / "progress.jsonl").read_text().splitlines()):
                if row.get("eval_values") is None:
                    continue
                for seed, v in zip(cfg["eval_seeds"], row["eval_values"]):
                    rec.add_row(made[0], role=f"{kind}_curve", **{field: key}, design="set_es", training_seed=t,
                                generation=row["generation"], seed=seed, objective=objective, value=v)
        cache = args.out / ("family_references.json" if kind == "family" else "source_references.json")
        for policy, by_seed in family_references(next(iter(folders.values())), cache, policies).items():
            for seed, v in by_seed.items():
                rec.add_row(made[0], role=f"{kind}_reference", **{field: key}, policy=policy, seed=seed,
                            objective=objective, value=v)
        summarise(kind, field, key, objective, label)


def _role(policy: str, best: str) -> tuple:
    """(role, design, training seed, source) of an episode row's policy label in an eval folder."""
    if "_gen_s" in policy:
        design, _, t = policy.rpartition("_gen_s")
        return "generalist", design, int(t), None
    if policy.startswith("set_es_from_"):
        source, _, t = policy[len("set_es_from_"):].rpartition("_s")
        return "transfer", "set_es", int(t), source
    return {"random": "random", best: "best_heuristic"}.get(policy), policy, None, None


def committed_rows(args: argparse.Namespace) -> Dict[str, Any]:
    """What the committed record holds, for a report on a machine whose ``runs/`` lacks some of it (``runs/`` does not
    outlive a machine; the track grows over sessions): its episode rows by scenario, keyed as the eval folders'
    episodes are (policy label, seed), each with the committed chunk it came from; its learning-curve rows and its
    ``weights`` and ``training`` notes by family. Nothing for a smoke run or a record not written yet."""
    out: Dict[str, Any] = {"episodes": {}, "curves": {}, "weights": {}, "training": {}}
    if args.smoke or not RESULT[args.on].is_file():
        return out
    committed = records.load(RESULT[args.on])
    for r in records.carried_rows(committed):
        role = r.get("role")
        if role in ("family_curve", "family_reference"):
            out["curves"].setdefault(r["family"], []).append(r)
            continue
        if role in ("source_curve", "source_reference"):
            out["curves"].setdefault(r["scenario"], []).append(r)
            continue
        if role == "generalist":
            label = f"{r['policy']}_gen_s{r['training_seed']}"
        elif role == "transfer" and (r["source"] != r["scenario"] or r["source"] in FRONT_DOOR_SOURCES):
            # bench_learned's diagonal is read from its record
            label = f"set_es_from_{r['source']}_s{r['training_seed']}"
        elif role in ("random", "best_heuristic"):
            label = r["policy"]
        else:
            continue
        out["episodes"].setdefault(r["scenario"], {})[(label, r["seed"])] = r
    for key in ("weights", "training", "source_training"):
        out[key] = committed["notes"].get(key, {})
    return out


def build_record(args: argparse.Namespace) -> records.Record:
    import numpy as np

    ref = reference_rows()
    rec = records.Record(f"bench_generalist{'' if args.on == 'reporting' else '_tuning'}",
                         config={"designs": DESIGNS, "families": FAMILY_OF, "train_seeds": list(args.train_seeds),
                                 "on": args.on})
    chunk = rec.chunk(records.git_provenance(ROOT, ("fedsel_env", "agents", "fedsel_eval", "experiments")),
                      note=f"episodes played by --part eval and --part transfer --on {args.on}, gathered here")
    learned = records.load(LEARNED) if args.on == "reporting" and LEARNED.is_file() else {"rows": []}
    old = committed_rows(args)
    own = None
    entries, cells = [], []
    norm: Dict[str, Dict[str, Dict[int, float]]] = {}  # design → scenario → training seed → normalised score
    single_norm: Dict[str, float] = {}  # scenario → the best single heuristic's normalised score
    for name in args.scenarios:
        path = args.out / f"eval_{args.on}" / name / "episodes.jsonl"
        theirs = old["episodes"].get(name, {})
        if not path.is_file() and not theirs:
            continue
        sc, best = scenario(name), best_heuristic(name, ref)
        rows = {(r["policy"], r["seed"]): r for r in map(json.loads, path.read_text().splitlines()) if r} \
            if path.is_file() else {}
        # the committed rows of the models (and references) not played here, where the committed random episodes are
        # the ones played here (the same federations and code paths: their pairing holds)
        here_random = {seed: r["value"] for (p, seed), r in rows.items() if p == "random"}
        if any(theirs.get(("random", seed), {}).get("value", v) != v for seed, v in here_random.items()):
            print(f"{name}: the committed random episodes differ from the ones played here: nothing of the committed "
                  f"record is carried for it", flush=True)
            theirs = {}
        played = {_role(p, best) for p, _s in rows}  # (role, design, training seed, source): a model played here
        rows.update({k: r for k, r in theirs.items() if _role(k[0], best) not in played})
        seeds = sorted({seed for p, seed in rows if p == "random"})
        # a model's episodes count once every training seed has played every seed (a run still playing: left out)
        groups: Dict[tuple, set] = {}
        for (pol, seed) in rows:
            role, design, t, source = _role(pol, best)
            groups.setdefault((role, design, source), set()).add((t, seed))
        partial = {g for g, have in groups.items() if g[0] in ("generalist", "transfer")
                   and not {(t, sd) for t in args.train_seeds for sd in seeds} <= have}
        for g in sorted(partial, key=str):
            print(f"{name}: {g[1]}{' from ' + g[2] if g[2] else ''} ({g[0]}) has not played every training seed × "
                  f"seed yet: left out of the record", flush=True)
        mine = {seed: r["value"] for (p, seed), r in rows.items() if p == "random"}

        def differing(other: Sequence[Mapping[str, Any]]) -> int:
            """How many of another record's random episodes on these seeds are not these (all of them when it has
            none). Where none differ, its other rows on these seeds are episodes of the same federations (its
            config's hash may differ by a field that changes no trajectory)."""
            theirs = {r["seed"]: r["value"] for r in other if r["scenario"] == name and r["policy"] == "random"}
            return sum(theirs.get(seed) != v for seed, v in mine.items()) if mine else len(seeds)

        for (pol, seed), r in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            role, design, t, source = _role(pol, best)
            if role is None or (role in ("transfer", "generalist") and t not in args.train_seeds) or \
                    (role, design, source) in partial or seed not in seeds:
                continue
            rec.add_row(rec.chunk_of(r, chunk), scenario=name, policy=design, training_seed=t,
                        generalist=role == "generalist",
                        family=FAMILY_OF.get(sc.objective) if role == "generalist" else None, source=source,
                        role=role, seed=seed, objective=sc.objective, value=r["value"], censored=r["censored"],
                        rounds=r["rounds"], config_sha=r["config_sha"])
        # the diagonal: the scenario's own set_es models on its reporting seeds (bench_learned's episodes)
        diag = [r for r in learned["rows"] if r.get("role") == "learned" and r.get("policy") == "set_es"
                and r["scenario"] == name and r["seed"] in seeds and r["training_seed"] in args.train_seeds]
        if differing([r for r in learned["rows"] if r.get("role") == "random"]):
            diag = []  # bench_learned played other episodes (a smoke run's shorter ones here, say)
        if diag and any(_role(p, best)[0] == "transfer" for p, _s in rows):
            if own is None:
                c = next(c for c in learned["chunks"] if c["id"] == diag[0]["chunk"])
                own = rec.chunk({"commit": c["commit"], "dirty": c.get("dirty")},
                                note=f"carried: {LEARNED.name}'s set_es episodes on the scenario each model was "
                                     f"trained on (its rows of role 'learned')")
            for r in diag:
                rec.add_row(own, scenario=name, policy="set_es", training_seed=r["training_seed"], generalist=False,
                            family=None, source=name, role="transfer", seed=r["seed"], objective=sc.objective,
                            value=r["value"], censored=r["censored"], rounds=r["rounds"], config_sha=r["config_sha"])
        # the reference's oracle, where its random episodes are these but for at most a tenth (none for a smoke
        # run's shorter episodes); how many differ is kept in the entry: the oracle was played by the reference's code
        stale = differing(ref)
        oracle = [r["value"] for r in ref if r["scenario"] == name and r["policy"] == "lookahead" and r["seed"] in seeds
                  ] if stale <= len(seeds) // 10 else []
        oracle_mean = float(np.mean(oracle)) if oracle else math.nan
        ep = {"scenario": name}
        mean = {p: rec.summarise(f"{name}: {p} mean {sc.objective}", "mean", "value", where={**ep, "role": role})
                for p, role in (("random", "random"), (best, "best_heuristic"))}

        def entry(label: str, where: Dict[str, Any], **fields: Any) -> Dict[str, Any]:
            m = rec.summarise(f"{name}: {label} mean {sc.objective}", "mean", "value", where=where)
            e = {**fields, "scenario": name, "objective": sc.objective, "lower_is_better": sc.lower_is_better,
                 "best_heuristic": best, "mean": m, "reference_random_episodes_differing": stale,
                 "normalised": normalised_score(mean["random"], oracle_mean, m) if oracle else None,
                 "best_heuristic_normalised": normalised_score(mean["random"], oracle_mean, mean[best]) if oracle
                 else None}
            for other, tag in (("random", "random"), (best, "best_heuristic")):
                rec.compare(f"{name}: {label} − {tag} ({other})", where, {**ep, "role": tag}, tag, e)
            return e

        for design in sorted({r["policy"] for r in rec.rows if r.get("role") == "generalist" and r["scenario"] == name}):
            entries.append(entry(f"{design} (generalist)", {**ep, "role": "generalist", "policy": design},
                                 generalist=True, design=design, family=FAMILY_OF[sc.objective]))
            if oracle:  # each training seed's normalised score, and the best single heuristic's on these episodes
                norm.setdefault(design, {})[name] = {
                    t: normalised_score(mean["random"], oracle_mean, float(np.mean(
                        [r["value"] for r in rec.rows if r.get("role") == "generalist" and r["scenario"] == name
                         and r["policy"] == design and r["training_seed"] == t]))) for t in args.train_seeds}
                single = [r["value"] for r in ref if r["scenario"] == name and r["policy"] == BEST_SINGLE
                          and r["seed"] in seeds]
                single_norm[name] = normalised_score(mean["random"], oracle_mean, float(np.mean(single)))
        for source in dict.fromkeys(r["source"] for r in rec.rows if r.get("role") == "transfer" and r["scenario"] == name):
            cells.append(entry(f"set_es trained on {source}", {**ep, "role": "transfer", "source": source},
                               generalist=False, design="set_es", source=source))
    family = [(x, tag) for x in [*entries, *cells] for tag in ("random", "best_heuristic")]
    for (x, tag), p in zip(family, holm([x[f"p_vs_{tag}"] for x, tag in family])):
        x[f"p_holm_vs_{tag}"] = p
    clean = lambda e: {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in e.items()}  # noqa: E731
    rec.notes["leaderboard"] = [clean(e) for e in entries]
    rec.notes["transfer"] = [clean(e) for e in cells] + [clean({**e, "source": "generalist"}) for e in entries]
    rec.notes["holm_family"] = len(family)
    add_family_curves(rec, args, old["curves"])
    rec.notes["mean_normalised"] = {}
    for design, by_sc in norm.items():  # the goal's figure: the mean over the scenarios, a CI across training seeds
        per_seed = [float(np.mean([by_sc[n][t] for n in by_sc])) for t in args.train_seeds]
        iv = t_interval(per_seed)
        rec.notes["mean_normalised"][design] = {
            "scenarios": list(by_sc), "mean": iv.mean, "ci_across": [iv.lo, iv.hi], "per_training_seed": per_seed,
            BEST_SINGLE: float(np.mean([single_norm[n] for n in by_sc]))}
    # what each generalist leans on: set_es's weights by token column (standardised columns, so comparable)
    # and what each one's training cost (its summary.json; the goal allows 60 minutes a seed on this machine): a run
    # not on this machine gives the committed record's figures
    def per_seed(o: str, read: Any, key: str) -> Dict[str, Any]:
        f = {str(t): run_folder(args.out, "set_es", o, t) for t in args.train_seeds}
        return {t: read(f[t]) if trained(f[t]) else old[key][FAMILY_OF[o]][t] for t in f
                if trained(f[t]) or t in old[key].get(FAMILY_OF[o], {})}

    rec.notes["weights"] = {FAMILY_OF[o]: per_seed(o, lambda f: json.loads((f / "set_es.json").read_text())["params"],
                                                   "weights") for o in FAMILY_OF}
    rec.notes["training"] = {FAMILY_OF[o]: per_seed(o, lambda f: {k: json.loads((f / "summary.json").read_text())[k]
                                                                  for k in ("train_seconds", "env_rounds",
                                                                            "training_episodes")}, "training")
                             for o in FAMILY_OF}
    # and each per-scenario model that played in the transfer table
    sources = {e["source"] for e in cells}
    rec.notes["source_weights"] = {
        src: {str(t): json.loads((f / "set_es.json").read_text())["params"] for t, f in sorted(by_seed.items())
              if t in args.train_seeds}
        for src, by_seed in (per_scenario_models(args.out, runs=None if args.smoke else FRONT_DOOR_RUNS,
                                                 kept=kept_source_weights(args)).items() if sources else ())
        if src in sources}
    # what the front door's per-scenario runs cost (their summary.json; a run not on this machine: the committed one's)
    rec.notes["source_training"] = {}
    for src in (s for s in FRONT_DOOR_SOURCES if s in sources):
        for t in args.train_seeds:
            run = FRONT_DOOR_RUNS / f"set_es_{src}_seed{t}"
            got = {k: json.loads((run / "summary.json").read_text())[k] for k in
                   ("train_seconds", "env_rounds", "training_episodes")} if trained(run) else \
                old["source_training"].get(src, {}).get(str(t))
            if got is not None:
                rec.notes["source_training"].setdefault(src, {})[str(t)] = got
    return rec


def main(argv: Optional[Sequence[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=("train", "eval", "transfer", "report", "all", "tables"), default="all",
                   help="tables: the transfer tables spliced again from the committed records (no episode played; "
                        "after bench_learned's record changes)")
    p.add_argument("--objectives", default=",".join(FAMILY_OF), help="comma-separated objectives to train for")
    p.add_argument("--scenarios", default=",".join(sc.name for sc in BENCH_SCENARIOS))
    p.add_argument("--on", choices=("reporting", "tuning"), default="reporting",
                   help="the scenarios' reporting seeds (the track) or their tuning seeds (a probe, its own record)")
    p.add_argument("--train-seeds", type=int, nargs="+", default=list(TRAIN_SEEDS))
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_generalist")
    p.add_argument("--sources", default=None,
                   help="--part transfer: play only the models trained on these scenarios (comma-separated; default "
                        "all); the report carries the committed record's rows of the others")
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="--part eval and transfer: play only these of the scenarios' seeds (to split the episodes "
                        "over processes, each with its own --out; the report reads one folder)")
    p.add_argument("--n-envs", type=int, default=1, help="--part eval and transfer: episodes played at once (the vector env; the same rows)")
    p.add_argument("--no-publish", action="store_true", help="write the record to --out only")
    p.add_argument("--smoke", action="store_true", help="tiny: " + json.dumps(SMOKE) + "; publishes nothing")
    args = p.parse_args(argv)
    args.objectives = [o for o in args.objectives.split(",") if o]
    bad = [o for o in args.objectives if o not in FAMILY_OF]
    if bad:
        p.error(f"--objectives {bad}: expected some of {list(FAMILY_OF)}")
    args.scenarios = [scenario(s).name for s in args.scenarios.split(",") if s]
    args.sources = None if args.sources is None else [scenario(s).name for s in args.sources.split(",") if s]
    args.hyperparams, args.env_kwargs, args.overrides = [], [], {}
    if args.smoke:
        args.objectives, args.scenarios, args.hyperparams = SMOKE["objectives"], SMOKE["scenarios"], SMOKE["hyperparams"]
        args.env_kwargs, args.overrides, args.train_seeds = SMOKE["env_kwargs"], SMOKE["overrides"], SMOKE["train_seeds"]
        args.seeds, args.no_publish, args.on = SMOKE["seeds"], True, "reporting"
    if args.part == "tables":  # bench_learned's leaderboard is a column of the versus table
        data = records.load(RESULT["reporting"])
        rec = records.Record(data["experiment"], data["config"], notes=data["notes"])
        rec.rows = data["rows"]
        text = transfer_table(rec) + "\n\n" + versus_table(rec, records.load(LEARNED))
        if not args.no_publish:
            markdown.splice(ROOT / "docs" / "BENCHMARK.md", "bench:transfer", text)
        print(text)
        return
    if args.part in ("train", "all"):
        part_train(args)
    if args.part in ("eval", "all"):
        part_eval(args)
    if args.part in ("transfer", "all"):
        part_transfer(args)
    if args.part in ("report", "all"):
        rec = build_record(args)
        rec.write(args.out / f"record_{args.on}.json",
                  written_by={"command": " ".join(["experiments/bench_generalist.py", *(argv or sys.argv[1:])])})
        text = {"bench:generalist": table(rec) + "\n\nThe generalists' weights by token column:\n\n" + weights_table(rec),
                "bench:transfer": transfer_table(rec) + "\n\n" + versus_table(rec, records.load(LEARNED))}
        if (rec.notes["leaderboard"] or rec.notes["transfer"]) and not args.no_publish:
            rec.write(RESULT[args.on], written_by={"command": " ".join(["experiments/bench_generalist.py",
                                                                        *(argv or sys.argv[1:])])})
            if args.on == "reporting":
                for marker in (m for m, key in (("bench:generalist", "leaderboard"), ("bench:transfer", "transfer"))
                               if rec.notes[key]):
                    markdown.splice(ROOT / "docs" / "BENCHMARK.md", marker, text[marker])
                if any(r.get("role") == "family_curve" for r in rec.rows):
                    plot_family_curves(rec, ROOT / "docs" / "img" / "generalist_curves.png")
        if args.no_publish and any(r.get("role") == "family_curve" for r in rec.rows):
            plot_family_curves(rec, args.out / "generalist_curves.png")
        print("\n\n".join(text.values()) if rec.notes["transfer"] else "nothing evaluated yet")


if __name__ == "__main__":
    main()
