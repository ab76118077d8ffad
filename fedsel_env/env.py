"""FedSelect: the federated-learning process as one Gymnasium environment (docs/SPEC.md §2).

An episode is one FL training job: a fresh global model w_0, FAVOR's profiling round (every client trains one
epoch; a PCA with d components is fitted on the N + 1 weight vectors and kept fixed), then one step per
communication round until the global test accuracy reaches Ω (``terminated``) or the round budget runs out or
the model diverges (``truncated``); a step after that is refused until ``reset``.

The env is glue, as in HighwayEnv: the simulator (:class:`~fedsel_env.sim.federation.Federation`) plays rounds
and reports what a server receives; the server view (:class:`~fedsel_env.server_view.ServerView`) keeps the
records and builds the observation (``weights`` (N+1, d), ``clients`` (N, F), ``progress`` (2,); ``observation:
flat`` concatenates ``flat_parts``); the reward is named in the config (``fedsel_env/rewards.py``: FAVOR's
Ξ^(acc−Ω) − 1 by default, a bench objective with ``reward: objective``; ``reward: vector`` gives a vector of
objectives and a ``reward_space``, MO-Gymnasium's convention); ``fedsel_env/episode_info.py`` builds ``info``.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional

import gymnasium as gym
import numpy as np
from gymnasium.utils.seeding import np_random

from .actions import ACTION_MODES, server_step
from .sim.aggregators import make_aggregator
from .config import make_config
from .sim.data import build_federated_data
from .sim.device import resolve_device
from .episode_info import EpisodeTally
from .sim.federation import EpisodeSeeds, Federation, inline
from .sim.models import make_model, num_parameters
from .sim.limits import checked_seed
from .sim.parallel import WorkerPool
from .reset_cache import ResetCache
from .rewards import RoundOutcome, make_reward
from .server_view import ServerView, flat_observation_space
from .spec import SelectionSpec
from .threads import on_env_threads


class FedSelectEnv(gym.Env):
    """Client selection in federated learning.

    :param config: overrides of ``fedsel_env.config.DEFAULT_CONFIG`` (a dict; may name a ``preset``).
    :param preset: a preset name from ``fedsel_env.config.PRESETS`` applied before ``config``.
    :param render_mode: unused (no rendering); accepted for Gymnasium's API.
    :param fields: config fields as keyword arguments, merged over ``config`` (``gym.make(id, num_clients=50)``,
        rl-zoo3's ``--env-kwargs num_clients:50``); an unknown name is a ``ValueError`` listing the fields.
    """

    metadata = {"render_modes": []}

    def __init__(self, config: Optional[Mapping[str, Any]] = None, preset: Optional[str] = None,
                 render_mode: Optional[str] = None, **fields: Any) -> None:
        super().__init__()
        if fields:
            if config is not None and not isinstance(config, Mapping):
                raise ValueError(f"config {config!r} is invalid: expected a mapping of config fields (a dict) or None")
            config = {**dict(config or {}), **fields}
        self.config = cfg = make_config(config, preset=preset)
        # resolved once (the federations compute on it); CUDA where there is none: ValueError now (sim/device.py)
        self.device = resolve_device(cfg["device"], cfg["workers"], cfg["model"])
        self.num_clients, self.k = cfg["num_clients"], cfg["clients_per_round"]
        # Built here, so a bad name fails before any training (reward, backend, action mode); the backend once
        self.reward_fn = make_reward(cfg["reward"], cfg["reward_params"])
        if hasattr(self.reward_fn, "space"):  # a vector reward (reward: vector): MO-Gymnasium's attributes
            self.reward_space = self.reward_fn.space(self.num_clients)
            self.reward_dim = self.reward_space.shape[0]
        self.aggregator = make_aggregator(cfg["aggregator"], cfg["aggregator_params"], self.k)
        self.action_mode = ACTION_MODES.lookup(cfg["action_mode"])(self.num_clients, self.k)
        self.action_space = self.action_mode.space()
        self.server_step = server_step(cfg)  #: the fraction of a communication round one step stands for
        self.max_steps = max(1, math.ceil(cfg["max_rounds"] / self.server_step - 1e-9))  #: the round budget in steps
        # The data, hence the model's size and the observation's shapes, are fixed per config: build one
        # federation with a seed from the config so the spaces are known before reset.
        self._federations: Dict[int, Federation] = {}
        self._pool: Optional[WorkerPool] = None  # config "workers" > 1: forked at the first reset
        probe = build_federated_data(cfg, np.random.default_rng([0, 1]))
        self._probe = (0, probe)
        self._model = make_model(cfg["model"], probe.input_shape, probe.num_classes, cfg["model_params"])
        self.model_size = num_parameters(self._model)
        self.selection_spec = SelectionSpec.from_config(cfg, probe.num_samples, self.model_size)
        self.pca_components = self.selection_spec.pca_components
        self.view = ServerView(cfg, probe.num_samples, self.model_size, self.pca_components, self.server_step)
        self.observation_space = self.view.space if cfg["observation"] == "dict" else \
            flat_observation_space(self.view.space, cfg["flat_parts"])
        self.federation: Optional[Federation] = None
        #: states after a reset by config and seeds (reset_cache.py; shared by a vector env's sub-envs; 0: none)
        self.reset_cache = ResetCache()

    def _federation(self, seed: int) -> Federation:
        """The federation of a partition seed, kept while the seed stays (one at a time)."""
        if self.config["workers"] > 1 and (self._pool is None or self._pool.closed):
            self._pool, self._federations = WorkerPool(self.config["workers"] - 1), {}
        if seed not in self._federations:
            probe_seed, probe = self._probe
            data = probe if probe_seed == seed else build_federated_data(self.config, np.random.default_rng([seed, 1]))
            self._probe = (seed, data)
            self._federations = {seed: Federation(self.config, data, self._model, self._pool, self.server_step,
                                                  aggregator=self.aggregator, device=self.device)}
        return self._federations[seed]

    # ------------------------------------------------------------------- reset
    def reset_steps(self, *, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None):
        """Start a training job: new partition (from the seed), new w_0, profiling round, fixed PCA (``reset``; as a
        generator it yields the profiling round's ``TrainRequest``, for ``vector.py``), or :attr:`reset_cache`'s."""
        super().reset(seed=checked_seed(seed))
        seeds, pca = EpisodeSeeds.draw(self.config, self.np_random)
        self.federation = fed = self._federation(seeds.federation)
        self.view, profiling_time, broken = yield from self.reset_cache.start(  # a hit: no profiling round, no PCA fit
            self.reset_cache.key(self.config, seeds, pca, options), fed, seeds, pca, ServerView,
            (self.config, fed.num_samples, self.model_size, self.pca_components, self.server_step))
        self.selection_spec = SelectionSpec.from_config(self.config, fed.num_samples, self.model_size)
        self.tally = EpisodeTally(fed.adversary, profiling_time=profiling_time, profiling_diverged=broken)
        self._round, self._clock, self._ended = 0, 0.0, False
        return self.view.observe(), self.tally.reset_info(self.view, self.model_size)

    def reset_key(self, seed: Optional[int], options: Optional[Dict[str, Any]] = None) -> Optional[tuple]:
        """:attr:`reset_cache`'s key of ``reset(seed, options)`` (None for seed None); equal keys, equal resets."""
        return None if seed is None else self.reset_cache.key(
            self.config, *EpisodeSeeds.draw(self.config, np_random(checked_seed(seed))[0]), options)

    reset = on_env_threads(inline(reset_steps))  # Gymnasium's reset: reset_steps with its training done here

    # -------------------------------------------------------------------- step
    def step_steps(self, action: Any):
        """One communication round (a share of one in the ``one`` mode) with the clients the action names
        (``step``; as a generator it yields the round's ``TrainRequest``, for ``fedsel_env/vector.py``)."""
        selected = self._decode(action)  # may raise; no side effect
        report = yield from self.federation.round_steps(selected, evaluate=self._count_round())
        outcome = self._record(report)
        terminated = bool(report.evaluation is not None and not report.diverged
                          and self.view.accuracy >= self.config["target_accuracy"])
        truncated = bool(not terminated and (self._round >= self.max_steps or self.tally.diverged))
        outcome.final = self._ended = terminated or truncated  # the objective reward settles its sum at the last step
        reward = self._reward(outcome)
        if not terminated and not truncated:
            self.view.open_round(self.federation.open_round())
        return self.view.observe(), reward, terminated, truncated, self.tally.step_info(report, self.view, terminated)

    step = on_env_threads(inline(step_steps))  # Gymnasium's step: step_steps with its training done here

    def _decode(self, action: Any) -> np.ndarray:
        if self.federation is None or self._ended:  # no round past the budget or the target: wrong numbers
            raise RuntimeError("call reset() before step()" if self.federation is None else f"the episode ended "
                               f"(terminated or truncated) at step {self._round} of {self.max_steps}: call reset() to "
                               f"start a new one before step()")
        return self.action_mode.decode(action, self.view.available)

    def _count_round(self) -> bool:
        """Count the round; whether the global model is evaluated in it (every ``eval_every`` rounds, and the last)."""
        self._round += 1
        return self._round % self.config["eval_every"] == 0 or self._round >= self.max_steps

    def _record(self, report: Any) -> RoundOutcome:
        """The round into the view's and the episode's records; what the reward reads of it."""
        prev_acc, prev_part, prev_client_acc = \
            self.view.accuracy, self.view.participation.copy(), self.view.client_accuracies
        prev_clock, self._clock = self._clock, float(report.clock)
        self.view.record(report)
        self.tally.record(report)
        return RoundOutcome(self.view.accuracy, prev_acc, self.config["target_accuracy"], report.round_time,
                            self._round, self.view.participation, prev_part, self.view.client_accuracies,
                            prev_client_acc, clock=self._clock, prev_clock=prev_clock)

    def _reward(self, outcome: RoundOutcome) -> Any:  # a vector reward as it is, a scalar one as a float
        return self.reward_fn(outcome) if hasattr(self, "reward_space") else float(self.reward_fn(outcome))

    @on_env_threads
    def query_losses(self, clients: Any) -> np.ndarray:
        """Ask available clients for their loss F_k(w_t) on the current global model before selecting: Power-of-
        Choice's query (``agents/pow_d.py``), counted in ``info["loss_queries"]``, changing nothing else.
        :raises ValueError: for ids that are not distinct available clients."""
        if self.federation is None:
            raise RuntimeError("call reset() before query_losses()")
        ids = np.asarray(clients)
        if ids.ndim != 1 or ids.dtype.kind not in "iu" or len(set(ids.tolist())) != ids.size \
                or not np.all((ids >= 0) & (ids < self.num_clients)) or not self.view.available[ids].all():
            raise ValueError(f"query_losses({clients!r}): expected distinct ids of clients available this round")
        self.tally.loss_queries += int(ids.size)
        return self.federation.query_losses(ids)

    def action_masks(self) -> np.ndarray:
        """Which clients are available in the coming round (sb3-contrib's convention)."""
        if self.federation is None:
            return np.ones(self.num_clients, dtype=bool)
        return self.view.available.copy()

    def render(self) -> None:
        return None

    def close(self) -> None:
        """Stop the worker processes (config ``workers`` > 1); a later reset() starts new ones."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._federations = {}
        super().close()
