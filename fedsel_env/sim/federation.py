"""The federation simulator (docs/SPEC.md §3): rounds from a selection to a new global model. No Gymnasium here.

:class:`Federation` owns the clients' data, the model, the batched trainer and, per
episode, the aggregation backend, the system model and the clients' behaviour (honest,
or an ``adversary`` scenario). Its life cycle is the server's:

- :meth:`Federation.start` — a new training job: a fresh w_0 and FAVOR's profiling round
  (every client trains one epoch from w_0) → a :class:`RoundReport`;
- :meth:`Federation.open_round` — the coming round opens: who is available, with which
  contexts → a :class:`RoundOpening` (what a server sees before it selects);
- :meth:`Federation.play_round` — the selected and available clients respond → they report
  F_k(w_t) (the global model's training loss, measured before local training) → they train
  locally together (or send a full-batch gradient) → the backend aggregates → the new global
  model is evaluated on every client's test split → the responders' losses under w_{t+1}
  give the fraction of improved participants → their exchange times are charged to the
  simulated clock → a :class:`RoundReport`.

A report carries only what a real server receives that round; the env's server view
(``fedsel_env/server_view.py``) turns reports into observations. The clients' behaviour
hooks in through :class:`~fedsel_env.sim.adversary.HonestClients`' two hooks (whose update
arrives; what they send), never through branches here.
"""
from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generator, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from .adversary import Adversary, HonestClients, Upload
from .aggregators import Aggregator, ClientUpdates
from .aggregators.base import checked_aggregate
from .device import gradient_chunk, training_chunk, use_deterministic
from .models import init_params
from .parallel import ParallelTrainer, WorkerPool
from .system import SystemModel
from .training import BatchedTrainer, all_finite


@dataclass(frozen=True)
class EpisodeSeeds:
    """The seeds of one episode (a training job).

    :param federation: the partition, the clients' hidden speeds, the attackers (fixed per federation).
    :param system: the per-round system and adversary draws.
    :param training: every client's minibatch order.
    :param init: w_0.
    :param profiling: the profiling round's minibatch orders.
    """

    federation: int
    system: int
    training: int
    init: int
    profiling: int

    @staticmethod
    def draw(config: Mapping[str, Any], rng: np.random.Generator) -> Tuple["EpisodeSeeds", int]:
        """A reset's seeds and its PCA's seed, drawn from ``rng`` (the reset's generator): ``federation_seed`` fixes
        the federation's; with ``init: federation``, w_0, the profiling round and the PCA map belong to the
        federation (FAVOR)."""
        s = [int(x) for x in rng.integers(0, 2**31 - 1, size=5)]
        fed = config["federation_seed"] if config["federation_seed"] is not None else s[0]
        init, pca, profiling = (s[3], s[4], s[2]) if config["init"] == "episode" else \
            [int(x) for x in np.random.default_rng([fed, 8]).integers(0, 2**31 - 1, size=3)]
        return EpisodeSeeds(fed, s[1], s[2], init, profiling), pca


@dataclass
class TrainRequest:
    """Local training a round needs: ``trainer.train(global_flat, clients, generators, prox_mu, epochs)``.

    :meth:`Federation.start_steps` and :meth:`Federation.round_steps` yield one and are sent the (K, P)
    local models back: :func:`run_inline` answers with the federation's own trainer, and the vector env
    (``fedsel_env/vector.py``) trains the requests of many federations in one call.
    """

    trainer: object
    global_flat: torch.Tensor
    clients: np.ndarray
    generators: list
    prox_mu: float = 0.0
    epochs: Optional[int] = None

    def run(self) -> torch.Tensor:
        return self.trainer.train(self.global_flat, self.clients, self.generators, prox_mu=self.prox_mu,
                                  epochs=self.epochs)


@dataclass
class LossRequest:
    """A loss pass a round needs: ``trainer.client_losses(flat, clients)``, F_k and the rms loss of one model on
    each listed client's training data. Yielded like :class:`TrainRequest` (the vector env batches the passes
    of many federations: ``fedsel_env/vector_training.py``)."""

    trainer: object
    flat: torch.Tensor
    clients: Sequence[int]

    def run(self) -> tuple:
        return self.trainer.client_losses(self.flat, self.clients)


@dataclass
class EvalRequest:
    """An evaluation pass: ``trainer.per_sample_losses(flat, x, y)``, one model's per-sample cross-entropy and
    correctness on the rows ``x``, ``y`` (the federation's test data). Yielded like :class:`TrainRequest`."""

    trainer: object
    flat: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor

    def run(self) -> tuple:
        return self.trainer.per_sample_losses(self.flat, self.x, self.y)


def inline(steps_method: Callable) -> Callable:
    """The method that runs generator method ``steps_method`` to its end with :func:`run_inline`."""
    @functools.wraps(steps_method)
    def method(*args, **kwargs):
        return run_inline(steps_method(*args, **kwargs))
    return method


def run_inline(steps: Generator):
    """Drive a generator of requests (:class:`TrainRequest`, :class:`LossRequest`, :class:`EvalRequest`), each
    answered by its own trainer; its return value."""
    try:
        request = next(steps)
        while True:
            request = steps.send(request.run())
    except StopIteration as done:
        return done.value


@dataclass
class Evaluation:
    """The global model on every client's test split."""

    accuracy: float
    loss: float
    client_accuracies: np.ndarray = field(repr=False)


@dataclass
class RoundOpening:
    """What the server sees before it selects: who is available, and their contexts c_{t,n} (N, 3)."""

    available: np.ndarray
    context: np.ndarray


@dataclass
class RoundReport:
    """What the server receives in one round (arrays over the responders unless noted).

    ``round_index`` 0 is FAVOR's profiling round (every client responds, nothing is aggregated).
    """

    round_index: int
    selected: np.ndarray                       # the clients the agent named
    responders: np.ndarray                     # their updates arrived (available, not dropped, on time)
    local_models: Optional[torch.Tensor]       # (K', P) models sent (None: gradients were sent)
    losses: np.ndarray                         # reported F_k(w_t) (forged by attackers)
    loss_rms: np.ndarray                       # reported √(mean ℓ²)
    num_samples: np.ndarray                    # reported n_k
    exchange_times: np.ndarray                 # τ of the responders
    round_time: float                          # seconds the round lasted (s of that for a step of s < 1)
    clock: float                               # simulated seconds since the first round
    global_params: torch.Tensor = field(repr=False)  # the global model after the round (P,)
    diverged: bool = False
    improved_fraction: float = float("nan")    # share of responders whose true training loss did not increase
    evaluation: Optional[Evaluation] = None    # None: not evaluated this round (``eval_every``)
    dropped: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    late: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


class Federation:
    """The simulated federation of one partition.

    :param cfg: the validated env config (local training, aggregation, system, adversary fields).
    :param data: the federated data (``fedsel_env.sim.data.FederatedData``).
    :param model: the network; weights travel as flat tensors.
    :param pool: worker processes to share the training and evaluation with (``fedsel_env/sim/parallel.py``);
        ``None``: all of it in this process.
    :param server_step: s in (0, 1]: the new global model is w_t + s (aggregate − w_t); 1 = the aggregate; the
        clock is charged s of the round's length (``SystemModel.finish_round``).
    :param aggregator: the aggregation backend of the config (``aggregator``, ``aggregator_params``), built once
        by the env; its ``reset`` starts each episode.
    :param device: the config's ``device``, resolved once by the env (``fedsel_env/sim/device.py``).

    On that device live the data (uploaded here, once per
    federation), the global and local models, the training, aggregation, evaluation and loss passes;
    what a server receives comes to the host: the clients' losses, the evaluation's numbers.
    """

    def __init__(self, cfg: Dict, data, model: torch.nn.Module, pool: Optional[WorkerPool] = None,
                 server_step: float = 1.0, *, aggregator: Aggregator, device: torch.device) -> None:
        if not 0.0 < server_step <= 1.0:
            raise ValueError(f"server_step = {server_step!r}: expected a number in (0, 1]")
        self.cfg, self.data, self.model, self.aggregator = cfg, data, model, aggregator
        self.server_step = float(server_step)
        self.n = len(data.train_offsets) - 1
        # A batch larger than the largest client is that client's whole data: capping B changes no
        # result and keeps the (steps, K, B) minibatch plan from allocating B rows per client.
        batch_size = min(int(cfg["batch_size"]), max(int(np.diff(data.train_offsets).max()), 1))
        self.device = dev = device
        use_deterministic(dev)
        # on the CPU .to() returns the same tensors (the worker pool shares them); on a GPU, one upload
        self.x_test, self.y_test = data.x_test.to(dev), data.y_test.to(dev)
        kwargs = dict(model=model, x_train=data.x_train.to(dev), y_train=data.y_train.to(dev),
                      train_offsets=data.train_offsets, batch_size=batch_size, lr=cfg["lr"],
                      local_epochs=cfg["local_epochs"], momentum=cfg["momentum"],
                      chunk_clients=training_chunk(dev, model, data.input_shape, batch_size),
                      gradient_chunk=gradient_chunk(dev, model, data.input_shape))
        self.trainer = BatchedTrainer(**kwargs)
        if pool is not None and pool.size > 0:
            self.trainer = ParallelTrainer(self.trainer, kwargs, self.x_test, self.y_test, pool)
        self.layout = self.trainer.layout
        self.num_samples = np.asarray(data.num_samples, dtype=np.int64)
        self.test_owner = torch.from_numpy(np.repeat(np.arange(self.n), np.diff(data.test_offsets))).to(dev)
        self.test_counts = np.diff(data.test_offsets).astype(np.float64)
        self.global_params: torch.Tensor = torch.zeros(self.layout.size, device=dev)
        self.round = 0
        self._loss_cache: Dict[int, tuple] = {}  # client -> (F_k, rms) under the current global model

    # ------------------------------------------------------------ life cycle
    def start(self, seeds: EpisodeSeeds) -> RoundReport:
        """A new training job (:meth:`start_steps` with the local training done here)."""
        return run_inline(self.start_steps(seeds))

    def start_steps(self, seeds: EpisodeSeeds) -> Generator[TrainRequest, torch.Tensor, RoundReport]:
        """A new training job: the episode's parts, a fresh w_0 and FAVOR's profiling round.

        Every client trains one epoch from w_0 and sends its model (attackers lie here too); the report's
        ``evaluation`` is w_0's and its ``round_time`` the profiling round's length (not on the clock).
        """
        cfg, n = self.cfg, self.n
        self.train_seed = int(seeds.training)
        self.system = SystemModel(cfg["system"], n, 4 * self.layout.size, np.random.default_rng([seeds.federation, 2]),
                                  draws=np.random.default_rng(int(seeds.system)))
        self.adversary: HonestClients = Adversary(cfg["adversary"], n, seeds.federation, seeds.system,
                                                  self.layout.size)
        # drawn on the CPU from the seed (the same w_0 on every device), then moved
        w0 = self.layout.flatten(init_params(self.model, torch.Generator().manual_seed(int(seeds.init))))
        w0 = w0.to(self.device)
        self.aggregator.reset(w0)
        self.global_params, self.round, self._loss_cache = w0.clone(), 0, {}
        self.system.draw_round()  # the profiling round's contexts
        clients = np.arange(n)
        profiling = [np.random.default_rng([int(seeds.profiling), 0, int(c)]) for c in clients]
        local = yield TrainRequest(self.trainer, w0, clients, profiling, epochs=1,
                                   prox_mu=self.aggregator.local_options().get("prox_mu", 0.0))
        losses, rms = yield from self.global_losses_steps(clients)
        sent = self.adversary.messages(clients, w0, Upload(losses, rms, local_models=local))
        tau = self.system.exchange_times(clients)
        self.system.took_part_last[:] = True  # everyone took part in the profiling round
        return RoundReport(0, clients, clients, sent.local_models, sent.losses, sent.loss_rms,
                           self.num_samples.copy(), tau, float(tau.max()), 0.0, w0.clone(),
                           evaluation=(yield from self.evaluate_steps(w0)))

    def open_round(self) -> RoundOpening:
        """Open the coming round: draw every client's availability, context and exchange-time noise."""
        self.system.draw_round()
        return RoundOpening(self.system.available.copy(), self.system.context.copy())

    def play_round(self, selected: np.ndarray, evaluate: bool = True) -> RoundReport:
        """Play the open round with the clients in ``selected`` (unavailable ones do not respond)."""
        return run_inline(self.round_steps(selected, evaluate))

    def round_steps(self, selected: np.ndarray, evaluate: bool = True) -> Generator[TrainRequest, torch.Tensor,
                                                                                     RoundReport]:
        """:meth:`play_round` as a generator: it yields the round's local training (if any) as a
        :class:`TrainRequest` and is sent the local models back, and its loss and evaluation passes as
        :class:`LossRequest` and :class:`EvalRequest` (sent their results)."""
        round_index, self.round = self.round, self.round + 1
        candidates = np.asarray([c for c in selected if self.system.available[c]], dtype=np.int64)
        arrived = self.adversary.arrivals(candidates, self.system)
        responders = arrived.responders
        w_t = self.global_params
        diverged, improved = False, float("nan")
        sent = Upload(np.zeros(0), np.zeros(0))
        if responders.size:
            losses, rms = yield from self.global_losses_steps(responders)
            opts = self.aggregator.local_options()
            if self.aggregator.client_update == "full_gradient":
                honest = Upload(losses, rms, gradients=self.trainer.full_gradients(w_t, responders))
            else:
                local = yield TrainRequest(self.trainer, w_t, responders,
                                           self.generators(round_index + 1, responders),
                                           prox_mu=float(opts.get("prox_mu", 0.0)))
                honest = Upload(losses, rms, local_models=local)
            sent = self.adversary.messages(responders, w_t, honest)
            w_next = checked_aggregate(self.aggregator, ClientUpdates(
                global_params=w_t, local_params=sent.local_models, gradients=sent.gradients,
                num_samples=torch.as_tensor(self.num_samples[responders], dtype=torch.float32, device=self.device),
                losses_before=torch.as_tensor(sent.losses, dtype=torch.float32, device=self.device),
                client_ids=responders,
                lr=float(self.trainer.lr), round=round_index))
            if self.server_step != 1.0:
                w_next = w_t + self.server_step * (w_next - w_t)
            diverged, improved = yield from self._apply_steps(w_next, responders, losses)
        round_time = self.system.finish_round(responders, round_time=arrived.round_time,
                                              took_part=arrived.took_part, share=self.server_step)
        report = RoundReport(round_index + 1, np.asarray(selected, dtype=np.int64), responders,
                             sent.local_models, np.asarray(sent.losses), np.asarray(sent.loss_rms),
                             self.num_samples[responders], arrived.exchange_times, round_time, self.system.clock,
                             self.global_params, diverged, improved, dropped=arrived.dropped, late=arrived.late)
        if evaluate and not diverged:
            report.evaluation = yield from self.evaluate_steps(self.global_params)
            if not np.isfinite(report.evaluation.loss) or report.evaluation.loss > self.cfg["divergence_loss"]:
                report.diverged = True
        return report

    def _apply_steps(self, w_next: torch.Tensor, responders: np.ndarray, losses: np.ndarray):
        """Adopt w_{t+1} unless it diverged; (diverged, share of responders whose true loss did not rise).
        A generator: it yields the responders' loss pass under w_{t+1} as a :class:`LossRequest`."""
        diverged = not all_finite(w_next)
        improved = 0.0 if diverged else float("nan")
        after_cache = {}
        if not diverged and self.cfg["track_improvement"]:
            after, after_rms = yield LossRequest(self.trainer, w_next, responders)
            improved = float(np.mean(after <= losses + 1e-12))
            diverged = not np.all(np.isfinite(after))
            after_cache = {int(c): (a, r) for c, a, r in zip(responders, after, after_rms)}
        if not diverged:
            self.global_params = w_next
            self._loss_cache = after_cache  # F_k(w_{t+1}) of this round's responders, reused next round
        return diverged, improved

    def query_losses(self, clients: np.ndarray) -> np.ndarray:
        """F_k(w_t) as the listed clients report it when the server asks (attackers lie here too)."""
        clients = np.asarray(clients, dtype=np.int64)
        losses, rms = self.global_losses(clients)
        return self.adversary.messages(clients, self.global_params, Upload(losses, rms)).losses

    # ------------------------------------------------------------ snapshot
    #: what a round changes; everything else (data, model, trainer, sample counts) is fixed by the federation
    ROUND_STATE = ("global_params", "round", "_loss_cache", "train_seed", "aggregator", "system", "adversary")

    def snapshot(self) -> Dict:
        """A copy of everything :meth:`open_round`, :meth:`play_round` and :meth:`query_losses` change:
        the global model, the round counter, the loss cache, the aggregator's server state, the system
        model (clock, who took part, the open round's availability, contexts and noise, its generator),
        the clients' behaviour (its generator) and torch's global generator. Local training draws
        from generators seeded per (episode, round, client), so it holds no state.

        ``restore(snapshot())`` after any rounds puts the federation back bit for bit (the planning
        oracle ``agents/lookahead.py`` plays candidate rounds this way; ``tests/test_bench.py``).
        """
        state = copy.deepcopy({k: getattr(self, k) for k in self.ROUND_STATE if hasattr(self, k)})
        state["torch_rng"] = torch.get_rng_state()
        return state

    def restore(self, state: Dict) -> None:
        """Put back a :meth:`snapshot` (which stays usable: it is copied again). The aggregator, system
        model and clients' behaviour are restored in place, so whoever holds them (the env's tally holds
        the adversary) still sees the federation's own objects."""
        state = dict(state)
        torch.set_rng_state(state.pop("torch_rng"))
        state = copy.deepcopy(state)
        for k, v in state.items():
            cur = getattr(self, k, None)
            if k in ("aggregator", "system", "adversary") and cur is not None and type(cur) is type(v):
                vars(cur).clear()
                vars(cur).update(vars(v))
            else:
                setattr(self, k, v)

    # ---------------------------------------------------------------- helpers
    def generators(self, round_index: int, clients: np.ndarray) -> list:
        """One generator per client for this round: seeded by (train seed, round, client)."""
        return [np.random.default_rng([self.train_seed, round_index, int(c)]) for c in clients]

    def evaluate(self, flat: torch.Tensor) -> Evaluation:
        """Global accuracy and loss over all clients' test data, and each client's test accuracy."""
        return run_inline(self.evaluate_steps(flat))

    def evaluate_steps(self, flat: torch.Tensor):
        """:meth:`evaluate` as a generator: it yields the pass over the test data as an :class:`EvalRequest`."""
        loss, correct = yield EvalRequest(self.trainer, flat, self.x_test, self.y_test)
        # each client's count of correct answers (exact; a weighted bincount is not deterministic on a GPU)
        per_client = torch.bincount(self.test_owner[correct > 0], minlength=self.n).double().cpu().numpy()
        per_client = per_client / np.maximum(self.test_counts, 1.0)
        return Evaluation(accuracy=float(correct.double().mean()), loss=float(loss.double().mean()),
                          client_accuracies=per_client)

    def global_losses(self, clients: np.ndarray) -> tuple:
        """F_k(w_t) and the rms loss of the current global model on each listed client's training data.

        Values already measured under the same global model (the last round's responders' after
        aggregation) are reused instead of a second forward pass.
        """
        return run_inline(self.global_losses_steps(clients))

    def global_losses_steps(self, clients: np.ndarray):
        """:meth:`global_losses` as a generator: it yields the pass the cache lacks as a :class:`LossRequest`."""
        need = [int(c) for c in clients if int(c) not in self._loss_cache]
        if need:
            mean, rms = yield LossRequest(self.trainer, self.global_params, need)
            self._loss_cache.update({c: (m, r) for c, m, r in zip(need, mean, rms)})
        pairs = [self._loss_cache[int(c)] for c in clients]
        return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
