"""What a config may ask of this machine: memory estimated before it is allocated.

A size that cannot fit (``num_clients: 10**12``, an MLP of 10⁹ hidden units, N·s shards of 10⁹ each)
used to fail deep inside numpy or torch with ``MemoryError`` (or the allocator's ``RuntimeError``)
after minutes of work. The builders estimate what they are about to hold and call
:func:`refuse_if_too_big` first, which raises a ``ValueError`` naming the field, the figure and the
machine's memory. The estimates are lower bounds of the main arrays, so a refused config could never
have run; a config just under the limit may still be slow.
"""
from __future__ import annotations

import os
from pathlib import Path

#: Used when the machine's memory cannot be read.
FALLBACK_MEMORY = 1 << 40


def memory_budget() -> int:
    """Bytes this process may use: the machine's physical memory, or a smaller cgroup limit."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = FALLBACK_MEMORY
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < total:
            total = int(text)
    return int(total)


def format_bytes(n: float) -> str:
    """``1.5 GiB``, ``931 TiB``, ``8.6e+06 EiB``; ``2^1330 B`` for an integer no float can hold."""
    if isinstance(n, int) and n.bit_length() > 1000:
        return f"2^{n.bit_length() - 1} B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024:
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} EiB"


def refuse_if_too_big(nbytes: float, what: str, fix: str) -> None:
    """Raise ``ValueError`` when ``nbytes`` exceed :func:`memory_budget`.

    :param what: the config that asks for it and why, e.g. ``"config field 'num_clients' = 10**12
        (the observation and records of N clients)"``.
    :param fix: what to change.
    """
    budget = memory_budget()
    if nbytes > budget:
        raise ValueError(f"{what} needs about {format_bytes(nbytes)} of memory, more than this machine's "
                         f"{format_bytes(budget)}: {fix}")


__all__ = ["FALLBACK_MEMORY", "format_bytes", "memory_budget", "refuse_if_too_big"]
