"""The ``subset`` action mode for learners that mark clients independently: :class:`SubsetRepair`.

The env's ``subset`` contract is strict: between 1 and K marked clients, anything else a ``ValueError``
(a hand-written agent that marks five clients when K = 3 has a bug, and should hear of it). A policy
over ``MultiBinary(N)`` in PPO, A2C or sb3-contrib's MaskablePPO samples each client's bit on its own, so
it marks too many (or no) clients in some steps whatever it has learnt, and training would crash. This
opt-in wrapper makes every bit vector an action, with one documented rule (docs/ENVIRONMENT.md):

* more than K marked: the round takes K of them, drawn uniformly at random. The policy's preference
  stays what decides (a marked client is always more likely to be chosen than an unmarked one), no
  client is favoured by its index, and the outcome is an ordinary random transition of the MDP;
* none marked: the round takes one client drawn uniformly among the available ones (any client when
  none is). A server has to ask somebody; one client instead of K is a weak round, which the reward
  already tells the learner.

The draws come from the wrapper's own generator, seeded at every reset from the env's episode
generator (read, never drawn from), so the env's trajectories, common random numbers and the
replay of an episode on ``--resume`` are unchanged. ``info["marked"]`` says how many clients the
action marked, so a learning curve can show how often the rule acted.

:meth:`SubsetRepair.action_masks` gives sb3-contrib's layout for ``MultiBinary(N)``: 2N entries, per
client whether the bit may be 0 and whether it may be 1 (an unavailable client's 1 is masked), so
MaskablePPO never marks a client that will not report (sb3-contrib issues #102, #177).
"""
from __future__ import annotations

import hashlib
from typing import Any, Dict, Optional

import gymnasium as gym
import numpy as np
from gymnasium import spaces


def subset_masks(available: np.ndarray) -> np.ndarray:
    """sb3-contrib's mask for ``MultiBinary(N)``: ``[may be 0, may be 1]`` per client, flattened to (2N,)."""
    available = np.asarray(available, dtype=bool).reshape(-1)
    return np.stack([np.ones_like(available), available], axis=1).reshape(-1)


def repair_subset(bits: Any, k: int, available: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Any 0/1 vector → one marking between 1 and K clients, by the rule of this module.

    :raises ValueError: for a vector of the wrong shape or with values other than 0 and 1.
    """
    available = np.asarray(available, dtype=bool).reshape(-1)
    n = available.size
    a = np.asarray(bits)
    if a.shape != (n,) or a.dtype == object or not np.all((a == 0) | (a == 1)):
        raise ValueError(f"SubsetRepair expects a 0/1 vector of shape ({n},), got {bits!r}")
    marked = np.flatnonzero(a)
    if marked.size > k:
        marked = np.sort(rng.choice(marked, size=k, replace=False))
    elif marked.size == 0:
        pool = np.flatnonzero(available)
        marked = rng.choice(pool if pool.size else np.arange(n), size=1)
    out = np.zeros(n, dtype=np.int8)
    out[marked] = 1
    return out


class SubsetRepair(gym.Wrapper):
    """Accept any ``MultiBinary(N)`` action in the ``subset`` mode (the rule in this module's docstring).

    :param env: a FedSelect env in the ``subset`` action mode (possibly wrapped).
    :raises ValueError: for an env in another action mode.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        base = env.unwrapped
        mode = getattr(base, "config", {}).get("action_mode")
        if mode != "subset":
            raise ValueError(f"SubsetRepair wraps a FedSelect env in action_mode 'subset', not {mode!r}: the "
                             f"'one' and 'topk' modes accept every action of their space already")
        self.k = int(base.k)
        self.action_space = spaces.MultiBinary(int(base.num_clients))
        self._rng: Optional[np.random.Generator] = None

    def reset(self, *, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None):
        obs, info = self.env.reset(seed=seed, options=options)
        # the env's generator after the reset identifies the episode: a generator of our own from its state
        state = repr(self.env.unwrapped.np_random.bit_generator.state).encode()
        self._rng = np.random.default_rng(int.from_bytes(hashlib.sha256(state).digest()[:16], "little"))
        return obs, info

    def step(self, action: Any):
        if self._rng is None:
            raise RuntimeError("call reset() before step()")
        marked = int(np.count_nonzero(np.asarray(action)))
        repaired = repair_subset(action, self.k, self.env.unwrapped.action_masks(), self._rng)
        obs, reward, terminated, truncated, info = self.env.step(repaired)
        return obs, reward, terminated, truncated, {**info, "marked": marked}

    def action_masks(self) -> np.ndarray:
        """sb3-contrib's mask for ``MultiBinary(N)`` (2N entries): unavailable clients cannot be marked."""
        return subset_masks(self.env.unwrapped.action_masks())


__all__ = ["SubsetRepair", "repair_subset", "subset_masks"]
