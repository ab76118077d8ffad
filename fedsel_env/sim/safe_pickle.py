"""A restricted unpickler: pickles from files a user may have downloaded are read without running their code.

``pickle.load`` runs whatever callable a pickle names (``os.system``, ``builtins.exec``, a lambda's code
rebuilt by cloudpickle). :class:`RestrictedUnpickler` resolves a pickle's globals only from an allow-list
of ``(module, name)`` pairs, and refuses anything else with :class:`RefusedGlobal` before it is imported.
The allow-lists name plain data constructors (numpy arrays, dtypes and scalars, random generators'
states, ``collections`` containers); callers add the classes their files need (Stable-Baselines3's
buffers and policies: ``agents.saved_models``). A global may also be *replaced* by a safe stand-in
(torch's ``_load_from_bytes``, which calls ``torch.load(weights_only=False)``, by a ``weights_only`` one).

Allow-listed constructors are **bounded** (issue #44): a few bytes of pickle must not make a plain data type
allocate gigabytes (``bytearray(2**31)``, an ``ndarray`` or numpy ``_reconstruct`` of a huge shape, a numpy ``scalar`` of a 1 GiB dtype, torch's legacy
storage header naming more bytes than it carries). Each such call is checked against
:data:`MAX_CONSTRUCTED_BYTES` before it runs, and classes admitted by a caller's ``admit`` (policies, buffers,
networks) may be rebuilt from their saved state but not constructed (their ``__init__`` may allocate anything).
The pickle runs on Python's own unpickler (``pickle._Unpickler``), whose opcodes can be checked one by one.

Used for CIFAR-10 batches (``data_files.py``: numpy arrays, lists, strings, bytes and ints only) and for
Stable-Baselines3 model zips' pickled entries and replay buffers.
"""
from __future__ import annotations

import io
import pickle
from typing import Any, Callable, Dict, FrozenSet, Optional, Tuple

Global = Tuple[str, str]

#: numpy arrays, dtypes and scalars, as numpy 1.x and 2.x pickle them (protocols 0-5)
NUMPY_GLOBALS: FrozenSet[Global] = frozenset({
    (m, n) for m in ("numpy.core.multiarray", "numpy._core.multiarray") for n in ("_reconstruct", "scalar")
} | {(m, "_frombuffer") for m in ("numpy.core.numeric", "numpy._core.numeric")} | {
    ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),  # protocol <= 2 writes bytes via _codecs
})

#: numpy's random generators and their states (gymnasium spaces carry one)
NUMPY_RANDOM_GLOBALS: FrozenSet[Global] = frozenset({
    ("numpy.random._pickle", "__generator_ctor"), ("numpy.random._pickle", "__bit_generator_ctor"),
    ("numpy.random._pickle", "__randomstate_ctor"), ("numpy.random._pcg64", "PCG64"),
    ("numpy.random._pcg64", "PCG64DXSM"), ("numpy.random._mt19937", "MT19937"), ("numpy.random._philox", "Philox"),
    ("numpy.random._sfc64", "SFC64"), ("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence"),
    ("numpy.random.bit_generator", "SeedSequence"), ("numpy.random.mtrand", "RandomState"),
    ("numpy.random._generator", "Generator"),
})

#: plain containers and the default object-rebuilding helpers (they only call allow-listed classes)
PLAIN_GLOBALS: FrozenSet[Global] = frozenset({
    ("collections", "OrderedDict"), ("collections", "deque"), ("builtins", "set"), ("builtins", "frozenset"),
    ("builtins", "complex"), ("builtins", "slice"), ("builtins", "bytearray"), ("builtins", "object"),
    ("copyreg", "_reconstructor"),
})


class RefusedGlobal(pickle.UnpicklingError):
    """A pickle named a global that is not on the allow-list (it could run code when loaded)."""

    def __init__(self, module: str, name: str):
        super().__init__(f"it would load {module}.{name}, which is not on the list of plain data types this "
                         f"loader admits (a pickled object can run code when it is loaded)")
        self.global_name = f"{module}.{name}"


#: the most bytes one constructor named in a pickle may be asked to allocate from its arguments (saved arrays are
#: rebuilt from the bytes the pickle carries, which this does not bound)
MAX_CONSTRUCTED_BYTES = 64 << 20


class RefusedAllocation(pickle.UnpicklingError):
    """A pickle asked a constructor to allocate more than :data:`MAX_CONSTRUCTED_BYTES`, or to construct a class
    that may only be rebuilt from saved state."""


#: bytes per element of torch's legacy storage types (an unknown one counts as the widest)
_STORAGE_ELEMENT = {"DoubleStorage": 8, "FloatStorage": 4, "HalfStorage": 2, "BFloat16Storage": 2, "LongStorage": 8,
                    "IntStorage": 4, "ShortStorage": 2, "CharStorage": 1, "ByteStorage": 1, "BoolStorage": 1,
                    "ComplexFloatStorage": 8, "ComplexDoubleStorage": 16, "UntypedStorage": 1}


class _Placeholder:
    """What a pre-scan of torch's legacy header builds instead of any global: inert."""

    def __init__(self, name: str = "") -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> "_Placeholder":
        return _Placeholder()

    def __setstate__(self, state: Any) -> None:
        """Drop the state: a placeholder stays inert whatever the stream sets on it."""


def _legacy_storage_bytes(b: bytes) -> int:
    """The bytes the storages of a legacy ``torch.save`` stream declare (torch allocates them before reading the
    data): its three header pickles read as plain data, its main pickle scanned with inert globals."""
    f = io.BytesIO(b)
    for _ in range(3):  # magic number, protocol version, system info: plain data
        restricted_load(f, frozenset())
    total = 0

    class Scan(pickle._Unpickler):  # type: ignore[name-defined]
        def find_class(self, module: str, name: str) -> Any:
            return _Placeholder(name)

        def persistent_load(self, pid: Any) -> Any:
            nonlocal total
            if isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage":
                numel = pid[4]
                if isinstance(numel, bool) or not isinstance(numel, int) or numel < 0:
                    raise RefusedAllocation(f"a saved storage declares {numel!r:.40} elements")
                total += numel * _STORAGE_ELEMENT.get(getattr(pid[1], "name", ""), 16)
            return _Placeholder()

    Scan(f).load()
    return total


def _torch_storage_from_bytes(b: bytes) -> Any:
    """torch's ``_load_from_bytes`` with ``weights_only=True`` (torch's own one unpickles anything); a legacy
    stream whose storages declare more bytes than it carries is refused before torch allocates them."""
    import torch

    if not bytes(b[:2]) == b"PK":  # torch's legacy format: the storage sizes come from the pickle
        declared = _legacy_storage_bytes(bytes(b))
        if declared > len(b):
            raise RefusedAllocation(f"a saved storage declares {declared:,} bytes but carries {len(b):,}")
    return torch.load(io.BytesIO(b), weights_only=True)


#: globals answered by a safe stand-in instead of the named function
SAFE_REPLACEMENTS: Dict[Global, Callable[..., Any]] = {("torch.storage", "_load_from_bytes"): _torch_storage_from_bytes}


def _nbytes(shape: Any, dtype: Any) -> int:
    """Bytes of an array of ``shape`` and ``dtype``. :raises RefusedAllocation: for a shape that is no sizes."""
    import numpy as np

    dims = (shape,) if isinstance(shape, int) else shape
    if not isinstance(dims, (tuple, list)) or not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        raise RefusedAllocation(f"an array shape {shape!r:.60} is not a tuple of integers")
    n = 1
    for d in dims:
        n *= max(int(d), 0)
    try:
        itemsize = np.dtype(dtype).itemsize if dtype is not None else 8
    except (TypeError, ValueError):
        raise RefusedAllocation(f"{dtype!r:.60} is not an array type") from None
    return n * max(itemsize, 1)


def check_call(func: Any, args: tuple, kwargs: Optional[Dict[str, Any]] = None) -> None:
    """Refuse a constructor call of a pickle that would allocate more than :data:`MAX_CONSTRUCTED_BYTES`.

    :raises RefusedAllocation: for ``bytearray(n)``, ``ndarray(shape, ...)``, numpy's ``_reconstruct`` and
        ``scalar`` (of a dtype of that many bytes) and ``copyreg._reconstructor`` of such a type, over the bound.
    """
    import copyreg

    import numpy as np

    kwargs = kwargs or {}
    asked = 0
    if isinstance(func, type) and issubclass(func, (bytearray, bytes)):
        if args and isinstance(args[0], int):
            asked = int(args[0])
    elif isinstance(func, type) and issubclass(func, np.ndarray):
        if len(args) < 3 and "buffer" not in kwargs:  # with a buffer it views the pickle's own bytes
            asked = _nbytes(args[0] if args else kwargs.get("shape", ()),
                            args[1] if len(args) > 1 else kwargs.get("dtype", float))
    elif getattr(func, "__name__", "") == "_reconstruct" and getattr(func, "__module__", "").startswith("numpy"):
        if len(args) >= 3:
            asked = _nbytes(args[1], args[2])
    elif getattr(func, "__name__", "") == "scalar" and getattr(func, "__module__", "").startswith("numpy"):
        if args:  # a scalar of a dtype ('V', 2**30) is that many bytes, given its data or not
            asked = _nbytes((), args[0])
    elif func is copyreg._reconstructor and len(args) == 3 and args[1] is not object:
        check_call(args[1], (args[2],))
    if asked > MAX_CONSTRUCTED_BYTES:
        name = getattr(func, "__qualname__", type(func).__name__)
        raise RefusedAllocation(f"it would make {name} allocate {asked:,} bytes from a few bytes of pickle, over the "
                                f"{MAX_CONSTRUCTED_BYTES:,} a loaded constructor may (saved data carries its bytes)")


class RestrictedUnpickler(pickle._Unpickler):  # type: ignore[name-defined]
    """An unpickler that resolves only the globals in ``allowed`` (or ``admit(module, name)``), and bounds
    what a constructor it resolved may allocate (:func:`check_call`).

    :param file: a binary file.
    :param allowed: the ``(module, name)`` pairs it may import.
    :param admit: optional: called with ``(module, name)`` for a pair not in ``allowed``; returns the
        object to use or ``None`` to refuse (it may import, so it must check the module first). An admitted
        class may be rebuilt from its saved state (``NEWOBJ`` + ``BUILD``, as pickle saves instances) but not
        called: its ``__init__`` could allocate anything (an ``Enum``'s call, a lookup, is let through).
    """

    dispatch = dict(pickle._Unpickler.dispatch)  # type: ignore[attr-defined]

    def __init__(self, file: Any, allowed: FrozenSet[Global], admit: Optional[Callable[[str, str], Any]] = None,
                 **kwargs: Any):
        super().__init__(file, **kwargs)
        self._allowed, self._admit = allowed, admit
        self._admitted: set = set()

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in SAFE_REPLACEMENTS and (module, name) in self._allowed:
            return SAFE_REPLACEMENTS[(module, name)]
        if (module, name) in self._allowed:
            return super().find_class(module, name)
        found = self._admit(module, name) if self._admit is not None else None
        if found is None:
            raise RefusedGlobal(module, name)
        self._admitted.add(id(found))
        return found

    def load(self) -> Any:
        """``pickle.load``; a damaged stream is an ``UnpicklingError`` (Python's unpickler would raise
        ``struct.error``, ``IndexError`` or ``KeyError`` where the C one says ``UnpicklingError``)."""
        import struct

        try:
            return super().load()
        except (struct.error, IndexError, KeyError) as e:
            raise pickle.UnpicklingError(f"the pickle is damaged ({type(e).__name__}: {e})") from None

    def _checked(self, func: Any, args: tuple, kwargs: Optional[Dict[str, Any]] = None) -> None:
        import enum

        if id(func) in self._admitted and not (isinstance(func, type) and issubclass(func, enum.Enum)):
            raise RefusedAllocation(f"it would construct {getattr(func, '__qualname__', func)!r} while loading (a "
                                    f"saved object is rebuilt from its state, never built anew)")
        check_call(func, tuple(args), kwargs)

    def load_reduce(self) -> None:
        args = self.stack[-1]
        self._checked(self.stack[-2], args if isinstance(args, tuple) else ())
        super().load_reduce()
    dispatch[pickle.REDUCE[0]] = load_reduce

    def load_newobj(self) -> None:
        args, cls = self.stack[-1], self.stack[-2]
        if isinstance(cls, type) and issubclass(cls, _ndarray_type()):
            check_call(cls, args if isinstance(args, tuple) else ())
        super().load_newobj()
    dispatch[pickle.NEWOBJ[0]] = load_newobj

    def load_newobj_ex(self) -> None:
        kwargs, args, cls = self.stack[-1], self.stack[-2], self.stack[-3]
        if isinstance(cls, type) and issubclass(cls, _ndarray_type()):
            check_call(cls, args if isinstance(args, tuple) else (), kwargs if isinstance(kwargs, dict) else {})
        super().load_newobj_ex()
    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex

    def _instantiate(self, klass: Any, args: Any) -> None:  # INST and OBJ (protocols 0 and 1)
        self._checked(klass, tuple(args))
        super()._instantiate(klass, args)


def _ndarray_type() -> type:
    import numpy as np

    return np.ndarray


def restricted_loads(data: bytes, allowed: FrozenSet[Global], admit: Optional[Callable[[str, str], Any]] = None,
                     **kwargs: Any) -> Any:
    """``pickle.loads`` through :class:`RestrictedUnpickler`."""
    return RestrictedUnpickler(io.BytesIO(data), allowed, admit, **kwargs).load()


def restricted_load(file: Any, allowed: FrozenSet[Global], admit: Optional[Callable[[str, str], Any]] = None,
                    **kwargs: Any) -> Any:
    """``pickle.load`` through :class:`RestrictedUnpickler`."""
    return RestrictedUnpickler(file, allowed, admit, **kwargs).load()

