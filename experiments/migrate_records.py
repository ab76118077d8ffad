"""Rewrite the results committed before issue #34 as records (``fedsel_eval.records``), in place.

    python experiments/migrate_records.py [experiments/results/NAME.json ...]   # default: every results file

Each legacy ``experiments/results/<name>.json`` is converted by its experiment's converter
(``experiments/records_of.py``: the same code the scripts now publish through), which recomputes every
figure from the per-episode values the file holds and fails if one differs from the value the file
stored. q-FFL's rows and chunks come from ``qffl_synthetic_progress.json``. Files already in the record
format, and the ``*_progress.json`` run states, are left alone.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments import common, records_of  # noqa: E402
from fedsel_eval import records  # noqa: E402


def migrate(path: Path) -> str:
    data = json.loads(path.read_text())
    if data.get("format") == records.FORMAT:
        return f"{path.name}: already a record"
    name = path.stem
    if name == "qffl_synthetic":
        progress = json.loads((path.parent / "qffl_synthetic_progress.json").read_text())
        key = f"rounds={data['settings']['rounds']} max_samples=none"
        data["runs"] = [r for r in progress["settings"][key]["runs"].values() if r["status"] == "finished"]
    if name.startswith("per_client_study_"):
        # that run did not record its reports' federation seeds; the script's protocol fixes them: the seen
        # report uses the setting's env (its progress file's federation_seed), the unseen one sets null
        env = json.loads((path.parent / f"{name}_progress.json").read_text())["env"]
        for rname, rep in data["reports"].items():
            rep.setdefault("federation_seed", env.get("federation_seed") if rname == "seen" else None)
    rec = records_of.convert(name, data)
    rec.notes.setdefault("migrated", "converted from the pre-#34 results file by experiments/migrate_records.py; "
                                     "'written_by' is the commit that file named")
    rec.write(path)
    live = sum(not s.get("summary_only") for s in rec.summaries)
    return f"{path.name}: {len(rec.rows)} rows, {live} summaries from rows, {len(rec.summaries) - live} summary only"


def main(argv: Sequence[str] = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    paths = [Path(a) for a in argv] or sorted(p for p in common.RESULTS_DIR.glob("*.json")
                                              if not p.name.endswith("_progress.json"))
    for p in paths:
        print(migrate(p))


if __name__ == "__main__":
    common.run_cli(main, "migrate_records.py")
