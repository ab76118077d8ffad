"""Registries by name: datasets, partitions, models, aggregators, rewards, agents.

Each registry is a plain dict from a name to a factory. ``register`` is a small
decorator that adds an entry; ``lookup`` fails with a ``ValueError`` that lists
what is registered, so a typo in a config names the fix.

A name may also be an import path, ``package.module:Attribute``: a factory from outside the
repository, used without registering it or editing the package (``aggregator: my_pkg.aggs:Median``
in an env config, ``--policy my_pkg.agents:Greedy`` in ``evaluate.py``). ``lookup`` imports the
module, fetches the attribute, and checks it against the registry's interface (``check``), each step
failing with a ``ValueError`` that names the path, what went wrong and the fix. Import paths are not
added to the dict, so listings (``evaluate.py --list``, ``--policy all``) show the registered names only.
"""
from __future__ import annotations

import importlib
import re
import types
from typing import Any, Callable, Dict, Optional, Tuple, TypeVar

from .sim.limits import short

T = TypeVar("T")

#: ``package.module:Attribute`` (the attribute may be dotted: ``module:Outer.Inner``)
IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


def is_import_path(name: Any) -> bool:
    """Whether ``name`` has the form ``package.module:Attribute``."""
    return isinstance(name, str) and IMPORT_PATH.fullmatch(name) is not None


def load_import_path(path: str, kind: str = "object") -> Any:
    """The object ``package.module:Attribute`` names.

    :param kind: what the object is for (``"aggregator"``), named in errors.
    :raises ValueError: for a malformed path, a module that cannot be imported, or a missing attribute.
    """
    if not is_import_path(path):
        raise ValueError(f"{kind} {short(path)} is not an import path: expected 'package.module:Attribute'")
    module_name, attribute = path.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise ValueError(f"{kind} {path!r}: no module named {e.name!r}; install the package that holds it, "
                             f"or put its folder on the Python path (PYTHONPATH=folder)") from None
        raise ValueError(f"{kind} {path!r}: importing module {module_name!r} failed: {e}") from e
    except Exception as e:  # noqa: BLE001 - a plug-in's own import error, whatever it is
        raise ValueError(f"{kind} {path!r}: importing module {module_name!r} failed "
                         f"({type(e).__name__}: {short(str(e))})") from e
    except SystemExit as e:  # a module that calls sys.exit() on import would end this process silently
        raise ValueError(f"{kind} {path!r}: importing module {module_name!r} called sys.exit({short(e.code)}); "
                         f"a plug-in module must not exit when imported (guard its script part with "
                         f"`if __name__ == '__main__':`)") from None
    obj: Any = module
    for part in attribute.split("."):
        if not hasattr(obj, part):
            # the names the module (or class) defines itself, not those it imported
            owner = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
            public = sorted(n for n, v in vars(obj).items() if not n.startswith("_") and not isinstance(
                v, types.ModuleType) and getattr(v, "__module__", owner) == owner) if hasattr(obj, "__dict__") else []
            raise ValueError(f"{kind} {path!r}: {module_name!r} has no attribute {attribute!r}; "
                             f"it defines {public}")
        obj = getattr(obj, part)
    return obj


class Registry(dict):
    """A ``dict`` from a name to a factory, with a clear error on a missing name.

    :param kind: what the entries are (``"aggregator"``), named in errors.
    :param check: the interface a factory named by an import path must have: ``check(obj)`` returns
        what is wrong with ``obj`` (a sentence), or ``None`` when it fits.
    :param plugins: whether names may be import paths (``False`` for fixed sets such as action modes).
    """

    def __init__(self, kind: str, check: Optional[Callable[[Any], Optional[str]]] = None,
                 plugins: bool = True) -> None:
        super().__init__()
        self.kind = kind
        self.check = check
        self.plugins = plugins

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@REGISTRY.register("name")`` adds the decorated factory.

        :param name: the name users write in configs.
        :return: the decorator, which returns the factory unchanged.
        """

        def add(factory: T) -> T:
            if name in self:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self[name] = factory
            return factory

        return add

    def knows(self, name: Any) -> bool:
        """Whether ``name`` is registered or, where plug-ins are allowed, an import path (not yet imported)."""
        return isinstance(name, str) and (name in self or (self.plugins and is_import_path(name)))

    def lookup(self, name: Any) -> Any:
        """The factory registered as ``name``, or the one its import path ``package.module:Attribute`` names.

        :raises ValueError: naming the unknown value and the registered names; for an import path, the
            module or attribute that is missing, or how the object misses the registry's interface.
        """
        if isinstance(name, str) and name in self:
            return self[name]
        if self.plugins and is_import_path(name):
            obj = load_import_path(name, self.kind)
            problem = self.check(obj) if self.check is not None else None
            if problem:
                raise ValueError(f"{self.kind} {name!r} does not fit: {problem}")
            return obj
        hint = " or an import path 'package.module:Class'" if self.plugins else ""
        raise ValueError(f"unknown {self.kind} {short(name)}; registered {self.kind}s: {sorted(self)}{hint}")

    def split(self, text: str) -> Tuple[str, str]:
        """``"NAME[:KEY=VALUE,...]"`` or ``"package.module:Class[:KEY=VALUE,...]"`` → (name, parameters text).

        A registered name keeps everything after its first ``:`` as parameters; otherwise a
        ``module:Attribute`` head (no ``=`` in it) is an import path.
        """
        text = text.strip()
        head, sep, rest = text.partition(":")
        if head.strip() in self or not self.plugins or not sep:
            return head.strip(), rest.strip()
        attribute, sep2, params = rest.partition(":")
        if is_import_path(f"{head.strip()}:{attribute.strip()}"):
            return f"{head.strip()}:{attribute.strip()}", params.strip()
        return head.strip(), rest.strip()


def has_methods(*names: str, fix: str) -> Callable[[Any], Optional[str]]:
    """A ``check`` for :class:`Registry`: a class whose instances have the methods ``names``.

    :param fix: what to do instead (``"subclass fedsel_env.sim.aggregators.Aggregator"``), told in the error.
    """

    def check(obj: Any) -> Optional[str]:
        if not isinstance(obj, type):
            return f"expected a class, got {type(obj).__name__} {short(obj)}; {fix}"
        # looked up in the classes' own dicts: every class object answers __call__, not every instance
        missing = [n for n in names if not any(callable(vars(c).get(n)) for c in obj.__mro__)]
        if missing:
            return f"class {obj.__module__}.{obj.__qualname__} lacks {missing}; {fix}"
        return None

    return check


def callable_with(n_positional: int, what: str, fix: str) -> Callable[[Any], Optional[str]]:
    """A ``check`` for :class:`Registry`: a function or class that takes ``n_positional`` positional arguments
    (``what`` names them in the error, e.g. ``"(input_shape, num_classes)"``)."""
    import inspect

    def check(obj: Any) -> Optional[str]:
        if not callable(obj) or isinstance(obj, types.ModuleType):
            return f"expected a function or class taking {what}, got {type(obj).__name__} {short(obj)}; {fix}"
        try:
            inspect.signature(obj).bind(*range(n_positional))
        except TypeError:
            return f"{short(obj)} cannot be called with {what}; {fix}"
        except ValueError:  # a builtin without a signature: not a plug-in of this kind
            return f"{short(obj)} is a builtin whose arguments cannot be checked, not a function taking {what}; {fix}"
        return None

    return check


def check_params(kind: str, name: str, given: Dict[str, Any], defaults: Dict[str, Any]) -> Dict[str, Any]:
    """Merge ``given`` over ``defaults``, refusing keys ``defaults`` does not know.

    :raises ValueError: naming the unknown key and the allowed ones.
    """
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise ValueError(f"{kind} params for {short(name)} must be a mapping, got {type(given).__name__}")
    unknown = sorted(set(given) - set(defaults), key=str)
    if unknown:
        raise ValueError(
            f"unknown {kind} parameter(s) {short(unknown)} for {short(name)}; allowed: {sorted(defaults)}"
        )
    return {**defaults, **given}
