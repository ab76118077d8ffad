"""Committed result records: one row per episode, every published figure recomputable from the rows.

A record is one JSON file (``experiments/results/<name>.json``, a benchmark's reference records) in the
format ``fedsel-record/1``::

    {"format": "fedsel-record/1",
     "experiment": "afl_rounds",                      # what wrote it
     "written_by": {"commit": sha, "dirty": bool, "dirty_files": [...]},   # the invocation that wrote the file
     "config": {...},                                 # the configuration as run (env configs, caps, seeds, ...)
     "chunks": [{"id": "c0", "commit": sha, "dirty": false, "dirty_files": [], "note": "...",
                 "platform": {"numpy": "2.4.6", "torch": "2.14.1", "cpu_capability": "AVX512", ...}}],
     "rows": [{"chunk": "c0", "policy": "afl", "training_seed": null, "seed": 3, "federation_seed": 3,
               "rounds": 27, "reached": true, "sim_time": 812.4, "final_accuracy": 0.903, ...}],
     "summaries": [{"name": "...", "stat": "paired_t", "field": "rounds", "where": {...}, "minus": {...},
                    "value": {"mean": -1.5, "lo": -4.2, "hi": 1.2, "n": 10}}],
     "notes": {...}}                                   # what is no figure (tuning choices, timings' context)

- **chunks**: every piece of work that computed rows, with the commit and dirty flag *it* ran at (a resumed
  run has several) and the ``platform`` its floats came from (:func:`platform_info`: library versions and the
  CPU's vector unit; ``null`` for a chunk carried from a record older than the field); each row names its chunk. A record that holds no episodes (its rows were lost) says
  so in ``summary_only`` (a reason) and its summaries carry ``"summary_only": true``.
- **rows**: one per episode (or per measurement: a timing). The episode fields are ``policy``,
  ``training_seed`` (the seed a trained policy was trained with; ``null`` for a hand-written one), ``seed``
  (the episode seed), ``federation_seed``, ``rounds``, ``reached``, ``sim_time``, ``final_accuracy``, and
  whatever else a table prints (``group`` or other keys tell the table's parts apart).
- **summaries** are never stored alone: each names how it is computed from the rows (:data:`STATS`) and
  holds the value computed when the record was written; ``python -m fedsel_eval.recompute`` recomputes
  every one and fails where a stored value differs.

Writing one (what ``experiments/`` and ``bench/`` do)::

    from fedsel_eval import records
    rec = records.Record("my_bench", config={"env": env_cfg, "cap": 60, "seeds": seeds})
    c = rec.chunk(records.git_provenance(ROOT, ("fedsel_env", "agents", "fedsel_eval")), note="first run")
    rec.add_episodes(c, episode_records, cap=60, group="digits")   # fedsel_eval episode records -> rows
    rec.add_row(c, policy="x", seed=0, rounds=12, reached=True)     # or rows by hand
    rec.summarise("afl − random, rounds", "paired_t", "rounds", where={"policy": "afl"},
                  minus={"policy": "random"})                       # computed now, from the rows
    rec.write(path)

Statistics (:data:`STATS`): ``mean``, ``sum``, ``std`` (``ddof`` given), ``min``, ``max``, ``median``, ``count``, ``t_interval`` (Student-t 95%),
``paired_t`` (a − b paired on ``pair_on``, default the episode seed; a side with several rows per key —
a trained policy's training seeds — is averaged per key first: the CI *conditional on the trained
models*; both sides must hold the same keys), ``paired_t_across`` (the same difference per training seed,
then a Student-t CI over the training seeds: the *method's* CI), ``paired_change_percent`` (the paired
difference over side b's mean, ×100) and ``paired_signs`` ([a lower, a higher, tied] counts).
"""
from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from agents.training.atomic import atomic_write_text, jsonable

from .stats import finite as _finite, t_interval as t_interval_of

FORMAT = "fedsel-record/1"
#: Two floats are the same figure when they differ by less than this (relative, and absolute near 0).
TOLERANCE = 1e-9
EPISODE_FIELDS = ("policy", "training_seed", "seed", "federation_seed", "rounds", "reached", "sim_time",
                  "final_accuracy")


# ============================================================================================ provenance
def _cpu_model() -> Optional[str]:
    """The CPU's model name from ``/proc/cpuinfo``; None where there is no such file (not Linux) or no such line."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    except OSError:
        return None


def platform_info() -> Dict[str, Any]:
    """What a chunk's floats depend on beyond its commit: Python, numpy, torch and scikit-learn versions, the CPU
    and the vector unit torch dispatches to. Two machines at one commit can round differently (BLAS kernels differ
    by vector unit and library version), so a row that does not reproduce elsewhere is read against this."""
    import platform

    import numpy
    import sklearn
    import torch

    cpu = _cpu_model() or platform.processor() or platform.machine()
    return {"python": platform.python_version(), "numpy": numpy.__version__, "torch": torch.__version__,
            "scikit-learn": sklearn.__version__, "cpu": cpu, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads()}


def git_provenance(root: Path, paths: Sequence[str] = (), exclude: Sequence[str] = (),
                   git: str = "git") -> Dict[str, Any]:
    """The git commit of ``root`` and whether tracked files under ``paths`` differ from it.

    :return: ``{"commit", "dirty", "dirty_files"}``; without git or a repository all three are ``None`` and
        ``commit_note`` says why.
    """
    spec = [*paths, *(f":(exclude){p}" for p in exclude)]
    try:
        sha = subprocess.run([git, "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True,
                             timeout=60).stdout.strip()
        changed = subprocess.run([git, "status", "--porcelain", "--untracked-files=no", "--", *spec], cwd=root,
                                 capture_output=True, text=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        why = (e.stderr or "").strip().splitlines()[-1:] if isinstance(e, subprocess.CalledProcessError) else [str(e)]
        return {"commit": None, "dirty": None, "dirty_files": None,
                "commit_note": f"no git commit recorded: {(why or [type(e).__name__])[0]} "
                               f"(not a git checkout, or git is not installed)"}
    files = sorted(line[3:].split(" -> ")[-1] for line in changed.splitlines() if line.strip())
    return {"commit": sha, "dirty": bool(files), "dirty_files": files}


# ============================================================================================ statistics
def t_interval(values: Sequence[Any], confidence: float = 0.95) -> Dict[str, Any]:
    """Mean of the finite ``values`` with its Student-t interval (``lo``/``hi`` None below two values):
    :func:`fedsel_eval.stats.t_interval` in the record's form (:meth:`~fedsel_eval.stats.TInterval.record`)."""
    return t_interval_of(values, confidence).record()


def select(rows: Sequence[Mapping[str, Any]], where: Mapping[str, Any]) -> List[Mapping[str, Any]]:
    """The rows whose fields equal ``where``'s values (a list value: any of them)."""
    def ok(r: Mapping[str, Any]) -> bool:
        return all((r.get(k) in v) if isinstance(v, list) else (r.get(k) == v) for k, v in where.items())
    return [r for r in rows if ok(r)]


def _keyed(rows: Sequence[Mapping[str, Any]], field: str, pair_on: Sequence[str]) -> Dict[Tuple, List[float]]:
    out: Dict[Tuple, List[float]] = {}
    for r in rows:
        out.setdefault(tuple(r.get(k) for k in pair_on), []).append(r.get(field))
    return out


def _pairs(spec: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> Tuple[Dict, Dict]:
    pair_on = spec.get("pair_on", ["seed"])
    a = _keyed(select(rows, spec["where"]), spec["field"], pair_on)
    b = _keyed(select(rows, spec["minus"]), spec["field"], pair_on)
    if not a or set(a) != set(b):
        only_a, only_b = sorted(map(str, set(a) - set(b)))[:5], sorted(map(str, set(b) - set(a)))[:5]
        raise ValueError(f"summary {spec['name']!r}: the two sides do not hold the same {pair_on} "
                         f"({len(a)} and {len(b)} keys; only in the first: {only_a}, only in the second: "
                         f"{only_b}): a paired difference needs the same seeds on both sides")
    if any(len(v) != 1 for v in b.values()):
        raise ValueError(f"summary {spec['name']!r}: the subtracted side has several rows per {pair_on}")
    return a, b


def _mean_of(v: Sequence[Any]) -> float:
    x = _finite(v)
    return float(x.mean()) if x.size else math.nan


def _paired_diffs(spec: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> List[float]:
    a, b = _pairs(spec, rows)
    return [_mean_of(a[k]) - float(b[k][0]) for k in sorted(a, key=str)]


def _paired_across(spec: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    by = spec.get("across", "training_seed")
    mine = select(rows, spec["where"])
    per_seed = []
    for ts in sorted({r.get(by) for r in mine}, key=str):
        sub = {**spec, "where": {**spec["where"], by: ts}}
        per_seed.append(float(np.mean(_paired_diffs(sub, rows))))
    return {**t_interval(per_seed), "per_" + by: per_seed}


def _change_percent(spec: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    d = t_interval(_paired_diffs(spec, rows))
    base = _mean_of([r.get(spec["field"]) for r in select(rows, spec["minus"])])
    return {k: (None if d[k] is None else 100.0 * d[k] / base) if k in ("mean", "lo", "hi") else d[k] for k in d}


def _signs(spec: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> List[int]:
    d = np.asarray(_paired_diffs(spec, rows))
    return [int((d < 0).sum()), int((d > 0).sum()), int((d == 0).sum())]


def _values(spec: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> List[Any]:
    return [r.get(spec["field"]) for r in select(rows, spec.get("where", {}))]


def _of(fn: Callable[[np.ndarray], Any], spec: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
        least: int = 1) -> Optional[float]:
    """``fn`` of the finite values of the spec's field over its rows (None with fewer than ``least``)."""
    x = _finite(_values(spec, rows))
    return float(fn(x)) if x.size >= least else None


#: How each summary is computed from the rows: ``stat`` name → function of (summary spec, rows).
STATS: Dict[str, Callable[[Mapping[str, Any], Sequence[Mapping[str, Any]]], Any]] = {
    "mean": lambda s, rows: _of(np.mean, s, rows),
    "std": lambda s, rows: _of(lambda x: x.std(ddof=int(s["ddof"])), s, rows, least=int(s["ddof"]) + 1),
    "sum": lambda s, rows: _of(np.sum, s, rows),
    "min": lambda s, rows: _of(np.min, s, rows),
    "max": lambda s, rows: _of(np.max, s, rows),
    "median": lambda s, rows: _of(np.median, s, rows),
    "count": lambda s, rows: len(select(rows, s.get("where", {}))),
    "t_interval": lambda s, rows: t_interval(_values(s, rows)),
    "paired_t": lambda s, rows: t_interval(_paired_diffs(s, rows)),
    "paired_t_across": _paired_across,
    "paired_change_percent": _change_percent,
    "paired_signs": _signs,
}
_NEEDS = {"mean": ("field",), "sum": ("field",), "min": ("field",), "max": ("field",), "median": ("field",), "std": ("field", "ddof"), "count": (), "t_interval": ("field",),
          "paired_t": ("field", "where", "minus"), "paired_t_across": ("field", "where", "minus"),
          "paired_change_percent": ("field", "where", "minus"), "paired_signs": ("field", "where", "minus")}


def compute(spec: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> Any:
    """The value of one summary ``spec`` over ``rows``."""
    stat = spec.get("stat")
    if stat not in STATS:
        raise ValueError(f"summary {spec.get('name')!r}: stat {stat!r} is not one of {sorted(STATS)}")
    missing = [k for k in _NEEDS[stat] if k not in spec]
    if missing:
        raise ValueError(f"summary {spec.get('name')!r}: stat {stat!r} needs {missing}")
    return jsonable(STATS[stat](spec, rows))


def same(stored: Any, recomputed: Any, tol: float = TOLERANCE) -> bool:
    """Whether two summary values are the same figure (floats within ``tol``, relative or absolute)."""
    if isinstance(stored, Mapping) and isinstance(recomputed, Mapping):
        return set(stored) == set(recomputed) and all(same(stored[k], recomputed[k], tol) for k in stored)
    if isinstance(stored, (list, tuple)) and isinstance(recomputed, (list, tuple)):
        return len(stored) == len(recomputed) and all(same(a, b, tol) for a, b in zip(stored, recomputed))
    if isinstance(stored, bool) or isinstance(recomputed, bool) or stored is None or recomputed is None:
        return stored == recomputed
    if isinstance(stored, (int, float)) and isinstance(recomputed, (int, float)):
        a, b = float(stored), float(recomputed)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return abs(a - b) <= tol * max(1.0, abs(a), abs(b))
    return stored == recomputed


def figures_in(value: Any) -> int:
    """How many numbers a summary value holds (an interval: mean, lo, hi)."""
    if isinstance(value, Mapping):
        return sum(figures_in(v) for k, v in value.items() if k != "n")
    if isinstance(value, (list, tuple)):
        return sum(figures_in(v) for v in value)
    return int(isinstance(value, (int, float)) and not isinstance(value, bool))


# ============================================================================================ the record
#: how the note of a chunk carried from a committed record starts (:meth:`Record.chunk_of`)
CARRIED = "carried from the committed record's chunk"


class Record:
    """A record being written (or one loaded: :func:`load`).

    :param experiment: what writes it (``experiments/<name>.py``, a benchmark's name).
    :param config: the configuration as run (JSON-able).
    """

    def __init__(self, experiment: str, config: Mapping[str, Any], notes: Optional[Mapping[str, Any]] = None,
                 summary_only: Optional[str] = None) -> None:
        self.experiment, self.config = experiment, jsonable(config)
        self.notes: Dict[str, Any] = dict(jsonable(notes or {}))
        self.summary_only = summary_only
        self.chunks: List[Dict[str, Any]] = []
        self.rows: List[Dict[str, Any]] = []
        self.summaries: List[Dict[str, Any]] = []
        self.written_by: Optional[Dict[str, Any]] = None
        self._carried: Dict[str, str] = {}

    def chunk(self, provenance: Mapping[str, Any], note: str = "", **extra: Any) -> str:
        """Add a chunk of work run at ``provenance`` (:func:`git_provenance`'s dict); return its id. Its ``platform``
        is this process's (:func:`platform_info`) unless ``provenance`` names one (a carried chunk's, or ``None``)."""
        cid = f"c{len(self.chunks)}"
        platform = provenance["platform"] if "platform" in provenance else platform_info()
        self.chunks.append({"id": cid, "commit": provenance.get("commit"), "dirty": provenance.get("dirty"),
                            "dirty_files": provenance.get("dirty_files"), "note": note, "platform": platform,
                            **jsonable(extra)})
        return cid

    def chunk_of(self, row: Mapping[str, Any], default: str, why: str = "not played on this machine") -> str:
        """The chunk ``row`` goes in: ``default`` (this run's), or, for a row carried from a committed record (its
        ``_carried_from``: that record's chunk, a dict with ``id``, ``commit`` and ``note``), a chunk of this record
        per source chunk, made when first needed, keeping the source's commit. Scripts that grow a record over
        sessions carry what ``runs/`` no longer holds this way (``experiments/bench_rl.py``, ``bench_generalist.py``)."""
        src = row.get("_carried_from")
        if src is None:
            return default
        if src["id"] not in self._carried:
            note = src.get("note", "")
            if not note.startswith(CARRIED):  # carried again: its note already says where it came from (no nesting)
                note = f"{CARRIED} {src['id']} ({note}): {why}"
            self._carried[src["id"]] = self.chunk({**src, "platform": src.get("platform")}, note=note)
        return self._carried[src["id"]]

    def carry(self, row: Mapping[str, Any], default: str, why: str = "not played on this machine") -> Dict[str, Any]:
        """Add a row carried from a committed record (one of :func:`carried_rows`) in the chunk :meth:`chunk_of` gives
        it (``default`` for a row not carried)."""
        return self.add_row(self.chunk_of(row, default, why),
                            **{k: v for k, v in row.items() if k not in ("_carried_from", "chunk")})

    def add_row(self, chunk: str, **fields: Any) -> Dict[str, Any]:
        """Add one row (an episode: :data:`EPISODE_FIELDS`, and whatever a table prints) computed in ``chunk``."""
        if chunk not in {c["id"] for c in self.chunks}:
            raise ValueError(f"record {self.experiment!r}: row names chunk {chunk!r}, which the record lacks "
                             f"(add it with Record.chunk first)")
        row = {"chunk": chunk, **jsonable(fields)}
        self.rows.append(row)
        return row

    def add_episodes(self, chunk: str, episodes: Sequence[Mapping[str, Any]], cap: Optional[float] = None,
                     training_seed: Optional[int] = None, **fields: Any) -> None:
        """Add ``fedsel_eval`` episode records (``episodes.jsonl`` lines) as rows; a missed Ω counts as ``cap``
        rounds in ``rounds`` (``reached`` says which)."""
        for e in episodes:
            m = e["metrics"]
            rounds = m["rounds_to_target"] if e["reached"] else (cap if cap is not None else m["rounds"])
            self.add_row(chunk, policy=e["policy"], training_seed=training_seed, seed=e["seed"],
                         federation_seed=e.get("federation_seed"), backend=e.get("backend"), rounds=rounds,
                         reached=bool(e["reached"]), rounds_played=m["rounds"], sim_time=m["sim_time"],
                         final_accuracy=m["final_accuracy"], best_accuracy=m.get("best_accuracy"), **fields)

    def summarise(self, name: str, stat: str, field: Optional[str] = None, *, stored: Any = None,
                  summary_only: bool = False, reason: Optional[str] = None, **spec: Any) -> Any:
        """Add a summary computed from the rows now (or, for a migrated record whose figure was published,
        ``stored``: the published value, checked against the rows by ``recompute``); return its value."""
        s = {"name": name, "stat": stat, **({"field": field} if field is not None else {}), **jsonable(spec)}
        if any(x["name"] == name for x in self.summaries):
            raise ValueError(f"record {self.experiment!r}: two summaries named {name!r}")
        if summary_only:
            s.update(summary_only=True, value=jsonable(stored), **({"reason": reason} if reason else {}))
        else:
            s["value"] = compute(s, self.rows)
            if stored is not None and not same(jsonable(stored), s["value"]):
                raise ValueError(f"record {self.experiment!r}: summary {name!r} was published as {stored!r}, "
                                 f"but its rows give {s['value']!r}")
            if stored is not None:
                s["value"] = jsonable(stored)
        self.summaries.append(s)
        return s["value"]

    def compare(self, name: str, where: Mapping[str, Any], minus: Mapping[str, Any], tag: str,
                into: Dict[str, Any]) -> Dict[str, Any]:
        """A trained method's paired difference (``where`` − ``minus``, paired by seed) as two summaries — across
        training seeds (``paired_t_across``, ``<name>, across training seeds``: the method's CI) and paired by seed
        (``paired_t``, ``<name>, paired by seed``: conditional on the trained models) — written into ``into`` as
        ``delta_vs_<tag>``, ``delta_vs_<tag>_ci_across``, ``delta_vs_<tag>_ci`` and ``p_vs_<tag>`` (the t-test of the
        per-seed means); returns ``into``."""
        from .stats import t_interval as t_test

        across = self.summarise(f"{name}, across training seeds", "paired_t_across", "value", where=where, minus=minus)
        cond = self.summarise(f"{name}, paired by seed", "paired_t", "value", where=where, minus=minus)
        into[f"delta_vs_{tag}"] = across["mean"]
        into[f"delta_vs_{tag}_ci_across"] = [across["lo"], across["hi"]]
        into[f"delta_vs_{tag}_ci"] = [cond["lo"], cond["hi"]]
        into[f"p_vs_{tag}"] = t_test(across["per_training_seed"]).p
        return into

    def value(self, name: str) -> Any:
        """A summary's value by name."""
        for s in self.summaries:
            if s["name"] == name:
                return s["value"]
        raise KeyError(f"record {self.experiment!r} has no summary {name!r}")

    def to_dict(self) -> Dict[str, Any]:
        return {"format": FORMAT, "experiment": self.experiment, "written_by": self.written_by,
                **({"summary_only": self.summary_only} if self.summary_only else {}),
                "config": self.config, "chunks": self.chunks, "rows": self.rows, "summaries": self.summaries,
                "notes": self.notes}

    def write(self, path: Path, written_by: Optional[Mapping[str, Any]] = None) -> Path:
        """Check the record and write it to ``path`` (atomically: a temporary file, then a rename)."""
        if written_by is not None:
            self.written_by = dict(written_by)
        data = self.to_dict()
        check(data, str(path))
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(data, indent=1, allow_nan=False) + "\n")
        return path


def check(data: Mapping[str, Any], where: str) -> None:
    """Raise ``ValueError`` (naming ``where`` and the field) unless ``data`` is a well-formed record."""
    if data.get("format") != FORMAT:
        raise ValueError(f"{where}: 'format' is {data.get('format')!r}, expected {FORMAT!r} "
                         f"(not a fedsel record; fedsel_eval.records writes them)")
    for key, kind in (("experiment", str), ("config", dict), ("chunks", list), ("rows", list), ("summaries", list)):
        if not isinstance(data.get(key), kind):
            raise ValueError(f"{where}: field {key!r} must be a {kind.__name__}")
    ids = {c.get("id") for c in data["chunks"]}
    for c in data["chunks"]:
        if not {"id", "commit", "dirty"} <= set(c):
            raise ValueError(f"{where}: chunk {c.get('id')!r} needs 'id', 'commit' and 'dirty'")
    for i, r in enumerate(data["rows"]):
        if r.get("chunk") not in ids:
            raise ValueError(f"{where}: rows[{i}] names chunk {r.get('chunk')!r}, not one of {sorted(ids)}")
        if "policy" in r and "seed" not in r:
            raise ValueError(f"{where}: rows[{i}] is an episode of {r['policy']!r} without its 'seed'")
    if data["rows"] and not data["chunks"]:
        raise ValueError(f"{where}: rows without a chunk (the commit that computed them)")
    for s in data["summaries"]:
        if "name" not in s or "stat" not in s or "value" not in s:
            raise ValueError(f"{where}: every summary needs 'name', 'stat' and 'value' ({s.get('name')!r})")
        if s.get("summary_only") and not (data.get("summary_only") or s.get("reason")):
            raise ValueError(f"{where}: summary {s['name']!r} is summary-only but neither it ('reason') nor the "
                             f"record ('summary_only') says why")


def carried_rows(data: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """A loaded record's rows, each with the chunk it came from as ``_carried_from`` (what :meth:`Record.carry` and
    :meth:`Record.chunk_of` read): a report that grows a record over sessions carries what ``runs/`` no longer holds."""
    chunks = {c["id"]: c for c in data["chunks"]}
    return [{**r, "_carried_from": chunks[r["chunk"]]} for r in data["rows"]]


def load(path: Path) -> Dict[str, Any]:
    """Read and check a record file (``ValueError`` naming the file when it is not one)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: cannot read a record: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a record is a JSON object")
    check(data, str(path))
    return data


__all__ = ["EPISODE_FIELDS", "FORMAT", "STATS", "TOLERANCE", "Record", "carried_rows", "check", "compute",
           "figures_in", "git_provenance", "load", "same", "select", "t_interval"]
