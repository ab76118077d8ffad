"""Robustness table (issue #8): every selection policy × backend under each attack, measured with evaluate.py.

    python experiments/robustness.py --workers 2 --publish   # the run of docs/ROBUSTNESS.md (~15 min)
    python experiments/robustness.py --smoke                 # seconds: the tiny preset, 3 rounds, 2 policies

For each scenario of :data:`SCENARIOS` the script runs evaluate.py (as a subprocess, printing the
exact command) on the ``default`` preset — digits, 20 clients (σ = 0.8), an MLP, K = 5, availability
0.8 — with every registered hand-written agent (``--policy all``) and three backends (FedAvg,
q-FedAvg q = 1, FedMGDA+), a fixed budget of ``--rounds`` rounds (``--target 1.0``: no episode stops
early, so final accuracies compare at equal rounds; rounds to 90% are read off the accuracy curves).

In every scenario the same 20% of the clients (4 of 20, drawn from each seed's federation) are
labelled attackers; in ``none`` and ``unreliable`` they behave honestly, so "honest accuracy" is
always the mean final test accuracy over the same 16 clients, and ``none`` gives the attackers'
share of accepted updates a policy grants them without any attack (0.2 for uniform selection).

Outputs: one evaluate.py run folder per scenario under ``--out`` (resumed when re-run), and
``table.md`` / ``results.json`` there; with ``--publish`` the table is spliced into
docs/ROBUSTNESS.md between ``<!-- robustness:table begin -->`` and ``<!-- robustness:table end -->``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from fedsel_eval import markdown

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ROBUSTNESS.md"
#: the generated block of docs/ROBUSTNESS.md this script writes (``fedsel_eval.markdown.splice``)
MARKER = "robustness:table"
ATTACKER_FRACTION = 0.2
#: scenario → its ``adversary`` config (docs/ROBUSTNESS.md explains each)
SCENARIOS: Dict[str, Dict[str, Any]] = {
    "none": {"attacker_fraction": ATTACKER_FRACTION},
    "loss inflation": {"attacker_fraction": ATTACKER_FRACTION, "loss_scale": 10.0},
    "update scaling": {"attacker_fraction": ATTACKER_FRACTION, "update_scale": 10.0},
    "free riders": {"attacker_fraction": ATTACKER_FRACTION, "free_rider": True},
    "unreliable": {"attacker_fraction": ATTACKER_FRACTION, "dropout": 0.2, "straggler_fraction": 0.25,
                   "straggler_distribution": "pareto", "straggler_scale": 5.0, "straggler_shape": 1.5,
                   "deadline": 10.0},
}
BACKENDS = ["fedavg", "qfedavg:q=1", "fedmgda+"]
THRESHOLD = 0.9  # rounds to this global accuracy, read off the curves


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="episode seeds (default: 0 1 2)")
    p.add_argument("--rounds", type=int, default=40, help="rounds per episode (default: 40)")
    p.add_argument("--workers", type=int, default=2, help="evaluate.py worker processes (default: 2)")
    p.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                   help="evaluate.py --ray: the episodes as Ray tasks instead of --workers (docs/EVALUATION.md)")
    p.add_argument("--out", default=str(ROOT / "runs" / "robustness"), help="output folder (default: %(default)s)")
    p.add_argument("--smoke", action="store_true", help="tiny preset, 3 rounds, 2 policies, 2 seeds")
    p.add_argument("--publish", action="store_true", help="splice the table into docs/ROBUSTNESS.md")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.workers < 1 or len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0:
        p.error("--rounds and --workers must be >= 1 and --seeds distinct integers >= 0")
    if args.smoke and args.publish:
        p.error("--smoke runs are not published")
    if args.smoke and args.out == str(ROOT / "runs" / "robustness"):
        args.out = str(ROOT / "runs" / "robustness" / "smoke")  # never in the real run's folders
    return args


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def flow(mapping: Mapping[str, Any]) -> str:
    """A one-line YAML mapping, as evaluate.py's --env-kwargs reads it."""
    return "{" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in mapping.items()) + "}"


def command(scenario: Dict[str, Any], out: Path, args: argparse.Namespace) -> List[str]:
    """The evaluate.py command line of one scenario."""
    env, policies = ("tiny", ["random", "rpow_d"]) if args.smoke else ("default", ["all"])
    rounds = 3 if args.smoke else args.rounds
    cmd = ["evaluate.py", "--env", env, "--env-kwargs", f"adversary={flow(scenario)}"]
    for p in policies:
        cmd += ["--policy", p]
    for b in BACKENDS:
        cmd += ["--aggregator", b]
    cmd += ["--seeds", *map(str, args.seeds), "--rounds", str(rounds), "--target", "1.0",
            *(["--ray", args.ray] if args.ray else ["--workers", str(args.workers)]),
            "--no-plots", "--no-progress", "--resume", "--out", shown_path(out)]
    return cmd


def shown_path(path: Path) -> str:
    """``path`` relative to the repository when it lies inside it (commands are run from the root)."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def attackers_by_seed(env_name: str, scenario: Dict[str, Any], seeds: Sequence[int]) -> Dict[int, np.ndarray]:
    """The attackers of each seed's federation (as the env draws them: ``info["attackers"]``)."""
    from fedsel_env.env import FedSelectEnv

    env = FedSelectEnv(config={"adversary": scenario, "max_rounds": 1}, preset=env_name)
    return {s: np.asarray(env.reset(seed=s)[1]["attackers"], dtype=np.int64) for s in seeds}


def first_round_at(curve: Sequence[Optional[float]], threshold: float) -> float:
    """The first round whose global accuracy reaches ``threshold`` (NaN if none); curve[0] is round 0."""
    for t, acc in enumerate(curve):
        if acc is not None and t > 0 and acc >= threshold:
            return float(t)
    return math.nan


def episode_numbers(record: Mapping[str, Any], attackers: np.ndarray) -> Dict[str, float]:
    """What the table shows for one episode."""
    acc = np.asarray(record["clients"]["accuracy"], dtype=np.float64)
    part = np.asarray(record["clients"]["participation"], dtype=np.float64)
    honest = np.ones(acc.size, dtype=bool)
    honest[attackers] = False
    m = record["metrics"]
    return {"final_accuracy": float(m["final_accuracy"]), "honest_accuracy": float(acc[honest].mean()),
            "attacker_share": float(part[attackers].sum() / max(part.sum(), 1.0)),
            "rounds_to_90": first_round_at(record["curves"]["accuracy"], THRESHOLD),
            "sim_time": float(m["sim_time"]), "diverged": float(record["diverged"]),
            # present once evaluate.py records the env's robustness info keys
            "attacker_selected_rate": float(m.get("attacker_selected_rate", math.nan))}


def mean_std(values: Sequence[float], spec: str) -> str:
    """``mean ± std`` of the finite values (the sign, if asked for, on the mean only); ``—`` if none."""
    v = np.asarray([x for x in values if math.isfinite(x)], dtype=np.float64)
    if v.size == 0:
        return "—"
    return f"{v.mean():{spec}} ± {v.std():{spec.lstrip('+')}}"


def rounds_cell(values: Sequence[float], cap: int) -> str:
    v = [x for x in values if math.isfinite(x)]
    if not v:
        return f"> {cap}"
    text = f"{np.mean(v):.1f}"
    return text if len(v) == len(values) else f"{text} ({len(v)}/{len(values)})"


def tables(results: Dict[str, Dict[str, List[Dict[str, float]]]], series: List[str], cap: int) -> str:
    """The Markdown tables: honest accuracy, its change under attack, attackers' share, rounds to 90%, time."""
    names = list(SCENARIOS)
    out = []

    def table(title: str, cols: List[str], cell) -> None:
        rows = [[*key.split("|"), *(cell(key, c) for c in cols)] for key in series]  # key: policy|backend
        out.append(f"**{title}**\n")
        out.append(markdown.table(["policy", "backend", *cols], rows, align="ll" + "r" * len(cols)))

    def values(key: str, scen: str, field: str) -> List[float]:
        return [e[field] for e in results[scen].get(key, [])]

    table(f"Honest clients' mean final test accuracy after {cap} rounds (mean ± std over seeds)", names,
          lambda k, c: mean_std(values(k, c, "honest_accuracy"), ".3f"))

    def delta(k: str, c: str) -> str:
        base, hit = values(k, "none", "honest_accuracy"), values(k, c, "honest_accuracy")
        d = [h - b for h, b in zip(hit, base)]  # paired by seed: same federation, w_0, shuffles
        return mean_std(d, "+.3f")

    table("Change in honest accuracy against `none` (paired by seed)", names[1:], delta)
    table(f"Attackers' share of accepted updates ({ATTACKER_FRACTION:.0%} of the clients are attackers; "
          f"`none`: they behave honestly)",
          names[:4], lambda k, c: mean_std(values(k, c, "attacker_share"), ".2f"))
    table(f"Rounds to {THRESHOLD:.0%} global accuracy (mean over the seeds that reached it; "
          f"(k/n) when only k of n did)", names, lambda k, c: rounds_cell(values(k, c, "rounds_to_90"), cap))
    table(f"Simulated time of the {cap} rounds (s)", ["none", "unreliable"],
          lambda k, c: mean_std(values(k, c, "sim_time"), ".0f"))
    diverged = {c: int(sum(e["diverged"] for v in results[c].values() for e in v)) for c in names}
    out.append("Diverged episodes: " + ", ".join(f"{c} {n}" for c, n in diverged.items()) + ".\n")
    return "\n".join(out)


def write_outputs(out: Path, fragment: str, results: Mapping[str, Any], publish: bool, marker: str) -> None:
    """``table.md`` and ``results.json`` in ``out``, the fragment printed and, with ``publish``, spliced into
    docs/ROBUSTNESS.md's block ``marker`` (which must be there)."""
    (out / "table.md").write_text(fragment)
    (out / "results.json").write_text(json.dumps(results, indent=1, allow_nan=True))
    print("\n" + fragment)
    if publish:
        markdown.splice(DOC, marker, fragment, append=False)
        print(f"spliced into {DOC} ({marker})")


def main(argv: Optional[Sequence[str]] = None) -> Path:
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    out = Path(args.out) / ("smoke" if args.smoke else "")
    out.mkdir(parents=True, exist_ok=True)
    env_name = "tiny" if args.smoke else "default"
    cap = 3 if args.smoke else args.rounds
    start = time.perf_counter()
    commands, results, series, episode_seconds = {}, {}, [], 0.0
    for name, scenario in SCENARIOS.items():
        folder = out / slug(name)
        cmd = command(scenario, folder, args)
        commands[name] = "python " + " ".join(shlex.quote(c) for c in cmd)
        print(f"\n[{name}] {commands[name]}", flush=True)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *cmd], cwd=ROOT, check=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL)
        print(f"[{name}] {time.perf_counter() - t0:.0f} s", flush=True)
        attackers = attackers_by_seed(env_name, scenario, args.seeds)
        results[name] = {}
        for line in (folder / "episodes.jsonl").read_text().splitlines():
            r = json.loads(line)
            episode_seconds += r["wall_time_s"]
            key = f"{r['policy']}|{r['backend']}"
            if key not in series:
                series.append(key)
            results[name].setdefault(key, []).append(episode_numbers(r, attackers[r["seed"]]))
    wall = time.perf_counter() - start
    fragment = tables(results, series, cap)
    argv_text = " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    count = sum(len(v) for res in results.values() for v in res.values())
    fragment += (f"\n*Measured by `python experiments/robustness.py {argv_text}`: {count} episodes, whose own "
                 f"wall times sum to {episode_seconds / 60:.1f} min; this invocation took {wall / 60:.1f} min "
                 f"with {args.workers} worker(s) on 2 shared CPU cores (load average {os.getloadavg()[0]:.1f} "
                 f"at the end; a re-run resumes the finished episodes). Each scenario is one evaluate.py run:*"
                 f"\n\n```\n" + "\n".join(commands.values()) + "\n```\n")
    write_outputs(out, fragment, {"scenarios": SCENARIOS, "commands": commands, "wall_time_s": wall,
                                  "episode_seconds": episode_seconds, "results": results}, args.publish, MARKER)
    return out


if __name__ == "__main__":
    main()
