"""FedSelect: the federated-learning process as one Gymnasium environment (SPEC §2).

An episode is one FL training job: a fresh global model w_0, FAVOR's profiling
round (every client trains one epoch; a PCA with d components is fitted on the
N + 1 weight vectors and kept fixed), then one step per communication round until
the global test accuracy reaches Ω (``terminated``) or the round budget runs out
or the model diverges (``truncated``).

Observation (``Dict``): ``weights`` (N+1, d) — PCA of the global model and of each
client's latest local model (FAVOR's s_t); ``clients`` (N, F) — what a real server
knows of each client (columns: ``fedsel_env.spec.CLIENT_FEATURES``); ``progress``
(2,) — round / budget and the global accuracy. With ``observation: flat`` it is
one ``Box``: the ``flat_parts`` flattened and concatenated, for SB3's ``MlpPolicy``.

Reward: by name (``fedsel_env.rewards``); FAVOR's Ξ^(acc−Ω) − 1 by default.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from . import metrics
from .actions import ACTION_MODES
from .adversary import Adversary
from .aggregators import make_aggregator
from .config import make_config
from .data import build_federated_data
from .federation import Federation, RoundResult
from .parallel import WorkerPool
from .observation import LOSS_CAP, dict_observation_space, flat_observation_space
from .models import init_params, make_model, num_parameters
from .rewards import RoundOutcome, make_reward
from .spec import CLIENT_FEATURES, FEATURE_INDEX, SelectionSpec
from .system import SystemModel



class FedSelectEnv(gym.Env):
    """Client selection in federated learning.

    :param config: overrides of ``fedsel_env.config.DEFAULT_CONFIG`` (a dict; may name a ``preset``).
    :param preset: a preset name from ``fedsel_env.config.PRESETS`` applied before ``config``.
    :param render_mode: unused (no rendering); accepted for Gymnasium's API.
    """

    metadata = {"render_modes": []}

    def __init__(self, config: Optional[Mapping[str, Any]] = None, preset: Optional[str] = None,
                 render_mode: Optional[str] = None) -> None:
        super().__init__()
        self.config = make_config(config, preset=preset)
        cfg = self.config
        self.num_clients = cfg["num_clients"]
        self.k = cfg["clients_per_round"]
        # Checked at construction, so a bad name fails before any training: reward, backend, action mode.
        self.reward_fn = make_reward(cfg["reward"], cfg["reward_params"])
        make_aggregator(cfg["aggregator"], cfg["aggregator_params"])
        self.action_mode = ACTION_MODES.lookup(cfg["action_mode"])(self.num_clients, self.k)
        self.action_space = self.action_mode.space()
        step = cfg["one_mode_step"]
        #: the fraction of a communication round one step stands for (1 outside the `one` mode): the global
        #: model moves this fraction of the way from w_t to the aggregate, and the round-based parts of the
        #: state (progress, rounds since selected, participation rate, the "last round" flags) and the round
        #: budget count the step as this fraction of a round.
        self.server_step = 1.0 if cfg["action_mode"] != "one" else (1.0 / self.k if step == "1/K" else float(step))
        #: steps per episode: the round budget in steps
        self.max_steps = max(1, math.ceil(cfg["max_rounds"] / self.server_step - 1e-9))

        # The data, hence the model's size and the observation's shapes, are fixed per config: build the
        # federation once with a seed from the config so spaces are known before reset.
        self._data_cache: Dict[int, Any] = {}
        probe = self._federated_data(0)
        self._model = make_model(cfg["model"], probe.input_shape, probe.num_classes, cfg["model_params"])
        self.model_size = num_parameters(self._model)
        self.pca_components = cfg["pca_components"] or min(100, self.num_clients + 1)
        self.pca_components = min(self.pca_components, self.num_clients + 1)
        self.observation_space = self._observation_space()
        self.federation: Optional[Federation] = None
        self._pool: Optional[WorkerPool] = None  # config "workers" > 1: forked at the first reset
        self.selection_spec = self._spec(probe.num_samples)
        self._round = 0

    # ------------------------------------------------------------------ spaces
    def _observation_space(self) -> spaces.Space:
        self._dict_space = dict_observation_space(self.config, self.num_clients, self.pca_components,
                                                  self.model_size)
        if self.config["observation"] == "dict":
            return self._dict_space
        return flat_observation_space(self._dict_space, self.config["flat_parts"])

    def _spec(self, num_samples: np.ndarray) -> SelectionSpec:
        return SelectionSpec(num_clients=self.num_clients, clients_per_round=self.k,
                             action_mode=self.config["action_mode"], num_samples=np.asarray(num_samples).copy(),
                             max_rounds=self.config["max_rounds"], pca_components=self.pca_components,
                             model_bytes=4 * self.model_size)

    def _federated_data(self, seed: int):
        if seed not in self._data_cache:
            rng = np.random.default_rng([int(seed), 1])
            self._data_cache = {seed: build_federated_data(self.config, rng)}  # keep one federation only
        return self._data_cache[seed]

    # ------------------------------------------------------------------- reset
    def reset(self, *, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None):
        """Start a training job: new partition (from the seed), new w_0, profiling round, fixed PCA."""
        if seed is not None:
            if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
                raise ValueError(f"reset seed {seed!r} is invalid: expected an integer >= 0 or None")
            seed = int(seed)
        super().reset(seed=seed)
        cfg = self.config
        seeds = self.np_random.integers(0, 2**31 - 1, size=5)
        fed_seed = cfg["federation_seed"] if cfg["federation_seed"] is not None else int(seeds[0])
        data = self._federated_data(fed_seed)
        self.selection_spec = self._spec(data.num_samples)
        system = SystemModel(cfg["system"], self.num_clients, 4 * self.model_size,
                             np.random.default_rng([fed_seed, 2]))
        system.rng = np.random.default_rng(int(seeds[1]))  # per-episode draws; θ* stays with the federation
        aggregator = make_aggregator(cfg["aggregator"], cfg["aggregator_params"])
        adversary = Adversary(cfg["adversary"], self.num_clients, fed_seed, int(seeds[1]), self.model_size)
        if cfg["workers"] > 1 and (self._pool is None or self._pool.closed):
            self._pool = WorkerPool(cfg["workers"] - 1)
        self.federation = Federation(data, self._model, aggregator, system, cfg, train_seed=int(seeds[2]),
                                     adversary=adversary, pool=self._pool, server_step=self.server_step)
        w0 = self.federation.layout.flatten(init_params(self._model, torch.Generator().manual_seed(int(seeds[3]))))
        aggregator.reset(w0)
        system.draw_round()  # the profiling round's contexts
        client_rows, global_row, losses, rms, profiling_time = self.federation.profile(
            w0, self.pca_components, int(seeds[4]))
        system.took_part_last[:] = True  # everyone took part in the profiling round
        system.draw_round()  # the first round's availability and contexts

        n = self.num_clients
        self._weights = np.zeros((n + 1, self.pca_components), dtype=np.float64)
        self._weights[0], self._weights[1:] = global_row, client_rows
        self._loss, self._loss_rms = losses.copy(), rms.copy()
        self._last_selected_round = np.zeros(n)
        self._participation = np.zeros(n, dtype=np.int64)
        self._last_tau = np.zeros(n)
        self._selected_step = np.full(n, -np.inf)   # the last step each client was selected / responded
        self._responded_step = np.full(n, -np.inf)
        self._round = 0
        self._updates_sent = 0
        self._diverged = False
        self._attacker_rounds = 0      # rounds in which the policy selected at least one attacker
        self._attacker_responses = 0   # updates that arrived from attackers
        self._dropouts = 0
        self._late = 0
        ev = self.federation.evaluate(w0)
        self._accuracy, self._loss_global, self._client_acc = ev.accuracy, ev.loss, ev.client_accuracies
        self._profiling_time = profiling_time
        info = {"accuracy": self._accuracy, "loss": self._loss_global, "round": 0,
                "profiling_time": profiling_time, "clock": 0.0, "client_accuracies": self._client_acc.copy(),
                "num_samples": self.selection_spec.num_samples.copy(), "model_size": self.model_size,
                "attackers": adversary.attackers.copy(), "stragglers": adversary.stragglers.copy(),
                "honest_acc_mean": self._honest_accuracy(),
                "profiling_diverged": self.federation.profiling_diverged}
        return self._observe(), info

    # -------------------------------------------------------------------- step
    def step(self, action: Any):
        """One communication round with the clients the action names."""
        if self.federation is None:
            raise RuntimeError("call reset() before step()")
        selected = self.action_mode.decode(action, self.federation.system.available)  # may raise; no side effect
        self._round += 1
        result, local_rows = self.federation.run_round(selected, self._round - 1,
                                           evaluate=self._round % self.config["eval_every"] == 0
                                           or self._round >= self.max_steps)
        prev_acc = self._accuracy
        self._record(result, local_rows)
        reward = self.reward_fn(RoundOutcome(self._accuracy, prev_acc, self.config["target_accuracy"],
                                             result.round_time, self._round))
        terminated = bool(result.evaluated and not result.diverged
                          and self._accuracy >= self.config["target_accuracy"])
        truncated = bool(not terminated and (self._round >= self.max_steps or self._diverged))
        if not terminated and not truncated:
            self.federation.system.draw_round()
        return self._observe(), float(reward), terminated, truncated, self._info(result, terminated)

    def _record(self, r: RoundResult, local_rows: Optional[np.ndarray]) -> None:
        """Fold a round's result into the per-client state the observation shows."""
        resp = r.responders
        self._selected_step[r.selected] = self._round
        self._responded_step[resp] = self._round
        if resp.size:
            self._loss[resp] = r.losses_before
            self._loss_rms[resp] = r.loss_rms_before
            self._last_tau[resp] = r.exchange_times
            self._participation[resp] += 1
            self._last_selected_round[resp] = self._round
            self._updates_sent += resp.size
            if local_rows is not None:  # FAVOR's state: each client's latest local model
                self._weights[1 + resp] = local_rows
        is_attacker = self.federation.adversary.is_attacker if self.federation.adversary is not None else None
        if is_attacker is not None:
            self._attacker_rounds += int(is_attacker[r.selected].any())
            self._attacker_responses += int(is_attacker[resp].sum())
        self._dropouts += int(r.dropped.size)
        self._late += int(r.late.size)
        if r.diverged:
            self._diverged = True
        if r.evaluated and not r.diverged:
            self._accuracy, self._loss_global, self._client_acc = r.accuracy, r.loss, r.client_accuracies
        self._weights[0] = self.federation.project(self.federation.global_params)
        self._last_round = r

    # ------------------------------------------------------------- observation
    def _observe(self):
        fed = self.federation
        n, budget = self.num_clients, self.config["max_rounds"]
        unit = self.server_step  # rounds per step
        rounds = self._round * unit
        last_round = self._round - 1.0 / unit  # steps after this one belong to the last round
        c = np.zeros((n, len(CLIENT_FEATURES)), dtype=np.float64)
        f = FEATURE_INDEX
        c[:, f["loss"]] = self._loss
        c[:, f["loss_rms"]] = self._loss_rms
        ns = self.selection_spec.num_samples.astype(np.float64)
        c[:, f["num_samples"]] = ns / ns.max()
        c[:, f["rounds_since_selected"]] = (self._round - self._last_selected_round) * unit / budget
        c[:, f["participation_rate"]] = self._participation / max(rounds, 1)
        c[:, f["available"]] = fed.system.available
        c[:, [f["ctx_cpu"], f["ctx_cold"], f["ctx_comm"]]] = fed.system.context
        c[:, f["last_exchange_time"]] = self._last_tau
        c[:, f["selected_last_round"]] = self._selected_step > last_round
        c[:, f["responded_last_round"]] = self._responded_step > last_round
        space = self.observation_space
        parts = {
            "weights": np.nan_to_num(self._weights, nan=0.0, posinf=1e6, neginf=-1e6),
            "clients": np.nan_to_num(c, nan=LOSS_CAP, posinf=LOSS_CAP),
            "progress": np.array([min(rounds / budget, 1.0), self._accuracy]),
        }
        if isinstance(space, spaces.Dict):
            return {k: np.clip(v, space[k].low, space[k].high).astype(np.float32) for k, v in parts.items()}
        flat = np.concatenate([parts[p].reshape(-1) for p in self.config["flat_parts"]])
        return np.clip(flat, space.low, space.high).astype(np.float32)

    def _honest_accuracy(self) -> float:
        """Mean test accuracy over the honest clients (every client when there are no attackers)."""
        adv = self.federation.adversary
        honest = ~adv.is_attacker if adv is not None else np.ones(self.num_clients, dtype=bool)
        return float(np.mean(self._client_acc[honest]))

    def _info(self, r: RoundResult, terminated: bool) -> Dict[str, Any]:
        adv = self.federation.adversary
        is_attacker = adv.is_attacker if adv is not None else np.zeros(self.num_clients, dtype=bool)
        info: Dict[str, Any] = {
            "round": self._round,
            "accuracy": self._accuracy,
            "loss": self._loss_global,
            "evaluated": r.evaluated,
            "client_accuracies": self._client_acc.copy(),
            "selected": r.selected.copy(),
            "responders": r.responders.copy(),
            "round_time": r.round_time,
            "clock": self.federation.system.clock,
            "profiling_time": self._profiling_time,
            "participation": self._participation.copy(),
            "improved_fraction": r.improved_fraction,
            "updates_sent": self._updates_sent,
            "diverged": self._diverged,
            "is_success": terminated,
            # robustness (fedsel_env/adversary.py, docs/ROBUSTNESS.md)
            "attackers": np.flatnonzero(is_attacker),
            "attacker_selected": bool(is_attacker[r.selected].any()),
            "attacker_selected_rate": self._attacker_rounds / self._round,
            "attacker_response_share": self._attacker_responses / max(self._updates_sent, 1),
            "honest_acc_mean": self._honest_accuracy(),
            "dropped": r.dropped.copy(),
            "late": r.late.copy(),
            "dropouts": self._dropouts,
            "late_arrivals": self._late,
        }
        info.update(metrics.client_accuracy_summary(self._client_acc))
        info.update(metrics.participation_summary(self._participation, self._round))
        return info

    # ------------------------------------------------------------------ masks
    def action_masks(self) -> np.ndarray:
        """Which clients are available in the coming round (sb3-contrib's convention)."""
        if self.federation is None:
            return np.ones(self.num_clients, dtype=bool)
        return self.federation.system.available.copy()

    def render(self) -> None:
        return None

    def close(self) -> None:
        """Stop the worker processes (config ``workers`` > 1); a later reset() starts new ones."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        super().close()
