"""Files written safely: whole files through a temp name and ``os.replace``; appended lines whole or not at all;
one writer per run folder (issue #30).

- A crash or ``SIGKILL`` mid-write leaves the previous file (or none), never a half-written one.
- A full disk (``ENOSPC``, a quota, any ``OSError``) while writing raises a ``ValueError`` naming the file
  and the fix; the temp file is removed, and an interrupted append is cut back to the last whole line.
- :func:`lock_run_folder` holds an exclusive ``fcntl.flock`` on ``<folder>/.lock`` for the life of a run:
  a second writer (a concurrent ``--resume``, the same command twice) is refused with a clear message.
  The kernel drops the lock when the process ends, however it ends: a lock is never left stale.

``train_agent.py`` and ``fedsel_eval`` (``evaluate.py``, ``experiments/``) write through these.
"""
from __future__ import annotations

import contextlib
import errno
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Union

import numpy as np
import yaml

#: The lock file of a run folder.
LOCK_FILE = ".lock"


def write_error(path: Union[str, Path], e: OSError) -> ValueError:
    """The error for a file that could not be written: the file, the reason, and what to do."""
    reason = e.strerror or str(e)
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = ("free space on that disk (or give another folder: --runs-dir / --out), then continue with "
               "--resume: what was written before is intact")
    else:
        fix = "check that the folder exists and is writable, then continue with --resume"
    return ValueError(f"cannot write {str(path)!r}: {reason} ({errno.errorcode.get(e.errno, e.errno)}); {fix}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through ``<path>.tmp`` (fsync'ed) and ``os.replace``.

    :raises ValueError: naming ``path`` when the disk is full (or any ``OSError``); no ``.tmp`` is left.
    """
    def write(tmp: Path) -> None:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    atomic_save(write, path)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_yaml(path: Path, data: Any) -> None:
    """Write ``data`` as YAML to ``path`` atomically (:func:`atomic_write_bytes`)."""
    atomic_write_text(path, yaml.safe_dump(plain(data), sort_keys=False))


def atomic_save(obj_save: Callable[[Path], None], path: Path) -> None:
    """Call ``obj_save(tmp)`` then move ``tmp`` onto ``path`` (SB3 keeps a ``.tmp`` suffix as it is).

    :raises ValueError: naming ``path`` when the disk is full (or any ``OSError``); no ``.tmp`` is left.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        obj_save(tmp)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_error(path, e) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def append_line(path: Path, line: str) -> None:
    """Append ``line`` and a newline to ``path``, fsync'ed: whole, or not at all.

    :raises ValueError: naming ``path`` when the disk is full (or any ``OSError``); the file is cut back
        to its last whole line first.
    """
    path = Path(path)
    data = (line + "\n").encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as e:
        raise write_error(path, e) from None
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except OSError as e:
            with contextlib.suppress(OSError):  # truncating frees space, so it works on a full disk
                os.ftruncate(fd, start)
            raise write_error(path, e) from None
    finally:
        os.close(fd)


class RunFolderLock:
    """An exclusive ``flock`` on ``<folder>/.lock`` (see :func:`lock_run_folder`); ``release`` frees it."""

    def __init__(self, folder: Union[str, Path], what: str) -> None:
        import fcntl

        self.path = Path(folder) / LOCK_FILE
        Path(folder).mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a+")
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip() or "another process"
            self._file.close()
            raise ValueError(f"run folder {str(folder)!r} is in use by {holder}: one run writes a folder at a "
                             f"time. Wait for it to finish (or stop it), then run again (with --resume to "
                             f"continue it); or use another --name / --out") from None
        self._file.seek(0)
        self._file.truncate()
        self._file.write(f"{what} (pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')})\n")
        self._file.flush()

    def release(self) -> None:
        """Free the lock (closing the file frees it)."""
        if not self._file.closed:
            self._file.close()


@contextlib.contextmanager
def lock_run_folder(folder: Union[str, Path], what: str) -> Iterator[RunFolderLock]:
    """Hold an exclusive lock on the run folder ``folder`` (created if missing) while the block runs.

    :param what: who holds it (``"train_agent.py"``), told to a second writer.
    :raises ValueError: when another process (or another run in this one) holds it.
    """
    lock = RunFolderLock(folder, what)
    try:
        yield lock
    finally:
        lock.release()


def plain(x: Any, finite: bool = False) -> Any:
    """Plain YAML / JSON types: string keys, numpy scalars and arrays unpacked, tuples as lists; ``finite``: NaN
    and ±inf as ``None`` too (JSON's null: :func:`jsonable`). The one cleaning rule of every file written."""
    if isinstance(x, Mapping):
        return {str(k): plain(v, finite) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [plain(v, finite) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if finite and isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def jsonable(x: Any) -> Any:
    """Plain JSON types: :func:`plain` with NaN and ±inf as null (run folders, records, results)."""
    return plain(x, finite=True)


def scenario_key(scenario: Any) -> Any:
    """How a run's config names its scenario: a registered name or id as given; a YAML scenario file by its file
    name and the sha256 of its bytes, not its path (a resume from another directory, or from the run's own copy of
    the file, is the same run; an edited file is another)."""
    import hashlib

    if isinstance(scenario, str) and scenario.endswith((".yml", ".yaml")) and Path(scenario).is_file():
        return f"{Path(scenario).name} sha256:{hashlib.sha256(Path(scenario).read_bytes()).hexdigest()[:16]}"
    return scenario


def pin_run_config(folder: Path, conf: Mapping[str, Any], what: str) -> None:
    """Write ``conf`` as ``folder/config.json``, or refuse when the folder already holds a run of another config
    (a resume must use the same settings); ``what`` names the run's kind in the error. Its ``scenario`` is
    pinned as :func:`scenario_key` names it."""
    import json

    if "scenario" in conf:
        conf = {**conf, "scenario": scenario_key(conf["scenario"])}
    path = Path(folder) / "config.json"
    text = json.dumps(conf, sort_keys=True, indent=1, default=list)
    if path.is_file() and json.loads(path.read_text()) != json.loads(text):
        raise ValueError(f"{folder} holds a {what} run of another config ({path}): use a new folder or the same "
                         f"settings to resume")
    atomic_write_text(path, text + "\n")

