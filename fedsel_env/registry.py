"""Registries by name: datasets, partitions, models, aggregators, rewards, agents.

Each registry is a plain dict from a name to a factory. ``register`` is a small
decorator that adds an entry; ``lookup`` fails with a ``ValueError`` that lists
what is registered, so a typo in a config names the fix.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, TypeVar

T = TypeVar("T")


class Registry(dict):
    """A ``dict`` from a name to a factory, with a clear error on a missing name."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

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

    def lookup(self, name: Any) -> Any:
        """The factory registered as ``name``.

        :raises ValueError: naming the unknown value and the registered names.
        """
        if not isinstance(name, str) or name not in self:
            raise ValueError(
                f"unknown {self.kind} {name!r}; registered {self.kind}s: {sorted(self)}"
            )
        return self[name]


def check_params(kind: str, name: str, given: Dict[str, Any], defaults: Dict[str, Any]) -> Dict[str, Any]:
    """Merge ``given`` over ``defaults``, refusing keys ``defaults`` does not know.

    :raises ValueError: naming the unknown key and the allowed ones.
    """
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise ValueError(f"{kind} params for {name!r} must be a mapping, got {type(given).__name__}")
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ValueError(
            f"unknown {kind} parameter(s) {unknown} for {name!r}; allowed: {sorted(defaults)}"
        )
    return {**defaults, **given}
