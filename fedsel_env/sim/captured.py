"""A round's local training replayed from CUDA graphs (issue #33; docs/PERFORMANCE.md, "GPU").

On a GPU the eager path of :class:`~fedsel_env.sim.training.BatchedTrainer` launches every kernel of
every vmapped step from Python: a Fashion-MNIST FAVOR round (10 clients × 5 epochs × 60 minibatches =
300 steps) spent 1.86 s in dispatch on an H100 for a few milliseconds of arithmetic. Here the same
steps run from ``torch.cuda.CUDAGraph``\\ s:

* **Fixed-shape plans.** The (S, K, B) minibatch plan is drawn on the host exactly as today
  (:meth:`BatchedTrainer.batch_plan`, the same per-client generators) and uploaded once per round into
  static device buffers of capacity ≥ S, with its mask and the (S, K) "client still active" flags.
* **A step that reads its position from the device.** Each step takes plan row ``counter`` with
  ``index_select`` and adds 1 to ``counter`` (a device tensor), so one captured graph of T steps can be
  replayed at any point of the plan. A round of S steps is S // 64 replays of a 64-step graph, then
  replays of an 8-step and a 1-step graph (at most 14 replays for S ≤ 512, no padded steps); each graph
  is captured per shape key (K, B, μ of FedProx) the first time a round needs it (a digits round, S = 8:
  the 8-step graph alone), and S itself is not part of the key.
* **The update in one form.** Every step uses the masked update the eager path uses for a step in which
  some client has no samples left (``torch.where`` on the momentum, the gradient times 0/1); with every
  client active it gives the eager path's numbers bit for bit (a product with 1.0 and a ``where`` that
  keeps every new value are exact), so the captured round is the eager round.

A ReLU MLP (``mlp``; ``logreg`` on a GPU) steps through :mod:`fedsel_env.sim.fused_sgd`'s hand-written
batched forward/backward (``_sgd_step``: one implementation on both devices, the vector env's too), fed
the step's minibatch and its label gradient exactly as :func:`~fedsel_env.sim.fused_sgd.train_fused`
builds them, with the finished-client mask ``keep`` always given (its fixed-shape form). On CUDA a
``nn.Sequential`` CNN steps through :mod:`fedsel_env.sim.stacked_net` (the K clients' convolutions as batched
matrix products over strided-view columns, one flat gradient, the update on the flat buffer: FAVOR's round
0.195 s against 0.361 s through ``vmap`` on an H200; ``FEDSEL_CNN_STEP=vmap`` keeps ``vmap``); every other
model, and any model on the CPU, goes through the same ``torch.func`` ``vmap(grad)`` as the eager path
(:attr:`BatchedTrainer._grad`). With ``capture=False`` (the CPU) the same fixed-shape steps run eagerly:
``tests/test_captured.py`` checks on the CPU that they equal today's path bit for bit, and on a GPU that
the replayed round equals the eager round to float tolerance. Should capturing fail (an operation torch
cannot capture), the trainer warns once and keeps the eager path.
"""
from __future__ import annotations

import gc
import os
import warnings
import weakref
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

import torch

from .stacked_net import flat_gradient

#: steps per captured graph, largest first; a round of S steps replays S // 64 of the first, ...
BLOCKS = (64, 8, 1)
#: shape keys kept per trainer (each holds its graphs' memory); the least recently used goes first
MAX_KEYS = 8
#: ``FEDSEL_CUDA_GRAPHS=0`` in the environment keeps the eager path on a GPU (to compare the two)
ENV_SWITCH = "FEDSEL_CUDA_GRAPHS"
#: ``FEDSEL_CNN_STEP=vmap`` keeps a CNN's captured step on ``vmap(grad)`` on a GPU (to compare the two)
CNN_SWITCH = "FEDSEL_CNN_STEP"


def capture_default(device: torch.device) -> bool:
    """Whether a trainer on ``device`` replays its rounds from CUDA graphs: on CUDA unless switched off."""
    return device.type == "cuda" and os.environ.get(ENV_SWITCH, "1") != "0"


def stacked_step(device: torch.device) -> bool:
    """Whether a captured round steps a ``nn.Sequential`` CNN through :mod:`~fedsel_env.sim.stacked_net` on
    ``device``: on CUDA unless ``FEDSEL_CNN_STEP=vmap``; ``FEDSEL_CNN_STEP=stacked`` takes it on the CPU too."""
    choice = os.environ.get(CNN_SWITCH, "")
    if choice not in ("", "stacked", "vmap"):
        raise ValueError(f"{CNN_SWITCH}={choice!r} is not a choice: use 'stacked' or 'vmap' (or leave it unset: "
                         f"stacked on CUDA, vmap on the CPU)")
    return choice == "stacked" or (choice == "" and device.type == "cuda")


def replay_counts(steps: int, blocks: Tuple[int, ...] = BLOCKS) -> List[Tuple[int, int]]:
    """(block size, replays) for a round of ``steps`` steps: the largest blocks first, every step once."""
    out, left = [], int(steps)
    for t in blocks:
        n, left = divmod(left, t)
        if n:
            out.append((t, n))
    assert left == 0, "the block sizes must end with 1"
    return out


class _State:
    """The static buffers (and graphs) of one shape key: K clients, batch B, capacity ``cap`` ≥ S steps."""

    def __init__(self, trainer: Any, k: int, b: int, cap: int, global_flat: torch.Tensor) -> None:
        dev, p = trainer.device, trainer.layout.size
        self.k, self.b, self.cap = k, b, cap
        self.idx = torch.zeros((cap, k, b), dtype=torch.int64, device=dev)
        self.mask = torch.zeros((cap, k, b), dtype=torch.float32, device=dev)
        self.active = torch.zeros((cap, k), dtype=torch.bool, device=dev)
        self.counter = torch.zeros(1, dtype=torch.int64, device=dev)
        self.global_flat = torch.zeros(p, dtype=global_flat.dtype, device=dev)
        self.flat = torch.zeros((k, p), dtype=global_flat.dtype, device=dev)
        self.params = trainer.layout.unflatten(self.flat)  # views into flat: updated in place
        self.anchor = trainer.layout.unflatten(self.global_flat)
        # the momentum: one (K, P) buffer (the stacked step updates it whole), the per-parameter views of it for
        # the other steps
        self.flat_buf = torch.zeros_like(self.flat) if trainer.momentum > 0 else None
        self.bufs = (list(trainer.layout.unflatten(self.flat_buf).values()) if self.flat_buf is not None else None)
        net = getattr(trainer, "fused", None)  # a ReLU MLP's layers (fused_sgd), else None: vmap(grad)
        if net is not None:
            names = net.names()
            pos = {n: i for i, n in enumerate(trainer.layout.names)}
            self.f_ps = [self.params[n] for n in names]
            self.f_bufs = [self.bufs[pos[n]] for n in names] if self.bufs is not None else []
            self.f_anchors = [self.anchor[n] for n in names]
            self.f_biases = [bn is not None for _, bn in net.layers]
            self.f_classes = self.f_ps[len(self.f_ps) - (2 if self.f_biases[-1] else 1)].shape[1]
            self.x_rows = trainer.x.reshape(trainer.x.shape[0], net.in_features)
        # a Sequential CNN's step through stacked_net (on CUDA by default: ``stacked_step``), else vmap(grad)
        self.stacked = trainer.stacked if net is None and stacked_step(dev) else None
        self.half_mu: Optional[torch.Tensor] = None  # FedProx's f32(μ/2) on the device, set per key
        self.graphs: Dict[int, torch.cuda.CUDAGraph] = {}

    def start(self, global_flat: torch.Tensor, idx: torch.Tensor, mask: torch.Tensor,
              active: torch.Tensor) -> None:
        """A round's inputs into the static buffers (one upload of the plan), the clients at w_t."""
        s = idx.shape[0]
        self.idx[:s].copy_(idx)
        self.mask[:s].copy_(mask)
        self.active[:s].copy_(active)
        self.global_flat.copy_(global_flat)
        self.flat.copy_(self.global_flat.expand_as(self.flat))
        if self.flat_buf is not None:
            self.flat_buf.zero_()
        self.counter.zero_()


class CapturedTrainer:
    """A round's local training in fixed-shape steps, replayed from CUDA graphs when ``capture``.

    :param trainer: the :class:`~fedsel_env.sim.training.BatchedTrainer` (its data, layout, ``_grad``, lr, momentum).
    :param capture: replay from CUDA graphs (CUDA only); False runs the same steps eagerly (any device).
    """

    def __init__(self, trainer: Any, capture: bool) -> None:
        if capture and trainer.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device; this trainer's data is on {trainer.device}")
        # a proxy, not a reference: trainer -> CapturedTrainer -> trainer would be a cycle, and a trainer freed by
        # the cyclic collector frees its graphs and their memory whenever the collector runs — during another
        # trainer's capture too, which invalidates that capture (seen on an H100: a new federation at reset)
        self.trainer = weakref.proxy(trainer)
        self.capture = capture
        self.failed: Optional[str] = None  # why capturing failed (then the eager path is used)
        self._states: "OrderedDict[tuple, _State]" = OrderedDict()
        self._pool = None

    # ------------------------------------------------------------------ one step
    def _step(self, st: _State, prox_mu: float) -> None:
        """Plan row ``counter``: one vmapped SGD step of the K clients, every buffer updated in place."""
        tr = self.trainer
        row = st.counter
        idx = st.idx.index_select(0, row).reshape(-1)  # (K·B,)
        m = st.mask.index_select(0, row).reshape(st.k, st.b)
        active = st.active.index_select(0, row).reshape(st.k)
        net = getattr(tr, "fused", None)
        if net is not None:  # fused_sgd's step, its inputs built as train_fused builds them
            from .fused_sgd import _sgd_step

            x = st.x_rows.index_select(0, idx).reshape(st.k, st.b, net.in_features)
            y = tr.y.index_select(0, idx).reshape(st.k, st.b)
            denom = m.sum(dim=1).clamp_min(1.0)
            weights = (torch.ones_like(denom) / denom).unsqueeze(1).expand(m.shape) * m
            g_logp = torch.zeros(st.k, st.b, st.f_classes, dtype=x.dtype, device=x.device).scatter_(
                2, y.unsqueeze(2), -1.0)
            g_logp = g_logp * weights.unsqueeze(2)
            _sgd_step(st.f_ps, st.f_bufs, st.f_anchors if st.half_mu is not None else None, st.f_biases, x,
                      g_logp, tr.lr, tr.momentum, st.half_mu, active)
            st.counter.add_(1)
            return
        x = tr.x.index_select(0, idx).reshape(st.k, st.b, *tr.x.shape[1:])
        y = tr.y.index_select(0, idx).reshape(st.k, st.b)
        if st.stacked is not None:  # stacked_net's step: the flat gradient, the update on the flat buffer
            g = flat_gradient(st.stacked, tr.layout.unflatten, st.flat, x, y, m, st.global_flat, prox_mu)
            a = active.view(-1, 1)
            if st.flat_buf is not None:
                new_buf = torch.where(a, st.flat_buf * tr.momentum + g, st.flat_buf)
                st.flat_buf.copy_(new_buf)
                g = new_buf
            g = g * a.to(g.dtype)
            st.flat.sub_(tr.lr * g)
            st.counter.add_(1)
            return
        with torch.enable_grad():
            grads = tr._grad(st.params, x, y, m, st.anchor, prox_mu)
        for i, n in enumerate(tr.layout.names):
            g = grads[n]
            a = active.view(-1, *([1] * (g.dim() - 1)))
            if st.bufs is not None:
                new_buf = torch.where(a, st.bufs[i] * tr.momentum + g, st.bufs[i])
                st.bufs[i].copy_(new_buf)
                g = new_buf
            g = g * a.to(g.dtype)
            st.params[n].sub_(tr.lr * g)
        st.counter.add_(1)

    def _capture(self, st: _State, prox_mu: float, blocks: List[int]) -> None:
        """Graphs of ``blocks`` steps for ``st``, each captured the first time a round needs it (after one eager
        warm-up step on a side stream, the state's first time). Run before the round's inputs are loaded.

        Python's cyclic garbage collector is off meanwhile: an object it would free (another federation's
        trainer and graphs, in any reference cycle) may release CUDA memory or destroy a graph, which a
        capture in progress does not permit (the capture fails: "operation not permitted when stream is
        capturing"; seen on an H100). What it would have collected is collected after the capture.
        """
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            dev = self.trainer.device
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            if not st.graphs:
                side = torch.cuda.Stream(device=dev)
                side.wait_stream(torch.cuda.current_stream(dev))
                with torch.cuda.stream(side), torch.no_grad():
                    st.counter.zero_()
                    self._step(st, prox_mu)  # warm-up: cuBLAS/cuDNN handles, autograd's and vmap's first-call work
                torch.cuda.current_stream(dev).wait_stream(side)
            for t in blocks:
                graph = torch.cuda.CUDAGraph()
                # torch.cuda.graph synchronizes, runs gc.collect() (before the capture begins) and empties the cache
                with torch.cuda.graph(graph, pool=self._pool), torch.no_grad():
                    for _ in range(t):
                        self._step(st, prox_mu)
                st.graphs[t] = graph
        finally:
            if was_enabled:
                gc.enable()

    def _state(self, k: int, b: int, steps: int, prox_mu: float, global_flat: torch.Tensor) -> _State:
        key = (k, b, float(prox_mu), global_flat.dtype)
        st = self._states.get(key)
        if st is not None and st.cap >= steps:
            self._states.move_to_end(key)
            return st
        cap = max(steps, 2 * st.cap if st is not None else 0, 1)
        self._states.pop(key, None)
        st = _State(self.trainer, k, b, cap, global_flat)
        if prox_mu > 0:
            st.half_mu = torch.tensor(0.5 * prox_mu, dtype=global_flat.dtype, device=self.trainer.device)
        self._states[key] = st
        while len(self._states) > MAX_KEYS:
            self._states.popitem(last=False)
        return st

    # ------------------------------------------------------------------ a round
    def train_chunk(self, global_flat: torch.Tensor, idx: torch.Tensor, mask: torch.Tensor,
                    prox_mu: float) -> Optional[torch.Tensor]:
        """(K, P) local weights after the plan's S steps from ``global_flat``; ``None`` where capturing failed
        (the caller then runs its eager path).

        :param idx: (S, K, B) global row indices (host or device), as :meth:`BatchedTrainer.batch_plan` draws them.
        :param mask: (S, K, B) 0/1.
        """
        if self.failed is not None:
            return None
        steps, k, b = idx.shape
        active = mask.sum(dim=2) > 0
        plan = replay_counts(steps)
        try:
            st = self._state(k, b, steps, prox_mu, global_flat)
            missing = [t for t, _ in plan if t not in st.graphs]
            if self.capture and missing:
                self._capture(st, prox_mu, missing)
        except RuntimeError as e:  # an operation CUDA graphs cannot hold: warn once, keep the eager path
            self.failed = f"{type(e).__name__}: {e}"
            self._states.clear()
            warnings.warn(f"fedsel: capturing the local round in a CUDA graph failed ({self.failed}); the eager "
                          f"path is used (set {ENV_SWITCH}=0 to skip the attempt)", RuntimeWarning, stacklevel=3)
            return None
        with torch.no_grad():
            st.start(global_flat, idx, mask, active)
            if self.capture:
                for t, n in plan:
                    for _ in range(n):
                        st.graphs[t].replay()
            else:
                for _ in range(steps):
                    self._step(st, prox_mu)
            return st.flat.clone()
