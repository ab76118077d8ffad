"""Run the command-line scripts under tcmalloc when the machine has it.

glibc's malloc returns and re-requests the large, short-lived buffers of the
batched (vmapped) training step on every call; tcmalloc keeps them. Measured on
this project's 2-core machine: the vmapped K = 10 CNN step ran 1.1x faster and a
whole FAVOR-style round 1.2-1.4x faster with Debian's ``libtcmalloc-minimal4``
preloaded (docs/PERFORMANCE.md). An allocator
can only be chosen before the process starts, so :func:`reexec_with_tcmalloc`
restarts the script once with ``LD_PRELOAD`` set. Set ``FEDSEL_NO_TCMALLOC=1``
to opt out; nothing happens where the library is absent.
"""
from __future__ import annotations

import os
import sys
from typing import Optional

_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4",
    "/usr/lib/libtcmalloc_minimal.so.4",
)


def tcmalloc_path() -> Optional[str]:
    """The tcmalloc library's path, or ``None`` when the machine has none."""
    return next((p for p in _CANDIDATES if os.path.exists(p)), None)


def reexec_with_tcmalloc() -> None:
    """Restart this Python script with tcmalloc preloaded (once; a no-op when unavailable or opted out)."""
    if os.environ.get("FEDSEL_NO_TCMALLOC") or "tcmalloc" in os.environ.get("LD_PRELOAD", ""):
        return
    lib = tcmalloc_path()
    if lib is None or not sys.argv or not sys.argv[0].endswith(".py"):
        return
    env = dict(os.environ)
    env["LD_PRELOAD"] = f"{lib}:{env['LD_PRELOAD']}" if env.get("LD_PRELOAD") else lib
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.argv], env)
