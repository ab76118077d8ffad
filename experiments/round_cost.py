"""What a round of FAVOR's Fashion-MNIST setup costs on this machine: why favor_fmnist.py is scaled down.

    python experiments/round_cost.py            # ~2 minutes: the paper's CNN, FedMGDA+'s CNN, the MLP
    python experiments/round_cost.py --smoke    # seconds: digits, logistic regression

For each model, on the real Fashion-MNIST federation of FAVOR's setup (100 clients × 600 samples):
the measured time of one local epoch of K = 10 clients at batch 10 (after a one-client warm-up) (the simulator's batched
training, ``fedsel_env.sim.training.BatchedTrainer``, one torch thread) and of one evaluation of the
global model on every client's test data. From these, a round ≈ E × epoch + evaluation, the
profiling round ≈ 10 × epoch (all 100 clients, one epoch), and an episode of the paper's published
length ≈ profiling + rounds × round (estimates, labelled as such: the per-round PCA projection and
aggregation are left out, being small next to training).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from experiments import common  # noqa: E402
from fedsel_eval import markdown  # noqa: E402

NAME = "round_cost"
#: (model, local epochs): the paper's setup first, then the scaled ones.
MODELS: List[Tuple[str, int, str]] = [("favor_cnn", 5, "the paper's setup (FAVOR's CNN, E = 5)"),
                                      ("fedmgda_cnn", 1, "FedMGDA+'s CNN, E = 1"),
                                      ("mlp", 1, "the MLP of favor_fmnist.py, E = 1")]
#: The paper's published FMNIST rounds for FedAvg (docs/SPEC.md §6), to turn a round's cost into an episode's.
PAPER_ROUNDS = {"IID": 14, "σ = 0.8": 52, "σ = H": 1340}


def measure(config: Dict[str, Any], models: Sequence[Tuple[str, int, str]], k: int) -> List[Dict[str, Any]]:
    """Time one local epoch of ``k`` clients and one full evaluation for each model."""
    import torch

    from fedsel_env.config import make_config
    from fedsel_env.sim.data import build_federated_data
    from fedsel_env.sim.models import init_params, make_model, num_parameters
    from fedsel_env.sim.training import BatchedTrainer

    cfg = make_config(config)
    data = build_federated_data(cfg, np.random.default_rng(0))
    rows = []
    for name, epochs, about in models:
        model = make_model(name, data.input_shape, data.num_classes)
        trainer = BatchedTrainer(model, data.x_train, data.y_train, data.train_offsets,
                                 batch_size=cfg["batch_size"], lr=0.01, local_epochs=1)
        w0 = trainer.layout.flatten(init_params(model, torch.Generator().manual_seed(0)))
        clients = list(range(k))
        gens = [np.random.default_rng([0, c]) for c in clients]
        trainer.train(w0, clients[:1], gens[:1], epochs=1)  # warm-up: the first vmapped call sets things up
        t = time.perf_counter()
        trainer.train(w0, clients, gens, epochs=1)
        epoch = time.perf_counter() - t
        t = time.perf_counter()
        trainer.per_sample_losses(w0, data.x_test, data.y_test)
        evaluation = time.perf_counter() - t
        rows.append({"model": name, "about": about, "parameters": num_parameters(model), "local_epochs": epochs,
                     "epoch_s": epoch, "evaluation_s": evaluation, "round_s": epochs * epoch + evaluation,
                     "profiling_s": epoch * cfg["num_clients"] / k})
    return rows


def main(argv: Sequence[str] = None) -> Path:
    """Run the measurement as ``argv`` says; return its folder."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = common.parser(NAME, __doc__.split("\n")[0]).parse_args(argv)
    clock, out = common.start(NAME, args)
    if args.smoke:
        config = {"dataset": "digits", "num_clients": 8, "samples_per_client": 20, "partition": "iid",
                  "partition_params": {}, "clients_per_round": 2}
        models, k = [("logreg", 2, "smoke"), ("mlp", 1, "smoke")], 2
    else:
        config = {"dataset": "fashion_mnist", "num_clients": 100, "samples_per_client": 600,
                  "test_fraction": 1 / 6, "partition": "iid", "partition_params": {}, "batch_size": 10,
                  "clients_per_round": 10}
        models, k = MODELS, 10
    rows = measure(config, models, k)
    table_rows = []
    for r in rows:
        episode = {lab: r["profiling_s"] + n * r["round_s"] for lab, n in PAPER_ROUNDS.items()}
        table_rows.append([f"`{r['model']}` ({r['parameters']:,} params), {r['about']}", f"{r['epoch_s']:.2f}",
                           f"{r['evaluation_s']:.2f}", f"{r['round_s']:.1f}", f"{r['profiling_s']:.0f}",
                           *[_duration(episode[lab]) for lab in PAPER_ROUNDS]])
        r["episode_estimate_s"] = episode
    table = markdown.table(["model, local epochs", f"one local epoch, {k} clients (s)", "evaluation (s)",
                             "≈ round (s)", "≈ profiling round (s)",
                             *[f"≈ episode of {n} rounds ({lab}, the paper's FedAvg)" for lab, n in PAPER_ROUNDS.items()]],
                            table_rows)
    note = (f"Measured on this machine, one torch thread, {config['num_clients']} clients × "
            f"{config['samples_per_client']} {config['dataset']} samples, batch {config.get('batch_size', 10)}; "
            f"the round, profiling and episode columns are estimates from the two measured columns.\n")
    out.results({"config": config, "k": k, "rows": rows})
    out.fragment("\n".join([note, table, common.wall_time_note(clock.seconds(), 1,
                                                                common.command_line("round_cost.py", argv),
                                                                longest=out.invocation(
                                                                    clock.seconds(), common.command_line("round_cost.py", argv)))]))
    print((out.out / "table.md").read_text())
    return out.out


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


if __name__ == "__main__":
    common.run_cli(main, "round_cost.py")
