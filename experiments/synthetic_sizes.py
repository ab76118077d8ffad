"""The device sizes of the q-FFL Synthetic(1, 1) federations, as generated and capped at 500 (issue #34).

docs/REPRODUCTION.md §2 explains why the paper-scale q-FFL grid keeps the generated sizes: on the
federations of seeds 0, 1, 2 a cap of 500 samples removes a third or more of the training samples and the
largest device's weight. Those figures are facts of the generator, recomputable here: one row per device
(seed, device, n_k as generated, n_k capped, over the cap or not), and the totals, counts and largest
sizes as summaries of the rows (``python -m fedsel_eval.recompute experiments/results/synthetic_sizes.json``).
A largest device's share is its ``max`` over the seed's ``sum``.

    .venv/bin/python experiments/synthetic_sizes.py       # seconds; writes experiments/results/synthetic_sizes.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from experiments.qffl_synthetic import PAPER, SEEDS  # noqa: E402
from fedsel_eval import records  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CAP = 500
OUT = ROOT / "experiments" / "results" / "synthetic_sizes.json"


def sizes(seed: int) -> np.ndarray:
    """The training sizes n_k of the federation qffl_synthetic.py plays for ``seed``."""
    from fedsel_env.env import FedSelectEnv

    env = FedSelectEnv(config={k: v for k, v in PAPER.items() if k != "preset"}, preset=PAPER["preset"])
    try:
        env.reset(seed=seed)
        return np.asarray(env.federation.data.num_samples, dtype=np.int64)
    finally:
        env.close()


def main(argv: Sequence[str] = None) -> records.Record:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(OUT), help="the record's path (default: %(default)s)")
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    args = p.parse_args(argv)
    rec = records.Record("synthetic_sizes", config={"env": PAPER, "cap": CAP, "seeds": args.seeds},
                         notes={"share": "a largest device's share is its max over its seed's sum"})
    c = rec.chunk(records.git_provenance(ROOT, ("fedsel_env", "experiments")), note="sizes drawn by this invocation")
    for seed in args.seeds:
        for k, n in enumerate(sizes(seed)):
            rec.add_row(c, seed=seed, device=k, n_k=int(n), n_k_capped=int(min(n, CAP)), over_cap=bool(n > CAP))
        w = {"seed": seed}
        rec.summarise(f"seed {seed}: training samples as generated", "sum", "n_k", where=w)
        rec.summarise(f"seed {seed}: training samples capped at {CAP}", "sum", "n_k_capped", where=w)
        rec.summarise(f"seed {seed}: devices over {CAP}", "count", where={**w, "over_cap": True})
        rec.summarise(f"seed {seed}: largest device as generated", "max", "n_k", where=w)
        rec.summarise(f"seed {seed}: largest device capped", "max", "n_k_capped", where=w)
    rec.write(Path(args.out))
    for s in rec.summaries:
        print(f"{s['name']}: {s['value']}")
    return rec


if __name__ == "__main__":
    main()
