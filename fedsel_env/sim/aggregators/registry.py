"""The aggregation backends' registry, below every backend module: ``@AGGREGATORS.register("name")`` and
:func:`make_aggregator`.

The backend modules register themselves with this module's decorator and ``aggregators/__init__.py``
imports them, so no backend module imports its own package.
"""
from __future__ import annotations

import inspect
from typing import Any, Dict

from fedsel_env.registry import Registry, has_methods

from .base import Aggregator

#: backends by name; an import path ``package.module:Class`` names one from outside the package (a subclass of
#: :class:`Aggregator`), e.g. ``aggregator: my_pkg.aggs:Median`` in an env config
AGGREGATORS: Registry = Registry("aggregator", check=has_methods(
    "aggregate", "reset", "local_options",
    fix="subclass fedsel_env.sim.aggregators.Aggregator and implement aggregate(updates) -> Tensor (P,)"))


def aggregator_factory(name: str, params: Dict[str, Any] | None = None) -> Any:
    """The class registered as ``name`` (or named by its import path), its parameters' names checked against
    its signature; nothing is built (the values are the aggregator's to check when it is).

    :raises ValueError: for an unknown name or an unknown parameter name.
    """
    factory = AGGREGATORS.lookup(name)
    sig = inspect.signature(factory)
    if not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        allowed = [p for p in sig.parameters if p != "self"]
        unknown = sorted(set(params or {}) - set(allowed))
        if unknown:
            raise ValueError(f"unknown aggregator parameter(s) {unknown} for {name!r}; allowed: {sorted(allowed)}")
    return factory


def make_aggregator(name: str, params: Dict[str, Any] | None = None,
                    clients_per_round: int | None = None) -> Aggregator:
    """Build the aggregator registered as ``name`` with ``params`` (validated by the aggregator).

    :param clients_per_round: K, when known: the aggregator's ``check_round_size(K)`` (if it has one) refuses
        parameters that cannot hold with K responders (Krum's f with K < 2f + 3).
    :raises ValueError: for an unknown name, an unknown parameter name, or a bad value.
    """
    aggregator = aggregator_factory(name, params)(**dict(params or {}))
    check = getattr(aggregator, "check_round_size", None)
    if clients_per_round is not None and callable(check):
        check(int(clients_per_round))
    return aggregator
