"""The bench suite's writes and reuse (issue #44): ``fedsel_eval.bench.run_scenario`` / ``run_suite``.

Episode rows go through the project's atomic append under the run folder's lock: a last line cut short is cut
back before the next append, any other damaged line is a ``ValueError`` (not skipped), a full disk is the
documented ``ValueError`` naming the file, a second run on the same folder is refused. Rows (of the folder or the
committed reference) are reused only under the same resolved config, simulator code and model file.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path

import pytest

from agents.training import atomic
from agents.training.atomic import lock_run_folder
from fedsel_env.bench import SCENARIOS
from fedsel_eval import bench

SC = SCENARIOS["Stragglers"]


def _cfg():
    cfg = SC.env_config()
    cfg["max_rounds"] = 2
    return cfg


def _lines(folder: Path):
    return (folder / bench.EPISODES).read_bytes().decode().split("\n")[:-1]


def test_a_torn_last_line_is_cut_back_before_the_next_append(tmp_path):
    bench.run_scenario(tmp_path, SC, ["random"], [0], _cfg())
    path = tmp_path / bench.EPISODES
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"scenario": "Stragglers", "policy": "ran')  # a kill (or full disk) mid-append
    run = bench.run_scenario(tmp_path, SC, ["random"], [0, 1], _cfg())
    lines = _lines(tmp_path)
    assert len(lines) == 2 and [json.loads(x)["seed"] for x in lines] == [0, 1]  # seed 0 kept, seed 1 on its own line
    assert path.read_bytes().startswith(whole)
    assert [r["seed"] for r in run.rows] == [0, 1]


def test_a_damaged_line_is_an_error_naming_the_file_and_line_not_skipped(tmp_path):
    bench.run_scenario(tmp_path, SC, ["random"], [0, 1], _cfg())
    path = tmp_path / bench.EPISODES
    first, second = _lines(tmp_path)
    path.write_text(first + "\n" + "not json at all\n" + second + "\n")
    with pytest.raises(ValueError, match=r"episodes\.jsonl', line 2, is damaged: not valid JSON.*Delete that line"):
        bench.run_scenario(tmp_path, SC, ["random"], [0, 1], _cfg())
    path.write_text(first + "\n" + "[1, 2]\n" + second + "\n")
    with pytest.raises(ValueError, match=r"line 2, is damaged: not an episode row"):
        bench.run_scenario(tmp_path, SC, ["random"], [0, 1], _cfg())


def test_a_full_disk_is_the_documented_error_and_leaves_whole_lines(tmp_path, monkeypatch):
    bench.run_scenario(tmp_path, SC, ["random"], [0], _cfg())
    before = (tmp_path / bench.EPISODES).read_bytes()
    real = os.write

    def half_then_full(fd, data):
        data = bytes(data)
        if len(data) > 1:
            real(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "write", half_then_full)
    with pytest.raises(ValueError, match=r"cannot write '.*episodes\.jsonl': No space left on device \(ENOSPC\); "
                                         r"free space"):
        bench.run_scenario(tmp_path, SC, ["random"], [0, 1], _cfg())
    assert (tmp_path / bench.EPISODES).read_bytes() == before  # cut back to its last whole line
    monkeypatch.undo()
    bench.run_scenario(tmp_path, SC, ["random"], [0, 1], _cfg())
    assert len(_lines(tmp_path)) == 2


def test_a_second_run_on_the_same_folder_is_refused(tmp_path):
    import evaluate

    args = ["--suite", "bench", "--scenarios", "Stragglers", "--policy", "random", "--rounds", "2", "--seeds", "0",
            "--out", str(tmp_path), "--no-progress", "--no-plots"]
    with lock_run_folder(tmp_path, "evaluate.py --suite bench"):  # the first run, still going
        with pytest.raises(ValueError, match=r"is in use by evaluate\.py --suite bench"):
            evaluate.main(args)
    assert not (tmp_path / "Stragglers" / bench.EPISODES).exists()
    with lock_run_folder(tmp_path / "Stragglers", "experiments/bench_learned.py"):  # its scenario folder too
        with pytest.raises(ValueError, match=r"Stragglers' is in use"):
            evaluate.main(args)
    evaluate.main(args)
    rows = [json.loads(x) for x in _lines(tmp_path / "Stragglers")]
    keys = [(r["policy_spec"], r["seed"]) for r in rows]
    assert len(keys) == len(set(keys)) and {r["policy"] for r in rows} >= {"random", "lookahead"}  # each once


def _reference_rows(tmp_path: Path, policies, cfg):
    """The rows a first run wrote, their values marked (so a reuse is told from a replay)."""
    run = bench.run_scenario(tmp_path / "first", SC, policies, [0], cfg)
    return [{**r, "value": 1234.5} for r in run.rows]


def test_reference_rows_are_reused_only_under_the_same_resolved_config_and_code(tmp_path, monkeypatch):
    from fedsel_env import config

    ref = _reference_rows(tmp_path, ["random"], _cfg())
    run = bench.run_scenario(tmp_path / "a", SC, ["random"], [0], _cfg(), reuse=ref)
    assert run.rows[0]["value"] == 1234.5  # reused, not replayed
    overrides = {**_cfg(), "observation": "dict"}  # a row of the pre-#44 reference: the overrides' hash, no code
    old_sha = hashlib.sha256(json.dumps(overrides, sort_keys=True).encode()).hexdigest()[:16]
    old_style = [{k: v for k, v in {**r, "config_sha": old_sha}.items() if k != "code_version"} for r in ref]
    assert bench.run_scenario(tmp_path / "b", SC, ["random"], [0], _cfg(), reuse=old_style).rows[0]["value"] != 1234.5
    monkeypatch.setitem(config.DEFAULT_CONFIG, "lr", config.DEFAULT_CONFIG["lr"] * 2)  # a default it inherits
    assert bench.run_scenario(tmp_path / "c", SC, ["random"], [0], _cfg(), reuse=ref).rows[0]["value"] != 1234.5
    monkeypatch.undo()
    monkeypatch.setattr(bench, "code_version", lambda: "another-simulator")  # the simulator's code changed
    assert bench.run_scenario(tmp_path / "d", SC, ["random"], [0], _cfg(), reuse=ref).rows[0]["value"] != 1234.5


def test_a_model_file_rewritten_in_place_is_another_policy(tmp_path):
    from agents.set_es import POLICY_FILE, param_names
    from fedsel_env.env import FedSelectEnv

    spec = FedSelectEnv(config=_cfg()).selection_spec
    model = tmp_path / "model"
    model.mkdir()
    names = param_names(spec)
    (model / POLICY_FILE).write_text(json.dumps({"params": {n: (1.0 if n == "loss" else 0.0) for n in names}}))
    policy = f"set_es:model={model}"
    ref = _reference_rows(tmp_path, [policy], _cfg())
    assert bench.run_scenario(tmp_path / "a", SC, [policy], [0], _cfg(), reuse=ref).rows[0]["value"] == 1234.5
    (model / POLICY_FILE).write_text(json.dumps({"params": {n: (1.0 if n == "w" else 0.0) for n in names}}))
    assert bench.run_scenario(tmp_path / "b", SC, [policy], [0], _cfg(), reuse=ref).rows[0]["value"] != 1234.5


def test_the_reference_ships_with_the_package_and_a_missing_one_is_an_error(tmp_path):
    """Issue #46: the committed reference is package data of ``fedsel_eval`` (an installed wheel has it: pyproject's
    ``package-data`` covers it), read from there, not from ``experiments/``; a missing file is a ``ValueError``
    naming it and the ways on, never an empty reference (which quietly replayed every episode)."""
    import fnmatch
    import tomllib

    root = Path(bench.__file__).resolve().parents[1]
    rel = bench.REFERENCE_JSON.relative_to(Path(bench.__file__).resolve().parent)  # inside the package
    declared = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert any(fnmatch.fnmatch(rel.as_posix(), g) for g in declared["fedsel_eval"])
    assert "experiments" not in bench.REFERENCE_JSON.relative_to(root).parts
    rows = bench.reference_rows()
    assert rows and {"scenario", "policy", "seed", "value"} <= set(rows[0])
    with pytest.raises(ValueError, match=r"bench reference .*none\.json is missing.*reuse_reference=False"):
        bench.reference_rows(tmp_path / "none.json")
