"""The README's Stable-Baselines3 quick start, measured as a user runs it (issues #35, #45).

Takes the README's script (the fenced Python block that trains the ``PlackettLucePolicy`` with PPO on
FedSelect-Bench's Stragglers, its objective as the reward) and runs it as it stands — in a fresh process, in its
own folder — once per training seed (``seed=0`` in the README; other seeds replace that one literal). Each saved
model then plays the bench's 30 reporting seeds (9000-9029, which nothing was trained or tuned on) beside random and
``pow_d``, deployed as the README's ``evaluate.py`` line does (``per_client:...,sample=true``: the stochastic policy
PPO trained) and as its K largest logits. The record ``experiments/results/quickstart.json`` holds every episode
and the paired differences: across the training seeds (the method's 95% CI, what the README states a user should
expect) and conditional on each model; the README's and docs/TRAINING.md's paragraph is written from it.

A model already saved in the output folder is not trained again (rerun the command after an interruption);
``--retrain`` trains anew. ``--steps N`` (a smoke run) publishes nothing.

Usage:  .venv/bin/python bench/quickstart.py [--train-seeds 0 1 2] [--seeds ...] [--steps N]
                                             [--out runs/bench/quickstart] [--retrain] [--no-publish]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
ENV_ID = "fedsel/Bench-Stragglers-v0"
#: what marks the README's quick start block
MARKER = "PlackettLucePolicy"
SCENARIO = "Stragglers"
RESULT = ROOT / "experiments" / "results" / "quickstart.json"


def fenced_blocks(text: str, lang: str) -> List[str]:
    """The bodies of the fenced code blocks of ``lang`` in a Markdown text, in order."""
    return re.findall(rf"^```{re.escape(lang)}[^\n]*\n(.*?)^```", text, flags=re.S | re.M)


def readme_script() -> str:
    """The README's SB3 quick start: the one Python block that trains the ``PlackettLucePolicy``.

    :raises ValueError: when the README has no such block, or more than one.
    """
    found = [b for b in fenced_blocks((ROOT / "README.md").read_text(), "python") if MARKER in b]
    if len(found) != 1:
        raise ValueError(f"README.md should hold exactly one Python block training the {MARKER}; found {len(found)}")
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


def evaluate(out: Path, runs: List[Dict[str, Any]], seeds: List[int]) -> Any:
    """Every model on ``seeds`` of the scenario beside random and ``pow_d`` (``fedsel_eval.bench.run_scenario``, the
    episodes the README's ``evaluate.py`` line plays): sampled (``sample=true``, the policy PPO trained) and as its K
    largest logits (``top``)."""
    from fedsel_env.bench import scenario
    from fedsel_eval.bench import reference_rows, run_scenario

    policies = ["random", "pow_d"]
    for r in runs:
        policies += [f"pl_ppo_seed{r['seed']}=per_client:model_path={r['model']},sample=true",
                     f"pl_ppo_top_seed{r['seed']}=per_client:model_path={r['model']}"]
    return run_scenario(out / "eval", scenario(SCENARIO), policies, seeds, reuse=reference_rows(),
                        log=lambda line: print(line, flush=True))


def build_record(run: Any, runs: List[Dict[str, Any]], argv: List[str]) -> Any:
    """The record behind the README's figures: every held-out episode, and the paired differences against random
    and ``pow_d`` — across the training seeds (the method's CI, the headline) and conditional on the models."""
    from fedsel_eval import records

    rec = records.Record("quickstart", config={"scenario": SCENARIO, "env": ENV_ID, "script": readme_script(),
                                               "train_seeds": [r["seed"] for r in runs]})
    chunk = rec.chunk(records.git_provenance(ROOT, ("fedsel_env", "agents", "fedsel_eval", "bench", "README.md")),
                      note="bench/quickstart.py: the README's script run as written per training seed, then evaluated")
    for r in runs:
        rec.add_row(chunk, role="training", training_seed=r["seed"], train_s=r["train_s"], load_after=r["load_after"])
    for row in run.rows:
        label = row["policy"]
        design, seed = (label.rsplit("_seed", 1)[0], int(label.rsplit("_seed", 1)[1])) if "_seed" in label else (label, None)
        rec.add_row(chunk, role="episode", policy=design, training_seed=seed, seed=row["seed"],
                    federation_seed=row["federation_seed"], value=row["value"], censored=row["censored"],
                    rounds=row["rounds"], reached=row["reached"], sim_time=row["sim_time"],
                    final_accuracy=row["final_accuracy"])
    ep = {"role": "episode"}
    for design in ("pl_ppo", "pl_ppo_top"):
        for other in ("random", "pow_d"):
            rec.summarise(f"{design} − {other}, seconds to Ω, across training seeds", "paired_t_across", "value",
                          where={**ep, "policy": design}, minus={**ep, "policy": other})
            rec.summarise(f"{design} − {other}, seconds to Ω, paired by seed (conditional)", "paired_t", "value",
                          where={**ep, "policy": design}, minus={**ep, "policy": other})
        for r in runs:
            rec.summarise(f"{design} (training seed {r['seed']}) − random", "paired_t", "value",
                          where={**ep, "policy": design, "training_seed": r["seed"]}, minus={**ep, "policy": "random"})
    for p in ("random", "pow_d", "pl_ppo", "pl_ppo_top"):
        rec.summarise(f"{p} mean seconds to Ω", "mean", "value", where={**ep, "policy": p})
        rec.summarise(f"{p} episodes that reached Ω", "sum", "reached", where={**ep, "policy": p})
    rec.summarise("training wall seconds per seed", "mean", "train_s", where={"role": "training"})
    return rec


def report(rec: Any) -> str:
    """The README's paragraph: what a user should expect, from the record's summaries (a Record or a loaded one)."""
    summaries = rec["summaries"] if isinstance(rec, dict) else rec.summaries
    config = rec["config"] if isinstance(rec, dict) else rec.config
    s = {x["name"]: x["value"] for x in summaries}

    def d(name: str) -> str:
        v = s[name]
        return f"{v['mean']:+.1f} s [{v['lo']:+.1f}, {v['hi']:+.1f}]" if v["lo"] is not None else f"{v['mean']:+.1f} s"

    seeds = config["train_seeds"]
    across = s["pl_ppo − random, seconds to Ω, across training seeds"]
    per_seed = ", ".join(f"{s[f'pl_ppo (training seed {t}) − random']['mean']:+.1f}" for t in seeds)
    verdict = ("faster than random as a method: the CI across training seeds excludes zero"
               if across["hi"] is not None and across["hi"] < 0 else
               "**not** shown faster than random as a method: every seed's mean is below random's but the CI "
               "across the training seeds includes zero")
    return (f"Measured with `.venv/bin/python bench/quickstart.py`, which runs this script as written with `seed=` "
            f"{', '.join(map(str, seeds))} (each {s['training wall seconds per seed'] / 60:.0f} min on this machine's 2 "
            f"shared cores, three at once) and plays each model on the 30 reporting seeds 9000–9029 (record: "
            f"`experiments/results/quickstart.json`). Random takes {s['random mean seconds to Ω']:.0f} s of simulated "
            f"time to reach 81%, `pow_d` {s['pow_d mean seconds to Ω']:.0f} s. The sampled policy takes "
            f"{s['pl_ppo mean seconds to Ω']:.0f} s: against random {d('pl_ppo − random, seconds to Ω, across training seeds')}"
            f" across the {len(seeds)} training seeds (the method's 95% CI; per seed {per_seed}; conditional on these "
            f"models {d('pl_ppo − random, seconds to Ω, paired by seed (conditional)')}), against `pow_d` "
            f"{d('pl_ppo − pow_d, seconds to Ω, across training seeds')}. So at 16,384 rounds it is {verdict}, and "
            f"well behind `pow_d`. Deployed as its K largest logits instead it takes "
            f"{s['pl_ppo_top mean seconds to Ω']:.0f} s ({d('pl_ppo_top − random, seconds to Ω, across training seeds')} "
            f"against random): at this budget the logits are still close, and a fixed top-K picks the same few clients "
            f"round after round. Training is reproducible on one machine; another CPU's float rounding gives another "
            f"model, so expect the spread across seeds, not one seed's number.")


TUNING = ROOT / "experiments" / "results" / "quickstart_tuning.json"


def tuning_record(runs: List[str], out: Path) -> Any:
    """The quick start's settings as they were chosen: ``train_agent.py --algo pl_ppo`` runs on Stragglers (PCA width
    5), each played on tuning seeds 100-107 sampled and as top-K beside random; one row per episode in
    ``experiments/results/quickstart_tuning.json`` (the run folders are named in its config)."""
    from fedsel_env.bench import scenario
    from fedsel_eval import records
    from fedsel_eval.bench import run_scenario

    seeds = list(range(100, 108))
    policies = ["random"]
    for i, run in enumerate(runs):
        policies += [f"run{i}=per_client:model_path={Path(run) / 'model.zip'},sample=true",
                     f"run{i}_top=per_client:model_path={Path(run) / 'model.zip'}"]
    cfg = {**scenario(SCENARIO).env_config(), "pca_components": 5}
    played = run_scenario(out / "tuning", scenario(SCENARIO), policies, seeds, cfg, log=lambda line: print(line))
    rec = records.Record("quickstart_tuning", config={"scenario": SCENARIO, "tuning_seeds": seeds, "runs": runs,
                                                      "pca_components": 5})
    chunk = rec.chunk(records.git_provenance(ROOT, ("fedsel_env", "agents", "fedsel_eval", "bench")),
                      note="two pl_ppo tuning runs (16,384 rounds, training seed 0): the first settings, then "
                           "learning_rate 1e-3, gamma 0.9, n_steps 32, n_epochs 8")
    for row in played.rows:
        rec.add_row(chunk, policy=row["policy"], seed=row["seed"], value=row["value"], censored=row["censored"],
                    rounds=row["rounds"], reached=row["reached"], sim_time=row["sim_time"])
    for p in dict.fromkeys(r["policy"] for r in played.rows):
        rec.summarise(f"{p} mean seconds to Ω on tuning seeds 100-107", "mean", "value", where={"policy": p})
    return rec


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=None, help="replace the README's total_timesteps (a smoke run)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="held-out episode seeds (default: the bench's "
                                                                       "reporting seeds 9000-9029)")
    ap.add_argument("--out", default=str(ROOT / "runs" / "bench" / "quickstart"))
    ap.add_argument("--retrain", action="store_true", help="train again even where a model is saved")
    ap.add_argument("--no-publish", action="store_true", help="write the record to --out only, not to "
                                                               "experiments/results/ and the README")
    ap.add_argument("--report-only", action="store_true", help="only write the README's and TRAINING.md's paragraph "
                                                                "from the committed record")
    ap.add_argument("--tuning-runs", nargs="+", default=None, metavar="RUN",
                    help="only play these train_agent.py run folders on the tuning seeds into quickstart_tuning.json")
    args = ap.parse_args(argv)
    if args.tuning_runs:
        rec = tuning_record(args.tuning_runs, Path(args.out))
        rec.write(TUNING)
        return {"record": str(TUNING)}
    if args.report_only:
        from fedsel_eval import records
        from fedsel_eval.markdown import splice

        text = report(records.load(RESULT))
        for doc in (ROOT / "README.md", ROOT / "docs" / "TRAINING.md"):
            splice(doc, "bench:quickstart", text)
        print(text)
        return {"text": text}
    from fedsel_env.bench import REPORTING_SEEDS
    from fedsel_eval.markdown import splice

    seeds = args.seeds or list(REPORTING_SEEDS)
    if len(seeds) < 2:
        ap.error(f"--seeds {seeds}: the paired CI needs 2 or more")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"load before: {load()}")
    runs = [train(out, s, args.steps, args.retrain) for s in args.train_seeds]
    rec = build_record(evaluate(out, runs, seeds), runs, list(argv or sys.argv[1:]))
    rec.write(out / "record.json")
    text = report(rec) if len(runs) > 1 else "(one training seed: no spread to report)"
    print(text)
    if not args.no_publish and args.steps is None:
        rec.write(RESULT)
        splice(ROOT / "README.md", "bench:quickstart", text)
        splice(ROOT / "docs" / "TRAINING.md", "bench:quickstart", text)
    return {"runs": runs, "record": str(out / "record.json"), "text": text}


if __name__ == "__main__":
    main()
