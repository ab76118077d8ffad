"""The README's Stable-Baselines3 quick start, measured as a user runs it (issue #35).

Takes the README's DQN script (the fenced Python block that makes ``fedsel/FedSelect-DQN-v0``) and runs
it as it stands — in a fresh process, in its own folder — once per training seed (``seed=0`` in the
README; other seeds replace that one literal). Each saved model is then deployed by ``evaluate.py`` as
the README does (``--env fedsel/FedSelect-DQN-v0 --env-kwargs action_mode=topk``: the K clients with the
highest Q-values each round) against random selection on held-out episode seeds (6000-6029 by default;
the script's settings come from ``configs/dqn.yml``, tuned on seeds 1000-1019, docs/TRAINING.md).
Printed: each training run's wall time, and per model the mean rounds to the target, how many held-out
episodes reach it, and the paired difference against random with its 95% CI as ``evaluate.py``
prints it.

A model already saved in the output folder is not trained again (rerun the command after an
interruption); ``--retrain`` trains anew.

``--threads-probe STEPS`` measures instead why the script sets ``torch.set_num_threads(1)``: the README's
script with ``learning_starts=0`` for STEPS steps, without that line (torch's default threads) and with
it, each in a fresh process; it prints the wall and CPU seconds of ``learn`` and the load.

Usage:  .venv/bin/python bench/quickstart.py [--train-seeds 0 1 2] [--episodes 30] [--first-seed 6000]
                                             [--steps N] [--out runs/bench/quickstart] [--retrain]
        .venv/bin/python bench/quickstart.py --threads-probe 300
Writes ``quickstart.json`` and the evaluation folder ``eval/`` under ``--out``.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "fedsel/FedSelect-DQN-v0"


def fenced_blocks(text: str, lang: str) -> List[str]:
    """The bodies of the fenced code blocks of ``lang`` in a Markdown text, in order."""
    return re.findall(rf"^```{re.escape(lang)}[^\n]*\n(.*?)^```", text, flags=re.S | re.M)


def readme_script() -> str:
    """The README's SB3 quick start: the one Python block that builds ``fedsel/FedSelect-DQN-v0``.

    :raises ValueError: when the README has no such block, or more than one.
    """
    found = [b for b in fenced_blocks((ROOT / "README.md").read_text(), "python") if f'"{ENV_ID}"' in b]
    if len(found) != 1:
        raise ValueError(f"README.md should hold exactly one Python block making {ENV_ID!r}; found {len(found)}")
    return found[0]


def script_for(source: str, steps: Optional[int] = None, seed: Optional[int] = None,
               save: Optional[str] = None) -> str:
    """The quick start with its step count, seed or save path replaced (each must occur exactly once).

    :raises ValueError: when the literal to replace is not in the script exactly once.
    """
    for value, pattern, repl in ((steps, r"total_timesteps=[0-9_]+", "total_timesteps={}"),
                                 (seed, r"seed=[0-9]+", "seed={}"),
                                 (save, r'model\.save\("[^"]*"\)', 'model.save({!r})')):
        if value is None:
            continue
        if len(re.findall(pattern, source)) != 1:
            raise ValueError(f"the README's quick start should contain {pattern!r} exactly once")
        source = re.sub(pattern, repl.format(value), source)
    return source


def saved_name(source: str) -> str:
    """The path the script saves its model to (``model.save("...")``), with SB3's ``.zip``."""
    m = re.search(r'model\.save\("([^"]*)"\)', source)
    if m is None:
        raise ValueError("the README's quick start does not save its model (model.save(\"...\"))")
    return m.group(1) if m.group(1).endswith(".zip") else m.group(1) + ".zip"


def load() -> str:
    """The 1-, 5- and 15-minute load averages, as ``uptime`` prints them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def train(out: Path, seed: int, steps: Optional[int], retrain: bool) -> Dict[str, Any]:
    """Run the README's script with ``seed`` in ``out/seed<seed>/``; return its wall time and model path."""
    folder = out / f"seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    source = script_for(readme_script(), steps=steps, seed=seed)
    model = folder / saved_name(source)
    record = folder / "train.json"
    if model.is_file() and record.is_file() and not retrain:
        print(f"seed {seed}: {model} exists, not trained again")
        return json.loads(record.read_text())
    (folder / "quickstart.py").write_text(source)
    print(f"seed {seed}: training (load {load()}) ...", flush=True)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "quickstart.py"], cwd=folder, check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    info = {"seed": seed, "steps": steps, "train_s": time.perf_counter() - t0, "model": str(model),
            "load_after": load()}
    record.write_text(json.dumps(info, indent=1))
    print(f"seed {seed}: trained in {info['train_s']:.0f} s (load {info['load_after']})", flush=True)
    return info


def evaluate(out: Path, runs: List[Dict[str, Any]], seeds: List[int]) -> List[Dict[str, str]]:
    """``evaluate.py`` as the README runs it, every model against random on ``seeds``; its main table."""
    cmd = [sys.executable, str(ROOT / "evaluate.py"), "--env", ENV_ID, "--env-kwargs", "action_mode=topk",
           "--policy", "random"]
    for r in runs:
        cmd += ["--policy", f"dqn_seed{r['seed']}=dqn:{r['model']}"]
    cmd += ["--seeds", *map(str, seeds), "--out", str(out / "eval"), "--resume", "--no-progress"]
    print(" ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)
    with open(out / "eval" / "main_table.csv", newline="") as f:
        return list(csv.DictReader(f))


def threads_probe(steps: int, out: Path) -> Dict[str, float]:
    """Seconds of ``learn`` for ``steps`` learning steps, with torch's default threads and with one."""
    source = script_for(readme_script(), steps=steps, save=str(out / "probe_model"))
    source = source.replace("learning_starts=500", "learning_starts=0")
    timed = source.replace("model.learn(", "import time as _t\n_w, _c = _t.perf_counter(), _t.process_time()\n"
                                            "model.learn(", 1)
    timed += "\nprint(f'LEARN {_t.perf_counter() - _w:.1f} {_t.process_time() - _c:.1f}')\n"
    result = {}
    for name, text in (("default threads", timed.replace("torch.set_num_threads(1)", "pass", 1)),
                       ("one thread", timed)):
        (out / "probe.py").write_text(text)
        before = load()
        done = subprocess.run([sys.executable, "probe.py"], cwd=out, check=True, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        wall, cpu = (float(x) for x in done.stdout.split("LEARN ")[1].split())
        result[name] = wall
        print(f"{name:16s} {steps} learning steps: {wall:.1f} s wall, {cpu:.1f} s CPU (load {before} -> {load()})")
    return result


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--episodes", type=int, default=30, help="held-out episodes (default 30)")
    ap.add_argument("--first-seed", type=int, default=6000, help="the first held-out episode seed")
    ap.add_argument("--steps", type=int, default=None, help="replace the README's total_timesteps (a smoke run)")
    ap.add_argument("--out", default=str(ROOT / "runs" / "bench" / "quickstart"))
    ap.add_argument("--retrain", action="store_true", help="train again even where a model is saved")
    ap.add_argument("--threads-probe", type=int, default=None, metavar="STEPS",
                    help="only time STEPS learning steps with torch's default threads and with one")
    args = ap.parse_args(argv)
    if args.episodes < 2:
        ap.error(f"--episodes {args.episodes} is invalid: the paired CI needs 2 or more")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.threads_probe is not None:
        return threads_probe(args.threads_probe, out)
    print(f"load before: {load()}")
    runs = [train(out, s, args.steps, args.retrain) for s in args.train_seeds]
    seeds = list(range(args.first_seed, args.first_seed + args.episodes))
    table = evaluate(out, runs, seeds)
    result: Dict[str, Any] = {"env": ENV_ID, "held_out_seeds": [seeds[0], seeds[-1]], "runs": runs,
                              "load_end": load(), "rows": {}}
    print(f"\nheld-out seeds {seeds[0]}-{seeds[-1]}, load {result['load_end']}")
    for row in table:
        name = row["policy"]
        entry = {k: row[k] for k in ("rounds_to_target_mean", "reached", "episodes", "delta_rounds_to_target_mean",
                                     "delta_rounds_to_target_lo", "delta_rounds_to_target_hi")}
        result["rows"][name] = entry
        delta = ("reference" if not row["delta_rounds_to_target_mean"] else
                 f"{float(row['delta_rounds_to_target_mean']):+.1f} [{float(row['delta_rounds_to_target_lo']):+.1f}, "
                 f"{float(row['delta_rounds_to_target_hi']):+.1f}]")
        train_s = next((f"{r['train_s']:.0f} s" for r in runs if name == f"dqn_seed{r['seed']}"), "-")
        print(f"{name:12s} rounds {float(row['rounds_to_target_mean']):5.1f}  reached {row['reached']}/"
              f"{row['episodes']}  vs random {delta}  training {train_s}")
    (out / "quickstart.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
