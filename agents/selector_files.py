"""Checked reading of learned-selector files (issue #44): every field a ``ValueError`` naming the file and the field.

A learned selector's file (``set_es.json``, a ``set_distill`` folder's ``.json`` and ``.pt``, an SB3 zip's ``data``
entry) may come from anywhere. Each reader takes it through these checks **before** using or allocating anything:

- the file's size from ``stat`` before it is read (:data:`MAX_JSON_BYTES`, :data:`MAX_WEIGHTS_BYTES`): a 1 GiB
  string is refused, not read whole;
- JSON: UTF-8, nesting at most :data:`MAX_JSON_DEPTH` deep (counted before ``json`` parses, which would raise
  ``RecursionError`` on 100k nested ``[``), a JSON object at the top where one is expected;
- numbers: a weight is a real JSON number (not a string, a bool or null), finite, and at most
  :data:`MAX_WEIGHT` in magnitude (``±1e308`` would give ±inf scores; ``10**400`` overflows a float);
- sizes (``hidden``, ``pca_components``, ...) are integers in their ranges before a network is built from them
  (``hidden = 10**6`` would ask for terabytes; :data:`MAX_HIDDEN`);
- a ``.pt`` is read by ``torch.load(weights_only=True)`` and must hold a mapping of names to finite tensors; a
  pickle payload it refuses is reported as a ``ValueError`` naming the file, not a raw ``UnpicklingError``.

Not a paper's method: the file checks of docs/SPEC.md §7's deployable selectors (docs/AGENTS.md, "Loading
learned selectors").
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Dict, Mapping, Union

import numpy as np

#: the largest learned-selector JSON file read (set_es.json, set_distill.json: a few KB in practice)
MAX_JSON_BYTES = 4 << 20
#: the largest weights file read (a set_distill .pt, an SB3 model zip)
MAX_WEIGHTS_BYTES = 256 << 20
#: the deepest nesting of a learned-selector JSON file (its fields are numbers, names and short lists)
MAX_JSON_DEPTH = 32
#: the largest magnitude of a saved weight: far beyond any trained one (ES and SGD weights are O(1)-O(100)), small
#: enough that a score summed over a few thousand standardised features stays finite in float64
MAX_WEIGHT = 1e6
#: the widest layer a saved network may ask for (a 4096 x 4096 float32 layer is 64 MiB)
MAX_HIDDEN = 4096

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')


def _name(path: Union[str, Path]) -> str:
    return repr(str(path))


def read_limited(path: Union[str, Path], what: str, limit: int) -> bytes:
    """The bytes of ``path``, its size checked (``stat``) before it is read.

    :raises ValueError: naming the file when it is missing, unreadable or over ``limit`` bytes.
    """
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError as e:
        raise ValueError(f"{what} {_name(p)} cannot be read ({e.strerror or e})") from None
    if not p.is_file():
        raise ValueError(f"{what} {_name(p)} is not a file")
    if size > limit:
        raise ValueError(f"{what} {_name(p)} is {size:,} bytes, over the {limit:,} such a file may be: it is not "
                         f"read (a damaged or foreign file?); give the file the training run wrote")
    try:
        with open(p, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise ValueError(f"{what} {_name(p)} cannot be read ({e.strerror or e})") from None
    if len(data) > limit:  # it grew since stat
        raise ValueError(f"{what} {_name(p)} is over the {limit:,} bytes such a file may be: it is not read")
    return data


def json_depth(raw: bytes) -> int:
    """The deepest nesting of ``[`` / ``{`` in the JSON text ``raw`` (strings skipped), in linear time."""
    brackets = np.frombuffer(_STRING.sub(b'""', raw), dtype=np.uint8)
    step = (brackets == ord("[")).astype(np.int64) + (brackets == ord("{")) - (brackets == ord("]")) \
        - (brackets == ord("}"))
    return int(np.cumsum(step).max()) if step.size else 0


def parse_json(raw: bytes, where: str) -> Any:
    """The JSON document ``raw`` (the file ``where``).

    :raises ValueError: naming ``where`` when it is not UTF-8, nested over :data:`MAX_JSON_DEPTH`, or not JSON.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{where} is not UTF-8 text (byte {e.start}): give the file the training run wrote") from None
    depth = json_depth(raw)
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"{where} is nested {depth} levels deep, over the {MAX_JSON_DEPTH} such a file may be "
                         f"(its fields are numbers, names and short lists): give the file the training run wrote")
    try:
        return json.loads(text)
    except ValueError as e:  # JSONDecodeError, and an integer of more digits than Python converts
        raise ValueError(f"{where} is not valid JSON ({str(e).splitlines()[0]}): give the file the training run "
                         f"wrote") from None
    except RecursionError:  # json_depth bounds it; kept so no input gives one
        raise ValueError(f"{where} is nested too deep to read") from None


def read_json_object(path: Union[str, Path], what: str) -> Dict[str, Any]:
    """The JSON object in file ``path`` (:func:`read_limited`, :func:`parse_json`).

    :raises ValueError: naming the file for every problem, and when its top level is not a JSON object.
    """
    where = f"{what} {_name(path)}"
    doc = parse_json(read_limited(path, what, MAX_JSON_BYTES), where)
    if not isinstance(doc, dict):
        raise ValueError(f"{where} holds a JSON {_json_type(doc)} at the top level; expected an object "
                         f"{{...}} of fields: give the file the training run wrote")
    return doc


def _json_type(v: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null", dict: "object"}.get(
        type(v), "number")


def check_weight(value: Any, where: str, field: str, max_abs: float = MAX_WEIGHT) -> float:
    """``value`` as a float: a real number (not a string, bool or null), finite, ``|value| <= max_abs``.

    :raises ValueError: naming ``where`` and ``field``.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{where}: field {field!r} = {_short(value)} is invalid: expected a number (a JSON number, "
                         f"not a {_json_type(value)})")
    if isinstance(value, (int, np.integer)) and abs(int(value)) > max_abs:
        x = math.inf
    else:
        x = float(value)
    if not math.isfinite(x) or abs(x) > max_abs:
        raise ValueError(f"{where}: field {field!r} = {_short(value)} is invalid: expected a finite number of "
                         f"magnitude <= {max_abs:g} (a larger weight overflows the scores)")
    return x


def check_int(value: Any, where: str, field: str, lo: int, hi: int) -> int:
    """``value`` as an int in ``[lo, hi]`` (not a bool, float or string). :raises ValueError: naming both."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ValueError(f"{where}: field {field!r} = {_short(value)} is invalid: expected an integer in "
                         f"[{lo}, {hi}]")
    return int(value)


def check_field(doc: Mapping[str, Any], where: str, field: str, fix: str) -> Any:
    """``doc[field]``. :raises ValueError: naming ``where`` and ``field`` when it is missing."""
    if field not in doc:
        raise ValueError(f"{where} lacks the field {field!r} ({fix}): give the file the training run wrote")
    return doc[field]


def load_tensors(path: Union[str, Path], what: str, max_abs: float = MAX_WEIGHT) -> Dict[str, Any]:
    """The tensors a ``.pt`` holds (``torch.load(weights_only=True)``), checked.

    :raises ValueError: naming the file when it is too big, damaged, holds a pickle ``weights_only`` refuses, is
        no mapping of names to tensors, or has a tensor that is not finite or over ``max_abs`` (naming it).
    """
    import io
    import pickle

    import torch

    where = f"{what} {_name(path)}"
    raw = read_limited(path, what, MAX_WEIGHTS_BYTES)
    try:
        state = torch.load(io.BytesIO(raw), weights_only=True, map_location="cpu")
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, TypeError, AttributeError, KeyError,
            IndexError, OverflowError, MemoryError, UnicodeDecodeError, AssertionError) as e:
        text = str(e).strip().splitlines()
        reason = f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__
        raise ValueError(f"{where} cannot be loaded as weights ({reason}); only tensors are read from it (a "
                         f"pickle naming code is refused): give the file the training run wrote") from None
    if not isinstance(state, Mapping) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                                 for k, v in state.items()):
        raise ValueError(f"{where} holds a {type(state).__name__}, not a mapping of parameter names to tensors: "
                         f"give the file the training run wrote")
    for k, v in state.items():
        check_tensor(v, where, k, max_abs)
    return dict(state)


def check_tensor(t: Any, where: str, field: str, max_abs: float = MAX_WEIGHT) -> None:
    """A saved tensor: floating or integer, finite, ``|x| <= max_abs``. :raises ValueError: naming both."""
    import torch

    if t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{where}: weights {field!r} are {t.dtype}; expected real numbers")
    if t.numel() == 0:
        return
    x = t.detach().double() if t.is_floating_point() else t.detach().to(torch.float64)
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{where}: weights {field!r} hold NaN or infinite values: the model diverged or the file "
                         f"is damaged; train it again")
    if float(x.abs().max()) > max_abs:
        raise ValueError(f"{where}: weights {field!r} reach {float(x.abs().max()):.3g}, over the {max_abs:g} a "
                         f"saved weight may be: the file is damaged or not a trained model")


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


__all__ = ["MAX_HIDDEN", "MAX_JSON_BYTES", "MAX_JSON_DEPTH", "MAX_WEIGHT", "MAX_WEIGHTS_BYTES", "check_field",
           "check_int", "check_tensor", "check_weight", "json_depth", "load_tensors", "parse_json",
           "read_json_object", "read_limited"]
