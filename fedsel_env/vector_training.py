"""Local training of many federations' clients in one call (issue #27), for :mod:`fedsel_env.vector`.

Each sub-env's round yields a :class:`~fedsel_env.sim.federation.TrainRequest` (its global model, its
responders, their minibatch generators). :func:`train_requests` answers a list of them:

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
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch

from .sim.federation import TrainRequest
from .sim.fused_sgd import train_fused
from .sim.training import BatchedTrainer

#: the most bytes of gathered client rows one fused call holds (the rest is trained in further calls)
CHUNK_BYTES = 256 * 2**20
#: on the CPU, the most bytes of stacked parameters (with momentum and gradients: 3 copies) one fused call
#: trains: past the caches a bigger batch is slower, not faster (the FMNIST MLP's 50,890 parameters at
#: E = 64: 0.7× one env after another in one call of all clients, issue #27)
CPU_PARAM_BYTES = 8 * 2**20


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


def drive(steps: Dict[int, object]) -> Dict[int, object]:
    """Run generators that yield ``TrainRequest`` objects in lockstep; {key: each one's return value}.

    Each round of the loop advances every generator to its next request, trains all the requests with
    :func:`train_requests`, and sends each its local models back.
    """
    results: Dict[int, object] = {}
    pending: Dict[int, Tuple[object, TrainRequest]] = {}
    answers: Dict[int, torch.Tensor] = {}
    live = dict(steps)
    while live:
        pending.clear()
        for key, gen in live.items():
            try:
                request = gen.send(answers[key]) if key in answers else next(gen)
            except StopIteration as done:
                results[key] = done.value
                continue
            pending[key] = (gen, request)
        live = {k: g for k, (g, _) in pending.items()}
        if pending:
            keys = list(pending)
            trained = train_requests([pending[k][1] for k in keys])
            answers = dict(zip(keys, trained))
    return results


__all__ = ["CHUNK_BYTES", "drive", "train_requests"]
