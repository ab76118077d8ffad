"""FAVOR on Fashion-MNIST: rounds to the target for random (FedAvg), K-Center and a trained FAVOR agent.

H. Wang, Z. Kaplan, D. Niu, B. Li, "Optimizing Federated Learning on Non-IID Data with Reinforcement
Learning", IEEE INFOCOM 2020 (seed 002); docs/SPEC.md §6 gives the paper's FMNIST column (rounds to 85%,
100 clients, 10 per round, 600 samples each, 5 local epochs at batch 10, the 431k CNN):
IID 14; σ = 0.5: 19 / 21 / 16; σ = 0.8: 52 / 62 / 43; σ = H: 1340 / 1593 / 1134 (FedAvg / K-Center / FAVOR).

    python experiments/favor_fmnist.py --workers 2          # the scaled run of docs/REPRODUCTION.md
    python experiments/favor_fmnist.py --smoke               # seconds: digits, 8 clients, 3 rounds

What is kept from the paper: the real Fashion-MNIST (Debian's files), 100 clients × 600 training
samples, σ ∈ {IID, 0.5, 0.8, H (two labels)}, K = 10, batch 10, the profiling round and PCA state,
FAVOR's reward Ξ^(acc−Ω) − 1 with Ξ = 64, Double DQN trained one client per round and deployed as
top-K. What is scaled down, because an episode of the paper's setup costs hours on this machine's
two shared cores (see ``SCALE`` and docs/REPRODUCTION.md): the model (an MLP of 50,890 parameters
instead of the 431,080-parameter CNN), one local epoch instead of five, 50 test images per client
instead of 100, a lower target Ω (the accuracy IID FedAvg reached in about the paper's 14 rounds in
a calibration run), a round cap per σ, one or two seeds, and 1,200 DQN training rounds on the
σ = 0.8 federation only (the agent is then also run, untrained there, at the other σ).

The steps: (1) train FAVOR with train_agent.py's own config resolution, hyper-parameter loading and
``DoubleDQN`` (the periodic deployed evaluation switched off, an episode-return recorder added);
(2) for each σ, evaluate random, kcenter and the trained model with evaluate.py's library on the
same seeds; (3) the table, the training curve and the accuracy curves.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from experiments import common  # noqa: E402
from fedsel_eval import markdown  # noqa: E402

NAME = "favor_fmnist"
#: The paper's FMNIST column (docs/SPEC.md §6): rounds to 85% for FedAvg / K-Center / FAVOR.
PUBLISHED = {"IID": (14, None, None), "0.5": (19, 21, 16), "0.8": (52, 62, 43), "H": (1340, 1593, 1134)}

#: The scaled setup (module docstring): every deviation from the paper is here.
SCALE: Dict[str, Any] = {
    "dataset": "fashion_mnist", "num_clients": 100, "samples_per_client": 600,
    "test_fraction": 1 / 12,                            # 50 test images per client, 5,000 in all (halves evaluation)
    "model": "mlp", "model_params": {"hidden": 64},   # paper: favor_cnn (431,080 params); this: 50,890
    "local_epochs": 1,                                  # paper: 5
    "batch_size": 10, "lr": 0.05,                       # paper: lr 0.01 with 5 epochs
    "clients_per_round": 10, "target_accuracy": 0.83,   # paper: 85% with the CNN
    "system": {"availability": 1.0},                    # the paper's clients are always available
    "federation_seed": 0,                               # one FL job per σ, as the paper trains and tests on one
}
#: (label, partition, partition_params, round cap, default seeds)
SIGMAS: List[Tuple[str, str, Dict[str, Any], int, List[int]]] = [
    ("IID", "iid", {}, 40, [0, 1]),
    ("0.5", "sigma", {"sigma": 0.5}, 60, [0, 1]),
    ("0.8", "sigma", {"sigma": 0.8}, 80, [0, 1]),
    ("H", "two_label", {}, 100, [0]),
]
TRAIN_SIGMA = "0.8"
#: FAVOR's DQN training at this scale (over train_agent.py's configs/favor.yml entry).
TRAIN = {"n_timesteps": 1200, "n_envs": 2, "max_rounds": 30,
         "hyperparams": {"learning_rate": 5e-4, "buffer_size": 5000, "learning_starts": 150, "batch_size": 64,
                         "train_freq": 1, "gradient_steps": 1, "target_update_interval": 150,
                         "exploration_fraction": 0.5, "exploration_final_eps": 0.05, "gamma": 0.99}}

#: ``--paper-scale``: the paper's setup (days on this machine; see experiments/round_cost.py).
PAPER_SCALE: Dict[str, Any] = {**SCALE, "test_fraction": 1 / 6, "model": "favor_cnn", "model_params": {},
                               "local_epochs": 5, "lr": 0.01, "target_accuracy": 0.85}
PAPER_CAPS = {"IID": 300, "0.5": 300, "0.8": 600, "H": 3000}
PAPER_TRAIN = {**TRAIN, "n_timesteps": 30000, "max_rounds": 100}

SMOKE_SCALE = {"dataset": "digits", "num_clients": 8, "samples_per_client": 20, "test_fraction": 0.25,
               "model": "logreg", "model_params": {}, "local_epochs": 1, "batch_size": 10, "lr": 0.1,
               "clients_per_round": 3, "target_accuracy": 0.5, "system": {"availability": 1.0},
               "federation_seed": 0}
SMOKE_TRAIN = {"n_timesteps": 24, "n_envs": 1, "max_rounds": 4,
               "hyperparams": {"learning_starts": 8, "batch_size": 8, "buffer_size": 100, "train_freq": 1,
                               "target_update_interval": 8, "policy_kwargs": "dict(net_arch=[16])"}}


def env_config(scale: Mapping[str, Any], partition: str, params: Mapping[str, Any], cap: int) -> Dict[str, Any]:
    """The env config of one σ."""
    return {**scale, "partition": partition, "partition_params": dict(params), "max_rounds": cap}


# ================================================================================================ main
def main(argv: Sequence[str] = None) -> Path:
    """Run the experiment as ``argv`` says; return its folder."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = common.parser(NAME, __doc__.split("\n")[0])
    p.add_argument("--train-steps", type=int, default=None, help="FAVOR training steps (rounds); default 1200")
    p.add_argument("--paper-scale", action="store_true",
                   help="the paper's setup: favor_cnn, E = 5, Ω = 85%%, caps up to 3000 rounds, 30000 training "
                        "rounds, 3 seeds (days on this machine)")
    args = p.parse_args(argv)
    clock, out = common.start(NAME, args)
    if args.smoke and args.paper_scale:
        raise ValueError("--smoke and --paper-scale exclude each other")
    scale = SMOKE_SCALE if args.smoke else PAPER_SCALE if args.paper_scale else SCALE
    train = dict(SMOKE_TRAIN if args.smoke else PAPER_TRAIN if args.paper_scale else TRAIN)
    if args.train_steps is not None:
        if args.train_steps < 1:
            raise ValueError(f"--train-steps = {args.train_steps} is invalid: expected >= 1")
        train["n_timesteps"] = args.train_steps
    sigmas = [(lab, part, pp, 3 if args.smoke else PAPER_CAPS[lab] if args.paper_scale else cap,
               [0] if args.smoke else [0, 1, 2] if args.paper_scale else seeds)
              for lab, part, pp, cap, seeds in SIGMAS]
    if args.seeds is not None:
        sigmas = [(lab, part, pp, cap, list(args.seeds)) for lab, part, pp, cap, _ in sigmas]
    progress = not args.no_progress

    # 1. FAVOR's agent, trained on the σ = 0.8 federation
    lab, part, pp, cap, _ = next(s for s in sigmas if s[0] == TRAIN_SIGMA)
    model_dir, curve, trained = common.train_dqn(out.out / "favor_train", "favor", env_config(scale, part, pp, cap),
                                                 train, seed=0, progress=progress)
    time_file = model_dir / "train_time.json"
    train_seconds = json.loads(time_file.read_text())["seconds"] if time_file.is_file() else float("nan")

    # 2. the evaluation at every σ
    results: Dict[str, Any] = {"scale": scale, "train": train, "train_sigma": TRAIN_SIGMA, "sigmas": {}}
    records_by_sigma = {}
    policies = ["random", "kcenter", f"favor={model_dir}"]
    for lab, part, pp, cap, seeds in sigmas:
        tag = "iid" if lab == "IID" else lab.replace(".", "")
        records, rows, plan = common.evaluate(out.out / f"sigma_{tag}", env_config(scale, part, pp, cap), policies,
                                              seeds, workers=args.workers, progress=progress,
                                              env_name=f"fmnist-sigma-{lab}")
        records_by_sigma[lab] = (records, cap)
        results["sigmas"][lab] = {
            "cap": cap, "seeds": seeds,
            "rounds_to_target": {pol: [r["metrics"]["rounds_to_target"] if r["reached"] else None
                                       for r in common.episodes_of(records, pol)] for pol in ("random", "kcenter", "favor")},
            "final_accuracy": {pol: [r["metrics"]["final_accuracy"] for r in common.episodes_of(records, pol)]
                               for pol in ("random", "kcenter", "favor")},
            "wall_time_s": {pol: [r["wall_time_s"] for r in common.episodes_of(records, pol)]
                            for pol in ("random", "kcenter", "favor")},
            # what the table prints beside the rounds, per episode (#34: every printed figure has its rows)
            "best_accuracy": {pol: [r["metrics"]["best_accuracy"] for r in common.episodes_of(records, pol)]
                              for pol in ("random", "kcenter", "favor")},
            "distinct_clients": {pol: [int(np.count_nonzero(r["clients"]["participation"]))
                                       for r in common.episodes_of(records, pol)] for pol in ("random", "kcenter", "favor")}}

    # 3. table and figures
    rows_md = []
    for lab, (records, cap) in records_by_sigma.items():
        pub = PUBLISHED[lab]
        published = " / ".join("—" if x is None else str(x) for x in pub)
        ours = [common.rounds_cell(common.episodes_of(records, pol), cap) for pol in ("random", "kcenter", "favor")]
        best = " / ".join(f"{np.mean([r['metrics']['best_accuracy'] for r in common.episodes_of(records, pol)]):.3f}"
                          for pol in ("random", "kcenter", "favor"))
        distinct = " / ".join(
            f"{np.mean([np.count_nonzero(r['clients']['participation']) for r in common.episodes_of(records, pol)]):.0f}"
            for pol in ("random", "kcenter", "favor"))
        rows_md.append([lab, published, *ours, best, distinct, len(common.episodes_of(records, "random")), cap])
    table = markdown.table(["σ", "paper (FedAvg / K-Center / FAVOR), rounds to 85%", "random (FedAvg)", "K-Center",
                             "FAVOR (trained at σ = 0.8)", "best accuracy (random / K-Center / FAVOR)",
                             "distinct clients selected (random / K-Center / FAVOR)", "seeds", "round cap"],
                            rows_md, align="llrrrrrrr")
    rtn = np.asarray(curve["return"], dtype=np.float64)
    first, last = rtn[: max(len(rtn) // 5, 1)], rtn[-max(len(rtn) // 5, 1):]
    results["training"] = {"episodes": len(rtn), "steps": train["n_timesteps"], "seconds": train_seconds,
                           "first_fifth_mean_return": float(first.mean()), "last_fifth_mean_return": float(last.mean()),
                           "returns": rtn.tolist()}
    omega = scale["target_accuracy"]
    lines = [f"Rounds to reach Ω = {omega:.0%} test accuracy (mean ± std over seeds; an episode still below Ω at the "
             f"round cap is counted as \"> cap\"). Setup: {scale['dataset']}, {scale['num_clients']} clients × "
             f"{scale['samples_per_client']} samples, K = {scale['clients_per_round']}, model `{scale['model']}`, "
             f"E = {scale['local_epochs']}, B = {scale['batch_size']}, η = {scale['lr']}; one federation per σ "
             f"(federation_seed 0), seeds vary w_0, shuffles and system draws.\n", table,
             f"\nFAVOR's Double DQN: {train['n_timesteps']} training rounds (one client per round) in "
             f"{len(rtn)} episodes of ≤ {train['max_rounds']} rounds on the σ = {TRAIN_SIGMA} federation"
             + (f", {train_seconds / 60:.1f} min of training (2 env processes)" if np.isfinite(train_seconds) else "")
             + f"; mean episode return {first.mean():.2f} over the first fifth of the episodes (ε-greedy, mostly "
             f"random) and {last.mean():.2f} over the last fifth.\n"]
    _figures(out, records_by_sigma, curve, omega, train)
    out.results(results)
    compute = common.episode_seconds(*[rec for rec, _ in records_by_sigma.values()]) + \
        (train_seconds if np.isfinite(train_seconds) else 0.0)
    lines.append(common.wall_time_note(clock.seconds(), args.workers, common.command_line("favor_fmnist.py", argv),
                                       compute, "its episodes (single-process time, summed from their records) plus the DQN "
                                       "training (wall time)",
                                       longest=out.invocation(clock.seconds(), common.command_line("favor_fmnist.py", argv))))
    out.fragment("\n".join(lines))
    print((out.out / "table.md").read_text())
    return out.out


def _figures(out: common.Outputs, records_by_sigma: Mapping[str, Any], curve: Mapping[str, List[float]],
             omega: float, train: Mapping[str, Any]) -> None:
    """The training curve, and accuracy against round at each σ."""
    fig, ax = common.figure(7.5, 4.0)
    r = np.asarray(curve["return"], dtype=np.float64)
    x = np.arange(1, r.size + 1)
    ax.plot(x, r, ".", alpha=0.5, label="episode return")
    w = max(min(10, r.size // 3), 1)
    if r.size >= w:
        ax.plot(x[w - 1:], np.convolve(r, np.ones(w) / w, mode="valid"), label=f"moving mean ({w} episodes)")
    ax.set(title=f"FAVOR Double DQN training on the σ = {TRAIN_SIGMA} federation\n"
                 f"({train['n_timesteps']} rounds, one client per round; ε decays over the first "
                 f"{train['hyperparams'].get('exploration_fraction', 0.1):.0%})",
           xlabel="training episode", ylabel=f"episode return (Σ 64^(acc−Ω) − 1 over ≤ {train['max_rounds']} rounds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    out.figure(fig, f"{NAME}_training")

    fig, axes = common.figure(12, 7, ncols=2, nrows=2)
    colors = {"random": "tab:blue", "kcenter": "tab:orange", "favor": "tab:green"}
    for ax, (lab, (records, cap)) in zip(axes.flat, records_by_sigma.items()):
        for pol, c in colors.items():
            eps = common.episodes_of(records, pol)
            length = max(len(e["curves"]["accuracy"]) for e in eps)
            ys = np.stack([common.held(e["curves"]["accuracy"], length) for e in eps])
            ax.plot(np.arange(length), ys.mean(0), color=c, label=pol)
            ax.fill_between(np.arange(length), ys.min(0), ys.max(0), color=c, alpha=0.15, linewidth=0)
        ax.axhline(omega, color="black", linestyle="--", linewidth=1, label=f"Ω = {omega:g}")
        ax.set(title=f"σ = {lab}", xlabel="communication round", ylabel="global test accuracy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="lower right")
    fig.suptitle("Fashion-MNIST, 100 clients, K = 10: mean over seeds (band: min–max)")
    out.figure(fig, f"{NAME}_accuracy")


if __name__ == "__main__":
    common.run_cli(main, "favor_fmnist.py")
