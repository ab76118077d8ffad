"""The interface every selection agent offers: SB3's ``predict`` (docs/SPEC.md §4).

An agent is built from the problem's public :class:`~fedsel_env.spec.SelectionSpec`
and reads everything else from the observation, as a real server would. Subclasses
implement :meth:`SelectionAgent.select` (which clients to pick, given one ``Dict``
observation) and, when they learn from feedback, :meth:`SelectionAgent.reset`.
The base class turns a selection into the action of the env's action mode and
handles SB3's batched observations, so ``evaluate_policy`` and ``evaluate.py``
treat hand-written and trained agents alike.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from fedsel_env.spec import SelectionSpec


class SelectionAgent:
    """Base class of the hand-written selection agents.

    :param spec: the problem's public description (``env.unwrapped.selection_spec``).
    :param seed: seed of the agent's own random generator (``None`` = fresh entropy).
    :cvar name: the registry name.
    :cvar supported_modes: the action modes this agent can act in.
    """

    name: str = "agent"
    supported_modes: Tuple[str, ...] = ("one", "topk", "subset")

    def __init__(self, spec: SelectionSpec, seed: Optional[int] = None) -> None:
        if spec.action_mode not in self.supported_modes:
            raise ValueError(
                f"agent {self.name!r} does not support action_mode {spec.action_mode!r}; "
                f"it supports {list(self.supported_modes)}"
            )
        self.spec = spec
        self.rng = np.random.default_rng(seed)
        self._started = False

    # -- to override -----------------------------------------------------
    def reset(self, obs: Dict[str, np.ndarray]) -> None:
        """Start of an episode (``obs`` is the first observation): clear per-episode memory."""

    def select(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        """The clients to select this round: distinct indices, at most K of them."""
        raise NotImplementedError  # abstract

    # -- helpers ---------------------------------------------------------
    @property
    def k(self) -> int:
        """K, or 1 in the ``one`` mode."""
        return 1 if self.spec.action_mode == "one" else self.spec.clients_per_round

    def available(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        """Indices of the clients available in the coming round."""
        return np.flatnonzero(self.spec.feature(obs, "available") > 0.5)

    def bind(self, env: Any) -> None:
        """Give the agent the server's channel to its clients (``env.unwrapped``), for agents that ask them
        something before selecting (``pow_d`` queries its candidates' losses). The others ignore it;
        ``fedsel_eval`` binds every agent to its env."""

    def seed(self, seed: Optional[int]) -> None:
        """Re-seed the agent's generator (evaluate.py does this per episode for common random numbers)."""
        self.rng = np.random.default_rng(seed)

    def to_action(self, chosen: Sequence[int]) -> np.ndarray:
        """Encode a selection as an action of the spec's action mode."""
        chosen = np.asarray(chosen, dtype=np.int64)
        n = self.spec.num_clients
        mode = self.spec.action_mode
        if mode == "one":
            return np.int64(chosen[0])
        if mode == "subset":
            a = np.zeros(n, dtype=np.int8)
            a[chosen] = 1
            return a
        # topk: the chosen clients score highest (in (0, 1], in their order of preference), the rest -1
        scores = np.full(n, -1.0, dtype=np.float32)
        scores[chosen] = np.arange(len(chosen), 0, -1, dtype=np.float32) / max(len(chosen), 1)
        return scores

    # -- SB3's interface -------------------------------------------------
    def act(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        """One action for one (unbatched) observation; starts the episode on first use."""
        if not self._started:
            self.reset(obs)
            self._started = True
        chosen = np.asarray(self.select(obs), dtype=np.int64)
        if chosen.size == 0:
            # nobody available: pick the first client; it simply does not report
            chosen = np.array([0], dtype=np.int64)
        return self.to_action(chosen[: self.k])

    def predict(
        self,
        observation: Dict[str, np.ndarray],
        state: Optional[Any] = None,
        episode_start: Optional[np.ndarray] = None,
        deterministic: bool = True,
    ) -> Tuple[np.ndarray, Optional[Any]]:
        """SB3's policy interface.

        Accepts one observation or a batch of one (as from a ``VecEnv`` with one env).
        ``episode_start`` (SB3's flag) resets the agent's memory.
        """
        batched = np.asarray(observation["weights"]).ndim == 3
        if batched:
            if np.asarray(observation["weights"]).shape[0] != 1:
                raise ValueError("a hand-written agent keeps per-episode memory: use one agent per env "
                                 "(a VecEnv with n_envs=1)")
            observation = {k: np.asarray(v)[0] for k, v in observation.items()}
        if episode_start is not None and bool(np.asarray(episode_start).reshape(-1)[0]):
            self._started = False
        action = self.act(observation)
        if batched:
            action = np.asarray(action)[None]
        return action, state

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mode={self.spec.action_mode!r}, K={self.spec.clients_per_round})"
