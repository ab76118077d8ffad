"""The tables of an evaluation: a main table and a fairness table, as Markdown (printed, ``summary.md``)
and CSV (``main_table.csv``, ``fairness_table.csv``), and every episode's metrics (``episodes.csv``).

Owns the columns and their wording, the number formats, and the width: the Markdown is padded into
aligned columns, no line longer than :data:`WIDTH` characters where the labels allow it (a long policy label
loses whole words from its middle, never part of a name, and is written in full under the table), so it reads
the same in a terminal and rendered.
The numbers come from :class:`fedsel_eval.results.Results`.
"""
from __future__ import annotations

import csv
import io
import math
import re
import textwrap
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence

from .markdown import table as md_table
from .results import FAIRNESS, Results
from .stats import TO_TARGET
from .summary import METRICS

if TYPE_CHECKING:
    from .plan import EvalPlan

#: The longest line of the Markdown tables and their notes (characters).
WIDTH = 120
#: The longest policy label shown in a table cell (longer ones, or shorter ones when the table would be
#: wider than :data:`WIDTH`, lose whole words from their middle there and are given in full below).
LABEL_WIDTH = 26
#: Number formats of the tables' metrics.
FORMATS = {"rounds_to_target": ".1f", "time_to_target": ".0f", "final_accuracy": ".3f", "jain_index": ".3f",
           "acc_std": ".3f", "acc_worst10": ".3f", "acc_best10": ".3f", "min_participation_rate": ".3f"}
#: Fairness table headers.
FAIRNESS_HEADERS = {"jain_index": "Jain (picks)", "acc_std": "client acc std", "acc_worst10": "worst 10%",
                    "acc_best10": "best 10%", "min_participation_rate": "min part. rate"}


#: where a label may be shortened (issue #45): after one of these, so that no name is cut — the parts of an agent
#: spec (``rbcsf:``, ``v=10,``, ``beta=0.1``: a parameter stays with its value) or a path; a label that is one name is shortened between its words (``_``, ``-``)
NAME_END = re.compile(r"(?<=[:,/() ])")
WORD_END = re.compile(r"(?<=[_\-])")


def short_label(label: str, width: int = LABEL_WIDTH) -> str:
    """``label`` shortened towards ``width`` characters by leaving out whole names from its middle (``…``): names
    end at ``: , / ( )`` or a space (a label that is one name: its words, ending at ``_`` or ``-``), the first
    and the last are always kept and the others added to the head and the tail in turn while they fit, so no
    name is cut in the middle (before issue #45 a label was cut at a character count). A label of one word is
    kept whole, however long."""
    if len(label) <= width:
        return label
    words = [w for w in NAME_END.split(label) if w]
    if len(words) == 1:
        words = [w for w in WORD_END.split(label) if w]
    if len(words) < 3:  # nothing in the middle to leave out
        return label
    head, tail, i, j = [words[0]], [words[-1]], 1, len(words) - 2
    while i <= j:
        grew = False
        for side in ("head", "tail"):
            if i > j:
                break
            word = words[i] if side == "head" else words[j]
            if sum(map(len, head + tail)) + 1 + len(word) > width:
                continue
            if side == "head":
                head, i, grew = head + [word], i + 1, True
            else:
                tail, j, grew = [word] + tail, j - 1, True
        if not grew:
            break
    if i > j:  # nothing left out
        return label
    short = "".join(head) + "…" + "".join(tail)
    return short if len(short) < len(label) else label


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=WIDTH, break_on_hyphens=False, break_long_words=True)


def _fit(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> tuple:
    """The table with its first two columns (policy, backend) shortened (:func:`short_label`) until its lines fit
    in :data:`WIDTH` (not below 10 characters), and the notes that give the shortened labels in full."""
    table, cut = md_table(headers, rows, align, pad=True).rstrip("\n"), {}
    for width in range(LABEL_WIDTH, 9, -1):
        shown = [[short_label(r[0], width), short_label(r[1], max(width // 2, 10))] + list(r[2:]) for r in rows]
        if any(len({x[c] for x in shown}) < len({x[c] for x in rows}) for c in (0, 1)):
            break  # two labels would be cut alike: keep the last unambiguous table
        table = md_table(headers, shown, align, pad=True).rstrip("\n")
        cut = {x[c]: r[c] for x, r in zip(shown, rows) for c in (0, 1) if x[c] != r[c]}
        if max(map(len, table.splitlines())) <= WIDTH:
            break
    return table, [_wrap(f"- `{c}` = `{f}`") for c, f in cut.items()]


def main_markdown(results: Results, plan: EvalPlan) -> str:
    """The main table: per policy × backend, rounds and time to Ω and final accuracy (mean [95% CI]),
    Δ rounds against the reference (paired 95% CI), and how many episodes reached Ω."""
    ref = results.reference
    headers = ["policy", "backend", "rounds to Ω", "time to Ω (s)"] + ([f"Δ rounds vs {ref}"] if ref else [])
    headers += ["final acc", "reached"]
    rows = []
    for s in results.series:
        cells = [s.policy, s.backend] + [s.intervals[m].text(FORMATS[m]) for m in ("rounds_to_target", "time_to_target")]
        if ref:
            d = s.deltas.get("rounds_to_target")
            cells.append("reference" if s.policy == ref else (d.text("+.1f") if d else "—"))
        fa = s.intervals["final_accuracy"]
        cells += [f"{fa.mean:.3f}" if math.isfinite(fa.mean) else "—", f"{s.reached}/{s.episodes}"]
        rows.append(cells)
    cfg = plan.env_config
    missed = any(s.intervals[m].missed for s in results.series for m in TO_TARGET)
    table, notes = _fit(headers, rows, "ll" + "r" * (len(headers) - 2))
    text = [_wrap(f"**Main results** on `{plan.env_name}`: N = {cfg['num_clients']} clients, K = "
                  f"{cfg['clients_per_round']} per round ({cfg['action_mode']}), target Ω = {cfg['target_accuracy']}, "
                  f"at most {results.cap} rounds, seeds {_seeds(plan.seeds)}. Mean over seeds [95% bootstrap CI]."),
            "", table, ""]
    if missed:
        text.append(_wrap(f"Cells marked * count an episode that missed Ω as the cap ({results.cap} rounds; for "
                          f"time, the simulated time when it ended): the mean is a lower bound (reached = episodes "
                          f"that reached Ω)."))
    if ref:
        text.append(_wrap(f"Δ rounds vs {ref}: this policy's rounds to Ω minus {ref}'s on the same seed and "
                          f"backend, mean over the seeds [paired 95% bootstrap CI]; negative = fewer rounds. "
                          f"main_table.csv also has Δ time and Δ final accuracy."))
    else:
        text.append(_wrap("No paired differences: no reference policy was evaluated (`random` by default; "
                          "--reference POLICY names another)."))
    return "\n".join(text + notes) + "\n"


def fairness_markdown(results: Results) -> str:
    """The fairness table: per policy × backend, the mean over seeds of each fairness metric."""
    headers = ["policy", "backend"] + [FAIRNESS_HEADERS[m] for m in FAIRNESS]
    rows = []
    for s in results.series:
        cells = [s.policy, s.backend]
        for m in FAIRNESS:
            v = s.intervals[m].mean
            cells.append(f"{v:{FORMATS[m]}}" if math.isfinite(v) else "—")
        rows.append(cells)
    table, notes = _fit(headers, rows, "ll" + "r" * len(FAIRNESS))
    text = ["**Fairness** (mean over seeds; 95% bootstrap CIs in fairness_table.csv and fairness.png)", "",
            table, "",
            _wrap("Jain (picks): Jain's index of the clients' participation counts (1 = everyone equally often). "
                  "Client acc std / worst 10% / best 10%: over the N final per-client test accuracies (std; mean "
                  "of the worst and best 10%). Min part. rate: the least-picked client's rounds / the episode's "
                  "rounds.")]
    return "\n".join(text + notes) + "\n"


def summary_markdown(results: Results, plan: EvalPlan) -> str:
    """``summary.md``: the main table, then the fairness table."""
    return main_markdown(results, plan) + "\n" + fairness_markdown(results)


def rows_csv(rows: Sequence[Mapping[str, Any]], columns: Optional[Sequence[str]] = None) -> str:
    """CSV text of ``rows`` (columns: ``columns``, or every row's keys in the order they first appear); a
    missing value, None or NaN as an empty cell, floats at full precision."""
    buf = io.StringIO()
    cols = list(columns) if columns is not None else list(dict.fromkeys(k for row in rows for k in row))
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for row in rows:
        w.writerow({k: _csv_value(row.get(k)) for k in cols})
    return buf.getvalue()


def _csv_value(v: Any) -> Any:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return repr(v) if isinstance(v, float) else v


def episodes_csv(records: Sequence[Mapping[str, Any]], plan: EvalPlan) -> str:
    """``episodes.csv``: one row per episode (plan order), its identity and every metric of :data:`METRICS`."""
    order = {(p, b): i for i, (p, b) in enumerate(plan.series())}
    ranked = sorted(records, key=lambda r: (order.get((r["policy"], r["backend"]), len(order)), r["seed"]))
    rows: List[Dict[str, Any]] = []
    for r in ranked:
        row = {k: r.get(k) for k in ("policy", "backend", "seed", "reached", "diverged")}
        row.update({k: r["metrics"].get(k) for k in METRICS})
        rows.append(row)
    return rows_csv(rows, ["policy", "backend", "seed", "reached", "diverged", *METRICS])


def _seeds(seeds: Sequence[int]) -> str:
    s = list(seeds)
    if len(s) > 2 and s == list(range(s[0], s[0] + len(s))):
        return f"{s[0]}–{s[-1]}"
    return ", ".join(map(str, s)) if len(s) <= 8 else f"{', '.join(map(str, s[:6]))}, … ({len(s)} seeds)"


__all__ = ["FAIRNESS_HEADERS", "FORMATS", "LABEL_WIDTH", "WIDTH", "episodes_csv", "fairness_markdown",
           "main_markdown", "rows_csv", "short_label", "summary_markdown"]
