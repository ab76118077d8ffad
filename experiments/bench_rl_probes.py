"""Issue #41's tuning probes of ``pl_ppo_cover``, as a record: training curves on training federations and one
evaluation on FreeRiders' tuning seeds (never on reporting seeds), plus the reported models' learned cover weights.

The probes are single training runs of ``train_agent.py`` (their commands in :data:`PROBES` and docs/TRAINING.md,
"Standard RL on FedSelect-Bench"); the tuning-seed evaluation is ``evaluate.py``'s (:data:`TUNING_EVAL`). This
script only gathers what those runs left in ``runs/`` into ``experiments/results/bench_rl_probes.json``, so every
figure TRAINING.md quotes of them recomputes from rows (``python -m fedsel_eval.recompute``). One training seed
each: a CI here is conditional on that model, a lead for a campaign, not a method's result.

    .venv/bin/python experiments/bench_rl_probes.py
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fedsel_env.bench import scenario  # noqa: E402
from fedsel_eval import records, rl_curves  # noqa: E402

RESULT = ROOT / "experiments" / "results" / "bench_rl_probes.json"
_TRAIN = ("train_agent.py --algo pl_ppo_cover --env fedsel/Bench-{s}-v0 --n-envs 16 --vec-env batched --seed 0 "
          "--runs-dir runs/tune --name {name} --no-progress-bar --eval-freq 0 --env-kwargs pca_components=41 "
          "federation_seed=null")
#: probe → its scenario, run folder under --runs (runs/tune), what differs from configs/pl_ppo_cover.yml, command
PROBES: Dict[str, Dict[str, Any]] = {
    "stragglers_gamma0": {"scenario": "Stragglers", "folder": "strag_g0", "change": "gamma 0 (stopped at 10,240 rounds)",
               "command": _TRAIN.format(s="Stragglers", name="strag_g0") + " --hyperparams gamma:0.0"},
    "stragglers_prior1": {"scenario": "Stragglers", "folder": "Stragglers_prior1", "change": "cover_prior 1",
               "command": _TRAIN.format(s="Stragglers", name="Stragglers_prior1")
               + ' --hyperparams "policy_kwargs:dict(hidden=64, cover_prior=1.0)"'},
    "freeriders_prior1": {"scenario": "FreeRiders", "folder": "FreeRiders_prior1", "change": "cover_prior 1",
                          "command": _TRAIN.format(s="FreeRiders", name="FreeRiders_prior1")
                + ' --hyperparams "policy_kwargs:dict(hidden=64, cover_prior=1.0)"'},
    "stragglers_long": {"scenario": "Stragglers", "folder": "Stragglers_long", "change": "98,304 rounds",
             "command": _TRAIN.format(s="Stragglers", name="Stragglers_long") + " -n 98304"},
    "freeriders_prior1_long": {"scenario": "FreeRiders", "folder": "FreeRiders_prior1_long",
                    "change": "cover_prior 1, 98,304 rounds",
                    "command": _TRAIN.format(s="FreeRiders", name="FreeRiders_prior1_long") + " -n 98304"
                    + ' --hyperparams "policy_kwargs:dict(hidden=64, cover_prior=1.0)"'},
}
#: the reported design's seed-0 run (under --runs) on the probe's scenario (configs/pl_ppo_cover.yml as it is)
BASELINE = "bench_rl/pl_ppo_cover/{s}/seed0"
#: the one evaluation on tuning seeds: evaluate.py's episodes of the FreeRiders probes beside random and kcenter_cover
TUNING_EVAL = {"folder": "tune_eval/tune_fr_long", "seeds": list(range(100, 110)),
               "command": "evaluate.py --env FreeRiders --policy random --policy kcenter_cover "
                          "--policy long=runs/tune/FreeRiders_prior1_long --policy \"long_sampled=per_client:"
                          "model_path=runs/tune/FreeRiders_prior1_long/model.zip,sample=true\" "
                          "--policy short=runs/tune/FreeRiders_prior1 --seeds 100 101 102 103 104 105 106 107 108 "
                          "109 --name tune_fr_long --runs-dir runs/tune_eval"}
#: the rounds at which TRAINING.md reads the long probes' curves
MARKS = (16_384, 32_768, 49_152, 65_536, 81_920, 98_304)
LATE = 20_000


def build(runs: Path) -> records.Record:
    from stable_baselines3.common.save_util import load_from_zip_file

    rec = records.Record("bench_rl_probes", config={"probes": PROBES, "baseline": BASELINE, "tuning_eval": TUNING_EVAL,
                                                    "marks": list(MARKS), "late": LATE})
    chunk = rec.chunk(records.git_provenance(ROOT, ("fedsel_env", "agents", "fedsel_eval", "experiments")),
                      note="gathered from the probes' run folders and evaluate.py's episodes")
    runs = Path(runs)
    curves = {**{p: (d["scenario"], runs / "tune" / d["folder"]) for p, d in PROBES.items()},
              **{f"{s.lower()}_baseline": (s, runs / BASELINE.format(s=s))
                 for s in sorted({d["scenario"] for d in PROBES.values()})}}
    for probe, (s, folder) in curves.items():
        rows = rl_curves.curve_rows(folder, 1.0, scenario(s).lower_is_better, 1.0, scenario=s, design="pl_ppo_cover",
                                    training_seed=0)
        last = max(r["rounds"] for r in rows)
        for r in rows:
            rec.add_row(chunk, **r, probe=probe, late=bool(r["rounds"] > last - LATE))
        w = {"role": "curve", "scenario": s, "probe": probe}
        for stat in ("min", "max"):
            rec.summarise(f"{s} {probe}: {stat} of the training curve", stat, "objective", where=w)
            if last >= 4 * LATE:
                rec.summarise(f"{s} {probe}: {stat} over the last {LATE:,} rounds", stat, "objective",
                              where={**w, "late": True})
        for m in MARKS:
            if any(r["rounds"] == m for r in rows):
                rec.summarise(f"{s} {probe}: at {m:,} rounds", "mean", "objective", where={**w, "rounds": m})
        first = sorted(rows, key=lambda r: r["rounds"])[:2]
        rec.summarise(f"{s} {probe}: first two points", "max", "objective",
                      where={**w, "rounds": [r["rounds"] for r in first]})
    for e in map(json.loads, (runs / TUNING_EVAL["folder"] / "episodes.jsonl").read_text().splitlines()):
        rec.add_row(chunk, role="tuning_episode", scenario="FreeRiders", policy=e["policy"], seed=e["seed"],
                    value=e["metrics"]["rounds_to_target"], reached=e["reached"])
    t = {"role": "tuning_episode", "scenario": "FreeRiders"}
    for p in ("random", "kcenter_cover", "long", "long_sampled", "short"):
        rec.summarise(f"FreeRiders tuning seeds: {p} mean rounds to target", "mean", "value", where={**t, "policy": p})
    for p in ("long", "long_sampled", "short"):
        for other in ("kcenter_cover", "random"):
            rec.summarise(f"FreeRiders tuning seeds: {p} − {other}, paired by seed (one training seed)", "paired_t",
                          "value", where={**t, "policy": p}, minus={**t, "policy": other})
    for s in sorted({"FreeRiders", "NoisyLabels", "Churn", "Stragglers", "QuantitySkew"}):
        for seed in range(3):
            params = load_from_zip_file(runs / f"bench_rl/pl_ppo_cover/{s}/seed{seed}/model.zip")[1]["policy"]
            rec.add_row(chunk, role="cover_weight", scenario=s, training_seed=seed,
                        value=float(params["cover_weight"].item()))
    for stat in ("min", "max"):
        rec.summarise(f"the reported models' learned c: {stat}", stat, "value", where={"role": "cover_weight"})
    return rec


def main(argv: Optional[Sequence[str]] = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=Path, default=ROOT / "runs", help="the folder that holds tune/ and bench_rl/")
    p.add_argument("--out", type=Path, default=RESULT)
    args = p.parse_args(argv)
    rec = build(args.runs)
    rec.write(args.out, written_by={"command": " ".join(["experiments/bench_rl_probes.py", *(argv or sys.argv[1:])])})
    for s in rec.summaries:
        print(f"{s['name']}: {json.dumps(s['value'])}")
    return args.out


if __name__ == "__main__":
    main()
