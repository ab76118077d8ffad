"""``python -m fedsel_eval.recompute RECORD.json...``: every summary of a record, recomputed from its rows.

For each record (:mod:`fedsel_eval.records`) it recomputes every summary from the rows (paired summaries
check that both sides hold the same seeds), prints stored and recomputed values side by side, and exits
1 when a stored figure differs from its recomputation or a file is not a well-formed record. Summaries
of a ``summary_only`` record (its episodes were lost) are listed as not recomputable. A chunked run's
``*_progress.json`` (run state, not a record) is named and skipped.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from . import records


def recompute_file(path: Path, out: Any = None, verbose: bool = True) -> Dict[str, int]:
    """Recompute one record; return counts: ``summaries``, ``figures`` (numbers recomputed), ``differ``,
    ``summary_only``. ``ValueError`` when the file is not a record or a summary cannot be computed."""
    out = sys.stdout if out is None else out
    data = records.load(path)
    counts = {"summaries": 0, "figures": 0, "differ": 0, "summary_only": 0}
    if verbose:
        print(f"{path}: {data['experiment']}, {len(data['rows'])} rows from {len(data['chunks'])} chunk(s) at "
              + ", ".join(sorted({str(c['commit'])[:12] + (' (dirty)' if c['dirty'] else '') for c in data['chunks']}))
              + (f"; summary only: {data['summary_only']}" if data.get("summary_only") else ""), file=out)
    for s in data["summaries"]:
        if s.get("summary_only"):
            counts["summary_only"] += 1
            if verbose:
                print(f"  [summary only] {s['name']}: {_show(s['value'])}", file=out)
            continue
        got = records.compute(s, data["rows"])
        ok = records.same(s["value"], got)
        counts["summaries"] += 1
        counts["figures"] += records.figures_in(got)
        counts["differ"] += not ok
        if verbose or not ok:
            mark = "ok     " if ok else "DIFFERS"
            print(f"  {mark} {s['name']}: {_show(got)}" + ("" if ok else f" (stored: {_show(s['value'])})"), file=out)
    return counts


def _show(v: Any) -> str:
    if isinstance(v, dict) and {"mean", "lo", "hi"} <= set(v):
        f = lambda x: "—" if x is None else f"{x:.6g}"  # noqa: E731
        return f"{f(v['mean'])} [{f(v['lo'])}, {f(v['hi'])}] (n = {v.get('n')})"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fedsel_eval.recompute", description=__doc__.split("\n")[0])
    p.add_argument("records", nargs="+", help="record files (experiments/results/*.json)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only differences and the totals")
    args = p.parse_args(argv)
    total: Dict[str, int] = {"summaries": 0, "figures": 0, "differ": 0, "summary_only": 0}
    bad: List[str] = []
    files = 0
    for name in args.records:
        path = Path(name)
        if path.name.endswith("_progress.json"):
            print(f"{path}: skipped (a chunked run's progress state, not a record)")
            continue
        try:
            counts = recompute_file(path, verbose=not args.quiet)
        except ValueError as e:
            print(f"{path}: ERROR {e}")
            bad.append(str(path))
            continue
        files += 1
        for k in total:
            total[k] += counts[k]
        if counts["differ"]:
            bad.append(str(path))
    print(f"recomputed {total['figures']} figures in {total['summaries']} summaries from the rows of {files} "
          f"record(s); {total['differ']} differ from the stored value; {total['summary_only']} summaries are "
          f"summary only (not recomputable)" + (f"; failed: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
