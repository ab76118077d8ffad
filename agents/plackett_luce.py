"""A K-of-N policy for Stable-Baselines3: Plackett–Luce over per-client logits (issue #41; docs/SPEC.md §2, §4).

Choosing K clients of N is choosing a *set*. The policy here is the Plackett–Luce distribution over the
available clients' logits l_i (Plackett, "The Analysis of Permutations", Applied Statistics 1975; Luce,
"Individual Choice Behavior", 1959), cut after K draws: clients are drawn one at a time without replacement,
each with probability softmax(l) over those left. Its samples are drawn by the Gumbel-top-K trick (the K
largest of l_i + Gumbel noise; Vieira, "Gumbel-max trick and weighted reservoir sampling", 2014; Kool, van
Hoof, Welling, "Stochastic Beams and Where to Find Them", ICML 2019), the way slate recommenders and
learning-to-rank sample top-K lists.

**The log-probability of the sampled set** (not of one ordering of it) is exact up to quadrature error. With
w_i = exp(l_i), the set S is the top-K of the perturbed logits iff every member's perturbed value exceeds the
largest of the rest's, which is a Gumbel with location log Z, Z = Σ_{j∉S} w_j; integrating over it
(Kool, van Hoof, Welling, "Estimating Gradients for Discrete Random Variables by Sampling without
Replacement", ICLR 2020, §4 and App. B):

    P(S) = ∫_0^1 Π_{i∈S} (1 − u^{w_i / Z}) du = ∫_ℝ exp(x − e^x) Π_{i∈S} (1 − exp(−(w_i/Z) e^x)) dx,

computed in log space by the trapezoid rule over x on a grid placed where the integrand lives (smooth and
double-exponentially decaying, so the rule converges geometrically; tests check it against the sum over
all K! orderings). Z = 0 (S is every available client) gives P(S) = 1. Unavailable clients are masked out
(never drawn, not in Z); with fewer than K available every available client is taken.

**Entropy**: SB3's PPO and A2C add ``ent_coef`` × the distribution's entropy; the set distribution's entropy
has no closed form, so :meth:`PlackettLuceTopK.entropy` returns the Monte-Carlo estimate −log P(S) of the
sets being evaluated (samples of the policy that collected them).

**The network** is :mod:`agents.per_client_net`'s: one per-client encoder shared by every client with a
pooled (DeepSets) context, so permuting the clients permutes the logits and one set of weights runs at any N;
the logits are its per-client scores, the value is read from the pooled context. Deployed as the K largest
logits among the available clients (``agents.per_client.PerClientAgent``; the ``per_client`` deployment).

The policy acts in the ``topk`` action mode: an action is the sampled set written as scores, +1 for a member
and −1 otherwise, so the env's top-K takes exactly the set. K is ``clients_per_round`` (``train_agent.py``
fills it in from the env config).
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

import torch as th
from gymnasium import spaces
from stable_baselines3.common.policies import ActorCriticPolicy
from torch import nn

from fedsel_env.spec import CLIENT_FEATURES

from .per_client_net import ClientSetEncoder, PerClientHeads, available_mask

#: trapezoid nodes of the log-probability's integral (the first, coarse pass locates the integrand)
GRID = 257
#: logits are kept within ±LOGIT_CAP (tanh-squashed) so that w_i / Z stays inside float64's range
LOGIT_CAP = 20.0


def _log1mexp(log_y: th.Tensor) -> th.Tensor:
    """log(1 − exp(−y)) from log y, accurate for tiny and large y (Mächler, "Accurately Computing
    log(1 − exp(−|a|))", 2012)."""
    y = th.exp(log_y.clamp(max=700.0))
    small = log_y < -20.0  # 1 − e^{−y} = y − y²/2 + …: log y to 1e-9 relative
    out = th.where(y < math.log(2.0), th.log(-th.expm1(-y)), th.log1p(-th.exp(-y)))
    return th.where(small, log_y, out)


def _log_integrand(x: th.Tensor, log_a: th.Tensor, member: th.Tensor) -> th.Tensor:
    """log of exp(x − e^x) Π_{i∈S}(1 − exp(−a_i e^x)) at the nodes x (B, G), a_i in log space (B, M) for M
    candidates of which ``member`` marks S's."""
    terms = _log1mexp(log_a.unsqueeze(1) + x.unsqueeze(2))                 # (B, G, N)
    terms = th.where(member.unsqueeze(1), terms, th.zeros_like(terms))
    return x - th.exp(x) + terms.sum(dim=2)


def set_log_prob(logits: th.Tensor, chosen: th.Tensor, mask: th.Tensor, members_only: bool = True) -> th.Tensor:
    """log P(S) of Plackett–Luce cut at |S| draws, for each row: (B,).

    :param logits: (B, N) per-client logits.
    :param chosen: (B, N) bool, the set S (a subset of ``mask``'s clients).
    :param mask: (B, N) bool, the clients that could be drawn.
    :param members_only: evaluate the integrand over the set's members only (B·G·K work); False runs it over all N
        clients with the non-members' factors 1 (B·G·N: the form before 2026-11-29, ``bench/pl_log_prob.py``'s
        reference), the same value up to float summation order.
    """
    logits = logits.double()
    member = chosen & mask
    rest = mask & ~member
    neg_inf = th.full_like(logits, -math.inf)
    log_z = th.logsumexp(th.where(rest, logits, neg_inf), dim=1, keepdim=True)   # (B, 1); −inf: nothing left
    everything = ~rest.any(dim=1)
    log_z = th.where(everything.unsqueeze(1), th.zeros_like(log_z), log_z)
    log_a = th.where(member, logits - log_z, th.zeros_like(logits))
    k = member.sum(dim=1, keepdim=True).double()
    # only the members' factors enter the integrand: gather them (B, max |S|) so a pass costs B·G·K, not B·G·N
    # (K = 20 of N = 1,000 on Large); rows with fewer members are padded with non-members, whose factor is 1
    if members_only:
        slots = max(int(k.max().item()) if k.numel() else 0, 1)
        order = member.double().topk(slots, dim=1).indices
        log_a, member = log_a.gather(1, order), member.gather(1, order)
    with th.no_grad():  # where the integrand lives: a coarse pass over a range that surely holds it
        lo = (-log_a.masked_fill(~member, -math.inf).amax(dim=1, keepdim=True)).clamp(max=0.0) - 60.0
        lo = th.where(everything.unsqueeze(1), th.full_like(lo, -60.0), lo)
        hi = th.log(2.0 * k + 80.0)
        t = th.linspace(0.0, 1.0, GRID, dtype=th.float64, device=logits.device)
        coarse = lo + (hi - lo) * t
        f = _log_integrand(coarse, log_a.detach(), member)
        keep = f >= f.amax(dim=1, keepdim=True) - 60.0                     # within e^-60 of the peak
        step = (hi - lo) / (GRID - 1)
        first = th.where(keep, coarse, th.full_like(coarse, math.inf)).amin(dim=1, keepdim=True) - step
        last = th.where(keep, coarse, th.full_like(coarse, -math.inf)).amax(dim=1, keepdim=True) + step
    x = first + (last - first) * t                                           # the fine pass, with gradients
    f = _log_integrand(x, log_a, member)
    dx = (last - first) / (GRID - 1)
    weights = th.full_like(f, 0.0)
    weights[:, [0, -1]] = math.log(0.5)                                      # the trapezoid's end weights
    log_p = th.logsumexp(f + weights, dim=1) + th.log(dx.squeeze(1))
    return th.where(everything, th.zeros_like(log_p), log_p)


class PlackettLuceTopK:
    """Plackett–Luce over the masked logits, cut after ``k`` draws, as a set distribution.

    Offers what SB3's on-policy algorithms call: ``sample``, ``mode``, ``log_prob``, ``entropy``,
    ``get_actions``. Actions are (B, N) float tensors: +1 for the set's members, −1 for the rest.
    """

    def __init__(self, logits: th.Tensor, mask: th.Tensor, k: int) -> None:
        if k < 1:
            raise ValueError(f"Plackett-Luce top-K: k = {k} clients a round; expected k >= 1")
        # with no client available every client may be drawn (the round is then lost whoever is picked)
        self.mask = mask | ~mask.any(dim=1, keepdim=True)
        self.logits = logits
        self.k = int(k)
        self._last: Optional[th.Tensor] = None

    def _top(self, values: th.Tensor) -> th.Tensor:
        values = th.where(self.mask, values, th.full_like(values, -math.inf))
        k = min(self.k, values.shape[1])
        idx = values.topk(k, dim=1).indices
        chosen = th.zeros_like(self.mask).scatter(1, idx, True) & self.mask
        return th.where(chosen, 1.0, -1.0).to(self.logits.dtype)

    def sample(self, generator: Optional[th.Generator] = None) -> th.Tensor:
        """A set by Gumbel-top-K: the K largest of l_i + G_i, G_i ~ Gumbel(0, 1), among the available."""
        u = th.rand(self.logits.shape, dtype=th.float64, device=self.logits.device, generator=generator)
        gumbel = -th.log(-th.log(u.clamp(1e-300, 1.0 - 1e-16)))
        return self._top(self.logits.detach().double() + gumbel)

    def mode(self) -> th.Tensor:
        """The deployed set: the K largest logits among the available clients."""
        return self._top(self.logits.detach())

    def get_actions(self, deterministic: bool = False) -> th.Tensor:
        return self.mode() if deterministic else self.sample()

    def log_prob(self, actions: th.Tensor) -> th.Tensor:
        """log P(S) of each row's set (``actions`` > 0 marks the members), float32 like SB3's buffers."""
        lp = set_log_prob(self.logits, actions > 0, self.mask).to(self.logits.dtype)
        self._last = lp
        return lp

    def entropy(self) -> Optional[th.Tensor]:
        """The Monte-Carlo entropy estimate −log P(S) of the sets last passed to :meth:`log_prob`."""
        return None if self._last is None else -self._last


class PlackettLucePolicy(ActorCriticPolicy):
    """PPO/A2C policy choosing K of N clients by Plackett–Luce over per-client logits (``pl_ppo``, ``pl_a2c``).

    Takes :class:`~stable_baselines3.common.policies.ActorCriticPolicy`'s arguments plus ``hidden`` (the width
    of the per-client encoder and heads) and ``clients_per_round`` (K; ``train_agent.py`` sets it from the env).
    """

    #: train_agent.py passes the env's clients_per_round as the policy keyword of this name
    clients_per_round_kwarg = "clients_per_round"

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, lr_schedule: Any,
                 hidden: int = 64, clients_per_round: Optional[int] = None, **kwargs: Any) -> None:
        if not isinstance(action_space, spaces.Box) or len(action_space.shape) != 1:
            raise ValueError(f"the Plackett-Luce policy acts in the 'topk' mode (Box(N) scores), got {action_space}: "
                             f"set the env's action_mode: topk")
        if isinstance(clients_per_round, bool) or not isinstance(clients_per_round, int) or clients_per_round < 1:
            raise ValueError(f"the Plackett-Luce policy needs clients_per_round (K) >= 1 in its policy_kwargs, got "
                             f"{clients_per_round!r} (train_agent.py sets it from the env config)")
        if isinstance(hidden, bool) or not isinstance(hidden, int) or not 1 <= hidden <= 4096:
            raise ValueError(f"the Plackett-Luce policy's hidden = {hidden!r}: expected an integer in [1, 4096]")
        self.hidden, self.clients_per_round = int(hidden), int(clients_per_round)
        kwargs.setdefault("features_extractor_class", ClientSetEncoder)
        kwargs["features_extractor_kwargs"] = {**kwargs.get("features_extractor_kwargs", {}), "hidden": self.hidden}
        kwargs["share_features_extractor"] = True
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = PerClientHeads(self.hidden)

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        self.action_net = nn.Identity()  # the logits are the per-client scores; no weight depends on N
        del self.log_std                 # the Gaussian's (N,) standard deviations: unused here, and tied to N
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def _get_constructor_parameters(self) -> Dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(hidden=self.hidden, clients_per_round=self.clients_per_round)
        return data

    def _logits_and_value(self, obs: Dict[str, th.Tensor]) -> Tuple[th.Tensor, th.Tensor]:
        features = self.extract_features(obs)
        x = features if isinstance(features, th.Tensor) else features[0]
        logits = LOGIT_CAP * th.tanh(self.mlp_extractor.score(x) / LOGIT_CAP)
        return logits, self.value_net(self.mlp_extractor.forward_critic(x))

    def logits(self, obs: Dict[str, th.Tensor]) -> th.Tensor:
        """The per-client logits (B, N): the deployed scores."""
        return self._logits_and_value(obs)[0]

    def _distribution(self, obs: Dict[str, th.Tensor], logits: th.Tensor) -> PlackettLuceTopK:
        return PlackettLuceTopK(logits, available_mask(obs), self.clients_per_round)

    def forward(self, obs: Dict[str, th.Tensor], deterministic: bool = False) -> Tuple[th.Tensor, th.Tensor, th.Tensor]:
        logits, values = self._logits_and_value(obs)
        dist = self._distribution(obs, logits)
        actions = dist.get_actions(deterministic=deterministic)
        return actions, values, dist.log_prob(actions)

    def evaluate_actions(self, obs: Dict[str, th.Tensor], actions: th.Tensor):
        logits, values = self._logits_and_value(obs)
        dist = self._distribution(obs, logits)
        log_prob = dist.log_prob(actions)
        return values, log_prob, dist.entropy()

    def get_distribution(self, obs: Dict[str, th.Tensor]) -> PlackettLuceTopK:  # type: ignore[override]
        return self._distribution(obs, self.logits(obs))

    def predict_values(self, obs: Dict[str, th.Tensor]) -> th.Tensor:
        return self._logits_and_value(obs)[1]

    def _predict(self, observation: Dict[str, th.Tensor], deterministic: bool = False) -> th.Tensor:
        return self.get_distribution(observation).get_actions(deterministic=deterministic)


class CoverPlackettLucePolicy(PlackettLucePolicy):
    """The named variant ``pl_ppo_cover``: :class:`PlackettLucePolicy` on cover-aware tokens, started at
    ``kcenter_cover`` (issue #41; not a paper's design).

    Its observations carry ``kcenter_cover``'s state after each client's features (``agents/cover_tokens.py``:
    ``train_agent.py`` wraps the training envs because :attr:`cover_features` says so, and the deployed
    ``per_client`` agent keeps the same tracker). Each client's logit is

        l_i = c · cover_pick_i + r_θ(token_i, context),

    c a learned scalar started at ``cover_prior`` and r_θ the per-client network's score, whose last layer
    starts at zero: the untrained policy's K largest logits are exactly ``kcenter_cover``'s picks (the bench's
    best single heuristic), its Gumbel-top-K samples explore around them, and PPO learns the residual on the
    scenario's objective. ``cover_prior`` = 0 starts at uniform logits (the cover columns are then only inputs).
    """

    #: train_agent.py wraps the training envs in agents.cover_tokens.CoverFeatures for this policy
    cover_features = True

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, lr_schedule: Any,
                 cover_prior: float = 3.0, **kwargs: Any) -> None:
        if isinstance(cover_prior, bool) or not isinstance(cover_prior, (int, float)) or not \
                -LOGIT_CAP <= float(cover_prior) <= LOGIT_CAP:
            raise ValueError(f"the cover-aware Plackett-Luce policy's cover_prior = {cover_prior!r}: expected a number "
                             f"in [-{LOGIT_CAP:g}, {LOGIT_CAP:g}] (3 starts the policy at kcenter_cover's picks)")
        from .set_distill import COVER_FEATURES

        extra = int(observation_space["clients"].shape[1]) - len(CLIENT_FEATURES) if isinstance(
            observation_space, spaces.Dict) and "clients" in observation_space.spaces else -1
        if extra != len(COVER_FEATURES):
            raise ValueError(f"the cover-aware Plackett-Luce policy reads obs['clients'] with kcenter_cover's "
                             f"{list(COVER_FEATURES)} after the {len(CLIENT_FEATURES)} client features "
                             f"(agents.cover_tokens.CoverFeatures; train_agent.py --algo pl_ppo_cover adds them)")
        self.cover_prior = float(cover_prior)
        self._pick_column = len(CLIENT_FEATURES) + COVER_FEATURES.index("cover_pick")
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)

    def _build(self, lr_schedule: Any) -> None:
        super()._build(lr_schedule)
        last = self.mlp_extractor.score.rho[-1]
        nn.init.zeros_(last.weight)   # the residual starts at zero: the logits start at c · cover_pick
        nn.init.zeros_(last.bias)
        self.cover_weight = nn.Parameter(th.tensor(self.cover_prior))
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def _get_constructor_parameters(self) -> Dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(cover_prior=self.cover_prior)
        return data

    def _logits_and_value(self, obs: Dict[str, th.Tensor]) -> Tuple[th.Tensor, th.Tensor]:
        features = self.extract_features(obs)
        x = features if isinstance(features, th.Tensor) else features[0]
        pick = obs["clients"][..., self._pick_column].float()
        raw = self.mlp_extractor.score(x) + self.cover_weight * pick
        return LOGIT_CAP * th.tanh(raw / LOGIT_CAP), self.value_net(self.mlp_extractor.forward_critic(x))


__all__ = ["CoverPlackettLucePolicy", "PlackettLucePolicy", "PlackettLuceTopK", "set_log_prob"]
