"""Aggregation cost per round against local-training cost (issue #3, docs/SPEC.md §3.5).

For K = 10, 50, 100 responders on FedMGDA+'s Fashion-MNIST CNN (``fedmgda_cnn``,
21,840 parameters), this times

- the clients' work of one round with the env's batched trainer
  (``fedsel_env.sim.training.BatchedTrainer``): E epochs of local SGD at batch B, with the
  proximal term for FedProx, or one full-batch gradient for q-FedSGD;
- each backend's ``aggregate`` on the updates that training produced (median of
  ``--repeats`` calls), and FedMGDA+'s QP alone with each solver;

and prints the share of the round the aggregation takes. Inputs are random 28×28
images with random labels: the cost does not depend on the pixel values.

Usage::

    OMP_NUM_THREADS=1 python bench/aggregation_cost.py            # K = 10, 50, 100, 1 CPU thread
    python bench/aggregation_cost.py --ks 10 50 --threads 2 --repeats 50
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from typing import Callable, List

import numpy as np
import torch

from fedsel_env.sim.aggregators import ClientUpdates, make_aggregator
from fedsel_env.sim.aggregators.fedmgda_plus import gram64
from fedsel_env.sim.models import init_params, make_model
from fedsel_env.sim.training import BatchedTrainer

BACKENDS = [  # (label, registry name, params, client work)
    ("fedavg", "fedavg", {}, "sgd"),
    ("fedprox", "fedprox", {"mu": 0.01}, "sgd_prox"),
    ("qfedavg", "qfedavg", {"q": 1.0}, "sgd"),
    ("qfedsgd", "qfedsgd", {"q": 1.0}, "gradient"),
    ("fedmgda+ (daqp)", "fedmgda+", {"epsilon": 0.1, "solver": "daqp"}, "sgd"),
    ("fedmgda+ (clarabel)", "fedmgda+", {"epsilon": 0.1, "solver": "clarabel"}, "sgd"),
]


@dataclass
class Args:
    ks: List[int]
    samples: int
    batch_size: int
    epochs: int
    lr: float
    repeats: int
    threads: int
    seed: int


def parse_args() -> Args:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ks", type=int, nargs="+", default=[10, 50, 100], help="numbers of responders K")
    p.add_argument("--samples", type=int, default=600, help="training samples per client (FAVOR's FMNIST: 600)")
    p.add_argument("--batch-size", type=int, default=10, help="local batch B")
    p.add_argument("--epochs", type=int, default=1, help="local epochs E")
    p.add_argument("--lr", type=float, default=0.01, help="local learning rate")
    p.add_argument("--repeats", type=int, default=20, help="aggregate() calls timed per backend (median)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--seed", type=int, default=0)
    return Args(**vars(p.parse_args()))


def timed(fn: Callable[[], object]) -> tuple:
    """(result, seconds) of one call."""
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def median_time(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up (solver set-up, allocator)
    return statistics.median(timed(fn)[1] for _ in range(repeats))


def main() -> None:
    a = parse_args()
    torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(a.seed)
    model = make_model("fedmgda_cnn", (1, 28, 28), 10)
    w0 = None
    print(f"fedmgda_cnn, {a.samples} samples/client, E={a.epochs}, B={a.batch_size}, "
          f"threads={a.threads}, torch {torch.__version__}")
    print(f"{'K':>4} {'backend':<20} {'client work (s)':>16} {'aggregate (ms)':>15} {'share of round':>15}")
    for k in a.ks:
        x = torch.randn(k * a.samples, 1, 28, 28, generator=gen)
        y = torch.randint(0, 10, (k * a.samples,), generator=gen)
        offsets = np.arange(k + 1) * a.samples
        trainer = BatchedTrainer(model, x, y, offsets, batch_size=a.batch_size, lr=a.lr, local_epochs=a.epochs)
        if w0 is None:
            w0 = trainer.layout.flatten(init_params(model, torch.Generator().manual_seed(a.seed)))
        ids = np.arange(k)
        gens = lambda: [np.random.default_rng([a.seed, int(c)]) for c in ids]  # noqa: E731
        trainer.train(w0, ids[:2], gens()[:2])  # warm-up: first-call allocations are not charged to K
        losses_t, t_loss = timed(lambda: trainer.client_losses(w0, ids)[0])
        work = {}
        work["sgd"] = timed(lambda: trainer.train(w0, ids, gens()))
        work["sgd_prox"] = timed(lambda: trainer.train(w0, ids, gens(), prox_mu=0.01))
        work["gradient"] = timed(lambda: trainer.full_gradients(w0, ids))
        base = dict(global_params=w0, num_samples=torch.full((k,), float(a.samples)),
                    losses_before=torch.as_tensor(losses_t, dtype=torch.float32),
                    client_ids=ids, lr=a.lr, round=0)
        for label, name, params, kind in BACKENDS:
            result, t_work = work[kind]
            updates = ClientUpdates(local_params=None if kind == "gradient" else result,
                                    gradients=result if kind == "gradient" else None, **base)
            agg = make_aggregator(name, params)
            t_agg = median_time(lambda: agg.aggregate(updates), a.repeats)
            share = t_agg / (t_agg + t_work + t_loss)
            print(f"{k:>4} {label:<20} {t_work:>16.3f} {1e3 * t_agg:>15.3f} {100 * share:>14.3f}%")
        # FedMGDA+'s QP alone, per solver, on this round's Gram matrix
        g = w0.unsqueeze(0) - work["sgd"][0]
        norms = torch.linalg.vector_norm(g, dim=1, dtype=torch.float64).cpu().numpy()
        gram = gram64(g) / np.outer(norms + 1e-8, norms + 1e-8)
        for solver in ("daqp", "clarabel"):
            agg = make_aggregator("fedmgda+", {"epsilon": 0.1, "solver": solver})
            t_qp = median_time(lambda: agg.solve_weights(gram, np.full(k, 1.0 / k)), a.repeats)
            print(f"{k:>4} {'  QP only, ' + solver:<20} {'':>16} {1e3 * t_qp:>15.3f}")
        print(f"{k:>4} {'  (loss pass F_k)':<20} {t_loss:>16.3f}")


if __name__ == "__main__":
    main()
