"""q-FFL on Synthetic(1, 1) at the paper's scale: per-device accuracy for q ∈ {0, 0.1, 1, 2, 5}, in resumable chunks.

T. Li, M. Sanjabi, A. Beirami, V. Smith, "Fair Resource Allocation in Federated Learning", ICLR 2020
(seed 000). docs/SPEC.md §6: on Synthetic(1, 1) with 100 devices, q > 0 lowers the variance of per-device
accuracy at about the same mean accuracy as q = 0 (FedAvg).

    python experiments/qffl_synthetic.py --max-minutes 110 --workers 2   # a piece of the grid; commit after
    python experiments/qffl_synthetic.py --max-minutes 0                 # only re-summarise what is finished
    python experiments/qffl_synthetic.py --smoke                         # seconds: 12 devices, 4 rounds

The paper's algorithm: devices sampled with probability ∝ n_k (``random_nk``), q-FedAvg (``qfedavg``,
Algorithm 2, L = 1/η), logistic regression, batch 10, one local epoch, K = 10, for the public code's
20,000 rounds, with device sizes as generated (no cap; docs/REPRODUCTION.md §2 says why); beside it
q-FedSGD (``qfedsgd``, Algorithm 1: one full-batch gradient per device). Each (algorithm, q, seed) is one
run of :mod:`fedsel_eval.chunked`: it checkpoints every ``--checkpoint-every`` rounds, stops cleanly at
``--max-minutes`` and continues bit for bit from its checkpoint at the next invocation. As each run
pauses or finishes, ``experiments/results/qffl_synthetic_progress.json`` (committed) records its rounds,
time, the commit of each chunk and, once finished, its per-device accuracies; the table is made from
every finished run of the settings there, whichever invocation ran it.

Local training (issue #20): q-FedAvg's local SGD of the logistic regression (up to ~445 minibatch steps a
round for the largest device) runs in the trainer's closed-form path for single-``nn.Linear`` models
(``fedsel_env/sim/linear_sgd.py``), added after the q-FedSGD runs had finished and before any q-FedAvg run
started. The trainer takes it by itself on the CPU because it gives the vmapped autograd path's weights
bit for bit (``tests/test_linear_sgd.py``): no config field, so every run's checkpoint key
(``chunked.RunSpec.key``) and the progress file's setting are unchanged, a checkpointed run resumes as
before, and the finished q-FedSGD runs stand as they are (their rounds use ``full_gradients``, which is
untouched; their reset's profiling round gives the same models either way). What it changes is time:
q-FedAvg's "s / round" column measures the closed-form path: 0.042 s a round against 0.83 s with the
vmapped path, 20× (200 interleaved rounds of this PAPER config under load average 11 on 2 cores,
``bench/linear_fast_path.py``; docs/PERFORMANCE.md), at that load a 20,000-round run takes ~14 minutes
instead of ~4.6 hours.
"""
from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from experiments import common  # noqa: E402
from experiments.records_of import QFFL_METRICS  # noqa: E402
from fedsel_eval import chunked  # noqa: E402
from fedsel_eval import markdown  # noqa: E402
from fedsel_eval.stats import t_interval  # noqa: E402

NAME = "qffl_synthetic"
QS = [0.0, 0.1, 1.0, 2.0, 5.0]
SEEDS = [0, 1, 2]
ROUNDS = 20000                  # the public code's rounds for Synthetic
CHECKPOINT_EVERY = 500          # rounds between checkpoints (a crash loses at most this many)
EVAL_EVERY = 100                # rounds between curve points (the last round is always evaluated)
PAPER: Dict[str, Any] = {
    "preset": "synthetic",      # Synthetic(1,1), 100 devices, logreg, B = 10, K = 10
    "dataset_params": {"alpha": 1.0, "beta": 1.0, "max_samples": None},   # sizes as generated, as the paper
    "local_epochs": 1, "lr": 0.1,
    "system": {"availability": 1.0},
    "target_accuracy": 1.0,     # never stops early: a fixed number of rounds
    "eval_every": EVAL_EVERY,
    "track_improvement": False,  # the improved-participant share is not reported here: one forward pass saved
}
SMOKE: Dict[str, Any] = {**PAPER, "num_clients": 12, "clients_per_round": 3, "eval_every": 2,
                         "dataset_params": {"alpha": 1.0, "beta": 1.0, "max_samples": 60}}
SMOKE_QS, SMOKE_ROUNDS, SMOKE_CHECKPOINT = [0.0, 1.0], 4, 2


@dataclass(frozen=True)
class Algorithm:
    """How one algorithm of the grid selects and aggregates at a given q."""

    label: str
    selection: str
    policy: str                # a --policy value; {q} is filled in
    aggregator: str            # an aggregator name
    aggregator_q: Optional[float] = None  # a fixed q for the aggregator (None: the run's q)

    def env(self, base: Mapping[str, Any], q: float) -> Dict[str, Any]:
        agg_q = q if self.aggregator_q is None else self.aggregator_q
        return {**base, "aggregator": self.aggregator, "aggregator_params": {"q": agg_q}}


ALGORITHMS: Dict[str, Algorithm] = {
    "qfedavg": Algorithm("q-FedAvg", "random_nk (∝ n_k)", "random_nk", "qfedavg"),
    "qfedsgd": Algorithm("q-FedSGD", "random_nk (∝ n_k)", "random_nk", "qfedsgd"),
    # the suite's selection-side variant (sampling ∝ n_k·F_k^q, plain average): not in the default grid
    "qffl_agent": Algorithm("qffl agent", "qffl (∝ n_k·F_k^q)", "qffl:q={q:g}", "qfedavg", aggregator_q=0.0),
}
DEFAULT_ALGORITHMS = ["qfedavg", "qfedsgd"]


def run_id(algorithm: str, q: float, seed: int) -> str:
    return f"{algorithm} q={q:g} seed={seed}"


def settings_id(rounds: int, max_samples: Optional[int], smoke: bool) -> str:
    """The progress file's key for one setting: runs of other settings are kept apart."""
    return f"{'smoke ' if smoke else ''}rounds={rounds} max_samples={max_samples or 'none'}"


def main(argv: Sequence[str] = None) -> Path:
    """Run (a piece of) the grid as ``argv`` says, then tabulate every finished run; return the folder."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = common.parser(NAME, __doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=None, help=f"rounds per run (default {ROUNDS}, the public code's)")
    p.add_argument("--q", type=float, nargs="+", default=None, help=f"the q values to run (default {QS})")
    p.add_argument("--algorithms", nargs="+", default=None, choices=sorted(ALGORITHMS),
                   help=f"the algorithms to run (default {DEFAULT_ALGORITHMS})")
    p.add_argument("--max-minutes", type=float, default=None,
                   help="stop cleanly after this many minutes (runs pause at their next round and checkpoint; "
                        "the next invocation continues them); 0 = run nothing, only tabulate (default: no limit)")
    p.add_argument("--checkpoint-every", type=int, default=None,
                   help=f"rounds between checkpoints (default {CHECKPOINT_EVERY})")
    p.add_argument("--max-samples", type=int, default=None,
                   help="cap on a device's training samples (default: no cap, as the paper; the earlier scaled "
                        "run used 500)")
    args = p.parse_args(argv)
    if args.ray is not None:
        raise ValueError("--ray is not supported by qffl_synthetic.py (its runs are chunked, not evaluate.py "
                         "episodes): use --workers")
    clock, out = common.start(NAME, args)
    rounds = args.rounds if args.rounds is not None else SMOKE_ROUNDS if args.smoke else ROUNDS
    if rounds < 1:
        raise ValueError(f"--rounds = {rounds} is invalid: expected >= 1")
    qs = args.q if args.q is not None else SMOKE_QS if args.smoke else QS
    if len(set(qs)) != len(qs) or min(qs) < 0 or not all(math.isfinite(q) for q in qs):
        raise ValueError(f"--q {qs} is invalid: expected distinct finite numbers >= 0")
    every = args.checkpoint_every or (SMOKE_CHECKPOINT if args.smoke else CHECKPOINT_EVERY)
    if every < 1:
        raise ValueError(f"--checkpoint-every = {every} is invalid: expected >= 1")
    if args.max_minutes is not None and not args.max_minutes >= 0:
        raise ValueError(f"--max-minutes = {args.max_minutes} is invalid: expected a number >= 0")
    algorithms = args.algorithms or DEFAULT_ALGORITHMS
    seeds = args.seeds or SEEDS
    base = {**(SMOKE if args.smoke else PAPER), "max_rounds": rounds}
    if args.max_samples is not None:
        if args.max_samples < 0:
            raise ValueError(f"--max-samples = {args.max_samples} is invalid: expected >= 0 (0 = no cap)")
        base["dataset_params"] = {**base["dataset_params"], "max_samples": args.max_samples or None}
    cap = base["dataset_params"]["max_samples"]
    setting = settings_id(rounds, cap, args.smoke)

    progress = Progress(common.RESULTS_DIR / f"{NAME}_progress.json" if out.publish else out.out / "progress.json")
    runs = progress.setting(setting, {"env": base, "rounds": rounds, "checkpoint_every": every})
    specs = [chunked.RunSpec(run_id(a, q, s), ALGORITHMS[a].env(base, q), ALGORITHMS[a].policy.format(q=q), s)
             for s in seeds for a in algorithms for q in qs]  # seed-major: every q of a seed finishes early
    todo = [s for s in specs if runs.get(s.run_id, {}).get("status") != "finished"]
    deadline = time.time() + 60 * args.max_minutes if args.max_minutes is not None else math.inf
    folder = out.out / "runs" / setting.replace(" ", "_")
    print(f"{NAME}: {len(specs) - len(todo)} of {len(specs)} runs already finished; running up to {len(todo)} "
          f"({setting}, checkpoint every {every} rounds)")

    def took(o: chunked.RunOutcome) -> None:
        progress.record(setting, o, out.provenance)
        print(f"  {o.run_id}: {o.status} at round {o.rounds_done} ({o.seconds / 60:.1f} min this chunk)", flush=True)

    if deadline > time.time():
        chunked.run_all(todo, lambda s: folder / s.run_id.replace(" ", "_"), every, workers=args.workers,
                        deadline=deadline, on_outcome=took)
    return _report(out, clock, argv, args, progress.runs(setting), base, rounds, cap)


# ============================================================================================ progress
class Progress:
    """The progress file: per setting, each run's status, rounds, time, the commit of each chunk and, once
    finished, its results. Rewritten atomically (one line per run) after every chunk."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.data: Dict[str, Any] = json.loads(self.path.read_text()) if self.path.is_file() else \
            {"experiment": NAME, "settings": {}}

    def setting(self, key: str, description: Mapping[str, Any]) -> Dict[str, Any]:
        entry = self.data["settings"].setdefault(key, {**common.jsonable(description), "runs": {}})
        return entry["runs"]

    def runs(self, key: str) -> Dict[str, Any]:
        return self.data["settings"][key]["runs"]

    def record(self, key: str, o: chunked.RunOutcome, prov: Mapping[str, Any]) -> None:
        algorithm, q, seed = o.run_id.split(" ")
        e = self.runs(key).setdefault(o.run_id, {
            "algorithm": algorithm, "q": float(q[2:]), "seed": int(seed[5:]), "status": "partial",
            "rounds_done": 0, "rounds_played": 0, "seconds": 0.0, "round_seconds": 0.0, "chunks": []})
        e["rounds_done"] = o.rounds_done
        e["rounds_played"] += o.rounds_done - o.start_round
        e["seconds"] = round(e["seconds"] + o.seconds, 2)
        e["round_seconds"] = round(e["round_seconds"] + o.round_seconds, 2)
        e["chunks"].append({"from": o.start_round, "to": o.rounds_done, "seconds": round(o.seconds, 2),
                            "commit": prov.get("commit"), "dirty": prov.get("dirty"), "time": int(time.time())})
        if o.status == "finished":
            e["status"] = "finished"
            e["result"] = _compact(o.record)
        self.save()

    def save(self) -> None:
        """One line per run, so that a piece's commit changes only the lines of the runs it advanced."""
        from fedsel_eval import atomic_write_text

        head = {k: v for k, v in self.data.items() if k != "settings"}
        lines = ["{", *(f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()), ' "settings": {']
        settings = list(self.data["settings"].items())
        for i, (key, entry) in enumerate(settings):
            lines.append(f"  {json.dumps(key)}: {{")
            lines += [f"   {json.dumps(k)}: {json.dumps(v)}," for k, v in entry.items() if k != "runs"]
            lines.append('   "runs": {')
            runs = list(entry["runs"].items())
            lines += [f"    {json.dumps(r)}: {json.dumps(v, allow_nan=False)}{',' if j < len(runs) - 1 else ''}"
                      for j, (r, v) in enumerate(runs)]
            lines.append("   }")
            lines.append("  }" + ("," if i < len(settings) - 1 else ""))
        lines += [" }", "}"]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, "\n".join(lines) + "\n")


def _compact(record: Mapping[str, Any]) -> Dict[str, Any]:
    """A finished run's record for the progress file: per-device accuracies to 6 decimals, curves to 5."""
    return {"metrics": common.jsonable(record["metrics"]), "model_sha256": record["model_sha256"],
            "clients": {"accuracy": [round(a, 6) for a in record["clients"]["accuracy"]],
                        "participation": record["clients"]["participation"],
                        "num_samples": record["clients"]["num_samples"]},
            "curve": {k: (v if k == "round" else [round(x, 5) for x in v]) for k, v in record["curve"].items()}}


# ============================================================================================ report
METRICS = QFFL_METRICS  # the table's columns, as the record holds them (experiments/records_of.py)


def _report(out: common.Outputs, clock: common.Clock, argv: Sequence[str], args: Any, runs: Mapping[str, Any],
            base: Mapping[str, Any], rounds: int, cap: Optional[int]) -> Path:
    """The table, comparisons, figure and JSON from every finished run of this setting."""
    done = [r for r in runs.values() if r["status"] == "finished"]
    grid: Dict[str, Dict[float, List[Mapping[str, Any]]]] = {}
    for r in sorted(done, key=lambda r: (list(ALGORITHMS).index(r["algorithm"]), r["q"], r["seed"])):
        grid.setdefault(r["algorithm"], {}).setdefault(r["q"], []).append(r)
    rows, numbers, comparisons = [], {}, []
    for a, by_q in grid.items():
        numbers[a] = {}
        for q, rs in by_q.items():
            vals = {m: [r["result"]["metrics"][m] * scale for r in rs] for m, _, scale, _ in METRICS}
            cis = {m: t_interval(v) for m, v in vals.items()}
            per_round = [r["round_seconds"] / r["rounds_played"] for r in rs if r["rounds_played"]]
            numbers[a][f"{q:g}"] = {"seeds": [r["seed"] for r in rs], "values": vals,
                                    "ci95": {m: [c.lo, c.hi] for m, c in cis.items()},
                                    "diverged": sum(bool(r["result"]["metrics"]["diverged"]) for r in rs),
                                    "seconds_per_round": float(np.mean(per_round)) if per_round else None}
            rows.append([ALGORITHMS[a].label, f"{q:g}", len(rs)] + [cis[m].text(spec) for m, _, _, spec in METRICS]
                        + [f"{numbers[a][f'{q:g}']['diverged']}/{len(rs)}", common.fmt(np.mean(per_round) if per_round
                                                                                       else None, ".3f")])
        if 0.0 in by_q:
            base_runs = {r["seed"]: r for r in by_q[0.0]}
            for q, rs in by_q.items():
                pairs = [(r, base_runs[r["seed"]]) for r in rs if q > 0 and r["seed"] in base_runs]
                if pairs:
                    d = {m: t_interval([(x["result"]["metrics"][m] - y["result"]["metrics"][m]) * s
                                               for x, y in pairs]) for m, _, s, _ in METRICS[:3]}
                    comparisons.append(f"{ALGORITHMS[a].label} q = {q:g} − q = 0 ({len(pairs)} paired seeds): variance "
                                       f"{d['acc_var_1e4'].text('+.0f')}, mean accuracy {d['acc_mean'].text('+.1f')} "
                                       f"points, worst 10% {d['acc_worst10'].text('+.1f')} points")
    table = markdown.table(["algorithm", "q", "seeds"] + [h for _, h, _, _ in METRICS] + ["diverged", "s / round"],
                            rows, align="llr" + "r" * (len(METRICS) + 2))
    unfinished = sorted((r for r in runs.values() if r["status"] != "finished"), key=lambda r: r["rounds_done"])
    commits = sorted({c["commit"] or "none" for r in runs.values() for c in r["chunks"]})
    lines = [
        f"Per-device test accuracy of the final global model after {rounds} rounds: mean over seeds with a 95% "
        f"Student-t CI (`scipy.stats.t`; none with one seed); variance of the per-device accuracies as fractions, "
        f"×10⁴, as the paper reports it. Synthetic(1, 1), {base.get('num_clients', 100)} devices (one federation "
        f"per seed), device sizes {'capped at ' + str(cap) if cap else 'as generated (no cap)'}, logistic "
        f"regression, sampling ∝ n_k, K = {base.get('clients_per_round', 10)}; q-FedAvg: E = {base['local_epochs']}, "
        f"B = 10, η = {base['lr']}, L = 1/η; q-FedSGD: one full-batch gradient per device, L = 1/η. "
        f"s / round: the rounds' wall time per round on this machine (one process per run).\n",
        f"**{len(done)} of {len(runs)} runs recorded here are finished**"
        + (": unfinished " + ", ".join(f"{r['algorithm']} q={r['q']:g} seed={r['seed']} at round {r['rounds_done']}"
                                       for r in unfinished) if unfinished else "") + ".\n",
        table, ("\n" + "; ".join(comparisons) + ".\n") if comparisons else "",
        f"\nRuns computed at commit{'s' if len(commits) > 1 else ''} "
        + ", ".join(f"`{c[:12]}`" for c in commits) + " (per chunk in `experiments/results/qffl_synthetic_progress.json`).\n"
        if commits else "",
    ]
    if done:
        _figure(out, grid, rounds)
    # the record's rows: one per finished run, with the chunks (commit, dirty) that computed it (#34)
    run_rows = [{**{k: r[k] for k in ("algorithm", "q", "seed", "chunks", "seconds", "round_seconds",
                                      "rounds_played")},
                 "result": {"metrics": r["result"]["metrics"]}} for r in done]
    out.results({"settings": {"env": base, "rounds": rounds}, "runs": run_rows, "runs_finished": len(done),
                 "runs_recorded": len(runs),
                 "series": numbers, "comparisons": comparisons, "run_commits": commits})
    seconds = clock.seconds()
    command = common.command_line("qffl_synthetic.py", argv)
    lines.append(common.wall_time_note(seconds, args.workers, command, sum(r["seconds"] for r in runs.values()),
                                       compute_what="its runs (wall time per run, summed over every chunk)",
                                       longest=out.invocation(seconds, command)))
    out.fragment("\n".join(lines))
    print((out.out / "table.md").read_text())
    return out.out


def _figure(out: common.Outputs, grid: Mapping[str, Mapping[float, List[Mapping[str, Any]]]], rounds: int) -> None:
    """Per-device accuracy distributions of q-FedAvg (the paper's Figure 1 style), and the variance and the
    global accuracy by round (solid: q-FedAvg, dashed: the others)."""
    fig, axes = common.figure(15, 4.5, ncols=3)
    bins = np.linspace(0, 1, 21)
    first = next(iter(grid))
    for a, by_q in grid.items():
        style = "-" if a == first else "--"
        for i, (q, rs) in enumerate(by_q.items()):
            color = f"C{i}"
            if a == first:
                acc = np.concatenate([r["result"]["clients"]["accuracy"] for r in rs])
                hist, _ = np.histogram(acc, bins=bins)
                axes[0, 0].step(bins[:-1] + 0.025, hist / len(rs), where="mid", color=color, label=f"q = {q:g}")
            x = rs[0]["result"]["curve"]["round"]
            for ax, key in ((axes[0, 1], "acc_var_1e4"), (axes[0, 2], "accuracy")):
                n = min(len(r["result"]["curve"][key]) for r in rs)
                ax.plot(x[:n], np.mean([r["result"]["curve"][key][:n] for r in rs], axis=0), style, color=color,
                        label=f"{ALGORITHMS[a].label} q = {q:g}")
    axes[0, 0].set(title=f"{ALGORITHMS[first].label}: per-device test accuracy after {rounds} rounds",
                   xlabel="device test accuracy", ylabel="devices (per seed)")
    axes[0, 1].set(title="Variance of per-device accuracy (×10⁴)", xlabel="round", ylabel="variance ×10⁴")
    axes[0, 2].set(title="Global test accuracy", xlabel="round", ylabel="accuracy")
    for ax in axes[0]:
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small")
    out.figure(fig, NAME)


if __name__ == "__main__":
    common.run_cli(main, "qffl_synthetic.py")
