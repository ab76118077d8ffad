"""The agents' registry, below every agent module: ``@AGENTS.register("name")`` and :func:`make`.

The agent modules register themselves with this module's decorator and ``agents/__init__.py`` imports
them, so no agent module imports its own package (docs/ARCHITECTURE.md, "Where you add things").
"""
from __future__ import annotations

from typing import Any, Optional

from fedsel_env.registry import Registry, has_methods
from fedsel_env.spec import SelectionSpec

from .base import SelectionAgent

AGENTS: Registry = Registry("agent", check=has_methods(
    "predict", fix="subclass agents.SelectionAgent (its __init__(spec, seed=None, **params)) and implement "
                   "select(obs) -> client indices"))


def make(name: str, spec: Optional[SelectionSpec] = None, seed: Optional[int] = None, env: Any = None,
         **params: Any) -> SelectionAgent:
    """Build the agent registered as ``name`` for the problem ``spec``, bound to ``env`` when given.

    :param name: a registered name or an import path ``package.module:Class``.
    :param spec: the problem (``env.unwrapped.selection_spec``); may be left out when ``env`` is given.
    :param env: the env the agent acts in (a Gymnasium env, wrapped or not): the agent is bound to it
        (``agent.bind(env.unwrapped)``), so an agent that asks its clients something before selecting
        (``pow_d``'s loss queries) works at once; agents that ask nothing ignore it.
    :raises ValueError: for an unknown name, a bad parameter, an unsupported action mode, neither ``spec``
        nor ``env``, or a ``spec`` of another problem than ``env``'s.
    """
    base = getattr(env, "unwrapped", env)
    if spec is None:
        if base is None or not hasattr(base, "selection_spec"):
            raise ValueError(f"agents.make({name!r}): give the problem as spec= (env.unwrapped.selection_spec) "
                             f"or the FedSelect env as env=")
        spec = base.selection_spec
    elif base is not None and hasattr(base, "selection_spec"):
        own = base.selection_spec
        if (own.num_clients, own.action_mode) != (spec.num_clients, spec.action_mode):
            raise ValueError(f"agents.make({name!r}): spec is for N = {spec.num_clients} in action_mode "
                             f"{spec.action_mode!r} but env= has N = {own.num_clients} in {own.action_mode!r}; "
                             f"pass env.unwrapped.selection_spec (or leave spec out)")
    cls = AGENTS.lookup(name)
    try:
        agent = cls(spec, seed=seed, **params)
    except TypeError as e:  # an unknown keyword: say what the agent accepts
        import inspect

        allowed = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "spec", "seed")]
        raise ValueError(f"bad parameters {sorted(params)} for agent {name!r}: {e}; allowed: {allowed}") from None
    if base is not None and callable(getattr(agent, "bind", None)):
        agent.bind(base)
    return agent
