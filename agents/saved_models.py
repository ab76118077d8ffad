"""Reading saved Stable-Baselines3 files with errors that name the file and the fix (issue #15, item 7).

SB3's loaders fail on a damaged file with whatever the layer below raised: a ``RuntimeError`` from
torch for a ``policy.pth`` cut short inside a valid zip, an ``UnpicklingError`` for a truncated replay
buffer, a ``FileNotFoundError`` for ``<name>.pkl.pkl`` when a buffer is missing (SB3 retries the path
with its suffix added). These turn every such failure into a ``ValueError`` that names the file, says
what went wrong, and what to do (``fix``).

Which class loads a model zip, and which algorithm saved one, is the algorithms' table's
(``agents/deploy.py``: ``model_class``, ``detect_algorithm``).
"""
from __future__ import annotations

import base64
import binascii
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

from fedsel_env.sim.safe_pickle import (NUMPY_GLOBALS, NUMPY_RANDOM_GLOBALS, PLAIN_GLOBALS, RefusedGlobal,
                                        restricted_load, restricted_loads)

from .selector_files import MAX_HIDDEN, MAX_WEIGHTS_BYTES, check_int, parse_json

#: what to do about a damaged model file, unless the caller knows better
DEFAULT_FIX = "the file is damaged (cut short by a crash or a partial copy?): copy it again, or train it again"


# --- the safe path: pickled entries and replay buffers through a restricted unpickler (issue #30) -------------

#: Set to ``1`` by ``evaluate.py --trust-file`` / ``train_agent.py --trust-file`` (inherited by worker processes):
#: model zips and replay buffers are then loaded by SB3's own unpickler, which runs whatever they name.
TRUST_ENV = "FEDSEL_TRUST_FILES"
#: The opt-in, as the refusals name it.
TRUST_FIX = ("if you trust this file (you made it, or know who did), pass --trust-file (evaluate.py, "
             "train_agent.py --resume) or set FEDSEL_TRUST_FILES=1 to let it run the code it names")

#: The plain-data globals SB3 zips and replay buffers hold: arrays, spaces' generators, tensors, schedules.
MODEL_GLOBALS = NUMPY_GLOBALS | NUMPY_RANDOM_GLOBALS | PLAIN_GLOBALS | frozenset({
    ("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_parameter"), ("torch", "device"),
    ("torch.storage", "_load_from_bytes"),  # answered by a weights_only stand-in (safe_pickle.SAFE_REPLACEMENTS)
    ("stable_baselines3.common.utils", "FloatSchedule"), ("stable_baselines3.common.utils", "LinearSchedule"),
    ("stable_baselines3.common.utils", "ConstantSchedule"),
    ("stable_baselines3.common.type_aliases", "TrainFreq"),
    ("stable_baselines3.common.type_aliases", "TrainFrequencyUnit"),
})
#: Packages whose classes of the kinds in :func:`_admit_class` a saved model may name (SB3's policies,
#: buffers, spaces, activations, optimizers; this package's policies and schedules).
_CLASS_PACKAGES = ("stable_baselines3.", "sb3_contrib.", "gymnasium.spaces.", "torch.nn.modules.", "torch.optim.",
                   "agents.")


def _admit_class(module: str, name: str) -> Any:
    """A class a saved model may name: from :data:`_CLASS_PACKAGES`, and a policy, buffer, space, torch
    module or optimizer, or one of this package's schedules (else None: refused)."""
    import importlib

    if not module.startswith(_CLASS_PACKAGES) or name.startswith("_"):
        return None
    try:
        obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    if not isinstance(obj, type):
        return None
    import gymnasium
    import torch
    from stable_baselines3.common.buffers import BaseBuffer
    from stable_baselines3.common.policies import BasePolicy

    from .schedules import LinearDecay

    kinds = (BasePolicy, BaseBuffer, gymnasium.spaces.Space, torch.nn.Module, torch.optim.Optimizer, LinearDecay)
    return obj if issubclass(obj, kinds) else None


def trusted() -> bool:
    """Whether this process was told (``--trust-file``) to load model files with SB3's own unpickler."""
    return os.environ.get(TRUST_ENV, "") == "1"


def safe_data_objects(path: Union[str, Path], what: str = "model", skip: Any = ()) -> Dict[str, Any]:
    """Every pickled entry of the SB3 zip ``path``'s ``data``, unpickled by the restricted unpickler, as
    SB3's ``custom_objects`` (so SB3 unpickles none of them itself).

    :raises ValueError: naming the file, the entry and what it would load, with the opt-in, when an
        entry names anything but plain data and the classes of :func:`_admit_class`.
    """
    data = read_zip_data(path, what)
    objects: Dict[str, Any] = {}
    for key, item in (data.items() if isinstance(data, dict) else ()):
        if key in skip or not (isinstance(item, dict) and ":serialized:" in item):  # skip: the caller's own
            continue
        try:
            objects[key] = restricted_loads(base64.b64decode(str(item[":serialized:"])), MODEL_GLOBALS, _admit_class)
        except RefusedGlobal as e:
            raise ValueError(f"{what} {str(path)!r}: its pickled entry {key!r} is refused: {e}; {TRUST_FIX}") from None
        except (pickle.UnpicklingError, binascii.Error, EOFError, ValueError, TypeError, AttributeError, KeyError,
                IndexError, OverflowError, MemoryError, RecursionError, UnicodeDecodeError) as e:
            raise ValueError(f"cannot load {what} {str(path)!r}: its pickled entry {key!r} is damaged "
                             f"({_reason(e)}); {DEFAULT_FIX}") from None
    check_sizes(objects, f"{what} {str(path)!r}")
    return objects


#: the largest uncompressed content of a model zip (all entries), and of its ``data`` entry
MAX_ZIP_CONTENT = MAX_WEIGHTS_BYTES
MAX_DATA_BYTES = 64 << 20
#: the most numbers a saved observation or action space may hold
MAX_SPACE_SIZE = 1 << 24


def check_zip(path: Union[str, Path], what: str = "model") -> None:
    """A model zip's size on disk and its entries' uncompressed sizes (from the directory, before any is read).

    :raises ValueError: naming the file when it is no zip, or over :data:`MAX_ZIP_CONTENT` in all (a zip bomb).
    """
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_ZIP_CONTENT:
            raise ValueError(f"{what} {str(p)!r} is {size:,} bytes, over the {MAX_ZIP_CONTENT:,} a model file may "
                             f"be: it is not read; {DEFAULT_FIX}")
        with zipfile.ZipFile(p) as z:
            total = sum(max(i.file_size, 0) for i in z.infolist())
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError) as e:
        if isinstance(e, ValueError) and str(e).startswith(what):
            raise
        raise ValueError(f"cannot load {what} {str(p)!r} ({_reason(e)}); {DEFAULT_FIX}") from None
    if total > MAX_ZIP_CONTENT:
        raise ValueError(f"{what} {str(p)!r} unpacks to {total:,} bytes, over the {MAX_ZIP_CONTENT:,} a model file "
                         f"may hold: it is not read; {DEFAULT_FIX}")


def read_zip_data(path: Union[str, Path], what: str = "model") -> Dict[str, Any]:
    """The JSON object of an SB3 zip's ``data`` entry ({} when it has none), its size and nesting checked before
    it is parsed (``agents/selector_files.py``).

    :raises ValueError: naming the file when it is no zip, too big, or its ``data`` is not a JSON object.
    """
    check_zip(path, what)
    where = f"{what} {str(path)!r}'s data entry"
    try:
        with zipfile.ZipFile(path) as z:
            if "data" not in z.namelist():
                return {}
            info = z.getinfo("data")
            if info.file_size > MAX_DATA_BYTES:
                raise ValueError(f"{where} is {info.file_size:,} bytes, over the {MAX_DATA_BYTES:,} it may be; "
                                 f"{DEFAULT_FIX}")
            with z.open(info) as f:
                raw = f.read(MAX_DATA_BYTES + 1)
    # what zipfile raises on a damaged, cut, encrypted (RuntimeError) or unsupported-compression archive
    except (OSError, zipfile.BadZipFile, EOFError, RuntimeError, NotImplementedError) as e:
        raise ValueError(f"cannot load {what} {str(path)!r} ({_reason(e)}); {DEFAULT_FIX}") from None
    data = parse_json(raw, where)
    if not isinstance(data, dict):
        raise ValueError(f"{where} holds a JSON {type(data).__name__}, not an object of the model's fields; "
                         f"{DEFAULT_FIX}")
    return data


def _widths(value: Any) -> list:
    """The layer widths a ``net_arch`` names (a list of ints, or a mapping of such lists)."""
    if isinstance(value, Mapping):
        return [w for v in value.values() for w in _widths(v)]
    if isinstance(value, (list, tuple)):
        return [w for v in value for w in _widths(v)]
    return [value]


def _leaf_spaces(space: Any, depth: int = 0) -> list:
    """The leaf spaces of a (Dict / Tuple) space, 8 levels deep at most."""
    inner = getattr(space, "spaces", None)
    if space is None or depth > 8:
        return []
    if isinstance(inner, Mapping):
        return [s for v in inner.values() for s in _leaf_spaces(v, depth + 1)]
    if isinstance(inner, (list, tuple)):
        return [s for v in inner for s in _leaf_spaces(v, depth + 1)]
    return [space]


def check_sizes(objects: Mapping[str, Any], where: str) -> None:
    """The sizes a saved model's entries ask its network to be built with, before SB3 builds it: the spaces'
    shapes and ``n`` (at most :data:`MAX_SPACE_SIZE` numbers) and ``policy_kwargs``' widths (``hidden``, ``net_arch``, a
    features extractor's ``hidden``: integers in [1, ``MAX_HIDDEN``]).

    :raises ValueError: naming the file and the field.
    """
    import numpy as np

    for key in ("observation_space", "action_space"):
        for space in _leaf_spaces(objects.get(key)):
            shape, n = getattr(space, "shape", None), getattr(space, "n", None)
            try:
                dims = [int(x) for x in (shape or ())]
                size = int(np.prod(dims, dtype=object)) if dims else 1
                # a Discrete(n) / MultiBinary(n) / MultiDiscrete(nvec) space sizes a network's output by n
                for extra in (n, getattr(space, "nvec", None)):
                    if extra is not None:
                        size = max(size, int(np.sum(np.asarray(extra, dtype=object))))
            except (TypeError, ValueError):
                raise ValueError(f"{where}: field {key!r} has a size {shape!r:.60} that is not integers; "
                                 f"{DEFAULT_FIX}") from None
            if size > MAX_SPACE_SIZE or any(d < 0 for d in dims):
                raise ValueError(f"{where}: field {key!r} has a space of {size:,} numbers (shape {tuple(dims)!r:.40}), "
                                 f"over the {MAX_SPACE_SIZE:,} a saved space may hold; {DEFAULT_FIX}")
    kwargs = objects.get("policy_kwargs")
    if not isinstance(kwargs, Mapping):
        return
    extractor = kwargs.get("features_extractor_kwargs")
    checks = [("policy_kwargs.hidden", kwargs.get("hidden")),
              *((f"policy_kwargs.net_arch", w) for w in _widths(kwargs.get("net_arch", []))),
              ("policy_kwargs.features_extractor_kwargs.hidden",
               extractor.get("hidden") if isinstance(extractor, Mapping) else None)]
    for field, value in checks:
        if value is not None:
            check_int(value, where, field, 1, MAX_HIDDEN)


def _reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def load_model(cls: Any, path: Union[str, Path], what: str = "model", fix: Optional[str] = None,
               trust: Optional[bool] = None, **kwargs: Any) -> Any:
    """``cls.load(path, **kwargs)``, its pickled ``data`` entries read by the restricted unpickler
    (:func:`safe_data_objects`) unless ``trust`` (default: :func:`trusted`).

    :raises ValueError: naming ``path`` and the ``fix`` when the file is missing or cannot be loaded, and
        naming the entry and the opt-in when it names code.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{what} {str(p)!r} does not exist")
    if not (trusted() if trust is None else trust):  # the caller's own custom_objects win
        given = kwargs.get("custom_objects") or {}
        kwargs["custom_objects"] = {**safe_data_objects(p, what, skip=given), **given}
        plain = {k: v for k, v in read_zip_data(p, what).items()  # entries SB3 keeps as plain JSON (policy_kwargs)
                 if not (isinstance(v, dict) and ":serialized:" in v)}
        check_sizes({**plain, **kwargs["custom_objects"]}, f"{what} {str(p)!r}")
    try:
        model = cls.load(p, **kwargs)
    except Exception as e:  # noqa: BLE001 - torch, zipfile, json, pickle, SB3: all mean "not loadable"
        raise ValueError(f"cannot load {what} {str(p)!r} ({_reason(e)}); {fix or DEFAULT_FIX}") from e
    _check_finite(model, f"{what} {str(p)!r}")
    return model


def _check_finite(model: Any, where: str) -> None:
    """A loaded model's network weights are finite. :raises ValueError: naming the file and the weights."""
    import torch

    policy = getattr(model, "policy", None)
    for name, t in (policy.state_dict().items() if hasattr(policy, "state_dict") else ()):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ValueError(f"{where}: weights {name!r} hold NaN or infinite values: the model diverged or the file "
                             f"is damaged; train it again")


def load_replay_buffer(model: Any, path: Union[str, Path], what: str = "replay buffer",
                       fix: Optional[str] = None, trust: Optional[bool] = None) -> None:
    """``model.load_replay_buffer(path)``, checking that the file exists first (else SB3 names ``path.pkl``);
    unless ``trust`` (default: :func:`trusted`), the buffer is read by the restricted unpickler.

    :raises ValueError: naming ``path`` and the ``fix`` when the file is missing or cannot be loaded, and
        the opt-in when it names code.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{what} {str(p)!r} does not exist; {fix or DEFAULT_FIX}")
    try:
        if trusted() if trust is None else trust:
            model.load_replay_buffer(p)
            return
        from stable_baselines3.common.buffers import ReplayBuffer

        with open(p, "rb") as f:
            buffer = restricted_load(f, MODEL_GLOBALS, _admit_class)
        if not isinstance(buffer, ReplayBuffer):
            raise TypeError(f"it holds a {type(buffer).__name__}, not a replay buffer")
        buffer.device = model.device  # as SB3's load_replay_buffer does
        model.replay_buffer = buffer
    except RefusedGlobal as e:
        raise ValueError(f"{what} {str(p)!r} is refused: {e}; {TRUST_FIX}") from None
    except Exception as e:  # noqa: BLE001 - pickle, EOF, zip: all mean "not loadable"
        raise ValueError(f"cannot load {what} {str(p)!r} ({_reason(e)}); {fix or DEFAULT_FIX}") from e
