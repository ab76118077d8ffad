"""Each bench scenario's compute floor (issue #43): the arithmetic of one env round, and the time its kernels take.

    python bench/bench_floor.py                                            # every scenario, E = 1, 16, 64
    python bench/bench_floor.py --scenarios NoisyLabels Churn --sizes 16 --seconds 3
    python bench/bench_floor.py --scenarios FMNISTControl --profile 3      # and where the env's E = 64 step goes

A round of ``fedsel/Bench-<Name>-v0`` (``fedsel_env/env.py`` → ``Federation.round_steps``, FedAvg, the bench's
configs: ``track_improvement`` off, ``eval_every`` 1, ``local_epochs`` 1) computes, per sub-env:

1. **the loss pass**: F_k(w_t) of the K selected clients, one forward of the global model over their training
   rows (the cache of F_k(w_t) is emptied by every aggregation when ``track_improvement`` is off);
2. **local training**: each selected client runs ``local_epochs`` shuffles of its n_k samples in minibatches of
   B (⌈n_k / B⌉ steps an epoch, the last one short and masked, as ``BatchedTrainer.batch_plan`` lays them out),
   forward, backward and ``p −= η g``, every client from w_t;
3. **aggregation**: FedAvg's n_k-weighted mean of the K local models;
4. **the evaluation**: one forward of w_{t+1} over every client's test rows (accuracy and loss for the
   objective, each client's accuracy for ``acc_worst10`` and the observation);
5. **FAVOR's projections**: the K local models and w_{t+1} through the fixed PCA, (K+1, P) × (P, d).

``round_flops`` counts that arithmetic: 2 FLOPs a multiply-add of the matrix products (biases, ReLU,
softmax and the loss's reductions, a few FLOPs per output, are left out), plus ``p −= η g`` (2 FLOPs a
parameter a step) and FedAvg's weighted sum (2 a parameter a client). Sample counts are the expected ones of
K clients drawn uniformly (what random ``topk`` scores do) from the scenario's federation (seed 0).

The **measured floor** runs exactly those kernels at those shapes with torch, float32, one thread, for E
sub-envs at once and nothing else (no env, no selection logic, no records, no observation): every sub-env's
K clients' local SGD as one stack of ``bmm`` steps, the clients laid out and shuffled as the env's plan (the
same number of steps, the same B-row minibatches, finished clients leaving the batch) and stacked parameters
kept within the caches (``CACHE_BYTES``, the env's own rule); FedAvg and the projections as one ``bmm`` over
the E sub-envs; the loss and evaluation passes one matrix product chain per sub-env (no Python per client).
Each sub-env draws its own K clients (uniform, without replacement) every round. The floor assumes every
selected client responds (Stragglers' late ones and unavailable picks are trained here, not in the env, so its
floor is a little high there), and projects in float32 (the env projects in float64).

Printed per scenario, in one run (the ratios are the figures; the load is printed with each row): FLOPs a
round, the floor's rounds/s at E = 1, 16, 64 (``--sizes``), the env's rounds/s (``bench/bench_scale.py``'s
``single_rate`` and ``batched_rate``: random ``topk`` scores, resets included) single and batched, and
env / floor. The env's figures include its resets (a new federation's profiling round and PCA fit after every
episode), which the round's floor does not; so each measurement also times the steps apart from the resets, and the
last columns give the mean rounds an episode and the steps alone / floor — the like-for-like ratio of a round's
cost (a fresh reset's own floor: ``bench/reset_speed.py --floor``). Each floor is measured just before and just after the env at the same E and the faster kept, so a
ratio compares figures taken minutes apart at most; the env at E is skipped (nan) where E sub-envs' data would
take more than half the available memory (``MEMORY_SHARE``). ``--profile STEPS`` adds ``bench/vector_env.py``'s profile of STEPS vector steps at the largest E.
A benchmark, not a test: figures go to docs/PERFORMANCE.md.
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: the most bytes of stacked parameters (3 copies: weights, gradients, a temporary) one training call holds;
#: past the caches a bigger stack is slower (the env's ``vector_training.CPU_PARAM_BYTES``, issue #27)
CACHE_BYTES = 8 * 2**20
#: the most bytes of gathered minibatch inputs and labels held at once for a block of steps (the env's)
BLOCK_BYTES = 16 * 2**20


@dataclass(frozen=True)
class RoundShape:
    """What one round of a scenario computes, per sub-env.

    :param layers: the model's (in, out) linear layers, in order (a ReLU between each two).
    :param sizes: (N,) every client's training samples; the K selected are drawn from them.
    :param k: clients a round; ``epochs``: local epochs; ``batch``: B (capped at the largest client, as the env).
    :param test_rows: rows of the evaluation pass; ``d``: PCA components.
    """

    layers: Tuple[Tuple[int, int], ...]
    sizes: np.ndarray
    k: int
    epochs: int
    batch: int
    test_rows: int
    d: int

    @property
    def params(self) -> int:
        """P, weights and biases."""
        return sum(i * o + o for i, o in self.layers)


def round_flops(shape: RoundShape, selected_sizes: Sequence[float] = None) -> Dict[str, float]:
    """FLOPs of one round by part (module docstring), for the selected clients' sizes (default: the expected
    sizes of K clients drawn uniformly from ``shape.sizes``).

    Per sample, a forward is 2 Σ_l in_l·out_l; training adds the weight gradients (2 Σ_l in_l·out_l) and the
    gradients of the inputs of every layer but the first (2 Σ_{l>0} in_l·out_l); each step updates the P
    parameters (2 P).
    """
    mac = sum(i * o for i, o in shape.layers)
    below = sum(i * o for i, o in shape.layers[1:])
    if selected_sizes is None:
        n = shape.k * float(np.mean(shape.sizes))
        steps = shape.k * float(np.mean(np.ceil(shape.sizes / shape.batch)))
    else:
        sel = np.asarray(selected_sizes, dtype=np.float64)
        n, steps = float(sel.sum()), float(np.ceil(sel / shape.batch).sum())
    p = shape.params
    return {
        "loss pass": 2.0 * mac * n,
        "training": shape.epochs * (n * 2.0 * (2 * mac + below) + steps * 2.0 * p),
        "aggregation": 2.0 * shape.k * p,
        "evaluation": 2.0 * mac * shape.test_rows,
        "projections": 2.0 * (shape.k + 1) * p * shape.d,
    }


# --------------------------------------------------------------------------------------------- the floor
class Floor:
    """The kernels of E sub-envs' rounds of one scenario, with nothing else (module docstring)."""

    def __init__(self, shape: RoundShape, x_train, y_train, offsets: np.ndarray, x_test, y_test,
                 test_owner, e: int, seed: int = 0) -> None:
        import torch

        self.s, self.e = shape, e
        self.rng = np.random.default_rng(seed)
        self.gen = torch.Generator().manual_seed(seed)
        self.x = x_train.reshape(x_train.shape[0], -1)
        self.y, self.offsets = y_train, np.asarray(offsets, dtype=np.int64)
        self.x_test, self.y_test = x_test.reshape(x_test.shape[0], -1), y_test
        self.test_owner, self.n = test_owner, len(shape.sizes)
        self.classes = shape.layers[-1][1]
        g = self.gen
        # each sub-env's global model (per layer: weight (E, out, in), bias (E, out)) and its PCA map
        self.w = [(0.05 * torch.randn(e, o, i, generator=g), torch.zeros(e, o)) for i, o in shape.layers]
        self.pca_mean = 0.01 * torch.randn(e, 1, shape.params, generator=g)
        self.pca_axes = torch.randn(e, shape.params, shape.d, generator=g) / math.sqrt(shape.params)
        self.per_chunk = max(1, CACHE_BYTES // (3 * 4 * shape.params))

    def _flat(self, layers) -> "torch.Tensor":
        import torch

        return torch.cat([t.reshape(t.shape[0], -1) for w, b in layers for t in (w, b)], dim=1)

    def _forward(self, j: int, x) -> "torch.Tensor":
        """Sub-env j's global model on rows x (n, D): logits (n, C)."""
        import torch

        h = x
        for li, (w, b) in enumerate(self.w):
            if li:
                h = torch.relu(h)
            h = torch.addmm(b[j], h, w[j].T)
        return h

    @staticmethod
    def _loss_and_correct(logits, y):
        top, pred = logits.max(dim=-1)
        lse = (logits - top.unsqueeze(-1)).exp_().sum(dim=-1).log_().add_(top)
        return lse - logits.gather(-1, y.unsqueeze(-1)).squeeze(-1), pred == y

    def round(self) -> None:
        """One round of every sub-env."""
        import torch

        s, e, k = self.s, self.e, self.s.k
        sel = np.argsort(self.rng.random((e, self.n)), axis=1)[:, :k]  # each sub-env's K clients
        sizes = self.s.sizes[sel]                                       # (E, K)
        with torch.no_grad():
            # 1. the loss pass: F_k(w_t) of each sub-env's K clients (one forward over their rows)
            for j in range(e):
                starts, n = self.offsets[sel[j]], sizes[j]
                rows = np.repeat(starts - np.concatenate([[0], np.cumsum(n)[:-1]]), n) + np.arange(n.sum())
                r = torch.from_numpy(rows)
                loss, _ = self._loss_and_correct(self._forward(j, self.x[r]), self.y[r])
                owner = torch.from_numpy(np.repeat(np.arange(k), n))
                torch.zeros(k, dtype=torch.float64).index_add_(0, owner, loss.double())
            # 2. local training of all E × K clients from their sub-env's w_t, in cache-sized stacks
            flat_t = self._flat(self.w)                                             # (E, P)
            local = flat_t.repeat_interleave(k, dim=0)                              # (E·K, P)
            all_sizes, all_starts = sizes.reshape(-1), self.offsets[sel.reshape(-1)]
            order = np.argsort(-all_sizes, kind="stable")  # a chunk of similar sizes pads few steps
            for c0 in range(0, e * k, self.per_chunk):
                ids = order[c0:c0 + self.per_chunk]
                local[torch.from_numpy(ids)] = self._train(local[torch.from_numpy(ids)], all_sizes[ids],
                                                           all_starts[ids])
            # 3. FedAvg: the n_k-weighted mean of each sub-env's K local models
            wts = torch.from_numpy((sizes / sizes.sum(axis=1, keepdims=True)).astype(np.float32))
            new = torch.bmm(wts.unsqueeze(1), local.view(e, k, -1)).squeeze(1)     # (E, P)
            self._unflat(new)
            # 4. the evaluation of w_{t+1}: every test row, each client's accuracy
            for j in range(e):
                loss, right = self._loss_and_correct(self._forward(j, self.x_test), self.y_test)
                float(loss.double().mean()), float(right.double().mean())
                torch.bincount(self.test_owner[right], minlength=self.n)
            # 5. FAVOR's projections of the K local models and w_{t+1}
            both = torch.cat([local.view(e, k, -1), new.unsqueeze(1)], dim=1)      # (E, K+1, P)
            torch.bmm(both - self.pca_mean, self.pca_axes)

    def _unflat(self, flat) -> None:
        i = 0
        for w, b in self.w:
            m = w[0].numel()
            w.copy_(flat[:, i:i + m].view_as(w))
            b.copy_(flat[:, i + m:i + m + b.shape[1]])
            i += m + b.shape[1]

    def _train(self, start, sizes: np.ndarray, starts: np.ndarray):
        """Local SGD of len(sizes) clients (sorted by size, largest first) from ``start`` (M, P): (M, P)."""
        import torch

        s, bsz, m = self.s, self.s.batch, len(sizes)
        per_epoch = -(-sizes // bsz)                                  # ⌈n / B⌉
        steps = s.epochs * per_epoch
        s_max = int(steps.max())
        # the plan (S, M, B): each epoch a shuffle of the client's rows, cut into B-row minibatches
        width_b = int(per_epoch.max()) * bsz
        idx = np.zeros((s_max, m, bsz), dtype=np.int64)
        mask = np.zeros((s_max, m, bsz), dtype=np.float32)
        pos = np.arange(width_b)
        for ep in range(s.epochs):
            keys = self.rng.random((m, width_b))
            keys[pos[None, :] >= sizes[:, None]] = 2.0                # padding sorts last
            perm = np.argsort(keys, axis=1)                           # (M, width_b): a shuffle, then padding
            live = pos[None, :] < per_epoch[:, None] * bsz
            cl, p = np.nonzero(live)
            step = ep * per_epoch[cl] + p // bsz
            real = perm[cl, p] < sizes[cl]
            idx[step, cl, p % bsz] = starts[cl] + np.where(real, perm[cl, p], 0)
            mask[step, cl, p % bsz] = real
        width = (steps[None, :] > np.arange(s_max)[:, None]).sum(axis=1)  # clients still training in each step
        idx_t, mask_t = torch.from_numpy(idx), torch.from_numpy(mask)
        weights = mask_t / mask_t.sum(dim=2, keepdim=True).clamp_min(1.0)  # the masked mean's 1/|batch|
        flat = start.clone()
        ps, i = [], 0
        for i_f, o in s.layers:
            ps.append((flat[:, i:i + i_f * o].view(m, o, i_f), flat[:, i + i_f * o:i + i_f * o + o]))
            i += i_f * o + o
        lr, c = 0.05, self.classes
        block = max(1, BLOCK_BYTES // (m * bsz * (self.x.shape[1] + c) * 4))
        for s0 in range(0, s_max, block):  # a block of steps' minibatches gathered at once
            s1, n0 = min(s_max, s0 + block), int(width[s0])
            xs = self.x[idx_t[s0:s1, :n0]]                                        # (L, n0, B, D)
            # the label part of ∂ mean CE / ∂ logits: −onehot(y) / |batch| (mask 0: nothing)
            ohw = torch.zeros(s1 - s0, n0, bsz, c).scatter_(3, self.y[idx_t[s0:s1, :n0]].unsqueeze(3), 1.0)
            ohw.mul_(weights[s0:s1, :n0].unsqueeze(3))
            for st in range(s0, s1):
                n = int(width[st])
                acts = [xs[st - s0, :n]]
                for li, (w, b) in enumerate(ps):
                    h = torch.baddbmm(b[:n].unsqueeze(1), acts[-1], w[:n].transpose(1, 2))
                    acts.append(torch.relu(h) if li < len(ps) - 1 else h)
                # ∂ mean CE / ∂ logits = w (softmax − onehot)
                g = torch.addcmul(-ohw[st - s0, :n], torch.softmax(acts[-1], dim=2), weights[st, :n].unsqueeze(2))
                grads: List = [None] * (2 * len(ps))
                for li in range(len(ps) - 1, -1, -1):
                    grads[2 * li] = torch.bmm(g.transpose(1, 2), acts[li])
                    grads[2 * li + 1] = g.sum(dim=1)
                    if li:
                        g = torch.bmm(g, ps[li][0][:n]).mul_(acts[li] > 0)
                torch._foreach_add_([t[:n] for wb in ps for t in wb], grads, alpha=-lr)  # p −= η g
        return flat


def scenario_shape(name: str):
    """(RoundShape, federated data of seed 0) of a bench scenario, as the env builds them."""
    import torch
    from bench.bench_scale import scenario_config
    from fedsel_env.config import make_config
    from fedsel_env.sim.data import build_federated_data
    from fedsel_env.sim.models import make_model
    from fedsel_env.spec import SelectionSpec

    cfg = make_config(scenario_config(name, "cpu"))
    data = build_federated_data(cfg, np.random.default_rng([0, 1]))
    model = make_model(cfg["model"], data.input_shape, data.num_classes, cfg["model_params"])
    layers = tuple((m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear))
    sizes = np.asarray(data.num_samples, dtype=np.int64)
    batch = min(int(cfg["batch_size"]), max(int(sizes.max()), 1))
    shape = RoundShape(layers, sizes, int(cfg["clients_per_round"]), int(cfg["local_epochs"]), batch,
                       int(data.x_test.shape[0]), SelectionSpec.pca_width(cfg))
    return shape, data


def floor_rate(shape: RoundShape, data, e: int, seconds: float) -> float:
    """The floor's rounds/s (E × rounds / s) for E sub-envs (after a warm-up round)."""
    import torch

    owner = torch.from_numpy(np.repeat(np.arange(len(shape.sizes)), np.diff(data.test_offsets)))
    fl = Floor(shape, data.x_train, data.y_train, data.train_offsets, data.x_test, data.y_test, owner, e)
    fl.round()
    start, rounds = time.perf_counter(), 0
    while rounds < 3 or time.perf_counter() - start < seconds:
        fl.round()
        rounds += 1
    return e * rounds / (time.perf_counter() - start)


def reset_flops(shape: RoundShape) -> Dict[str, float]:
    """FLOPs of a fresh reset by part: the profiling round (every client's loss pass at w_0 and one local run
    from it: :func:`round_flops` with K = N and every client's own size; FedAvg; the evaluation), and FAVOR's PCA
    over the N + 1 models — the Gram fit (2 (N+1)² P for X_c X_cᵀ, 2 d (N+1) P for the axes; the (N+1)² eigen-
    decomposition left out) and the projection of the N + 1 rows, 2 (N+1) P d."""
    n1, p = len(shape.sizes) + 1, shape.params
    f = round_flops(replace(shape, k=len(shape.sizes)), shape.sizes)
    return {**f, "PCA fit": 2.0 * n1 * n1 * p + 2.0 * shape.d * n1 * p}


def reset_floor(shape: RoundShape, data, repeats: int = 3, seed: int = 0) -> Dict[str, float]:
    """Seconds of a fresh reset's kernels with no env logic (the fastest of ``repeats``), by part.

    ``profiling round``: the floor's round (:class:`Floor`, E = 1) with K = N — every client's loss pass, one
    local epoch of every client from w_0 in cache-sized stacks, FedAvg, the evaluation, the N + 1 projections
    (float32). ``PCA fit``: the cheaper of two exact-enough fits of an (N+1, P) float64 matrix, each alone —
    the Gram products (``server_view.gram_pca``'s arithmetic: X_c X_cᵀ, ``eigh``, Uᵀ X_c) and scikit-learn's
    ``PCA(d).fit`` (what the env's default ``pca_fit: auto`` calls on the CPU; randomized where scikit-learn
    picks it). Building the federation (reading and partitioning the data) is env work, not arithmetic: it is
    in the env's reset and not here.
    """
    import torch
    from sklearn.decomposition import PCA

    n = len(shape.sizes)
    owner = torch.from_numpy(np.repeat(np.arange(n), np.diff(data.test_offsets)))
    fl = Floor(replace(shape, k=n), data.x_train, data.y_train, data.train_offsets, data.x_test, data.y_test,
               owner, 1, seed)
    stacked = torch.randn(n + 1, shape.params, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    d = min(shape.d, n + 1)

    def gram() -> None:
        xc = stacked - stacked.mean(dim=0)
        _, u = torch.linalg.eigh(xc @ xc.T)
        (u[:, -d:].T @ xc)

    def sklearn() -> None:
        PCA(n_components=d, random_state=seed).fit(stacked.numpy())

    best: Dict[str, float] = {}
    for label, run in (("profiling round", fl.round), ("Gram fit", gram), ("scikit-learn fit", sklearn)):
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            run()
            times.append(time.perf_counter() - t)
        best[label] = min(times)
    best["PCA fit"] = min(best["Gram fit"], best["scikit-learn fit"])
    best["floor"] = best["profiling round"] + best["PCA fit"]
    return best


#: the env at E is measured only when E sub-envs' data take less than this share of the available memory (the
#: machine is shared); a row shows nan where it was not
MEMORY_SHARE = 0.5


def available() -> int:
    """Bytes of memory available now (Linux's MemAvailable; 2**62 where it cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return 2**62


def main() -> None:
    from fedsel_env.bench import SCENARIOS

    names = [str(s) for s in SCENARIOS]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenarios", nargs="+", default=names, choices=names)
    p.add_argument("--sizes", nargs="+", type=int, default=[16, 64], help="batched sizes E (E = 1 is always run)")
    p.add_argument("--seconds", type=float, default=5.0, help="time per measurement (at least 3 rounds or steps)")
    p.add_argument("--no-env", action="store_true", help="the floor only (no env measurement)")
    p.add_argument("--variant", nargs="+", default=None, metavar="FIELD=VALUE",
                   help="also measure the env with these config fields (e.g. pca_dtype=float32 pca_fit=gram): a "
                        "second row per scenario, its floor measured again beside it")
    p.add_argument("--profile", type=int, default=0, metavar="STEPS",
                   help="also profile STEPS vector steps of the env at the largest E (bench/vector_env.py)")
    args = p.parse_args()

    import torch

    torch.set_num_threads(1)
    print(f"# {platform.node()}  {os.cpu_count()} CPUs  torch {torch.__version__}  python {platform.python_version()}"
          f"  one torch thread, float32")
    print(f"# load before: {os.getloadavg()}")
    sizes = [1] + [e for e in args.sizes if e != 1]
    cols = [f"floor E={e}" for e in sizes]
    if not args.no_env:
        cols += ["env single"] + [f"env E={e}" for e in sizes[1:]] + ["single / floor E=1"] + \
                [f"env / floor E={e}" for e in sizes[1:]] + ["rounds an episode"] + \
                [f"steps alone / floor E={e}" for e in sizes]
    from bench.bench_scale import batched_rate, scenario_config, single_rate
    print("| scenario | MFLOP a round (loss, train, eval, proj) | " + " | ".join(cols) + " | load |")
    print("|---|---|" + "---:|" * (len(cols) + 1))
    from agents.training.cli import parse_key_values

    try:
        variant = parse_key_values(args.variant or [], "variant")
    except ValueError as e:
        p.error(str(e))
    rows = [(name, label, cfg) for name in args.scenarios
            for label, cfg in [(name, scenario_config(name, "cpu"))]
            + ([(f"{name} ({' '.join(args.variant)})", {**scenario_config(name, "cpu"), **variant})] if variant else [])]
    for name, label, cfg in rows:
        shape, data = scenario_shape(name)
        f = round_flops(shape)
        parts = ", ".join(f"{f[k] / 1e6:.2f}" for k in ("loss pass", "training", "evaluation", "projections"))
        # each floor measured just before and just after the env's measurement at that E, the faster kept: the
        # ratio compares figures taken under the same load (the load of a shared machine moves by the minute)
        floors, env, steps, episode = {}, {}, {}, {}
        per_env = data.x_train.nbytes + data.x_test.nbytes  # each sub-env's own federation's data
        nan = (float("nan"),) * 4
        for e in sizes:
            before = floor_rate(shape, data, e, args.seconds)
            if args.no_env:
                got = nan
            elif e == 1:
                got = single_rate(cfg, args.seconds)
            elif e * per_env < MEMORY_SHARE * available():
                got = batched_rate(cfg, e, args.seconds)
            else:
                got = nan
            env[e], steps[e], episode[e] = got[0], got[2], got[3]
            floors[e] = max(before, floor_rate(shape, data, e, args.seconds)) if env[e] == env[e] else before
        cells = [f"{floors[e]:.1f}" for e in sizes]
        if not args.no_env:
            cells += [f"{env[e]:.1f}" for e in sizes] + [f"{env[e] / floors[e]:.2f}" for e in sizes]
            cells += [f"{np.nanmean([episode[e] for e in sizes]):.1f}"] + [f"{steps[e] / floors[e]:.2f}" for e in sizes]
        print(f"| {label} | {sum(f.values()) / 1e6:.2f} ({parts}) | " + " | ".join(cells) +
              f" | {os.getloadavg()[0]:.1f} |", flush=True)
        if args.profile:
            from fedsel_env.vector import FedSelectVectorEnv
            from bench.vector_env import profile

            print(f"# {name}: the env's vector step at E = {sizes[-1]} under cProfile")
            profile(lambda: FedSelectVectorEnv(sizes[-1], config=cfg), args.profile)
    print(f"# load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
