"""The per-client selector's digits result re-measured on fresh reporting seeds (issue #29, "correct the record").

``experiments/per_client_study.py`` (issue #19) reported its trained selector on the reporting seeds
5000–5029 (federation 0) and 7000–7029 (unseen federations). Issue #29 found the lead smaller on other
seeds. This script plays the same three trained models (``per_client_study.py --setting digits --part
train``: ``pc_dqn``, training seeds 0, 1, 2, 10,000 steps each on a new federation every episode) against
random and the best heuristic of the study's tuning seeds (``pow_d``) on seeds no script had used:

- **seen**: 40000–40059 on ``federation_seed`` 0 (the study's reporting federation), 60 episodes;
- **unseen**: 41000–41059 with ``federation_seed`` null (each seed its own federation), 60 episodes.

Ω = 0.87 and the round cap 60 are the study's (calibrated on its tuning seeds 1000–1019). Rounds to Ω are
paired by seed; the per-client selector's rounds are averaged over its 3 models per seed (the CI
conditional on the trained models) and, separately, its mean difference per training seed gives a
Student-t CI over the 3 training seeds (the method's). The record is
``experiments/results/per_client_fresh_digits.json`` (``python -m fedsel_eval.recompute`` checks it).

    .venv/bin/python experiments/per_client_study.py --setting digits --part train   # the models (3 × ~4 min)
    .venv/bin/python experiments/per_client_fresh.py                                 # the report (~15 min)
    .venv/bin/python experiments/per_client_fresh.py --smoke                         # seconds (tiny preset)
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments import common  # noqa: E402
from experiments.favor_study import check_paired_seeds  # noqa: E402
from fedsel_eval import markdown, records  # noqa: E402

NAME = "per_client_fresh"
ROOT = Path(__file__).resolve().parents[1]
TRAIN_SEEDS = (0, 1, 2)
BEST = "pow_d"  # per_client_study's best heuristic on its tuning seeds (experiments/results/per_client_study_digits.json)
SETTINGS: Dict[str, Dict[str, Any]] = {
    "digits": {"env": {"preset": "default", "max_rounds": 60, "init": "federation", "target_accuracy": 0.87},
               "cap": 60, "seen": list(range(40000, 40060)), "unseen": list(range(41000, 41060)),
               "models": common.RUNS_DIR / "per_client_study" / "digits" / "train", "train_seeds": TRAIN_SEEDS},
    "smoke": {"env": {"preset": "tiny", "system": {"availability": 1.0}, "max_rounds": 6, "init": "federation"},
              "cap": 6, "seen": [300, 301], "unseen": [400, 401],
              "models": common.RUNS_DIR / "per_client_study" / "smoke" / "train", "train_seeds": (0,)},
}


def main(argv: Sequence[str] = None) -> Path:
    p = common.parser(NAME, __doc__.split("\n")[0])
    p.add_argument("--models", default=None, help="per_client_study.py's train folder (pc_dqn_s<seed>/ inside)")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    setting = "smoke" if args.smoke else "digits"
    s = SETTINGS[setting]
    if args.out == str(common.RUNS_DIR / NAME):
        args.out = str(common.RUNS_DIR / NAME / setting)
    out = Path(args.out)
    models = Path(args.models) if args.models else s["models"]
    mine = {seed: models / f"pc_dqn_s{seed}" for seed in s["train_seeds"]}
    for seed, folder in mine.items():
        if not (folder / "model.zip").is_file():
            raise ValueError(f"--models {models}: no {folder / 'model.zip'}; train the models first with "
                             f"`.venv/bin/python experiments/per_client_study.py --setting {setting} --part train`"
                             + (" --smoke" if args.smoke else ""))
    cap = s["cap"]
    rec = records.Record(f"{NAME}_{setting}", config={"env": s["env"], "cap": cap, "best_heuristic": BEST,
                                                        "seeds": {"seen": s["seen"], "unseen": s["unseen"]},
                                                        "models": {str(k): str(v) for k, v in mine.items()},
                                                        "pca_components_of_the_models": 5 if not args.smoke else 3})
    chunk = rec.chunk(records.git_provenance(ROOT, ("fedsel_env", "agents", "fedsel_eval", "experiments")),
                      note="this invocation played (or resumed) every episode")
    for report, fed, seeds in (("seen", 0, s["seen"]), ("unseen", None, s["unseen"])):
        cfg = {**s["env"], "federation_seed": fed}
        base, _, _ = common.evaluate(out / f"report_{report}", cfg, ["random", BEST], seeds, workers=args.workers,
                                     progress=not args.no_progress, env_name=setting, plots=False)
        # the models read a PCA of their training width; the PCA changes no dynamics, so the episodes pair
        own, _, _ = common.evaluate(out / f"report_{report}_per_client",
                                    {**cfg, "pca_components": rec.config["pca_components_of_the_models"]},
                                    [f"per_client_s{k}={v}" for k, v in mine.items()], seeds, workers=args.workers,
                                    progress=not args.no_progress, env_name=setting, plots=False)
        check_paired_seeds(list(base) + list(own), ["random", BEST, *[f"per_client_s{k}" for k in mine]], seeds)
        rec.add_episodes(chunk, base, cap=cap, report=report)
        for k in mine:
            rec.add_episodes(chunk, [{**e, "policy": "per_client"} for e in own if e["policy"] == f"per_client_s{k}"],
                             cap=cap, training_seed=k, report=report)
        for pol in ("random", BEST, "per_client"):
            rec.summarise(f"{report}: {pol}, mean rounds to Ω", "mean", "rounds",
                          where={"report": report, "policy": pol})
        for ref in ("random", BEST):
            rec.summarise(f"{report}: per_client − {ref} (conditional on the models)", "paired_t", "rounds",
                          where={"report": report, "policy": "per_client"}, minus={"report": report, "policy": ref})
            if len(mine) > 1:
                rec.summarise(f"{report}: per_client − {ref} (across training seeds)", "paired_t_across", "rounds",
                              where={"report": report, "policy": "per_client"},
                              minus={"report": report, "policy": ref})
        rec.summarise(f"{report}: {BEST} − random", "paired_t", "rounds",
                      where={"report": report, "policy": BEST}, minus={"report": report, "policy": "random"})
    rec.write(out / "record.json")
    if common.publishing(args):
        rec.write(common.RESULTS_DIR / f"{NAME}_{setting}.json")
    for line in _table(rec):
        print(line)
    return out


def _table(rec: records.Record) -> List[str]:
    rows = []
    for s in rec.summaries:
        v = s["value"]
        text = f"{v:.2f}" if isinstance(v, float) else f"{v['mean']:+.2f} [{v['lo']:+.2f}, {v['hi']:+.2f}] (n = {v['n']})"
        rows.append([s["name"], text])
    return markdown.table(["summary", "value"], rows, align="ll").splitlines()


if __name__ == "__main__":
    main()
