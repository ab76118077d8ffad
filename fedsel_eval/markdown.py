"""Markdown that the evaluation and the studies write: one table builder and one doc splicer (issue #46).

Every table a script prints or publishes is :func:`table` (plain, or padded into aligned columns as
``evaluate.py``'s summaries are), and every generated block of README.md / docs/*.md is put in place by
:func:`splice`, between ``<!-- <marker> begin -->`` and ``<!-- <marker> end -->`` (the marker names its writer:
``bench:reference``, ``repro:favor_study``, ``robustness:table``), the file replaced whole or not at all
(``agents.training.atomic.atomic_write_text``), so a crash never leaves a document half written.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple

from agents.training.atomic import atomic_write_text

#: how a column may be aligned: left, right, centred
ALIGNS = ("l", "r", "c")


def table(headers: Sequence[Any], rows: Sequence[Sequence[Any]], align: Optional[str] = None,
          pad: bool = False) -> str:
    """A Markdown table, one line a row, ending in a newline.

    :param align: one character per column, ``l``, ``r`` or ``c`` (default: the first column left, the others
        right, as numbers are).
    :param pad: pad the cells into aligned columns (each at least 3 wide), so that the table reads the same in a
        terminal as rendered.
    :raises ValueError: when ``align`` or a row does not have one entry per header, or ``align`` holds another
        character.
    """
    n = len(headers)
    align = "l" + "r" * (n - 1) if align is None else align
    if len(align) != n or any(a not in ALIGNS for a in align):
        raise ValueError(f"table: align {align!r} must hold one of {'/'.join(ALIGNS)} per column ({n} columns)")
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    short = [i for i, row in enumerate(cells[1:]) if len(row) != n]
    if short:
        raise ValueError(f"table: row {short[0]} has {len(cells[short[0] + 1])} cells for {n} headers: give every "
                         f"row one cell per header")
    widths = [max(3, *(len(row[j]) for row in cells)) if pad else 0 for j in range(n)]

    def cell(text: str, w: int, a: str) -> str:
        return text.rjust(w) if a == "r" else text.center(w) if a == "c" else text.ljust(w)

    def rule(w: int, a: str) -> str:
        dashes = "-" * max(w - (a == "c") * 2 - (a == "r") + 2, 3 - (a != "l")) if pad else "---"
        return {"l": dashes, "r": dashes + ":", "c": ":" + dashes + ":"}[a]

    lines = ["| " + " | ".join(cell(c, w, a) for c, w, a in zip(row, widths, align)) + " |" for row in cells]
    lines.insert(1, "|" + "|".join(rule(w, a) for w, a in zip(widths, align)) + "|")
    return "\n".join(lines) + "\n"


def markers(marker: str) -> Tuple[str, str]:
    """The begin and end comments of a generated block named ``marker``."""
    return f"<!-- {marker} begin -->", f"<!-- {marker} end -->"


def splice(doc: Path, marker: str, text: str, append: bool = True) -> None:
    """Put ``text`` between ``<!-- <marker> begin -->`` and ``<!-- <marker> end -->`` in ``doc`` (only that block:
    the others, and ``$1`` or ``\\1`` in ``text``, are left as they are), the file replaced atomically.

    :param append: where ``doc`` lacks the markers, append the block with its markers (True), or refuse (False:
        a document whose place for the block must already be chosen).
    :raises ValueError: when the markers are absent and ``append`` is False.
    """
    doc = Path(doc)
    begin, end = markers(marker)
    old = doc.read_text() if doc.is_file() else ""
    block = f"{begin}\n{text.rstrip()}\n{end}"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if pattern.search(old):
        new = pattern.sub(lambda _m: block, old)
    elif append:
        new = old.rstrip() + "\n\n" + block + "\n"
    else:
        raise ValueError(f"{doc} has no {begin} … {end} markers: add them where the block belongs")
    atomic_write_text(doc, new)


__all__ = ["ALIGNS", "markers", "splice", "table"]
