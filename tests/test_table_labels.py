"""Long policy labels in the evaluation's tables (``fedsel_eval/tables.py``, issue #45): shortened by leaving out
whole names from the middle, never cut inside a name, and given in full under the table."""
from __future__ import annotations

import re

import pytest

from fedsel_eval import tables


@pytest.mark.parametrize("label, width, shown", [
    ("dqn:runs/quickstart/seed0/dqn_fedsel.zip", 26, "dqn:runs/…dqn_fedsel.zip"),
    ("lookahead:objective=time_to_target,candidates=32", 26, "lookahead:…candidates=32"),
    ("rbcsf:v=10,beta=0.1", 14, "rbcsf:…beta=0.1"),
    ("a_policy_label_far_longer_than_a_cell", 26, "a_policy_label_far_…a_cell"),
    ("pow_d(d=20)", 8, "pow_d(d=20)"),          # two names: nothing in the middle to leave out
    ("supercalifragilisticexpialidocious", 10, "supercalifragilisticexpialidocious"),  # one word: whole
    ("random", 26, "random"),
])
def test_a_label_loses_whole_names_from_its_middle(label, width, shown):
    assert tables.short_label(label, width) == shown


def test_no_name_is_ever_cut():
    labels = ["dqn:runs/quickstart/seed0/dqn_fedsel.zip", "my_pkg.agents:Greedy:k=2,alpha=0.5",
              "set_es:model=runs/bench_learned/FreeRiders/set_es_seed2", "a_policy_label_far_longer_than_a_cell"]
    for label in labels:
        names = [w for w in tables.NAME_END.split(label) if w]
        if len(names) == 1:
            names = [w for w in tables.WORD_END.split(label) if w]
        for width in range(8, len(label) + 2):
            short = tables.short_label(label, width)
            if short == label:
                continue
            head, tail = short.split("…")
            assert any(head == "".join(names[:a]) and tail == "".join(names[b:])
                       for a in range(1, len(names)) for b in range(a + 1, len(names))), (label, width, short)


def test_the_main_table_shows_whole_names_and_the_full_label_below():
    import fedsel_eval as ev
    from test_eval_results import record

    label = "dqn_quickstart_seed0_of_the_readmes_sb3_script"
    plan = ev.make_plan(env="tiny", policies=["random", f"{label}=fedcs"], seeds=[0, 1], rounds=5)
    res = ev.compare([record(p, s, 3 + s) for p in ("random", label) for s in (0, 1)], plan)
    md = tables.main_markdown(res, plan)
    cell = next(line for line in md.splitlines() if line.startswith("| dqn_")).split("|")[1].strip()
    head, tail = cell.split("…")  # whole words only (before issue #45: "dqn_quicksta…es_sb3_script")
    words = label.split("_")
    assert head.endswith("_") and label.startswith(head) and label.endswith(tail)
    assert set(head[:-1].split("_")) | set(tail.split("_")) <= set(words)
    assert f"- `{cell}` = `{label}`" in md
