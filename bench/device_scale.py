"""K clients trained at once on a torch device (issue #18): a benchmark that prints tables, not a test.

Table 1 — for ``fedmgda_cnn`` (21,840 parameters) and ``favor_cnn`` (431,080) at batch 10: client-sample
updates per second of one round's local training (``--epochs`` epochs over ``--samples`` samples per
client; random 28×28 inputs, the speed does not depend on their values) with

- ``batched``: the simulator's ``BatchedTrainer`` — the K clients' SGD as ``torch.func.vmap`` calls over
  their stacked parameters, chunked as the federation chunks them on that device
  (``fedsel_env/sim/device.py``: 128 clients on the CPU, from the free memory on a GPU);
- ``single``: one ``nn.Module`` trained alone with ``torch.optim.SGD`` at batch 10 (the rate of one model);
- ``loop``: a Python loop over the clients, each loading w_t into an ``nn.Module`` and running its SGD
  steps, as a per-client simulator (Flower's ClientApp) does. A loop's rate does not depend on K, so it
  is measured on the first ``--loop-clients`` clients.

Table 2 — FAVOR's Fashion-MNIST round: the ``favor_fmnist`` preset (100 clients × 600 samples, 10 per
round, 5 local epochs at batch 10, ``favor_cnn``) on the device: the reset (data upload, w_0, the
profiling round of all 100 clients, the PCA), a whole env step (training, aggregation, the loss passes,
evaluation on every client's test split, the observation) and the step's local training alone.

    python bench/device_scale.py --device cuda                  # the issue's tables: K = 10, 100, 1000
    OMP_NUM_THREADS=1 python bench/device_scale.py --device cpu --ks 10 100 --samples 100 --threads 1
    python bench/device_scale.py --quick                        # a smoke run in seconds (tests/test_device.py)

Flower's simulation on the same device and workload: ``python bench/vs_flower.py --device cuda``.
"""
from __future__ import annotations

import argparse
import os
import platform
import time
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

MODELS = ("fedmgda_cnn", "favor_cnn")
INPUT_SHAPE = (1, 28, 28)


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(device, fn) -> float:
    _sync(device)
    t = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t


def _gib(value: float) -> str:
    return "-" if value != value else f"{value:.2f}"  # NaN: not a GPU


def versions(device) -> str:
    import torch

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or "CPU")
    return (f"device {device} ({name}); torch {torch.__version__} (CUDA build {torch.version.cuda}); "
            f"{torch.get_num_threads()} torch thread(s); {os.cpu_count()} CPUs; python {platform.python_version()}")


def training_rates(model_name: str, k: int, device, samples: int, epochs: int, batch: int, loop_clients: int,
                   single_steps: int, seed: int = 0) -> Dict[str, Any]:
    """One row of table 1: the three rates (client-sample updates/s) for ``model_name`` and K = ``k``."""
    import torch
    import torch.nn.functional as F

    from fedsel_env.sim.device import training_chunk
    from fedsel_env.sim.models import init_params, make_model
    from fedsel_env.sim.training import BatchedTrainer

    model = make_model(model_name, INPUT_SHAPE, 10)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(k * samples, *INPUT_SHAPE, generator=gen).to(device)
    y = torch.randint(0, 10, (k * samples,), generator=gen).to(device)
    offsets = np.arange(k + 1, dtype=np.int64) * samples
    chunk = training_chunk(device, model, INPUT_SHAPE, batch)
    trainer = BatchedTrainer(model, x, y, offsets, batch_size=batch, lr=0.01, local_epochs=epochs, chunk_clients=chunk)
    w0 = trainer.layout.flatten(init_params(model, torch.Generator().manual_seed(seed))).to(device)
    ids = list(range(k))

    def gens(r: int, clients: Sequence[int]) -> list:
        return [np.random.default_rng([seed, r, c]) for c in clients]

    trainer.train(w0, ids[:min(k, 2)], gens(0, ids[:2]), epochs=1)  # warm-up (kernels, allocator, cuDNN)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    batched_s = _timed(device, lambda: trainer.train(w0, ids, gens(1, ids)))
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
    updates = k * samples * epochs

    # one model alone, plain PyTorch at batch `batch`
    net = make_model(model_name, INPUT_SHAPE, 10).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)

    def single(steps: int) -> None:
        for s in range(steps):
            lo = (s * batch) % (x.shape[0] - batch + 1)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(x[lo:lo + batch]), y[lo:lo + batch]).backward()
            opt.step()

    single(min(20, single_steps))
    single_s = _timed(device, lambda: single(single_steps))

    # a Python loop over clients: w_t into an nn.Module, the client's own minibatch plan, SGD, flatten
    m = min(k, loop_clients)
    idx, mask = trainer.batch_plan(ids[:m], gens(1, ids[:m]))
    plan = [[idx[s, j][mask[s, j] > 0].to(device) for s in range(idx.shape[0]) if mask[s, j].any()] for j in range(m)]

    def loop() -> None:
        outs = []
        for j in range(m):
            with torch.no_grad():
                for (_, p), w in zip(net.named_parameters(), trainer.layout.unflatten(w0).values()):
                    p.copy_(w)
            o = torch.optim.SGD(net.parameters(), lr=0.01)
            for rows in plan[j]:
                o.zero_grad(set_to_none=True)
                F.cross_entropy(net(x[rows]), y[rows]).backward()
                o.step()
            outs.append(torch.cat([p.detach().reshape(-1) for p in net.parameters()]))
        torch.stack(outs)

    loop_s = _timed(device, loop)
    loop_updates = sum(int(mask[:, j].sum()) for j in range(m))
    out = {"model": model_name, "k": k, "chunk": min(chunk, k), "batched_s": batched_s,
           "batched": updates / batched_s, "single": single_steps * batch / single_s,
           "loop": loop_updates / loop_s, "loop_clients": m, "peak_gib": peak}
    del trainer, x, y
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def favor_round(device, rounds: int, small: bool) -> Optional[Dict[str, Any]]:
    """Table 2: reset and step seconds of the ``favor_fmnist`` preset on ``device`` (None: no Fashion-MNIST)."""
    import agents
    from fedsel_env.env import FedSelectEnv
    from fedsel_env.sim.data import DatasetNotFoundError

    over: Dict[str, Any] = {"device": str(device), "max_rounds": rounds + 1, "target_accuracy": 0.999}
    if small:  # the smoke run: the preset's shape at a tiny size
        over.update(num_clients=12, samples_per_client=30, local_epochs=1, clients_per_round=3)
    try:
        env = FedSelectEnv(config=over, preset="favor_fmnist")
    except DatasetNotFoundError as e:
        print(f"FAVOR round skipped: {e}")
        return None
    reset_s = _timed(env.device, lambda: env.reset(seed=0))
    agent = agents.make("random", env.selection_spec, seed=0)
    obs = env.view.observe()
    fed = env.federation
    step_s, train_s = [], []
    for r in range(rounds):
        action, _ = agent.predict(obs)
        holder: List[Any] = []
        step_s.append(_timed(env.device, lambda: holder.append(env.step(action))))
        obs = holder[0][0]
        chosen = np.asarray(holder[0][4]["responders"])
        w = fed.global_params
        train_s.append(_timed(env.device, lambda: fed.trainer.train(w, chosen, fed.generators(r + 1, chosen))))
    env.close()
    cfg = env.config
    return {"clients": cfg["num_clients"], "per_round": cfg["clients_per_round"], "samples": cfg["samples_per_client"],
            "epochs": cfg["local_epochs"], "reset_s": reset_s, "step_s": float(np.median(step_s)),
            "train_s": float(np.median(train_s)), "rounds": rounds}


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: a GPU when torch sees one)")
    p.add_argument("--ks", type=int, nargs="+", default=[10, 100, 1000], help="clients per round")
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--samples", type=int, default=600, help="training samples per client")
    p.add_argument("--epochs", type=int, default=1, help="local epochs")
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--loop-clients", type=int, default=20, help="clients the per-client loop is timed on")
    p.add_argument("--single-steps", type=int, default=300, help="SGD steps of the single model")
    p.add_argument("--favor", choices=("full", "small", "off"), default="full",
                   help="FAVOR's Fashion-MNIST round: the preset (full), a tiny version of it (small), or none")
    p.add_argument("--favor-rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--quick", action="store_true", help="a smoke run: K 2 and 4, 20 samples, --favor small")
    a = p.parse_args(argv)
    if a.quick:
        a.ks, a.samples, a.loop_clients, a.single_steps, a.favor, a.favor_rounds = [2, 4], 20, 2, 10, "small", 1
    import torch

    from fedsel_env.sim.device import resolve_device, use_deterministic

    if a.threads:
        torch.set_num_threads(a.threads)
    device = resolve_device(a.device)
    use_deterministic(device)
    print(versions(device))
    rows = []
    print(f"\nTable 1: one round's local training, {a.samples} samples x {a.epochs} epoch(s) per client, "
          f"batch {a.batch}; client-sample updates per second")
    print("| model | K | chunk | batched round (s) | batched | single model | loop over clients | "
          "batched / loop | batched / single | peak GPU memory (GiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in a.models:
        for k in a.ks:
            r = training_rates(name, k, device, a.samples, a.epochs, a.batch, a.loop_clients, a.single_steps)
            rows.append(r)
            print(f"| `{name}` | {k:,} | {r['chunk']:,} | {r['batched_s']:.3f} | {r['batched']:,.0f} | "
                  f"{r['single']:,.0f} | {r['loop']:,.0f} | {r['batched'] / r['loop']:.2f}x | "
                  f"{r['batched'] / r['single']:.2f}x | {_gib(r['peak_gib'])} |", flush=True)
    favor = None
    if a.favor != "off":
        favor = favor_round(device, a.favor_rounds, small=a.favor == "small")
        if favor is not None:
            print(f"\nTable 2: FAVOR's Fashion-MNIST round ({favor['clients']} clients x {favor['samples']} samples, "
                  f"{favor['per_round']} per round, {favor['epochs']} epochs, favor_cnn); median of "
                  f"{favor['rounds']} round(s)")
            print("| device | reset (s) | env step (s) | local training of the step (s) |")
            print("|---|---|---|---|")
            print(f"| {device} | {favor['reset_s']:.2f} | {favor['step_s']:.3f} | {favor['train_s']:.3f} |")
    return {"device": str(device), "training": rows, "favor": favor}


if __name__ == "__main__":
    from fedsel_env.allocator import reexec_with_tcmalloc

    reexec_with_tcmalloc()  # as the env's scripts do (docs/PERFORMANCE.md); FEDSEL_NO_TCMALLOC=1 opts out
    main()
