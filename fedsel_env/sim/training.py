"""Local training of many clients as one batched computation (docs/SPEC.md §3.4).

Local SGD is written once, for one client (:func:`_client_loss`), and run for
the K selected clients together with ``torch.func.vmap`` over parameters stacked
along a leading client axis. Clients of unequal size are handled by masks: each
client's minibatches are laid out in a (steps, K, B) index plan; a padded sample
has mask 0 and a client with no samples left in a step does not move (its
parameters and momentum are kept by ``torch.where``). The result equals training
each client on its own with the same minibatch order (``tests/test_training.py``).

Every client's minibatch order comes from its own generator, seeded by
(episode seed, round, client id), so a client's local training does not depend on
which other clients were selected — the common random numbers that make two
policies comparable.

A model that is a single ``nn.Linear`` (``logreg``) trains on the CPU by
:func:`~fedsel_env.sim.linear_sgd.train_linear` instead: the same SGD with the gradient written out,
bit for bit the vmapped path's result, and a Synthetic(1, 1) q-FedAvg round 20× faster
(``fedsel_env/sim/linear_sgd.py``, ``bench/linear_fast_path.py``).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from .fused_sgd import forward as fused_forward
from .fused_sgd import fused_net, train_fused
from .captured import CapturedTrainer, capture_default
from .linear_sgd import linear_layer, train_linear
from .stacked_net import stacked_net


class ParamLayout:
    """Names and shapes of a model's parameters, to move between dicts and flat vectors."""

    def __init__(self, model: nn.Module) -> None:
        self.names: List[str] = [n for n, _ in model.named_parameters()]
        self.shapes: List[torch.Size] = [p.shape for _, p in model.named_parameters()]
        self.numels: List[int] = [p.numel() for _, p in model.named_parameters()]
        self.size = int(sum(self.numels))

    def flatten(self, params: Dict[str, torch.Tensor], batched: bool = False) -> torch.Tensor:
        """(P,) from a dict of tensors, or (K, P) from a dict of stacked tensors when ``batched``."""
        if batched:
            k = params[self.names[0]].shape[0]
            return torch.cat([params[n].reshape(k, -1) for n in self.names], dim=1)
        return torch.cat([params[n].reshape(-1) for n in self.names])

    def unflatten(self, flat: torch.Tensor) -> Dict[str, torch.Tensor]:
        """A dict of views of ``flat``: (P,) gives single tensors, (K, P) stacked ones."""
        lead = flat.shape[:-1]
        out, i = {}, 0
        for n, s, m in zip(self.names, self.shapes, self.numels):
            out[n] = flat[..., i:i + m].reshape(*lead, *s)
            i += m
        return out


def all_finite(t: torch.Tensor) -> bool:
    """Whether every entry of ``t`` is finite (``bool(torch.isfinite(t).all())``).

    On the CPU through numpy: torch's took 231 µs for a round's (5, 4,810) float32 local models where numpy's
    took 11 µs, two calls of every env round (issue #43). Elsewhere (a GPU; a dtype numpy lacks), torch's.
    """
    if t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64):
        return bool(np.isfinite(t.detach().numpy()).all())
    return bool(torch.isfinite(t).all())


class BatchedTrainer:
    """Runs local SGD for several clients at once, and the server's evaluation passes.

    :param model: the network (its own parameters are not used; weights travel as flat tensors).
    :param x_train: all clients' training inputs, stored contiguously by client.
    :param y_train: the labels.
    :param train_offsets: (N+1,) client k owns rows ``train_offsets[k]:train_offsets[k+1]``.
    :param batch_size: B.
    :param lr: η.
    :param local_epochs: E.
    :param momentum: SGD momentum (PyTorch's convention, no dampening).
    :param chunk_clients: the most clients trained in one vmapped call (bounds memory at large N; on a GPU
        the federation picks it from the free memory, ``fedsel_env/sim/device.py``).
    :param gradient_chunk: the most clients in one vmapped full-gradient step; ``None``: all at once.
    :param analytic_linear: train a single-``nn.Linear`` model on the CPU with its gradient written out
        (:mod:`fedsel_env.sim.linear_sgd`: the same result bit for bit, ~20× faster a round); False keeps ``vmap``
        for every model (to compare the two). Other models and devices always use ``vmap``.
    :param captured: run each round's steps in fixed shapes, replayed from CUDA graphs on a GPU
        (:mod:`fedsel_env.sim.captured`, issue #33); ``None``: on CUDA (unless ``FEDSEL_CUDA_GRAPHS=0``), not on
        the CPU; ``True`` on the CPU runs the same fixed-shape steps eagerly (the test of the structure).
    :param fused: train a ReLU MLP (``mlp``; ``logreg`` where the closed form above is not taken) with
        :mod:`fedsel_env.sim.fused_sgd`'s explicit batched matmuls (the vmapped result bit for bit on the CPU,
        without functorch's dispatch); False keeps ``vmap``. CNNs always use ``vmap``.

    Everything runs on the device of ``x_train`` (the data, the stacked parameters, the masks); the
    minibatch plans are drawn on the host with numpy, so they are the same on every device.
    """

    def __init__(self, model: nn.Module, x_train: torch.Tensor, y_train: torch.Tensor,
                 train_offsets: np.ndarray, batch_size: int, lr: float, local_epochs: int = 1,
                 momentum: float = 0.0, chunk_clients: int = 128, gradient_chunk: Optional[int] = None,
                 analytic_linear: bool = True, fused: bool = True, captured: Optional[bool] = None) -> None:
        self.model = model
        self.layout = ParamLayout(model)
        self.x, self.y = x_train, y_train
        self.offsets = np.asarray(train_offsets, dtype=np.int64)
        self.sizes = np.diff(self.offsets)
        self.batch_size, self.lr, self.epochs, self.momentum = batch_size, lr, local_epochs, momentum
        self.chunk, self.gradient_chunk = chunk_clients, gradient_chunk
        self.device = x_train.device
        # (weight, bias) names when local SGD can run in closed form (verified bit for bit on the CPU only)
        self.linear = linear_layer(model, x_train) if analytic_linear and self.device.type == "cpu" else None
        if captured is None:
            captured = capture_default(self.device)
        self.captured = (CapturedTrainer(self, capture=self.device.type == "cuda") if captured and self.linear is None
                         else None)
        #: the model's layers when it is a ReLU MLP (evaluation passes use them on every device)
        self.net = fused_net(model, x_train)
        self.fused = self.net if fused and self.linear is None else None
        #: a Sequential CNN's plan for the captured round's stacked step (fedsel_env/sim/stacked_net.py)
        self.stacked = stacked_net(model) if self.fused is None and self.linear is None else None

        model_ref = model

        def client_loss(params: Dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                        mask: torch.Tensor, anchor: Dict[str, torch.Tensor], prox_mu: float) -> torch.Tensor:
            logits = functional_call(model_ref, params, (x,))
            per_sample = F.cross_entropy(logits, y, reduction="none")
            loss = (per_sample * mask).sum() / mask.sum().clamp_min(1.0)
            if prox_mu > 0:
                loss = loss + 0.5 * prox_mu * sum(((params[n] - anchor[n]) ** 2).sum() for n in params)
            return loss

        def client_loss_sum(params: Dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                            mask: torch.Tensor) -> torch.Tensor:
            logits = functional_call(model_ref, params, (x,))
            return (F.cross_entropy(logits, y, reduction="none") * mask).sum()

        self._grad = vmap(grad(client_loss), in_dims=(0, 0, 0, 0, None, None))
        self._grad_sum = vmap(grad(client_loss_sum), in_dims=(0, 0, 0, 0))

    # ------------------------------------------------------------------ plans
    def batch_plan(self, client_ids: Sequence[int], generators: Sequence[np.random.Generator],
                   epochs: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """The minibatch plan: global row indices (S, K, B) and a 0/1 mask (S, K, B).

        Client k's rows are ``epochs`` shuffles of its samples (one permutation per
        epoch, from ``generators[k]``), cut into batches of B; the last batch of an
        epoch may be short (the rest is masked), as a ``DataLoader`` without
        ``drop_last`` would give.
        """
        epochs = self.epochs if epochs is None else epochs
        b = self.batch_size
        k = len(client_ids)
        steps = [epochs * -(-int(self.sizes[c]) // b) for c in client_ids]
        s_max = max(steps) if steps else 0
        idx = np.zeros((s_max, k, b), dtype=np.int64)
        mask = np.zeros((s_max, k, b), dtype=np.float32)
        for j, (c, g) in enumerate(zip(client_ids, generators)):
            n = int(self.sizes[c])
            per_epoch = -(-n // b)
            for e in range(epochs):
                perm = g.permutation(n) + self.offsets[c]
                padded = np.zeros(per_epoch * b, dtype=np.int64)
                padded[:n] = perm
                m = np.zeros(per_epoch * b, dtype=np.float32)
                m[:n] = 1.0
                idx[e * per_epoch:(e + 1) * per_epoch, j] = padded.reshape(per_epoch, b)
                mask[e * per_epoch:(e + 1) * per_epoch, j] = m.reshape(per_epoch, b)
            idx[steps[j]:, j] = self.offsets[c]  # padding rows point at a real sample; their mask is 0
        return torch.from_numpy(idx), torch.from_numpy(mask)

    # --------------------------------------------------------------- training
    def train(self, global_flat: torch.Tensor, client_ids: Sequence[int],
              generators: Sequence[np.random.Generator], prox_mu: float = 0.0,
              epochs: Optional[int] = None) -> torch.Tensor:
        """E epochs of local SGD from ``global_flat`` for each client; returns (K, P) local weights."""
        client_ids = list(client_ids)
        outs = []
        for s in range(0, len(client_ids), self.chunk):
            ids, gens = client_ids[s:s + self.chunk], generators[s:s + self.chunk]
            outs.append(self._train_chunk(global_flat, ids, gens, prox_mu, epochs))
        if len(outs) == 1:
            return outs[0]
        return torch.cat(outs) if outs else global_flat.new_zeros((0, self.layout.size))

    def _train_chunk(self, global_flat: torch.Tensor, ids: List[int], gens: Sequence[np.random.Generator],
                     prox_mu: float, epochs: Optional[int]) -> torch.Tensor:
        k = len(ids)
        idx, mask = self.batch_plan(ids, gens, epochs)
        if self.linear is not None:
            flat = global_flat.unsqueeze(0).repeat(k, 1)
            train_linear(self.layout.unflatten(flat), *self.linear, self.x, self.y, idx.to(self.device),
                         mask.to(self.device), self.layout.unflatten(global_flat), self.lr, self.momentum, prox_mu)
            return flat
        if self.captured is not None:
            out = self.captured.train_chunk(global_flat, idx, mask, prox_mu)
            if out is not None:  # None: capturing failed (warned once); the eager path below
                return out
        if self.fused is not None:
            flat = global_flat.unsqueeze(0).repeat(k, 1)
            train_fused(self.layout.unflatten(flat), self.fused, self.x, self.y, idx.to(self.device),
                        mask.to(self.device), self.layout.unflatten(global_flat), self.lr, self.momentum, prox_mu,
                        active=(mask.sum(dim=2) > 0).numpy())
            return flat
        active_steps = mask.sum(dim=2) > 0  # (S, K): which clients still have samples in each step
        all_active = active_steps.all(dim=1).tolist()  # on the host: no device sync inside the loop
        idx, mask, active_steps = idx.to(self.device), mask.to(self.device), active_steps.to(self.device)
        anchor = self.layout.unflatten(global_flat)
        flat = global_flat.unsqueeze(0).repeat(k, 1)
        params = self.layout.unflatten(flat)  # views into `flat`: updated in place below
        bufs = [torch.zeros_like(params[n]) for n in self.layout.names] if self.momentum > 0 else None
        lr = self.lr
        with torch.no_grad():
            for s in range(idx.shape[0]):
                m = mask[s]
                active = active_steps[s]
                x, y = self.x[idx[s]], self.y[idx[s]]
                with torch.enable_grad():
                    grads = self._grad(params, x, y, m, anchor, prox_mu)
                for i, n in enumerate(self.layout.names):
                    g = grads[n]
                    if bufs is not None:
                        new_buf = bufs[i] * self.momentum + g
                        if not all_active[s]:
                            a = active.view(-1, *([1] * (g.dim() - 1)))
                            new_buf = torch.where(a, new_buf, bufs[i])
                        bufs[i] = new_buf
                        g = new_buf
                    if not all_active[s]:
                        g = g * active.view(-1, *([1] * (g.dim() - 1))).to(g.dtype)
                    params[n].sub_(lr * g)
        return flat

    def full_gradients(self, global_flat: torch.Tensor, client_ids: Sequence[int],
                       rows_per_step: int = 512) -> torch.Tensor:
        """∇F_k(w_t) over each client's whole training set (mean loss), shape (K, P)."""
        client_ids = list(client_ids)
        k = len(client_ids)
        if k == 0:
            return global_flat.new_zeros((0, self.layout.size))
        chunk = self.gradient_chunk or k
        if k > chunk:  # a GPU's memory bounds how many clients one step holds
            return torch.cat([self.full_gradients(global_flat, client_ids[s:s + chunk], rows_per_step)
                              for s in range(0, k, chunk)])
        sizes = [int(self.sizes[c]) for c in client_ids]
        n_max = max(sizes)
        acc = torch.zeros(k, self.layout.size, dtype=global_flat.dtype, device=global_flat.device)
        params = self.layout.unflatten(global_flat.unsqueeze(0).repeat(k, 1))
        for start in range(0, n_max, rows_per_step):
            width = min(rows_per_step, n_max - start)
            idx = np.zeros((k, width), dtype=np.int64)
            mask = np.zeros((k, width), dtype=np.float32)
            for j, c in enumerate(client_ids):
                hi = min(sizes[j], start + width)
                if hi > start:
                    idx[j, :hi - start] = np.arange(start, hi) + self.offsets[c]
                    mask[j, :hi - start] = 1.0
            idx_t = torch.from_numpy(idx).to(self.device)
            g = self._grad_sum(params, self.x[idx_t], self.y[idx_t], torch.from_numpy(mask).to(self.device))
            acc += self.layout.flatten(g, batched=True)
        return acc / torch.tensor(sizes, dtype=acc.dtype, device=acc.device).unsqueeze(1)

    # ------------------------------------------------------------- evaluation
    @torch.no_grad()
    def per_sample_losses(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                          rows_per_pass: Optional[int] = None,
                          rows: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """Cross-entropy and correctness (1/0) of one model on every row of ``x`` (or on rows ``x[rows]``).

        Rows go through in passes of about 2M input values (at least 1,024 rows): few Python-level
        calls for small inputs (Synthetic's 60 features: 35k rows a pass), bounded activations for images.
        Given ``rows`` (an index tensor), each pass gathers its own rows: the values of ``x[rows]``'s passes
        without a copy of every row at once (issue #43: 188 MB for Fashion-MNIST's whole federation).
        """
        if rows_per_pass is None:
            rows_per_pass = self.rows_per_pass(x)
        params = self.layout.unflatten(flat)
        losses, correct = [], []
        count = x.shape[0] if rows is None else rows.shape[0]
        for s in range(0, count, rows_per_pass):
            if rows is None:
                xs, ys = x[s:s + rows_per_pass], y[s:s + rows_per_pass]
            else:  # gathered a pass at a time: the same rows as x[rows] sliced, without copying all of them
                pick = rows[s:s + rows_per_pass]
                xs, ys = x[pick], y[pick]
            # a ReLU MLP's forward with its own ops (the same values, without functional_call's overhead)
            logits = fused_forward(self.net, params, xs) if self.net is not None else \
                functional_call(self.model, params, (xs,))
            loss, right = cross_entropy_and_correct(logits, ys)
            losses.append(loss)
            correct.append(right)
        if not losses:
            return torch.zeros(0, device=x.device), torch.zeros(0, device=x.device)
        return torch.cat(losses), torch.cat(correct)

    @staticmethod
    def rows_per_pass(x: torch.Tensor) -> int:
        """:meth:`per_sample_losses`' rows a pass: about 2M input values (at least 1,024 rows)."""
        return max(1024, 2**21 // max(1, int(x[0].numel()) if x.shape[0] else 1))

    def client_losses(self, flat: torch.Tensor, client_ids: Sequence[int]) -> Tuple[np.ndarray, np.ndarray]:
        """F_k(w) (mean training loss) and sqrt(mean squared loss) of one model on each listed client."""
        client_ids = np.asarray(list(client_ids), dtype=np.int64)
        if client_ids.size == 0:
            return np.zeros(0), np.zeros(0)
        span = self.client_span(client_ids)
        if span is not None:  # consecutive clients (the profiling round's all): their rows are a view
            l, _ = self.per_sample_losses(flat, self.x[span[0]:span[1]], self.y[span[0]:span[1]])
        else:
            l, _ = self.per_sample_losses(flat, self.x, self.y, rows=self.client_rows(client_ids))
        return self.client_loss_summary(l, client_ids)

    def client_rows(self, client_ids: np.ndarray) -> torch.Tensor:
        """The training rows of the listed clients, client after client (on the device)."""
        rows = np.concatenate([np.arange(self.offsets[c], self.offsets[c + 1]) for c in client_ids])
        return torch.from_numpy(rows).to(self.device)

    def client_span(self, client_ids: np.ndarray) -> Optional[Tuple[int, int]]:
        """(first, end) of the listed clients' training rows when they are consecutive clients in order (their
        :meth:`client_rows` are then one range); ``None`` otherwise."""
        ids = np.asarray(client_ids, dtype=np.int64)
        if ids.size == 0 or not np.array_equal(ids, np.arange(ids[0], ids[0] + ids.size)):
            return None
        return int(self.offsets[ids[0]]), int(self.offsets[ids[-1] + 1])

    def client_loss_summary(self, per_sample: torch.Tensor, client_ids: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """F_k and the rms loss of each listed client from the per-sample losses of its :meth:`client_rows`."""
        owner = np.repeat(np.arange(client_ids.size), self.sizes[client_ids])
        # the clients' reported F_k: their per-sample losses come to the host and are summed there in float64
        # (as always on the CPU; on a GPU a weighted bincount would not be deterministic)
        l = per_sample.double().cpu().numpy()
        n = self.sizes[client_ids].astype(np.float64)
        mean = np.bincount(owner, weights=l, minlength=client_ids.size) / n
        rms = np.sqrt(np.bincount(owner, weights=l * l, minlength=client_ids.size) / n)
        return mean, rms


def cross_entropy_and_correct(logits: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-row cross-entropy and correctness (1/0) of logits (..., C) against labels (...).

    Cross-entropy as logsumexp − logit of the label, with the row maximum (and its index, the prediction: the
    first maximum, as argmax gives) from one max(): the same values, ~4x faster than
    F.cross_entropy(reduction="none") and 1.5x faster than logsumexp + argmax on CPU.
    """
    top, pred = logits.max(dim=-1)
    lse = (logits - top.unsqueeze(-1)).exp_().sum(dim=-1).log_().add_(top)
    return lse - logits.gather(-1, y.unsqueeze(-1)).squeeze(-1), (pred == y).to(torch.float32)
