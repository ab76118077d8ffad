"""Child processes that end with their parent, however the parent ends (issue #15, docs/ROBUSTNESS.md).

A process killed by SIGKILL, or by SIGTERM's default action, runs no clean-up of its own: no ``atexit``
handler, no ``weakref.finalize``, no join of its ``daemon`` children. Its worker processes, blocked on a
pipe that their own inherited copies keep open, would stay under PID 1 with their memory. So each
worker watches for itself:

* :func:`die_with_parent` (Linux): ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, the kernel kills the worker
  the moment its parent dies. The kernel sends it when the *thread* that forked the worker ends, so it
  is only set when the parent forked from its main thread (a short-lived helper thread's exit would
  otherwise kill a healthy worker).
* :func:`watch`: a daemon thread that checks twice a second that a process still lives (the parent by
  ``getppid``; a grandparent, as for a forkserver's children, by its pid and start time, so a reused
  pid does not count) and ends this process with ``os._exit`` when it does not. It covers what the
  first cannot: a fork from another thread, a forkserver between the two processes, other platforms.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from typing import Optional

PR_SET_PDEATHSIG = 1
#: seconds between two checks of :func:`watch`
INTERVAL = 0.5


def start_time(pid: int) -> Optional[int]:
    """Process ``pid``'s start time (clock ticks after boot; 0 where there is no ``/proc``), ``None`` when
    it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return None
    except OSError:  # no /proc (not Linux): existence is all we can tell
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:  # it exists, only owned by another user: alive
            pass
        return 0
    fields = stat[stat.rindex(b")") + 2:].split()  # fields from the 3rd (state); the 22nd is the start time
    return None if fields[0] in (b"Z", b"X") else int(fields[19])


def die_with_parent(parent_pid: int, forked_from_main_thread: bool) -> None:
    """In a freshly forked child of ``parent_pid``: end when the parent ends (both mechanisms above)."""
    if forked_from_main_thread and sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl: the watcher below still works
            pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
    watch(parent_pid, is_parent=True)


def die_with_grandparent(pid: int) -> None:
    """In a forkserver's child: end with the server (prctl; it forks from its main thread) and with
    process ``pid`` (the one that asked for this child, watched by pid and start time)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl here: the watch on ``pid`` below still ends this child
            pass
    if os.getppid() == 1:  # the server died before prctl took effect
        os._exit(1)
    watch(pid)


def watch(pid: int, is_parent: bool = False, interval: float = INTERVAL) -> threading.Thread:
    """Start a daemon thread that ends this process (``os._exit(1)``) once process ``pid`` has ended.

    :param is_parent: ``pid`` is this process's parent (checked with ``getppid``, which changes when the
        parent dies); else it is checked by its pid and start time.
    """
    born = start_time(pid)

    def gone() -> bool:
        return os.getppid() != pid if is_parent else born is None or start_time(pid) != born

    def run() -> None:
        while not gone():
            time.sleep(interval)
        os._exit(1)

    thread = threading.Thread(target=run, name=f"fedsel-lifeline-{pid}", daemon=True)
    thread.start()
    return thread
