"""An evaluation's run folder on disk: ``config.json``, ``episodes.jsonl``, the tables, the plots.

Owns the files' names and layout version, opening a folder new or for ``--resume`` (refusing a
different evaluation, naming the differences), reading the finished episodes (a line cut short by a
crash is dropped), appending one episode as a flushed and fsync'ed JSON line, writing every other
file whole through a temp file and ``os.replace`` (:func:`atomic_write_text`), and the plain JSON
form of the values written (:func:`jsonable`).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Union

from agents.training.atomic import append_line, atomic_write_text, jsonable

from .plan import FORMAT_VERSION  # the layout's version, written by EvalPlan.record
from .plots import PLOT_FILES
from .summary import summary_csv
from .tables import episodes_csv, rows_csv, summary_markdown

if TYPE_CHECKING:
    from .plan import EvalPlan
    from .results import Results

#: Files of a run folder (and :data:`fedsel_eval.plots.PLOT_FILES`).
CONFIG_FILE = "config.json"
EPISODES_FILE = "episodes.jsonl"
SUMMARY_CSV = "summary.csv"          # mean and std of every metric per policy × backend
SUMMARY_MD = "summary.md"            # the main and fairness tables (printed)
MAIN_CSV = "main_table.csv"          # the main table's numbers, with CIs and paired differences
FAIRNESS_CSV = "fairness_table.csv"  # the fairness table's numbers, with CIs
EPISODES_CSV = "episodes.csv"        # every episode's metrics
TABLE_FILES = (SUMMARY_CSV, SUMMARY_MD, MAIN_CSV, FAIRNESS_CSV, EPISODES_CSV)


class RunFolder:
    """An evaluation's folder: ``config.json``, ``episodes.jsonl``, summaries and plots.

    :param path: the folder.
    """

    def __init__(self, path: Union[str, Path]) -> None:
        self.path = Path(path)

    @classmethod
    def open(cls, path: Union[str, Path], config: Mapping[str, Any], resume: bool = False,
             overwrite: bool = False) -> "RunFolder":
        """Start a new run folder, or take up an existing one of the same config (``resume``).

        :raises ValueError: when the folder holds an evaluation and neither ``resume`` nor ``overwrite``
            is given, or when ``resume`` meets an evaluation of a different config (naming the differences).
        """
        run = cls(path)
        stored = run.path / CONFIG_FILE
        if overwrite and resume:
            raise ValueError("--resume and --overwrite exclude each other")
        if stored.is_file() and not overwrite:
            if not resume:
                raise ValueError(f"run folder {str(run.path)!r} already holds an evaluation: pass --resume to "
                                 f"finish it (finished episodes are kept), --overwrite to start over, or "
                                 f"another --name / --out")
            old = _read_config(stored)
            # the env's name is only a title: the same config reached as a preset or an env id is the same run
            diffs = config_differences({k: v for k, v in old.items() if k != "env"},
                                       {k: v for k, v in jsonable(config).items() if k != "env"})
            if diffs:
                raise ValueError(f"--resume: run folder {str(run.path)!r} was made by a different evaluation "
                                 f"({'; '.join(diffs)}); use another --name / --out, or --overwrite to start over")
            return run
        if overwrite:
            for name in (CONFIG_FILE, EPISODES_FILE) + TABLE_FILES + PLOT_FILES:
                (run.path / name).unlink(missing_ok=True)
        run.path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(stored, json.dumps(jsonable(config), indent=2) + "\n")
        return run

    @staticmethod
    def set_aside(path: Path) -> Optional[Path]:
        """Move the evaluation files of the run folder ``path`` into ``path/superseded-<UTC time>/`` (so a
        run that starts the folder over loses nothing); return that folder, or None if there was nothing."""
        path = Path(path)
        names = [n for n in (CONFIG_FILE, EPISODES_FILE) + TABLE_FILES + PLOT_FILES if (path / n).is_file()]
        if not names:
            return None
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        dest = path / f"superseded-{stamp}"
        n = 1
        while dest.exists():
            n += 1
            dest = path / f"superseded-{stamp}-{n}"
        dest.mkdir()
        for name in names:
            os.replace(path / name, dest / name)
        return dest

    def read_episodes(self) -> List[Dict[str, Any]]:
        """The finished episodes; a last line cut short by a crash is dropped from the file."""
        path = self.path / EPISODES_FILE
        if not path.is_file():
            return []
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            number = raw.count(b"\n", 0, e.start) + 1
            raise ValueError(f"{str(path)!r}, line {number}, is damaged: not UTF-8 text. "
                             f"Delete that line (its episode is run again on --resume), or start over with "
                             f"--overwrite") from None
        complete, _, partial = text.rpartition("\n")
        if partial:  # an append interrupted mid-line: keep the complete lines only
            atomic_write_text(path, complete + "\n" if complete else "")
        records, seen = [], set()
        for number, line in enumerate(complete.split("\n"), 1):
            if line.strip():
                r = _episode_record(path, number, line)
                if r["key"] not in seen:
                    seen.add(r["key"])
                    records.append(r)
        return records

    def append_episode(self, record: Mapping[str, Any]) -> None:
        """Append one record as a JSON line, fsync'ed (a crash loses at most this line; a full disk is a
        ``ValueError`` naming the file, with the file cut back to its last whole line)."""
        append_line(self.path / EPISODES_FILE, json.dumps(jsonable(record), allow_nan=False))

    def write_summary(self, records: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]],
                      results: Results, plan: EvalPlan) -> str:
        """Write the tables (:data:`TABLE_FILES`): ``summary.md`` from ``results``, ``summary.csv`` from
        ``rows`` (:func:`~fedsel_eval.summary.summarise`), ``episodes.csv`` from ``records``; return the Markdown."""
        md = summary_markdown(results, plan)
        atomic_write_text(self.path / SUMMARY_CSV, summary_csv(rows))
        atomic_write_text(self.path / MAIN_CSV, rows_csv(results.main_rows()))
        atomic_write_text(self.path / FAIRNESS_CSV, rows_csv(results.fairness_rows()))
        atomic_write_text(self.path / EPISODES_CSV, episodes_csv(records, plan))
        atomic_write_text(self.path / SUMMARY_MD, md)
        return md


def _read_config(path: Path) -> Dict[str, Any]:
    """A run folder's ``config.json``. :raises ValueError: naming the file and the fix when it is damaged."""
    try:
        old = json.loads(path.read_bytes().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        old = e
    if not isinstance(old, dict):
        problem = f"not valid JSON ({old})" if isinstance(old, Exception) else "not a JSON object"
        raise ValueError(f"--resume: {str(path)!r} is damaged: {problem}; its evaluation cannot be checked. "
                         f"Start over with --overwrite (finished episodes are lost), or use another --name / --out")
    return old


def _episode_record(path: Path, number: int, line: str) -> Dict[str, Any]:
    """One complete line of ``episodes.jsonl``. :raises ValueError: naming the file, the line and the fix."""
    try:
        record = json.loads(line)
    except ValueError as e:
        record = e
    if not isinstance(record, dict) or "key" not in record:
        problem = f"not valid JSON ({record})" if isinstance(record, Exception) else "not an episode record"
        raise ValueError(f"{str(path)!r}, line {number}, is damaged: {problem}. Delete that line (its episode is "
                         f"run again on --resume), or start over with --overwrite")
    return record


def config_differences(old: Any, new: Any, prefix: str = "") -> List[str]:
    """Where two stored configs differ, as ``"field: old → new"`` strings."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            name = f"{prefix}.{k}" if prefix else str(k)
            if k not in old or k not in new:
                out.append(f"{name}: {'absent' if k not in old else _short(old[k])} → "
                           f"{'absent' if k not in new else _short(new[k])}")
            else:
                out += config_differences(old[k], new[k], name)
        return out
    return [] if old == new else [f"{prefix}: {_short(old)} → {_short(new)}"]


def _short(v: Any) -> str:
    s = json.dumps(v)
    return s if len(s) <= 80 else s[:77] + "..."


__all__ = ["CONFIG_FILE", "EPISODES_CSV", "EPISODES_FILE", "FAIRNESS_CSV", "FORMAT_VERSION", "MAIN_CSV", "SUMMARY_CSV",
           "SUMMARY_MD", "TABLE_FILES", "RunFolder", "atomic_write_text", "config_differences", "jsonable"]
