"""The reproduction scripts (experiments/): each runs end to end in its --smoke configuration, writes its
table, numbers and figures into its own folder and leaves docs/ alone; the shared helpers do what the
document relies on (fragments spliced between their markers, rounds-to-target cells that never hide an
episode that missed the target)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the scripts live in experiments/ at the repository root, not in the package
    sys.path.insert(0, str(ROOT))

from fedsel_eval import recompute, records
from experiments import (afl_rounds, common, favor_fmnist, favor_study, fedmgda_fairness, per_client_study,
                         qffl_synthetic, rbcsf_fairness, round_cost)

SCRIPTS = {"favor_fmnist": favor_fmnist, "favor_study": favor_study, "qffl_synthetic": qffl_synthetic, "afl_rounds": afl_rounds,
           "fedmgda_fairness": fedmgda_fairness, "rbcsf_fairness": rbcsf_fairness, "round_cost": round_cost,
           "per_client_study": per_client_study}
#: Scripts that only time the simulator (no episodes, so no evaluate.py run folder).
TIMING_ONLY = {"round_cost"}
#: Scripts whose runs are fedsel_eval/chunked.py runs (checkpoints and a progress file, not evaluate.py folders).
CHUNKED = {"qffl_synthetic"}


def _docs_state() -> dict:
    files = [common.DOC, *sorted(common.IMG_DIR.glob("repro_*.png")), *sorted(common.RESULTS_DIR.glob("*.json"))]
    return {str(f): f.stat().st_mtime_ns for f in files if f.exists()}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_script_runs_in_its_smoke_configuration(name, tmp_path):
    before = _docs_state()
    out = SCRIPTS[name].main(["--smoke", "--out", str(tmp_path / name), "--no-progress"])
    assert out == tmp_path / name
    table = (out / "table.md").read_text()
    assert table.count("|---") >= 1 and "wall time for this invocation on this machine" in table
    assert "--smoke" in table  # the fragment says how it was made
    results = json.loads((out / "results.json").read_text())
    assert results  # the numbers behind the table
    assert "commit" in results and "dirty" in results and "Produced at commit" in table  # where they came from
    # the record the script publishes (#34): rows, and every summary recomputed from them
    record = records.load(out / "record.json")
    assert record["rows"] and record["chunks"] and record["summaries"]
    assert all(not s.get("summary_only") for s in record["summaries"])
    assert recompute.main(["--quiet", str(out / "record.json")]) == 0
    if name in CHUNKED:
        runs = json.loads((out / "progress.json").read_text())["settings"]
        assert all(r["status"] == "finished" for s in runs.values() for r in s["runs"].values())
    if name not in TIMING_ONLY:
        pngs = sorted(out.glob(f"{name}*.png"))
        assert pngs and all(p.stat().st_size > 1000 for p in pngs)
        for png in pngs:  # the fragment embeds every figure the script made
            assert f"img/repro_{png.stem}.png" in table
        # every evaluation part is an evaluate.py run folder
        assert name in CHUNKED or any(p.name == "episodes.jsonl" for p in out.rglob("episodes.jsonl"))
    assert _docs_state() == before, "a --smoke run must not touch docs/ or experiments/results/"


def test_bad_arguments_fail_with_the_option_named(tmp_path):
    with pytest.raises(ValueError, match="--workers"):
        afl_rounds.main(["--smoke", "--out", str(tmp_path), "--workers", "0"])
    with pytest.raises(ValueError, match="--seeds"):
        afl_rounds.main(["--smoke", "--out", str(tmp_path), "--seeds", "1", "1"])
    with pytest.raises(ValueError, match="--rounds"):
        qffl_synthetic.main(["--smoke", "--out", str(tmp_path), "--rounds", "0"])
    with pytest.raises(ValueError, match="--q"):
        qffl_synthetic.main(["--smoke", "--out", str(tmp_path), "--q", "1", "-1"])
    with pytest.raises(ValueError, match="--max-minutes"):
        qffl_synthetic.main(["--smoke", "--out", str(tmp_path), "--max-minutes", "-1"])
    with pytest.raises(ValueError, match="--ray"):
        qffl_synthetic.main(["--smoke", "--out", str(tmp_path), "--ray"])


def test_splice_replaces_only_its_own_block(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("intro\n<!-- repro:a begin -->\nold a\n<!-- repro:a end -->\nmiddle\n"
                   "<!-- repro:b begin -->\nold b\n<!-- repro:b end -->\nend\n")
    common.splice(doc, "a", "new a | with $1 and \\1 kept literally")
    text = doc.read_text()
    assert "old a" not in text and "new a | with $1 and \\1 kept literally" in text
    assert "old b" in text and text.startswith("intro\n") and text.endswith("end\n")
    common.splice(doc, "c", "fresh c")  # absent markers: appended with its markers
    assert doc.read_text().rstrip().endswith("<!-- repro:c begin -->\nfresh c\n<!-- repro:c end -->")


def _ep(reached: bool, rounds: float) -> dict:
    return {"reached": reached, "metrics": {"rounds_to_target": rounds if reached else float("nan")}}


def test_rounds_cell_shows_every_missed_target():
    assert common.rounds_cell([_ep(True, 10), _ep(True, 20)], cap=50) == "15.0 ± 5.0"
    assert common.rounds_cell([_ep(True, 10), _ep(False, 50)], cap=50) == "10.0 (1/2; 1 > 50)"
    assert common.rounds_cell([_ep(False, 50)] * 3, cap=50) == "> 50 (0/3)"
    # the lower bound counts a miss at the cap
    assert common.rounds_lower_bound([_ep(True, 10), _ep(False, 50)], cap=50) == 30.0


def test_command_line_leaves_out_the_machine_specific_folder():
    assert common.command_line("x.py", ["--out", "/tmp/a", "--workers", "2", "--out=/b"]) == \
        ".venv/bin/python experiments/x.py --workers 2"


# ------------------------------------------------------------------------------------------- provenance
def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_provenance_names_the_commit_and_uncommitted_code(tmp_path):
    repo = tmp_path / "repo"
    for f in ("agents/a.py", "experiments/results/x.json", "docs/d.md"):
        (repo / f).parent.mkdir(parents=True, exist_ok=True)
        (repo / f).write_text("v1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "c")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert common.provenance(repo) == {"commit": head, "dirty": False, "dirty_files": []}
    # results the scripts rewrite, docs and untracked files are not code: still clean
    (repo / "experiments/results/x.json").write_text("v2\n")
    (repo / "docs/d.md").write_text("v2\n")
    (repo / "fedsel_env").mkdir()
    (repo / "fedsel_env/new.py").write_text("untracked\n")
    assert common.provenance(repo)["dirty"] is False
    (repo / "agents/a.py").write_text("v2\n")
    prov = common.provenance(repo)
    assert prov["dirty"] is True and prov["dirty_files"] == ["agents/a.py"]
    assert "uncommitted changes" in common.provenance_note(prov) and "`agents/a.py`" in common.provenance_note(prov)


def test_without_git_the_commit_is_null_with_a_note(tmp_path):
    for prov in (common.provenance(ROOT, git=str(tmp_path / "no-such-git")), common.provenance(tmp_path)):
        assert prov["commit"] is None and prov["dirty"] is None and "no git commit recorded" in prov["commit_note"]
    assert "none recorded" in common.provenance_note(prov)


def test_results_json_and_fragment_record_the_commit(tmp_path, monkeypatch):
    out = common.Outputs("x", tmp_path / "a", publish=False)
    assert set(out.provenance) >= {"commit", "dirty", "dirty_files"}  # taken when the script starts
    data = json.loads(out.results({"n": 1}).read_text())
    assert data["n"] == 1 and data["commit"] == out.provenance["commit"] and "dirty" in data
    if data["commit"] is not None:
        assert f"`{data['commit'][:12]}`" in out.fragment("table").read_text()
    monkeypatch.setattr(common, "provenance", lambda: {"commit": None, "dirty": None, "dirty_files": None,
                                                       "commit_note": "no git commit recorded: a tarball"})
    bare = common.Outputs("x", tmp_path / "b", publish=False)
    assert json.loads(bare.results({"n": 1}).read_text())["commit"] is None
    assert "none recorded (no git commit recorded: a tarball)" in bare.fragment("table").read_text()


@pytest.mark.slow
def test_qffl_keeps_finished_runs_and_max_minutes_zero_only_tabulates(tmp_path):
    fresh = qffl_synthetic.main(["--smoke", "--out", str(tmp_path / "b"), "--no-progress", "--max-minutes", "0"])
    assert json.loads((fresh / "results.json").read_text())["runs_finished"] == 0
    argv = ["--smoke", "--out", str(tmp_path / "a"), "--no-progress", "--seeds", "0", "--q", "0"]
    out = qffl_synthetic.main(argv)
    first, commit = (out / "progress.json").read_text(), json.loads((out / "results.json").read_text())["commit"]
    qffl_synthetic.main(argv)  # nothing left to run: the progress file is as it was
    assert (out / "progress.json").read_text() == first
    runs = json.loads(first)["settings"]["smoke rounds=4 max_samples=60"]["runs"]
    assert sorted(runs) == ["qfedavg q=0 seed=0", "qfedsgd q=0 seed=0"]
    for r in runs.values():
        assert r["status"] == "finished" and r["rounds_done"] == 4 and len(r["result"]["clients"]["accuracy"]) == 12
        assert [c["commit"] for c in r["chunks"]] == [commit]  # the commit each chunk ran at


@pytest.mark.slow
def test_a_smoke_run_keeps_out_of_the_real_runs_folder(tmp_path, monkeypatch):
    """A smoke run with the default --out once shared the real run's folder, and its other config made
    the evaluation start afresh there: the real run's finished episodes were deleted."""
    monkeypatch.setattr(common, "RUNS_DIR", tmp_path)
    real = tmp_path / "afl_rounds" / "default" / "episodes.jsonl"
    real.parent.mkdir(parents=True)
    real.write_text("a finished episode\n")
    out = afl_rounds.main(["--smoke", "--no-progress"])
    assert out == tmp_path / "afl_rounds" / "smoke"
    assert (out / "table.md").is_file()
    assert real.read_text() == "a finished episode\n"


@pytest.mark.slow
def test_per_client_fresh_reports_the_trained_models_on_fresh_seeds(tmp_path):
    """experiments/per_client_fresh.py (#29's re-measurement) plays per_client_study's trained models against
    random and pow_d, writes a record whose every figure recomputes, publishes nothing in --smoke, and
    names the command that trains the models when they are missing."""
    from experiments import per_client_fresh

    with pytest.raises(ValueError, match="--part train"):
        per_client_fresh.main(["--smoke", "--models", str(tmp_path / "none"), "--out", str(tmp_path / "x"),
                               "--no-progress"])
    per_client_study.main(["--smoke", "--part", "train", "--out", str(tmp_path / "study"), "--no-progress"])
    before = _docs_state()
    out = per_client_fresh.main(["--smoke", "--models", str(tmp_path / "study" / "train"),
                                 "--out", str(tmp_path / "fresh"), "--no-progress"])
    assert _docs_state() == before
    rec = records.load(out / "record.json")
    seeds = per_client_fresh.SETTINGS["smoke"]
    assert sorted({r["seed"] for r in rec["rows"]}) == sorted(seeds["seen"] + seeds["unseen"])
    assert {r["policy"] for r in rec["rows"]} == {"random", "pow_d", "per_client"}
    assert all(r["training_seed"] == 0 for r in rec["rows"] if r["policy"] == "per_client")
    assert recompute.main(["--quiet", str(out / "record.json")]) == 0


@pytest.mark.slow
def test_bench_rl_smoke_trains_evaluates_and_reports_with_holm(tmp_path):
    """experiments/bench_rl.py (issue #41): train_agent.py on a Bench id, the models deployed two ways beside
    random and the best heuristic, a record whose every summary recomputes, and the leaderboard's fields."""
    from experiments import bench_rl

    before = _docs_state()
    bench_rl.main(["--smoke", "--out", str(tmp_path)])
    rec = records.load(tmp_path / "record.json")
    assert recompute.main(["--quiet", str(tmp_path / "record.json")]) == 0
    board = rec["notes"]["leaderboard"]
    assert {e["policy"] for e in board} == {"pl_ppo", "pl_ppo_sampled", "pl_ppo_cover", "pl_ppo_cover_sampled",
                                            "pl_ppo_cover_long", "pl_ppo_cover_long_sampled", "pc_dqn"}
    for e in board:
        assert e["learned"] is True and e["trainer"] == "sb3" and e["scenario"] == "Churn"
        assert len(e["delta_vs_best_heuristic_ci_across"]) == 2 and "p_holm" in e
    assert len(rec["notes"]["holm_family"]) == 2 * len(board)
    assert {r["training_seed"] for r in rec["rows"] if r["role"] == "learned"} == {0, 1}
    # the training curves (fedsel_eval.rl_curves): PPO's training episodes in env rounds, minus the return's sign
    curve = [r for r in rec["rows"] if r["role"] == "curve" and r["design"] == "pl_ppo"]
    # PPO logs after each rollout of n_steps (32) x 4 sub-envs: one topk step is one round
    assert {r["training_seed"] for r in curve} == {0, 1} and all(r["rounds"] % 128 == 0 for r in curve)
    assert all(0.0 <= r["objective"] <= 1.0 for r in curve)  # worst-10% accuracy, higher is better: the return
    assert (tmp_path / "bench_rl_curves.png").stat().st_size > 1000
    # --part confirm: the models re-played on seeds of their own, in a record of its own
    bench_rl.main(["--smoke", "--part", "confirm", "--out", str(tmp_path)])
    conf = records.load(tmp_path / "confirm" / "record.json")
    assert recompute.main(["--quiet", str(tmp_path / "confirm" / "record.json")]) == 0
    assert {r["seed"] for r in conf["rows"]} == {50_000, 50_001}
    assert {e["design"] for e in conf["notes"]["confirm"]} == {e["policy"] for e in board}
    assert all(len(e["delta_vs_best_heuristic_ci_across"]) == 2 for e in conf["notes"]["confirm"])
    # --eval-envs: the same episodes played several at once through the vector env give the same rows
    one_at_a_time = tmp_path / "eval_single"
    (tmp_path / "eval").rename(one_at_a_time)
    bench_rl.main(["--smoke", "--part", "eval", "--eval-envs", "3", "--out", str(tmp_path)])

    def episodes(folder):
        rows = [json.loads(x) for x in (folder / "Churn" / "episodes.jsonl").read_text().splitlines() if x]
        return sorted(({k: v for k, v in r.items() if k not in ("wall_time_s", "code")} for r in rows),
                      key=lambda r: (r["policy"], r["seed"]))

    assert episodes(tmp_path / "eval") == episodes(one_at_a_time) and len(episodes(one_at_a_time)) == 2 * (2 + 14)
    assert _docs_state() == before


def test_bench_rl_carries_the_committed_rows_of_designs_trained_elsewhere(tmp_path):
    """The campaign grows across sessions and machines (issue #41): with none of the record's models on this machine,
    the record built here holds the committed rows, curves and training costs, each in a chunk naming the commit it
    was recorded at, and gives the committed leaderboard entry for entry (Holm's family included)."""
    from experiments import bench_rl

    import argparse

    ns = argparse.Namespace(out=tmp_path, smoke=False, scenarios=sorted({n for d in bench_rl.DESIGNS.values()
                                                                        for n in d["scenarios"]}),
                            train_seeds=list(bench_rl.TRAIN_SEEDS), seeds=list(bench_rl.REPORTING_SEEDS), overrides={})
    rec = bench_rl.build_record(ns)
    committed = records.load(bench_rl.RESULT)
    key = lambda e: (e["scenario"], e["design"])  # noqa: E731
    mine, theirs = sorted(rec.notes["leaderboard"], key=key), sorted(committed["notes"]["leaderboard"], key=key)
    assert [key(e) for e in mine] == [key(e) for e in theirs]
    for a, b in zip(mine, theirs):  # figures recomputed here: equal to recompute's tolerance (another CPU's rounding)
        assert a.keys() == b.keys() and records.same(a, b), key(a)
    strip = lambda r: json.dumps({k: v for k, v in r.items() if k != "chunk"}, sort_keys=True)  # noqa: E731
    assert sorted(map(strip, rec.rows)) == sorted(map(strip, committed["rows"]))
    old_commits = {c["commit"] for c in committed["chunks"]}
    assert {c["commit"] for c in rec.chunks if c["note"].startswith("carried")} == old_commits


def _bench_learned_args(out):
    import argparse

    from experiments import bench_learned as bl

    return argparse.Namespace(out=out, scenarios=list(bl.SCENARIOS), train_seeds=list(bl.TRAIN_SEEDS),
                              seeds=list(bl.REPORTING_SEEDS), smoke=False, overrides={}, generations=None,
                              episodes=None, candidates=None, eval_every=None)


def test_bench_learned_carries_every_cell_not_played_here(tmp_path):
    """Re-recording the learned leaderboard through the front door takes many hours (issue #46), so the record grows
    over sessions: with none of its models on this machine, the report rebuilds the committed record from its own
    rows — every row, every summary (in order, equal), the leaderboard — each row in a chunk naming the commit it was
    recorded at."""
    from experiments import bench_learned as bl
    from fedsel_eval.learned import build_record

    args = _bench_learned_args(tmp_path)
    committed = records.load(bl.RESULT)
    rec = build_record(args, bl.budgets(args), ROOT, committed=committed)
    # a home cell (source = scenario) is read from bench_learned's record, which re-records cells through the front
    # door (issue #46): the same values, the config hash of the run that played them
    home = lambda r: r.get("role") == "transfer" and r.get("source") == r.get("scenario")  # noqa: E731
    strip = lambda rows: sorted(json.dumps({k: v for k, v in r.items() if k != "chunk" and not (  # noqa: E731
        k == "config_sha" and home(r))}, sort_keys=True) for r in rows)
    assert strip(rec.rows) == strip(committed["rows"])
    assert [s["name"] for s in rec.summaries] == [s["name"] for s in committed["summaries"]]
    assert all(records.same(a["value"], b["value"]) for a, b in zip(rec.summaries, committed["summaries"]))
    assert rec.notes == committed["notes"]
    commits = {c["id"]: c["commit"] for c in rec.chunks}
    assert {commits[r["chunk"]] for r in rec.rows} <= {c["commit"] for c in committed["chunks"]}
    path = tmp_path / "record.json"
    rec.write(path)
    assert recompute.main(["--quiet", str(path)]) == 0


def test_bench_learned_replaces_a_cell_trained_again_here_and_drops_its_old_models_side_rows(tmp_path):
    """A cell whose three models are trained and played here (the front door's re-record, issue #46) replaces the
    committed cell: its episodes, training cost and learning curve are this machine's, the front-door note counts how
    many of its rows equal the committed ones, and the committed 2 × N rows of the old models are not carried beside
    the new ones (they are another model's); every other cell is carried unchanged."""
    from experiments import bench_learned as bl
    from fedsel_eval.learned import build_record, run_folder

    args = _bench_learned_args(tmp_path)
    committed = records.load(bl.RESULT)
    cell = [r for r in committed["rows"] if r.get("scenario") == "FreeRiders"
            and (r.get("policy") == "set_distill" or r.get("design") == "set_distill")]
    episodes = []
    for r in committed["rows"]:  # the scenario's reporting episodes as `--part eval` writes them
        if r.get("scenario") == "FreeRiders" and r.get("role") == "learned" and r["policy"] == "set_distill":
            changed = r["training_seed"] == 1 and r["seed"] == 9003  # one episode differs from the committed one
            episodes.append({**{k: r[k] for k in ("scenario", "seed", "censored", "rounds", "sim_time", "final_accuracy",
                                                  "acc_worst10", "wall_time_s", "config_sha")},
                             "policy": f"set_distill_s{r['training_seed']}", "value": r["value"] + 2 * changed})
    eval_dir = tmp_path / "eval" / "FreeRiders"
    eval_dir.mkdir(parents=True)
    eval_dir.joinpath("episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    for t in args.train_seeds:
        folder = run_folder(tmp_path, "FreeRiders", t, "set_distill")
        folder.mkdir(parents=True)
        (train,) = [r for r in cell if r["role"] == "training" and r["training_seed"] == t]
        folder.joinpath("summary.json").write_text(json.dumps(
            {"complete": True, "train_seconds": 60.0 + t, "env_rounds": train["env_rounds"],
             "oracle_rounds": train["oracle_rounds"]}))
        folder.joinpath("progress.jsonl").write_text("".join(json.dumps(
            {"episode": r["episode"], "regret": r["regret"], "learner_best": r["learner_best"], "beta": r["beta"],
             "div_weight": r["div_weight"], "eval_mean": r["tuning_objective"]}) + "\n"
            for r in cell if r["role"] == "curve" and r["training_seed"] == t))
    rec = build_record(args, bl.budgets(args), ROOT, committed=committed)
    here = {c["id"] for c in rec.chunks if not c["note"].startswith("carried")}
    mine = [r for r in rec.rows if r.get("scenario") == "FreeRiders"
            and (r.get("policy") == "set_distill" or r.get("design") == "set_distill")]
    assert {r["role"] for r in mine} == {"learned", "training", "curve"}  # no 2 x N rows of the old models
    assert all(r["chunk"] in here for r in mine)
    assert sorted(r["train_seconds"] for r in mine if r["role"] == "training") == [60.0, 61.0, 62.0]
    assert rec.notes["front_door"]["FreeRiders/set_distill"]["rows"] == 90
    assert rec.notes["front_door"]["FreeRiders/set_distill"]["equal_to_committed"] == 89
    first = committed["notes"]["front_door"]["FreeRiders/set_distill"]  # the committed cell was re-recorded already
    assert rec.notes["front_door"]["FreeRiders/set_distill"]["first"] == first.get("first", {
        k: first[k] for k in ("played_at", "committed_rows_at", "rows", "equal_to_committed")})
    (entry,) = [e for e in rec.notes["leaderboard"] if (e["scenario"], e["policy"]) == ("FreeRiders", "set_distill")]
    (old,) = [e for e in committed["notes"]["leaderboard"]
              if (e["scenario"], e["policy"]) == ("FreeRiders", "set_distill")]
    assert entry["mean"] == pytest.approx(old["mean"] + 2 / 90)
    assert not any(s["name"].startswith("FreeRiders at N = 80: set_distill") for s in rec.summaries)
    from fedsel_eval.learned_tables import front_door_table

    board = {tuple(line.split(" | ")[:2]): line for line in front_door_table(rec).splitlines()[2:]}
    assert "| yes |" in board[("| FreeRiders", "`set_distill`")] and "89 of 90" in board[("| FreeRiders", "`set_distill`")]
    done = committed["notes"].get("front_door", {})  # every other cell as the committed record has it
    for (sc, design), line in board.items():
        if (sc, design) != ("| FreeRiders", "`set_distill`"):
            assert ("| yes |" in line) == (f"{sc[2:]}/{design.strip('`')}" in done), line
    # every other row as committed (FreeRiders' random, oracle and heuristic rows are played here: the reference's,
    # the same values; their config hash and wall time are those of the run that played them)
    others = lambda rows: sorted(json.dumps({k: v for k, v in r.items()  # noqa: E731
                                             if k not in ("chunk", "config_sha", "wall_time_s")}, sort_keys=True)
                                 for r in rows if not (r.get("scenario") == "FreeRiders" and (
                                     r.get("policy") == "set_distill" or r.get("design") == "set_distill")))
    assert others(rec.rows) == others(committed["rows"])


def test_bench_generalist_smoke_trains_on_a_family_and_scores_on_a_bench_scenario(tmp_path):
    """experiments/bench_generalist.py (issue #42): set_es trained on family:MixedWorst10 only (train_agent.py), its
    weights played unchanged on Churn beside random and the best heuristic; a record whose every summary recomputes,
    and per scenario and design the entry the generalist track asks for."""
    from experiments import bench_generalist

    before = _docs_state()
    bench_generalist.main(["--smoke", "--out", str(tmp_path)])
    path = tmp_path / "record_reporting.json"
    rec = records.load(path)
    assert recompute.main(["--quiet", str(path)]) == 0
    (e,) = rec["notes"]["leaderboard"]
    assert e["generalist"] is True and e["scenario"] == "Churn" and e["design"] == "set_es"
    assert e["family"] == "MixedWorst10" and e["best_heuristic"] == "pow_d"
    assert "normalised" in e and len(e["delta_vs_random_ci_across"]) == 2
    assert {r["training_seed"] for r in rec["rows"] if r["role"] == "generalist"} == {0, 1}
    # what transfers: every other scenario's own set_es models (bench_learned's weights) played on Churn, one table cell
    # each with its differences across training seeds, in one Holm family with the generalist's
    learned = records.load(bench_generalist.LEARNED)
    sources = {r["scenario"] for r in learned["rows"] if r.get("role") == "weights" and r.get("design") == "set_es"}
    cells = [c for c in rec["notes"]["transfer"] if c["source"] != "generalist"]
    assert {c["source"] for c in cells} == sources - {"Churn"} and all(c["scenario"] == "Churn" for c in cells)
    assert all(len(c["delta_vs_best_heuristic_ci_across"]) == 2 and "p_holm_vs_random" in c for c in cells)
    assert rec["notes"]["holm_family"] == 2 * (len(cells) + 1)
    assert not [r for r in rec["rows"] if r["role"] == "transfer" and r["source"] == "Churn"]  # 3-round smoke: not
    # the committed full episodes
    # the learning curves: each curve point's episodes on the family's tuning draw, random and kcenter_cover beside
    curve = [r for r in rec["rows"] if r["role"] == "family_curve"]
    assert {(r["family"], r["training_seed"], r["seed"]) for r in curve} == {("MixedWorst10", 0, 3000000),
                                                                            ("MixedWorst10", 1, 3000000)}
    assert {r["policy"] for r in rec["rows"] if r["role"] == "family_reference"} == {"random", "kcenter_cover"}
    assert (tmp_path / "generalist_curves.png").is_file()
    folder = tmp_path / "per_scenario" / "set_es" / "FreeRiders" / "seed0"  # a playable run folder of the weights
    assert json.loads((folder / "set_es.json").read_text())["params"] == {
        r["param"]: r["value"] for r in learned["rows"] if r.get("role") == "weights" and r.get("design") == "set_es"
        and r["scenario"] == "FreeRiders" and r["training_seed"] == 0}
    for t in (0, 1):  # trained on the family, never on Churn
        policy = json.loads((tmp_path / "set_es" / "MixedWorst10" / f"seed{t}" / "set_es.json").read_text())
        assert policy["scenario"] == "MixedWorst10"
        assert rec["notes"]["weights"]["MixedWorst10"][str(t)] == policy["params"]  # what it leans on, in the record
    assert _docs_state() == before


def test_bench_generalist_front_door_sources_are_playable_run_folders(tmp_path):
    """The transfer table's Large and FMNISTControl rows (issue #42): their own set_es models come from the front door
    (train_agent.py's finished runs), or where no run is on this machine from the weights the committed record keeps;
    an unfinished run is not a source; bench_learned's sources are written as before."""
    from experiments import bench_generalist as bg

    runs = tmp_path / "train"
    done = runs / "set_es_Large_seed1"
    done.mkdir(parents=True)
    weights = {"loss": 0.5, "cover_pick": 1.25}
    (done / "set_es.json").write_text(json.dumps({"params": weights}))
    (done / "summary.json").write_text(json.dumps({"complete": True}))
    half = runs / "set_es_Large_seed2"  # still training: not played
    half.mkdir()
    (half / "set_es.json").write_text(json.dumps({"params": {"loss": 9.0}}))
    (half / "summary.json").write_text(json.dumps({"complete": False}))
    kept = {"FMNISTControl": {"0": {"loss": -1.0}}}
    found = bg.per_scenario_models(tmp_path / "out", runs=runs, kept=kept)
    assert set(found["Large"]) == {1} and set(found["FMNISTControl"]) == {0}
    got = json.loads((found["Large"][1] / "set_es.json").read_text())
    assert got["params"] == weights and got["source"] == "train_agent.py --algo set_es --env Large --seed 1"
    assert json.loads((found["FMNISTControl"][0] / "set_es.json").read_text())["params"] == {"loss": -1.0}
    learned = {r["scenario"] for r in records.load(bg.LEARNED)["rows"]
               if r.get("role") == "weights" and r.get("design") == "set_es"}
    assert learned <= set(found) and not learned & set(bg.FRONT_DOOR_SOURCES)
    # a smoke run (runs None) takes none of the front door's
    assert not set(bg.per_scenario_models(tmp_path / "smoke", runs=None, kept=kept)) & set(bg.FRONT_DOOR_SOURCES)


def test_bench_generalist_replays_committed_generalists_without_their_runs(tmp_path):
    """A scenario whose episodes changed is replayed without retraining (issue #42): with no generalist run on this
    machine, each training seed plays as a folder of the weights the committed record keeps, labelled as its run
    would be; a smoke run takes none of them."""
    import argparse

    from experiments import bench_generalist as bg

    ns = argparse.Namespace(out=tmp_path, smoke=False, on="reporting", train_seeds=list(bg.TRAIN_SEEDS))
    got = bg.models(ns, "FMNISTControl")
    kept = records.load(bg.RESULT["reporting"])["notes"]["weights"]["MixedRounds"]
    assert [g.split("=")[0] for g in got] == [f"set_es_gen_s{t}" for t in bg.TRAIN_SEEDS]
    for g, t in zip(got, bg.TRAIN_SEEDS):
        folder = Path(g.split("=", 1)[1])
        assert folder.is_relative_to(tmp_path) and json.loads((folder / "set_es.json").read_text())["params"] == \
            kept[str(t)]
    assert bg.models(argparse.Namespace(**{**vars(ns), "smoke": True}), "FMNISTControl") == []


def test_bench_rl_confirm_carries_the_committed_confirmations(tmp_path):
    """--part confirm re-plays only the models on this machine: with none here, the confirmation record built from
    the committed one gives its entries exactly, each carried row in a chunk naming the commit it came from."""
    import argparse

    from experiments import bench_rl

    ns = argparse.Namespace(out=tmp_path, smoke=False, scenarios=[], train_seeds=list(bench_rl.TRAIN_SEEDS),
                            confirm_seeds=list(bench_rl.CONFIRM_SEEDS))
    rec = bench_rl.build_confirm_record(ns)
    committed = records.load(bench_rl.CONFIRM_RESULT)
    assert rec.notes["confirm"] == committed["notes"]["confirm"] and len(rec.rows) == len(committed["rows"])
    commits = {c["id"]: c.get("commit") for c in rec.to_dict()["chunks"]}
    assert {commits[r["chunk"]] for r in rec.rows} <= {c.get("commit") for c in committed["chunks"]}


def test_bench_generalist_carries_the_committed_record_when_no_run_is_here(tmp_path, monkeypatch):
    """experiments/bench_generalist.py (issue #42): runs/ does not outlive a machine, and the track grows over sessions.
    With none of its runs here, the report rebuilds the committed record from its own rows (each kept with the chunk
    it was recorded at): the same rows, the leaderboard, transfer cells, Holm family, mean normalised score,
    weights and training cost; and a scenario played here whose random episodes differ carries nothing."""
    import argparse

    from experiments import bench_generalist as bg

    monkeypatch.setattr(bg, "FRONT_DOOR_RUNS", tmp_path / "train")  # the front door's runs are not here either
    ns = argparse.Namespace(out=tmp_path, smoke=False, on="reporting", seeds=None,
                            scenarios=[sc.name for sc in bg.BENCH_SCENARIOS], train_seeds=list(bg.TRAIN_SEEDS))
    rec = bg.build_record(ns)
    committed = records.load(bg.RESULT["reporting"])
    for key in ("leaderboard", "transfer", "holm_family", "mean_normalised", "weights", "training", "source_weights",
                "source_training"):
        assert rec.notes[key] == committed["notes"][key], key
    # a home cell (source = scenario) is read from bench_learned's record, which re-records cells through the front
    # door (issue #46): the same values, the config hash of the run that played them
    home = lambda r: r.get("role") == "transfer" and r.get("source") == r.get("scenario")  # noqa: E731
    strip = lambda rows: sorted(json.dumps({k: v for k, v in r.items() if k != "chunk" and not (  # noqa: E731
        k == "config_sha" and home(r))}, sort_keys=True) for r in rows)
    assert strip(rec.rows) == strip(committed["rows"])
    path = tmp_path / "record.json"
    rec.write(path)
    assert recompute.main(["--quiet", str(path)]) == 0
    # every carried row names a chunk whose commit is the committed chunk's (a home cell's: bench_learned's record's)
    commits = {c["id"]: c["commit"] for c in records.load(path)["chunks"]}
    learned = {c.get("commit") for c in records.load(ROOT / "experiments" / "results" / "bench_learned.json")["chunks"]}
    written = records.load(path)["rows"]
    assert {commits[r["chunk"]] for r in written if not home(r)} <= {c["commit"] for c in committed["chunks"]}
    assert {commits[r["chunk"]] for r in written if home(r)} <= {c["commit"] for c in committed["chunks"]} | learned

    # Churn played here with other random episodes: nothing of Churn is carried
    churn = [r for r in committed["rows"] if r.get("scenario") == "Churn" and r.get("role") == "random"]
    folder = tmp_path / "eval_reporting" / "Churn"
    folder.mkdir(parents=True)
    folder.joinpath("episodes.jsonl").write_text("".join(
        json.dumps({"policy": "random", "seed": r["seed"], "value": r["value"] + 0.5, "censored": False,
                    "rounds": r["rounds"], "config_sha": r["config_sha"]}) + "\n" for r in churn))
    again = bg.build_record(ns)
    kept = [r for r in again.rows if r.get("scenario") == "Churn" and r.get("role") != "transfer"]
    assert kept and {r["role"] for r in kept} == {"random"}
