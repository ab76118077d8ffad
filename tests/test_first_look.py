"""``evaluate.py``'s first look and its suites (issue #45): no arguments run a live comparison where selection
matters; a suite shows every heuristic beside a new policy; a suite's run folder is never silently overwritten;
``--list`` names every registered env id."""
from __future__ import annotations

import json

import gymnasium as gym
import pytest

import evaluate
from fedsel_eval import bench, leaderboard

#: a smoke-sized suite run: one digits scenario, 2 rounds, one seed
SMOKE = ["--suite", "bench", "--scenarios", "Churn", "--rounds", "2", "--seeds", "0", "--no-progress", "--no-plots"]


def _policies(folder):
    return set(json.loads((folder / "leaderboard.json").read_text())[0]["policies"])


@pytest.mark.parametrize("argv", [[], ["--no-plots"], ["--out", "x", "--no-progress"], ["--resume"], ["--n-envs", "4"]])
def test_no_argument_that_says_what_to_evaluate_runs_the_first_look(argv):
    assert evaluate.parse_args(argv).suite == "first-look"


@pytest.mark.parametrize("argv", [["--env", "default"], ["--policy", "afl"], ["--seeds", "0", "1"], ["--workers", "2"],
                                  ["--config", "configs/eval/hetero_system.yaml"], ["--suite", "bench"]])
def test_any_argument_that_says_what_keeps_its_old_meaning(argv):
    assert evaluate.parse_args(argv).suite in (None, "bench")


def test_the_first_look_is_digits_scenarios_with_headroom_played_live():
    from fedsel_env.bench import SCENARIOS

    look = bench.SUITES["first-look"]
    assert look["reuse_reference"] is False and len(look["seeds"]) >= 5
    for name in look["scenarios"]:
        assert SCENARIOS[name].config.get("dataset", "digits") == "digits"  # embedded data: nothing to download
    ref = {s["scenario"]: s for s in _reference_summaries()}  # the committed reference: headroom CI above 0
    assert all(not ref[n]["low_headroom"] for n in look["scenarios"])


def _reference_summaries():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from experiments.bench_reference import record_summaries

    return record_summaries()


def test_a_first_look_smoke_run_plays_every_episode_and_prints_the_leaderboard(tmp_path, monkeypatch, capsys):
    called = []
    monkeypatch.setattr(bench, "reference_rows", lambda *a, **k: called.append(1) or [])
    out = evaluate.main(["--suite", "first-look", "--scenarios", "Stragglers", "--rounds", "2", "--seeds", "0",
                         "--runs-dir", str(tmp_path), "--no-progress", "--no-plots"])
    assert out == tmp_path / "first-look" and not called  # nothing taken from the committed reference
    printed = capsys.readouterr().out
    assert "**First look**" in printed and "**Stragglers**" in printed and "Against random" in printed
    assert _policies(out) == {*bench.heuristic_policies(), "lookahead"}


def test_a_new_policy_is_shown_beside_every_heuristic(tmp_path):
    evaluate.main(SMOKE + ["--policy", "mine=pow_d:d=10", "--out", str(tmp_path)])
    shown = _policies(tmp_path)
    assert {"mine", "random", "lookahead", "pow_d", "kcenter_cover", "afl", "oort"} <= shown
    assert shown == {*bench.heuristic_policies(), "mine", "lookahead"}
    assert "| mine |" in (tmp_path / "leaderboard.md").read_text()


def test_a_suite_folder_is_never_silently_overwritten(tmp_path):
    out = tmp_path / "mine"
    evaluate.main(SMOKE + ["--out", str(out)])
    files = [out / "leaderboard.md", out / "leaderboard.json", out / "Churn" / "episodes.jsonl"]
    before = [f.read_bytes() for f in files]
    with pytest.raises(ValueError, match=r"already holds a suite run .*--resume.*--overwrite.*--name / --out"):
        evaluate.main(SMOKE + ["--out", str(out), "--policy", "afl:alpha1=0.5"])
    assert [f.read_bytes() for f in files] == before  # nothing touched
    evaluate.main(SMOKE + ["--out", str(out), "--resume"])  # continued: nothing replayed
    assert files[2].read_bytes() == before[2]
    evaluate.main(SMOKE + ["--out", str(out), "--overwrite"])  # started over
    assert len((out / "Churn" / bench.EPISODES).read_text().splitlines()) == len(bench.heuristic_policies()) + 1
    with pytest.raises(ValueError, match="exclude each other"):
        evaluate.main(SMOKE + ["--out", str(out), "--overwrite", "--resume"])


def test_suite_folders_are_numbered_as_plain_run_folders_are(tmp_path):
    first = evaluate.main(SMOKE + ["--runs-dir", str(tmp_path)])
    second = evaluate.main(SMOKE + ["--runs-dir", str(tmp_path)])
    assert (first, second) == (tmp_path / "bench", tmp_path / "bench-2")
    assert evaluate.main(SMOKE + ["--runs-dir", str(tmp_path), "--resume"]) == second  # the latest


def test_list_names_every_registered_env_id(capsys):
    evaluate.main(["--list"])
    printed = capsys.readouterr().out
    ids = [i for i in gym.registry if i.startswith("fedsel/")]
    assert len(ids) >= 16 and all(f"  {i}: " in printed for i in ids)
    assert "fedsel/Bench-Large-v0" in printed and "fedsel/MOFedSelect-v0" in printed


def test_versus_random_names_the_policies_whose_paired_ci_excludes_zero():
    def iv(m, lo, hi):
        return {"vs_random": {"mean": m, "lo": lo, "hi": hi, "n": 6, "missed": 0}}

    s = {"scenario": "NoisyLabels", "objective": "rounds_to_target", "lower_is_better": True, "headroom": {},
         "policies": {"random": iv(0, 0, 0), "lookahead": iv(-7, -13, -1), "kcenter_cover": iv(-5.2, -9.0, -1.0),
                      "pow_d": iv(-8.0, -12.0, -4.0), "afl": iv(28, 12, 44), "qffl": iv(-3.3, -11.7, 5.0),
                      "one_seed": iv(-3.0, None, None)}}
    assert leaderboard.versus_random([s]) == ["NoisyLabels (rounds_to_target, lower is better): ahead `pow_d` -8.0 "
                                        "[-12.0, -4.0], `kcenter_cover` -5.2 [-9.0, -1.0]; behind `afl`"]
    churn = {**s, "scenario": "Churn", "objective": "acc_worst10", "lower_is_better": False}
    assert leaderboard.versus_random([churn]) == ["Churn (acc_worst10, higher is better): ahead `afl` +28.000 "
                                            "[+12.000, +44.000]; behind `kcenter_cover`, `pow_d`"]


def test_a_run_on_the_default_preset_says_it_has_little_headroom(tmp_path, capsys):
    evaluate.main(["--env", "default", "--env-kwargs", "max_rounds=1", "--policy", "random", "--seeds", "0",
                   "--out", str(tmp_path / "d"), "--no-plots", "--no-progress"])
    assert "the default preset has little headroom" in capsys.readouterr().out
    evaluate.main(["--env", "tiny", "--policy", "random", "--seeds", "0", "--out", str(tmp_path / "t"), "--no-plots",
                   "--no-progress"])
    assert "little headroom" not in capsys.readouterr().out
