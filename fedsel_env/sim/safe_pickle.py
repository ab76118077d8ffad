"""A restricted unpickler: pickles from files a user may have downloaded are read without running their code.

``pickle.load`` runs whatever callable a pickle names (``os.system``, ``builtins.exec``, a lambda's code
rebuilt by cloudpickle). :class:`RestrictedUnpickler` resolves a pickle's globals only from an allow-list
of ``(module, name)`` pairs, and refuses anything else with :class:`RefusedGlobal` before it is imported.
The allow-lists name plain data constructors (numpy arrays, dtypes and scalars, random generators'
states, ``collections`` containers); callers add the classes their files need (Stable-Baselines3's
buffers and policies: ``agents.saved_models``). A global may also be *replaced* by a safe stand-in
(torch's ``_load_from_bytes``, which calls ``torch.load(weights_only=False)``, by a ``weights_only`` one).

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


def _torch_storage_from_bytes(b: bytes) -> Any:
    """torch's ``_load_from_bytes`` with ``weights_only=True`` (torch's own one unpickles anything)."""
    import torch

    return torch.load(io.BytesIO(b), weights_only=True)


#: globals answered by a safe stand-in instead of the named function
SAFE_REPLACEMENTS: Dict[Global, Callable[..., Any]] = {("torch.storage", "_load_from_bytes"): _torch_storage_from_bytes}


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the globals in ``allowed`` (or ``admit(module, name, obj)``).

    :param file: a binary file.
    :param allowed: the ``(module, name)`` pairs it may import.
    :param admit: optional: called with ``(module, name)`` for a pair not in ``allowed``; returns the
        object to use or ``None`` to refuse (it may import, so it must check the module first).
    """

    def __init__(self, file: Any, allowed: FrozenSet[Global], admit: Optional[Callable[[str, str], Any]] = None,
                 **kwargs: Any):
        super().__init__(file, **kwargs)
        self._allowed, self._admit = allowed, admit

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in SAFE_REPLACEMENTS and (module, name) in self._allowed:
            return SAFE_REPLACEMENTS[(module, name)]
        if (module, name) in self._allowed:
            return super().find_class(module, name)
        found = self._admit(module, name) if self._admit is not None else None
        if found is None:
            raise RefusedGlobal(module, name)
        return found


def restricted_loads(data: bytes, allowed: FrozenSet[Global], admit: Optional[Callable[[str, str], Any]] = None,
                     **kwargs: Any) -> Any:
    """``pickle.loads`` through :class:`RestrictedUnpickler`."""
    return RestrictedUnpickler(io.BytesIO(data), allowed, admit, **kwargs).load()


def restricted_load(file: Any, allowed: FrozenSet[Global], admit: Optional[Callable[[str, str], Any]] = None,
                    **kwargs: Any) -> Any:
    """``pickle.load`` through :class:`RestrictedUnpickler`."""
    return RestrictedUnpickler(file, allowed, admit, **kwargs).load()

