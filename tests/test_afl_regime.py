"""experiments/afl_regime.py (issue #20): it runs end to end in its --smoke configuration (tune, then report,
writing its table, numbers and figure into its own folder and leaving docs/ alone), rounds to Ω read off a
tuning curve are the rounds at which the env itself ends the episode, and the verdict follows the CI."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from experiments import afl_regime, common  # noqa: E402


def _docs_state() -> dict:
    files = [common.DOC, *sorted(common.IMG_DIR.glob("repro_*.png")), *sorted(common.RESULTS_DIR.glob("*.json"))]
    return {str(f): f.stat().st_mtime_ns for f in files if f.exists()}


@pytest.mark.slow
def test_smoke_run_tunes_then_reports_and_leaves_docs_alone(tmp_path):
    before = _docs_state()
    out = afl_regime.main(["--smoke", "--out", str(tmp_path / "afl_regime"), "--no-progress"])
    table = (out / "table.md").read_text()
    assert "--smoke" in table and "wall time for this invocation on this machine" in table
    assert "Produced at commit" in table and "img/repro_afl_regime.png" in table
    res = json.loads((out / "results.json").read_text())
    assert "commit" in res and "dirty" in res
    s = afl_regime.SMOKE
    # every policy was tuned at every rate, and each method chose among its own policies only
    assert set(res["tuning_grid"]) == {"random", *(label for label, _ in s["afl"]), *afl_regime.EXTRA}
    for pol, cells in res["tuning_grid"].items():
        assert set(cells) == {f"{lr:g}" for lr in s["rates"]}
        assert all(len(c["rounds"]) == len(s["tune_seeds"]) for c in cells.values())
    for method, labels in s["methods"].items():
        assert res["chosen"][method]["policy"] in labels
        c = res["chosen"][method]
        best = min(res["tuning_grid"][p][f"{lr:g}"]["mean_rounds"] for p in labels for lr in s["rates"])
        assert c["tune_mean_rounds"] == best
    # the report pairs every method with random on every reporting seed
    for method in s["methods"]:
        assert res["report"][method]["episodes"] == len(s["report_seeds"])
    assert "verdict" not in res["report"]["random_nk"]  # a control: the verdict is AFL's against uniform sampling
    assert "rounds_vs_random_nk" in res["report"]["afl"] and res["report"]["afl"]["samples_per_round"] > 0
    assert res["report"]["afl"]["verdict"] in ("reproduced", "partly reproduced", "not reproduced", "inconclusive")
    assert (out / "afl_regime.png").stat().st_size > 1000
    assert list(out.rglob("episodes.jsonl"))  # evaluate.py run folders
    assert _docs_state() == before, "a --smoke run must not touch docs/ or experiments/results/"
    # resumable: a second invocation reuses every finished episode and gives the same numbers
    again = json.loads((afl_regime.main(["--smoke", "--out", str(out), "--no-progress"]) / "results.json").read_text())
    assert again["report"] == res["report"] and again["tuning_grid"] == res["tuning_grid"]


def test_reporting_seeds_may_not_overlap_the_tuning_seeds(tmp_path):
    with pytest.raises(ValueError, match="tuning seeds"):
        afl_regime.main(["--smoke", "--out", str(tmp_path), "--seeds", "0", "100"])


def test_rounds_read_off_a_curve_are_where_the_env_ends_the_episode():
    from agents import make
    from fedsel_env.config import PRESETS
    from fedsel_env.env import FedSelectEnv

    def play(target: float):
        cfg = {**PRESETS["tiny"], "system": {"availability": 1.0}, "max_rounds": 8, "target_accuracy": target}
        with FedSelectEnv(config=cfg) as env:
            obs, info = env.reset(seed=3)
            agent = make("random", env.selection_spec, seed=0)
            acc, done = [float(info["accuracy"])], False
            while not done:
                obs, _, term, trunc, info = env.step(agent.to_action(agent.select(obs)))
                acc.append(float(info["accuracy"]))
                done = term or trunc
            return acc, term

    curve, _ = play(1.0)
    assert len(curve) == 9
    for r in (2, 5):
        omega = curve[r]
        ended, reached = play(omega)
        assert reached and len(ended) - 1 == afl_regime.rounds_from_curve(curve, omega, 8)
    assert afl_regime.rounds_from_curve(curve, 1.01, 8) == 8  # never reached: the cap
    assert afl_regime.rounds_from_curve([0.9, 0.1, 0.5], 0.8, 2) == 2  # round 0 (w_0) never counts


@pytest.mark.parametrize("change, expected", [
    ({"mean": -35.0, "lo": -50.0, "hi": -20.0}, "reproduced"),
    ({"mean": -10.0, "lo": -15.0, "hi": -5.0}, "partly reproduced"),
    ({"mean": 8.0, "lo": 2.0, "hi": 14.0}, "not reproduced"),
    ({"mean": 1.0, "lo": -8.0, "hi": 10.0}, "not reproduced"),   # −20% lies outside the CI
    ({"mean": -10.0, "lo": -30.0, "hi": 10.0}, "inconclusive"),
])
def test_verdict_follows_the_confidence_interval(change, expected):
    assert afl_regime.verdict(change)[0] == expected
