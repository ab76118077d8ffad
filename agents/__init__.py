"""Selection agents (SPEC §4), looked up by name.

``agents.make("afl", spec, seed=0, **params)`` builds any registered agent;
``@AGENTS.register("name")`` adds one, and an import path names one from outside the
package without registering it: ``agents.make("my_pkg.agents:Greedy", spec)``
(``evaluate.py --policy my_pkg.agents:Greedy``; docs/AGENTS.md). Every agent answers SB3's
``predict(obs, state=None, episode_start=None, deterministic=True)``.
"""
from __future__ import annotations

from typing import Any, Optional

from fedsel_env.registry import Registry, has_methods
from fedsel_env.spec import SelectionSpec

AGENTS: Registry = Registry("agent", check=has_methods(
    "predict", fix="subclass agents.SelectionAgent (its __init__(spec, seed=None, **params)) and implement "
                   "select(obs) -> client indices"))

from .base import SelectionAgent  # noqa: E402


def make(name: str, spec: SelectionSpec, seed: Optional[int] = None, **params: Any) -> SelectionAgent:
    """Build the agent registered as ``name`` for the problem ``spec``.

    :param name: a registered name or an import path ``package.module:Class``.
    :raises ValueError: for an unknown name, a bad parameter, or an unsupported action mode.
    """
    cls = AGENTS.lookup(name)
    try:
        return cls(spec, seed=seed, **params)
    except TypeError as e:  # an unknown keyword: say what the agent accepts
        import inspect

        allowed = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "spec", "seed")]
        raise ValueError(f"bad parameters {sorted(params)} for agent {name!r}: {e}; allowed: {allowed}") from None


# Importing the modules registers the built-in agents.
from . import afl, favor, fedcs, kcenter, kcenter_cover, oort, pow_d, qffl  # noqa: E402,F401
from . import lookahead  # noqa: E402,F401  (privileged: FedSelect-Bench's planning oracle)
from . import per_client, random_selection, rbcsf, rpow_d  # noqa: E402,F401

__all__ = ["AGENTS", "SelectionAgent", "make"]
