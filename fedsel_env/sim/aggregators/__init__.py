"""Aggregation backends (docs/SPEC.md §3.5), looked up by name.

Every backend is an :class:`Aggregator` subclass in its own module, named after its
method. It maps the server's flat global weights and the responding clients'
results (:class:`ClientUpdates`) to the next flat global weights. A user adds one
with ``@AGGREGATORS.register("name")`` and selects it by the env config's
``aggregator`` field; the env never changes.
"""
from __future__ import annotations

from .base import Aggregator, ClientUpdates
from .registry import AGGREGATORS, aggregator_factory, make_aggregator

# Importing the modules registers the built-in backends (each with .registry's decorator).
from . import fedavg  # noqa: F401
from . import qfedavg  # noqa: F401
from . import qfedsgd  # noqa: F401
from . import fedmgda_plus  # noqa: F401
from . import fedprox  # noqa: F401
# robust aggregation (issue #44): Yin et al. 2018, Blanchard et al. 2017, Sun et al. 2019
from . import median  # noqa: F401
from . import trimmed_mean  # noqa: F401
from . import krum  # noqa: F401
from . import norm_clipping  # noqa: F401

__all__ = ["AGGREGATORS", "Aggregator", "ClientUpdates", "aggregator_factory", "make_aggregator"]
