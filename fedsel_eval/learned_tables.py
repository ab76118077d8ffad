"""The tables and figures of the learned designs' record (``fedsel_eval.learned``; docs/BENCHMARK.md and
docs/TRAINING.md splice them in): the leaderboard of learned rows, the 2 × N, confirmation and fresh-seed tables, the
ES weights, where the ES models' picks differ from the oracle's, and the learning curves. Every number is read from
the record's summaries and rows, none recomputed here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Mapping, Sequence

import numpy as np

from fedsel_env.bench import SCENARIOS, scenario

from . import records
from .learned import CONFIRM_SETS, ES_DESIGNS, LARGER_N_DESIGNS
from .markdown import table as md_table
from .plots import save_figure

def _against_references(rec: records.Record, prefix: str, rows: Sequence[Mapping[str, Any]],
                        candidates: Sequence[str]) -> tuple:
    """For a table of designs against random and the best heuristic, from the summaries named ``"<prefix>: <policy>
    mean <objective>"`` and ``"<prefix>: <design> − <policy>, paired by seed"``: (the designs among ``candidates`` in
    ``rows``, the best heuristic, the means by policy, the paired differences by design and reference, the number
    format, a cell formatter for a difference with its CI)."""
    obj = rows[0]["objective"]
    designs = [d for d in candidates if any(r["policy"] == d for r in rows)]
    best = next(r["policy"] for r in rows if r["policy"] not in ("random", *designs))
    f = ".3f" if obj == "acc_worst10" else ".1f"
    means = {p: rec.value(f"{prefix}: {p} mean {obj}") for p in ("random", best, *designs)}
    diffs = {d: {p: rec.value(f"{prefix}: {d} − {p}, paired by seed") for p in ("random", best)} for d in designs}
    cell = lambda x: f"{x['mean']:+{f}} [{x['lo']:+{f}}, {x['hi']:+{f}}]"  # noqa: E731
    return designs, best, means, diffs, f, cell


def picks_table(rec: records.Record) -> str:
    """Where the ES models' picks differ from the oracle's (from the record's summaries): agreement, and the three
    token columns whose standardised means differ most between the oracle's picks and the model's."""
    lines = []
    cell = lambda x: f"{x['mean']:.2f} [{x['lo']:.2f}, {x['hi']:.2f}]"  # noqa: E731
    for name in [n for n in SCENARIOS if any(r.get("role") == "picks" and r["scenario"] == n for r in rec.rows)]:
        for design in ES_DESIGNS:
            rows = [r for r in rec.rows if r.get("role") == "picks" and r["scenario"] == name and r["design"] == design]
            if not rows:
                continue
            pre = f"{name}: {design} vs the oracle, "
            v = [rec.value(pre + x) for x in ("share of the oracle's clients it also picks",
                                             "share of rounds its pick is the oracle's best candidate",
                                             "share of the oracle's candidates that score better than its pick")]
            feats = list(dict.fromkeys(r["param"] for r in rec.rows if r.get("role") == "picks_token"
                                       and r["scenario"] == name and r["design"] == design))  # token order: ties stable
            d = {f: rec.value(pre + f"oracle − learned mean standardised {f}") for f in feats}
            top = sorted(d, key=lambda f: -abs(d[f]["mean"]))[:3]
            lines.append([name, f"`{design}`", len(rows), cell(v[0]), cell(v[1]), cell(v[2]),
                          ", ".join(f"`{f}` {d[f]['mean']:+.2f} [{d[f]['lo']:+.2f}, {d[f]['hi']:+.2f}]" for f in top)])
    return md_table(["scenario", "design", "episodes", "oracle's clients it also picks", "its pick the oracle's best",
                     "candidates scoring better", "the oracle picks clients with (oracle − learned, standardised)"],
                    lines, align="llrrrrl").rstrip("\n")


def confirm_table(rec: records.Record, role: str = "confirm") -> str:
    """The designs on ``CONFIRM_SETS[role]``'s seeds: means and paired differences (from the record's summaries)."""
    _seeds, label, candidates = CONFIRM_SETS[role]
    lines = []
    for name in sorted({r["scenario"] for r in rec.rows if r.get("role") == role}, key=list(SCENARIOS).index):
        rows = [r for r in rec.rows if r.get("role") == role and r["scenario"] == name]
        designs, best, v, diffs, f, cell = _against_references(rec, f"{name} {label}", rows, candidates)
        for dsg in designs:
            d = diffs[dsg]
            lines.append([name, f"`{dsg}`", f"{v['random']:{f}}", f"`{best}` {v[best]:{f}}", f"{v[dsg]:{f}}",
                          cell(d["random"]), cell(d[best])])
    return md_table(["scenario", "design", "random", "best heuristic", "learned", "learned − random [95% CI]",
                     "learned − best heuristic [95% CI]"], lines, align="llrrrrr").rstrip("\n")


def table(rec: records.Record) -> str:
    lines = []
    for e in rec.notes["leaderboard"]:
        arrow = "↓" if e["lower_is_better"] else "↑"
        f = ".3f" if e["objective"] == "acc_worst10" else ".1f"
        lines.append([
            e["scenario"], f"`{e['policy']}`", f"{e['objective']} {arrow}", f"`{e['best_heuristic']}`", f"{e['mean']:{f}}",
            f"{_num(e['normalised'])} ({_num(e['best_heuristic_normalised'])})",
            f"{e['delta_vs_random']:+{f}} [{e['delta_vs_random_ci'][0]:+{f}}, {e['delta_vs_random_ci'][1]:+{f}}]",
            f"{e['delta_vs_best_heuristic']:+{f}} [{e['delta_vs_best_heuristic_ci'][0]:+{f}}, "
            f"{e['delta_vs_best_heuristic_ci'][1]:+{f}}]", "yes" if e["beats_best_heuristic"] else "no",
            f"{e['train_seconds_per_seed'] / 60:.1f} min, {e['env_rounds_per_seed']:,.0f} rounds"])
    return md_table(["scenario", "design", "objective", "best heuristic", "learned mean", "normalised (heuristic's)",
                     "Δ vs random [95% CI]", "Δ vs best heuristic [95% CI]", "beats it", "training per seed"], lines,
                    align="llllrrrrlr").rstrip("\n")


def front_door_table(rec: records.Record) -> str:
    """Where each leaderboard cell's reporting rows come from: re-recorded through the front door (issue #46: the
    cell's models trained by the trainer registry and played here; how many of its rows equal the rows it replaced),
    or not yet (the commit of the chunk its rows were recorded in)."""
    commit = {c["id"]: (c.get("commit") or "?")[:7] for c in rec.chunks}
    notes = rec.notes.get("front_door", {})
    lines = []
    for e in rec.notes["leaderboard"]:
        key = f"{e['scenario']}/{e['policy']}"
        at = sorted({commit[r["chunk"]] for r in rec.rows if r.get("role") == "learned"
                     and r["scenario"] == e["scenario"] and r["policy"] == e["policy"]})
        if key in notes:
            n = notes[key]
            first = n.get("first", n)  # the comparison with the rows the first re-record replaced
            before = ", ".join(c[:7] for c in first["committed_rows_at"]) or "none"
            again = f"; played again: {n['equal_to_committed']} of {n['rows']} equal to the last record's" \
                if "first" in n else ""
            lines.append([e["scenario"], f"`{e['policy']}`", "yes", ", ".join(at),
                          f"{first['equal_to_committed']} of {first['rows']} (the rows of {before}){again}"])
        else:
            lines.append([e["scenario"], f"`{e['policy']}`", "not yet", ", ".join(at), "–"])
    return md_table(["scenario", "design", "re-recorded through the front door", "rows recorded at",
                     "reporting rows equal to the rows they replaced"], lines, align="lllll").rstrip("\n")


def larger_table(rec: records.Record) -> str:
    """The per-client designs at 2 × N: means and paired differences (from the record's summaries)."""
    lines = []
    for name in rec.config.get("scenarios", []) or sorted({r["scenario"] for r in rec.rows if r.get("role") == "larger_n"}):
        rows = [r for r in rec.rows if r.get("role") == "larger_n" and r["scenario"] == name]
        if not rows:
            continue
        n = rows[0]["num_clients"]
        designs, best, v, diffs, f, cell = _against_references(rec, f"{name} at N = {n}", rows, LARGER_N_DESIGNS)
        for d in designs:
            diff = diffs[d]
            lines.append([name, f"{n} ({scenario(name).config['num_clients']})", f"`{d}`", f"{v['random']:{f}}",
                          f"`{best}` {v[best]:{f}}", f"{v[d]:{f}}", cell(diff["random"]), cell(diff[best])])
    return md_table(["scenario", "N (trained at)", "design", "random", "best heuristic", "learned",
                     "learned − random [95% CI]", "learned − best heuristic [95% CI]"], lines,
                    align="lrlrrrrr").rstrip("\n")


def es_weights_table(rec: records.Record, design: str = "set_es") -> str:
    """``design``'s deployed weights per scenario, from the record's rows: each training seed's vector (θ, w) over its
    length (the greedy choice is the same for any positive multiple, so only the direction compares), the mean over
    the seeds and each seed's. The weights act on columns standardised over the round's available clients."""
    rows = [r for r in rec.rows if r.get("role") == "weights" and r.get("design", "set_es") == design]
    names = sorted({r["scenario"] for r in rows}, key=lambda n: list(SCENARIOS).index(n) if n in SCENARIOS else 99)
    if not names:
        return f"(no {design} model reported yet)"
    params = list(dict.fromkeys(r["param"] for r in rows))
    unit: Dict[tuple, float] = {}
    for n in names:
        for t in sorted({r["training_seed"] for r in rows if r["scenario"] == n}):
            vec = {r["param"]: r["value"] for r in rows if r["scenario"] == n and r["training_seed"] == t}
            norm = float(np.linalg.norm(list(vec.values()))) or 1.0
            unit.update({(n, t, p): v / norm for p, v in vec.items()})
    lines = []
    for p in params:
        cells = []
        for n in names:
            v = [x for (n2, _t, p2), x in sorted(unit.items()) if n2 == n and p2 == p]
            cells.append(f"{np.mean(v):+.2f} ({', '.join(f'{x:+.2f}' for x in v)})")
        lines.append([f"`{p}`", *cells])
    return md_table(["weight (unit vector)", *names], lines).rstrip("\n")


def _num(x: Any) -> str:
    return "—" if x is None else f"{x:+.2f}"


def plot_curves(rec: records.Record, path: Path) -> Path:
    """set_distill's learning curves from the record: the greedy learner's objective on the tuning seeds and its
    regret to the best of the oracle's candidates (per training episode, a 20-episode running mean)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [e["scenario"] for e in rec.notes["leaderboard"] if e["policy"] == "set_distill"]
    fig, axes = plt.subplots(2, max(len(names), 1), figsize=(4.2 * max(len(names), 1), 6.5), squeeze=False)
    for j, name in enumerate(names):
        entry = next(e for e in rec.notes["leaderboard"] if e["scenario"] == name and e["policy"] == "set_distill")
        curve = [r for r in rec.rows if r.get("role") == "curve" and r["scenario"] == name
                 and r.get("design", "set_distill") == "set_distill"]  # set_distill's (the figure the docs show)
        for t in sorted({r["training_seed"] for r in curve}):
            rows = [r for r in curve if r["training_seed"] == t]
            ev = [(r["episode"], r["tuning_objective"]) for r in rows if r["tuning_objective"] is not None]
            axes[0, j].plot(*zip(*ev), marker="o", label=f"training seed {t}")
            reg = np.array([r["regret"] if r["regret"] is not None else np.nan for r in rows], dtype=float)
            if reg.size >= 20:
                axes[1, j].plot([r["episode"] for r in rows][19:], np.convolve(np.nan_to_num(reg), np.ones(20) / 20, "valid"))
        axes[0, j].axhline(entry["mean"], color="k", ls=":", lw=1, label="learned, reporting seeds")
        axes[0, j].set_title(f"{name}: {entry['objective']} ({'↓' if entry['lower_is_better'] else '↑'})")
        axes[0, j].set_xlabel("training episode")
        axes[0, j].set_ylabel("greedy learner, tuning seeds 100–104")
        axes[1, j].set_xlabel("training episode")
        axes[1, j].set_ylabel("regret to the oracle's best candidate")
        axes[0, j].legend(fontsize=7)
    return save_figure(fig, path)


def plot_es_curves(rec: records.Record, path: Path) -> Path:
    """set_es's learning curves from the record: the search's mean on the tuning seeds 100-109 every 5 generations,
    per training seed, against random and the best heuristic on the same seeds, and the reporting-seed mean."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = [e for e in rec.notes["leaderboard"] if e["policy"] in ES_DESIGNS]
    cols = min(max(len(entries), 1), 4)
    rows = -(-max(len(entries), 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[len(entries):]:
        ax.set_visible(False)
    for j, entry in enumerate(entries):
        name, design, ax = entry["scenario"], entry["policy"], axes.flat[j]
        curve = [r for r in rec.rows if r.get("role") == "curve" and r["scenario"] == name and r.get("design") == design]
        for t in sorted({r["training_seed"] for r in curve}):
            pts = [(r["generation"], r["tuning_objective"]) for r in curve
                   if r["training_seed"] == t and r["tuning_objective"] is not None]
            ax.plot(*zip(*pts), marker="o", ms=3, label=f"{design}, training seed {t}")
        for p, style in (("random", "--"), (entry["best_heuristic"], "-.")):
            key = f"{name}: {p} mean {entry['objective']} on the tuning seeds"
            if any(sm["name"] == key for sm in rec.summaries):
                ax.axhline(rec.value(key), color="grey" if p == "random" else "C3", ls=style, lw=1,
                           label=f"{p}, tuning seeds")
        ax.axhline(entry["mean"], color="k", ls=":", lw=1, label=f"{design}, reporting seeds")
        ax.set_title(f"{name}, {design}: {entry['objective']} ({'↓' if entry['lower_is_better'] else '↑'})",
                     fontsize=9)
        ax.set_xlabel("CMA-ES generation")
        ax.set_ylabel("search mean, tuning seeds 100–109")
        ax.legend(fontsize=6)
    return save_figure(fig, path)


__all__ = ["confirm_table", "es_weights_table", "front_door_table", "larger_table", "picks_table", "plot_curves",
           "plot_es_curves", "table"]
