"""Shared test fixtures: the ``tiny`` preset and a factory of small envs.

``SMALL`` is the six-client federation many tests count on by hand (6 clients, K = 2, a 4-round
budget, logistic regression on 30 samples each, a target no run reaches): their asserted numbers
(action shapes, client indices, K) follow from it, so it is defined here once rather than in each
file. Tests that only need *a* small federation use the ``tiny`` preset (``tiny_config``).

Hypothesis tests cannot take function-scoped fixtures; they import ``SMALL`` (``from conftest import
SMALL``) and build their envs themselves.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Dict, Iterator, List

import pytest

from fedsel_env.config import PRESETS
from fedsel_env.env import FedSelectEnv

SMALL: Dict[str, Any] = {"num_clients": 6, "clients_per_round": 2, "max_rounds": 4, "model": "logreg",
                         "samples_per_client": 30, "target_accuracy": 0.99}


@pytest.fixture
def tiny_config() -> Dict[str, Any]:
    """The ``tiny`` preset's config overrides (a deep copy: a test may change it)."""
    return copy.deepcopy(PRESETS["tiny"])


@pytest.fixture
def small_config() -> Dict[str, Any]:
    """``SMALL`` (a deep copy: a test may change it)."""
    return copy.deepcopy(SMALL)


@pytest.fixture
def make_env() -> Iterator[Callable[..., FedSelectEnv]]:
    """``make_env(**overrides)`` → ``FedSelectEnv(config={**SMALL, **overrides})``; every env it made is
    closed at teardown (worker processes included)."""
    made: List[FedSelectEnv] = []

    def make(**overrides: Any) -> FedSelectEnv:
        env = FedSelectEnv(config={**copy.deepcopy(SMALL), **overrides})
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()
