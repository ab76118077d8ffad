"""The generalist track's tables (issue #42; ``experiments/bench_generalist.py`` writes the record, docs/BENCHMARK.md's
"Generalist track" splices these in). Every number is read from the record's summaries and notes, none recomputed.

- :func:`table`: per scenario and design the generalist's entry (difference against random and the best heuristic,
  across training seeds and conditional on the models, Holm-corrected p, normalised score).
- :func:`weights_table`: what each generalist leans on (set_es's weights by token column).
- :func:`transfer_table`: the transfer table: each scenario's own ``set_es`` models (trained on it by
  ``experiments/bench_learned.py``) and the generalists, played on every scenario; normalised scores, marked where the
  difference against random is clear across training seeds.
- :func:`plot_family_curves`: each family's learning curves (the search mean on the family's tuning draws, per
  training seed) against random and kcenter_cover on the same draws.
- :func:`versus_table`: per scenario the best heuristic, the per-scenario learned rows and the generalist side by side
  (the leaderboard's "generalist" column).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from . import records
from .markdown import table as md_table
from .plots import save_figure

#: the token columns a weight vector is summarised by (the largest by magnitude of its unit vector)
TOP_WEIGHTS = 3


def _ci(v: Sequence[Optional[float]], spec: str) -> str:
    return "—" if v is None or None in v else f"[{format(v[0], spec)}, {format(v[1], spec)}]"


def _num(x: Optional[float], spec: str = ".3g") -> str:
    return "—" if x is None else format(x, spec)


def _spec(objective: str) -> str:
    return "+.1f" if objective in ("rounds_to_target", "time_to_target") else "+.3f"


def table(rec: records.Record) -> str:
    """The generalists' leaderboard entries (``rec.notes["leaderboard"]``)."""
    rows, stale = [], []
    for e in rec.notes["leaderboard"]:
        spec = _spec(e["objective"])
        norm = "—" if e["normalised"] is None else f"{e['normalised']:+.2f} ({e['best_heuristic_normalised']:+.2f})"
        if e["normalised"] is not None and e.get("reference_random_episodes_differing"):
            norm += "†"
            stale.append(f"{e['scenario']} ({e['reference_random_episodes_differing']})")
        rows.append([e["scenario"], f"`{e['design']}` on `family:{e['family']}`", format(e["mean"], spec[1:]),
                     f"{format(e['delta_vs_random'], spec)} {_ci(e['delta_vs_random_ci_across'], spec)} "
                     f"({_ci(e['delta_vs_random_ci'], spec)})", _num(e["p_holm_vs_random"]),
                     f"{format(e['delta_vs_best_heuristic'], spec)} {_ci(e['delta_vs_best_heuristic_ci_across'], spec)} "
                     f"({_ci(e['delta_vs_best_heuristic_ci'], spec)}) vs `{e['best_heuristic']}`",
                     _num(e["p_holm_vs_best_heuristic"]), norm])
    text = md_table(["scenario", "generalist", "mean", "Δ vs random, across training seeds (conditional)",
                     "p_holm", "Δ vs best heuristic, across training seeds (conditional)", "p_holm",
                     "normalised (best heuristic's)"], rows, align="lllrlrlr").rstrip("\n")
    if stale:
        text += ("\n\n† The oracle's mean is the committed reference's, whose random episodes on these seeds differ from "
                 "the ones replayed here in " + ", ".join(stale) + " of 30 (the oracle was not replayed).")
    train = [(fam, t, x) for fam, seeds in rec.notes.get("training", {}).items() for t, x in seeds.items()]
    if train:
        text += ("\n\nTraining, per family and training seed (minutes of wall time; env rounds): " + "; ".join(
            f"{fam} seed {t} {x['train_seconds'] / 60:.1f} min, {x['env_rounds']:,}" for fam, t, x in train) + ".")
    for design, m in rec.notes.get("mean_normalised", {}).items():
        single = next(k for k in m if k not in ("scenarios", "mean", "ci_across", "per_training_seed"))
        text += (f"\n\nMean normalised score of `{design}`'s generalists over the {len(m['scenarios'])} scenarios above: "
                 f"**{m['mean']:+.2f} {_ci(m['ci_across'], '+.2f')}** (95% CI across training seeds; per seed "
                 f"{', '.join(f'{x:+.2f}' for x in m['per_training_seed'])}), against `{single}`'s {m[single]:+.2f} "
                 f"(the committed reference's episodes on the same seeds).")
    return text


def weights_table(rec: records.Record) -> str:
    """The generalists' set_es weights by token column, one column per family and training seed."""
    cols = [(fam, t, w) for fam, seeds in rec.notes.get("weights", {}).items() for t, w in seeds.items()]
    if not cols:
        return ""
    names = list(cols[0][2])
    return md_table(["token column", *[f"{fam} seed {t}" for fam, t, _ in cols]],
                    [[f"`{n}`", *[f"{w.get(n, float('nan')):+.2f}" for _f, _t, w in cols]] for n in names],
                    align="l" + "r" * len(cols)).rstrip("\n")


def leans_on(weights: Sequence[Mapping[str, float]], top: int = TOP_WEIGHTS) -> str:
    """The ``top`` token columns of the mean unit weight vector over training seeds (the greedy choice depends on the
    direction only), largest magnitude first, with their signed unit weights."""
    names = list(weights[0])
    unit = [np.array([w[n] for n in names]) / (np.linalg.norm([w[n] for n in names]) or 1.0) for w in weights]
    mean = np.mean(unit, axis=0)
    order = np.argsort(-np.abs(mean), kind="stable")[:top]
    return ", ".join(f"`{names[i]}` {mean[i]:+.2f}" for i in order)


def _bench_order(name: str) -> tuple:
    """The bench's scenario order (``fedsel_env.bench.SCENARIOS``), a user's scenarios after, ``generalist`` last."""
    from fedsel_env.bench import SCENARIOS

    order = list(SCENARIOS)
    return (name == "generalist", order.index(name) if name in order else len(order), name)


def _mark(e: Mapping[str, Any]) -> str:
    """▲ ahead of random / ▼ behind it where the CI across training seeds excludes 0 (favourable direction by the
    objective), nothing where it straddles 0."""
    lo, hi = e["delta_vs_random_ci_across"]
    if lo is None or hi is None:
        return ""
    better, worse = (hi < 0, lo > 0) if e["lower_is_better"] else (lo > 0, hi < 0)
    return " ▲" if better else (" ▼" if worse else "")


def transfer_table(rec: records.Record) -> str:
    """Sources (the scenario a ``set_es`` model was trained on, or ``"generalist"``) by target scenario: the
    normalised score of the mean over training seeds (0 random, 1 the oracle), ▲/▼ where the difference against
    random is clear across training seeds; the diagonal is the model on its own scenario; the last column what the
    source's weights lean on; the first line the targets' best heuristics."""
    cells: List[Mapping[str, Any]] = rec.notes.get("transfer", [])
    if not cells:
        return "(no transfer measured yet: --part transfer)"
    targets = sorted(dict.fromkeys(e["scenario"] for e in cells), key=_bench_order)
    sources = sorted(dict.fromkeys(e["source"] for e in cells), key=_bench_order)
    heur = {e["scenario"]: e for e in cells}
    lines = [["best heuristic", *[f"{_num(heur[t]['best_heuristic_normalised'], '+.2f')} `{heur[t]['best_heuristic']}`"
                                  for t in targets], ""]]
    weights = rec.notes.get("source_weights", {})
    for s in sources:
        row = []
        for t in targets:
            e = next((c for c in cells if c["source"] == s and c["scenario"] == t), None)
            cell = "·" if e is None else f"{_num(e['normalised'], '+.2f')}{_mark(e)}"
            row.append(f"**{cell}**" if s == t and e is not None else cell)
        w = weights.get(s)
        lines.append([s if s != "generalist" else "generalist (its objective's family)", *row,
                      leans_on(list(w.values())) if w else ""])
    return md_table(["trained on ↓ / played on →", *targets, "leans on (mean unit weights)"], lines,
                    align="l" + "r" * len(targets) + "l").rstrip("\n")


def versus_table(rec: records.Record, learned: Optional[Mapping[str, Any]] = None) -> str:
    """Per scenario: the best heuristic, the per-scenario learned rows (``learned``: bench_learned's record, its
    leaderboard's best learned design on the scenario), ``set_es`` trained on the scenario, the best model trained on
    another scenario, and the generalist — normalised scores, and each learned one's difference against the best
    heuristic with its CI across training seeds."""
    gen = {e["scenario"]: e for e in rec.notes.get("transfer", []) if e["source"] == "generalist"}
    by_target: Dict[str, List[Mapping[str, Any]]] = {}
    for e in rec.notes.get("transfer", []):
        if e["source"] != "generalist":
            by_target.setdefault(e["scenario"], []).append(e)
    best_learned: Dict[str, Mapping[str, Any]] = {}
    for e in (learned or {}).get("notes", {}).get("leaderboard", []):
        if e["scenario"] not in best_learned or (e["normalised"] or -1e9) > (best_learned[e["scenario"]]["normalised"]
                                                                           or -1e9):
            best_learned[e["scenario"]] = e
    lines = []
    for t in sorted(dict.fromkeys([*by_target, *gen]), key=_bench_order):
        spec = _spec((by_target.get(t) or [gen.get(t)])[0]["objective"])

        def vs_best(e: Optional[Mapping[str, Any]], ci_key: str = "delta_vs_best_heuristic_ci_across") -> str:
            if e is None:
                return "—"
            ci = e.get(ci_key) or e.get("delta_vs_best_heuristic_ci")
            return f"{_num(e['normalised'], '+.2f')} ({format(e['delta_vs_best_heuristic'], spec)} {_ci(ci, spec)})"

        own = next((e for e in by_target.get(t, []) if e["source"] == t), None)
        others = [e for e in by_target.get(t, []) if e["source"] != t]
        other = max(others, key=lambda e: e["normalised"] if e["normalised"] is not None else -1e9, default=None)
        bl = best_learned.get(t)
        ref = (by_target.get(t) or [gen.get(t)])[0]
        lines.append([t, f"{_num(ref['best_heuristic_normalised'], '+.2f')} `{ref['best_heuristic']}`",
                      "—" if bl is None else f"`{bl['policy']}` " + vs_best(bl, "delta_vs_best_heuristic_ci"),
                      vs_best(own), "—" if other is None else f"from {other['source']}: " + vs_best(other),
                      vs_best(gen.get(t))])
    return md_table(["scenario", "best heuristic (normalised)", "best per-scenario learned row (bench_learned)",
                     "set_es trained on it", "best set_es trained on another scenario", "generalist"],
                    lines, align="llllll").rstrip("\n")


def plot_family_curves(rec: records.Record, path: Path) -> Path:
    """One panel per family: each training seed's search mean on the family's tuning draws (the record's
    ``family_curve`` rows, the mean over the draws) by CMA-ES generation, with random's and kcenter_cover's means on
    the same draws (``family_reference``) as lines; then one panel per scenario whose own set_es models were trained
    by the front door (``source_curve`` on its tuning seeds, with ``source_reference``: random, kcenter_cover and the
    scenario's best heuristic)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("family", "family", f) for f in dict.fromkeys(r["family"] for r in rec.rows
                                                             if r.get("role") == "family_curve")]
    panels += [("source", "scenario", n) for n in dict.fromkeys(r["scenario"] for r in rec.rows
                                                                if r.get("role") == "source_curve")]
    cols = min(max(len(panels), 1), 3)
    rows = -(-max(len(panels), 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (kind, field, key) in zip(axes.flat, panels):
        mine = [r for r in rec.rows if r.get("role") == f"{kind}_curve" and r[field] == key]
        objective = mine[0]["objective"]
        for t in sorted({r["training_seed"] for r in mine}):
            gens = sorted({r["generation"] for r in mine if r["training_seed"] == t})
            ys = [float(np.mean([r["value"] for r in mine if r["training_seed"] == t and r["generation"] == g]))
                  for g in gens]
            ax.plot(gens, ys, marker="o", ms=3, label=f"set_es, training seed {t}")
        refs = [r for r in rec.rows if r.get("role") == f"{kind}_reference" and r[field] == key]
        for i, policy in enumerate(dict.fromkeys(r["policy"] for r in refs)):
            ax.axhline(float(np.mean([r["value"] for r in refs if r["policy"] == policy])),
                       color="grey" if policy == "random" else f"C{2 + i}", ls=("--", "-.", ":")[min(i, 2)], lw=1,
                       label=f"{policy}, same {'draws' if kind == 'family' else 'seeds'}")
        arrow = "↑" if objective == "acc_worst10" else "↓"
        where = "the family's 10 tuning draws" if kind == "family" else "the scenario's 10 tuning seeds"
        ax.set_title(f"family:{key}: {objective} ({arrow})" if kind == "family" else
                     f"{key} (trained on it): {objective} ({arrow})", fontsize=9)
        ax.set_xlabel("CMA-ES generation")
        ax.set_ylabel(f"mean over {where}")
        ax.legend(fontsize=6)
    return save_figure(fig, path)
