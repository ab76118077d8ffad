"""Are two records' rows the same, cell by cell? ``python -m fedsel_eval.record_diff OLD NEW`` (issue #46).

A re-record (the leaderboard's cells trained and played again by the commands docs/BENCHMARK.md lists) reproduces
the committed record when every row it made equals the committed one. This compares the rows of two records
(``experiments/results/*.json``, :mod:`fedsel_eval.records`) cell by cell — a cell is a scenario, a design or
policy, a role (and ``num_clients`` for the 2 × N rows) — as multisets of rows with the fields that say where and
how fast a row was made left out (:data:`RUN_FIELDS`: its chunk, the resolved config's and the code's hashes,
wall times), and prints one line a cell: rows in each record, rows equal, and the chunks of NEW the rows came from
(a row carried from the committed record says nothing about a re-record; ``--chunk`` keeps only NEW's cells that
have rows of those chunks). Values are compared exactly: a re-record on the same machine gives the same bits.
Where cells differ, the platforms their rows' chunks name (:func:`fedsel_eval.records.platform_info`: library
versions and the CPU's vector unit) are printed for both records: rows made at one commit on two platforms can
round differently, rows made on one platform at one commit should not.

Exit status 0 when every cell the two records share (and that ``--chunk`` keeps) is equal, 1 otherwise; cells in
only one record are listed and, with ``--strict``, count as a difference::

    git show HEAD:experiments/results/bench_learned.json > /tmp/committed.json
    python -m fedsel_eval.record_diff /tmp/committed.json runs/bench_learned/record.json --chunk c0
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .markdown import table
from .records import load

#: fields that say where and how fast a row was made, not what it measured: left out of the comparison
RUN_FIELDS = ("chunk", "config_sha", "code_version", "model_sha", "wall_time_s", "train_seconds", "wall_s")
#: the fields that name a row's cell
CELL_FIELDS = ("scenario", "design", "policy", "role", "num_clients")


def cell_of(row: Mapping[str, Any]) -> Tuple[str, ...]:
    """A row's cell: its scenario, design or policy, role and (for the 2 × N rows) number of clients, as text."""
    return tuple("" if row.get(f) is None else str(row[f]) for f in CELL_FIELDS)


def _canonical(row: Mapping[str, Any], ignore: Iterable[str]) -> str:
    drop = set(ignore)
    return json.dumps({k: v for k, v in row.items() if k not in drop}, sort_keys=True)


def diff(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]], ignore: Sequence[str] = RUN_FIELDS,
         chunks: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
    """One entry a cell (sorted): ``cell``, ``old`` and ``new`` row counts, ``equal`` (rows of NEW matched by an
    equal row of OLD, as multisets), ``chunks`` (of NEW's rows), ``same`` (both counts equal to ``equal``).
    ``chunks``: keep only the cells of which NEW has a row from one of these chunks."""
    by_cell: Dict[Tuple[str, ...], Dict[str, Any]] = {}
    for side, rows in (("old", old), ("new", new)):
        for r in rows:
            entry = by_cell.setdefault(cell_of(r), {"old": Counter(), "new": Counter(), "chunks": set()})
            entry[side][_canonical(r, ignore)] += 1
            if side == "new" and r.get("chunk") is not None:
                entry["chunks"].add(str(r["chunk"]))
    out = []
    for cell in sorted(by_cell):
        e = by_cell[cell]
        if chunks is not None and not e["chunks"] & set(chunks):
            continue
        n_old, n_new = sum(e["old"].values()), sum(e["new"].values())
        equal = sum((e["old"] & e["new"]).values())
        out.append({"cell": cell, "old": n_old, "new": n_new, "equal": equal, "chunks": sorted(e["chunks"]),
                    "same": n_old == n_new == equal})
    return out


def first_difference(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]], cell: Tuple[str, ...],
                     ignore: Sequence[str] = RUN_FIELDS) -> Optional[str]:
    """A row of ``cell`` that NEW has and OLD has not (or the other way), as text: what to look at first."""
    a = Counter(_canonical(r, ignore) for r in old if cell_of(r) == cell)
    b = Counter(_canonical(r, ignore) for r in new if cell_of(r) == cell)
    only_new, only_old = list((b - a).elements()), list((a - b).elements())
    if only_new:
        return f"only in NEW: {only_new[0]}" + (f"\n    only in OLD: {only_old[0]}" if only_old else "")
    return f"only in OLD: {only_old[0]}" if only_old else None


def platforms(record: Mapping[str, Any], cells: Iterable[Tuple[str, ...]]) -> List[str]:
    """The distinct platforms (``platform`` of :func:`fedsel_eval.records.platform_info`, or "unrecorded") of the
    chunks that made ``record``'s rows of ``cells``, each as one line with the chunks that name it."""
    chunks = {c["id"]: c for c in record["chunks"]}
    used = sorted({r["chunk"] for r in record["rows"] if cell_of(r) in set(cells)})
    seen: Dict[str, List[str]] = {}
    for cid in used:
        plat = chunks[cid].get("platform")
        text = (", ".join(f"{k} {v}" for k, v in plat.items()) if isinstance(plat, Mapping) else "unrecorded")
        seen.setdefault(text, []).append(cid)
    return [f"{text} (chunks {', '.join(ids)})" for text, ids in seen.items()]


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fedsel_eval.record_diff", description=__doc__.split("\n")[0])
    p.add_argument("old", type=Path, help="the record to compare against (e.g. the committed one)")
    p.add_argument("new", type=Path, help="the record to check (e.g. a re-record's runs/<experiment>/record.json)")
    p.add_argument("--chunk", nargs="+", default=None,
                   help="only the cells of which NEW has rows from these chunks (the re-played ones)")
    p.add_argument("--ignore", nargs="+", default=None,
                   help=f"fields left out of the comparison (default: {' '.join(RUN_FIELDS)})")
    p.add_argument("--strict", action="store_true", help="a cell in only one of the records is a difference too")
    p.add_argument("--all", action="store_true", help="print every cell (default: the ones that differ, and totals)")
    args = p.parse_args(argv)
    for path in (args.old, args.new):
        if not path.is_file():
            p.error(f"{path}: no such record file (a record is experiments/results/<name>.json or a run's "
                    f"record.json; for a committed one: git show HEAD:<path> > file)")
    try:
        old_rec, new_rec = load(args.old), load(args.new)
    except ValueError as e:
        p.error(str(e))
    old, new = old_rec["rows"], new_rec["rows"]
    ignore = tuple(args.ignore) if args.ignore is not None else RUN_FIELDS
    cells = diff(old, new, ignore, args.chunk)
    shared = [c for c in cells if c["old"] and c["new"]]
    one_sided = [c for c in cells if not (c["old"] and c["new"])]
    bad = [c for c in shared if not c["same"]] + (one_sided if args.strict else [])
    shown = cells if args.all else bad + [c for c in one_sided if c not in bad]
    if shown:
        print(table(["scenario", "design / policy", "role", "N", "rows OLD", "rows NEW", "equal", "NEW's chunks", ""],
                    [[c["cell"][0], c["cell"][1] or c["cell"][2], c["cell"][3], c["cell"][4], c["old"], c["new"],
                      c["equal"], ",".join(c["chunks"]), "same" if c["same"] else "DIFFERENT"] for c in shown],
                    align="llllrrrll"), end="")
    for c in [c for c in shared if not c["same"]][:5]:
        print(f"{' / '.join(x for x in c['cell'] if x)}: {first_difference(old, new, c['cell'], ignore)}")
    differing = {c["cell"] for c in shared if not c["same"]}
    for side, rec in (("OLD", old_rec), ("NEW", new_rec)):
        if differing:
            print(f"{side}'s rows of the differing cells were made on: "
                  f"{'; '.join(platforms(rec, differing)) or 'no platform recorded'}")
    rows_equal = sum(c["equal"] for c in shared)
    print(f"{len(shared)} cells in both records, {len(shared) - len([c for c in shared if not c['same']])} of them "
          f"equal ({rows_equal} rows; fields left out: {', '.join(ignore)}); {len(one_sided)} cells in one record only")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
