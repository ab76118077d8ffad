"""What a config may ask of this machine: memory estimated before it is allocated; and how big, deep and
long a value a user writes may be before it is even looked at (issue #30).

A size that cannot fit (``num_clients: 10**12``, an MLP of 10⁹ hidden units, N·s shards of 10⁹ each)
used to fail deep inside numpy or torch with ``MemoryError`` (or the allocator's ``RuntimeError``)
after minutes of work. The builders estimate what they are about to hold and call
:func:`refuse_if_too_big` first, which raises a ``ValueError`` naming the field, the figure and the
machine's memory. The estimates are lower bounds of the main arrays, so a refused config could never
have run; a config just under the limit may still be slow.

One number or one name a user writes is read by :func:`real_in` / :func:`is_choice` (issue #44): an integer
beyond float's range, NaN, ±inf, a bool, ``-0.0`` where a range starts at 0, or an array where a name is
expected is a plain "no" for the caller to name its field with — never ``OverflowError`` or numpy's
"scale < 0" / "truth value of an array ... is ambiguous".
"""
from __future__ import annotations

import math
import numbers
import os
import reprlib
from pathlib import Path
from typing import Any, Iterable, Optional

#: Used when the machine's memory cannot be read.
FALLBACK_MEMORY = 1 << 40


def _address_space_left() -> Optional[int]:
    """Bytes of address space left under ``ulimit -v`` (``RLIMIT_AS``): its soft limit less what this process
    has mapped (``VmSize``); None when there is no such limit."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, ValueError, OSError):
        return None
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return None
    mapped = 0
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                mapped = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):  # no /proc (not Linux): the whole limit counts as free
        pass
    return max(int(soft) - mapped, 0)


def memory_budget() -> int:
    """Bytes this process may use: the machine's physical memory, or a smaller cgroup limit, or the address
    space ``ulimit -v`` (``RLIMIT_AS``) leaves this process."""
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
    left = _address_space_left()
    if left is not None and left < total:
        total = left
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


# --- values a user writes: shortened in messages; size, depth and integers bounded --------------------------
#: A config value's most nodes once YAML aliases (or shared Python objects) are expanded; per-client lists
#: of 100,000 clients fit.
MAX_VALUE_NODES = 1_000_000
#: A config value's deepest nesting (a config is at most a few levels deep).
MAX_VALUE_DEPTH = 32
#: The longest string a config value may be.
MAX_STRING_CHARS = 1 << 20
#: The longest integer a config may give, in bits (about 2,466 digits: Python prints no int over 4,300).
MAX_INT_BITS = 8192

#: The longest a value is shown in an error message.
SHORT_CHARS = 160
_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxtuple = 80, 80, 8, 8
_SHORT.maxdict, _SHORT.maxset, _SHORT.maxlevel, _SHORT.maxlong = 8, 8, 3, 60


class TooLongInteger:
    """A YAML integer of more digits than :data:`MAX_INT_BITS` allow (Python would not even read it), kept as
    this marker so that :func:`check_value_shape` refuses it naming its field."""

    def __init__(self, digits: int) -> None:
        self.digits = int(digits)

    def __repr__(self) -> str:
        return f"<an integer of {self.digits:,} digits>"


def short(value: Any) -> str:
    """``repr(value)`` cut to a readable length for an error message (``reprlib``): never the whole of a huge
    or deeply nested value, and no ``ValueError`` for an integer of more digits than Python prints."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        return f"<an integer of about {int(value.bit_length() * 0.30103) + 1:,} digits>"
    try:
        text = _SHORT.repr(value)
    except (ValueError, RecursionError, TypeError):  # a huge int inside, or a pathological object
        return f"<a {type(value).__name__}>"
    return text if len(text) <= SHORT_CHARS else text[:SHORT_CHARS - 5] + " ...]"


# --- one number or one name a user writes --------------------------------------------------------------------
def as_real(value: Any) -> Optional[float]:
    """``value`` as a float when it is one real number (an int, a float or a numpy real scalar, not a bool);
    ``±inf`` for an integer beyond float's range (10**400 has no float, and ``float()`` would raise
    ``OverflowError``); ``None`` for anything else (a bool, a string, a list, an array, ``None``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # np.bool_ is no numbers.Real
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def is_negative_zero(value: Any) -> bool:
    """Whether ``value`` is the float -0.0 (it equals 0, but numpy reads its sign)."""
    return isinstance(value, float) and value == 0 and math.copysign(1.0, value) < 0


def real_in(value: Any, lo: float = -math.inf, hi: float = math.inf, lo_open: bool = False,
            hi_open: bool = False) -> Optional[float]:
    """``value`` as a float when it is a finite real number (:func:`as_real`) in the range, else ``None``.

    A range that starts at 0 (closed) refuses ``-0.0``: it equals 0 but numpy reads its sign (``rng.normal(0,
    -0.0)`` raises "scale < 0"), so the user is asked to write 0 (:func:`reals_text` says so).
    """
    v = as_real(value)
    if v is None or not math.isfinite(v):
        return None
    if (v <= lo if lo_open else v < lo) or (v >= hi if hi_open else v > hi):
        return None
    if lo == 0 and not lo_open and is_negative_zero(v):
        return None
    return v


def reals_text(lo: float = -math.inf, hi: float = math.inf, lo_open: bool = False, hi_open: bool = False,
               given: Any = None) -> str:
    """What :func:`real_in` admits, in words (``a finite number in [0, 1)``); when the value ``given`` is -0.0,
    why it is refused and the fix."""
    if math.isfinite(lo) and math.isfinite(hi):
        text = f"a finite number in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    elif math.isfinite(lo):
        text = f"a finite number {'>' if lo_open else '>='} {lo:g}"
    elif math.isfinite(hi):
        text = f"a finite number {'<' if hi_open else '<='} {hi:g}"
    else:
        text = "a finite number"
    if is_negative_zero(given):
        text += " (-0.0 is negative zero, which numpy refuses as a scale: write 0)"
    return text


def is_choice(value: Any, allowed: Iterable[str]) -> bool:
    """Whether ``value`` is one of the ``allowed`` names: a string first (an array or a list compared with a
    name would be compared element by element, or be unhashable), then a member."""
    return isinstance(value, str) and value in tuple(allowed)


def check_value_shape(value: Any, field: str, what: Optional[str] = None) -> None:
    """Refuse a value too big once expanded, nested too deep, or holding an integer too long, before anything
    walks it recursively (``repr``, ``deepcopy``, validation). Iterative; shared objects (YAML aliases) are
    sized once each, so a billion-node alias bomb is measured in microseconds.

    :param what: how errors name the value (default ``config field '<field>.<key>'``).
    :raises ValueError: naming ``field`` (and the key within it) and the limit.
    """
    def name(where: str) -> str:
        return what or f"config field {where!r}"

    sizes: dict = {}
    stack = [(value, 1, False, field)]
    while stack:
        v, depth, done, where = stack.pop()
        if isinstance(v, int) and not isinstance(v, bool):
            if v.bit_length() > MAX_INT_BITS:
                raise ValueError(f"{name(where)} = {short(v)} is invalid: integers are limited to "
                                 f"{MAX_INT_BITS} bits (about {int(MAX_INT_BITS * 0.30103):,} digits); give a "
                                 f"smaller number")
            continue
        if isinstance(v, (str, bytes)):
            if len(v) > MAX_STRING_CHARS:
                raise ValueError(f"{name(where)} is a string of {len(v):,} characters, over the {MAX_STRING_CHARS:,} "
                                 f"a config value may have: {short(v)}")
            continue
        if isinstance(v, TooLongInteger):
            raise ValueError(f"{name(where)} = {v!r} is invalid: integers are limited to {MAX_INT_BITS} bits "
                             f"(about {int(MAX_INT_BITS * 0.30103):,} digits); give a smaller number")
        if not isinstance(v, (list, tuple, dict, set, frozenset)):
            continue
        if depth > MAX_VALUE_DEPTH:
            raise ValueError(f"{name(where)} is nested more than {MAX_VALUE_DEPTH} levels deep: "
                             f"{short(v)}; a config value is a number, a string, or a short list or mapping")
        if isinstance(v, dict):
            children = [(c, f"{where}.{k}" if isinstance(k, str) and len(k) < 80 else where)
                        for k, x in v.items() for c in (k, x)]
        else:
            children = [(c, where) for c in v]
        if done:
            sizes[id(v)] = 1 + sum(sizes.get(id(c), 1) for c, _ in children)
            if sizes[id(v)] > MAX_VALUE_NODES:
                raise ValueError(f"{name(field)} expands to more than {MAX_VALUE_NODES:,} items "
                                 f"(YAML aliases repeated?): {short(v)}; write the value out in full, smaller")
            continue
        if id(v) in sizes:
            continue
        sizes[id(v)] = 1  # in progress: a self-referencing value counts its back edge once
        stack.append((v, depth, True, where))
        stack.extend((c, depth + 1, False, w) for c, w in children)


__all__ = ["FALLBACK_MEMORY", "MAX_INT_BITS", "MAX_VALUE_DEPTH", "MAX_VALUE_NODES", "TooLongInteger", "as_real",
           "check_value_shape", "format_bytes", "is_choice", "is_negative_zero", "memory_budget", "real_in",
           "reals_text", "refuse_if_too_big", "short"]


def checked_seed(seed: Any) -> Optional[int]:
    """A reset seed as an ``int`` (None stays None); anything but an integer >= 0 is a ``ValueError``."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:  # np.bool_ is no Integral
        raise ValueError(f"reset seed {seed!r} is invalid: expected an integer >= 0 or None")
    return int(seed)
