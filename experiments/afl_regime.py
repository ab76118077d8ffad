"""AFL where it can act: 1,000 clients, 20 per round, α2 scaled to the valuations' spread, rates tuned per method.

J. Goetz, K. Malik, D. Bui, S. Moon, H. Liu, A. Kumar, "Active Federated Learning", arXiv:1909.12641,
2019 (seed 001). docs/SPEC.md §4 (the ``afl`` agent) and §6 (the claim: loss-valuation sampling needs 20–70%
fewer rounds than uniform sampling for the same accuracy); issue #20.

    python experiments/afl_regime.py --workers 2              # the run of docs/REPRODUCTION.md §3
    python experiments/afl_regime.py --part tune --workers 2  # only the tuning part (resumable)
    python experiments/afl_regime.py --smoke                  # seconds: the tiny preset

Why this run: ``experiments/afl_rounds.py`` ran AFL on 20 or 40 digits clients with 5 or 8 per round. There
the valuations v_k = √n_k·F_k lie within a few units of each other at reset, so the paper's α2 = 0.01 gives
a flat softmax, and with α1 = 0.75 the candidate pool is about K: AFL is nearly uniform sampling. Here:

- **Federation.** Fashion-MNIST (70,000 images; 58,000 for training) split over N = 1,000 clients by a
  Dirichlet(0.3) label partition with lognormal(σ = 1) client sizes (11 to about 1,000 training samples;
  the paper's users differ in size too, and v_k's √n_k then matters), softmax regression (``logreg``),
  one local epoch at batch 10, FedAvg (weights ∝ n_k), K = 20 per round, every client available, each
  seed its own federation and w_0 (common random numbers: every policy and rate of one seed share them).
  Synthetic(1, 1) was measured first and set aside: at N = 1,000 one shared logistic model stays near 20%
  global accuracy after 200 rounds with either policy, too low and noisy for rounds to a target.
- **α2.** ``afl:alpha2_relative=c`` (agents/afl.py): α2 = c / std(v⁰), v⁰ the N valuations of the
  profiling round, fixed for the episode; two clients one reset-std apart get weights in the ratio e^c.
  c ∈ {0.3, 1, 3} is tuned, and the paper's α2 = 0.01 is kept beside it. α1 = 0.75 (250 candidates for
  20 picks) and α3 = 0.1 are the paper's.
- **Rates tuned per method.** The local learning rate η ∈ {0.01, 0.03, 0.1, 0.3} for each method (and c for
  AFL), on tuning seeds 1000–1004, by mean rounds to Ω (a miss counts as the cap; ties by the higher mean
  accuracy over the rounds). Ω is calibrated as ``favor_study.py`` does: the 0.01-grid accuracy random's
  median curve (at the grid's middle rate, η = 0.03) reaches at half the round cap. The tuning episodes
  play the whole cap with an unreachable target; rounds to Ω are read off their accuracy curves (the
  first round whose accuracy is ≥ Ω: the round at which the env would have ended the episode).
- **A control** that is not the paper's baseline: sampling ∝ n_k (``random_nk``), tuned the same way. AFL's
  v_k grows with √n_k, so part of what it gains over uniform sampling may be more training samples per
  round; the control and the samples per round (reported) tell how much.
- **Report.** Each method at its own tuned settings on reporting seeds 2000–2029, never looked at while
  tuning; rounds to Ω as paired differences afl − random with 95% Student-t CIs, and the relative change
  of the mean rounds against the paper's −20% to −70%.

Every remaining difference from the paper: data (Fashion-MNIST images split by a Dirichlet label
partition, not Reddit / Sticker Intent users' messages), model (softmax regression, not a character
embedding + BLSTM + MLP), scale (1,000 clients and 20 per round, not hundreds per round out of a population
of many thousands), server optimiser (plain FedAvg averaging, not FedAdam; so only the local rate is
tuned, not the server's), local training (one epoch at batch 10, not two passes at batch 128), α2 (scaled
to the reset valuations' spread and tuned, not 0.01 — the paper's is run too), the profiling round (every
client's valuation is initialised from w_0's loss; the paper does not say how it initialises them), the
tuning grid (four rates, five tuning seeds) and the metric (rounds to one target accuracy, Ω calibrated
on the tuning seeds, not the paper's accuracy-vs-rounds curves).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from experiments import common  # noqa: E402
from experiments.favor_study import calibrate_target, ci_text, paired  # noqa: E402
from fedsel_eval import markdown  # noqa: E402

NAME = "afl_regime"
CAP = 100
RATES = (0.01, 0.03, 0.1, 0.3)
CALIBRATION_RATE = 0.03  # the grid's middle: Ω is calibrated on random's curves at this rate
#: AFL's temperature settings: (label, --policy parameter text)
AFL_SETTINGS: Tuple[Tuple[str, str], ...] = (("afl_paper", "alpha2=0.01"), ("afl_c0.3", "alpha2_relative=0.3"),
                                              ("afl_c1", "alpha2_relative=1"), ("afl_c3", "alpha2_relative=3"))
#: the methods whose settings are tuned separately: method -> the policy labels it chooses among
METHODS: Dict[str, Tuple[str, ...]] = {"random": ("random",), "afl": ("afl_c0.3", "afl_c1", "afl_c3"),
                                       "afl_paper_alpha2": ("afl_paper",), "random_nk": ("random_nk",)}
#: a control that is not the paper's baseline: sampling ∝ n_k, tuned and reported in run folders of its own
#: (``tune_extra``, ``report_extra``), so adding it reused the finished parts of the main run
EXTRA = ("random_nk",)
TUNE_SEEDS = list(range(1000, 1005))
REPORT_SEEDS = list(range(2000, 2030))
ENV: Dict[str, Any] = {"dataset": "fashion_mnist", "num_clients": 1000, "partition": "dirichlet",
                       "partition_params": {"alpha": 0.3}, "quantity_skew": 1.0, "model": "logreg",
                       "local_epochs": 1, "batch_size": 10, "clients_per_round": 20,
                       "system": {"availability": 1.0}, "track_improvement": False}
SMOKE = {"env": {"preset": "tiny", "system": {"availability": 1.0}}, "cap": 6, "rates": (0.05, 0.1),
         "calibration_rate": 0.05, "afl": (("afl_paper", "alpha2=0.01"), ("afl_c1", "alpha2_relative=1")),
         "methods": {"random": ("random",), "afl": ("afl_c1",), "afl_paper_alpha2": ("afl_paper",),
                     "random_nk": ("random_nk",)},
         "tune_seeds": [0, 1], "report_seeds": [100, 101]}


def rounds_from_curve(curve: Sequence[float], omega: float, cap: int) -> int:
    """The round at which an episode with target ``omega`` would have ended: the first round r ≥ 1 whose
    accuracy (``curve[r]``; ``curve[0]`` is w_0's) is ≥ Ω, else ``cap`` (a miss, counted at the cap)."""
    acc = np.asarray([np.nan if a is None else a for a in curve[1:cap + 1]], dtype=np.float64)
    hit = np.flatnonzero(acc >= omega)
    return int(hit[0] + 1) if hit.size else int(cap)


def verdict(change: Mapping[str, float]) -> Tuple[str, str]:
    """The verdict on the claim (−20% to −70% in mean rounds) from the relative change and its 95% CI.

    :param change: ``mean``, ``lo``, ``hi`` of afl's change in mean rounds, in percent (negative: fewer).
    :return: (verdict, its reason).
    """
    if change["hi"] < 0 and change["mean"] <= -20:
        return "reproduced", "AFL needs fewer rounds, the CI excludes 0 and the estimate lies in the claimed range"
    if change["hi"] < 0:
        return "partly reproduced", "AFL needs fewer rounds (the CI excludes 0), but less than the claimed 20%"
    if change["lo"] > 0:
        return "not reproduced", "AFL needs more rounds than uniform sampling (the CI excludes 0)"
    if change["lo"] > -20:
        return "not reproduced", "the CI includes 0 and excludes the claimed −20% or more"
    return "inconclusive", "the CI includes both 0 and the claimed −20%"


def main(argv: Sequence[str] = None) -> Path:
    """Run the experiment as ``argv`` says; return its folder."""
    argv = list(sys.argv[1:] if argv is None else argv)
    p = common.parser(NAME, __doc__.split("\n")[0])
    p.add_argument("--part", choices=["all", "tune"], default="all",
                   help="stop after the tuning part (each part is resumable; 'all' runs both)")
    args = p.parse_args(argv)
    clock, out = common.start(NAME, args)
    if args.smoke:
        base, cap, rates, cal_rate = SMOKE["env"], SMOKE["cap"], SMOKE["rates"], SMOKE["calibration_rate"]
        afl_settings, methods = SMOKE["afl"], SMOKE["methods"]
        tune_seeds, report_seeds = SMOKE["tune_seeds"], SMOKE["report_seeds"]
    else:
        base, cap, rates, cal_rate = ENV, CAP, RATES, CALIBRATION_RATE
        afl_settings, methods, tune_seeds, report_seeds = AFL_SETTINGS, METHODS, TUNE_SEEDS, REPORT_SEEDS
    if args.seeds is not None:
        report_seeds = list(args.seeds)
    if set(report_seeds) & set(tune_seeds):
        raise ValueError(f"--seeds {report_seeds} is invalid: the reporting seeds must not include the tuning "
                         f"seeds {tune_seeds}")
    progress = not args.no_progress
    policies = ["random"] + [f"{label}=afl:{params}" for label, params in afl_settings]

    # 1. tuning: every policy and rate on the tuning seeds, to the cap (an unreachable target)
    tune: Dict[float, List[Dict[str, Any]]] = {}
    for lr in rates:
        env = {**base, "lr": lr, "max_rounds": cap, "target_accuracy": 1.0}
        tune[lr], _, _ = common.evaluate(out.out / "tune" / f"lr_{lr:g}", env, policies, tune_seeds,
                                         workers=args.workers, progress=progress, env_name=f"tune lr={lr:g}",
                                         plots=False)
        extra, _, _ = common.evaluate(out.out / "tune_extra" / f"lr_{lr:g}", env, list(EXTRA), tune_seeds,
                                      workers=args.workers, progress=progress, env_name=f"tune lr={lr:g}",
                                      plots=False)
        tune[lr] = list(tune[lr]) + list(extra)
    omega = calibrate_target(common.episodes_of(tune[cal_rate], "random"), cap)
    grid = {pol: {lr: _tune_cell(tune[lr], pol, omega, cap) for lr in rates}
            for pol in ["random"] + [label for label, _ in afl_settings] + list(EXTRA)}
    chosen = {m: _choose(grid, labels) for m, labels in methods.items()}
    print(f"Ω = {omega:.2f}; chosen: {chosen}")
    spread = _reset_spread(base, tune_seeds, dict(afl_settings), chosen, grid)
    results: Dict[str, Any] = {"env": base, "cap": cap, "rates": list(rates), "calibration_rate": cal_rate,
                               "afl_settings": dict(afl_settings), "tune_seeds": tune_seeds, "omega": omega,
                               "tuning_grid": {pol: {f"{lr:g}": c for lr, c in cells.items()}
                                               for pol, cells in grid.items()},
                               "chosen": chosen, "reset_valuations": spread}
    if args.part == "tune":
        out.results(results)
        _figure(out, grid, None, omega, cap, chosen, rates)
        out.fragment(_table(results, None, argv, clock, out, args.workers, common.episode_seconds(*tune.values())))
        print((out.out / "table.md").read_text())
        return out.out

    # 2. the report: each method at its own settings, on seeds the tuning never saw
    params = dict(afl_settings)
    by_rate: Dict[Tuple[str, float], List[str]] = {}
    for m, c in chosen.items():
        pol = c["policy"]
        spec = pol if pol in ("random", *EXTRA) else f"{m}={'afl:' + params[pol]}"
        by_rate.setdefault(("report_extra" if pol in EXTRA else "report", c["lr"]), []).append(spec)
    report: List[Dict[str, Any]] = []
    for (folder, lr), specs in sorted(by_rate.items()):
        env = {**base, "lr": lr, "max_rounds": cap, "target_accuracy": omega}
        recs, _, _ = common.evaluate(out.out / folder / f"lr_{lr:g}", env, specs, report_seeds,
                                     workers=args.workers, progress=progress, env_name=f"report lr={lr:g}")
        report += list(recs)
    rep = _analyse(report, list(methods), cap, report_seeds)
    results.update({"report_seeds": report_seeds, "report": rep})
    out.results(results)
    _figure(out, grid, (report, list(methods)), omega, cap, chosen, rates)
    compute = common.episode_seconds(*tune.values(), report)
    out.fragment(_table(results, rep, argv, clock, out, args.workers, compute))
    print((out.out / "table.md").read_text())
    return out.out


def _tune_cell(records: Sequence[Mapping[str, Any]], policy: str, omega: float, cap: int) -> Dict[str, Any]:
    eps = common.episodes_of(records, policy)
    r = [rounds_from_curve(e["curves"]["accuracy"], omega, cap) for e in eps]
    auc = [float(np.mean(common.held(e["curves"]["accuracy"], cap + 1)[1:])) for e in eps]
    return {"mean_rounds": float(np.mean(r)), "rounds": r, "missed": int(sum(x >= cap for x in r)),
            "mean_accuracy_over_rounds": float(np.mean(auc))}


def _choose(grid: Mapping[str, Mapping[float, Mapping[str, Any]]], labels: Sequence[str]) -> Dict[str, Any]:
    """The (policy, rate) of ``labels`` with the fewest mean rounds to Ω (ties: the higher mean accuracy)."""
    best = min(((pol, lr) for pol in labels for lr in grid[pol]),
               key=lambda x: (grid[x[0]][x[1]]["mean_rounds"], -grid[x[0]][x[1]]["mean_accuracy_over_rounds"]))
    return {"policy": best[0], "lr": best[1], "tune_mean_rounds": grid[best[0]][best[1]]["mean_rounds"]}


def _reset_spread(base: Mapping[str, Any], seeds: Sequence[int], afl_params: Mapping[str, str],
                  chosen: Mapping[str, Mapping[str, Any]], grid: Any) -> Dict[str, Any]:
    """The valuations at reset on the tuning seeds (the profiling round; the rate plays no part in it):
    their spread, the candidates' (the top (1 − α1)·N), and the weight ratio of the best to the worst
    candidate under the paper's α2 and under the tuned AFL's."""
    from agents import make
    from fedsel_env.config import PRESETS
    from fedsel_env.env import FedSelectEnv

    cfg = {**PRESETS.get(base.get("preset", "default"), {}), **{k: v for k, v in base.items() if k != "preset"},
           "max_rounds": 1, "target_accuracy": 1.0}
    tuned = afl_params[chosen["afl"]["policy"]]
    rows = []
    with FedSelectEnv(config=cfg) as env:
        for seed in seeds:
            obs, _ = env.reset(seed=int(seed))
            spec = env.selection_spec
            kw = dict(kv.split("=") for kv in tuned.split(","))
            agent = make("afl", spec, seed=0, **{k: float(v) for k, v in kw.items()})
            agent.reset(obs)
            v = agent.valuations
            cand = np.sort(v)[int(np.floor(agent.alpha1 * v.size)):]
            rows.append({"std": float(np.std(v)), "min": float(v.min()), "max": float(v.max()),
                         "candidates": int(cand.size), "candidates_min": float(cand.min()),
                         "candidates_max": float(cand.max()),
                         "weight_ratio_paper": float(np.exp(0.01 * (cand.max() - cand.min()))),
                         "tuned_alpha2": agent.alpha2,
                         "weight_ratio_tuned": float(np.exp(min(agent.alpha2 * (cand.max() - cand.min()), 700.0)))})
    return {"tuned_setting": tuned, "per_seed": rows}


def _analyse(report: Sequence[Mapping[str, Any]], methods: Sequence[str], cap: int,
             seeds: Sequence[int]) -> Dict[str, Any]:
    def rounds(label: str) -> np.ndarray:
        eps = common.episodes_of(report, label)
        assert [e["seed"] for e in eps] == sorted(seeds), f"{label}: missing reporting episodes"
        return np.array([e["metrics"]["rounds_to_target"] if e["reached"] else cap for e in eps], dtype=np.float64)

    base = rounds("random")
    res: Dict[str, Any] = {}
    for m in methods:
        r = rounds(m)
        eps = common.episodes_of(report, m)
        # training samples per round: what a pick is worth to FedAvg (AFL's v_k grows with √n_k)
        per_round = [float(np.dot(e["clients"]["participation"], e["clients"]["num_samples"]))
                     / max(len(e["curves"]["accuracy"]) - 1, 1) for e in eps]
        entry = {"rounds": r.tolist(), "mean_rounds": float(r.mean()), "missed": int(np.sum(r >= cap)),
                 "episodes": int(r.size), "mean_final_accuracy": float(np.mean([e["metrics"]["final_accuracy"]
                                                                                   for e in eps])),
                 "samples_per_round": float(np.mean(per_round)),
                 # per episode, in seed order: what the table's means are means of (#34)
                 "final_accuracy": [e["metrics"]["final_accuracy"] for e in eps],
                 "samples_per_round_per_episode": per_round}
        if m.startswith("afl") and "random_nk" in methods:
            entry["rounds_vs_random_nk"] = paired(r, rounds("random_nk"))
        if m != "random":
            d = paired(r, base)
            entry["rounds_vs_random"] = d
            # relative to random's mean rounds on the same seeds (its own sampling error not propagated)
            entry["change_percent"] = {k: (100.0 * d[k] / base.mean() if k in ("mean", "lo", "hi") else d[k])
                                       for k in d}
            entry["seeds_faster_slower_tied"] = [int(np.sum(r < base)), int(np.sum(r > base)), int(np.sum(r == base))]
            if m.startswith("afl"):
                entry["verdict"], entry["reason"] = verdict(entry["change_percent"])
        res[m] = entry
    return res


LABELS = {"random": "random (uniform)", "afl": "AFL, α2 = c / std(v⁰) (tuned c)",
          "afl_paper_alpha2": "AFL, the paper's α2 = 0.01", "random_nk": "control: sampling ∝ n_k (not the paper's)"}


def _table(res: Mapping[str, Any], rep: Any, argv: Sequence[str], clock: Any, out: Any, workers: int,
           compute: float) -> str:
    rates = res["rates"]
    rows = []
    for pol, cells in res["tuning_grid"].items():
        rows.append([pol] + [f"{c['mean_rounds']:.1f}" + (f" ({c['missed']} missed)" if c["missed"] else "")
                             for c in cells.values()])
    lines = [f"**Tuning** (seeds {res['tune_seeds'][0]}–{res['tune_seeds'][-1]}; `{json.dumps(res['env'])}`, round "
             f"cap {res['cap']}): Ω = {res['omega']:.2f}, where random's median accuracy curve at η = "
             f"{res['calibration_rate']:g} stands at round {res['cap'] // 2}. Mean rounds to Ω per policy and local "
             f"rate η (a miss counts as the cap):\n",
             markdown.table(["policy"] + [f"η = {lr:g}" for lr in rates], rows), "",
             "Chosen per method: " + "; ".join(f"{m}: `{c['policy']}`, η = {c['lr']:g} ({c['tune_mean_rounds']:.1f} "
                                               f"rounds)" for m, c in res["chosen"].items()) + "."]
    sp = res["reset_valuations"]["per_seed"]
    lines.append(f"\nValuations at reset (v = √n_k·F_k of w_0, tuning seeds): std "
                 f"{np.mean([s['std'] for s in sp]):.2f} (range {min(s['min'] for s in sp):.1f}–"
                 f"{max(s['max'] for s in sp):.1f}); the {sp[0]['candidates']} "
                 f"candidates (top 1 − α1) span {np.mean([s['candidates_min'] for s in sp]):.1f}–"
                 f"{np.mean([s['candidates_max'] for s in sp]):.1f} on average. Best/worst candidate's weight ratio: "
                 f"{np.mean([s['weight_ratio_paper'] for s in sp]):.2f} with the paper's α2 = 0.01; with the tuned "
                 f"`{res['reset_valuations']['tuned_setting']}` (α2 = "
                 f"{np.mean([s['tuned_alpha2'] for s in sp]):.3f} on average) "
                 f"{np.median([s['weight_ratio_tuned'] for s in sp]):.3g} (median over seeds).")
    if rep is not None:
        rows = []
        for m, e in rep.items():
            rows.append([LABELS.get(m, m), f"`{res['chosen'][m]['policy']}`, η = {res['chosen'][m]['lr']:g}",
                         f"{e['mean_rounds']:.1f}", f"{e['missed']}/{e['episodes']}",
                         "—" if m == "random" else ci_text(e["rounds_vs_random"]),
                         "—" if m == "random" else _percent(e["change_percent"]),
                         "—" if m == "random" else " / ".join(map(str, e["seeds_faster_slower_tied"])),
                         f"{e['mean_final_accuracy']:.3f}", f"{e['samples_per_round']:.0f}",
                         f"**{e['verdict']}**" if "verdict" in e else "—"])
        lines += [f"\n**Report** (seeds {res['report_seeds'][0]}–{res['report_seeds'][-1]}, never looked at while "
                  f"tuning; each method at its own tuned settings; common random numbers: one federation and w_0 per "
                  f"seed). Rounds to Ω = {res['omega']:.2f}, a miss counted at the cap {res['cap']} (a lower bound); "
                  f"Δ = afl − random per seed, 95% Student-t CI; the change is Δ over random's mean rounds "
                  f"(paper: −20% to −70%).\n",
                  markdown.table(["policy", "tuned settings", "rounds to Ω (mean)", "missed Ω",
                                   "Δ rounds vs random [95% CI]", "change in mean rounds [95% CI]",
                                   "seeds faster / slower / tied", "final accuracy", "training samples per round",
                                   "verdict"], rows, align="llrrrrrrrl")]
        for m, e in rep.items():
            if "verdict" in e:
                vs_nk = (f" Against sampling ∝ n_k: Δ rounds {ci_text(e['rounds_vs_random_nk'])}."
                         if "rounds_vs_random_nk" in e else "")
                lines.append(f"- {LABELS.get(m, m)}: {e['verdict']} — {e['reason']}.{vs_nk}")
    command = common.command_line("afl_regime.py", argv)
    lines.append(common.wall_time_note(clock.seconds(), workers, command, compute,
                                       longest=out.invocation(clock.seconds(), command)))
    return "\n".join(lines)


def _percent(c: Mapping[str, float]) -> str:
    """``-12% [-25%, +1%]`` (with "(CI excludes 0)" as :func:`favor_study.ci_text` marks it)."""
    mark = " (CI excludes 0)" if c["lo"] > 0 or c["hi"] < 0 else ""
    return f"{c['mean']:+.0f}% [{c['lo']:+.0f}%, {c['hi']:+.0f}%]{mark}"


def _figure(out: common.Outputs, grid: Mapping[str, Mapping[float, Mapping[str, Any]]], report: Any, omega: float,
            cap: int, chosen: Mapping[str, Mapping[str, Any]], rates: Sequence[float]) -> None:
    fig, axes = common.figure(13, 4.4, ncols=2)
    ax = axes[0, 0]
    for pol, cells in grid.items():
        ax.plot(list(rates), [cells[lr]["mean_rounds"] for lr in rates], marker="o", label=pol,
                linestyle="-" if pol == "random" else "--")
    ax.set(xscale="log", xlabel="local learning rate η", ylabel=f"mean rounds to Ω = {omega:.2f} (miss = {cap})",
           title="tuning seeds: rounds to Ω per policy and rate")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    ax = axes[0, 1]
    if report is None:
        ax.text(0.5, 0.5, "report not run yet (--part tune)", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    else:
        records, methods = report
        colors = {"random": "tab:blue", "afl": "tab:red", "afl_paper_alpha2": "tab:orange", "random_nk": "tab:gray"}
        for m in methods:
            eps = common.episodes_of(records, m)
            ys = np.stack([common.held(e["curves"]["accuracy"], cap + 1) for e in eps])
            x = np.arange(cap + 1)
            c = chosen[m]
            ax.plot(x, ys.mean(0), color=colors.get(m), label=f"{m} ({c['policy']}, η = {c['lr']:g})")
            ax.fill_between(x, ys.mean(0) - ys.std(0), ys.mean(0) + ys.std(0), color=colors.get(m), alpha=0.12,
                            linewidth=0)
        ax.axhline(omega, color="black", linestyle="--", linewidth=1, label=f"Ω = {omega:.2f}")
        ax.set(xlabel="communication round", ylabel="global test accuracy",
               title="reporting seeds: mean ± std (an episode's curve is held after Ω)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small", loc="lower right")
    out.figure(fig, NAME)


if __name__ == "__main__":
    common.run_cli(main, "afl_regime.py")
