"""Reading saved Stable-Baselines3 files with errors that name the file and the fix (issue #15, item 7).

SB3's loaders fail on a damaged file with whatever the layer below raised: a ``RuntimeError`` from
torch for a ``policy.pth`` cut short inside a valid zip, an ``UnpicklingError`` for a truncated replay
buffer, a ``FileNotFoundError`` for ``<name>.pkl.pkl`` when a buffer is missing (SB3 retries the path
with its suffix added). These turn every such failure into a ``ValueError`` that names the file, says
what went wrong, and what to do (``fix``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

#: what to do about a damaged model file, unless the caller knows better
DEFAULT_FIX = "the file is damaged (cut short by a crash or a partial copy?): copy it again, or train it again"


def _reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def load_model(cls: Any, path: Union[str, Path], what: str = "model", fix: Optional[str] = None,
               **kwargs: Any) -> Any:
    """``cls.load(path, **kwargs)``.

    :raises ValueError: naming ``path`` and the ``fix`` when the file is missing or cannot be loaded.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{what} {str(p)!r} does not exist")
    try:
        return cls.load(p, **kwargs)
    except Exception as e:  # noqa: BLE001 - torch, zipfile, json, pickle, SB3: all mean "not loadable"
        raise ValueError(f"cannot load {what} {str(p)!r} ({_reason(e)}); {fix or DEFAULT_FIX}") from e


def load_replay_buffer(model: Any, path: Union[str, Path], what: str = "replay buffer",
                       fix: Optional[str] = None) -> None:
    """``model.load_replay_buffer(path)``, checking that the file exists first (else SB3 names ``path.pkl``).

    :raises ValueError: naming ``path`` and the ``fix`` when the file is missing or cannot be loaded.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{what} {str(p)!r} does not exist; {fix or DEFAULT_FIX}")
    try:
        model.load_replay_buffer(p)
    except Exception as e:  # noqa: BLE001 - pickle, EOF, zip: all mean "not loadable"
        raise ValueError(f"cannot load {what} {str(p)!r} ({_reason(e)}); {fix or DEFAULT_FIX}") from e
