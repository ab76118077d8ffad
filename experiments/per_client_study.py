"""The per-client selector (issue #19) against the heuristics and FAVOR, on held-out episodes and on unseen federations.

Issue #19; the selector is ``agents/per_client_net.py`` (one network scores every client), trained as
per-client Q-values by the Double DQN (``configs/pc_dqn.yml``: the ``one`` mode with a 1/K step, deployed
as top-K). That form was chosen over PPO on the ``topk`` scores (``pc_ppo``) on the tuning seeds
1000–1019 of the digits default (one training seed each: ``pc_dqn`` 19.8 rounds to 87%, ``pc_ppo``
25.3, random 21.1; docs/AGENTS.md). The protocol is ``experiments/favor_study.py``'s (issue
#17), with two reports:

    python experiments/per_client_study.py --setting digits       # the default preset
    python experiments/per_client_study.py --setting fmnist_e1 --workers 2   # Fashion-MNIST σ = 0.8, MLP (hours)
    python experiments/per_client_study.py --smoke                # seconds: the tiny preset

1. **Target and best heuristic, on the tuning seeds 1000–1019** (one FL job: ``federation_seed`` 0,
   ``init: federation``): Ω as favor_study calibrates it (random's median accuracy at half the cap), and
   the best of ``kcenter``, ``afl``, ``pow_d`` and ``oort`` by mean rounds to Ω.
2. **Training**: ``pc_dqn`` with ``train_agent.py``'s machinery, once per training seed (0, 1, 2), on a new
   federation every episode (``federation_seed: null``) — federations the reports below never use.
3. **Report on the training protocol's federation** (``federation_seed`` 0, the reporting seeds
   5000–5029, which nothing above looked at): random, the heuristics, the per-client selector and,
   when favor_study's models of this setting exist, FAVOR (the paper's) and FAVOR+ — both trained on
   federation 0 itself.
4. **Report on unseen federations**: ``federation_seed: null`` and the seeds 7000–7029, so each
   episode is a federation no policy was trained on; FAVOR's flat Q-network runs there only because N
   and d are the same.

On ``fmnist_e1`` (favor_study's Fashion-MNIST setting, nothing tuned for it) only step 3 is reported, without
the ensemble (see ``SETTINGS``). Rounds to Ω are paired by seed against random and against the best heuristic, with 95% t confidence
intervals over the seeds (a per-client run's rounds averaged over its training seeds per episode).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from experiments import common  # noqa: E402
from experiments.favor_study import SETTINGS as FAVOR_SETTINGS  # noqa: E402
from experiments.favor_study import (TUNE_SEEDS, REPORT_SEEDS, TRAIN_SEEDS, across_text,  # noqa: E402
                                     across_training_seeds, check_paired_seeds, ci_text, episode_rows,
                                     final_accuracy, paired, participation, per_training_seed, rounds,
                                     study_start, target_and_best)
from fedsel_eval import markdown  # noqa: E402

NAME = "per_client_study"
HEURISTICS = ("kcenter", "afl", "pow_d", "oort")
UNSEEN_SEEDS = list(range(7000, 7030))  # federation_seed null: each seed its own federation
#: setting -> env config (without target), round cap, training steps, favor_study's folder of trained models
SETTINGS: Dict[str, Dict[str, Any]] = {
    "digits": {"env": {"preset": "default"}, "cap": 60, "steps": 10000},
    # favor_study's Fashion-MNIST σ = 0.8 setting (MLP, E = 1), the design frozen on digits: nothing tuned here
    # Only the seen report and no ensemble here: FAVOR's Fashion-MNIST models are not part of this run (the
    # unseen report exists to put FAVOR off its federation), federation 0 is already one the selector never
    # trained on, and the ensemble was no better than its members on digits' reporting seeds; both would add
    # about an hour of the 2-core machine.
    "fmnist_e1": {"env": {k: v for k, v in FAVOR_SETTINGS["fmnist_e1"]["env"].items() if k != "federation_seed"},
                  "cap": FAVOR_SETTINGS["fmnist_e1"]["cap"], "steps": 10000, "reports": ("seen",),
                  "ensemble": False},
    "smoke": {"env": {"preset": "tiny", "system": {"availability": 1.0}}, "cap": 6, "steps": 64},
}
ALGO = "pc_dqn"  # train_agent.py --algo (configs/pc_dqn.yml)
SMOKE_TRAIN_HP = {"learning_starts": 16, "batch_size": 16, "buffer_size": 200, "policy_kwargs": "dict(hidden=16)"}


def main(argv: Sequence[str] = None) -> Path:
    """Run the experiment as ``argv`` says; return its folder."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args, setting, clock, out = study_start(NAME, __doc__.split("\n")[0], SETTINGS, argv)
    s = SETTINGS[setting]
    cap, progress = s["cap"], not args.no_progress
    smoke = setting == "smoke"
    tune_seeds, report_seeds, unseen_seeds = ([0, 1], [100, 101], [200, 201]) if smoke else \
        (TUNE_SEEDS, REPORT_SEEDS, UNSEEN_SEEDS)
    train_seeds = (0,) if smoke else TRAIN_SEEDS
    base = {**s["env"], "max_rounds": cap, "init": "federation", "federation_seed": 0}

    # 1. the target and the best heuristic, on the tuning seeds
    _, _, env, tune_rounds, best = target_and_best(out, base, HEURISTICS, tune_seeds, cap, args.workers, progress,
                                                   setting)
    omega = env["target_accuracy"]
    doc: Dict[str, Any] = {"setting": setting, "env": env, "omega": omega, "tune_mean_rounds": tune_rounds,
                           "best_heuristic": best, "trained": {}}
    _progress(out, setting, doc)
    if args.part == "tune":
        return out.out

    # 2. training across federations
    steps = args.train_steps or s["steps"]
    train_env = {**{k: v for k, v in env.items() if k not in ("federation_seed", "init")},
                 "federation_seed": None, "init": "episode", "action_mode": "one", "one_mode_step": "1/K",
                 "observation": "dict", "pca_components": 3 if smoke else 5}
    trained: Dict[int, Any] = {}
    for seed in train_seeds:
        train = {"n_timesteps": steps, "n_envs": 1 if smoke else 2, "max_rounds": cap,
                 "hyperparams": SMOKE_TRAIN_HP if smoke else {}}
        run_dir, curve, _ = common.train_dqn(out.out / "train" / f"{ALGO}_s{seed}", ALGO, train_env, train, seed,
                                             progress)
        seconds = json.loads((run_dir / "train_time.json").read_text())["seconds"]
        trained[seed] = {"dir": str(run_dir), "curve": curve, "seconds": seconds}
        doc["trained"][f"{ALGO}_s{seed}"] = {"seconds": seconds, "steps": steps, "returns": curve["return"]}
        _progress(out, setting, doc)
    if args.part == "train":
        return out.out

    # 3-4. the reports
    mine = [f"per_client_s{seed}={t['dir']}" for seed, t in trained.items()]
    # the ensemble of the training seeds' models (each member's scores standardised, then summed): chosen on
    # the tuning seeds, where it needed fewer rounds than random and pow_d (that tuning run kept no record)
    ensemble = len(trained) > 1 and s.get("ensemble", True)
    if ensemble:
        mine.append("per_client_ens=per_client:model_path=["
                    + ",".join(str(Path(t["dir"]) / "model.zip") for t in trained.values()) + "]")
    favor = _favor_models(setting)
    res: Dict[str, Any] = {"setting": setting, "env": s["env"], "cap": cap, "omega": omega,
                           "tune_seeds": tune_seeds, "train_steps": steps, "best_heuristic": best,
                           "tune_mean_rounds": tune_rounds, "reports": {}}
    reports = [r for r in (("seen", env, report_seeds), ("unseen", {**env, "federation_seed": None}, unseen_seeds))
               if r[0] in s.get("reports", ("seen", "unseen"))]
    for name, cfg, seeds in reports:
        records, _, _ = common.evaluate(out.out / f"report_{name}", cfg, ["random", *HEURISTICS, *favor],
                                        seeds, workers=args.workers, progress=progress, env_name=setting, plots=False)
        # the selector reads a PCA of its training width: its episodes run in an env that differs only there
        # (the PCA changes no dynamics), so they pair seed by seed with the others'
        own, _, _ = common.evaluate(out.out / f"report_{name}_per_client",
                                    {**cfg, "pca_components": train_env["pca_components"]}, mine, seeds,
                                    workers=args.workers, progress=progress, env_name=setting, plots=False)
        records = list(records) + list(own)
        res["reports"][name] = _analyse(records, cap, best, seeds,
                                        {"per_client": [f"per_client_s{s_}" for s_ in trained],
                                         "per_client_ens": ["per_client_ens"] if ensemble else [],
                                         "favor": [lab for lab in (f.split("=")[0] for f in favor)
                                                   if lab.startswith("favor_")]},
                                        federation_seed=cfg.get("federation_seed"))
    res["training_seconds"] = [t["seconds"] for t in trained.values()]
    out.results(res)
    _figures(out, res, trained, setting)
    out.fragment(_table(res, argv, clock, out, args.workers))
    print((out.out / "table.md").read_text())
    return out.out


def _favor_models(setting: str) -> List[str]:
    """favor_study's trained FAVOR models of this setting (the paper's settings), if that run is here."""
    folder = common.RUNS_DIR / "favor_study" / setting / "train"
    return [f"favor_s{seed}={folder / f'favor_s{seed}'}" for seed in TRAIN_SEEDS
            if (folder / f"favor_s{seed}" / "model.zip").is_file()]


def _analyse(records, cap: int, best: str, seeds: Sequence[int], groups_extra: Mapping[str, List[str]],
             federation_seed: Any = None) -> Dict:
    base_r, best_r = rounds(records, "random", cap), rounds(records, best, cap)
    groups = {pol: [pol] for pol in ("random", *HEURISTICS)}
    groups.update({k: v for k, v in groups_extra.items() if v})
    # the differences below subtract seed-ordered arrays: they are paired by seed only if every side has the seeds
    check_paired_seeds(records, [m for members in groups.values() for m in members], seeds)
    out: Dict[str, Any] = {"seeds": list(seeds), "federation_seed": federation_seed, "policies": {},
                           "episodes": episode_rows(records, groups, cap, federation_seed=federation_seed)}
    for name, members in groups.items():
        r = np.mean([rounds(records, m, cap) for m in members], axis=0)
        a = np.mean([final_accuracy(records, m) for m in members], axis=0)
        picks = [participation(records, m) for m in members]
        entry = {"mean_rounds": float(r.mean()), "episodes": int(r.size) * len(members),
                 "missed": sum(int(np.sum(rounds(records, m, cap) >= cap)) for m in members),
                 "mean_final_accuracy": float(a.mean()), "jain": float(np.mean([q["jain"] for q in picks])),
                 "rounds_vs_random": paired(r, base_r), "rounds_vs_best": paired(r, best_r)}
        if len(members) > 1:
            entry["per_training_seed"] = per_training_seed(records, members, cap, base_r, best_r)
            entry.update(across_training_seeds(entry["per_training_seed"]))
        out["policies"][name] = entry
    for name in ("per_client", "per_client_ens"):  # the second goal: beat FAVOR
        if groups.get(name) and groups.get("favor"):
            mine = np.mean([rounds(records, m, cap) for m in groups[name]], axis=0)
            theirs = np.mean([rounds(records, m, cap) for m in groups["favor"]], axis=0)
            out[f"{name}_vs_favor"] = paired(mine, theirs)
    return out


def _table(res: Mapping[str, Any], argv: Sequence[str], clock: Any, out: Any, workers: int) -> str:
    best = res["best_heuristic"]
    lines = [f"**{res['setting']}** (`{json.dumps(res['env'])}`), round cap {res['cap']}: Ω = {res['omega']:.2f} "
             f"(favor_study's rule, tuning seeds {res['tune_seeds'][0]}–{res['tune_seeds'][-1]}); best heuristic on "
             f"the tuning seeds: `{best}` (mean rounds: "
             + ", ".join(f"{k} {v:.1f}" for k, v in res["tune_mean_rounds"].items()) + "). The per-client "
             f"selector: `{ALGO}`, {res['train_steps']} steps per training seed on a new federation every episode "
             f"(training took " + ", ".join(f"{t / 60:.1f}" for t in res["training_seconds"]) + " min). A missed Ω "
             "counts as the cap.\n"]
    titles = {"seen": "the training protocol's federation (`federation_seed` 0; FAVOR was trained on it)",
              "unseen": "unseen federations (`federation_seed` null: each seed its own federation)"}
    for name, rep in res["reports"].items():
        rows = []
        for pol, e in rep["policies"].items():
            label = {"per_client": f"per-client selector ({ALGO}), mean of the 3 training seeds",
                     "per_client_ens": "per-client selector, ensemble of the 3 seeds",
                     "favor": "FAVOR (paper's settings)"}.get(pol, pol)
            rows.append([label, f"{e['mean_rounds']:.1f}", f"{e['missed']}/{e['episodes']}",
                         "—" if pol == "random" else ci_text(e["rounds_vs_random"]),
                         across_text(e, "rounds_vs_random"),
                         "—" if pol == best else ci_text(e["rounds_vs_best"]),
                         f"{e['mean_final_accuracy']:.3f}", f"{e['jain']:.2f}"])
        lines += [f"On {titles[name]}, seeds {rep['seeds'][0]}–{rep['seeds'][-1]}:\n",
                  markdown.table(["policy", "rounds to Ω", "missed", "Δ vs random [95% CI]",
                                   "Δ vs random across training seeds [95% CI]", f"Δ vs {best} [95% CI]",
                                   "final acc", "Jain (picks)"], rows, align="lrrrrrrr"), ""]
        for key, what in (("per_client_vs_favor", "per-client selector"), ("per_client_ens_vs_favor", "its ensemble")):
            if key in rep:
                lines.append(f"- {what} − FAVOR, rounds to Ω (paired by seed): {ci_text(rep[key])}")
        e = rep["policies"].get("per_client")
        if e and "per_training_seed" in e:
            lines.append("- per training seed: " + "; ".join(
                f"{m}: {v['mean_rounds']:.1f}, vs random {ci_text(v['rounds_vs_random'])}, vs {best} "
                f"{ci_text(v['rounds_vs_best'])}" for m, v in e["per_training_seed"].items()))
            lines.append("")
    command = common.command_line("per_client_study.py", argv)
    lines.append(common.wall_time_note(clock.seconds(), workers, command,
                                       longest=out.invocation(clock.seconds(), command)))
    return "\n".join(lines)


def _figures(out: Any, res: Mapping[str, Any], trained: Mapping[int, Any], setting: str) -> None:
    """Training returns per seed; paired differences in rounds to Ω against random, per report."""
    fig, ax = common.figure(7.5, 4.0)
    for seed, t in trained.items():
        r = np.asarray(t["curve"]["return"], dtype=np.float64)
        w = max(min(20, r.size // 3), 1)
        if r.size >= w:
            ax.plot(np.convolve(r, np.ones(w) / w, mode="valid"), label=f"{ALGO} seed {seed}")
    ax.set(title=f"{setting}: per-client selector, training episode returns\n(moving mean; a new federation "
                 f"each episode)", xlabel="training episode", ylabel="episode return")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    out.figure(fig, f"{NAME}_{setting}_training")
    reports = list(res["reports"].items())
    fig, axes = common.figure(9.0, 3.8, ncols=len(reports))
    for ax, (name, rep) in zip(np.asarray(axes).ravel(), reports):
        pols = [p for p in rep["policies"] if p != "random"]
        for i, pol in enumerate(pols):
            d = rep["policies"][pol]["rounds_vs_random"]
            color = {"per_client": "tab:red", "per_client_ens": "darkred", "favor": "tab:purple"}.get(pol, "tab:gray")
            ax.errorbar(d["mean"], i, xerr=[[d["mean"] - d["lo"]], [d["hi"] - d["mean"]]], fmt="o", color=color,
                        capsize=3)
        ax.axvline(0, color="black", linewidth=1)
        ax.set_yticks(range(len(pols)), [{"per_client": "per-client", "per_client_ens": "per-client ens.",
                                          "favor": "FAVOR"}.get(p, p) for p in pols])
        ax.invert_yaxis()
        ax.set(title=f"{name} federation(s)", xlabel="Δ rounds to Ω vs random [95% CI]")
        ax.grid(alpha=0.3, axis="x")
    out.figure(fig, f"{NAME}_{setting}_paired")


def _progress(out: Any, setting: str, doc: Mapping[str, Any]) -> None:
    text = json.dumps(common.jsonable(doc), indent=1, allow_nan=False) + "\n"
    (out.out / "progress.json").write_text(text)
    if out.publish:
        common.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        (common.RESULTS_DIR / f"{NAME}_{setting}_progress.json").write_text(text)


if __name__ == "__main__":
    common.run_cli(main, "per_client_study.py")
