"""Attackers and unreliable clients: the ``adversary`` scenarios of the env config (issue #8).

Every knob lives in ``DEFAULT_CONFIG["adversary"]`` (``fedsel_env/config.py``), all off by
default; :func:`validate_adversary` checks them and :class:`Adversary` plays them out inside
the federation round (``fedsel_env/sim/federation.py``). docs/ROBUSTNESS.md measures their effect.

**Attackers** are a fixed set of clients: the ids in ``attackers``, or ``attacker_fraction``·N
of them (at least one when the fraction is > 0) drawn from the federation seed, so they stay
the same clients for as long as the partition does. Every message an attacker sends is
forged; its own data and local training are honest:

- *loss inflation* (the attack on valuation-based selection — AFL, q-FFL, Oort,
  Power-of-Choice — and on q-FedAvg's weights F_k^q): each per-sample training loss ℓ is
  reported as s·ℓ + b (``loss_scale`` s, ``loss_shift`` b), so the reported mean is
  F' = s·F + b and the reported √(mean ℓ²) is √(s²·rms² + 2sb·F + b²), both clipped into
  [0, ``MAX_REPORTED_LOSS``] (and the latter set to 0 when F' is: a negative shift can push the
  report down to "no loss at all", not below). They go into the observation's ``loss`` / ``loss_rms`` columns
  and into the aggregator's ``losses_before``.
- *update scaling and bias* (after the attacks of Z. Hu, K. Shaloudegi, G. Zhang, Y. Yu, "Federated
  Learning Meets Multi-objective Optimization", IEEE TNSE 9(4), 2022 (seed 003), §5–§6 and docs/SPEC.md §6:
  a client that inflates its loss by a factor s sends s times its gradient; docs/ROBUSTNESS.md): the
  attacker sends w'_k = w_t + s·(w_k − w_t) + β·u (``update_scale`` s, ``update_bias`` β,
  u a unit vector drawn once from the federation seed and shared by all attackers — a
  colluding bias). For gradient backends (q-FedSGD) the sent gradient is s·∇F_k(w_t) + β·u.
- *free riders* (``free_rider``): the attacker skips training and returns w_t unchanged (a zero
  gradient for gradient backends); scale and bias then act on that zero update.

**Unreliable clients** (any client, attacker or not): every round each client that was selected
and available drops out with probability ``dropout`` (it never reports and is noticed at once,
as a broken connection); a fixed set of stragglers (``straggler_fraction``·N, at least one when
> 0, drawn from the federation seed) adds a heavy-tailed delay to its exchange time —
Pareto (x_m = ``straggler_scale``, α = ``straggler_shape``: delay = x_m·U^(−1/α)) or lognormal
(median ``straggler_scale``, σ = ``straggler_shape``), capped at ``MAX_DELAY``; and with a
``deadline`` D the server stops waiting at D seconds: a client whose exchange time exceeds D is
late, is neither aggregated nor heard from (its loss is not reported), and the round lasts D.

The per-round draws (drop-outs, delays) are made for all N clients each round from the
adversary's own generator, whatever the selection, so two policies on the same seed meet the
same failures (common random numbers), and the system model's own draws are untouched: with
every knob off the simulator behaves bit for bit as without this module. The profiling round
is played without drop-outs, delays or a deadline, but attackers lie in it too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np
import torch

from .limits import is_choice, real_in, reals_text, short

#: Reported losses are clipped into [0, MAX_REPORTED_LOSS] by the server (a loss is non-negative).
MAX_REPORTED_LOSS = 1.0e30
#: A straggler's extra delay is capped here (seconds), so heavy tails never give an infinite clock.
MAX_DELAY = 1.0e9
STRAGGLER_DISTRIBUTIONS = ("pareto", "lognormal")

#: The knobs that forge attackers' messages (each needs at least one attacker) and their neutral values.
ATTACK_KNOBS: Dict[str, Any] = {"loss_scale": 1.0, "loss_shift": 0.0, "update_scale": 1.0,
                                "update_bias": 0.0, "free_rider": False}


def _fail(field: str, value: Any, allowed: str) -> None:
    raise ValueError(f"config field 'adversary.{field}' = {short(value)} is invalid: {allowed}")


def _real(adv: Mapping[str, Any], field: str, lo: float = -math.inf, hi: float = math.inf,
          lo_open: bool = False, hi_open: bool = False) -> float:
    """``adv[field]`` as a float when it is a finite number in the range (``limits.real_in``: no bool, no
    integer beyond float's range, no -0.0 where the range starts at 0); else ``ValueError`` naming it."""
    v = real_in(adv[field], lo, hi, lo_open, hi_open)
    if v is None:
        _fail(field, adv[field], "expected " + reals_text(lo, hi, lo_open, hi_open, given=adv[field]))
    return v


def count_from_fraction(fraction: float, n: int) -> int:
    """How many of ``n`` clients a fraction names: round(f·n), at least 1 when f > 0."""
    return 0 if fraction <= 0 else max(1, int(round(fraction * n)))


def validate_adversary(adv: Dict[str, Any], num_clients: int) -> None:
    """Check the ``adversary`` mapping of a complete config (in place: lists become plain int lists).

    :param adv: the merged ``adversary`` mapping (every key of ``DEFAULT_CONFIG["adversary"]``).
    :param num_clients: N.
    :raises ValueError: naming the first bad field ``adversary.<field>`` and what is allowed.
    """
    n = num_clients
    ids = adv["attackers"]
    if ids is None:
        ids = []
    if (not isinstance(ids, (list, tuple, np.ndarray))
            or not all(isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)) for i in ids)
            or not all(0 <= int(i) < n for i in ids) or len(set(int(i) for i in ids)) != len(ids)):
        _fail("attackers", adv["attackers"], f"expected a list of distinct client ids in [0, {n})")
    adv["attackers"] = sorted(int(i) for i in ids)
    frac = _real(adv, "attacker_fraction", 0.0, 1.0, hi_open=True)
    if adv["attackers"] and frac > 0:
        _fail("attacker_fraction", frac, "give either adversary.attackers (ids) or adversary.attacker_fraction, "
                                         "not both")
    count = len(adv["attackers"]) or count_from_fraction(frac, n)
    if count >= n:
        what = "attackers" if adv["attackers"] else "attacker_fraction"
        _fail(what, adv[what], f"names {count} attackers of {n} clients; at least one client must be honest")
    _real(adv, "loss_scale", 0.0)
    _real(adv, "loss_shift")
    _real(adv, "update_scale")
    _real(adv, "update_bias", 0.0)
    if not isinstance(adv["free_rider"], (bool, np.bool_)):
        _fail("free_rider", adv["free_rider"], "expected true or false")
    if count == 0:
        for knob, neutral in ATTACK_KNOBS.items():
            if adv[knob] != neutral:
                _fail(knob, adv[knob], "it forges attackers' messages but there are no attackers: set "
                                       "adversary.attackers (client ids) or adversary.attacker_fraction")
    _real(adv, "dropout", 0.0, 1.0)
    _real(adv, "straggler_fraction", 0.0, 1.0)
    if not is_choice(adv["straggler_distribution"], STRAGGLER_DISTRIBUTIONS):
        _fail("straggler_distribution", adv["straggler_distribution"], f"allowed: {list(STRAGGLER_DISTRIBUTIONS)}")
    _real(adv, "straggler_scale", 0.0, lo_open=True)
    _real(adv, "straggler_shape", 0.0, lo_open=True)
    if adv["deadline"] is not None:
        _real(adv, "deadline", 0.0, lo_open=True)


@dataclass
class Arrivals:
    """Whose update arrives in one round (arrays of client ids unless noted).

    :param responders: the updates that arrived in time (aggregated, and heard from).
    :param took_part: the clients that trained this round (warm next round): responders and late ones.
    :param dropped: selected and available, but dropped out.
    :param late: trained but missed the deadline.
    :param exchange_times: τ of the responders (seconds), aligned with ``responders``.
    :param round_time: the round's length (seconds).
    """

    responders: np.ndarray
    took_part: np.ndarray
    dropped: np.ndarray
    late: np.ndarray
    exchange_times: np.ndarray
    round_time: float


@dataclass
class Upload:
    """What the arriving clients send: reported losses and either local models or gradients (rows align).

    :param losses: F_k(w_t) as reported (K',).
    :param loss_rms: √(mean ℓ²) as reported (K',).
    :param local_models: (K', P) or None (the backend asks for gradients).
    :param gradients: (K', P) or None (the backend asks for models).
    """

    losses: np.ndarray
    loss_rms: np.ndarray
    local_models: Optional[torch.Tensor] = None
    gradients: Optional[torch.Tensor] = None


_NONE = np.zeros(0, dtype=np.int64)


class HonestClients:
    """Every client honest and reliable: the federation's two hooks with nothing forged or lost.

    :param num_clients: N.
    """

    def __init__(self, num_clients: int) -> None:
        self.n = num_clients
        self.is_attacker = np.zeros(num_clients, dtype=bool)
        self.attackers = _NONE
        self.stragglers = _NONE

    def arrivals(self, candidates: np.ndarray, system) -> Arrivals:
        """Hook 1 — whose update arrives: every selected and available client, after its exchange time.

        :param candidates: the selected clients that are available this round.
        :param system: the system model (``fedsel_env.sim.system.SystemModel``) for the exchange times.
        """
        tau = system.exchange_times(candidates)
        return Arrivals(candidates, candidates, _NONE, _NONE, tau, float(tau.max()) if tau.size else 0.0)

    def messages(self, clients: np.ndarray, global_params: torch.Tensor, upload: Upload) -> Upload:
        """Hook 2 — what the listed clients send, given what they honestly computed: that, unchanged."""
        return upload


@dataclass
class RoundFate:
    """What befalls the clients in one round, drawn for all N of them.

    :param dropped: (N,) whether each client would drop out if selected.
    :param delay: (N,) extra exchange time of each client (0 for non-stragglers), seconds.
    """

    dropped: np.ndarray
    delay: np.ndarray


class Adversary(HonestClients):
    """The attackers and the unreliable clients of one episode (the two hooks of :class:`HonestClients`).

    :param cfg: the validated ``adversary`` mapping.
    :param num_clients: N.
    :param federation_seed: the seed of the partition: attackers, stragglers and the bias
        direction are drawn from it (they belong to the federation, not to the episode).
    :param episode_seed: root of the per-round drop-out and delay draws.
    :param model_size: P, the number of model parameters (for the bias direction).
    """

    def __init__(self, cfg: Mapping[str, Any], num_clients: int, federation_seed: int, episode_seed: int,
                 model_size: int) -> None:
        super().__init__(num_clients)
        ids = np.asarray(cfg["attackers"], dtype=np.int64)
        if ids.size == 0:
            m = count_from_fraction(float(cfg["attacker_fraction"]), num_clients)
            ids = np.random.default_rng([int(federation_seed), 3]).permutation(num_clients)[:m]
        self.attackers = np.sort(ids)
        self.is_attacker = np.zeros(num_clients, dtype=bool)
        self.is_attacker[self.attackers] = True
        m = count_from_fraction(float(cfg["straggler_fraction"]), num_clients)
        self.stragglers = np.sort(np.random.default_rng([int(federation_seed), 4]).permutation(num_clients)[:m])
        self.is_straggler = np.zeros(num_clients, dtype=bool)
        self.is_straggler[self.stragglers] = True
        self.loss_scale, self.loss_shift = float(cfg["loss_scale"]), float(cfg["loss_shift"])
        self.update_scale, self.update_bias = float(cfg["update_scale"]), float(cfg["update_bias"])
        self.free_rider = bool(cfg["free_rider"])
        self.dropout = float(cfg["dropout"])
        self.distribution = str(cfg["straggler_distribution"])
        self.straggler_scale, self.straggler_shape = float(cfg["straggler_scale"]), float(cfg["straggler_shape"])
        self.deadline: Optional[float] = None if cfg["deadline"] is None else float(cfg["deadline"])
        self.bias_direction: Optional[torch.Tensor] = None
        if self.update_bias != 0.0:
            u = np.random.default_rng([int(federation_seed), 5]).standard_normal(model_size)
            self.bias_direction = torch.from_numpy(u / np.linalg.norm(u)).to(torch.float32)
        self.rng = np.random.default_rng([int(episode_seed), 6])
        self.lies_about_loss = self.attackers.size > 0 and (self.loss_scale != 1.0 or self.loss_shift != 0.0)
        self.forges_updates = self.attackers.size > 0 and (self.free_rider or self.update_scale != 1.0
                                                           or self.update_bias != 0.0)

    # ------------------------------------------------------------------ per round
    def draw_round(self) -> RoundFate:
        """Drop-outs and straggler delays of the coming round, for every client (common random numbers)."""
        u_drop = self.rng.random(self.n)
        u_delay = self.rng.random(self.n)
        z_delay = self.rng.standard_normal(self.n)
        dropped = u_drop < self.dropout
        delay = np.zeros(self.n)
        if self.stragglers.size:
            with np.errstate(over="ignore", divide="ignore"):
                if self.distribution == "pareto":  # x_m · U^(−1/α), U in (0, 1]
                    d = self.straggler_scale * np.power(1.0 - u_delay, -1.0 / self.straggler_shape)
                else:
                    d = self.straggler_scale * np.exp(self.straggler_shape * z_delay)
            d = np.minimum(np.nan_to_num(d, nan=MAX_DELAY, posinf=MAX_DELAY), MAX_DELAY)
            delay[self.is_straggler] = d[self.is_straggler]
        return RoundFate(dropped=dropped, delay=delay)

    # ------------------------------------------------------------------ the federation's hooks
    def arrivals(self, candidates: np.ndarray, system) -> Arrivals:
        """Drop-outs, straggler delays and the deadline decide whose update arrives (module docstring)."""
        fate = self.draw_round()
        gone = fate.dropped[candidates]
        dropped, took_part = candidates[gone], candidates[~gone]
        tau_all = system.exchange_times(took_part) + fate.delay[took_part]
        on_time = tau_all <= self.deadline if self.deadline is not None else np.ones(took_part.size, bool)
        late = took_part[~on_time]
        round_time = self.deadline if late.size else (float(tau_all.max()) if tau_all.size else 0.0)
        return Arrivals(took_part[on_time], took_part, dropped, late, tau_all[on_time], float(round_time))

    def messages(self, clients: np.ndarray, global_params: torch.Tensor, upload: Upload) -> Upload:
        """What the listed clients send: attackers' losses, models and gradients forged (module docstring)."""
        losses, rms = self.report_losses(clients, upload.losses, upload.loss_rms)
        local = None if upload.local_models is None else self.forge_models(clients, global_params,
                                                                           upload.local_models)
        grads = None if upload.gradients is None else self.forge_gradients(clients, upload.gradients)
        return Upload(losses, rms, local, grads)

    # ------------------------------------------------------------------ forged messages
    def report_losses(self, clients: np.ndarray, losses: np.ndarray, rms: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """The losses the listed clients report: the true ones for honest clients, s·ℓ + b per sample for attackers.

        :param clients: client ids (K,).
        :param losses: their true F_k (K,).
        :param rms: their true √(mean ℓ²) (K,).
        :return: (reported F_k, reported √(mean ℓ²)), new arrays.
        """
        losses, rms = np.array(losses, dtype=np.float64), np.array(rms, dtype=np.float64)
        if not self.lies_about_loss or losses.size == 0:
            return losses, rms
        bad = self.is_attacker[np.asarray(clients, dtype=np.int64)]
        s, b = self.loss_scale, self.loss_shift
        with np.errstate(over="ignore", invalid="ignore"):
            mean = s * losses[bad] + b
            ms = s * s * rms[bad] ** 2 + 2.0 * s * b * losses[bad] + b * b  # mean of (s·ℓ + b)²
            root = np.sqrt(np.maximum(ms, 0.0))
        losses[bad] = np.clip(np.nan_to_num(mean, nan=MAX_REPORTED_LOSS), 0.0, MAX_REPORTED_LOSS)
        root = np.where(mean > 0, root, 0.0)  # a report of zero mean loss is a report of all-zero losses
        rms[bad] = np.clip(np.nan_to_num(root, nan=MAX_REPORTED_LOSS), 0.0, MAX_REPORTED_LOSS)
        return losses, rms

    def forge_models(self, clients: np.ndarray, global_params: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
        """The local models the listed clients send: w_t + s·(w_k − w_t) + β·u for attackers (w_t for free riders).

        :param clients: client ids (K,).
        :param global_params: w_t (P,).
        :param local: their honestly trained w_k (K, P).
        :return: (K, P), ``local`` itself when nobody forges.
        """
        if not self.forges_updates or local.shape[0] == 0:
            return local
        rows = torch.from_numpy(np.flatnonzero(self.is_attacker[np.asarray(clients, dtype=np.int64)])).to(local.device)
        if rows.numel() == 0:
            return local
        update = torch.zeros_like(local[rows]) if self.free_rider else local[rows] - global_params.unsqueeze(0)
        forged = global_params.unsqueeze(0) + self.update_scale * update
        if self.bias_direction is not None:
            forged = forged + self.update_bias * self.bias_direction.to(device=local.device, dtype=local.dtype)
        out = local.clone()
        out[rows] = forged
        return out

    def forge_gradients(self, clients: np.ndarray, gradients: torch.Tensor) -> torch.Tensor:
        """The full-batch gradients the listed clients send: s·∇F_k + β·u for attackers (0 for free riders)."""
        if not self.forges_updates or gradients.shape[0] == 0:
            return gradients
        rows = torch.from_numpy(np.flatnonzero(self.is_attacker[np.asarray(clients, dtype=np.int64)]))
        rows = rows.to(gradients.device)
        if rows.numel() == 0:
            return gradients
        g = torch.zeros_like(gradients[rows]) if self.free_rider else gradients[rows]
        forged = self.update_scale * g
        if self.bias_direction is not None:
            forged = forged + self.update_bias * self.bias_direction.to(device=gradients.device, dtype=gradients.dtype)
        out = gradients.clone()
        out[rows] = forged
        return out
