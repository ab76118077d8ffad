"""FAVOR (the paper's) and FAVOR+ (the suite's variant) against random and FAVOR's own baselines, on held-out episodes.

H. Wang, Z. Kaplan, D. Niu, B. Li, "Optimizing Federated Learning on Non-IID Data with Reinforcement
Learning", IEEE INFOCOM 2020 (seed 002); docs/SPEC.md §2, §4, §6; issue #17.

    python experiments/favor_study.py --setting digits        # the default preset (about an hour here)
    python experiments/favor_study.py --setting fmnist_e1     # Fashion-MNIST σ = 0.8, MLP, E = 1 (hours)
    python experiments/favor_study.py --smoke                 # seconds: the tiny preset

The protocol (every step resumable: a finished part is kept, an interrupted one continues):

1. **Target.** On the *tuning* seeds, random selection plays the whole round cap with an unreachable
   target; Ω is the accuracy (on a 0.01 grid, rounded down) that random's median accuracy curve first
   reaches at half the cap — well below the plateau, so rounds-to-Ω measures the climb, not plateau
   noise (a target near the plateau is hit or missed by noise of the last rounds).
2. **Best heuristic.** ``kcenter`` (FAVOR's K-Center), ``afl`` and ``pow_d`` (the real π_pow-d) play the
   tuning seeds; the one with the fewest mean rounds to Ω is "the best heuristic".
3. **Training.** ``favor`` (``configs/favor.yml``: the paper's) and ``favor+`` (``configs/favor+.yml``,
   the variant, each departure listed there) are trained with ``train_agent.py``'s machinery on the
   setting's federation (``federation_seed`` 0, ``init: federation``: FAVOR's one FL job with one w_0;
   every part below uses the same), once per training seed (0, 1, 2). FAVOR+ reads a 5-component PCA,
   so its episodes run in an env that differs from the others' only in the observation's PCA width.
4. **Report.** Every policy plays the *reporting* seeds, which nothing above looked at; rounds to Ω (an
   episode below Ω at the cap counts as the cap: a lower bound, marked) and final accuracy, as paired
   differences against random and against the best heuristic, with 95% t confidence intervals over the
   reporting seeds (for a trained variant, the mean over its training seeds per episode seed; each
   training seed's own difference is listed too).

The hyper-parameters were not tuned here: ``favor`` uses the paper's state and step with the suite's
optimiser settings, fixed before this run; ``favor+`` uses the settings chosen in earlier sessions on
seeds 1000–1019 (docs/TRAINING.md) — the tuning seeds here — and is reported on seeds it never saw.
"""
from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from experiments import common  # noqa: E402
from fedsel_eval import markdown  # noqa: E402
from fedsel_eval.stats import Interval, paired_t, t_interval  # noqa: E402

NAME = "favor_study"
HEURISTICS = ("kcenter", "afl", "pow_d")
VARIANTS = {"favor": "favor", "favorplus": "favor+"}  # policy label -> train_agent.py --algo
TUNE_SEEDS = list(range(1000, 1020))    # FAVOR+'s settings were chosen on these (docs/TRAINING.md)
REPORT_SEEDS = list(range(5000, 5030))  # never looked at before this experiment
TRAIN_SEEDS = (0, 1, 2)

#: setting -> env config (without the target), round cap, training steps
SETTINGS: Dict[str, Dict[str, Any]] = {
    "digits": {"env": {"preset": "default", "federation_seed": 0}, "cap": 60, "steps": 10000},
    "fmnist_e1": {"env": {"dataset": "fashion_mnist", "num_clients": 100, "samples_per_client": 600,
                          "test_fraction": 1 / 12, "partition": "sigma", "partition_params": {"sigma": 0.8},
                          "model": "mlp", "model_params": {"hidden": 64}, "local_epochs": 1, "batch_size": 10,
                          "lr": 0.05, "clients_per_round": 10, "federation_seed": 0},
                  "cap": 80, "steps": 6000},
    "smoke": {"env": {"preset": "tiny", "federation_seed": 0, "system": {"availability": 1.0}}, "cap": 6,
              "steps": 40},
}
SMOKE_TRAIN_HP = {"learning_starts": 8, "batch_size": 8, "buffer_size": 100, "train_freq": 1,
                  "target_update_interval": 8, "policy_kwargs": "dict(net_arch=[16])"}


def check_paired_seeds(records: Sequence[Mapping[str, Any]], policies: Sequence[str], seeds: Sequence[int]) -> None:
    """Raise ``ValueError`` unless each of ``policies`` has exactly one episode per seed of ``seeds``: differences
    paired by sorted position are only paired by seed when every side holds the same seeds."""
    want = sorted(int(s) for s in seeds)
    for p in policies:
        got = sorted(int(r["seed"]) for r in records if r["policy"] == p)
        if got != want:
            raise ValueError(f"policy {p!r} has episodes for seeds {got[:5]}{'...' if len(got) > 5 else ''} "
                             f"({len(got)}), not the {len(want)} seeds {want[:5]}...: its differences would not "
                             f"be paired by seed (a run folder missing episodes? rerun the script to resume it)")


def episode_rows(records: Sequence[Mapping[str, Any]], groups: Mapping[str, Sequence[str]], cap: int,
                 **fields: Any) -> List[Dict[str, Any]]:
    """One row per episode for the record (``fedsel_eval.records``): ``policy`` is the group (a trained
    variant's name), ``member`` the model, ``training_seed`` its seed (``<name>_s<seed>``; None for a single
    hand-written policy); a miss counts as ``cap`` rounds (``reached`` says which)."""
    out = []
    for group, members in groups.items():
        for m in members:
            ts = int(m.rsplit("_s", 1)[1]) if len(members) > 1 and re.search(r"_s\d+$", m) else None
            for r in common.episodes_of(records, m):
                part = r["clients"]["participation"]
                out.append({"policy": group, "member": m, "training_seed": ts, "seed": int(r["seed"]),
                            "rounds": float(r["metrics"]["rounds_to_target"]) if r["reached"] else float(cap),
                            "reached": bool(r["reached"]), "sim_time": r["metrics"]["sim_time"],
                            "final_accuracy": r["metrics"]["final_accuracy"], "jain": r["metrics"]["jain_index"],
                            "top_client_share": max(part) / max(sum(part), 1), **fields})
    return out


def calibrate_target(records: Sequence[Mapping[str, Any]], cap: int) -> float:
    """Ω: the 0.01-grid accuracy random's median curve reaches at half the round cap (rounded down)."""
    curves = np.stack([common.held(r["curves"]["accuracy"], cap + 1) for r in records])
    return float(np.floor(np.median(curves, axis=0)[cap // 2] * 100) / 100)


def per_training_seed(records: Sequence[Mapping[str, Any]], members: Sequence[str], cap: int,
                      base_r: np.ndarray, best_r: np.ndarray) -> Dict[str, Dict[str, Any]]:
    """Each trained model of a group on its own: its mean rounds to Ω and its paired differences with
    random (``base_r``) and the best heuristic (``best_r``), per seed in the same order."""
    return {m: {"mean_rounds": float(rounds(records, m, cap).mean()),
                "rounds_vs_random": paired(rounds(records, m, cap), base_r),
                "rounds_vs_best": paired(rounds(records, m, cap), best_r)}
            for m in members}


def across_training_seeds(per_seed: Mapping[str, Mapping[str, Any]]) -> Dict[str, Dict[str, float]]:
    """The method's CI (#34): a Student-t interval over the training seeds' own mean differences, beside the
    one conditional on the trained models (the per-episode-seed mean over the models)."""
    out = {}
    for key in ("rounds_vs_random", "rounds_vs_best"):
        out[f"{key}_across"] = t_interval([v[key]["mean"] for v in per_seed.values()]).figures()
    return out


def across_text(e: Mapping[str, Any], key: str) -> str:
    """A table cell: the across-training-seeds CI of a trained policy, "—" for a hand-written one."""
    p = e.get(f"{key}_across")
    if p is None:
        return "—"
    if p["lo"] is None or not np.isfinite(p["lo"]):
        return f"{p['mean']:+.1f} (one training seed)"
    return ci_text(p)


def study_start(name: str, description: str, settings: Mapping[str, Any], argv: Sequence[str]):
    """The command line of a held-out study (this one, ``per_client_study.py``): its options parsed and
    checked, its folder (``runs/repro/<name>/<setting>``) started.

    :return: (args, setting, clock, outputs).
    :raises ValueError: for ``--train-steps`` below 1.
    """
    p = common.parser(name, description)
    p.add_argument("--setting", choices=[s for s in settings if s != "smoke"], default=next(iter(settings)))
    p.add_argument("--train-steps", type=int, default=None, help="training steps per run (default: the setting's)")
    p.add_argument("--part", choices=["all", "tune", "train", "report"], default="all",
                   help="stop after this part (each is resumable; 'all' runs them in order)")
    args = p.parse_args(argv)
    if args.train_steps is not None and args.train_steps < 1:
        raise ValueError(f"--train-steps = {args.train_steps} is invalid: expected >= 1")
    setting, clock, out = common.start_setting(name, args, args.setting)
    return args, setting, clock, out


def target_and_best(out: Any, base: Mapping[str, Any], heuristics: Sequence[str], tune_seeds: Sequence[int],
                    cap: int, workers: int, progress: bool, setting: str):
    """Steps 1-2 of the protocol, on the tuning seeds: Ω from random's curves (:func:`calibrate_target`),
    then the heuristic with the fewest mean rounds to Ω.

    :return: (the calibration records, the tuning records, the env config with Ω, mean rounds per policy,
        the best heuristic).
    """
    calib, _, _ = common.evaluate(out.out / "calibration", {**base, "target_accuracy": 1.0}, ["random"], tune_seeds,
                                  workers=workers, progress=progress, env_name=setting, plots=False)
    omega = calibrate_target(calib, cap)
    env = {**base, "target_accuracy": omega}
    print(f"Ω = {omega:.2f} (random's median accuracy at round {cap // 2} of {cap} on the tuning seeds)")
    tune, _, _ = common.evaluate(out.out / "tune", env, ["random", *heuristics], tune_seeds, workers=workers,
                                 progress=progress, env_name=setting, plots=False)
    tune_rounds = {pol: float(rounds(tune, pol, cap).mean()) for pol in ("random", *heuristics)}
    best = min(heuristics, key=lambda h: tune_rounds[h])
    print(f"tuning seeds, mean rounds to Ω: {tune_rounds}; best heuristic: {best}")
    return calib, tune, env, tune_rounds, best


def rounds(records: Sequence[Mapping[str, Any]], policy: str, cap: int) -> np.ndarray:
    """Rounds to Ω per episode seed, in seed order (a miss counts as the cap)."""
    eps = sorted(common.episodes_of(records, policy), key=lambda r: r["seed"])
    return np.array([r["metrics"]["rounds_to_target"] if r["reached"] else cap for r in eps], dtype=np.float64)


def final_accuracy(records: Sequence[Mapping[str, Any]], policy: str) -> np.ndarray:
    eps = sorted(common.episodes_of(records, policy), key=lambda r: r["seed"])
    return np.array([r["metrics"]["final_accuracy"] for r in eps], dtype=np.float64)


def participation(records: Sequence[Mapping[str, Any]], policy: str) -> Dict[str, float]:
    """Where a policy's picks go: Jain's index of the participation counts, and the most-picked client's share."""
    eps = common.episodes_of(records, policy)
    shares = [max(e["clients"]["participation"]) / max(sum(e["clients"]["participation"]), 1) for e in eps]
    return {"jain": float(np.mean([e["metrics"]["jain_index"] for e in eps])), "top_share": float(np.mean(shares))}


def paired(a: np.ndarray, b: np.ndarray) -> Dict[str, Any]:
    """Mean of a − b with its 95% Student-t interval over the pairs (:func:`fedsel_eval.stats.paired_t`), in the
    form results.json stores (``mean``, ``lo``, ``hi``, ``n``; no interval, NaN, below two pairs)."""
    return paired_t(a, b).figures()


def ci_text(p: Mapping[str, Any], spec: str = "+.1f") -> str:
    """A stored interval as ``mean [lo, hi]``, marked when it excludes 0 (``mean`` alone without an interval)."""
    iv = Interval(*(math.nan if p[k] is None else float(p[k]) for k in ("mean", "lo", "hi")), int(p["n"]))
    return iv.text(spec) + (" (CI excludes 0)" if iv.excludes_zero() else "")


def main(argv: Sequence[str] = None) -> Path:
    """Run the experiment as ``argv`` says; return its folder."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args, setting, clock, out = study_start(NAME, __doc__.split("\n")[0], SETTINGS, argv)
    s = SETTINGS[setting]
    cap, progress = s["cap"], not args.no_progress
    tune_seeds, report_seeds = ([0, 1], [100, 101]) if args.smoke else (TUNE_SEEDS, REPORT_SEEDS)
    if args.seeds is not None:
        report_seeds = list(args.seeds)
    train_seeds = (0,) if args.smoke else TRAIN_SEEDS
    # FAVOR's protocol: one FL job — one federation and one w_0 (init: federation) — episodes differ in the
    # system's draws and the minibatch orders
    base = {**s["env"], "max_rounds": cap, "init": "federation"}

    # 1-2. the target, from random's curves, and the best heuristic, both on the tuning seeds
    calib, tune, env, tune_rounds, best = target_and_best(out, base, HEURISTICS, tune_seeds, cap, args.workers,
                                                          progress, setting)
    omega = env["target_accuracy"]
    progress_doc: Dict[str, Any] = {"setting": setting, "env": env, "omega": omega, "tune_seeds": tune_seeds,
                                    "tune_mean_rounds": tune_rounds, "best_heuristic": best, "trained": {}}
    _progress(out, setting, progress_doc)
    if args.part == "tune":
        return out.out

    # 3. training, one run per variant and training seed
    trained: Dict[str, Dict[int, Any]] = {label: {} for label in VARIANTS}
    steps = args.train_steps or s["steps"]
    for label, algo in VARIANTS.items():
        for seed in train_seeds:
            train = {"n_timesteps": steps, "n_envs": 1 if args.smoke else 2, "max_rounds": cap,
                     "hyperparams": SMOKE_TRAIN_HP if args.smoke else {}}
            run_dir, curve, _ = common.train_dqn(out.out / "train" / f"{label}_s{seed}", algo, env, train, seed,
                                                 progress)
            seconds_file = run_dir / "train_time.json"
            trained[label][seed] = {"dir": str(run_dir), "curve": curve,
                                    "seconds": json.loads(seconds_file.read_text())["seconds"]}
            progress_doc["trained"][f"{label}_s{seed}"] = {"seconds": trained[label][seed]["seconds"],
                                                            "steps": steps, "returns": curve["return"]}
            _progress(out, setting, progress_doc)
    if args.part == "train":
        return out.out

    # 4. the report, on seeds nothing above looked at
    # FAVOR+ reads a 5-component PCA: its episodes run in an env that differs only in the observation's
    # PCA width (the PCA changes no dynamics), so they pair seed by seed with the others'
    policies = ["random", *HEURISTICS] + [f"favor_s{seed}={t['dir']}" for seed, t in trained["favor"].items()]
    report, _, _ = common.evaluate(out.out / "report", env, policies, report_seeds, workers=args.workers,
                                   progress=progress, env_name=setting)
    plus = [f"favorplus_s{seed}={t['dir']}" for seed, t in trained["favorplus"].items()]
    plus_records, _, _ = common.evaluate(out.out / "report_favorplus", {**env, "pca_components": 5}, plus,
                                         report_seeds, workers=args.workers, progress=progress, env_name=setting)
    report = list(report) + list(plus_records)
    results = _analyse(report, trained, cap, omega, best, tune_rounds, setting, s, steps, tune_seeds, report_seeds)
    diagnostics = q_diagnostics(out.out / "diagnostics.json", env, trained, report_seeds[:DIAG_EPISODES],
                                min(cap, DIAG_ROUNDS))
    for label, per_seed in diagnostics.items():
        results["policies"][label]["q_diagnostics"] = per_seed
    out.results(results)
    _figures(out, report, trained, cap, omega, setting)
    compute = common.episode_seconds(calib, tune, report) + sum(t["seconds"] for runs in trained.values()
                                                                 for t in runs.values())
    out.fragment(_table(results, setting, argv, clock, out, args.workers, compute))
    print((out.out / "table.md").read_text())
    return out.out


#: episodes (the first reporting seeds) and rounds per trained model that :func:`q_diagnostics` replays
DIAG_EPISODES, DIAG_ROUNDS = 2, 30


def q_diagnostics(path: Path, env: Mapping[str, Any], trained: Mapping[str, Mapping[int, Any]],
                  seeds: Sequence[int], rounds_cap: int) -> Dict[str, Dict[str, Dict[str, float]]]:
    """Why a trained variant picks what it picks: each model's deployed top-K replayed on ``seeds`` for
    ``rounds_cap`` rounds, with its Q-values recorded every round (cached in ``path``).

    Per model: ``q_rel_spread`` — the mean over rounds of the std of Q over the available clients, divided
    by the std over rounds of the clients' mean Q (how far apart it holds the clients, against how much the
    state moves every client's value; small = the clients look alike to it); ``rank_corr`` — Spearman's correlation of consecutive rounds'
    Q-vectors (1 = the same order every round, whatever the state); ``topk_overlap`` — the share of a
    round's K picks that were also picked the round before (uniform sampling of K of N: about K/N).
    """
    from scipy.stats import spearmanr

    from agents.favor import FavorAgent
    from fedsel_env.env import FedSelectEnv

    doc = json.loads(path.read_text()) if path.is_file() else {}
    key = json.dumps({"env": env, "seeds": list(seeds), "rounds": rounds_cap, "version": 2,
                      "models": {lab: {str(k): t["dir"] for k, t in runs.items()} for lab, runs in trained.items()}},
                     sort_keys=True, default=str)
    if doc.get("key") == key:
        return doc["diagnostics"]
    out: Dict[str, Dict[str, Dict[str, float]]] = {}
    for label, runs in trained.items():
        out[label] = {}
        for seed, t in runs.items():
            model_dir = Path(t["dir"])
            from agents.favor import read_env_config

            train_cfg = read_env_config(model_dir / "model.zip")
            cfg = {**{k: v for k, v in env.items() if k != "preset"}, "action_mode": "topk", "observation": "dict",
                   "pca_components": train_cfg.get("pca_components"), "max_rounds": rounds_cap,
                   "target_accuracy": 1.0}
            if "preset" in env:
                from fedsel_env.config import PRESETS

                cfg = {**PRESETS[env["preset"]], **cfg}
            spreads, levels, corrs, overlaps = [], [], [], []
            with FedSelectEnv(config=cfg) as e:
                agent = FavorAgent.load(model_dir / "model.zip", e.selection_spec)
                for ep_seed in seeds:
                    obs, _ = e.reset(seed=int(ep_seed))
                    prev_q, prev_pick, done = None, None, False
                    while not done:
                        q = agent.q_values(obs)
                        avail = agent.available(obs)
                        spreads.append(float(np.std(q[avail])))
                        levels.append(float(np.mean(q[avail])))
                        pick = agent.select(obs)
                        if prev_q is not None:
                            corrs.append(float(spearmanr(prev_q, q).statistic))
                            overlaps.append(len(set(pick) & set(prev_pick)) / max(len(pick), 1))
                        prev_q, prev_pick = q, pick
                        obs, _, term, trunc, _ = e.step(agent.to_action(pick))
                        done = term or trunc
            out[label][f"{label}_s{seed}"] = {"q_rel_spread": float(np.mean(spreads) / (np.std(levels) + 1e-12)),
                                              "rank_corr": float(np.nanmean(corrs)),
                                              "topk_overlap": float(np.mean(overlaps)),
                                              "uniform_overlap": float(cfg.get("clients_per_round", 5))
                                              / float(cfg.get("num_clients", 20))}
    path.write_text(json.dumps({"key": key, "diagnostics": out}, indent=1) + "\n")
    return out


def _progress(out: Any, setting: str, doc: Mapping[str, Any]) -> None:
    """The parts finished so far, as ``<out>/progress.json`` (and, when publishing,
    ``experiments/results/favor_study_<setting>_progress.json``): a long run's pieces land as they finish."""
    text = json.dumps(common.jsonable(doc), indent=1, allow_nan=False) + "\n"
    (out.out / "progress.json").write_text(text)
    if out.publish:
        common.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        (common.RESULTS_DIR / f"{NAME}_{setting}_progress.json").write_text(text)


def _analyse(report, trained, cap, omega, best, tune_rounds, setting, s, steps, tune_seeds, report_seeds) -> Dict:
    res: Dict[str, Any] = {"setting": setting, "env": s["env"], "cap": cap, "omega": omega, "tune_seeds": tune_seeds,
                           "report_seeds": report_seeds, "train_steps": steps, "best_heuristic": best,
                           "tune_mean_rounds": tune_rounds, "policies": {}}
    base_r, best_r = rounds(report, "random", cap), rounds(report, best, cap)
    base_a, best_a = final_accuracy(report, "random"), final_accuracy(report, best)
    groups: Dict[str, List[str]] = {pol: [pol] for pol in ("random", *HEURISTICS)}
    groups.update({label: [f"{label}_s{seed}" for seed in runs] for label, runs in trained.items()})
    # the differences below subtract seed-ordered arrays: they are paired by seed only if every side has the seeds
    check_paired_seeds(report, [m for members in groups.values() for m in members], report_seeds)
    res["episodes"] = episode_rows(report, groups, cap, federation_seed=s["env"].get("federation_seed"))
    for name, members in groups.items():
        r = np.mean([rounds(report, m, cap) for m in members], axis=0)
        a = np.mean([final_accuracy(report, m) for m in members], axis=0)
        missed = sum(int(np.sum(rounds(report, m, cap) >= cap)) for m in members)
        picks = [participation(report, m) for m in members]
        entry = {"mean_rounds": float(r.mean()), "missed": missed, "episodes": int(r.size) * len(members),
                 "mean_final_accuracy": float(a.mean()),
                 "jain": float(np.mean([p["jain"] for p in picks])),
                 "top_client_share": float(np.mean([p["top_share"] for p in picks])),
                 "rounds_vs_random": paired(r, base_r), "rounds_vs_best": paired(r, best_r),
                 "final_acc_vs_random": paired(a, base_a), "final_acc_vs_best": paired(a, best_a)}
        if len(members) > 1:
            entry["per_training_seed"] = per_training_seed(report, members, cap, base_r, best_r)
            entry.update(across_training_seeds(entry["per_training_seed"]))
            entry["training_seconds"] = [trained[name][int(m.rsplit("_s", 1)[1])]["seconds"] for m in members]
            entry["training_returns"] = {m: trained[name][int(m.rsplit("_s", 1)[1])]["curve"]["return"]
                                         for m in members}
        res["policies"][name] = entry
    return res


def _table(res: Mapping[str, Any], setting: str, argv: Sequence[str], clock: Any, out: Any, workers: int,
           compute: float) -> str:
    best = res["best_heuristic"]
    rows = []
    for name, e in res["policies"].items():
        label = {"favor": "FAVOR (paper's settings)", "favorplus": "FAVOR+ (variant)"}.get(name, name)
        rows.append([label, f"{e['mean_rounds']:.1f}", f"{e['missed']}/{e['episodes']}",
                     "—" if name == "random" else ci_text(e["rounds_vs_random"]),
                     across_text(e, "rounds_vs_random"),
                     "—" if name == best else ci_text(e["rounds_vs_best"]),
                     f"{e['mean_final_accuracy']:.3f}",
                     "—" if name == "random" else ci_text(e["final_acc_vs_random"], "+.3f"),
                     f"{e['jain']:.2f} / {e['top_client_share']:.3f}"])
    table = markdown.table(["policy", "rounds to Ω (mean)", "missed Ω", "Δ rounds vs random [95% CI]",
                             "Δ vs random across training seeds [95% CI]",
                             f"Δ rounds vs {best} [95% CI]", "final accuracy", "Δ final acc vs random [95% CI]",
                             "picks: Jain / most-picked client's share"], rows, align="lrrrrrrrr")
    lines = [f"**{setting}** (`{json.dumps(res['env'])}`), round cap {res['cap']}: Ω = {res['omega']:.2f}, where "
             f"random's median accuracy curve stands at round {res['cap'] // 2} on the tuning seeds "
             f"{res['tune_seeds'][0]}–{res['tune_seeds'][-1]}. Best heuristic on the tuning seeds: `{best}` "
             f"(mean rounds: " + ", ".join(f"{k} {v:.1f}" for k, v in res["tune_mean_rounds"].items()) + "). "
             f"Reported on seeds {res['report_seeds'][0]}–{res['report_seeds'][-1]}, never looked at before; "
             f"a missed Ω counts as the cap (so those means are lower bounds). Trained variants: "
             f"{len(TRAIN_SEEDS) if setting != 'smoke' else 1} training seeds × {res['train_steps']} steps each, "
             f"their rounds averaged per episode seed: the Δ CI is conditional on the trained models; the one across "
             f"training seeds (a t interval over each model's own mean Δ) is the method's.\n", table, ""]
    for name in ("favor", "favorplus"):
        e = res["policies"].get(name)
        if e and "per_training_seed" in e:
            per = "; ".join(f"{m}: {v['mean_rounds']:.1f} rounds, vs random {ci_text(v['rounds_vs_random'])}"
                            for m, v in e["per_training_seed"].items())
            lines.append(f"- {name} per training seed — {per}; training took "
                         + ", ".join(f"{t / 60:.1f}" for t in e["training_seconds"]) + " min.")
        if e and "q_diagnostics" in e:
            d = e["q_diagnostics"]
            lines.append(f"- {name}'s Q-values, deployed (first {DIAG_EPISODES} reporting seeds, ≤ {DIAG_ROUNDS} "
                         f"rounds; `q_diagnostics`) — spread of Q over the available clients / spread of its mean over the "
                         f"rounds: "
                         + ", ".join(f"{v['q_rel_spread']:.3f}" for v in d.values())
                         + "; Spearman correlation of consecutive rounds' Q: "
                         + ", ".join(f"{v['rank_corr']:.2f}" for v in d.values())
                         + "; share of a round's picks also picked the round before: "
                         + ", ".join(f"{v['topk_overlap']:.2f}" for v in d.values())
                         + f" (uniform sampling: about {next(iter(d.values()))['uniform_overlap']:.2f}).")
    lines.append("")
    command = common.command_line("favor_study.py", argv)
    lines.append(common.wall_time_note(clock.seconds(), workers, command, compute,
                                       "its episodes (single-process time, summed from their records) plus the DQN "
                                       "trainings (wall time)", longest=out.invocation(clock.seconds(), command)))
    return "\n".join(lines)


def _figures(out: Any, report, trained, cap: int, omega: float, setting: str) -> None:
    """Training returns per run, and the mean accuracy curves on the reporting seeds."""
    fig, ax = common.figure(7.5, 4.0)
    for label, runs in trained.items():
        for seed, t in runs.items():
            r = np.asarray(t["curve"]["return"], dtype=np.float64)
            w = max(min(10, r.size // 3), 1)
            if r.size >= w:
                ax.plot(np.convolve(r, np.ones(w) / w, mode="valid"), label=f"{label} seed {seed}")
    ax.set(title=f"{setting}: training episode returns (moving mean)", xlabel="training episode",
           ylabel="episode return")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    out.figure(fig, f"{NAME}_{setting}_training")
    fig, ax = common.figure(7.5, 4.5)
    names = ["random", *HEURISTICS] + [f"{label}_s{seed}" for label, runs in trained.items() for seed in runs]
    for pol in names:
        eps = common.episodes_of(report, pol)
        ys = np.stack([common.held(e["curves"]["accuracy"], cap + 1) for e in eps])
        ax.plot(np.arange(cap + 1), ys.mean(0), label=pol, linestyle="-" if "_s" not in pol else ":")
    ax.axhline(omega, color="black", linestyle="--", linewidth=1, label=f"Ω = {omega:.2f}")
    ax.set(title=f"{setting}: accuracy on the reporting seeds (mean; an episode ends at Ω,\n"
                 f"its curve is held at its last value after that)", xlabel="round", ylabel="test accuracy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small", ncol=2)
    out.figure(fig, f"{NAME}_{setting}_accuracy")


if __name__ == "__main__":
    common.run_cli(main, "favor_study.py")
