"""Aggregation backends (docs/SPEC.md §3.5), looked up by name.

Every backend is an :class:`Aggregator` subclass in its own module, named after its
method. It maps the server's flat global weights and the responding clients'
results (:class:`ClientUpdates`) to the next flat global weights. A user adds one
with ``@AGGREGATORS.register("name")`` and selects it by the env config's
``aggregator`` field; the env never changes.
"""
from __future__ import annotations

from typing import Any, Dict

from fedsel_env.registry import Registry, has_methods

from .base import Aggregator, ClientUpdates

#: backends by name; an import path ``package.module:Class`` names one from outside the package (a subclass of
#: :class:`Aggregator`), e.g. ``aggregator: my_pkg.aggs:Median`` in an env config
AGGREGATORS: Registry = Registry("aggregator", check=has_methods(
    "aggregate", "reset", "local_options",
    fix="subclass fedsel_env.sim.aggregators.Aggregator and implement aggregate(updates) -> Tensor (P,)"))


def make_aggregator(name: str, params: Dict[str, Any] | None = None) -> Aggregator:
    """Build the aggregator registered as ``name`` with ``params`` (validated by the aggregator).

    :raises ValueError: for an unknown name, an unknown parameter name, or a bad value.
    """
    import inspect

    factory = AGGREGATORS.lookup(name)
    params = dict(params or {})
    sig = inspect.signature(factory)
    if not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        allowed = [p for p in sig.parameters if p != "self"]
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            raise ValueError(f"unknown aggregator parameter(s) {unknown} for {name!r}; allowed: {sorted(allowed)}")
    return factory(**params)


# Importing the modules registers the built-in backends.
from . import fedavg  # noqa: E402,F401
from . import qfedavg  # noqa: E402,F401
from . import qfedsgd  # noqa: E402,F401
from . import fedmgda_plus  # noqa: E402,F401
from . import fedprox  # noqa: E402,F401

__all__ = ["AGGREGATORS", "Aggregator", "ClientUpdates", "make_aggregator"]
