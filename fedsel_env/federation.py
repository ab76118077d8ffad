"""The federation simulator (SPEC §3): one communication round from a selection to a new global model.

It owns the clients' data, the model, the batched trainer, the aggregation backend,
the system model and the fixed PCA of the profiling round. The env
(`fedsel_env/env.py`) turns its results into observations, rewards and ``info``.

A round: draw who is available → the selected and available clients respond →
they report F_k(w_t) (the global model's training loss, measured before local
training) → they train locally together (or send a full-batch gradient) → the
backend aggregates → the new global model is evaluated on every client's test
split → the responders' losses under w_{t+1} give the fraction of improved
participants → their exchange times are charged to the simulated clock.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

import numpy as np
import torch

from .adversary import Adversary
from .observation import WeightPCA
from .aggregators import Aggregator, ClientUpdates
from .system import SystemModel
from .parallel import ParallelTrainer, WorkerPool
from .training import BatchedTrainer


@dataclass
class RoundResult:
    """What one round produced (arrays over the N clients unless noted)."""

    selected: np.ndarray            # indices the action named
    responders: np.ndarray          # the selected clients whose update arrived (available, not dropped, on time)
    losses_before: np.ndarray       # F_k(w_t) the responders reported (K',) (forged by attackers)
    loss_rms_before: np.ndarray     # sqrt(mean squared loss) the responders reported (K',)
    exchange_times: np.ndarray      # τ of the responders (K',)
    round_time: float
    improved_fraction: float        # share of responders whose (true) training loss did not increase
    diverged: bool
    evaluated: bool                 # whether the global model was evaluated this round
    accuracy: float = float("nan")
    loss: float = float("nan")
    client_accuracies: Optional[np.ndarray] = None
    dropped: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # available but dropped out
    late: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))     # missed the deadline


@dataclass
class Evaluation:
    accuracy: float
    loss: float
    client_accuracies: np.ndarray = field(repr=False)


class Federation:
    """The simulated federation: data, model, trainer, backend, system model and PCA.

    :param data: the federated data (``fedsel_env.data.FederatedData``).
    :param model: the network; weights travel as flat tensors.
    :param aggregator: the aggregation backend.
    :param system: the system model.
    :param cfg: the env config (local training fields).
    :param train_seed: root of every client's minibatch-order generator.
    :param adversary: attackers and unreliable clients (``fedsel_env.adversary``); ``None``: everyone honest.
    :param pool: worker processes to share the training and evaluation with (``fedsel_env.parallel``);
        ``None``: all of it in this process.
    :param server_step: s in (0, 1]: the new global model is w_t + s (aggregate − w_t); 1 = the aggregate.
    """

    def __init__(self, data, model: torch.nn.Module, aggregator: Aggregator, system: SystemModel,
                 cfg: Dict, train_seed: int, adversary: Optional[Adversary] = None,
                 pool: Optional[WorkerPool] = None, server_step: float = 1.0) -> None:
        if not 0.0 < server_step <= 1.0:
            raise ValueError(f"server_step = {server_step!r}: expected a number in (0, 1]")
        self.server_step = float(server_step)
        self.data = data
        self.adversary = adversary
        self.n = len(data.train_offsets) - 1
        self.aggregator = aggregator
        self.system = system
        # A batch larger than the largest client is that client's whole data: capping B changes no
        # result and keeps the (steps, K, B) minibatch plan from allocating B rows per client.
        batch_size = min(int(cfg["batch_size"]), max(int(np.diff(data.train_offsets).max()), 1))
        kwargs = dict(model=model, x_train=data.x_train, y_train=data.y_train, train_offsets=data.train_offsets,
                      batch_size=batch_size, lr=cfg["lr"], local_epochs=cfg["local_epochs"],
                      momentum=cfg["momentum"])
        self.trainer = BatchedTrainer(**kwargs)
        if pool is not None and pool.size > 0:
            self.trainer = ParallelTrainer(self.trainer, kwargs, data.x_test, data.y_test, pool)
        self.layout = self.trainer.layout
        self.num_samples = np.asarray(data.num_samples, dtype=np.int64)
        self.train_seed = int(train_seed)
        self.divergence_loss = float(cfg["divergence_loss"])
        self.track_improvement = bool(cfg["track_improvement"])
        self._loss_cache: Dict[int, tuple] = {}  # client -> (F_k, rms) under the current global model
        self.test_owner = torch.from_numpy(np.repeat(np.arange(self.n), np.diff(data.test_offsets)))
        self.test_counts = np.diff(data.test_offsets).astype(np.float64)
        self.global_params: torch.Tensor = torch.zeros(self.layout.size)
        self.profiling_diverged = 0  # clients whose profiling-round model was not finite
        self.pca: Optional[WeightPCA] = None

    # ---------------------------------------------------------------- helpers
    def generators(self, round_index: int, clients: np.ndarray) -> list:
        """One generator per client for this round: seeded by (train seed, round, client)."""
        return [np.random.default_rng([self.train_seed, round_index, int(c)]) for c in clients]

    def project(self, flat: torch.Tensor) -> np.ndarray:
        """PCA coordinates of flat weights, (P,) → (d,) or (K, P) → (K, d)."""
        return self.pca.project(flat)

    @torch.no_grad()
    def evaluate(self, flat: torch.Tensor) -> Evaluation:
        """Global accuracy and loss over all clients' test data, and each client's test accuracy."""
        loss, correct = self.trainer.per_sample_losses(flat, self.data.x_test, self.data.y_test)
        per_client = torch.bincount(self.test_owner, weights=correct.double(), minlength=self.n).numpy()
        per_client = per_client / np.maximum(self.test_counts, 1.0)
        return Evaluation(accuracy=float(correct.double().mean()), loss=float(loss.double().mean()),
                          client_accuracies=per_client)

    def global_losses(self, clients: np.ndarray) -> tuple:
        """F_k(w_t) and the rms loss of the current global model on each listed client's training data.

        Values already measured under the same global model (the profiling round's, or the last
        round's responders' after aggregation) are reused instead of a second forward pass.
        """
        need = [int(c) for c in clients if int(c) not in self._loss_cache]
        if need:
            mean, rms = self.trainer.client_losses(self.global_params, need)
            self._loss_cache.update({c: (m, r) for c, m, r in zip(need, mean, rms)})
        pairs = [self._loss_cache[int(c)] for c in clients]
        return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])

    # ------------------------------------------------------------ profiling
    def profile(self, w0: torch.Tensor, pca_components: int, pca_seed: int):
        """FAVOR's profiling round: every client trains one epoch from w_0; fit the PCA on the N+1 weights.

        :return: (client PCA rows (N, d), global PCA row (d,), losses F_k(w_0), rms losses, profiling time).
        """
        self.global_params = w0.clone()
        clients = np.arange(self.n)
        local = self.trainer.train(w0, clients, self.generators(0, clients), epochs=1,
                                   prox_mu=self.aggregator.local_options().get("prox_mu", 0.0))
        if self.adversary is not None:  # attackers lie in the profiling round too
            local = self.adversary.forge_models(clients, w0, local)
        stacked = torch.cat([w0.unsqueeze(0), local]).to(torch.float64).numpy()
        # A local model that blew up (an exploding learning rate) says nothing about the weight space: the
        # map is fitted with w_0 in its place, and the episode's first round will report the divergence.
        with np.errstate(over="ignore"):
            broken = ~np.isfinite(np.linalg.norm(stacked, axis=1))
        self.profiling_diverged = int(broken.sum())
        stacked[broken] = stacked[0]
        self.pca = WeightPCA(stacked, pca_components, pca_seed)
        z = self.project(torch.from_numpy(stacked))
        self._loss_cache = {}
        losses, rms = self.global_losses(clients)
        if self.adversary is not None:
            losses, rms = self.adversary.report_losses(clients, losses, rms)
        profiling_time = float(self.system.exchange_times(clients).max())
        return z[1:], z[0], losses, rms, profiling_time

    # ------------------------------------------------------------------ round
    def run_round(self, selected: np.ndarray, round_index: int, evaluate: bool) -> tuple:
        """Play one round with the clients in ``selected``.

        :return: (RoundResult, PCA rows of the responders' local models (K', d) or None).
        """
        avail = self.system.available
        responders = np.asarray([c for c in selected if avail[c]], dtype=np.int64)
        adv = self.adversary
        dropped = late = np.zeros(0, dtype=np.int64)
        round_time: Optional[float] = None  # None: the slowest responder's exchange time
        took_part = responders
        if adv is not None:  # drop-outs, straggler delays and the deadline decide whose update arrives
            fate = adv.draw_round()
            dropped, took_part = responders[fate.dropped[responders]], responders[~fate.dropped[responders]]
            tau_all = self.system.exchange_times(took_part) + fate.delay[took_part]
            on_time = tau_all <= adv.deadline if adv.deadline is not None else np.ones(took_part.size, bool)
            responders, late = took_part[on_time], took_part[~on_time]
            round_time = adv.deadline if late.size else (float(tau_all.max()) if tau_all.size else 0.0)
            tau = tau_all[on_time]
        else:
            tau = self.system.exchange_times(responders)
        w_t = self.global_params
        diverged = False
        local_rows = None
        reported = rms = np.zeros(0)
        if responders.size:
            losses, rms = self.global_losses(responders)
            reported = losses
            if adv is not None:
                reported, rms = adv.report_losses(responders, losses, rms)
            n_k = torch.as_tensor(self.num_samples[responders], dtype=torch.float32)
            opts = self.aggregator.local_options()
            if self.aggregator.client_update == "full_gradient":
                grads = self.trainer.full_gradients(w_t, responders)
                local = None
                if adv is not None:
                    grads = adv.forge_gradients(responders, grads)
            else:
                grads = None
                local = self.trainer.train(w_t, responders, self.generators(round_index + 1, responders),
                                           prox_mu=float(opts.get("prox_mu", 0.0)))
                if adv is not None:
                    local = adv.forge_models(responders, w_t, local)
            updates = ClientUpdates(global_params=w_t, local_params=local, gradients=grads, num_samples=n_k,
                                    losses_before=torch.as_tensor(reported, dtype=torch.float32),
                                    client_ids=responders, lr=float(self.trainer.lr), round=round_index)
            w_next = self.aggregator.aggregate(updates)
            if self.server_step != 1.0:
                w_next = w_t + self.server_step * (w_next - w_t)
            diverged = not bool(torch.isfinite(w_next).all())
            if local is not None and bool(torch.isfinite(local).all()):
                local_rows = np.nan_to_num(self.project(local), nan=0.0, posinf=0.0, neginf=0.0)
            improved = 0.0 if diverged else float("nan")
            after_cache = {}
            if not diverged and self.track_improvement:
                after, after_rms = self.trainer.client_losses(w_next, responders)
                improved = float(np.mean(after <= losses + 1e-12))
                diverged = not np.all(np.isfinite(after))
                after_cache = {int(c): (a, r) for c, a, r in zip(responders, after, after_rms)}
            if not diverged:
                self.global_params = w_next
                # F_k(w_{t+1}) of this round's responders: their losses_before if selected next round
                self._loss_cache = after_cache
        else:
            improved = float("nan")
        round_time = self.system.finish_round(responders, round_time=round_time, took_part=took_part)
        result = RoundResult(selected=np.asarray(selected, dtype=np.int64), responders=responders,
                             losses_before=np.asarray(reported), loss_rms_before=np.asarray(rms),
                             exchange_times=tau, round_time=round_time, improved_fraction=improved,
                             diverged=diverged, evaluated=False, dropped=dropped, late=late)
        if evaluate and not diverged:
            ev = self.evaluate(self.global_params)
            if not np.isfinite(ev.loss) or ev.loss > self.divergence_loss:
                result.diverged = True
            result.evaluated = True
            result.accuracy, result.loss, result.client_accuracies = ev.accuracy, ev.loss, ev.client_accuracies
        return result, local_rows
