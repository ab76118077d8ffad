"""The summary of an evaluation: docs/SPEC.md §5's per-episode metrics, averaged over seeds, as ``summary.csv``.

Owns the metric table (:data:`METRICS`: key → short header and number format), mean ± standard
deviation of every metric per (policy, backend) (:func:`summarise`), and the text of ``summary.csv``
(every metric, for people who want them all). The metrics of one episode are computed where it runs
(:func:`fedsel_eval.episodes.run_episode`); the tables people read, with confidence intervals, are
:mod:`.tables`'.
"""
from __future__ import annotations

import csv
import io
import math
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np

if TYPE_CHECKING:
    from .plan import EvalPlan

#: Per-episode metrics (docs/SPEC.md §5): key → (short header, number format). ``summary.csv`` has
#: ``<key>_mean`` and ``<key>_std`` for each, ``episodes.csv`` every episode's value.
METRICS: Dict[str, Tuple[str, str]] = {
    "rounds_to_target": ("rounds to Ω", ".1f"),
    "time_to_target": ("time to Ω (s)", ".0f"),
    "final_accuracy": ("final acc", ".3f"),
    "best_accuracy": ("best acc", ".3f"),
    "acc_mean": ("client acc mean", ".3f"),
    "acc_std": ("client acc std", ".3f"),
    "acc_var": ("client acc var", ".4f"),
    "acc_var_1e4": ("var ×10⁴", ".0f"),
    "acc_worst10": ("worst 10%", ".3f"),
    "acc_best10": ("best 10%", ".3f"),
    "jain_index": ("Jain", ".3f"),
    "min_participation_rate": ("min part. rate", ".3f"),
    "mean_round_time": ("round time (s)", ".2f"),
    "improved_fraction": ("improved", ".2f"),
    "updates_sent": ("updates", ".0f"),
    "loss_queries": ("loss queries", ".0f"),  # clients asked for their loss before a selection (pow_d)
    "rounds": ("rounds", ".1f"),
    "sim_time": ("sim. time (s)", ".0f"),
    "episode_return": ("return", ".2f"),
    # robustness (docs/ROBUSTNESS.md): meaningful when the env config has an ``adversary``
    "attacker_selected_rate": ("attacker rounds", ".2f"),
    "attacker_response_share": ("attacker share", ".2f"),
    "honest_acc_mean": ("honest acc", ".3f"),
    "dropouts": ("drop-outs", ".0f"),
    "late_arrivals": ("late", ".0f"),
}


def num(v: Any) -> float:
    """A stored number as a float (``None``, JSON's form of NaN, as NaN)."""
    return math.nan if v is None else float(v)


def summarise(records: Sequence[Mapping[str, Any]], plan: EvalPlan) -> List[Dict[str, Any]]:
    """Mean and standard deviation over seeds of every metric, one row per (policy, backend).

    Rounds and time to reach Ω are averaged over the episodes that reached it (NaN when none did;
    ``reached`` counts them). Standard deviations are over seeds (``ddof=0``, as SB3's ``evaluate_policy``).
    """
    rows = []
    for policy, backend in plan.series():
        eps = [r for r in records if r["policy"] == policy and r["backend"] == backend]
        row: Dict[str, Any] = {"policy": policy, "backend": backend, "episodes": len(eps),
                               "reached": sum(bool(r["reached"]) for r in eps),
                               "diverged": sum(bool(r["diverged"]) for r in eps)}
        for key in METRICS:
            values = np.array([num(r["metrics"].get(key, math.nan)) for r in eps], dtype=np.float64)
            values = values[np.isfinite(values)]
            row[f"{key}_mean"] = float(values.mean()) if values.size else math.nan
            row[f"{key}_std"] = float(values.std()) if values.size else math.nan
        rows.append(row)
    return rows


def summary_columns() -> List[str]:
    """The columns of ``summary.csv``, in order."""
    cols = ["policy", "backend", "episodes", "reached", "diverged"]
    for key in METRICS:
        cols += [f"{key}_mean", f"{key}_std"]
    return cols


def summary_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """``summary.csv``'s text (NaN written as an empty cell)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=summary_columns(), lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if isinstance(v, float) and not math.isfinite(v) else
                        (repr(v) if isinstance(v, float) else v)) for k, v in row.items()})
    return buf.getvalue()


__all__ = ["METRICS", "num", "summarise", "summary_columns", "summary_csv"]
