"""The one-step lookahead oracle (issue #5; docs/SPEC.md §4): what a perfect FAVOR Q-function could achieve.

FAVOR trains its Double DQN in the ``one`` action mode (one client per round) and deploys it in ``topk``
(the K clients with the highest Q-values). The best a myopic one-mode Q-function can learn is the
immediate reward of training each client alone from the current state. :func:`oracle_scores` computes
that exactly, by simulation: it copies the env, plays one ``one``-mode step with each available client,
and scores the client by the accuracy that step reaches (the reward Ξ^(acc−Ω) − 1 is increasing in it).
:class:`OneStepOracle` takes the K best-scored clients: top-K deployment of a perfectly learned one-step Q.

It reads the simulator (a bound, not a selector a server could run), like ``agents/lookahead.py``; it is
not registered, and runs by its import path (``evaluate.py --policy
oracle=agents.one_step_oracle:OneStepOracle:step=1/K``). ``bench/favor_oracle.py`` plays it against random
selection; ``experiments/per_client_analysis.py`` (issue #19) evaluates it.
"""
from __future__ import annotations

import copy
from typing import Any, Dict, Optional, Union

import numpy as np
import torch

from .base import SelectionAgent


def shared_data(env: Any) -> Dict[int, Any]:
    """A ``copy.deepcopy`` memo under which the env's probes share its federation's data tensors.

    A round reads the clients' train and test data and never writes them; copying them was half of a
    probe's time on Fashion-MNIST (60,000 images) and nothing on the digits.
    """
    data = getattr(getattr(env, "federation", None), "data", None)
    tensors = [getattr(data, name, None) for name in ("x_train", "y_train", "x_test", "y_test")]
    return {id(t): t for t in tensors if isinstance(t, torch.Tensor)}


def oracle_scores(env: Any, step: float, share_data: bool = True) -> np.ndarray:
    """The accuracy after one ``one``-mode step with each available client (−inf for the others).

    :param share_data: the probes share the env's data tensors (:func:`shared_data`) instead of copying them.
    """
    from fedsel_env.actions import ACTION_MODES

    n = env.num_clients
    scores = np.full(n, -np.inf)
    memo = shared_data(env) if share_data else {}
    for client in np.flatnonzero(env.action_masks()):
        probe = copy.deepcopy(env, dict(memo))
        probe.federation.server_step = step
        probe.action_mode = ACTION_MODES.lookup("one")(n, env.k)
        *_, info = probe.step(int(client))
        scores[client] = info["accuracy"]
    return scores


def one_mode_step(step: Union[str, float], k: int) -> float:
    """The ``one``-mode step looked ahead with: ``"1/K"`` is 1/k, else a number in (0, 1].

    :raises ValueError: for anything else, naming the value.
    """
    if step == "1/K":
        return 1.0 / k
    try:
        value = float(step)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0 < value <= 1:  # NaN fails too
        raise ValueError(f'one-step oracle: step {step!r} is invalid: expected "1/K" or a number in (0, 1]')
    return value


class OneStepOracle(SelectionAgent):
    """The K available clients whose one ``one``-mode step alone reaches the highest accuracy
    (:func:`oracle_scores`): top-K deployment of a perfectly learned one-step Q-function.

    It reads the env's state, which no real selector sees: bind it first (``agent.bind(env.unwrapped)``;
    ``evaluate.py`` and ``fedsel_eval`` bind every agent).

    :param spec: the problem's public description.
    :param seed: unused (deterministic); kept for the common signature.
    :param step: the ``one``-mode step looked ahead with: ``"1/K"`` or a number in (0, 1].
    """

    name = "one_step_oracle"
    privileged = True  # reads the simulator (a bound), as lookahead does
    supported_modes = ("topk", "subset")

    def __init__(self, spec: Any, seed: Optional[int] = None, step: Union[str, float] = "1/K") -> None:
        super().__init__(spec, seed)
        self.step = one_mode_step(step, spec.clients_per_round)
        self.env: Any = None
        #: the scores of the last selection (accuracy after the one-client step; -inf: unavailable)
        self.last_scores = np.empty(0)

    def bind(self, env: Any) -> None:
        """The env whose state the oracle copies and plays ahead."""
        self.env = env

    def select(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        """The K best-scored available clients, best first (ties: lower index first)."""
        if self.env is None:
            raise ValueError("the one-step oracle plays each client ahead on a copy of the env: bind it first "
                             "(agent.bind(env.unwrapped); evaluate.py and fedsel_eval do)")
        self.last_scores = oracle_scores(self.env, self.step)
        avail = self.available(obs)
        return avail[np.argsort(-self.last_scores[avail], kind="stable")[: self.k]]
