"""The record of the learned designs on FedSelect-Bench (issue #29; ``experiments/bench_learned.py`` writes it): where
the trained models' runs lie, whether they are finished, and the record built from their reporting episodes.

A design's run of a scenario and training seed is ``<out>/<design>/<scenario>/seed<t>`` (trained by the front door,
``agents.training.trainers``, or ``train_agent.py``); :func:`build_record` gathers every reporting episode of every
model with random's, the best heuristic's and the oracle's (common random numbers: the same seeds), the paired
differences (Student's t, across seeds and across training seeds), the learning curves, the ES weights, and the
2 × N, confirmation, fresh-seed and oracle-picks analyses; its summaries are recomputable from its rows
(``python -m fedsel_eval.recompute``; docs/RECORDS.md, the metrics of docs/SPEC.md §5). The tables and figures drawn
from it are :mod:`fedsel_eval.learned_tables`.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from fedsel_env.bench import TUNING_SEEDS, normalised_score, scenario

from . import records
from .bench import reference_rows

#: the learned designs: ``set_distill`` (DAgger from the oracle) and ``pc_dqn`` (the per-client Double DQN of
#: issue #19, FAVOR+'s one-client 1/K step, the env's FAVOR reward, trained on the batched vector env)
DESIGNS = ("set_distill", "pc_dqn", "set_distill_cover", "set_es", "set_es_q", "pc_ppo", "favor_plus")
#: the CMA-ES-searched designs (``agents/training/set_es.py``); ``set_es_q`` asks 2K clients their loss each round
ES_DESIGNS = ("set_es", "set_es_q")
#: the DAgger-trained designs (``agents/training/set_distill.py``); ``set_distill_cover`` is its cover-aware variant
DISTILLED = ("set_distill", "set_distill_cover")
#: the per-client designs played at 2 × N by ``--part larger_n`` (their weights do not depend on N; FAVOR+'s flat
#: Q-network does, so it is not among them)
LARGER_N_DESIGNS = ("set_distill", "set_es", "set_es_q", "pc_dqn", "pc_ppo")
#: seeds no version of any learned design had been reported on: set_es's wins re-played there (``--part confirm``),
#: beside random and the best heuristic (none is a tuning, reporting or training federation: checked)
CONFIRM_SEEDS = tuple(range(20_000, 20_030))
#: the seed sets played without the oracle after the reporting rows were in: role → (seeds, how the record's
#: summaries name them, the designs played there). ``confirm``: the ES designs' wins re-played (``--part confirm``);
#: ``fresh``: seeds no version of any design had been played on before ``set_es_q`` was reported (``--part
#: fresh``), for ``set_es_q``, which was built after the confirmation seeds had been used for ``set_es``
CONFIRM_SETS: Dict[str, tuple] = {
    "confirm": (CONFIRM_SEEDS, "on the confirmation seeds", ES_DESIGNS),
    "fresh": (tuple(range(30_000, 30_030)), "on the fresh seeds 30000-30029", ("set_es_q",))}
#: the reporting seeds ``--part picks`` replays with the oracle beside the learned policy (the first of them)
PICK_SEEDS = 10
#: the designs ``train_agent.py`` trains with Stable-Baselines3: design → (its ``--algo``, whether a step is one client
#: (K a round) or a whole round)
SB3_DESIGNS: Dict[str, tuple] = {"pc_dqn": ("pc_dqn", True), "pc_ppo": ("pc_ppo", False), "favor_plus": ("favor+", True)}


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


def run_folder(out: Path, sc_name: str, seed: int, design: str = "set_distill") -> Path:
    return out / design / sc_name / f"seed{seed}"


def training_summary(out: Path, sc_name: str, seed: int, design: str) -> Optional[Dict[str, Any]]:
    """A finished training run's cost (None while it is not finished): wall seconds, env rounds, oracle rounds."""
    folder = run_folder(out, sc_name, seed, design)
    if design in DISTILLED or design in ES_DESIGNS:
        path = folder / "summary.json"
        summ = json.loads(path.read_text()) if path.is_file() else None
        return summ if summ and summ["complete"] else None
    import yaml

    path = folder / "summary.yaml"
    if not path.is_file():
        return None
    summ = yaml.safe_load(path.read_text())
    args = yaml.safe_load((folder / "args.yaml").read_text())
    if summ["num_timesteps"] < int(args["n_timesteps"]):
        return None
    k = scenario(sc_name).config["clients_per_round"] if SB3_DESIGNS[design][1] else 1
    return {"train_seconds": float(summ["train_seconds_this_call"]), "env_rounds": int(summ["num_timesteps"]) // k,
            "oracle_rounds": 0, "episodes_done": None, "env_steps": int(summ["num_timesteps"])}


def policy_text(args: Any, name: str, seed: int, design: str) -> str:
    folder = run_folder(args.out, name, seed, design)
    if design in ES_DESIGNS:
        return f"{design}_s{seed}=set_es:model={folder}"
    return f"{design}_s{seed}=" + (f"set_distill:model={folder}" if design in DISTILLED else str(folder))


def trained_designs(args: Any, name: str) -> List[str]:
    """The designs whose every training seed has finished on ``name``."""
    return [d for d in DESIGNS if all(training_summary(args.out, name, s, d) for s in args.train_seeds)]


def larger_config(name: str, factor: int = 2) -> Dict[str, Any]:
    """The scenario at ``factor`` × N (a per-client list such as Churn's availability repeated), keeping the PCA
    width the models were trained with (no weight of theirs depends on N, but the token's width does)."""
    from fedsel_env.config import DEFAULT_CONFIG
    from fedsel_env.spec import SelectionSpec

    cfg = scenario(name).env_config()
    d = SelectionSpec.pca_width({**DEFAULT_CONFIG, **cfg})
    cfg["num_clients"] = factor * int(cfg["num_clients"])
    system = dict(cfg.get("system", {}))
    if isinstance(system.get("availability"), list):
        system["availability"] = list(system["availability"]) * factor
        cfg["system"] = system
    cfg["pca_components"] = d
    return cfg


def picks_episode(env: Any, sc: Any, folder: Path, seed: int) -> Dict[str, Any]:
    """One episode of an ES model (``folder``) on reporting seed ``seed``, the oracle asked at every round of it what
    it would pick from the same state (``LookaheadOracle.plan`` with the learned pick among its candidates; the
    federation is put back after each candidate, so the episode is the model's own). Per round: the share of the
    oracle's K clients the model also picked, whether the model's pick scored best among the candidates, the share
    of candidates that scored better, and the oracle's picks' mean standardised token minus the model's."""
    from agents.lookahead import LookaheadOracle
    from agents.set_es import SetESAgent, standardise, token_names

    obs, _ = env.reset(seed=int(seed))
    spec = env.selection_spec
    agent = SetESAgent(spec, model=str(folder))
    oracle = LookaheadOracle(spec, seed=int(seed), objective=sc.objective)
    for a in (agent, oracle):
        a.bind(env)
        a.reset(obs)
    overlap, best, worse_than, dz = [], [], [], []
    done = False
    while not done:
        pick = agent.select(obs)
        avail = spec.feature(obs, "available") > 0.5
        z = standardise(np.concatenate([np.asarray(obs["clients"], np.float64), agent.tracker.features(obs)], axis=1),
                        avail)
        cands, scores = oracle.plan(obs, extra=[pick])
        mine = next(i for i, c in enumerate(cands) if set(c.tolist()) == set(pick.tolist()))
        theirs = cands[int(np.argmax(scores))]
        overlap.append(len(set(pick.tolist()) & set(theirs.tolist())) / max(len(theirs), 1))
        best.append(float(scores[mine] >= scores.max()))
        worse_than.append(float(np.mean(np.delete(scores, mine) > scores[mine])) if len(cands) > 1 else 0.0)
        dz.append(z[theirs].mean(axis=0) - z[pick].mean(axis=0))
        obs, _, term, trunc, _ = env.step(agent.to_action(pick))
        done = term or trunc
    return {"rounds": len(overlap), "overlap": float(np.mean(overlap)), "learned_best": float(np.mean(best)),
            "candidates_better": float(np.mean(worse_than)),
            "oracle_minus_learned": dict(zip(token_names(spec), np.mean(dz, axis=0).tolist()))}


#: the roles of a scenario's reporting episodes (the leaderboard's rows)
EPISODE_ROLES = ("learned", "random", "lookahead", "best_heuristic")


def design_of(row: Mapping[str, Any]) -> Optional[str]:
    """The learned design a record row belongs to (its cell of the leaderboard), or None for a row of random, a
    heuristic or the oracle."""
    return row.get("design") or (row.get("policy") if row.get("training_seed") is not None else None)


def _carry_rows(rec: records.Record, chunk: str, rows: Sequence[Mapping[str, Any]], designs: Sequence[str],
                references: bool) -> None:
    """Carry the committed ``rows`` of ``designs`` (and, with ``references``, those of no design: random's, the
    heuristics', the oracle's) into ``rec``."""
    for r in rows:
        d = design_of(r)
        if d in designs or (references and d is None):
            rec.carry(r, chunk, "its models were not played on this machine")


def add_picks(rec: records.Record, args: Any, chunk: str, old: Optional[Mapping] = None,
              carried: Optional[Mapping] = None) -> None:
    """Rows and summaries of ``part_picks`` (each scenario and design whose episodes are all there; the committed
    ``old`` rows of a design whose leaderboard cell is ``carried``)."""
    old, carried = old or {}, carried or {}
    for name in args.scenarios:
        mine = [r for r in old.get(name, ()) if r.get("role") in ("picks", "picks_token")]
        for design in ES_DESIGNS:
            path = args.out / "picks" / name / f"{design}.jsonl"
            rows = {(r["training_seed"], r["seed"]): r for r in map(json.loads, path.read_text().splitlines())} \
                if path.is_file() else {}
            want = [(t, s) for t in args.train_seeds for s in args.seeds[:PICK_SEEDS]]
            w = {"scenario": name, "design": design}
            if rows and all(k in rows for k in want):
                for key in want:
                    r = rows[key]
                    rec.add_row(chunk, **w, role="picks", training_seed=key[0], seed=key[1], rounds=r["rounds"],
                                overlap=r["overlap"], learned_best=r["learned_best"],
                                candidates_better=r["candidates_better"])
                    for feat, v in r["oracle_minus_learned"].items():
                        rec.add_row(chunk, **w, role="picks_token", training_seed=key[0], seed=key[1], param=feat,
                                    value=v)
                feats = list(rows[want[0]]["oracle_minus_learned"])
            elif design in carried.get(name, ()) and any(r["design"] == design for r in mine):
                _carry_rows(rec, chunk, mine, (design,), False)
                feats = list(dict.fromkeys(r["param"] for r in mine if r["design"] == design
                                           and r["role"] == "picks_token"))
            else:
                continue
            for fld, what in (("overlap", "share of the oracle's clients it also picks"),
                              ("learned_best", "share of rounds its pick is the oracle's best candidate"),
                              ("candidates_better", "share of the oracle's candidates that score better than its pick")):
                rec.summarise(f"{name}: {design} vs the oracle, {what}", "t_interval", fld, where={**w, "role": "picks"})
            for feat in feats:
                rec.summarise(f"{name}: {design} vs the oracle, oracle − learned mean standardised {feat}", "t_interval",
                              "value", where={**w, "role": "picks_token", "param": feat})


def _add_side_episodes(rec: records.Record, args: Any, chunk: str, name: str, best: str, role: str, path: Path,
                       seeds: Sequence[int], candidates: Sequence[str], old: Optional[Mapping],
                       carried: Optional[Mapping], **fields: Any) -> List[str]:
    """The rows of one of the parts played beside the leaderboard (``larger_n``, ``confirm``, ``fresh``) on ``name``:
    random's, the best heuristic's (``best``) and every design's of ``candidates`` whose episodes are all in ``path``,
    and the committed ``old`` rows of a design whose leaderboard cell is ``carried`` (never those of a model trained
    again here: they are another model's). Returns the designs reported, in ``candidates``' order."""
    old, carried = old or {}, carried or {}
    rows = {(r["policy"], r["seed"]): r for r in map(json.loads, path.read_text().splitlines())} \
        if path.is_file() else {}
    refs_here = all((p, s) in rows for p in ("random", best) for s in seeds)
    here = [d for d in candidates
            if refs_here and all((f"{d}_s{t}", s) in rows for t in args.train_seeds for s in seeds)]
    mine = [r for r in old.get(name, ()) if r.get("role") == role]
    kept = [d for d in candidates if d not in here and d in carried.get(name, ())
            and any(design_of(r) == d for r in mine)]
    if not here and not kept:
        return []
    if here:
        for p in ["random", best, *[f"{d}_s{t}" for d in here for t in args.train_seeds]]:
            design = p.rsplit("_s", 1)[0] if p.rsplit("_s", 1)[0] in here else None
            for s in seeds:
                r = rows[(p, s)]
                rec.add_row(chunk, scenario=name, **fields, role=role, policy=design or p,
                            training_seed=int(p.rsplit("_s", 1)[1]) if design else None, seed=s,
                            objective=r["objective"], value=r["value"], censored=r["censored"],
                            config_sha=r["config_sha"])
    _carry_rows(rec, chunk, mine, kept, references=not here)
    return [d for d in candidates if d in here or d in kept]


def add_confirm(rec: records.Record, args: Any, chunk: str, role: str = "confirm", old: Optional[Mapping] = None,
                carried: Optional[Mapping] = None) -> None:
    """Rows and paired differences of ``part_confirm``'s episodes for ``role`` (scenarios where all of them are
    there; the committed ``old`` rows of a design whose leaderboard cell is ``carried``)."""
    seeds, label, candidates = CONFIRM_SETS[role]
    ref = reference_rows()
    for name in args.scenarios:
        best = best_heuristic(name, ref) if not args.smoke else "pow_d"
        designs = _add_side_episodes(rec, args, chunk, name, best, role, args.out / role / name / "episodes.jsonl",
                                     seeds, candidates, old, carried)
        if not designs:
            continue
        w = {"scenario": name, "role": role}
        for design in designs:
            for ref_pol in ("random", best):
                rec.summarise(f"{name} {label}: {design} − {ref_pol}, paired by seed", "paired_t",
                              "value", where={**w, "policy": design}, minus={**w, "policy": ref_pol})
        for p in ("random", best, *designs):
            rec.summarise(f"{name} {label}: {p} mean {scenario(name).objective}", "mean", "value",
                          where={**w, "policy": p})


def add_larger_n(rec: records.Record, args: Any, chunk: str, old: Optional[Mapping] = None,
                 carried: Optional[Mapping] = None) -> None:
    """Rows and paired differences of ``part_larger_n``'s episodes (each scenario and design whose episodes are all
    there; the committed ``old`` rows of a design whose leaderboard cell is ``carried``)."""
    ref = reference_rows()
    for name in args.scenarios:
        best = best_heuristic(name, ref) if not args.smoke else "pow_d"
        n = larger_config(name)["num_clients"]
        designs = _add_side_episodes(rec, args, chunk, name, best, "larger_n",
                                     args.out / "eval_2n" / name / "episodes.jsonl", args.seeds, LARGER_N_DESIGNS, old,
                                     carried, num_clients=n)
        if not designs:
            continue
        w = {"scenario": name, "role": "larger_n"}
        for design in designs:
            for ref_pol in ("random", best):
                rec.summarise(f"{name} at N = {n}: {design} − {ref_pol}, paired by seed", "paired_t", "value",
                              where={**w, "policy": design}, minus={**w, "policy": ref_pol})
        for p in ("random", best, *designs):
            rec.summarise(f"{name} at N = {n}: {p} mean {scenario(name).objective}", "mean", "value",
                          where={**w, "policy": p})


def _replay_check(committed_rows: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]], design: str,
                  provenance: Mapping[str, Any]) -> Dict[str, Any]:
    """How a design's reporting episodes played here compare with the committed record's of the same cell: how many
    of its (training seed, seed) values are equal (the front door reproduces the committed model where all are)."""
    old = {(r["training_seed"], r["seed"]): r["value"] for r in committed_rows
           if r.get("role") == "learned" and r["policy"] == design}
    new = {(r["training_seed"], r["seed"]): r["value"] for r in rows
           if r.get("role") == "learned" and r["policy"] == design}
    commits = sorted({r["_carried_from"]["commit"] for r in committed_rows
                      if r.get("role") == "learned" and r["policy"] == design})
    return {"played_at": provenance.get("commit"), "committed_rows_at": commits, "rows": len(new),
            "equal_to_committed": sum(1 for k, v in new.items() if k in old and old[k] == v)}


def build_record(args: Any, budgets: Mapping[str, Any], root: Path,
                 code_paths: Sequence[str] = ("fedsel_env", "agents", "fedsel_eval"),
                 committed: Optional[Mapping[str, Any]] = None) -> records.Record:
    """The record: every reporting episode of every model, and of random, the best heuristic and the oracle.

    A report grows the record over sessions (``runs/`` does not outlive a machine, and re-training every design
    takes many hours): a leaderboard cell (scenario, design) whose three models are trained and played here is
    built from ``runs/``; every other cell of the ``committed`` record is carried from it, row for row (its
    episodes, training cost, learning curve, weights, 2 × N, confirmation and picks rows, in chunks that keep the
    commits they were computed at), and its summaries are computed again from those rows. A cell played here whose
    committed rows are of other models (trained at other commits or machines) replaces them; ``notes.front_door``
    says, per cell played here, how many of its rows equal the committed ones (and, for a cell played again after
    its re-record, under ``first``, how its first re-record compared with the rows it replaced).

    :param args: the run (``experiments/bench_learned.py``'s arguments): ``out``, ``scenarios``, ``train_seeds``,
        ``seeds``, ``smoke``, ``overrides``.
    :param budgets: the designs' training budgets (the record's config; ``set_distill_episodes`` by scenario).
    :param root: the repository, whose commit the record's chunk names.
    :param code_paths: the paths under ``root`` whose uncommitted changes mark the chunk dirty (the caller adds its
        own script's folder).
    :param committed: the committed record (:func:`records.load`), whose cells not played here are carried; None
        carries nothing (a smoke run).
    """
    ref = reference_rows()
    rec = records.Record("bench_learned", config={
        "designs": list(DESIGNS), "train_seeds": list(args.train_seeds), "reporting_seeds": list(args.seeds),
        **budgets, "overrides": dict(args.overrides)})
    provenance = records.git_provenance(root, tuple(code_paths))
    chunk = rec.chunk(provenance,
                      note="the report: every episode gathered (and any missing one played) at this commit; the "
                           "models' own episodes were played by `--part eval` (runs/bench_learned/eval/)")
    old: Dict[str, List[Dict[str, Any]]] = {}
    for r in records.carried_rows(committed) if committed else ():
        old.setdefault(r["scenario"], []).append(r)
    front_door = dict((committed or {}).get("notes", {}).get("front_door", {}))
    carried: Dict[str, List[str]] = {}
    leaderboard = []
    for name in args.scenarios:
        sc = scenario(name)
        path = args.out / "eval" / name / "episodes.jsonl"
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []
        best = best_heuristic(name, ref) if not args.smoke else "pow_d"
        seeds = set(args.seeds)
        by_key = {}
        for r in [*ref, *rows]:
            if r["scenario"] == name and r["seed"] in seeds:
                by_key[(r["policy"], r["seed"])] = r
        played = [d for d in trained_designs(args, name)
                  if rows and all((f"{d}_s{t}", s) in by_key for t in args.train_seeds for s in seeds)]
        if played and not all((p, s) in by_key for p in ("random", "lookahead", best) for s in seeds):
            print(f"{name}: not every policy has played every reporting seed yet: not reported")
            played = []
        mine = old.get(name, [])
        carried[name] = [d for d in DESIGNS if d not in played
                         and any(r.get("role") == "learned" and r["policy"] == d for r in mine)]
        if not played and not carried[name]:
            continue
        if played:
            want = {"random", "lookahead", best, *[f"{d}_s{t}" for d in played for t in args.train_seeds]}
            for (pol, seed), r in sorted(by_key.items(), key=lambda kv: (kv[0][1], kv[0][0])):
                if pol not in want:
                    continue
                design = pol.rsplit("_s", 1)[0] if pol not in ("random", "lookahead", best) else None
                rec.add_row(chunk, scenario=name, policy=design or pol,
                            role="learned" if design else ("best_heuristic" if pol == best else pol),
                            training_seed=int(pol.rsplit("_s", 1)[1]) if design else None, seed=seed,
                            objective=sc.objective, value=r["value"], censored=r["censored"], rounds=r["rounds"],
                            sim_time=r["sim_time"], final_accuracy=r["final_accuracy"], acc_worst10=r["acc_worst10"],
                            wall_time_s=r["wall_time_s"], config_sha=r["config_sha"])
            for design in played:
                key, prev = f"{name}/{design}", front_door.get(f"{name}/{design}")
                front_door[key] = _replay_check(mine, rec.rows, design, provenance)
                if prev:  # played again after its re-record: keep how the first re-record compared
                    front_door[key]["first"] = prev.get("first") or {
                        k: prev[k] for k in ("played_at", "committed_rows_at", "rows", "equal_to_committed")}
        _carry_rows(rec, chunk, [r for r in mine if r.get("role") in EPISODE_ROLES], carried[name],
                    references=not played)
        w = {"scenario": name}
        ep = {**w, "role": list(EPISODE_ROLES)}  # episode rows, not training rows
        mean = {p: rec.summarise(f"{name}: {p} mean {sc.objective}", "mean", "value",
                                 where={**ep, "policy": p}) for p in ("random", "lookahead", best)}
        for design in [d for d in DESIGNS if d in played or d in carried[name]]:
            here = design in played
            cell = [r for r in mine if design_of(r) == design]
            if here:
                for t in args.train_seeds:
                    summ = training_summary(args.out, name, t, design)
                    rec.add_row(chunk, scenario=name, design=design, role="training", training_seed=t,
                                train_seconds=summ["train_seconds"], env_rounds=summ["env_rounds"],
                                oracle_rounds=summ["oracle_rounds"])
            else:
                _carry_rows(rec, chunk, [r for r in cell if r.get("role") == "training"], (design,), False)
            mean[design] = rec.summarise(f"{name}: {design} mean {sc.objective}", "mean", "value",
                                         where={**ep, "policy": design})
            diffs = {}
            for ref_pol, tag in (("random", "random"), (best, "best_heuristic"), ("lookahead", "oracle")):
                diffs[tag] = rec.summarise(f"{name}: {design} − {tag} ({ref_pol}), paired by seed", "paired_t",
                                           "value", where={**ep, "policy": design}, minus={**ep, "policy": ref_pol})
                rec.summarise(f"{name}: {design} − {tag} ({ref_pol}), across training seeds", "paired_t_across",
                              "value", where={**ep, "policy": design}, minus={**ep, "policy": ref_pol})
            if design in DISTILLED or design in ES_DESIGNS:  # its learning curve (and the ES weights)
                if not here:
                    _carry_rows(rec, chunk, [r for r in cell if r.get("role") in ("curve", "weights")], (design,),
                                False)
            if design in DISTILLED:  # its learning curve: greedy objective on tuning seeds, regret to the oracle
                for t in args.train_seeds if here else ():
                    prog = run_folder(args.out, name, t, design) / "progress.jsonl"
                    for line in prog.read_text().splitlines():
                        r = json.loads(line)
                        rec.add_row(chunk, scenario=name, design=design, role="curve", training_seed=t,
                                    episode=r["episode"], regret=r["regret"], learner_best=r["learner_best"],
                                    beta=r["beta"], div_weight=r["div_weight"], tuning_objective=r.get("eval_mean"))
                last = budgets["set_distill_episodes"][name]
                tail = {"scenario": name, "role": "curve", "design": design, "episode": list(range(last - 49, last + 1))}
                rec.summarise(f"{name}: {design}'s pick the best candidate, share of rounds, last 50 episodes",
                              "mean", "learner_best", where=tail)
                rec.summarise(f"{name}: {design}'s regret to the best candidate, last 50 episodes", "mean",
                              "regret", where=tail)
                end = {"scenario": name, "role": "curve", "design": design, "episode": last}
                rec.summarise(f"{name}: {design}'s diversity weight w at the end, lowest", "min", "div_weight", where=end)
                rec.summarise(f"{name}: {design}'s diversity weight w at the end, highest", "max", "div_weight", where=end)
                rec.summarise(f"{name}: {design}'s tuning-seed objective at the end", "t_interval",
                              "tuning_objective", where=end)
            if design in ES_DESIGNS:  # its learning curve: the search's mean on the tuning seeds, per generation
                for t in args.train_seeds if here else ():
                    prog = run_folder(args.out, name, t, design) / "progress.jsonl"
                    for line in prog.read_text().splitlines():
                        r = json.loads(line)
                        rec.add_row(chunk, scenario=name, design=design, role="curve", training_seed=t,
                                    generation=r["generation"], sigma=r["sigma"],
                                    candidates_best=float(min(r["values_mean"]) if sc.lower_is_better
                                                          else max(r["values_mean"])),
                                    tuning_objective=r.get("eval_mean"))
                last_gen = max(r["generation"] for r in records.select(
                    rec.rows, {"scenario": name, "role": "curve", "design": design}))
                end = {"scenario": name, "role": "curve", "design": design, "generation": int(last_gen)}
                rec.summarise(f"{name}: {design}'s tuning-seed objective at the end", "t_interval",
                              "tuning_objective", where=end)
                for t in args.train_seeds if here else ():  # the deployed weights, by name (what the search found)
                    pol = json.loads((run_folder(args.out, name, t, design) / "set_es.json").read_text())
                    for pname, v in pol["params"].items():
                        rec.add_row(chunk, scenario=name, design=design, role="weights", training_seed=t,
                                    param=pname, value=float(v))
                if not records.select(rec.rows, {**w, "role": "tuning_reference"}):
                    tpath = args.out / "tuning" / name / "episodes.jsonl"
                    trows = [json.loads(x) for x in tpath.read_text().splitlines()] if tpath.is_file() else []
                    for r in trows:
                        if r["policy"] in ("random", best) and r["seed"] in TUNING_SEEDS:
                            rec.add_row(chunk, scenario=name, role="tuning_reference", policy=r["policy"],
                                        seed=r["seed"], objective=sc.objective, value=r["value"],
                                        config_sha=r["config_sha"])
                    if not trows:
                        _carry_rows(rec, chunk, [r for r in mine if r.get("role") == "tuning_reference"], (), True)
                for p in ("random", best):
                    key = f"{name}: {p} mean {sc.objective} on the tuning seeds"
                    if records.select(rec.rows, {**w, "role": "tuning_reference", "policy": p}) \
                            and not any(sm["name"] == key for sm in rec.summaries):
                        rec.summarise(key, "mean", "value", where={**w, "role": "tuning_reference", "policy": p})
            tw = {**w, "role": "training", "design": design}
            train_s = rec.summarise(f"{name}: {design} training wall seconds per training seed", "mean",
                                    "train_seconds", where=tw)
            env_rounds = rec.summarise(f"{name}: {design} env rounds per training seed", "mean", "env_rounds", where=tw)
            lo, hi = diffs["best_heuristic"]["lo"], diffs["best_heuristic"]["hi"]
            better = (hi < 0) if sc.lower_is_better else (lo > 0)
            leaderboard.append({
                "scenario": name, "policy": design, "learned": True, "objective": sc.objective,
                "lower_is_better": sc.lower_is_better, "best_heuristic": best, "mean": mean[design],
                "normalised": normalised_score(mean["random"], mean["lookahead"], mean[design]),
                "best_heuristic_normalised": normalised_score(mean["random"], mean["lookahead"], mean[best]),
                "delta_vs_random_ci": [diffs["random"]["lo"], diffs["random"]["hi"]],
                "delta_vs_random": diffs["random"]["mean"],
                "delta_vs_best_heuristic": diffs["best_heuristic"]["mean"],
                "delta_vs_best_heuristic_ci": [lo, hi], "beats_best_heuristic": bool(better),
                "delta_vs_oracle": diffs["oracle"]["mean"], "delta_vs_oracle_ci": [diffs["oracle"]["lo"], diffs["oracle"]["hi"]],
                "train_seconds_per_seed": train_s, "env_rounds_per_seed": env_rounds})
    add_larger_n(rec, args, chunk, old, carried)
    for role in CONFIRM_SETS:
        add_confirm(rec, args, chunk, role, old, carried)
    add_picks(rec, args, chunk, old, carried)
    rec.notes["leaderboard"] = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in e.items()}
                                for e in leaderboard]  # a normalised score without headroom is None, not NaN
    rec.notes["reading"] = ("normalised = (random − policy) / (random − oracle) of the means over the reporting "
                            "seeds; deltas are policy − reference in the objective's units, paired by seed, the "
                            "learned policy's value averaged over its training seeds; 'beats_best_heuristic': the "
                            "95% t CI lies on the better side of 0")
    if front_door:
        rec.notes["front_door"] = {k: front_door[k] for k in sorted(front_door)
                                   if k.split("/")[0] in args.scenarios}
    return rec


__all__ = ["CONFIRM_SEEDS", "CONFIRM_SETS", "DESIGNS", "DISTILLED", "EPISODE_ROLES", "ES_DESIGNS", "LARGER_N_DESIGNS",
           "PICK_SEEDS", "SB3_DESIGNS", "add_confirm", "add_larger_n", "add_picks", "best_heuristic", "build_record",
           "design_of", "larger_config", "picks_episode", "policy_text", "run_folder", "trained_designs",
           "training_summary"]
