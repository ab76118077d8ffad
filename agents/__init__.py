"""Selection agents (docs/SPEC.md §4), looked up by name.

``agents.make("afl", spec, seed=0, **params)`` builds any registered agent;
``@AGENTS.register("name")`` adds one, and an import path names one from outside the
package without registering it: ``agents.make("my_pkg.agents:Greedy", spec)``
(``evaluate.py --policy my_pkg.agents:Greedy``; docs/AGENTS.md). Every agent answers SB3's
``predict(obs, state=None, episode_start=None, deterministic=True)``.
"""
from __future__ import annotations

from .base import SelectionAgent
from .registry import AGENTS, make

# Importing the modules registers the built-in agents (each with agents.registry's decorator).
from . import afl, favor, fedcs, kcenter, kcenter_cover, oort, pow_d, qffl  # noqa: F401
from . import lookahead  # noqa: F401  (privileged: FedSelect-Bench's planning oracle)
from . import per_client, random_selection, rbcsf, rpow_d, set_distill, set_es  # noqa: F401

__all__ = ["AGENTS", "SelectionAgent", "make"]
