"""``python -m fedsel_eval.record_diff``: two records compared cell by cell, run fields left out (issue #46)."""
from __future__ import annotations

import json

import pytest

from fedsel_eval.record_diff import cell_of, diff, main
from fedsel_eval.records import Record


def _record(path, rows, note="played here"):
    rec = Record("bench_learned", {"seeds": [0, 1]})
    c0 = rec.chunk({"commit": "a" * 40, "dirty": False, "dirty_files": []}, note=note)
    c1 = rec.chunk({"commit": "b" * 40, "dirty": False, "dirty_files": []}, note="carried")
    for r in rows:
        rec.add_row(c1 if r.get("carried") else c0, **{k: v for k, v in r.items() if k != "carried"})
    rec.write(path)
    return path


ROWS = [
    {"scenario": "Churn", "policy": "set_es", "role": "learned", "training_seed": 0, "seed": 9000, "value": 0.25,
     "wall_time_s": 1.5, "config_sha": "x1"},
    {"scenario": "Churn", "policy": "set_es", "role": "learned", "training_seed": 0, "seed": 9001, "value": 0.2700892857142857,
     "wall_time_s": 1.1, "config_sha": "x1"},
    {"scenario": "Churn", "design": "set_es", "role": "weights", "training_seed": 0, "param": "loss", "value": -0.8},
    {"scenario": "Churn", "num_clients": 200, "policy": "random", "role": "larger_n", "seed": 9000, "value": 0.1},
    {"scenario": "QuantitySkew", "policy": "random", "role": "random", "seed": 9000, "value": 14.0, "carried": True},
]


def test_rows_equal_but_for_where_and_how_fast_they_were_made_are_the_same(tmp_path, capsys):
    old = _record(tmp_path / "old.json", ROWS)
    again = [dict(r, wall_time_s=9.9, config_sha="other") if "wall_time_s" in r else r for r in reversed(ROWS)]
    new = _record(tmp_path / "new.json", again)
    assert main([str(old), str(new)]) == 0          # row order, wall times and config hashes do not count
    assert "4 cells in both records, 4 of them equal (5 rows" in capsys.readouterr().out
    assert main([str(old), str(new), "--ignore", "chunk"]) == 1   # unless asked: then the wall times differ


def test_a_value_one_ulp_off_is_a_different_cell_and_is_shown(tmp_path, capsys):
    old = _record(tmp_path / "old.json", ROWS)
    off = [dict(r) for r in ROWS]
    off[1]["value"] = 0.27008928571428564       # the set_es_q Churn re-record's strided mean: 1 ulp
    new = _record(tmp_path / "new.json", off)
    assert main([str(old), str(new)]) == 1
    out = capsys.readouterr().out
    assert "| Churn | set_es | learned |" in out and "DIFFERENT" in out
    assert "only in NEW" in out and "0.27008928571428564" in out and "0.2700892857142857" in out
    cells = {c["cell"]: c for c in diff(json.loads(old.read_text())["rows"], json.loads(new.read_text())["rows"])}
    learned = cells[cell_of(ROWS[0])]
    assert (learned["old"], learned["new"], learned["equal"], learned["same"]) == (2, 2, 1, False)
    assert all(c["same"] for k, c in cells.items() if k != cell_of(ROWS[0]))


def test_a_missing_row_differs_and_a_one_sided_cell_counts_only_when_strict(tmp_path, capsys):
    old = _record(tmp_path / "old.json", ROWS)
    fewer = _record(tmp_path / "fewer.json", ROWS[1:])
    assert main([str(old), str(fewer)]) == 1                       # the learned cell lost a row
    no_larger = _record(tmp_path / "no_larger.json", [r for r in ROWS if r["role"] != "larger_n"])
    assert main([str(old), str(no_larger)]) == 0                   # a cell NEW has not played: listed, not counted
    assert "1 cells in one record only" in capsys.readouterr().out
    assert main([str(old), str(no_larger), "--strict"]) == 1


def test_chunk_keeps_the_cells_played_in_those_chunks(tmp_path):
    old = _record(tmp_path / "old.json", ROWS)
    changed = [dict(r) for r in ROWS]
    changed[-1]["value"] = 15.0                                    # a carried cell differs ...
    new = _record(tmp_path / "new.json", changed)
    assert main([str(old), str(new)]) == 1
    assert main([str(old), str(new), "--chunk", "c0"]) == 0       # ... but only the cells played in c0 are checked
    kept = diff(json.loads(old.read_text())["rows"], json.loads(new.read_text())["rows"], chunks=["c1"])
    assert [c["cell"][0] for c in kept] == ["QuantitySkew"]


def test_a_file_that_is_not_a_record_is_refused_by_name(tmp_path, capsys):
    old = _record(tmp_path / "old.json", ROWS)
    with pytest.raises(SystemExit):
        main([str(old), str(tmp_path / "nowhere.json")])
    assert "nowhere.json: no such record file" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(SystemExit):
        main([str(old), str(tmp_path / "bad.json")])
    assert "a record is a JSON object" in capsys.readouterr().err


def test_the_platforms_of_differing_cells_are_printed_for_both_records(tmp_path, capsys):
    old = _record(tmp_path / "old.json", ROWS)
    data = json.loads(old.read_text())
    data["chunks"][0]["platform"] = None                       # a chunk older than the field
    data["chunks"][1]["platform"] = {"numpy": "2.3.0", "cpu_capability": "AVX2"}
    old.write_text(json.dumps(data))
    off = [dict(r) for r in ROWS]
    off[-1]["value"] = 15.0                                    # the carried QuantitySkew row (chunk c1) differs
    new = _record(tmp_path / "new.json", off)
    assert main([str(old), str(new)]) == 1
    out = capsys.readouterr().out
    assert "OLD's rows of the differing cells were made on: numpy 2.3.0, cpu_capability AVX2 (chunks c1)" in out
    import numpy
    assert "NEW's rows of the differing cells were made on: python" in out and f"numpy {numpy.__version__}" in out
