"""Files written atomically: to a temp name beside the target, then moved into place with ``os.replace``.

A crash or ``SIGKILL`` mid-write leaves the previous file (or none), never a half-written one.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import yaml


def atomic_write_yaml(path: Path, data: Any) -> None:
    """Write ``data`` as YAML to ``path`` through a temp file and ``os.replace``."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        yaml.safe_dump(_plain(data), f, sort_keys=False)
    os.replace(tmp, path)


def atomic_save(obj_save: Callable[[Path], None], path: Path) -> None:
    """Call ``obj_save(tmp)`` then move ``tmp`` onto ``path`` (SB3 keeps a ``.tmp`` suffix as it is)."""
    tmp = path.with_name(path.name + ".tmp")
    obj_save(tmp)
    os.replace(tmp, path)


def _plain(x: Any) -> Any:
    """Numpy scalars and tuples → plain YAML types."""
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x
