"""AFL: rounds to a target accuracy for loss-valuation sampling (``afl``) against uniform sampling (``random``).

J. Goetz, K. Malik, D. Bui, S. Moon, H. Liu, A. Kumar, "Active Federated Learning", arXiv:1909.12641,
2019 (seed 001). docs/SPEC.md §6: loss-valuation sampling needs 20–70% fewer rounds than uniform sampling
for the same accuracy (the paper: Reddit and Sticker Intent data, 200 users per round, an LSTM).

    python experiments/afl_rounds.py --workers 2              # the run of docs/REPRODUCTION.md
    python experiments/afl_rounds.py --smoke                   # seconds: 8 clients, 3 rounds

Two non-IID federations of scikit-learn's digits (nothing to download), all clients available:
the ``default`` preset (20 clients, σ = 0.8, an MLP, 5 per round, target 90%) and McMahan's
pathological split (40 clients with 2 label shards each, 8 per round, target 85%). AFL keeps the
paper's α1 = 0.75, α2 = 0.01, α3 = 0.1. Every seed gives both policies the same federation, w_0 and
shuffles (common random numbers), so the per-seed difference in rounds is a paired comparison.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from experiments import common  # noqa: E402
from fedsel_eval import markdown  # noqa: E402
from fedsel_eval.stats import t_interval  # noqa: E402

NAME = "afl_rounds"
SEEDS = list(range(10))
#: (label, env config)
SETTINGS: List[Tuple[str, Dict[str, Any]]] = [
    ("digits, σ = 0.8, N = 20, K = 5, Ω = 90%",
     {"preset": "default", "system": {"availability": 1.0}, "max_rounds": 80}),
    ("digits, 2 shards per client, N = 40, K = 8, Ω = 85%",
     {"preset": "default", "num_clients": 40, "clients_per_round": 8, "partition": "shards",
      "partition_params": {"shards_per_client": 2}, "target_accuracy": 0.85, "system": {"availability": 1.0},
      "max_rounds": 120}),
]
SMOKE: List[Tuple[str, Dict[str, Any]]] = [
    ("smoke", {"preset": "tiny", "system": {"availability": 1.0}, "max_rounds": 3, "target_accuracy": 0.5}),
]


def main(argv: Sequence[str] = None) -> Path:
    """Run the experiment as ``argv`` says; return its folder."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = common.parser(NAME, __doc__.split("\n")[0]).parse_args(argv)
    clock, out = common.start(NAME, args)
    settings = SMOKE if args.smoke else SETTINGS
    seeds = args.seeds or ([0, 1] if args.smoke else SEEDS)
    progress = not args.no_progress

    rows, numbers, curves, all_records = [], {}, [], []
    for i, (label, env) in enumerate(settings):
        records, _, plan = common.evaluate(out.out / f"setting_{i}", env, ["random", "afl"], seeds,
                                           workers=args.workers, progress=progress, env_name=label)
        cap = plan.env_config["max_rounds"]
        all_records.append(records)
        rnd, afl = common.episodes_of(records, "random"), common.episodes_of(records, "afl")
        # paired per seed, an episode that never reached Ω counted at the cap (a lower bound for it)
        r_cap = np.array([e["metrics"]["rounds_to_target"] if e["reached"] else cap for e in rnd])
        a_cap = np.array([e["metrics"]["rounds_to_target"] if e["reached"] else cap for e in afl])
        change = 100.0 * (a_cap.mean() / r_cap.mean() - 1.0)  # negative: afl needs fewer rounds
        diff = t_interval((a_cap - r_cap).tolist())  # paired by seed, Student-t 95%
        faster = int(np.sum(a_cap < r_cap))
        slower = int(np.sum(a_cap > r_cap))
        rows.append([label, common.rounds_cell(rnd, cap), common.rounds_cell(afl, cap), diff.text("+.1f"),
                     f"{change:+.0f}%",
                     f"{faster} / {slower} / {len(seeds) - faster - slower}",
                     f"{np.mean([e['metrics']['final_accuracy'] for e in rnd]):.3f} / "
                     f"{np.mean([e['metrics']['final_accuracy'] for e in afl]):.3f}"])
        numbers[label] = {"cap": cap, "random_rounds": r_cap.tolist(), "afl_rounds": a_cap.tolist(),
                          "random_reached": [bool(e["reached"]) for e in rnd],
                          "afl_reached": [bool(e["reached"]) for e in afl], "change_in_mean_rounds_percent": change,
                          "afl_minus_random": {"mean": diff.mean, "lo": diff.lo, "hi": diff.hi, "n": diff.n},
                          # per episode, in seed order (#34: the table's final accuracies come from rows)
                          "random_final_accuracy": [e["metrics"]["final_accuracy"] for e in rnd],
                          "afl_final_accuracy": [e["metrics"]["final_accuracy"] for e in afl],
                          "federation_seed": plan.env_config.get("federation_seed")}
        curves.append((label, plan.env_config["target_accuracy"], rnd, afl))
    table = markdown.table(["federation", "random: rounds to Ω", "afl: rounds to Ω",
                             "afl − random, paired [95% CI]",
                             "afl's change in mean rounds (paper: −20% to −70%)", "seeds afl faster / slower / tied",
                             "final accuracy (random / afl)"], rows, align="lrrrrrr")
    note = (f"Rounds to the target Ω (mean ± std over seeds {seeds[0]}–{seeds[-1]}; common random numbers). "
            f"The change in mean rounds counts an episode that never reached Ω at its round cap.\n")
    _figure(out, curves)
    out.results({"settings": dict(settings), "seeds": seeds, "afl_params": afl_params(), "results": numbers})
    out.fragment("\n".join([note, table, common.wall_time_note(clock.seconds(), args.workers,
                                                                common.command_line("afl_rounds.py", argv),
                                                                common.episode_seconds(*all_records),
                                                                longest=out.invocation(
                                                                    clock.seconds(), common.command_line("afl_rounds.py", argv)))]))
    print((out.out / "table.md").read_text())
    return out.out


def afl_params() -> Dict[str, Any]:
    """The α's the ``afl`` policy ran with (the agent's defaults: the paper's α1 = 0.75, α2 = 0.01, α3 = 0.1)."""
    import inspect

    from agents.afl import AFLAgent

    d = {k: v.default for k, v in inspect.signature(AFLAgent.__init__).parameters.items() if k.startswith("alpha")}
    d["alpha2"] = 0.01 if d["alpha2"] is None else d["alpha2"]  # None: the paper's 0.01 (agents/afl.py)
    return d


def _figure(out: common.Outputs, curves: Sequence[Tuple[str, float, Any, Any]]) -> None:
    fig, axes = common.figure(6 * len(curves), 4.2, ncols=len(curves))
    for ax, (label, omega, rnd, afl) in zip(np.asarray(axes).reshape(-1), curves):
        for eps, name, c in ((rnd, "random", "tab:blue"), (afl, "afl", "tab:red")):
            length = max(len(e["curves"]["accuracy"]) for e in eps)
            ys = np.stack([common.held(e["curves"]["accuracy"], length) for e in eps])
            x = np.arange(length)
            ax.plot(x, ys.mean(0), color=c, label=f"{name} (mean)")
            ax.fill_between(x, ys.mean(0) - ys.std(0), ys.mean(0) + ys.std(0), color=c, alpha=0.15, linewidth=0)
        ax.axhline(omega, color="black", linestyle="--", linewidth=1, label=f"Ω = {omega:g}")
        ax.set(title=label, xlabel="communication round", ylabel="global test accuracy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="lower right")
    out.figure(fig, NAME)


if __name__ == "__main__":
    common.run_cli(main, "afl_rounds.py")
