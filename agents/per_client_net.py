"""A per-client, permutation-equivariant selection network, as Stable-Baselines3 policies (issue #19).

FAVOR's Q-network (docs/SPEC.md §4, seed 002) reads the flattened (N+1)·d state and outputs N values: it is
tied to one N, one client order and one federation, and learns the same function N times. Client
selection is a ranking over a *set*. Here one small network scores every client from

- its **token**: its PCA row relative to the global model's (FAVOR's state, docs/SPEC.md §2), scaled by the
  set's spread, and the server's per-client record (``obs["clients"]``, ``fedsel_env.spec.CLIENT_FEATURES``),
  with losses, speeds and exchange times also as z-scores over the set;
- a **pooled summary** of the federation (mean and max of the clients' embeddings, DeepSets: Zaheer
  et al., "Deep Sets", NeurIPS 2017) and the round's progress (``obs["progress"]``).

So permuting the clients permutes the scores, and the same weights run at any N (only d, the PCA
width, and the feature columns are fixed). Two SB3 forms:

- :class:`PerClientActorCriticPolicy` — for PPO/A2C in the ``topk`` mode: the Gaussian's mean is the
  per-client score (one shared, learned standard deviation), the env takes the K best available;
  the value is read from the pooled summary.
- :class:`PerClientDQNPolicy` — per-client Q-values for (Double) DQN in the ``one`` mode (one client a
  step, FAVOR+'s ``one_mode_step`` 1/K), deployed as the K highest Q-values; the greedy action is
  taken among the available clients only (the observation's ``available`` column).

:func:`load_per_client` loads either form's zip for a problem of any N (the spaces are rebuilt for
that N; no weight depends on it). The agent is :class:`agents.per_client.PerClientAgent`.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.dqn.policies import DQNPolicy, QNetwork
from torch import nn

from fedsel_env.spec import CLIENT_FEATURES, FEATURE_INDEX

#: columns of ``obs["clients"]`` that enter the token through log1p (heavy-tailed, unbounded)
LOG_COLUMNS = ("loss", "loss_rms", "ctx_cpu", "ctx_comm", "last_exchange_time")
#: columns that also enter as a z-score over the set of clients (what matters is a client's rank)
Z_COLUMNS = ("loss", "loss_rms", "ctx_cpu", "ctx_comm", "last_exchange_time")
_EPS = 1e-6


def token_size(d: int) -> int:
    """Length of one client's token for a d-component PCA: d + 1 (weights) + features + z-scores."""
    return d + 1 + len(CLIENT_FEATURES) + len(Z_COLUMNS)


def client_tokens(obs: Dict[str, th.Tensor]) -> th.Tensor:
    """(B, N, T) tokens from a batch of Dict observations; each depends on the set only through
    permutation-invariant statistics (spread of the PCA rows, mean/std of the z-scored columns)."""
    w = obs["weights"].float()
    rel = w[:, 1:] - w[:, :1]                                        # client rows relative to w_t: (B, N, d)
    scale = rel.pow(2).mean(dim=(1, 2), keepdim=True).sqrt() + _EPS  # the set's spread: one number per state
    dist = rel.norm(dim=2, keepdim=True)
    dist = dist / (dist.mean(dim=1, keepdim=True) + _EPS)
    f = obs["clients"].float().clone()
    cols = [FEATURE_INDEX[c] for c in LOG_COLUMNS]
    f[..., cols] = th.log1p(f[..., cols].clamp(min=0.0))
    z_cols = f[..., [FEATURE_INDEX[c] for c in Z_COLUMNS]]
    z = (z_cols - z_cols.mean(dim=1, keepdim=True)) / (z_cols.std(dim=1, keepdim=True, unbiased=False) + 1e-3)
    return th.cat([rel / scale, dist, f, z.clamp(-5.0, 5.0)], dim=2)


def _mlp(sizes: Tuple[int, ...]) -> nn.Sequential:
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers)


class ClientSetEncoder(BaseFeaturesExtractor):
    """Tokens → per-client embeddings h_i = φ(token_i) and the context [mean_i h_i, max_i h_i, progress].

    Output: (B, N, 3·hidden + 2), each client's h_i beside the context (repeated per client). SB3's
    ``features_dim`` is nominal here (the heads below read the per-client layout).

    :param observation_space: the env's Dict observation space (``weights``, ``clients``, ``progress``).
    :param hidden: width of φ and of the heads.
    """

    def __init__(self, observation_space: spaces.Dict, hidden: int = 64) -> None:
        if not isinstance(observation_space, spaces.Dict) or not {"weights", "clients", "progress"} <= set(
                observation_space.spaces):
            raise ValueError(f"the per-client network reads Dict observations with 'weights', 'clients' and "
                             f"'progress' (env config observation: dict), got {observation_space}")
        d = int(observation_space["weights"].shape[1])
        # columns after CLIENT_FEATURES (set_distill's cover features) enter the token as they are
        extra = int(observation_space["clients"].shape[1]) - len(CLIENT_FEATURES)
        if extra < 0:
            raise ValueError(f"the per-client network reads obs['clients'] with the {len(CLIENT_FEATURES)} columns of "
                             f"fedsel_env.spec.CLIENT_FEATURES (and any after them), got "
                             f"{observation_space['clients'].shape[1]}")
        super().__init__(observation_space, features_dim=3 * hidden + 2)
        self.hidden = int(hidden)
        self.phi = _mlp((token_size(d) + extra, hidden, hidden))

    def forward(self, obs: Dict[str, th.Tensor]) -> th.Tensor:
        h = self.phi(client_tokens(obs))                                 # (B, N, H)
        ctx = th.cat([h.mean(dim=1), h.max(dim=1).values, obs["progress"].float()], dim=1)  # (B, 2H + 2)
        return th.cat([h, ctx.unsqueeze(1).expand(-1, h.shape[1], -1)], dim=2)


class ScoreHead(nn.Module):
    """ρ([h_i, context]) → one score per client: (B, N, 3H + 2) → (B, N)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.rho = nn.Sequential(_mlp((3 * hidden + 2, hidden)), nn.Linear(hidden, 1))

    def forward(self, x: th.Tensor) -> th.Tensor:
        return self.rho(x).squeeze(-1)


class PerClientHeads(nn.Module):
    """SB3's ``mlp_extractor`` for :class:`PerClientActorCriticPolicy`: latent_pi = the scores (B, N),
    latent_vf = an embedding of the context (B, H)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.latent_dim_pi = 1  # nominal: the action net is the identity on the N scores
        self.latent_dim_vf = hidden
        self.score = ScoreHead(hidden)
        self.value = _mlp((2 * hidden + 2, hidden))

    def forward(self, x: th.Tensor) -> Tuple[th.Tensor, th.Tensor]:
        return self.forward_actor(x), self.forward_critic(x)

    def forward_actor(self, x: th.Tensor) -> th.Tensor:
        return 0.5 * th.tanh(self.score(x))  # inside topk's [-1, 1], with room for the exploration noise

    def forward_critic(self, x: th.Tensor) -> th.Tensor:
        return self.value(x[:, 0, self.hidden:])


class PerClientActorCriticPolicy(ActorCriticPolicy):
    """PPO/A2C policy for the ``topk`` mode: a Gaussian over the N scores whose mean is the per-client
    score and whose standard deviation is one learned number (so no weight depends on N).

    Takes :class:`~stable_baselines3.common.policies.ActorCriticPolicy`'s arguments plus ``hidden``.
    """

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, lr_schedule: Any,
                 hidden: int = 64, log_std_init: float = -1.0, **kwargs: Any) -> None:
        if not isinstance(action_space, spaces.Box) or len(action_space.shape) != 1:
            raise ValueError(f"the per-client actor-critic acts in the 'topk' mode (Box(N) scores), got "
                             f"{action_space}: set the env's action_mode: topk")
        self.hidden = int(hidden)
        kwargs.setdefault("features_extractor_class", ClientSetEncoder)
        kwargs["features_extractor_kwargs"] = {**kwargs.get("features_extractor_kwargs", {}), "hidden": self.hidden}
        kwargs["share_features_extractor"] = True
        super().__init__(observation_space, action_space, lr_schedule, log_std_init=log_std_init, **kwargs)

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = PerClientHeads(self.hidden)

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        self.action_net = nn.Identity()
        self.log_std = nn.Parameter(th.full((1,), float(self.log_std_init)))
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def _get_constructor_parameters(self) -> Dict[str, Any]:
        data = super()._get_constructor_parameters()
        data["hidden"] = self.hidden
        return data

    def scores(self, obs: Dict[str, th.Tensor]) -> th.Tensor:
        """The deterministic per-client scores (the Gaussian's mean): (B, N)."""
        return self.mlp_extractor.forward_actor(self.extract_features(obs, self.pi_features_extractor))


def available_mask(obs: Dict[str, th.Tensor]) -> th.Tensor:
    """(B, N) bool: the clients the observation marks available."""
    return obs["clients"][..., FEATURE_INDEX["available"]] > 0.5


class PerClientQNetwork(QNetwork):
    """Per-client Q-values Q(s, i) = ρ([h_i, context]) for the ``one`` mode; greedy among available clients."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Discrete,
                 features_extractor: BaseFeaturesExtractor, features_dim: int, net_arch: Optional[list] = None,
                 activation_fn: type = nn.ReLU, normalize_images: bool = True, hidden: int = 64) -> None:
        BasePolicy.__init__(self, observation_space, action_space, features_extractor=features_extractor,
                            normalize_images=normalize_images)
        self.net_arch = list(net_arch or [])
        self.activation_fn = activation_fn
        self.features_dim = features_dim
        self.hidden = int(hidden)
        self.q_net = ScoreHead(self.hidden)

    def forward(self, obs: Dict[str, th.Tensor]) -> th.Tensor:
        return self.q_net(self.extract_features(obs, self.features_extractor))

    def _predict(self, observation: Dict[str, th.Tensor], deterministic: bool = True) -> th.Tensor:
        q = self(observation)
        avail = available_mask(observation)
        q = th.where(avail | ~avail.any(dim=1, keepdim=True), q, th.full_like(q, -th.inf))
        return q.argmax(dim=1).reshape(-1)

    def _get_constructor_parameters(self) -> Dict[str, Any]:
        data = super()._get_constructor_parameters()
        data["hidden"] = self.hidden
        return data


class PerClientDQNPolicy(DQNPolicy):
    """(Double) DQN policy for the ``one`` mode with :class:`PerClientQNetwork`s (online and target)."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, lr_schedule: Any,
                 hidden: int = 64, **kwargs: Any) -> None:
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(f"the per-client Q-network acts in the 'one' mode (Discrete(N)), got {action_space}: "
                             f"set the env's action_mode: one")
        self.hidden = int(hidden)
        kwargs.setdefault("features_extractor_class", ClientSetEncoder)
        kwargs["features_extractor_kwargs"] = {**kwargs.get("features_extractor_kwargs", {}), "hidden": self.hidden}
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)

    def make_q_net(self) -> PerClientQNetwork:
        net_args = self._update_features_extractor(self.net_args, features_extractor=None)
        return PerClientQNetwork(**net_args, hidden=self.hidden).to(self.device)

    def _get_constructor_parameters(self) -> Dict[str, Any]:
        data = super()._get_constructor_parameters()
        data["hidden"] = self.hidden
        return data


def per_client_scores(model: Any, obs: Dict[str, np.ndarray]) -> np.ndarray:
    """The scores a trained per-client model gives the clients of one Dict observation: (N,).

    PPO/A2C: the Gaussian's mean; DQN-family: the Q-values; Plackett-Luce: the logits.
    """
    policy = model.policy
    tensors, _ = policy.obs_to_tensor({k: np.asarray(v) for k, v in obs.items()})
    with th.no_grad():
        if callable(getattr(policy, "logits", None)):  # agents/plackett_luce.py's policy (no import: it imports us)
            s = policy.logits(tensors)
        elif isinstance(policy, PerClientActorCriticPolicy):
            s = policy.scores(tensors)
        elif isinstance(policy, PerClientDQNPolicy):
            s = policy.q_net(tensors)
        else:
            raise ValueError(f"{type(model).__name__} with {type(policy).__name__} is not a per-client model "
                             f"(expected PerClientActorCriticPolicy, PerClientDQNPolicy or PlackettLucePolicy)")
    return s[0].cpu().numpy().astype(np.float64)
