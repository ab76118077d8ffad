"""q-FFL on Synthetic(1, 1): the distribution of per-device accuracy for q ∈ {0, 0.1, 1, 5}.

T. Li, M. Sanjabi, A. Beirami, V. Smith, "Fair Resource Allocation in Federated Learning", ICLR 2020
(seed 000). SPEC §6: on Synthetic(1, 1) with 100 devices, q > 0 lowers the variance of per-device
accuracy at about the same mean accuracy as q = 0 (FedAvg).

    python experiments/qffl_synthetic.py --workers 2        # the scaled run of docs/REPRODUCTION.md
    python experiments/qffl_synthetic.py --smoke             # seconds: 12 devices, 3 rounds

The paper's protocol: devices sampled with probability ∝ n_k (``random_nk``), q-FedAvg (``qfedavg``,
Algorithm 2, 1/L = η) for each q, logistic regression, batch 10, one local epoch, K = 10; the
per-device test accuracies of the final global model. Its public code runs Synthetic for 20,000
rounds; here each q gets ``ROUNDS`` rounds and device sizes are capped (``max_samples``), because a
round costs ~0.3 s on this machine and the lognormal sizes reach thousands of samples (a batched
round runs as long as its largest client). The selection-side variant — the ``qffl`` agent, sampling
∝ n_k · F_k^q with the plain average (q-FedAvg at q = 0) — is run beside it.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from experiments import common  # noqa: E402

NAME = "qffl_synthetic"
QS = [0.0, 0.1, 1.0, 5.0]
AGENT_QS = [1.0, 5.0]
ROUNDS = 200
SEEDS = [0]
SCALE: Dict[str, Any] = {
    "preset": "synthetic",                                  # Synthetic(1,1), 100 devices, logreg, B = 10, K = 10
    "dataset_params": {"alpha": 1.0, "beta": 1.0, "max_samples": 500},  # paper: no cap (sizes up to ~10^4)
    "local_epochs": 1, "lr": 0.1,
    "system": {"availability": 1.0},
    "target_accuracy": 1.0,                                 # never stops early: a fixed number of rounds
}
SMOKE: Dict[str, Any] = {**SCALE, "num_clients": 12, "clients_per_round": 3,
                         "dataset_params": {"alpha": 1.0, "beta": 1.0, "max_samples": 60}}


def main(argv: Sequence[str] = None) -> Path:
    """Run the experiment as ``argv`` says; return its folder."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = common.parser(NAME, __doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=None, help=f"rounds per episode (default {ROUNDS}; the paper: 20000)")
    p.add_argument("--max-samples", type=int, default=None,
                   help="cap on a device's training samples (default 500; 0 = no cap, as the paper)")
    args = p.parse_args(argv)
    clock, out = common.start(NAME, args)
    rounds = args.rounds if args.rounds is not None else 3 if args.smoke else ROUNDS
    if rounds < 1:
        raise ValueError(f"--rounds = {rounds} is invalid: expected >= 1")
    seeds = args.seeds or SEEDS
    env = {**(SMOKE if args.smoke else SCALE), "max_rounds": rounds}
    if args.max_samples is not None:
        if args.max_samples < 0:
            raise ValueError(f"--max-samples = {args.max_samples} is invalid: expected >= 0 (0 = no cap)")
        env["dataset_params"] = {**env["dataset_params"], "max_samples": args.max_samples or None}
    progress = not args.no_progress

    backends = [f"qfedavg:q={q:g}" for q in QS]
    rec_a, rows_a, plan_a = common.evaluate(out.out / "qfedavg", env, ["random_nk"], seeds, aggregators=backends,
                                       workers=args.workers, progress=progress, env_name="synthetic(1,1)")
    agents = [f"qffl:q={q:g}" for q in AGENT_QS]
    rec_b, rows_b, plan_b = common.evaluate(out.out / "qffl_agent", env, agents, seeds, aggregators=["qfedavg:q=0"],
                                       workers=args.workers, progress=progress, env_name="synthetic(1,1)")

    series: List[Dict[str, Any]] = []
    for q, b in zip(QS, [b.label for b in plan_a.backends]):
        series.append({"label": f"q = {q:g}", "selection": "random_nk (∝ n_k)", "aggregation": f"q-FedAvg, q = {q:g}",
                       "episodes": common.episodes_of(rec_a, "random_nk", b)})
    for q, a in zip(AGENT_QS, [p.label for p in plan_b.policies]):
        series.append({"label": f"qffl agent q = {q:g}", "selection": f"qffl (∝ n_k·F_k^{q:g})",
                       "aggregation": "q-FedAvg, q = 0 (plain average)", "episodes": common.episodes_of(rec_b, a)})

    keys = ["acc_mean", "acc_worst10", "acc_best10", "acc_var_1e4", "final_accuracy"]
    table_rows, numbers = [], {}
    for s in series:
        eps = s["episodes"]
        vals = {k: [e["metrics"][k] for e in eps] for k in keys}
        vals["diverged"] = sum(bool(e["diverged"]) for e in eps)
        numbers[s["label"]] = {**vals, "client_accuracy": [e["clients"]["accuracy"] for e in eps]}
        table_rows.append([s["selection"], s["aggregation"],
                           common.mean_std([100 * v for v in vals["acc_mean"]], ".1f"),
                           common.mean_std([100 * v for v in vals["acc_worst10"]], ".1f"),
                           common.mean_std([100 * v for v in vals["acc_best10"]], ".1f"),
                           common.mean_std(vals["acc_var_1e4"], ".0f"),
                           common.mean_std([100 * v for v in vals["final_accuracy"]], ".1f"),
                           f"{vals['diverged']}/{len(eps)}"])
    table = common.md_table(["selection", "aggregation", "mean acc (%)", "worst 10% (%)", "best 10% (%)",
                             "variance (×10⁴)", "global acc (%)", "diverged"], table_rows, align="llrrrrrr")
    base = numbers["q = 0"]
    comparisons = []
    for q in QS[1:]:
        s = numbers[f"q = {q:g}"]
        comparisons.append(f"q = {q:g} against q = 0: variance ×{np.mean(s['acc_var_1e4']) / max(np.mean(base['acc_var_1e4']), 1e-12):.2f}, "
                           f"mean accuracy {100 * (np.mean(s['acc_mean']) - np.mean(base['acc_mean'])):+.1f} points, "
                           f"worst 10% {100 * (np.mean(s['acc_worst10']) - np.mean(base['acc_worst10'])):+.1f} points")
    cfg_note = (f"Per-device test accuracy of the final global model after {rounds} rounds (mean ± std over "
                f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''}; variance of the per-device accuracies as "
                f"fractions, ×10⁴, as the paper reports it). Synthetic(1, 1), {env.get('num_clients', 100)} devices, "
                f"device sizes capped at {env['dataset_params']['max_samples'] or 'no cap'}, logistic regression, "
                f"E = {env['local_epochs']}, B = 10, η = {env['lr']} (1/L = η), K = 10 per round.\n")
    lines = [cfg_note, table, "\n" + "; ".join(comparisons) + ".\n"]
    _figures(out, series, rounds)
    out.results({"env": env, "rounds": rounds, "seeds": seeds, "series": numbers})
    lines.append(common.wall_time_note(clock.seconds(), args.workers, common.command_line("qffl_synthetic.py", argv),
                                       common.episode_seconds(rec_a, rec_b),
                                       longest=out.invocation(clock.seconds(), common.command_line("qffl_synthetic.py", argv))))
    out.fragment("\n".join(lines))
    print((out.out / "table.md").read_text())
    return out.out


def _figures(out: common.Outputs, series: Sequence[Dict[str, Any]], rounds: int) -> None:
    """Per-device accuracy distributions (the paper's Figure 1 style) and accuracy against round."""
    fig, axes = common.figure(12, 4.5, ncols=2)
    ax1, ax2 = axes[0, 0], axes[0, 1]
    bins = np.linspace(0, 1, 21)
    for s in series:
        acc = np.concatenate([np.asarray(e["clients"]["accuracy"]) for e in s["episodes"]])
        hist, _ = np.histogram(acc, bins=bins)
        ax1.step(bins[:-1] + 0.025, hist / max(len(s["episodes"]), 1), where="mid", label=s["label"])
        length = max(len(e["curves"]["accuracy"]) for e in s["episodes"])
        ys = np.stack([common.held(e["curves"]["accuracy"], length) for e in s["episodes"]])
        ax2.plot(np.arange(length), ys.mean(0), label=s["label"])
    ax1.set(title=f"Per-device test accuracy after {rounds} rounds", xlabel="device test accuracy",
            ylabel="devices (per seed)")
    ax2.set(title="Global test accuracy by round", xlabel="communication round", ylabel="global test accuracy")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    out.figure(fig, NAME)


if __name__ == "__main__":
    try:
        main()
    except ValueError as e:
        sys.exit(f"qffl_synthetic.py: error: {e}")
