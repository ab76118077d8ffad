"""FAVOR: client selection by Double DQN (docs/SPEC.md §4; seed 002).

Hao Wang, Zakhary Kaplan, Di Niu, Baochun Li, "Optimizing Federated Learning on
Non-IID Data with Reinforcement Learning", IEEE INFOCOM 2020. The Double DQN is
Hado van Hasselt, Arthur Guez, David Silver, "Deep Reinforcement Learning with
Double Q-learning", AAAI 2016.

State: the PCA projections of the global model and of every client's latest local
model, s_t = (w_t, w_t^(1), ..., w_t^(N)), flattened to (N+1)·d numbers (per-client
features and progress may be appended: the env's ``flat_parts``). Reward (computed
by the env): r_t = Ξ^(acc_t − Ω) − 1.

Training (the ``one`` action mode: one client per round, as the paper does) fits
Q(s, a; θ) by minimising the Huber loss of Q(s_t, a_t; θ) against the Double-DQN
target

    Y_t = r_t + γ (1 − done_t) · Q(s_{t+1}, argmax_a Q(s_{t+1}, a; θ); θ')      (van Hasselt et al., eq. 4)

where θ are the online network's weights (they *choose* the next action) and θ'
the target network's (they *evaluate* it). Stable-Baselines3's ``DQN`` uses the
vanilla target r_t + γ max_a Q(s_{t+1}, a; θ'), which over-estimates; the
public re-implementations of FAVOR kept it. :class:`DoubleDQN` replaces only
the target and keeps SB3's replay buffer, target-network updates, ε-greedy
schedule, gradient clipping, logging, save and load.

Optionally (``mask_actions=True``, the default) the behaviour policy never picks
an unavailable client while exploring or acting: ε-greedy draws uniformly among
the clients that ``env.action_masks()`` marks available and the greedy action is
the argmax of Q over them (the sb3-contrib convention). The replay buffer does not
store masks, so the argmax inside the target is over all N clients, as in the paper.

Deployment (:class:`FavorAgent`, the ``topk`` action mode): compute Q(s_t, ·) and
select the K available clients with the highest Q-values.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3 import DQN
from torch.nn import functional as F

from fedsel_env.server_view import flatten
from fedsel_env.spec import SelectionSpec

from .base import SelectionAgent
from .deploy import (DQN_POLICY, Algorithm, Deployment, deployment_config, read_env_config, register_algorithm,
                     register_deployment)
from .registry import AGENTS
from .saved_models import load_model


def double_dqn_target(
    rewards: th.Tensor,
    dones: th.Tensor,
    discounts: Union[th.Tensor, float],
    next_q_online: th.Tensor,
    next_q_target: th.Tensor,
) -> th.Tensor:
    """The Double-DQN target Y = r + γ (1 − done) Q_target(s', argmax_a Q_online(s', a)).

    :param rewards: (B, 1) rewards r_t.
    :param dones: (B, 1) 1 where s_{t+1} is terminal (timeouts already excluded by the buffer).
    :param discounts: γ (a float) or (B, 1) per-sample discounts (n-step returns).
    :param next_q_online: (B, A) Q(s_{t+1}, ·; θ) of the online network — chooses the action.
    :param next_q_target: (B, A) Q(s_{t+1}, ·; θ') of the target network — evaluates it.
    :return: (B, 1) targets.
    """
    best_next = next_q_online.argmax(dim=1, keepdim=True)
    next_value = th.gather(next_q_target, dim=1, index=best_next)
    return rewards + (1 - dones) * discounts * next_value


class DoubleDQN(DQN):
    """Stable-Baselines3's ``DQN`` with the Double-DQN target (and optional action masking).

    Takes every argument of :class:`stable_baselines3.DQN`, plus:

    :param mask_actions: explore and act only among the clients ``env.action_masks()``
        marks available (ignored when the env offers no ``action_masks``).
    """

    def __init__(self, *args: Any, mask_actions: bool = True, **kwargs: Any) -> None:
        self.mask_actions = bool(mask_actions)
        # The exploration coin and the uniform draws come from a generator of our own,
        # seeded from ``seed`` and saved with the model, so a resumed run continues its stream.
        self.exploration_rng = np.random.default_rng(kwargs.get("seed"))
        super().__init__(*args, **kwargs)

    # -- the learning rule -------------------------------------------------
    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        """SB3's ``DQN.train`` with the vanilla target replaced by :func:`double_dqn_target`."""
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)

        losses = []
        for _ in range(gradient_steps):
            replay_data = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)  # type: ignore[union-attr]
            # for n-step replay the discount is gamma ** n (unless the episode ended earlier)
            discounts = replay_data.discounts if replay_data.discounts is not None else self.gamma

            with th.no_grad():
                target_q_values = double_dqn_target(
                    replay_data.rewards,
                    replay_data.dones,
                    discounts,
                    next_q_online=self.q_net(replay_data.next_observations),
                    next_q_target=self.q_net_target(replay_data.next_observations),
                )

            current_q_values = self.q_net(replay_data.observations)
            current_q_values = th.gather(current_q_values, dim=1, index=replay_data.actions.long())

            loss = F.smooth_l1_loss(current_q_values, target_q_values)
            losses.append(loss.item())

            self.policy.optimizer.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()

        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", np.mean(losses))

    # -- acting while training: masked ε-greedy ---------------------------
    def _current_action_masks(self) -> Optional[np.ndarray]:
        """(n_envs, N) availability masks of the training envs, or None when masking is off/unsupported."""
        if not self.mask_actions or self.env is None or not self.env.has_attr("action_masks"):
            return None
        return np.stack([np.asarray(m, dtype=bool) for m in self.env.env_method("action_masks")])

    def _sample_action(
        self, learning_starts: int, action_noise: Any = None, n_envs: int = 1
    ) -> Tuple[np.ndarray, np.ndarray]:
        masks = self._current_action_masks()
        if masks is None:
            return super()._sample_action(learning_starts, action_noise, n_envs)
        n_actions = int(self.action_space.n)  # type: ignore[attr-defined]
        warming_up = self.num_timesteps < learning_starts
        explore = np.ones(n_envs, dtype=bool) if warming_up else self.exploration_rng.random(n_envs) < self.exploration_rate
        actions = np.empty(n_envs, dtype=np.int64)
        if not explore.all():
            obs_tensor, _ = self.policy.obs_to_tensor(self._last_obs)
            with th.no_grad():
                q = self.q_net(obs_tensor).cpu().numpy()
        for i in range(n_envs):
            allowed = np.flatnonzero(masks[i]) if masks[i].any() else np.arange(n_actions)
            if explore[i]:
                actions[i] = self.exploration_rng.choice(allowed)
            else:
                actions[i] = allowed[np.argmax(q[i, allowed])]
        return actions, actions


# -- deployment -------------------------------------------------------------
def flat_size(spec: SelectionSpec, flat_parts: Sequence[str]) -> int:
    """Length of the flat observation with ``flat_parts`` for the problem ``spec``."""
    sizes = {"weights": (spec.num_clients + 1) * spec.pca_components,
             "clients": spec.num_clients * len(spec.client_features),
             "progress": 2}
    return int(sum(sizes[p] for p in flat_parts))


@AGENTS.register("favor")
class FavorAgent(SelectionAgent):
    """FAVOR's deployed selector: the K available clients with the highest Q-values.

    Build it with ``agents.make("favor", spec, model_path=...)``, :meth:`FavorAgent.load`,
    or :meth:`FavorAgent.from_model` (a live SB3 model, e.g. during training).

    :param spec: the problem's public description (any action mode; ``topk`` is FAVOR's deployment).
    :param seed: unused (the agent is deterministic); kept for the common signature.
    :param model_path: a saved SB3 ``DQN``/:class:`DoubleDQN` (``.zip``).
    :param model: an already-loaded SB3 DQN-family model (instead of ``model_path``).
    :param flat_parts: the parts the model's input concatenates; default: read from the
        ``env_config.yaml`` saved beside ``model_path``.
    :param env_config: the training env config (a dict or a YAML path) to read ``flat_parts`` from.
    :param device: torch device for the Q-network.
    """

    name = "favor"

    def __init__(
        self,
        spec: SelectionSpec,
        seed: Optional[int] = None,
        model_path: Union[str, Path, None] = None,
        model: Optional[DQN] = None,
        flat_parts: Optional[Sequence[str]] = None,
        env_config: Union[str, Path, Mapping[str, Any], None] = None,
        device: str = "cpu",
    ) -> None:
        super().__init__(spec, seed=seed)
        if (model_path is None) == (model is None):
            raise ValueError("favor agent: give exactly one of model_path= (a saved model .zip) or model=")
        if model is None:
            path = Path(model_path)  # type: ignore[arg-type]
            zip_path = path if path.suffix == ".zip" else path.with_name(path.name + ".zip")
            if not zip_path.is_file():
                raise ValueError(f"favor agent: model_path {str(model_path)!r} does not exist")
            model = load_model(DoubleDQN, zip_path, what="favor agent: model", device=device)  # damaged: ValueError
        if not hasattr(model, "q_net"):
            raise ValueError(f"favor agent: model must be a DQN-family SB3 model, got {type(model).__name__}")
        if flat_parts is None:
            if env_config is None:
                if model_path is None:
                    raise ValueError("favor agent: with model= give flat_parts= or env_config=")
                cfg = read_env_config(model_path)
            elif isinstance(env_config, Mapping):
                cfg = dict(env_config)
            else:
                from fedsel_env.config import load_config

                cfg = load_config(env_config)
            flat_parts = cfg.get("flat_parts", ["weights"])
        self.flat_parts = list(flat_parts)  # type: ignore[arg-type]
        self.model = model
        self._check_fits(model)

    @classmethod
    def load(cls, path: Union[str, Path], spec: SelectionSpec, seed: Optional[int] = None,
             device: str = "cpu", **kwargs: Any) -> "FavorAgent":
        """Load a saved model (and the ``env_config.yaml`` beside it) as a FAVOR agent for ``spec``."""
        return cls(spec, seed=seed, model_path=path, device=device, **kwargs)

    @classmethod
    def from_model(cls, model: DQN, spec: SelectionSpec, flat_parts: Sequence[str]) -> "FavorAgent":
        """Wrap a live model (no copy: the agent follows the model as it trains)."""
        return cls(spec, model=model, flat_parts=flat_parts)

    def _check_fits(self, model: DQN) -> None:
        n = self.spec.num_clients
        if not isinstance(model.action_space, spaces.Discrete) or int(model.action_space.n) != n:
            raise ValueError(f"favor agent: the model's action space {model.action_space} does not fit "
                             f"N = {n} clients (expected Discrete({n}): trained in the 'one' action mode)")
        expected = flat_size(self.spec, self.flat_parts)
        got = model.observation_space.shape
        if got != (expected,):
            raise ValueError(f"favor agent: the model expects observations of shape {got}, but flat_parts "
                             f"{self.flat_parts} of this problem (N={n}, d={self.spec.pca_components}) give "
                             f"({expected},): the model was trained on a different federation, PCA size d "
                             f"(env config pca_components) or flat_parts; deploy it in an env with its "
                             f"training config (agents.favor.deployment_config of its env_config.yaml)")

    def q_values(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Q(s, ·) for one Dict observation, shape (N,)."""
        flat = flatten(obs, self.flat_parts)[None]  # the env's own flattening rule
        with th.no_grad():
            q = self.model.q_net(th.as_tensor(flat, device=self.model.device))
        return q[0].cpu().numpy().astype(np.float64)

    def select(self, obs: Dict[str, np.ndarray]) -> np.ndarray:
        """The K available clients with the highest Q-values, best first (ties: lower index first)."""
        avail = self.available(obs)
        q = self.q_values(obs)[avail]
        order = np.argsort(-q, kind="stable")
        return avail[order[: self.k]]

    def __repr__(self) -> str:
        return (f"FavorAgent(mode={self.spec.action_mode!r}, K={self.spec.clients_per_round}, "
                f"flat_parts={self.flat_parts})")


def deploy_top_k(model: Any, spec: SelectionSpec, train_config: Mapping[str, Any],
                 seed: Optional[int] = None) -> FavorAgent:
    """``agents.deploy``'s ``top_k``: a DQN-family model (loaded, or its saved ``.zip``) as FAVOR's top-K agent,
    reading the ``flat_parts`` of its training config."""
    flat_parts = train_config.get("flat_parts", ["weights"])
    if isinstance(model, (str, Path)):
        return FavorAgent(spec, seed=seed, model_path=model, flat_parts=flat_parts)
    return FavorAgent(spec, seed=seed, model=model, flat_parts=flat_parts)


register_deployment("top_k", Deployment(
    selector=deploy_top_k, env_config=deployment_config, agent="favor",
    about="FAVOR's: the K available clients with the highest Q-values, in a topk env with Dict observations"))
for _entry in (  # before SB3's dqn, whose policy they share: a bare zip of a DQN policy is deployed as FAVOR's
    Algorithm("favor", DoubleDQN, ("one",), True, "top_k", (DQN_POLICY,), zoo_search=True,
              about="FAVOR's Double DQN (seed 002) as the paper trains it (configs/favor.yml), in the 'one' mode, "
                    "deployed as top-K"),
    Algorithm("favor+", DoubleDQN, ("one",), True, "top_k", (DQN_POLICY,), zoo_search=True,
              about="FAVOR+, this suite's variant of FAVOR: the departures listed in configs/favor+.yml"),
):
    register_algorithm(_entry, before="dqn")
