"""Local SGD of a single-``nn.Linear`` model (softmax regression) with its gradient written out.

For a model that is one ``nn.Linear`` (``logreg``: ``Flatten`` then ``Linear``), the per-step cost of
:class:`~fedsel_env.sim.training.BatchedTrainer`'s ``vmap(grad(functional_call))`` is autograd and vmap
overhead, not arithmetic: Synthetic(1, 1)'s model is 60 × 10 weights and a bias, and a device of 4,449
samples takes 445 minibatch steps a round. :func:`train_linear` computes the same SGD with the gradient
in closed form, batched over the K clients with ``torch.bmm``, from the *same ATen operations in the same
order* that the vmapped autograd graph runs (``make_fx`` of the trainer's ``vmap(grad(client_loss))``
shows them):

- forward: ``logits = b.view(K, 1, C) + bmm(x, Wᵀ)``, ``logp = _log_softmax(logits, 2)``;
- cross-entropy's masked mean, backward: ``w = (1 / max(Σ mask, 1)) · mask``,
  ``g_logp = scatter(0, y, −1) · w``, ``g_logits = _log_softmax_backward_data(g_logp, logp)``;
- ``∇W = bmm(g_logitsᵀ, x)``, ``∇b = Σ_batch g_logits``; FedProx's term adds
  ``f32(μ/2) · (2 (p − anchor))`` as autograd does;
- momentum and the update ``p −= η · g`` as the trainer writes them.

So the result is the autograd path's, **bit for bit on the CPU** (``tests/test_linear_sgd.py`` checks it
over sizes, momentum, FedProx and the golden trajectories; ``bench/linear_fast_path.py`` measures the
speed). The trainer therefore takes this path by itself for such models on the CPU; every other model,
and every other device, keeps ``vmap`` (:func:`linear_layer` says which models qualify).

Two things beyond dropping autograd make it fast:

- *finished clients leave the batch*: a client's active steps are a prefix of the plan (its
  ``ceil(n_k / B) · E`` steps, then padding), so with the clients ordered by their step count the ones
  still training in step s are the first n(s), and the step runs on views ``[:n(s)]`` of the stacked
  parameters — no masking, no ``torch.where``, no work for clients that are done (a finished client's
  parameters and momentum stay as they are, which is what the masked update leaves them; only weights
  that are already non-finite differ: kept as they are here, turned NaN by the mask's ``0 · inf`` there,
  non-finite and so a divergence either way);
- the minibatches' inputs and the label-dependent part of the gradient are gathered for blocks of
  steps at once instead of step by step.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import nn

#: bytes of gathered inputs and label gradients held at once for a block of steps
BLOCK_BYTES = 16 * 2**20


def label_gradient(mask: torch.Tensor, labels: torch.Tensor, classes: int, dtype: torch.dtype) -> torch.Tensor:
    """The gradient of the masked-mean cross-entropy at the log-probabilities, as autograd builds it: a one-hot
    scatter of −1 at each sample's label, times mask / max(Σ mask, 1) over the minibatch (dim 2).
    Shared by this module and :mod:`fused_sgd`, whose results must equal autograd's bit for bit."""
    denom = mask.sum(dim=2).clamp_min(1.0)
    weights = (torch.ones_like(denom) / denom).unsqueeze(2).expand(mask.shape) * mask
    g = torch.zeros(*mask.shape, classes, dtype=dtype, device=mask.device).scatter_(3, labels.unsqueeze(3), -1.0)
    return g * weights.unsqueeze(3)


def linear_layer(model: nn.Module, x_train: torch.Tensor) -> Optional[Tuple[str, Optional[str]]]:
    """The (weight, bias) parameter names when ``model`` is a single ``nn.Linear`` on flattened inputs, else None.

    Qualifies: an ``nn.Linear`` itself (on inputs of shape (n, features)), or an ``nn.Sequential`` of one
    ``nn.Linear`` after at most one default ``nn.Flatten`` — matched by exact type, since a subclass may
    change ``forward``. Inputs and weights must be float32 (the bit-for-bit claim was checked there).
    The bias may be absent (``bias=None`` in the answer).
    """
    if x_train.dtype != torch.float32 or x_train.dim() < 2:
        return None
    if type(model) is nn.Linear:
        if x_train.dim() != 2:
            return None
        linear, prefix = model, ""
    elif type(model) is nn.Sequential:
        mods = list(model.named_children())
        if not 1 <= len(mods) <= 2 or type(mods[-1][1]) is not nn.Linear:
            return None
        if len(mods) == 2:
            flat = mods[0][1]
            if type(flat) is not nn.Flatten or (flat.start_dim, flat.end_dim) != (1, -1):
                return None
        elif x_train.dim() != 2:
            return None
        name, linear = mods[-1]
        prefix = f"{name}."
    else:
        return None
    if linear.weight.dtype != torch.float32 or linear.in_features != int(np.prod(x_train.shape[1:])):
        return None
    return prefix + "weight", (prefix + "bias" if linear.bias is not None else None)


def train_linear(params: Dict[str, torch.Tensor], weight: str, bias: Optional[str], x_train: torch.Tensor,
                 y_train: torch.Tensor, idx: torch.Tensor, mask: torch.Tensor, anchor: Dict[str, torch.Tensor],
                 lr: float, momentum: float, prox_mu: float, drop_finished: bool = True) -> None:
    """Local SGD of K stacked single-``Linear`` models over a minibatch plan, in place.

    :param params: the stacked parameters ((K, C, D) weight, (K, C) bias), views of the trainer's (K, P)
        tensor: updated in place.
    :param weight: the weight's name in ``params`` (and ``anchor``); ``bias`` the bias's, or None.
    :param x_train: every client's inputs (rows are flattened to D features); ``y_train`` the labels.
    :param idx: the plan's global row indices (S, K, B), on ``x_train``'s device; ``mask`` its 0/1 mask.
    :param anchor: the global model (FedProx's anchor), unbatched.
    :param drop_finished: run each step on the clients still training only (the default); False keeps
        every client in every step and masks the finished ones' updates as the vmapped trainer does
        (there only to measure what dropping them gains: ``bench/linear_fast_path.py``).
    """
    s_max, k, b = idx.shape
    if s_max == 0 or k == 0:
        return
    active = (mask.sum(dim=2) > 0).cpu().numpy()  # (S, K)
    steps = active.sum(axis=0)
    if not np.array_equal(active, np.arange(s_max)[:, None] < steps[None, :]):
        raise AssertionError("the minibatch plan's active steps are not a prefix of each client's steps")
    order = np.argsort(-steps, kind="stable")  # clients by their number of steps, longest first
    # clients in each step's batch: those still training (a prefix of `order`), or all of them
    width = (steps[order][None, :] > np.arange(s_max)[:, None]).sum(axis=1) if drop_finished else np.full(s_max, k)
    width = width.tolist()
    perm = torch.from_numpy(order).to(idx.device)
    w_all = params[weight]
    c, d = w_all.shape[1], w_all.shape[2]
    x_rows = x_train.reshape(x_train.shape[0], d)
    dev, dtype = x_rows.device, x_rows.dtype
    # the stacked parameters in step-count order (one gathered copy, scattered back at the end), and their
    # momentum buffers; `ps` / `bufs` are [weight, bias] or [weight]
    ps = [w_all[perm]] + ([params[bias][perm]] if bias is not None else [])
    bufs = [torch.zeros_like(q) for q in ps] if momentum > 0 else []
    anchors = [anchor[weight]] + ([anchor[bias]] if bias is not None else [])
    idx, mask = idx[:, perm], mask[:, perm]
    half_mu = torch.tensor(0.5 * prox_mu, dtype=dtype, device=dev)  # autograd's f32(0.5 · μ)
    per_step = k * b * (d + c) * x_rows.element_size()
    block = max(1, BLOCK_BYTES // max(per_step, 1))
    n_cur = -1
    with torch.no_grad():
        for s0 in range(0, s_max, block):
            s1 = min(s_max, s0 + block)
            n0 = width[s0]
            ii, mm = idx[s0:s1, :n0], mask[s0:s1, :n0]
            xb = x_rows[ii]  # (L, n0, B, D): the block's minibatches
            g_logp = label_gradient(mm, y_train[ii], c, dtype)
            act = active[s0:s1][:, order[:n0]] if not drop_finished else None
            for s in range(s0, s1):
                n = width[s]
                if n != n_cur:  # views of the clients still training
                    n_cur = n
                    p_n = [q[:n] for q in ps]
                    buf_n = [q[:n] for q in bufs]
                    w_t = p_n[0].transpose(1, 2)
                    b_v = p_n[1].view(n, 1, c) if bias is not None else None
                x = xb[s - s0, :n]
                logits = torch.bmm(x, w_t)
                if b_v is not None:
                    logits = b_v + logits
                logp = torch._log_softmax(logits, 2, False)
                g_logits = torch._log_softmax_backward_data(g_logp[s - s0, :n], logp, 2, dtype)
                grads = [torch.bmm(g_logits.transpose(1, 2), x)]
                if b_v is not None:
                    grads.append(g_logits.sum(dim=1))
                if prox_mu > 0:
                    grads = [half_mu * ((q - a) * 2.0) + g for q, a, g in zip(p_n, anchors, grads)]
                keep = None
                if act is not None and not act[s - s0].all():
                    keep = torch.from_numpy(act[s - s0]).to(dev)
                if buf_n:
                    if keep is None:
                        torch._foreach_mul_(buf_n, momentum)
                        torch._foreach_add_(buf_n, grads)  # buf·m + g, in place
                    else:
                        for i, (buf, g) in enumerate(zip(buf_n, grads)):
                            buf.copy_(torch.where(keep.view(-1, *([1] * (g.dim() - 1))), buf * momentum + g, buf))
                    grads = list(buf_n)
                if keep is not None:
                    grads = [g * keep.view(-1, *([1] * (g.dim() - 1))).to(g.dtype) for g in grads]
                torch._foreach_sub_(p_n, torch._foreach_mul(grads, lr))  # p −= η · g
        w_all[perm] = ps[0]
        if bias is not None:
            params[bias][perm] = ps[1]
