"""fedsel's simulator against Flower's simulation on the same FedAvg workload (issue #9).

Workload: 100 clients × 600 Fashion-MNIST samples (IID, each with a 100-sample test split),
10 clients per round chosen uniformly at random, one local epoch of SGD at batch 10
(lr 0.01), FedMGDA+'s 21,840-parameter CNN (``fedmgda_cnn``), FedAvg, 20 rounds, the
global model evaluated on every client's test split after each round.

Systems, each in a fresh child process so that start-up (Python, imports, data, Ray) counts:

- ``env``: ``FedSelectEnv`` with the ``random`` agent — reset (which includes FAVOR's
  profiling round: all 100 clients train one epoch, PCA) and 20 steps. Training is the
  env's batched ``torch.func.vmap`` local SGD, each round's clients and evaluation split over
  ``--env-workers`` processes (the env's ``workers`` config, default 2: both cores, as Flower's
  two client processes use them) of ``--env-threads`` torch threads each.
- ``flower``: Flower's simulation runtime (``run_simulation``, Ray backend) with Flower's own
  Message-API ``FedAvg`` (``fraction_train=0.1``: 10 of 100 at random) and the
  ``fedsel_flower`` ClientApp (plain PyTorch SGD per client, loss before training);
  evaluation by a server-side ``evaluate_fn`` on the same test rows as the env
  (no federated evaluation). Fair to Flower: 2 CPUs for Ray, 1 CPU per virtual client,
  so 2 clients train at once, one torch thread each.
- ``flower-fedsel``: the same Flower simulation with ``FedSelectStrategy`` and the
  ``random`` agent — Flower doing what the env does, profiling round included.

With ``--device cuda`` both systems run on the GPU: the env with ``device: cuda`` (one process: ``workers``
is a CPU feature), Flower's clients with the same config's device (``fedsel_flower.task.ClientTask``
moves the client's data and model there), each virtual client holding 1/``--cpus`` of the GPU in Ray,
and the server-side evaluation on the GPU too.

Reported per system: end-to-end wall time of the child (measured by this parent, from
spawn to exit), and the steady per-round time (median of rounds 3..R: a round is one
``env.step`` with the agent's choice, or, for Flower, the time between consecutive
server-side evaluations, i.e. selection + training + aggregation + evaluation).

Usage: python bench/vs_flower.py [--rounds 20] [--repeats 1] [--systems env,flower,flower-fedsel]
                                 [--env-threads 1] [--env-workers 2] [--cpus 2] [--device cpu] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

import numpy as np

SYSTEMS = ("env", "flower", "flower-fedsel")


def workload(rounds: int, device: str = "cpu") -> Dict[str, Any]:
    """The fedsel config of the workload (shared by all systems), computed on ``device``."""
    return dict(device=device, dataset="fashion_mnist", num_clients=100, samples_per_client=600, test_fraction=1 / 6,
                partition="iid", partition_params={}, model="fedmgda_cnn", local_epochs=1, batch_size=10,
                lr=0.01, clients_per_round=10, max_rounds=rounds, target_accuracy=0.999,
                system={"availability": 1.0}, federation_seed=0)


# ---------------------------------------------------------------------------- children
def child_env(rounds: int, threads: int, workers: int, device: str = "cpu") -> Dict[str, Any]:
    import torch

    torch.set_num_threads(threads)
    import agents
    from fedsel_env.env import FedSelectEnv

    t0 = time.perf_counter()
    env = FedSelectEnv(config={**workload(rounds, device), "workers": workers if device == "cpu" else 1})
    obs, info = env.reset(seed=0)
    setup = time.perf_counter() - t0
    agent = agents.make("random", env.selection_spec, seed=0)
    times: List[float] = []
    for _ in range(rounds):
        t = time.perf_counter()
        action, _ = agent.predict(obs)
        obs, _, terminated, truncated, info = env.step(action)
        times.append(time.perf_counter() - t)  # a step ends with numpy results on the host: synchronised
        if terminated or truncated:
            break
    env.close()
    return {"round_times": times, "setup_s": setup, "accuracy": float(info["accuracy"]), "rounds": len(times)}


def child_flower(rounds: int, cpus: int, fedsel_strategy: bool, device: str = "cpu") -> Dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    from fedsel_env.sim.training import BatchedTrainer
    from fedsel_flower import FedSelectStrategy, make_client_app
    from fedsel_flower.server_app import draw_initial_arrays
    from fedsel_flower.task import CONFIG_KEY, build_model, config_to_json, fedsel_config, federated_data, flat_of

    cfg = fedsel_config(workload(rounds, device))
    data = federated_data(cfg)
    dev = torch.device(device)
    model = build_model(cfg, data.input_shape, data.num_classes)
    evaluator = BatchedTrainer(model, data.x_train[:1].to(dev), data.y_train[:1].to(dev), np.array([0, 1]),
                               batch_size=1, lr=0.0)
    x_test, y_test = data.x_test.to(dev), data.y_test.to(dev)
    eval_times: List[float] = []
    accuracy = [float("nan")]

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        # the env's evaluation: the global model on every client's test split
        _, correct = evaluator.per_sample_losses(flat_of(evaluator.layout, arrays.to_torch_state_dict()).to(dev),
                                                 x_test, y_test)
        accuracy[0] = float(correct.double().mean())
        eval_times.append(time.perf_counter())
        return MetricRecord({"accuracy": accuracy[0]})

    if fedsel_strategy:
        strategy = FedSelectStrategy(cfg, agent="random", agent_seed=0, fraction_evaluate=0.0)
    else:
        strategy = FedAvg(fraction_train=0.1, fraction_evaluate=0.0, min_available_nodes=100)
    w0 = draw_initial_arrays(cfg, data.input_shape, data.num_classes, 0)
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        strategy.start(grid, w0, num_rounds=rounds, train_config=ConfigRecord({CONFIG_KEY: config_to_json(cfg)}),
                       evaluate_fn=evaluate_fn)

    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    try:
        gpu = dev.type == "cuda"  # each virtual client holds 1/cpus of the GPU: `cpus` clients train at once
        run_simulation(server_app=server_app, client_app=make_client_app(), num_supernodes=100,
                       backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 1.0 / cpus if gpu else 0.0},
                                       "init_args": {"num_cpus": cpus, "num_gpus": 1 if gpu else 0,
                                                     "_temp_dir": ray_tmp}})
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    times = list(np.diff(eval_times))  # eval_times[0] is w_0's evaluation, before round 1
    return {"round_times": times, "accuracy": accuracy[0], "rounds": len(times)}


# ------------------------------------------------------------------------------ parent
def versions() -> Dict[str, str]:
    from importlib.metadata import version

    out = {"python": sys.version.split()[0]}
    for pkg in ("torch", "flwr", "ray", "numpy"):
        try:
            out[pkg] = version(pkg)
        except Exception:  # not installed
            out[pkg] = "-"
    return out


def run_child(system: str, args: argparse.Namespace) -> Dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", system, "--rounds", str(args.rounds),
           "--env-threads", str(args.env_threads), "--env-workers", str(args.env_workers), "--cpus", str(args.cpus),
           "--device", args.device]
    env = dict(os.environ, OMP_NUM_THREADS="1" if system != "env" else str(args.env_threads),
               FLWR_TELEMETRY_ENABLED="0", PYTHONPATH=os.pathsep.join(
                   [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))] +
                   ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    load_before = os.getloadavg()[0]
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise RuntimeError(f"{system} child failed with exit code {proc.returncode}")
    result = json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])
    rt = np.asarray(result["round_times"])
    result.update(system=system, wall_s=wall, load_before=load_before, load_after=os.getloadavg()[0],
                  steady_round_s=float(np.median(rt[2:])) if rt.size > 2 else float("nan"),
                  first_round_s=float(rt[0]) if rt.size else float("nan"))
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--env-threads", type=int, default=1, help="torch threads of each env process")
    p.add_argument("--env-workers", type=int, default=2,
                   help="the env's 'workers' config: processes sharing each round (2 = both cores)")
    p.add_argument("--cpus", type=int, default=2, help="CPUs given to Ray (one per virtual client)")
    p.add_argument("--device", default="cpu", help="torch device of both systems: cpu, cuda, cuda:N, auto")
    p.add_argument("--json", default=None, help="write all results to this file")
    p.add_argument("--child", choices=SYSTEMS, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rounds < 3:
        p.error("--rounds must be >= 3 (the steady round time is the median of rounds 3..R)")
    if args.child == "env":
        print(json.dumps(child_env(args.rounds, args.env_threads, args.env_workers, args.device)))
        return
    if args.child in ("flower", "flower-fedsel"):
        print(json.dumps(child_flower(args.rounds, args.cpus, args.child == "flower-fedsel", args.device)))
        return
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    bad = [s for s in systems if s not in SYSTEMS]
    if bad:
        p.error(f"--systems: unknown {bad}; choose from {list(SYSTEMS)}")

    from fedsel_env.sim.device import resolve_device

    args.device = str(resolve_device(args.device))  # auto -> cpu or cuda; CUDA where there is none: an error
    if args.device != "cpu" and args.env_workers > 1:
        print(f"device {args.device}: the env runs in one process (workers is a CPU feature)")
        args.env_workers = 1
    print(f"versions: {versions()}; {os.cpu_count()} CPUs; device {args.device}; env: {args.env_workers} "
          f"process(es) x {args.env_threads} thread(s); Ray CPUs {args.cpus}")
    results: List[Dict[str, Any]] = []
    for rep in range(args.repeats):
        order = systems if rep % 2 == 0 else systems[::-1]  # alternate the order against drifting load
        for s in order:
            r = run_child(s, args)
            r["repeat"] = rep
            results.append(r)
            print(f"[{rep}] {s:<14} end-to-end {r['wall_s']:7.1f} s   steady round {r['steady_round_s']:6.2f} s   "
                  f"first round {r['first_round_s']:6.2f} s   rounds {r['rounds']}   accuracy {r['accuracy']:.3f}   "
                  f"load {r['load_before']:.1f}->{r['load_after']:.1f}", flush=True)
    print("\nmedians over repeats:")
    print(f"| system | end-to-end (s) | steady round (s) | first round (s) | final accuracy |")
    print("|---|---|---|---|---|")
    for s in systems:
        rs = [r for r in results if r["system"] == s]
        med = {k: float(np.median([r[k] for r in rs])) for k in ("wall_s", "steady_round_s", "first_round_s",
                                                                   "accuracy")}
        print(f"| {s} | {med['wall_s']:.1f} | {med['steady_round_s']:.2f} | {med['first_round_s']:.2f} | "
              f"{med['accuracy']:.3f} |")
    if "env" in systems:
        env_rs = [r for r in results if r["system"] == "env"]
        for s in systems:
            if s == "env":
                continue
            rs = [r for r in results if r["system"] == s]
            e2e = np.median([r["wall_s"] for r in rs]) / np.median([r["wall_s"] for r in env_rs])
            rnd = np.median([r["steady_round_s"] for r in rs]) / np.median([r["steady_round_s"] for r in env_rs])
            print(f"{s} / env: end-to-end {e2e:.2f}x, steady round {rnd:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"versions": versions(), "args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    from fedsel_env.allocator import reexec_with_tcmalloc

    reexec_with_tcmalloc()  # both systems' processes (Ray's too) inherit it; FEDSEL_NO_TCMALLOC=1 opts out
    main()
