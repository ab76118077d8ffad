"""The Plackett–Luce set log-probability's cost at the bench's shapes (issue #41's PPO update; issue #43).

PPO evaluates log P(S) of every minibatch row (``agents.plackett_luce.set_log_prob``) with its gradient. Its
integrand is a product over the set's K members only; before 2026-11-29 it was evaluated over all N clients with
the non-members' factors masked to 1, B·G·N work instead of B·G·K, and PPO's update took 2/3 of a Large training
run. This prints, for a minibatch of 128 rows at each shape, the forward + backward time of ``set_log_prob`` and
of that dense form (``set_log_prob(..., members_only=False)``, the same arithmetic over every client), their ratio
measured in the same run, and the largest difference between the two values.

    .venv/bin/python bench/pl_log_prob.py
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import torch as th

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.plackett_luce import PlackettLuceTopK, set_log_prob  # noqa: E402

#: (scenario, N, K): the 40-client digits scenarios, the 100-client Fashion-MNIST ones, Large
SHAPES = (("FreeRiders", 40, 5), ("Stragglers", 40, 8), ("FMNISTControl", 100, 10), ("Large", 1000, 20))


def dense_log_prob(logits: th.Tensor, chosen: th.Tensor, mask: th.Tensor) -> th.Tensor:
    """The same quadrature with the integrand over all N clients (non-members' factors 1): the form before."""
    return set_log_prob(logits, chosen, mask, members_only=False)


def timed(fn, logits, chosen, mask, repeats: int) -> tuple:
    best = math.inf
    for _ in range(repeats):
        logits.grad = None
        t0 = time.perf_counter()
        out = fn(logits, chosen, mask)
        out.sum().backward()
        best = min(best, time.perf_counter() - t0)
    return best, out.detach()


def main() -> None:
    th.set_num_threads(1)
    g = th.Generator().manual_seed(0)
    print(f"{'scenario':<14}{'N':>6}{'K':>4}  {'members only':>13}  {'all N (before)':>15}  {'ratio':>7}  max |Δ log P|")
    for name, n, k in SHAPES:
        logits = (th.randn(128, n, generator=g) * 2.0).requires_grad_(True)
        mask = th.rand(128, n, generator=g) > 0.1
        chosen = PlackettLuceTopK(logits, mask, k).sample(generator=g) > 0
        repeats = 2 if n >= 1000 else 5
        fast, a = timed(set_log_prob, logits, chosen, mask, repeats)
        slow, b = timed(dense_log_prob, logits, chosen, mask, repeats)
        print(f"{name:<14}{n:>6}{k:>4}  {fast * 1e3:>10.1f} ms  {slow * 1e3:>12.1f} ms  {slow / fast:>6.1f}x  "
              f"{float((a - b).abs().max()):.1e}")


if __name__ == "__main__":
    main()
