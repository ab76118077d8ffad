"""The generalist track's tables (fedsel_eval/generalist.py, issue #42): what a weight vector leans on, the marks of a
clear difference against random, the transfer table's layout."""
from __future__ import annotations

from fedsel_eval import records
from fedsel_eval.generalist import _mark, leans_on, transfer_table, versus_table


def test_leans_on_reads_the_direction_of_each_seeds_weights_not_their_scale():
    a = {"loss": 3.0, "cover_pick": -4.0, "available": 0.0, "w": 0.1}
    b = {"loss": 0.3, "cover_pick": -0.4, "available": 0.0, "w": 0.01}  # the same direction, a tenth the length
    assert leans_on([a]) == leans_on([b]) == leans_on([a, b])
    assert leans_on([a], top=2) == "`cover_pick` -0.80, `loss` +0.60"
    # two seeds that disagree: the mean of their unit vectors
    c = {"loss": -3.0, "cover_pick": -4.0, "available": 0.0, "w": 0.0}
    assert leans_on([a, c], top=1) == "`cover_pick` -0.80"


def test_a_mark_needs_the_ci_across_training_seeds_to_exclude_zero_in_the_objectives_direction():
    lower = {"lower_is_better": True}
    assert _mark({**lower, "delta_vs_random_ci_across": [-3.0, -1.0]}) == " ▲"  # fewer rounds than random
    assert _mark({**lower, "delta_vs_random_ci_across": [1.0, 3.0]}) == " ▼"
    assert _mark({**lower, "delta_vs_random_ci_across": [-1.0, 3.0]}) == ""
    higher = {"lower_is_better": False}
    assert _mark({**higher, "delta_vs_random_ci_across": [0.01, 0.2]}) == " ▲"  # a higher worst-10% accuracy
    assert _mark({**higher, "delta_vs_random_ci_across": [None, None]}) == ""  # one training seed: no CI


def _cell(source, target, normalised, ci, objective="rounds_to_target"):
    return {"source": source, "scenario": target, "normalised": normalised, "delta_vs_random_ci_across": ci,
            "lower_is_better": objective != "acc_worst10", "objective": objective, "best_heuristic": "kcenter_cover",
            "best_heuristic_normalised": 0.5, "delta_vs_best_heuristic": 1.0,
            "delta_vs_best_heuristic_ci_across": [0.0, 2.0]}


def test_the_transfer_table_puts_sources_in_rows_targets_in_columns_and_the_diagonal_in_bold():
    rec = records.Record("t", config={})
    rec.notes["transfer"] = [_cell("A", "A", 0.8, [-5.0, -2.0]), _cell("A", "B", -0.3, [1.0, 4.0]),
                             _cell("B", "A", 0.1, [-2.0, 1.0]), _cell("generalist", "B", 0.4, [-3.0, -1.0])]
    rec.notes["source_weights"] = {"A": {"0": {"loss": 1.0, "w": 0.0}}}
    lines = transfer_table(rec).splitlines()
    assert lines[0].split("|")[1:4] == [" trained on ↓ / played on → ", " A ", " B "]
    row = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[2:-1]] for ln in lines[2:]}
    assert row["A"] == ["**+0.80 ▲**", "-0.30 ▼", "`loss` +1.00, `w` +0.00"]
    assert row["B"] == ["+0.10", "·", ""]  # B's own cell not measured: a dot, never a number
    assert row["generalist (its objective's family)"] == ["·", "+0.40 ▲", ""]
    assert row["best heuristic"][:2] == ["+0.50 `kcenter_cover`", "+0.50 `kcenter_cover`"]
    versus = versus_table(rec)  # per target: its own model, the best from elsewhere, the generalist
    b = next(ln for ln in versus.splitlines() if ln.startswith("| B "))
    assert "from A: -0.30" in b and b.rstrip(" |").endswith("+0.40 (+1.0 [+0.0, +2.0])")


def test_an_empty_record_says_nothing_was_measured():
    assert "no transfer measured yet" in transfer_table(records.Record("t", config={}))
