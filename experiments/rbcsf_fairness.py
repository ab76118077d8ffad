"""RBCS-F on the heterogeneous-system preset in the long run: round time, participation, queues, accuracy.

T. Huang, W. Lin, W. Wu, L. He, K. Li, A. Y. Zomaya, "An Efficiency-boosting Client Selection Scheme
for Federated Learning with Fairness Guarantee", IEEE TPDS 32(7), 2021 (seed 004). docs/SPEC.md §6: every
client's long-run participation rate is ≥ β while the average round time lies between FedCS's
(fastest, unfair) and random selection's; a larger V shortens training time and lengthens the queues
before they settle. The paper's Fig. 5 adds: a fairer selection (larger β) gives a higher final accuracy.

    python experiments/rbcsf_fairness.py --workers 2          # the run of docs/REPRODUCTION.md (~45 min here)
    python experiments/rbcsf_fairness.py --smoke               # seconds: 8 clients, 6 rounds

The ``hetero`` preset (docs/SPEC.md §3.6's system model with the public re-implementation's four client
classes, availability 0.8; 40 clients, m = 8 per round, digits, Dirichlet(0.5) labels) for ``ROUNDS``
rounds (its 99% target is out of reach, so no episode stops early). Two sweeps of RBCS-F:

- **V** ∈ ``VS`` at β = 0.75·m/N = 0.15 (the re-implementation's share);
- **β** = share·m/N for share ∈ ``BETA_SHARES`` (0.05, 0.10, 0.20; 0.20 = m/N, the largest feasible, is
  every client's equal share) at V = ``V_BETA``, beside the V sweep's β = 0.15;

and FedCS (the m fastest estimated) and random (m uniform among the available) as the two ends.
Round times, participation and accuracy come from evaluate.py's library. The virtual queues are
replayed from each episode's recorded selections (``curves.selected``) with the agent's own update
(``agents.rbcsf.update_queues``): RBCS-F updates its queues with exactly the set it selects, so the
replay is its queues (tests/test_experiments.py checks this against the agent's). "Final accuracy" is
the global test accuracy averaged over the last ``TAIL`` of the rounds (the per-round value moves by
about a point from round to round). Differences between policies are paired by seed, with Student-t 95%
intervals (``fedsel_eval.stats.t_interval``) over the ``SEEDS``.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from experiments import common  # noqa: E402
from fedsel_eval import markdown  # noqa: E402
from fedsel_eval.stats import t_interval  # noqa: E402

NAME = "rbcsf_fairness"
VS = [0.0, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0]   # at β = 0.75·m/N
DEFAULT_SHARE = 0.75                               # agents.rbcsf.DEFAULT_GUARANTEE_SHARE
BETA_SHARES = [0.25, 0.5, 1.0]                     # β = share·m/N, at V = V_BETA
V_BETA = 10.0
ROUNDS = 3000
SEEDS = [0, 1, 2, 3, 4, 5]
TAIL = 0.05                                        # final accuracy: mean over the last 5% of the rounds
ENV: Dict[str, Any] = {"preset": "hetero", "max_rounds": ROUNDS}
SMOKE_ENV: Dict[str, Any] = {"preset": "hetero", "num_clients": 8, "clients_per_round": 2, "model": "logreg",
                             "samples_per_client": 20, "max_rounds": 6}
SMOKE_VS, SMOKE_SHARES = [1.0, 10.0], [0.5]


def v_label(v: float) -> str:
    return f"rbcsf-V{v:g}"


def beta_label(share: float, m: int, n: int) -> str:
    return f"rbcsf-V{V_BETA:g}-b{share * m / n:.2f}"


def policy_specs(vs: Sequence[float], shares: Sequence[float], m: int, n: int) -> List[Tuple[str, str, float]]:
    """(``--policy`` value, label, β) of every RBCS-F setting, then FedCS and random (β = NaN)."""
    out = [(f"{v_label(v)}=rbcsf:v={v:g}", v_label(v), DEFAULT_SHARE * m / n) for v in vs]
    out += [(f"{beta_label(s, m, n)}=rbcsf:v={V_BETA:g},beta={s * m / n!r}", beta_label(s, m, n), s * m / n)
            for s in shares]
    return out + [("fedcs", "fedcs", float("nan")), ("random", "random", float("nan"))]


def replay_queues(selected: Sequence[Sequence[int]], n: int, beta: float) -> np.ndarray:
    """RBCS-F's virtual queues Z_t after every round t = 1..T, from the clients selected each round.

    :return: shape (T, N).
    """
    from agents.rbcsf import update_queues

    z = np.zeros(n)
    out = np.zeros((len(selected), n))
    for t, chosen in enumerate(selected):
        z = update_queues(z, np.asarray(chosen, dtype=np.int64), beta)
        out[t] = z
    return out


def tail_accuracy(record: Mapping[str, Any], tail: float = TAIL) -> float:
    """The global accuracy averaged over the last ``tail`` share of the rounds (at least one round)."""
    acc = np.asarray(record["curves"]["accuracy"][1:], dtype=np.float64)
    return float(acc[-max(1, int(round(tail * acc.size))):].mean())


def _paired(a: Sequence[float], b: Sequence[float]) -> Any:
    return t_interval([x - y for x, y in zip(a, b)])


def main(argv: Sequence[str] = None) -> Path:
    """Run the experiment as ``argv`` says; return its folder."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = common.parser(NAME, __doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=None, help=f"rounds per episode (default {ROUNDS})")
    args = p.parse_args(argv)
    if args.rounds is not None and args.rounds < 4:
        raise ValueError(f"--rounds = {args.rounds} is invalid: expected >= 4 (the queue summary uses quarters)")
    clock, out = common.start(NAME, args)
    env = dict(SMOKE_ENV if args.smoke else ENV)
    if args.rounds is not None:
        env["max_rounds"] = args.rounds
    seeds = args.seeds or ([0, 1] if args.smoke else SEEDS)
    vs, shares = (SMOKE_VS, SMOKE_SHARES) if args.smoke else (VS, BETA_SHARES)
    progress = not args.no_progress

    from fedsel_env.config import make_config

    probe = dict(env)
    probe_cfg = make_config({k: v for k, v in probe.items() if k != "preset"}, preset=probe.get("preset"))
    n, m = probe_cfg["num_clients"], probe_cfg["clients_per_round"]
    specs = policy_specs(vs, shares, m, n)
    records, _, plan = common.evaluate(out.out / "evaluation", env, [s for s, _, _ in specs], seeds,
                                       workers=args.workers, progress=progress, env_name="hetero")
    cfg = plan.env_config
    rounds = cfg["max_rounds"]
    eps = {label: sorted(common.episodes_of(records, label), key=lambda e: e["seed"]) for _, label, _ in specs}
    numbers: Dict[str, Any] = {}
    rows, qrows, rates = [], [], {}
    traces: Dict[str, Dict[str, List[float]]] = {}
    for _, label, beta in specs:
        es = eps[label]
        rate = np.stack([np.asarray(e["clients"]["participation"], dtype=np.float64) / e["metrics"]["rounds"]
                         for e in es])  # (seeds, N)
        rates[label] = rate
        ref_beta = beta if np.isfinite(beta) else DEFAULT_SHARE * m / n  # FedCS and random against β = 0.15
        below = [int(np.sum(r < ref_beta - 1e-12)) for r in rate]
        acc = [tail_accuracy(e) for e in es]
        numbers[label] = {"beta": beta if np.isfinite(beta) else None,
                          "mean_round_time": [e["metrics"]["mean_round_time"] for e in es],
                          "sim_time": [e["metrics"]["sim_time"] for e in es],
                          "participation_rate": rate.tolist(), "clients_below_beta": below,
                          "jain_index": [e["metrics"]["jain_index"] for e in es],
                          "final_accuracy": acc,
                          "acc_worst10": [e["metrics"]["acc_worst10"] for e in es]}
        rows.append([label, "—" if not np.isfinite(beta) else f"{beta:.2f}",
                     common.mean_std(numbers[label]["mean_round_time"], ".2f"),
                     common.mean_std(numbers[label]["sim_time"], ".0f"),
                     common.mean_std(rate.min(1).tolist(), ".3f"), common.mean_std(rate.max(1).tolist(), ".3f"),
                     common.mean_std(numbers[label]["jain_index"], ".3f"), f"{np.mean(below):.1f}",
                     common.mean_std(acc, ".3f"), common.mean_std(numbers[label]["acc_worst10"], ".3f")])
        if not np.isfinite(beta):
            continue
        z = np.stack([replay_queues(e["curves"]["selected"], n, beta) for e in es])  # (seeds, T, N)
        zmax, ztot = z.max(2), z.sum(2)                                              # (seeds, T)
        q = rounds // 4
        growth = zmax[:, 3 * q:].mean(1) - zmax[:, 2 * q:3 * q].mean(1)  # 4th quarter − 3rd quarter
        at = {f: zmax[:, min(rounds, max(1, int(f * rounds))) - 1] for f in (0.1, 0.5, 1.0)}
        traces[label] = {"max": zmax.mean(0).tolist(), "total": ztot.mean(0).tolist()}
        numbers[label]["queues"] = {"zmax_at_0.1T": at[0.1].tolist(), "zmax_at_0.5T": at[0.5].tolist(),
                                    "zmax_at_T": at[1.0].tolist(), "zmax_growth_q4_minus_q3": growth.tolist(),
                                    "zmax_largest": zmax.max(1).tolist()}
        qrows.append([label, f"{beta:.2f}", f"{at[0.1].mean():.2f}", f"{at[0.5].mean():.2f}",
                      f"{at[1.0].mean():.2f}", f"{zmax.max(1).mean():.2f}", t_interval(growth).text("+.2f"),
                      f"{beta - at[1.0].mean() / rounds:.3f}", f"{rate.min(1).mean():.3f}"])
    numbers["mean_queue_traces"] = traces
    table = markdown.table(["policy", "β", "mean round time (s)", f"time for {rounds} rounds (s)",
                             "min participation rate", "max participation rate", "Jain's index",
                             "clients below β", f"final accuracy (last {TAIL:.0%})", "worst-10% client accuracy"],
                            rows)
    qtable = markdown.table(["RBCS-F", "β", f"Z_max at round {max(1, int(0.1 * rounds))}",
                              f"Z_max at round {rounds // 2}", f"Z_max at round {rounds}", "largest Z_max",
                              "Z_max: 4th-quarter mean − 3rd-quarter mean [95% CI]",
                              "β − Z_max(T)/T (floor it implies)", "min participation rate"], qrows)
    # the claims, paired by seed
    rt = {l: numbers[l]["mean_round_time"] for _, l, _ in specs}
    acc = {l: numbers[l]["final_accuracy"] for _, l, _ in specs}
    ref = v_label(V_BETA) if V_BETA in vs else specs[0][1]
    crows = []
    for _, label, _ in specs:
        if label in ("fedcs", "random"):
            continue
        crows.append([label, _paired(rt[label], rt["fedcs"]).text("+.2f"), _paired(rt[label], rt["random"]).text("+.2f"),
                      _paired(acc[label], acc["fedcs"]).text("+.3f"), _paired(acc[label], acc["random"]).text("+.3f")])
    crows.append(["random", _paired(rt["random"], rt["fedcs"]).text("+.2f"), "—",
                  _paired(acc["random"], acc["fedcs"]).text("+.3f"), "—"])
    ctable = markdown.table(["policy", "Δ round time vs FedCS (s)", "Δ round time vs random (s)",
                              "Δ final accuracy vs FedCS", "Δ final accuracy vs random"], crows)
    fair = [beta_label(s, m, n) for s in shares]
    by_beta = sorted([(DEFAULT_SHARE * m / n, ref)] + [(s * m / n, beta_label(s, m, n)) for s in shares])
    lo_b, hi_b = by_beta[0][1], by_beta[-1][1]
    numbers["claims"] = {
        "reference": ref, "fairest": hi_b, "least_fair": lo_b,
        "acc_fairest_minus_least_fair": _paired(acc[hi_b], acc[lo_b]).__dict__,
        "round_time_fairest_minus_least_fair": _paired(rt[hi_b], rt[lo_b]).__dict__,
        "acc_random_minus_fedcs": _paired(acc["random"], acc["fedcs"]).__dict__,
        "round_time_largest_v_minus_smallest_v": _paired(rt[v_label(max(vs))], rt[v_label(min(vs))]).__dict__,
    }
    claim_text = (f"Fairest minus least fair β at V = {V_BETA:g} ({hi_b} − {lo_b}): final accuracy "
                  f"{_paired(acc[hi_b], acc[lo_b]).text('+.3f')}, mean round time "
                  f"{_paired(rt[hi_b], rt[lo_b]).text('+.2f')} s. Largest minus smallest V ({v_label(max(vs))} − "
                  f"{v_label(min(vs))}): mean round time {_paired(rt[v_label(max(vs))], rt[v_label(min(vs))]).text('+.2f')} s. "
                  f"Random minus FedCS: final accuracy {_paired(acc['random'], acc['fedcs']).text('+.3f')}.\n")
    note = (f"`hetero` preset: N = {n} clients in four speed classes, m = {m} per round, availability "
            f"{cfg['system']['availability']}, {rounds} rounds, seeds {seeds} (mean ± std over seeds; differences "
            f"paired by seed with Student-t 95% intervals). Participation rate = rounds a client took part in / "
            f"rounds; RBCS-F's β is each row's (FedCS and random are counted against β = "
            f"{DEFAULT_SHARE * m / n:.2f}); final accuracy = global test accuracy averaged over the last "
            f"{TAIL:.0%} of the rounds. V sweep at β = 0.75·m/N; β sweep at V = {V_BETA:g}.\n")
    _figures(out, rates, traces, eps, specs, m, n)
    out.results({"env": cfg, "seeds": seeds, "rounds": rounds, "results": numbers})
    out.fragment("\n".join([note, table, "\nThe claims, paired by seed:\n", ctable, "", claim_text,
                            f"\nVirtual queues of RBCS-F (mean over the seeds; Z_max = the largest client's queue):\n",
                            qtable,
                            common.wall_time_note(clock.seconds(), args.workers,
                                                  common.command_line("rbcsf_fairness.py", argv),
                                                  common.episode_seconds(records),
                                                  longest=out.invocation(
                                                      clock.seconds(), common.command_line("rbcsf_fairness.py", argv)))]))
    print((out.out / "table.md").read_text())
    return out.out


def _figures(out: common.Outputs, rates: Dict[str, np.ndarray], traces: Dict[str, Dict[str, List[float]]],
             eps: Mapping[str, Sequence[Mapping[str, Any]]], specs: Sequence[Tuple[str, str, float]],
             m: int, n: int) -> None:
    """Participation of every client; the largest queue over the rounds (V sweep, β sweep); accuracy
    against simulated time."""
    from matplotlib import colormaps

    fig, axes = common.figure(13, 9, ncols=2, nrows=2)
    ax1, ax2, ax3, ax4 = axes[0, 0], axes[0, 1], axes[1, 0], axes[1, 1]
    cmap = colormaps["tab10"]
    rbcsf_labels = [label for _, label, beta in specs if np.isfinite(beta)]
    color = {label: cmap(i % 10) for i, label in enumerate(rbcsf_labels)}
    color.update({"fedcs": "black", "random": "0.55"})
    style = {label: (":" if "-b" in label else "-") for label in rbcsf_labels}
    style.update({"fedcs": "--", "random": "--"})
    for label, rate in rates.items():
        mean = rate.mean(0)
        ax1.plot(np.arange(mean.size), np.sort(mean), marker="o", markersize=2, linewidth=1, label=label,
                 color=color[label], linestyle=style[label])
    ax1.axhline(DEFAULT_SHARE * m / n, color="black", linestyle="--", linewidth=1,
                label=f"β = {DEFAULT_SHARE * m / n:.2f}")
    ax1.set(title="Participation rate of every client, sorted (mean over seeds)", xlabel="clients, sorted",
            ylabel="rounds participated / rounds")
    betas = {label: beta for _, label, beta in specs}
    for label, t in traces.items():
        ax = ax3 if "-b" in label else ax2
        ax.plot(np.arange(1, len(t["max"]) + 1), t["max"], linewidth=1, label=f"{label} (β {betas[label]:.2f})",
                color=color[label])
    ax2.set(title="RBCS-F, V sweep: largest virtual queue Z_max", xlabel="communication round",
            ylabel="Z_max (rounds owed)", xscale="log")
    ax3.set(title=f"RBCS-F, β sweep at V = {V_BETA:g}: largest virtual queue", xlabel="communication round",
            ylabel="Z_max (rounds owed)", xscale="log")
    for label, es in eps.items():
        clock = np.mean([np.asarray(e["curves"]["clock"]) for e in es], axis=0)
        accs = np.mean([np.asarray(e["curves"]["accuracy"], dtype=np.float64) for e in es], axis=0)
        k = max(1, len(accs) // 150)  # a running mean over ~1/150 of the run, so the curves can be told apart
        smooth = np.convolve(accs, np.ones(k) / k, mode="valid")
        ax4.plot(clock[k - 1:], smooth, linewidth=1, label=label, color=color[label], linestyle=style[label])
    ax4.set(title="Global accuracy against simulated time\n(mean over seeds, running mean)",
            xlabel="simulated time (s)", ylabel="test accuracy", xscale="log")
    for ax in (ax1, ax2, ax3, ax4):
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small")
    out.figure(fig, NAME)


if __name__ == "__main__":
    common.run_cli(main, "rbcsf_fairness.py")
