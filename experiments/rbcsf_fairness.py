"""RBCS-F on the heterogeneous-system preset: round time, every client's participation rate, queue lengths.

T. Huang, W. Lin, W. Wu, L. He, K. Li, A. Y. Zomaya, "An Efficiency-boosting Client Selection Scheme
for Federated Learning with Fairness Guarantee", IEEE TPDS 32(7), 2021 (seed 004). SPEC §6: every
client's long-run participation rate is ≥ β while the average round time lies between FedCS's
(fastest, unfair) and random selection's; a larger V shortens training time and lengthens the queues
before they settle.

    python experiments/rbcsf_fairness.py --workers 2          # the run of docs/REPRODUCTION.md
    python experiments/rbcsf_fairness.py --smoke               # seconds: 8 clients, 6 rounds

The ``hetero`` preset (SPEC §3.6's system model with the public re-implementation's four client
classes, availability 0.8; 40 clients, m = 8 per round, digits, Dirichlet(0.5) labels) for a fixed
number of rounds (its 99% target is out of reach, so no episode stops early). RBCS-F runs with
β = 0.75·m/N = 0.15 (the re-implementation's share) and V ∈ ``VS``; FedCS picks the m fastest
estimated, random m uniform among the available. Round times, participation and accuracy come
from evaluate.py's library; the queue traces from the same env config and agent, read after each
round (``agents.rbcsf.RBCSFAgent.queues``), since an evaluation does not record agent internals.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from experiments import common  # noqa: E402

NAME = "rbcsf_fairness"
VS = [1.0, 10.0, 50.0]
ROUNDS = 300
SEEDS = [0, 1]
ENV: Dict[str, Any] = {"preset": "hetero", "max_rounds": ROUNDS}
SMOKE_ENV: Dict[str, Any] = {"preset": "hetero", "num_clients": 8, "clients_per_round": 2, "model": "logreg",
                             "samples_per_client": 20, "max_rounds": 6}


def queue_traces(env_cfg: Dict[str, Any], vs: Sequence[float], seed: int) -> Dict[float, Dict[str, List[float]]]:
    """Run RBCS-F for one episode per V and record its virtual queues after every round.

    :return: per V: ``total`` Σ_n Z_n, ``max`` max_n Z_n and ``round_time`` per round.
    """
    import agents
    from fedsel_env.config import make_config
    from fedsel_env.env import FedSelectEnv
    from fedsel_eval import agent_seed

    cfg = dict(env_cfg)
    preset = cfg.pop("preset", None)
    env = FedSelectEnv(config=make_config(cfg, preset=preset))
    traces = {}
    for v in vs:
        agent = agents.make("rbcsf", env.selection_spec, seed=agent_seed(seed), v=v)
        obs, _ = env.reset(seed=seed)
        total, largest, times = [], [], []
        done = False
        while not done:
            action, _ = agent.predict(obs, deterministic=True)
            obs, _, terminated, truncated, info = env.step(action)
            total.append(float(agent.queues.sum()))
            largest.append(float(agent.queues.max()))
            times.append(float(info["round_time"]))
            done = terminated or truncated
        traces[v] = {"total": total, "max": largest, "round_time": times, "beta": agent.beta}
    return traces


def main(argv: Sequence[str] = None) -> Path:
    """Run the experiment as ``argv`` says; return its folder."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = common.parser(NAME, __doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=None, help=f"rounds per episode (default {ROUNDS})")
    args = p.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        raise ValueError(f"--rounds = {args.rounds} is invalid: expected >= 1")
    clock, out = common.start(NAME, args)
    env = dict(SMOKE_ENV if args.smoke else ENV)
    if args.rounds is not None:
        env["max_rounds"] = args.rounds
    seeds = args.seeds or ([0] if args.smoke else SEEDS)
    progress = not args.no_progress

    policies = [f"rbcsf-V{v:g}=rbcsf:v={v:g}" for v in VS] + ["fedcs", "random"]
    records, _, plan = common.evaluate(out.out / "evaluation", env, policies, seeds, workers=args.workers,
                                       progress=progress, env_name="hetero")
    cfg = plan.env_config
    n, m = cfg["num_clients"], cfg["clients_per_round"]
    beta = 0.75 * m / n  # the agent's default (agents.rbcsf.DEFAULT_GUARANTEE_SHARE)
    rows, numbers, rates = [], {}, {}
    for p in plan.policies:
        eps = common.episodes_of(records, p.label)
        rate = np.stack([np.asarray(e["clients"]["participation"], dtype=np.float64) / e["metrics"]["rounds"]
                         for e in eps])  # (seeds, N)
        rates[p.label] = rate
        below = [int(np.sum(r < beta - 1e-12)) for r in rate]
        rows.append([p.label,
                     common.mean_std([e["metrics"]["mean_round_time"] for e in eps], ".2f"),
                     common.mean_std([e["metrics"]["sim_time"] for e in eps], ".0f"),
                     common.mean_std(rate.min(1).tolist(), ".3f"), common.mean_std(rate.max(1).tolist(), ".3f"),
                     common.mean_std([e["metrics"]["jain_index"] for e in eps], ".3f"),
                     f"{np.mean(below):.1f}",
                     common.mean_std([e["metrics"]["final_accuracy"] for e in eps], ".3f")])
        numbers[p.label] = {"mean_round_time": [e["metrics"]["mean_round_time"] for e in eps],
                            "sim_time": [e["metrics"]["sim_time"] for e in eps],
                            "participation_rate": rate.tolist(), "clients_below_beta": below,
                            "final_accuracy": [e["metrics"]["final_accuracy"] for e in eps]}
    table = common.md_table(["policy", "mean round time (s)", f"time for {cfg['max_rounds']} rounds (s)",
                             "min participation rate", "max participation rate", "Jain's index",
                             f"clients below β = {beta:.2f}", "final accuracy"], rows)
    t0 = clock.seconds()
    traces = queue_traces({**env}, VS, seeds[0])
    trace_seconds = clock.seconds() - t0
    numbers["queues"] = {f"V={v:g}": t for v, t in traces.items()}
    qrows = []
    for v, t in traces.items():
        # Z_T,n >= β·T − (rounds n took part in), so a client's rate is at least β − Z_T,n / T
        ep0 = common.episodes_of(records, f"rbcsf-V{v:g}")[0]
        rounds_played = len(t["total"])
        qrows.append([f"V = {v:g}", f"{max(t['total']):.1f}", f"{np.mean(t['total'][len(t['total']) // 2:]):.1f}",
                      f"{max(t['max']):.2f}", f"{t['max'][-1]:.2f}",
                      f"{beta - t['max'][-1] / rounds_played:.3f}",
                      f"{np.min(ep0['clients']['participation']) / ep0['metrics']['rounds']:.3f}",
                      f"{np.mean(t['round_time']):.2f}"])
    qtable = common.md_table(["RBCS-F", "largest total queue Σ Z", "mean total queue, second half",
                              "largest single queue", "largest queue at the end, Z_max(T)",
                              "β − Z_max(T)/T (floor it implies)", "min participation rate (seed 0)",
                              "mean round time (s)"], qrows)
    note = (f"`hetero` preset: N = {n} clients in four speed classes, m = {m} per round, availability "
            f"{cfg['system']['availability']}, {cfg['max_rounds']} rounds, seeds {seeds} (mean ± std over seeds). "
            f"Participation rate = rounds a client took part in / rounds; β = 0.75·m/N = {beta:.2f}.\n")
    _figures(out, rates, traces, beta, plan)
    out.results({"env": cfg, "seeds": seeds, "beta": beta, "results": numbers})
    out.fragment("\n".join([note, table, f"\nVirtual queues of RBCS-F (seed {seeds[0]}):\n", qtable,
                            common.wall_time_note(clock.seconds(), args.workers,
                                                  common.command_line("rbcsf_fairness.py", argv),
                                                  common.episode_seconds(records) + trace_seconds,
                                                  "its episodes (single-process time, summed from their records) plus the "
                                                  "queue traces",
                                                  longest=out.invocation(
                                                      clock.seconds(), common.command_line("rbcsf_fairness.py", argv)))]))
    print((out.out / "table.md").read_text())
    return out.out


def _figures(out: common.Outputs, rates: Dict[str, np.ndarray], traces: Dict[float, Dict[str, List[float]]],
             beta: float, plan: Any) -> None:
    fig, axes = common.figure(13, 4.5, ncols=2)
    ax1, ax2 = axes[0, 0], axes[0, 1]
    for label, rate in rates.items():
        mean = rate.mean(0)
        ax1.plot(np.arange(mean.size), mean, marker="o", markersize=3, linewidth=1, label=label)
    ax1.axhline(beta, color="black", linestyle="--", linewidth=1, label=f"β = {beta:.2f}")
    ax1.set(title="Participation rate of every client (mean over seeds)", xlabel="client index",
            ylabel="rounds participated / rounds")
    for v, t in traces.items():
        ax2.plot(np.arange(1, len(t["total"]) + 1), t["total"], label=f"V = {v:g}")
    ax2.set(title="RBCS-F: total virtual queue length Σ_n Z_n", xlabel="communication round",
            ylabel="Σ Z (rounds owed)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    out.figure(fig, NAME)


if __name__ == "__main__":
    try:
        main()
    except ValueError as e:
        sys.exit(f"rbcsf_fairness.py: error: {e}")
