"""A fedsel agent chooses the clients of a Flower federation (Flower's simulation runtime, Ray backend).

Every virtual SuperNode runs ``fedsel_flower.client_app`` on its partition of the fedsel
federation (the env's partition for the same config); the ServerApp runs
``FedSelectStrategy``: a profiling round, then each round the agent reads the Dict
observation built from the clients' reports and picks who trains; a fedsel backend
aggregates. The same strategy runs against real SuperNodes (docs/FLOWER.md).

Usage:
    python examples/flower_selection.py [--agent rpow_d] [--rounds 5] [--preset tiny] [--aggregator fedavg]
    python examples/flower_selection.py --agent favor --agent-params '{"model_path": "runs/x/best_model.zip"}'
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one torch thread per virtual client
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

from fedsel_flower import FedSelectStrategy, make_client_app, make_server_app  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agent", default="rpow_d", help="a registered fedsel agent (favor needs --agent-params)")
    p.add_argument("--agent-params", default="{}", help="JSON object of the agent's parameters")
    p.add_argument("--preset", default="tiny", help="fedsel preset of the federation")
    p.add_argument("--aggregator", default="fedavg", help="fedsel aggregation backend")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cpus", type=int, default=2, help="CPUs Ray may use (one virtual client per CPU)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)

    strategy = FedSelectStrategy({"preset": args.preset, "aggregator": args.aggregator,
                                  "system": {"availability": 1.0}},
                                 agent=args.agent, agent_params=json.loads(args.agent_params),
                                 agent_seed=args.seed, train_seed=args.seed)
    n = strategy.num_clients
    with tempfile.TemporaryDirectory(prefix="ray") as ray_tmp:
        run_simulation(server_app=make_server_app(strategy, args.rounds, init_seed=args.seed),
                       client_app=make_client_app(), num_supernodes=n,
                       backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                       "init_args": {"num_cpus": args.cpus, "_temp_dir": ray_tmp}})

    print(f"\n{args.agent} in a Flower federation of {n} SuperNodes, K = {strategy.k}, {args.aggregator}")
    info = strategy.profile_info
    print(f"profiling round: {info['time']:.2f} s, w_0 accuracy {info['accuracy']:.3f}")
    for h in strategy.history:
        acc = h["observation"]["progress"][1]
        print(f"round {h['round']:>2}: accuracy before {acc:.3f}  chose {sorted(map(int, h['selected']))}  "
              f"trained {sorted(map(int, h['trained']))}")
    print(f"final accuracy {strategy.view.accuracy:.3f}; participation {strategy.view.participation.tolist()}")
    assert all(np.array_equal(np.sort(h["selected"]), h["trained"]) for h in strategy.history)


if __name__ == "__main__":
    main()
