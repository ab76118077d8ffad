"""``RoundOutcome``, what a custom reward reads (issue #45): every field documented in docs/ENVIRONMENT.md, and
what the table says of the clock and the round counter holds on a played episode."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from fedsel_env.rewards import REWARDS, RoundOutcome

DOC = Path(__file__).resolve().parents[1] / "docs" / "ENVIRONMENT.md"


def test_every_field_is_in_the_environment_docs_table():
    text = DOC.read_text()
    section = text[text.index("### What a reward sees: `RoundOutcome`"):]
    section = section[:section.index("\n## ")]
    documented = {name for row in section.splitlines() if row.startswith("| `")
                  for name in re.findall(r"`(\w+)`", row.split("|")[1])}
    assert documented == {f.name for f in dataclasses.fields(RoundOutcome)}


class _Keep:
    """A reward that keeps every outcome it is given."""

    seen: list = []

    def __call__(self, outcome: RoundOutcome) -> float:
        _Keep.seen.append(outcome)
        return 0.0


@pytest.fixture
def keeping():
    REWARDS.register("_keep_outcomes")(_Keep)
    _Keep.seen = []
    yield _Keep.seen
    REWARDS.pop("_keep_outcomes", None)


@pytest.mark.parametrize("mode", ["topk", "one"])
def test_the_documented_relations_hold(make_env, keeping, mode):
    env = make_env(reward="_keep_outcomes", action_mode=mode, one_mode_step="1/K", max_rounds=3)
    _, info = env.reset(seed=1)
    action = np.ones(env.num_clients, np.float32) if mode == "topk" else 0
    done, infos = False, []
    while not done:
        _, _, term, trunc, info = env.step(action)
        infos.append(info)
        done = term or trunc
    prev_clock, prev_acc = 0.0, None
    for t, (o, i) in enumerate(zip(keeping, infos), 1):
        assert o.round == t == i["round"] and o.clock == i["clock"] and o.round_time == i["round_time"]
        assert o.prev_clock == prev_clock and o.clock == o.prev_clock + o.round_time
        assert o.accuracy == i["accuracy"] and (prev_acc is None or o.prev_accuracy == prev_acc)
        assert o.target == env.config["target_accuracy"] and o.final == (t == len(infos))
        assert o.participation.shape == o.client_accuracies.shape == (env.num_clients,)
        prev_clock, prev_acc = o.clock, o.accuracy
