"""Each experiment's numbers as a committed record (``fedsel_eval.records``, issue #34).

An experiment script computes its tables and hands :meth:`common.Outputs.results` the data behind them
(per-episode values, and the summaries it printed). :func:`convert` turns that data into a record: the
configuration as run, the chunk(s) that computed the episodes, one row per episode, and every printed
figure as a summary *computed from the rows* — where the script also stored the figure, the two must
agree or the conversion fails (:meth:`Record.summarise`'s ``stored``). The same converters migrated the
records committed before the format existed (``experiments/migrate_records.py``); where such a record
kept no episodes (the held-out studies of #17 and #19), its figures are marked summary-only with the
reason, and only what its stored per-training-seed means allow is recomputed.

Conventions: ``rounds`` counts a missed Ω as the cap (``reached`` says which); ``federation_seed`` is the
config's (``null``: each episode seed draws its own federation); "± std" columns are ``std`` with
``ddof = 0`` as the tables print them.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional

import numpy as np

from fedsel_eval.records import Record

NOT_KEPT = ("the run kept only summaries, not its episodes (they were in runs/, which is not committed); "
            "rerunning it with the current script writes them")


def _record(name: str, data: Mapping[str, Any], config: Mapping[str, Any], note: str = "",
            notes: Optional[Mapping[str, Any]] = None, summary_only: Optional[str] = None,
            one_chunk: bool = True) -> Record:
    """A record whose rows were computed by the invocation that wrote ``data`` (``one_chunk``): one chunk at
    its commit. A resumed run's episodes may be older; the scripts that resume across commits (q-FFL's
    chunked runs) record a chunk per piece instead."""
    rec = Record(name, config, notes=notes, summary_only=summary_only)
    rec.written_by = {k: data.get(k) for k in ("commit", "dirty", "dirty_files", "commit_note") if k in data}
    if one_chunk:
        rec.chunk(data, note=note or "the invocation that wrote this record computed (or resumed) every row")
    return rec


def _iv(d: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """A stored interval in the record's form (``mean``, ``lo``, ``hi``, ``n``; NaN → None)."""
    if d is None:
        return None
    f = lambda x: None if x is None or (isinstance(x, float) and not np.isfinite(x)) else x  # noqa: E731
    return {"mean": f(d["mean"]), "lo": f(d["lo"]), "hi": f(d["hi"]), "n": d["n"]}


def _across(stored: Optional[Mapping[str, Any]], per_seed: Mapping[str, Any], key: str) -> Optional[Dict[str, Any]]:
    """The stored across-training-seeds interval in ``paired_t_across``'s form (with the per-seed means)."""
    if stored is None:
        return None
    return {**_iv(stored), "per_training_seed": [v[key]["mean"] for _, v in sorted(per_seed.items())]}


def _mean_std(rec: Record, what: str, field: str, where: Mapping[str, Any]) -> None:
    rec.summarise(f"{what}: mean", "mean", field, where=dict(where))
    rec.summarise(f"{what}: std (ddof 0)", "std", field, ddof=0, where=dict(where))


# ============================================================================================ section 1
def round_cost(data: Mapping[str, Any]) -> Record:
    rec = _record("round_cost", data, {"config": data["config"], "k": data["k"]},
                  note="one measurement per model (seconds on this machine)")
    for r in data["rows"]:
        rec.add_row("c0", model=r["model"], about=r["about"], parameters=r["parameters"],
                    local_epochs=r["local_epochs"], epoch_s=r["epoch_s"], evaluation_s=r["evaluation_s"],
                    round_s=r["round_s"], profiling_s=r["profiling_s"],
                    **{f"episode_estimate_s[{k}]": v for k, v in r.get("episode_estimate_s", {}).items()})
    for r in data["rows"]:
        for field in ("epoch_s", "evaluation_s", "round_s", "profiling_s",
                      *[f"episode_estimate_s[{k}]" for k in r.get("episode_estimate_s", {})]):
            rec.summarise(f"{r['model']}: {field}", "mean", field, where={"model": r["model"]}, stored=r.get(
                field, r.get("episode_estimate_s", {}).get(field[len("episode_estimate_s["):-1])))
    return rec


def favor_fmnist(data: Mapping[str, Any]) -> Record:
    fed = data["scale"].get("federation_seed")
    rec = _record("favor_fmnist", data, {"scale": data["scale"], "train": data["train"],
                                         "train_sigma": data.get("train_sigma", "0.8 (not recorded by that run; "
                                                                 "the script's TRAIN_SIGMA)")})
    for lab, s in data["sigmas"].items():
        for pol, rounds in s["rounds_to_target"].items():
            for i, seed in enumerate(s["seeds"]):
                extra = {k: s[k][pol][i] for k in ("best_accuracy", "distinct_clients") if k in s}
                rec.add_row("c0", sigma=lab, policy=pol, training_seed=None, seed=seed, federation_seed=fed,
                            rounds=rounds[i] if rounds[i] is not None else s["cap"], reached=rounds[i] is not None,
                            final_accuracy=s["final_accuracy"][pol][i], wall_time_s=s["wall_time_s"][pol][i], **extra)
        for pol in s["rounds_to_target"]:
            what = f"σ = {lab}, {pol}"
            _mean_std(rec, f"{what}, rounds to Ω over the episodes that reached it", "rounds",
                      {"sigma": lab, "policy": pol, "reached": True})
            rec.summarise(f"{what}: episodes that reached Ω", "count", where={"sigma": lab, "policy": pol,
                                                                              "reached": True})
            for k in ("final_accuracy", "best_accuracy", "distinct_clients"):
                if k == "final_accuracy" or k in s:
                    rec.summarise(f"{what}: mean {k}", "mean", k, where={"sigma": lab, "policy": pol})
    t = data["training"]
    returns = t["returns"]
    fifth = max(len(returns) // 5, 1)
    for i, r in enumerate(returns):
        rec.add_row("c0", part="training", episode=i, episode_return=r,
                    fifth="first" if i < fifth else ("last" if i >= len(returns) - fifth else "middle"))
    rec.summarise("DQN training: mean return, first fifth of the episodes", "mean", "episode_return",
                  where={"part": "training", "fifth": "first"}, stored=t["first_fifth_mean_return"])
    rec.summarise("DQN training: mean return, last fifth of the episodes", "mean", "episode_return",
                  where={"part": "training", "fifth": "last"}, stored=t["last_fifth_mean_return"])
    rec.notes["training_seconds"] = t["seconds"]
    return rec


def _study(name: str, data: Mapping[str, Any], reports: Mapping[str, Mapping[str, Any]], cap: int) -> Record:
    """favor_study / per_client_study: full rows when the data holds its episodes, else summary-only."""
    config = {k: data.get(k) for k in ("setting", "env", "cap", "omega", "tune_seeds", "report_seeds", "train_steps",
                                       "best_heuristic") if k in data}
    config["report_federation_seed"] = {r: rep.get("federation_seed", "not recorded") for r, rep in reports.items()}
    has_rows = all("episodes" in rep for rep in reports.values())
    rec = _record(name, data, config, notes={"tune_mean_rounds": data.get("tune_mean_rounds"),
                                             "tune_mean_rounds_note": "chosen on the tuning seeds; their episodes "
                                                                      "are not in this record"},
                  summary_only=None if has_rows else NOT_KEPT,
                  note="the report's episodes" if has_rows else
                  "per-training-seed means copied from the study's summary (its episodes were not kept)")
    best = data["best_heuristic"]
    # the trainings' wall times: timings of this machine (as the fragments' wall-time lines), not episode figures
    timings = {pol: e["training_seconds"] for pol, e in next(iter(reports.values()))["policies"].items()
               if "training_seconds" in e}
    if "training_seconds" in data:
        timings["per_client"] = data["training_seconds"]
    if timings:
        rec.notes["training_wall_seconds_per_training_seed"] = timings
    for rname, rep in reports.items():
        pre = f"{rname}: " if len(reports) > 1 else ""
        if has_rows:
            for row in rep["episodes"]:
                rec.add_row("c0", report=rname, **row)
        for pol, e in rep["policies"].items():
            where = {"report": rname, "policy": pol}
            if has_rows:
                rec.summarise(f"{pre}{pol}: mean rounds to Ω", "mean", "rounds", where=where, stored=e["mean_rounds"])
                rec.summarise(f"{pre}{pol}: missed Ω", "count", where={**where, "reached": False}, stored=e["missed"])
                rec.summarise(f"{pre}{pol}: mean final accuracy", "mean", "final_accuracy", where=where,
                              stored=e["mean_final_accuracy"])
                for other, key in (("random", "rounds_vs_random"), (best, "rounds_vs_best")):
                    if pol != other:
                        rec.summarise(f"{pre}{pol} − {other}: rounds (conditional on the trained models)", "paired_t",
                                      "rounds", where=where, minus={"report": rname, "policy": other},
                                      stored=_iv(e[key]))
                        if "per_training_seed" in e:
                            rec.summarise(f"{pre}{pol} − {other}: rounds (across training seeds)", "paired_t_across",
                                          "rounds", where=where, minus={"report": rname, "policy": other},
                                          stored=_across(e.get(f"{key}_across"), e["per_training_seed"], key))
            else:
                for key in ("mean_rounds", "missed", "mean_final_accuracy", "jain", "rounds_vs_random",
                            "rounds_vs_best", "final_acc_vs_random"):
                    if key in e:
                        rec.summarise(f"{pre}{pol}: {key}", "stored", stored=_iv(e[key]) if isinstance(e[key], dict)
                                      else e[key], summary_only=True)
                for m, ps in e.get("per_training_seed", {}).items():
                    ts = int(m.rsplit("_s", 1)[1])
                    rec.add_row("c0", report=rname, variant=pol, training_seed=ts, level="training-seed mean",
                                mean_rounds=ps["mean_rounds"], rounds_vs_random=ps["rounds_vs_random"]["mean"],
                                rounds_vs_best=ps["rounds_vs_best"]["mean"])
                    rec.summarise(f"{pre}{m} − random: rounds", "stored", stored=_iv(ps["rounds_vs_random"]),
                                  summary_only=True)
                if "per_training_seed" in e:
                    for key, other in (("rounds_vs_random", "random"), ("rounds_vs_best", best)):
                        rec.summarise(f"{pre}{pol} − {other}: rounds (across training seeds, from the stored "
                                      f"per-training-seed means)", "t_interval", key,
                                      where={"report": rname, "variant": pol, "level": "training-seed mean"})
        for key in ("per_client_vs_favor", "per_client_ens_vs_favor"):
            if key in rep:
                mine = key.split("_vs_")[0]
                if has_rows:
                    rec.summarise(f"{pre}{mine} − favor: rounds", "paired_t", "rounds",
                                  where={"report": rname, "policy": mine}, minus={"report": rname, "policy": "favor"},
                                  stored=_iv(rep[key]))
                else:
                    rec.summarise(f"{pre}{mine} − favor: rounds", "stored", stored=_iv(rep[key]), summary_only=True)
    return rec


def favor_study(data: Mapping[str, Any], name: str) -> Record:
    rep = {"policies": data["policies"], "federation_seed": data["env"].get("federation_seed"),
           **({"episodes": data["episodes"]} if "episodes" in data else {})}
    return _study(name, data, {"seen": rep}, data["cap"])


def per_client_study(data: Mapping[str, Any], name: str) -> Record:
    return _study(name, data, data["reports"], data["cap"])


def per_client_analysis(data: Mapping[str, Any], name: str) -> Record:
    rec = _record(name, data, {k: data.get(k) for k in ("setting", "env", "cap", "omega", "best_heuristic", "seeds",
                                                         "oracle_seeds", "K", "pca_components", "oracle_step")},
                  summary_only=NOT_KEPT, notes={k: data[k] for k in ("scores", "bound", "traces_replay_evaluation",
                                                                     "learning_curves") if k in data})
    for pol, v in data.get("bound", {}).get("mean_rounds", {}).items():
        rec.summarise(f"{pol}: mean rounds to Ω (one-step bound study)", "stored", stored=v, summary_only=True)
    return rec


# ============================================================================================ sections 2-5
#: qffl_synthetic's metrics: (key, column, scale, format) — its table's columns and its record's
QFFL_METRICS = [("acc_mean", "mean acc (%)", 100.0, ".1f"), ("acc_var_1e4", "variance (×10⁴)", 1.0, ".0f"),
                ("acc_worst10", "worst 10% (%)", 100.0, ".1f"), ("acc_best10", "best 10% (%)", 100.0, ".1f"),
                ("final_accuracy", "global acc (%)", 100.0, ".1f")]


def qffl_synthetic(data: Mapping[str, Any]) -> Record:
    """Rows: one per finished run (algorithm, q, seed), the chunks that computed it from the progress file."""
    METRICS = QFFL_METRICS
    rec = _record("qffl_synthetic", data, data["settings"], one_chunk=False)
    for run in sorted(data["runs"], key=lambda r: (r["algorithm"], r["q"], r["seed"])):
        ids = [rec.chunk(c, note=f"{run['algorithm']} q={run['q']:g} seed={run['seed']}: rounds {c['from']}–{c['to']}",
                         rounds_from=c["from"], rounds_to=c["to"], seconds=c["seconds"]) for c in run["chunks"]]
        m = run["result"]["metrics"]
        rec.add_row(ids[-1], chunks=ids, policy="random_nk", algorithm=run["algorithm"], q=float(run["q"]),
                    training_seed=None, seed=run["seed"], federation_seed=None, rounds=m["rounds"],
                    reached=m["reached"], diverged=bool(m["diverged"]),
                    seconds_per_round=run["round_seconds"] / run["rounds_played"] if run["rounds_played"] else None,
                    run_minutes=run["seconds"] / 60.0,
                    **{f"{k}_x{scale:g}": m[k] * scale for k, _, scale, _ in METRICS})
    rec.summarise("every run: wall minutes, summed over runs and chunks", "sum", "run_minutes", where={})
    for a in data["series"]:
        for stat in ("min", "max"):
            rec.summarise(f"{a}: a run's wall minutes, {stat}", stat, "run_minutes", where={"algorithm": a})
    for a, by_q in data["series"].items():
        for q, s in by_q.items():
            where = {"algorithm": a, "q": float(q)}
            for k, _, scale, _ in METRICS:
                vals = s["values"][k]
                lo, hi = s["ci95"][k]
                rec.summarise(f"{a} q={q} {k}×{scale:g}", "t_interval", f"{k}_x{scale:g}", where=where,
                              stored={"mean": float(np.mean(vals)), "lo": lo, "hi": hi, "n": len(vals)}
                              if len(vals) > 1 else None)
            rec.summarise(f"{a} q={q} s/round", "mean", "seconds_per_round", where=where,
                          stored=s["seconds_per_round"])
            if float(q) > 0:
                for k, _, scale, _ in METRICS[:3]:
                    rec.summarise(f"{a} q={q} − q=0: {k}×{scale:g}", "paired_t", f"{k}_x{scale:g}", where=where,
                                  minus={"algorithm": a, "q": 0.0})
    return rec


def afl_rounds(data: Mapping[str, Any]) -> Record:
    rec = _record("afl_rounds", data, {"settings": data["settings"], "seeds": data["seeds"],
                                       "afl_params": data.get("afl_params", "not recorded by that run")})
    for label, res in data["results"].items():
        for pol in ("random", "afl"):
            for i, seed in enumerate(data["seeds"]):
                acc = res.get(f"{pol}_final_accuracy")
                rec.add_row("c0", setting=label, policy=pol, training_seed=None, seed=seed,
                            federation_seed=res.get("federation_seed"), rounds=res[f"{pol}_rounds"][i],
                            reached=res[f"{pol}_reached"][i], **({"final_accuracy": acc[i]} if acc else {}))
            _mean_std(rec, f"{label}, {pol}: rounds to Ω over the episodes that reached it", "rounds",
                      {"setting": label, "policy": pol, "reached": True})
            rec.summarise(f"{label}, {pol}: episodes that reached Ω", "count",
                          where={"setting": label, "policy": pol, "reached": True})
            if res.get(f"{pol}_final_accuracy"):
                rec.summarise(f"{label}, {pol}: mean final accuracy", "mean", "final_accuracy",
                              where={"setting": label, "policy": pol})
        pair = dict(field="rounds", where={"setting": label, "policy": "afl"},
                    minus={"setting": label, "policy": "random"})
        rec.summarise(f"{label}: afl − random, rounds", "paired_t", stored=_iv(res["afl_minus_random"]), **pair)
        ch = rec.summarise(f"{label}: afl's change in mean rounds (%)", "paired_change_percent", **pair)
        if abs(ch["mean"] - res["change_in_mean_rounds_percent"]) > 1e-9:
            raise ValueError(f"afl_rounds {label}: change {res['change_in_mean_rounds_percent']} ≠ rows' {ch['mean']}")
        rec.summarise(f"{label}: seeds afl faster / slower / tied", "paired_signs", **pair)
    return rec


def afl_regime(data: Mapping[str, Any]) -> Record:
    cap = data["cap"]
    rec = _record("afl_regime", data, {k: data.get(k) for k in ("env", "cap", "rates", "calibration_rate",
                                                                 "afl_settings", "tune_seeds", "omega", "report_seeds")},
                  notes={"chosen": data["chosen"]})
    for pol, by_rate in data["tuning_grid"].items():
        for rate, d in by_rate.items():
            for seed, r in zip(data["tune_seeds"], d["rounds"]):
                rec.add_row("c0", part="tune", policy=pol, lr=float(rate), training_seed=None, seed=seed,
                            federation_seed=None, rounds=float(r), reached=r < cap)
            rec.summarise(f"tuning: {pol}, η = {rate}: mean rounds", "mean", "rounds",
                          where={"part": "tune", "policy": pol, "lr": float(rate)}, stored=d["mean_rounds"])
    for seed, v in zip(data["tune_seeds"], data["reset_valuations"]["per_seed"]):
        rec.add_row("c0", part="valuations", seed=seed, **v)
    w = {"part": "valuations"}
    for name, stat, field in (("std (mean over seeds)", "mean", "std"), ("lowest", "min", "min"),
                              ("highest", "max", "max"), ("candidates' lowest (mean)", "mean", "candidates_min"),
                              ("candidates' highest (mean)", "mean", "candidates_max"),
                              ("weight ratio, α2 = 0.01 (mean)", "mean", "weight_ratio_paper"),
                              ("tuned α2 (mean)", "mean", "tuned_alpha2"),
                              ("weight ratio, tuned α2 (median)", "median", "weight_ratio_tuned")):
        rec.summarise(f"reset valuations: {name}", stat, field, where=w)
    seeds = data.get("report_seeds", [])
    for pol, e in data.get("report", {}).items():
        for i, seed in enumerate(seeds):
            extra = {}
            if "final_accuracy" in e:
                extra = {"final_accuracy": e["final_accuracy"][i],
                         "samples_per_round": e["samples_per_round_per_episode"][i]}
            rec.add_row("c0", part="report", policy=pol, training_seed=None, seed=seed, federation_seed=None,
                        rounds=e["rounds"][i], reached=e["rounds"][i] < cap, **extra)
    for pol, e in data.get("report", {}).items():
        where = {"part": "report", "policy": pol}
        rec.summarise(f"report: {pol}: mean rounds", "mean", "rounds", where=where, stored=e["mean_rounds"])
        rec.summarise(f"report: {pol}: missed Ω", "count", where={**where, "reached": False}, stored=e["missed"])
        for key, field in (("mean_final_accuracy", "final_accuracy"), ("samples_per_round", "samples_per_round")):
            if "final_accuracy" in e:
                rec.summarise(f"report: {pol}: {key}", "mean", field, where=where, stored=e[key])
            else:
                rec.summarise(f"report: {pol}: {key}", "stored", stored=e[key], summary_only=True, reason=NOT_KEPT)
        for other in ("random", "random_nk"):
            key = f"rounds_vs_{other}"
            if key in e:
                pair = dict(field="rounds", where=where, minus={"part": "report", "policy": other})
                rec.summarise(f"report: {pol} − {other}: rounds", "paired_t", stored=_iv(e[key]), **pair)
                if other == "random":
                    rec.summarise(f"report: {pol} − random: change in mean rounds (%)", "paired_change_percent",
                                  stored=_iv(e["change_percent"]), **pair)
                    rec.summarise(f"report: {pol}: seeds faster / slower / tied", "paired_signs",
                                  stored=e["seeds_faster_slower_tied"], **pair)
    return rec


def fedmgda_fairness(data: Mapping[str, Any]) -> Record:
    a, b, c = data["part_a"], data["part_b"], data["part_c"]
    rec = _record("fedmgda_fairness", data, {"part_a": {"env": a["env"], "seeds": a["seeds"]},
                                              "part_b": {"env": b["env"], "scales": b["scales"], "seeds": b["seeds"]},
                                              "part_c": {"env": c["env"], "epsilons": c["epsilons"], "seeds": c["seeds"],
                                                         "scenarios": c["scenarios"]}})
    for backend, r in a["results"].items():
        for seed, fr, acc in zip(a["seeds"], r["improved_fraction"], r["final_accuracy"]):
            fr = np.asarray(fr, dtype=np.float64)
            half = fr.size // 2
            rec.add_row("c0", part="A", policy="random", backend=backend, training_seed=None, seed=seed,
                        rounds=int(fr.size), final_accuracy=acc, improved=float(np.nanmean(fr)),
                        improved_first_half=float(np.nanmean(fr[:half])),
                        improved_second_half=float(np.nanmean(fr[half:])), all_improved=float(np.mean(fr == 1.0)),
                        improved_per_round=fr.tolist())
        w = {"part": "A", "backend": backend}
        for field in ("improved", "improved_first_half", "improved_second_half", "all_improved"):
            rec.summarise(f"A, {backend}: {field} (mean over seeds of the per-round mean)", "mean", field, where=w)
        _mean_std(rec, f"A, {backend}: final accuracy", "final_accuracy", w)
    for backend, by_scale in b["results"].items():
        for scale, r in by_scale.items():
            for seed, acc, div in zip(b["seeds"], r["final_accuracy"], r["diverged"]):
                rec.add_row("c0", part="B", policy="random", backend=backend, scale=float(scale), training_seed=None,
                            seed=seed, final_accuracy=acc, diverged=div)
            w = {"part": "B", "backend": backend, "scale": float(scale)}
            _mean_std(rec, f"B, {backend}, s = {scale}: final accuracy", "final_accuracy", w)
            rec.summarise(f"B, {backend}, s = {scale}: diverged", "count", where={**w, "diverged": True})
    labels = list(c["results"])
    for backend, by_sc in c["results"].items():
        for scenario, r in by_sc.items():
            for i, seed in enumerate(c["seeds"]):
                rec.add_row("c0", part="C", policy="random", backend=backend, scenario=scenario, training_seed=None,
                            seed=seed, **{k: v[i] for k, v in r.items()})
        for scenario in by_sc:
            w = {"part": "C", "backend": backend, "scenario": scenario}
            for field in ("honest_acc_mean", "acc_worst10", "improved_fraction"):
                _mean_std(rec, f"C, {backend}, {scenario}: {field}", field, w)
        rec.summarise(f"C, {backend}: free riders − none, honest accuracy", "paired_t", "honest_acc_mean",
                      where={"part": "C", "backend": backend, "scenario": "free riders"},
                      minus={"part": "C", "backend": backend, "scenario": "none"})
        if backend != labels[0]:
            for scenario in by_sc:
                rec.summarise(f"C, {scenario}: {backend} − {labels[0]}, honest accuracy", "paired_t", "honest_acc_mean",
                              where={"part": "C", "backend": backend, "scenario": scenario},
                              minus={"part": "C", "backend": labels[0], "scenario": scenario})
    return rec


def rbcsf_fairness(data: Mapping[str, Any]) -> Record:
    res, rounds = data["results"], data["rounds"]
    policies = [k for k in res if k not in ("mean_queue_traces", "claims")]
    rec = _record("rbcsf_fairness", data, {"env": data["env"], "seeds": data["seeds"], "rounds": rounds},
                  notes={"mean_queue_traces": res.get("mean_queue_traces"),
                         "mean_queue_traces_note": "the figure's curves (mean over seeds per round): no table figure"})
    for pol in policies:
        r = res[pol]
        for i, seed in enumerate(data["seeds"]):
            rate = np.asarray(r["participation_rate"][i], dtype=np.float64)
            q = {k: v[i] for k, v in r.get("queues", {}).items()}
            if q:
                q["floor"] = r["beta"] - q["zmax_at_T"] / rounds
            rec.add_row("c0", policy=pol, beta=r["beta"], training_seed=None, seed=seed, rounds=rounds,
                        mean_round_time=r["mean_round_time"][i], sim_time=r["sim_time"][i],
                        min_participation_rate=float(rate.min()), max_participation_rate=float(rate.max()),
                        participation_rate=rate.tolist(), clients_below_beta=r["clients_below_beta"][i],
                        jain_index=r["jain_index"][i], final_accuracy=r["final_accuracy"][i],
                        acc_worst10=r["acc_worst10"][i], **q)
        w = {"policy": pol}
        for field in ("mean_round_time", "sim_time", "min_participation_rate", "max_participation_rate", "jain_index",
                      "final_accuracy", "acc_worst10"):
            _mean_std(rec, f"{pol}: {field}", field, w)
        rec.summarise(f"{pol}: clients below β (mean)", "mean", "clients_below_beta", where=w)
        if r.get("queues"):
            for field in ("zmax_at_0.1T", "zmax_at_0.5T", "zmax_at_T", "zmax_largest", "floor"):
                rec.summarise(f"{pol}: {field} (mean)", "mean", field, where=w)
            rec.summarise(f"{pol}: Z_max growth, 4th − 3rd quarter", "t_interval", "zmax_growth_q4_minus_q3", where=w)
    for pol in policies:
        for other in ("fedcs", "random"):
            if pol != other and not (pol == "fedcs"):
                for field in ("mean_round_time", "final_accuracy"):
                    rec.summarise(f"{pol} − {other}: {field}", "paired_t", field, where={"policy": pol},
                                  minus={"policy": other})
    cl = res.get("claims", {})
    for key, field in (("acc_fairest_minus_least_fair", "final_accuracy"),
                       ("round_time_fairest_minus_least_fair", "mean_round_time"),
                       ("acc_random_minus_fedcs", "final_accuracy"),
                       ("round_time_largest_v_minus_smallest_v", "mean_round_time")):
        if key in cl:
            vs = sorted((float(p[len("rbcsf-V"):]), p) for p in policies
                        if p.startswith("rbcsf-V") and "-b" not in p)
            pair = {"fairest": (cl.get("fairest"), cl.get("least_fair")), "random": ("random", "fedcs"),
                    "largest": (vs[-1][1], vs[0][1]) if vs else (None, None)}[
                "fairest" if "fairest" in key else ("random" if "random" in key else "largest")]
            rec.summarise(f"claim: {key}", "paired_t", field, where={"policy": pair[0]}, minus={"policy": pair[1]},
                          stored=_iv(cl[key]))
    return rec


# ============================================================================================ dispatch
CONVERTERS: Dict[str, Callable[..., Record]] = {
    "round_cost": round_cost, "favor_fmnist": favor_fmnist, "qffl_synthetic": qffl_synthetic,
    "afl_rounds": afl_rounds, "afl_regime": afl_regime, "fedmgda_fairness": fedmgda_fairness,
    "rbcsf_fairness": rbcsf_fairness}
#: experiments with one record per setting: ``<prefix><setting>``
PER_SETTING: Dict[str, Callable[..., Record]] = {
    "favor_study_": favor_study, "per_client_study_": per_client_study, "per_client_analysis_": per_client_analysis}


def has_converter(name: str) -> bool:
    return name in CONVERTERS or any(name.startswith(p) for p in PER_SETTING)


def convert(name: str, data: Mapping[str, Any]) -> Record:
    """The record of experiment ``name`` (its Outputs name) from the data its script publishes."""
    if name in CONVERTERS:
        return CONVERTERS[name](data)
    for prefix, fn in PER_SETTING.items():
        if name.startswith(prefix):
            return fn(data, name)
    raise ValueError(f"no record converter for experiment {name!r}: add one to experiments/records_of.py")
