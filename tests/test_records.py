"""The record format (fedsel_eval.records) and its recomputation (python -m fedsel_eval.recompute, #34)."""
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from fedsel_eval import recompute, records

ROOT = Path(__file__).resolve().parents[1]


def _record(tmp_path):
    rec = records.Record("toy", config={"cap": 30})
    c0 = rec.chunk({"commit": "a" * 40, "dirty": False, "dirty_files": []}, note="first piece")
    c1 = rec.chunk({"commit": "b" * 40, "dirty": False, "dirty_files": []}, note="resumed")
    rng = np.random.default_rng(0)
    for seed in range(6):
        rec.add_row(c0 if seed < 3 else c1, policy="random", training_seed=None, seed=seed, rounds=20 + seed,
                    reached=True, final_accuracy=0.9)
        for ts in range(3):
            rec.add_row(c1, policy="trained", training_seed=ts, seed=seed,
                        rounds=float(18 + seed + ts + rng.integers(0, 3)), reached=True, final_accuracy=0.9)
    return rec


def test_summaries_are_the_statistics_they_name(tmp_path):
    rec = _record(tmp_path)
    rows = rec.rows
    rand = np.array([r["rounds"] for r in rows if r["policy"] == "random"])
    tr = np.array([[r["rounds"] for r in rows if r["policy"] == "trained" and r["seed"] == s] for s in range(6)])
    cond = rec.summarise("trained − random (conditional)", "paired_t", "rounds",
                         where={"policy": "trained"}, minus={"policy": "random"})
    d = tr.mean(1) - rand  # the training seeds averaged per episode seed
    lo, hi = stats.t.interval(0.95, 5, loc=d.mean(), scale=d.std(ddof=1) / np.sqrt(6))
    assert cond["n"] == 6 and cond["mean"] == pytest.approx(d.mean()) and cond["lo"] == pytest.approx(lo)
    assert cond["hi"] == pytest.approx(hi)
    across = rec.summarise("trained − random (across training seeds)", "paired_t_across", "rounds",
                           where={"policy": "trained"}, minus={"policy": "random"})
    per = (tr - rand[:, None]).mean(0)  # one mean difference per training seed
    lo, hi = stats.t.interval(0.95, 2, loc=per.mean(), scale=per.std(ddof=1) / np.sqrt(3))
    assert across["n"] == 3 and across["lo"] == pytest.approx(lo) and across["hi"] == pytest.approx(hi)
    assert across["mean"] == pytest.approx(cond["mean"])  # same point estimate, wider interval
    assert across["hi"] - across["lo"] > cond["hi"] - cond["lo"]
    assert rec.summarise("sd ddof 0", "std", "rounds", ddof=0, where={"policy": "random"}) == pytest.approx(rand.std())
    assert rec.summarise("sd ddof 1", "std", "rounds", ddof=1, where={"policy": "random"}) == pytest.approx(
        rand.std(ddof=1))
    assert rec.summarise("n", "count", where={"policy": "random"}) == 6


def test_pairing_asserts_both_sides_hold_the_same_seeds(tmp_path):
    rec = _record(tmp_path)
    rec.add_row("c1", policy="random", seed=99, rounds=30, reached=False)
    with pytest.raises(ValueError, match="same .*seed"):
        rec.summarise("d", "paired_t", "rounds", where={"policy": "trained"}, minus={"policy": "random"})


def test_recompute_passes_a_true_record_and_fails_a_changed_figure(tmp_path, capsys):
    rec = _record(tmp_path)
    rec.summarise("mean", "mean", "rounds", where={"policy": "random"})
    rec.summarise("d", "paired_t", "rounds", where={"policy": "trained"}, minus={"policy": "random"})
    path = rec.write(tmp_path / "toy.json", written_by={"commit": None, "dirty": None})
    assert recompute.main([str(path)]) == 0
    assert "recomputed 4 figures in 2 summaries" in capsys.readouterr().out
    data = json.loads(path.read_text())
    data["summaries"][1]["value"]["lo"] -= 0.01  # a figure that the rows do not give
    path.write_text(json.dumps(data))
    assert recompute.main([str(path)]) == 1
    assert "DIFFERS d:" in capsys.readouterr().out


def test_a_file_that_is_no_record_is_refused_by_name(tmp_path, capsys):
    bad = tmp_path / "legacy.json"
    bad.write_text(json.dumps({"commit": "x", "results": {"mean": 1}}))
    assert recompute.main([str(bad)]) == 1
    assert "legacy.json: ERROR" in capsys.readouterr().out
    with pytest.raises(ValueError, match="chunk 'c9'"):
        records.Record("x", {}).add_row("c9", policy="p", seed=0)



def test_every_committed_record_recomputes(capsys):
    """The command of docs/REPRODUCTION.md over every committed record: every stored figure is its rows'."""
    files = sorted(str(p) for p in [*(ROOT / "experiments" / "results").glob("*.json"),
                                    *(ROOT / "fedsel_eval" / "data").glob("*.json")])  # the bench reference
    assert files
    assert recompute.main(["--quiet", *files]) == 0, capsys.readouterr().out


def test_the_studies_pairing_asserts_that_the_seeds_agree():
    """favor_study / per_client_study subtract seed-ordered arrays: a policy missing a seed must stop them."""
    import sys
    sys.path.insert(0, str(ROOT))
    from experiments import favor_study

    def ep(policy, seed):
        return {"policy": policy, "seed": seed}

    ok = [ep(p, s) for p in ("random", "favor_s0") for s in (5000, 5001)]
    favor_study.check_paired_seeds(ok, ["random", "favor_s0"], [5000, 5001])
    shifted = [ep("random", 5000), ep("random", 5001), ep("favor_s0", 5001), ep("favor_s0", 5002)]
    with pytest.raises(ValueError, match="'favor_s0'.*not be paired by seed"):
        favor_study.check_paired_seeds(shifted, ["random", "favor_s0"], [5000, 5001])


def test_a_real_evaluation_becomes_a_record_that_recomputes(tmp_path):
    """What a benchmark does: fedsel_eval.run's episode records → rows (add_episodes) → summaries → file."""
    import fedsel_eval

    ev = fedsel_eval.run(tmp_path / "ev", "tiny", ["random", "afl"], seeds=[0, 1, 2], rounds=3, target=0.99,
                         progress=False, plots=False)
    rec = records.Record("tiny_bench", config={"env": ev.plan.env_config, "seeds": [0, 1, 2]})
    c = rec.chunk(records.git_provenance(ROOT, ("fedsel_env", "agents", "fedsel_eval")), note="test")
    rec.add_episodes(c, ev.records, cap=3, group="tiny")
    assert len(rec.rows) == 6 and {r["policy"] for r in rec.rows} == {"random", "afl"}
    row = rec.rows[0]
    assert set(records.EPISODE_FIELDS) <= set(row) and row["group"] == "tiny" and row["rounds"] == 3  # a miss: the cap
    by_seed = {r["seed"]: r["metrics"]["final_accuracy"] for r in ev.records if r["policy"] == "afl"}
    d = rec.summarise("afl − random, final accuracy", "paired_t", "final_accuracy", where={"policy": "afl"},
                      minus={"policy": "random"})
    want = np.mean([by_seed[s] - next(r["metrics"]["final_accuracy"] for r in ev.records
                                      if r["policy"] == "random" and r["seed"] == s) for s in by_seed])
    assert d["n"] == 3 and d["mean"] == pytest.approx(want)
    path = rec.write(tmp_path / "tiny_bench.json")
    assert recompute.main(["--quiet", str(path)]) == 0


def test_chunk_of_keeps_a_carried_rows_commit_one_chunk_per_source():
    """Record.chunk_of: a row of this run goes in the given chunk; rows carried from a committed record get one chunk
    per source chunk, with the source's commit, made once."""
    rec = records.Record("x", config={})
    here = rec.chunk({"commit": "new"}, note="played here")
    src_a = {"id": "c0", "commit": "aaa", "note": "old episodes"}
    src_b = {"id": "c3", "commit": "bbb", "note": "older"}
    assert rec.chunk_of({"value": 1}, here) == here
    a1 = rec.chunk_of({"_carried_from": src_a}, here, "models not here")
    b = rec.chunk_of({"_carried_from": src_b}, here)
    assert rec.chunk_of({"_carried_from": src_a}, here) == a1 and len({here, a1, b}) == 3
    commits = {c["id"]: c["commit"] for c in rec.chunks}
    assert (commits[a1], commits[b]) == ("aaa", "bbb")
    note = next(c["note"] for c in rec.chunks if c["id"] == a1)
    assert "chunk c0" in note and "old episodes" in note and "models not here" in note
    # carried again by the next record: the note stays as it was, not wrapped in another "carried from"
    again = records.Record("x", config={})
    a2 = again.chunk_of({"_carried_from": {"id": a1, "commit": "aaa", "note": note}}, again.chunk({"commit": "newer"}))
    assert next(c["note"] for c in again.chunks if c["id"] == a2) == note


def test_a_chunk_names_the_platform_its_floats_came_from_and_a_carried_one_keeps_its_own(tmp_path):
    import sklearn
    import torch

    rec = records.Record("toy", config={})
    here = rec.chunk({"commit": "a" * 40, "dirty": False, "dirty_files": []}, note="played here")
    plat = rec.chunks[0]["platform"]
    assert plat["numpy"] == np.__version__ and plat["torch"] == torch.__version__
    assert plat["scikit-learn"] == sklearn.__version__ and plat["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    rec.add_row(here, policy="random", seed=0, rounds=3)
    old = {"id": "c4", "commit": "b" * 40, "dirty": False, "note": "older"}           # written before the field
    other = {**old, "id": "c5", "platform": {"numpy": "1.26.4", "cpu_capability": "AVX2"}}
    rec.carry({"policy": "random", "seed": 1, "rounds": 4, "_carried_from": old}, here)
    rec.carry({"policy": "random", "seed": 2, "rounds": 5, "_carried_from": other}, here)
    assert [c["platform"] for c in rec.chunks[1:]] == [None, {"numpy": "1.26.4", "cpu_capability": "AVX2"}]
    rec.write(tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["chunks"][0]["platform"] == plat
