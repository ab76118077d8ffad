"""Local training and forward passes of many federations in one call (issue #27), for :mod:`fedsel_env.vector`.

Each sub-env's round yields a :class:`~fedsel_env.sim.federation.TrainRequest` (its global model, its
responders, their minibatch generators), and its loss and evaluation passes as
:class:`~fedsel_env.sim.federation.LossRequest` and :class:`~fedsel_env.sim.federation.EvalRequest`.
:func:`drive` advances the sub-envs' generators and answers their requests together (:func:`answer`): the
passes first, so that the training waits until every sub-env has reached its own, then the training.

:func:`train_requests` answers the training requests:

- requests whose models are ReLU MLPs (``mlp``, ``logreg``: :func:`~fedsel_env.sim.fused_sgd.fused_net`)
  with the same layers, learning rate, momentum, batch size, epochs, FedProx μ and device are trained
  **together**: each request's minibatch plan is drawn by its own trainer (the same generators, so the
  same minibatches as alone), the selected clients' rows are gathered into one tensor (unless every
  request reads one federation's data: then the plans index it as they are), the plans are re-indexed
  into it and laid side by side along the client axis, and one
  :func:`~fedsel_env.sim.fused_sgd.train_fused` call trains every client from its own federation's
  global model (its start and its FedProx anchor);
- any other request (a CNN, a worker pool) is run by its own trainer.

A client's result does not depend on the clients beside it in a ``bmm`` batch, and the fused path is the
vmapped graph's (and the closed-form ``logreg`` path's) ATen ops in the same order, so each sub-env's
local models are bit for bit those of the single env (``tests/test_vector_env.py``).

:func:`forward_requests` answers the passes: those of ReLU MLPs over the same number of rows are run as one
batched forward (``baddbmm`` over the stacked models, pass by pass as
:meth:`~fedsel_env.sim.training.BatchedTrainer.per_sample_losses` cuts the rows), then each request's own
reduction. On the CPU ``baddbmm`` computes each model's product with the kernel ``F.linear`` uses (below 400
multiply-adds a product it has a loop of its own: such passes run one by one), so the results are the single
env's bit for bit; the first batched pass of each shape is checked against the single pass of its first
request, and a shape whose results differ (another BLAS, another device) runs one by one from then on.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .sim.federation import LossRequest, TrainRequest
from .sim.fused_sgd import train_fused
from .sim.training import BatchedTrainer, cross_entropy_and_correct

#: the most bytes of gathered client rows one fused call holds (the rest is trained in further calls)
CHUNK_BYTES = 256 * 2**20
#: on the CPU, the most bytes of stacked parameters (with momentum and gradients: 3 copies) one fused call
#: trains: past the caches a bigger batch is slower, not faster (the FMNIST MLP's 50,890 parameters at
#: E = 64: 0.7× one env after another in one call of all clients, issue #27)
CPU_PARAM_BYTES = 8 * 2**20
#: the most bytes of stacked input rows one batched forward pass holds
FORWARD_BYTES = 64 * 2**20
#: batch the passes on the CPU too: there they measured level with one by one (the default preset at E = 64,
#: 370-384 against 364-377 steps/s, load 4.5): each pass's cost is its own gathers and reductions, and the
#: products run the same kernel either way. On a GPU a batch saves each pass's kernel launches and syncs.
PASSES_ON_CPU = False
#: shape of a batched forward pass -> whether it gave the single passes' results bit for bit (checked once)
_EXACT: Dict[tuple, bool] = {}


def _key(request: TrainRequest):
    """Requests with the same key can be trained in one fused call; None: train it alone."""
    t = request.trainer
    if type(t) is not BatchedTrainer or t.net is None or len(request.clients) == 0:
        return None
    return (t.net, t.layout.size, float(t.lr), float(t.momentum), int(t.batch_size),
            int(t.epochs if request.epochs is None else request.epochs), float(request.prox_mu),
            str(t.device), t.x.dtype, tuple(t.x.shape[1:]))


def train_requests(requests: Sequence[TrainRequest]) -> List[torch.Tensor]:
    """The (K_i, P) local models of each request, in order; compatible requests trained together."""
    out: List[torch.Tensor] = [None] * len(requests)  # type: ignore[list-item]
    groups: Dict[tuple, List[int]] = {}
    for i, r in enumerate(requests):
        key = _key(r)
        if key is None:
            out[i] = r.run()
        else:
            groups.setdefault(key, []).append(i)
    for members in groups.values():
        # requests by their plan's length, so that a chunk pads few steps; a chunk holds at most CHUNK_BYTES of
        # gathered rows and of minibatch plan ((steps, clients, B) indices and mask: heavy-tailed client sizes
        # make a long plan, and its padding grows with every client beside the longest)
        steps = {i: _plan_steps(requests[i]) for i in members}
        t0 = requests[members[0]].trainer
        most = CPU_PARAM_BYTES // (3 * 4 * t0.layout.size) if t0.device.type == "cpu" else None
        chunk: List[int] = []
        rows = clients = 0
        for i in sorted(members, key=lambda j: steps[j]):
            r = requests[i]
            ids = np.asarray(r.clients, dtype=np.int64)
            row_bytes = r.trainer.x[0].numel() * r.trainer.x.element_size()
            shared = r.trainer.x is requests[members[0]].trainer.x  # (rows gathered only from other data)
            more_rows = 0 if shared else int(r.trainer.sizes[ids].sum()) * row_bytes
            plan = steps[i] * (clients + ids.size) * int(r.trainer.batch_size) * 12  # int64 index + float32 mask
            if chunk and (rows + more_rows + plan > CHUNK_BYTES or (most is not None and clients + ids.size > most)):
                _train_together([requests[j] for j in chunk], out, chunk)
                chunk, rows, clients = [], 0, 0
            chunk.append(i)
            rows += more_rows
            clients += ids.size
        if chunk:
            _train_together([requests[j] for j in chunk], out, chunk)
    return out


def _plan_steps(request: TrainRequest) -> int:
    """The length of a request's minibatch plan: epochs × ⌈largest client / B⌉."""
    t = request.trainer
    epochs = t.epochs if request.epochs is None else request.epochs
    return int(epochs) * -(-int(t.sizes[np.asarray(request.clients, dtype=np.int64)].max()) // int(t.batch_size))


def _train_together(reqs: List[TrainRequest], out: List[torch.Tensor], slots: List[int]) -> None:
    """Train compatible requests in one fused call; write each one's (K_i, P) models to ``out[slot]``."""
    t0: BatchedTrainer = reqs[0].trainer
    dev = t0.device
    # sub-envs on one federation (or a single request) read one data tensor: the plans index it as they are
    one_data = all(r.trainer.x is t0.x and r.trainer.y is t0.y for r in reqs)
    xs, ys, idxs, masks, counts = [], [], [], [], []
    base = 0
    for r in reqs:
        t: BatchedTrainer = r.trainer
        clients = np.asarray(r.clients, dtype=np.int64)
        idx, mask = t.batch_plan(clients, r.generators, r.epochs)  # the same draws as the trainer's own
        if one_data:
            idxs.append(idx)
            masks.append(mask)
            counts.append(len(clients))
            continue
        sizes, old = t.sizes[clients], t.offsets[clients]
        new = base + np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        rows = np.concatenate([np.arange(o, o + n) for o, n in zip(old, sizes)]) if sizes.sum() else \
            np.zeros(0, dtype=np.int64)
        rows_t = torch.from_numpy(rows).to(dev)
        xs.append(t.x[rows_t])
        ys.append(t.y[rows_t])
        idxs.append(idx - torch.from_numpy(old - new).view(1, -1, 1))  # rows of the gathered tensor
        masks.append(mask)
        counts.append(len(clients))
        base += int(sizes.sum())
    s_max = max(i.shape[0] for i in idxs)
    for j, (i, m) in enumerate(zip(idxs, masks)):
        if i.shape[0] < s_max:  # steps after this request's last: masked (their rows are never used)
            pad = (s_max - i.shape[0],) + tuple(i.shape[1:])
            idxs[j] = torch.cat([i, torch.zeros(pad, dtype=i.dtype)])
            masks[j] = torch.cat([m, torch.zeros(pad, dtype=m.dtype)])
    if one_data:
        x, y, rows = t0.x, t0.y, t0.x.shape[0]
    else:
        x, y, rows = (torch.cat(xs), torch.cat(ys), base) if base else (None, None, 0)
    idx = torch.cat(idxs, dim=1).clamp_(0, max(rows - 1, 0))  # a masked padding row may point anywhere
    mask = torch.cat(masks, dim=1)
    flat = torch.cat([r.global_flat.unsqueeze(0).expand(k, -1) for r, k in zip(reqs, counts)]).clone()
    if rows > 0:
        prox_mu = float(reqs[0].prox_mu)
        anchor = t0.layout.unflatten(flat.clone()) if prox_mu > 0 else {}
        train_fused(t0.layout.unflatten(flat), t0.net, x, y, idx.to(dev), mask.to(dev),
                    anchor, float(t0.lr), float(t0.momentum), prox_mu, active=(mask.sum(dim=2) > 0).numpy())
    for slot, part in zip(slots, torch.split(flat, counts)):
        out[slot] = part


def answer(requests: Sequence[object]) -> List[object]:
    """Each request's answer, in order: training requests by :func:`train_requests`, loss and evaluation passes
    by :func:`forward_requests`."""
    out: List[object] = [None] * len(requests)
    train = [i for i, r in enumerate(requests) if isinstance(r, TrainRequest)]
    passes = [i for i, r in enumerate(requests) if not isinstance(r, TrainRequest)]
    for group, solve in ((train, train_requests), (passes, forward_requests)):
        if group:
            for i, a in zip(group, solve([requests[i] for i in group])):
                out[i] = a
    return out


def forward_requests(requests: Sequence[object]) -> List[object]:
    """The answers of loss and evaluation passes, in order; passes of one shape batched (module docstring)."""
    out: List[object] = [None] * len(requests)
    groups: Dict[tuple, List[tuple]] = {}
    for i, r in enumerate(requests):
        inputs = _forward_inputs(r)
        if inputs is None:
            out[i] = r.run()
        else:
            key, x, y, ids = inputs
            groups.setdefault(key, []).append((i, x, y, ids))
    for key, members in groups.items():
        per = members[0][1].numel() * members[0][1].element_size()
        most = max(1, FORWARD_BYTES // max(per, 1))
        for s in range(0, len(members), most):
            chunk = members[s:s + most]
            reqs = [requests[i] for i, *_ in chunk]
            results = _forward_together(key, reqs, [m[1] for m in chunk], [m[2] for m in chunk]) \
                if len(chunk) > 1 else None
            if results is not None and chunk[0][3] is not None:  # loss passes: to the host in one copy
                host = torch.stack([loss for loss, _ in results]).cpu()
                results = [(host[j], None) for j in range(len(results))]
            for j, ((i, x, y, ids), r) in enumerate(zip(chunk, reqs)):
                loss, correct = results[j] if results is not None else r.trainer.per_sample_losses(r.flat, x, y)
                out[i] = r.trainer.client_loss_summary(loss, ids) if ids is not None else (loss, correct)
    return out


def _forward_inputs(request: object):
    """(shape key, rows, labels, client ids or None) of a pass that may be batched; None: run it alone."""
    t = request.trainer
    if type(t) is not BatchedTrainer or t.net is None or (t.device.type == "cpu" and not PASSES_ON_CPU):
        return None
    ids = None
    if isinstance(request, LossRequest):
        ids = np.asarray(list(request.clients), dtype=np.int64)
        if ids.size == 0:
            return None
        span = t.client_span(ids)  # consecutive clients: a view of their rows, not a copy
        if span is not None:
            x, y = t.x[span[0]:span[1]], t.y[span[0]:span[1]]
        else:
            rows = t.client_rows(ids)
            x, y = t.x[rows], t.y[rows]
    else:
        x, y = request.x, request.y
    if x.shape[0] == 0:
        return None
    return (t.net, t.layout.size, str(x.device), x.dtype, tuple(x.shape), ids is None), x, y, ids


@torch.no_grad()
def _forward_together(key: tuple, reqs: List[object], xs: List[torch.Tensor],
                      ys: List[torch.Tensor]) -> Optional[List[tuple]]:
    """Per-sample losses and correctness of each request's model on its rows, as one batched forward a pass;
    None when the shape runs one by one (a tiny product, or results that differed from the single pass)."""
    t0: BatchedTrainer = reqs[0].trainer
    net, n, rows_per_pass = t0.net, xs[0].shape[0], t0.rows_per_pass(xs[0])
    params = [r.trainer.layout.unflatten(r.flat) for r in reqs]
    layers = [(torch.stack([p[w] for p in params]),
               None if b is None else torch.stack([p[b] for p in params]).unsqueeze(1)) for w, b in net.layers]
    if any(w.shape[1] * w.shape[2] * min(rows_per_pass, n - s) < 400
           for w, _ in layers for s in range(0, n, rows_per_pass)) or _EXACT.get(key) is False:
        return None
    losses, correct = [], []
    for s in range(0, n, rows_per_pass):
        m = min(rows_per_pass, n - s)
        h = torch.stack([x[s:s + m].reshape(m, net.in_features) for x in xs])
        for i, (w, b) in enumerate(layers):
            if i:
                h = torch.relu(h)
            h = torch.bmm(h, w.transpose(1, 2)) if b is None else torch.baddbmm(b, h, w.transpose(1, 2))
        loss, right = cross_entropy_and_correct(h, torch.stack([y[s:s + m] for y in ys]))
        losses.append(loss)
        correct.append(right)
    out = [(torch.cat([l[g] for l in losses]), torch.cat([c[g] for c in correct])) for g in range(len(reqs))]
    if key not in _EXACT:  # the first batch of this shape: checked against the single pass
        single = t0.per_sample_losses(reqs[0].flat, xs[0], ys[0])
        _EXACT[key] = all(torch.equal(a, b) for a, b in zip(single, out[0]))
        if not _EXACT[key]:
            return None
    return out


def drive(steps: Dict[int, object]) -> Dict[int, object]:
    """Run generators that yield requests (training, loss and evaluation passes) together; {key: each one's
    return value}.

    Each turn advances the generators whose last request was answered, then answers the waiting requests
    with :func:`answer`: the loss and evaluation passes while there are any, else the training requests —
    so a training request waits until every generator has reached its own, and one fused call trains them.
    """
    results: Dict[int, object] = {}
    waiting: Dict[int, object] = {}
    advance: Dict[int, object] = {key: _START for key in steps}
    while advance:
        for key, value in advance.items():
            gen = steps[key]
            try:
                waiting[key] = next(gen) if value is _START else gen.send(value)
            except StopIteration as done:
                results[key] = done.value
        advance = {}
        if waiting:
            now = [k for k, r in waiting.items() if not isinstance(r, TrainRequest)] or list(waiting)
            for k, a in zip(now, answer([waiting[k] for k in now])):
                del waiting[k]
                advance[k] = a
    return results


_START = object()  # what drive sends a generator first (it is advanced with next())


__all__ = ["CHUNK_BYTES", "FORWARD_BYTES", "answer", "drive", "forward_requests", "train_requests"]
