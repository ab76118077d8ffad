"""FedMGDA+: improved participants per round with full-batch updates, and robustness to a scaled update.

Z. Hu, K. Shaloudegi, G. Zhang, Y. Yu, "Federated Learning Meets Multi-objective Optimization", IEEE
TNSE 2022 (arXiv:2006.11489; seed 003). docs/SPEC.md §6: with full-batch local updates no participant's loss
increases after a round (100% "improved users" as the step decays); a client scaling its update or
loss by a large factor does not move FedMGDA+ (normalisation), while FedAvg and q-FedAvg are pulled off.

    python experiments/fedmgda_fairness.py --workers 2        # the run of docs/REPRODUCTION.md
    python experiments/fedmgda_fairness.py --smoke             # seconds: 8 clients, 3 rounds

Part A: scikit-learn's digits, the ``default`` preset's 20 clients (σ = 0.8, an MLP), all available,
K = 10 uniformly at random; one local epoch at a batch larger than any client's data, so each
client sends exactly one full-batch gradient step. ``improved_fraction`` is the env's share of the
round's participants whose training loss did not increase. Backends: FedAvg, q-FedAvg (q = 1),
FedMGDA+ (ε = 1, plain MGDA, and ε = 0.1), its global step η_t = 1 halved every 25 rounds (the
paper decays it every 100 rounds over thousands; the horizon here is 100 rounds).

Part B: the same federation with full participation (K = N = 20, so the attacker is in every round)
and the preset's local training (E = 2, B = 10); client 0 sends w_t + s·(w_k − w_t) (the env's
``adversary.update_scale``) for s ∈ ``SCALES``; the accuracy of FedAvg, q-FedAvg (q = 1) and
FedMGDA+ (the defaults: ε = 1, η = 1, decayed by 0.89 every 100 rounds, so constant over this part's
40 rounds), and FedMGDA+ at ε = 0.1 (Part C's free-rider-safe setting).

Part C (issue #20): the ε sweep, with and without free riders. The paper (§5, Table 1) says ε interpolates
between FedAvg (ε = 0, λ = λ0) and FedMGDA (ε = 1) and that in non-IID settings some intermediate ε give
better user accuracy than either end. The ``default`` preset with K = 10 of 20 at random and its local
training (E = 2, B = 10), ``EPSILONS_C`` beside FedAvg, ``ROUNDS_C`` rounds, ``SEEDS_C``; the scenarios
of docs/ROBUSTNESS.md's table: 20% of the clients labelled attackers that behave honestly (``none``), or
that return w_t untrained (``free riders``: a zero update). FedMGDA+'s direction is the minimum-norm
point of the participants' normalised updates within ε of λ0: at ε = 1 a zero update in the hull makes
that point zero, so a round with a free rider in it moves the model by nothing.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from experiments import common  # noqa: E402
from fedsel_eval import markdown  # noqa: E402
from fedsel_eval.stats import t_interval  # noqa: E402

NAME = "fedmgda_fairness"
SEEDS = [0, 1]
SCALES = [1.0, 10.0, 100.0]
FULL_BATCH: Dict[str, Any] = {"preset": "default", "system": {"availability": 1.0}, "clients_per_round": 10,
                              "batch_size": 100, "local_epochs": 1, "lr": 0.1, "max_rounds": 100,
                              "target_accuracy": 1.0}
BACKENDS_A = ["fedavg", "qfedavg:q=1", "fedmgda+:epsilon=1,global_lr=1.0,decay=0.5,decay_every=25",
              "fedmgda+:epsilon=0.1,global_lr=1.0,decay=0.5,decay_every=25"]
ATTACK: Dict[str, Any] = {"preset": "default", "system": {"availability": 1.0}, "clients_per_round": 20,
                          "max_rounds": 40, "target_accuracy": 1.0}
BACKENDS_B = ["fedavg", "qfedavg:q=1", "fedmgda+", "fedmgda+:epsilon=0.1"]  # ε = 0.1: issue #20, Part C
SMOKE_OVERRIDES: Dict[str, Any] = {"preset": "tiny", "max_rounds": 3, "batch_size": 40}
EPSILONS_C = [0.0, 0.05, 0.1, 0.3, 1.0]
SEEDS_C = [0, 1, 2, 3, 4]
ROUNDS_C = 60
SWEEP: Dict[str, Any] = {"preset": "default", "system": {"availability": 1.0}, "clients_per_round": 10,
                         "max_rounds": ROUNDS_C, "target_accuracy": 1.0}
SCENARIOS_C: Dict[str, Dict[str, Any]] = {"none": {"attacker_fraction": 0.2},
                                          "free riders": {"attacker_fraction": 0.2, "free_rider": True}}


def main(argv: Sequence[str] = None) -> Path:
    """Run the experiment as ``argv`` says; return its folder."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = common.parser(NAME, __doc__.split("\n")[0]).parse_args(argv)
    clock, out = common.start(NAME, args)
    seeds = args.seeds or ([0] if args.smoke else SEEDS)
    progress = not args.no_progress
    env_a = {**FULL_BATCH, **SMOKE_OVERRIDES, "clients_per_round": 4} if args.smoke else FULL_BATCH
    env_b = {**ATTACK, **SMOKE_OVERRIDES, "clients_per_round": 8, "batch_size": 10} if args.smoke else ATTACK

    # Part A: improved participants per round
    rec_a, _, plan_a = common.evaluate(out.out / "full_batch", env_a, ["random"], seeds, aggregators=BACKENDS_A,
                                       workers=args.workers, progress=progress, env_name="digits full-batch")
    labels_a = [b.label for b in plan_a.backends]
    cfg_a = plan_a.env_config
    rows_a, numbers_a = [], {}
    for label in labels_a:
        eps = common.episodes_of(rec_a, "random", label)
        fr = np.array([e["curves"]["improved_fraction"] for e in eps], dtype=np.float64)  # (seeds, rounds)
        half = fr.shape[1] // 2
        all_improved = np.mean(fr == 1.0)
        rows_a.append([label, f"{np.nanmean(fr):.3f}", f"{np.nanmean(fr[:, :half]):.3f}",
                       f"{np.nanmean(fr[:, half:]):.3f}", f"{100 * all_improved:.0f}%",
                       common.mean_std([e["metrics"]["final_accuracy"] for e in eps], ".3f")])
        numbers_a[label] = {"improved_fraction": fr.tolist(),
                            "final_accuracy": [e["metrics"]["final_accuracy"] for e in eps]}
    table_a = markdown.table(["backend", "improved participants (mean)", "first half of the rounds",
                               "second half", "rounds where every participant improved", "final accuracy"], rows_a)

    # Part B: one client scales its update
    rows_b, numbers_b, curves_b = [], {}, {}
    labels_b: List[str] = []
    all_records = [rec_a]
    for s in SCALES:
        env = {**env_b, "adversary": {"attackers": [0], "update_scale": s}}
        rec, _, plan = common.evaluate(out.out / f"scale_{s:g}", env, ["random"], seeds, aggregators=BACKENDS_B,
                                       workers=args.workers, progress=progress, env_name=f"digits, update x{s:g}")
        labels_b = [b.label for b in plan.backends]
        all_records.append(rec)
        for label in labels_b:
            eps = common.episodes_of(rec, "random", label)
            numbers_b.setdefault(label, {})[f"{s:g}"] = {
                "final_accuracy": [e["metrics"]["final_accuracy"] for e in eps],
                "diverged": [bool(e["diverged"]) for e in eps]}
            curves_b[(label, s)] = eps
    for label in labels_b:
        cells = []
        for s in SCALES:
            d = numbers_b[label][f"{s:g}"]
            cell = common.mean_std(d["final_accuracy"], ".3f")
            if any(d["diverged"]):
                cell += f" ({sum(d['diverged'])} diverged)"
            cells.append(cell)
        rows_b.append([label, *cells])
    table_b = markdown.table(["backend", *[("no attack (s = 1)" if s == 1 else f"s = {s:g}") for s in SCALES]], rows_b)

    cfg_b = plan.env_config

    # Part C: the ε sweep, with and without free riders
    seeds_c = args.seeds or ([0, 1] if args.smoke else SEEDS_C)
    env_c = {**SWEEP, **SMOKE_OVERRIDES, "clients_per_round": 4, "batch_size": 10} if args.smoke else SWEEP
    backends_c = ["fedavg"] + [f"fedmgda+:epsilon={e:g}" for e in EPSILONS_C]
    numbers_c: Dict[str, Dict[str, Dict[str, List[float]]]] = {}
    labels_c: List[str] = []
    for scenario, adversary in SCENARIOS_C.items():
        rec, _, plan_c = common.evaluate(out.out / f"epsilon_{scenario.replace(' ', '_')}", {**env_c, "adversary": adversary},
                                         ["random"], seeds_c, aggregators=backends_c, workers=args.workers,
                                         progress=progress, env_name=f"digits, {scenario}")
        all_records.append(rec)
        labels_c = [b.label for b in plan_c.backends]
        for label in labels_c:
            eps = common.episodes_of(rec, "random", label)
            numbers_c.setdefault(label, {})[scenario] = {
                m: [float(e["metrics"][m]) for e in eps]
                for m in ("final_accuracy", "honest_acc_mean", "acc_worst10", "improved_fraction")}
    cfg_c = plan_c.env_config
    table_c = _epsilon_table(numbers_c, labels_c)

    note_a = (f"**A. Fairness during training.** {cfg_a['num_clients']} clients, K = {cfg_a['clients_per_round']} per "
              f"round, one local epoch at batch {cfg_a['batch_size']} (every client holds fewer samples: one "
              f"full-batch step at η = {cfg_a['lr']}), {cfg_a['max_rounds']} rounds, seeds {seeds}. The share of the "
              f"round's participants whose training loss did not increase, averaged over rounds and seeds.\n")
    note_b = (f"**B. One client scales its update.** Full participation (K = N = {cfg_b['num_clients']}), E = "
              f"{cfg_b['local_epochs']}, B = {cfg_b['batch_size']}, {cfg_b['max_rounds']} rounds; client 0 sends "
              f"w_t + s·(w_k − w_t). Global test accuracy after the last round (mean ± std over seeds {seeds}).\n")
    _figures(out, rec_a, labels_a, curves_b, labels_b, numbers_c, labels_c)
    note_c = (f"**C. The ε sweep, with and without free riders.** K = {cfg_c['clients_per_round']} of "
              f"{cfg_c['num_clients']} at random, E = {cfg_c['local_epochs']}, B = {cfg_c['batch_size']}, "
              f"{cfg_c['max_rounds']} rounds, seeds {seeds_c}; 20% of the clients are attackers (honest in `none`; "
              f"in `free riders` they return w_t untrained). Honest accuracy: mean final test accuracy of the "
              f"honest clients; worst 10%: of all clients' final accuracies; improved: the round's participants "
              f"whose loss did not increase. Differences paired by seed, Student-t 95% intervals.\n")
    out.results({"part_a": {"env": cfg_a, "seeds": seeds, "results": numbers_a},
                 "part_b": {"env": cfg_b, "scales": SCALES, "seeds": seeds, "results": numbers_b},
                 "part_c": {"env": cfg_c, "epsilons": EPSILONS_C, "seeds": seeds_c,
                            "scenarios": SCENARIOS_C, "results": numbers_c}})
    out.fragment("\n".join([note_a, table_a, "", note_b, table_b, "", note_c, table_c,
                            common.wall_time_note(clock.seconds(), args.workers,
                                                  common.command_line("fedmgda_fairness.py", argv),
                                                  common.episode_seconds(*all_records),
                                                  longest=out.invocation(
                                                      clock.seconds(), common.command_line("fedmgda_fairness.py", argv)))]))
    print((out.out / "table.md").read_text())
    return out.out


def _epsilon_table(numbers: Mapping[str, Mapping[str, Mapping[str, List[float]]]], labels: Sequence[str]) -> str:
    """Part C's table: per backend, honest accuracy (none / free riders) and its paired loss, worst-10% and
    improved share without attack, and the honest-accuracy difference against FedAvg in each scenario."""
    rows = []
    ref = labels[0]  # fedavg
    for label in labels:
        none, free = numbers[label]["none"], numbers[label]["free riders"]
        loss = t_interval([f - n for f, n in zip(free["honest_acc_mean"], none["honest_acc_mean"])])
        vs_none = t_interval([a - b for a, b in zip(none["honest_acc_mean"],
                                                           numbers[ref]["none"]["honest_acc_mean"])])
        vs_free = t_interval([a - b for a, b in zip(free["honest_acc_mean"],
                                                           numbers[ref]["free riders"]["honest_acc_mean"])])
        rows.append([label, common.mean_std(none["honest_acc_mean"], ".3f"),
                     common.mean_std(none["acc_worst10"], ".3f"), common.mean_std(none["improved_fraction"], ".3f"),
                     "—" if label == ref else vs_none.text("+.3f"),
                     common.mean_std(free["honest_acc_mean"], ".3f"), loss.text("+.3f"),
                     "—" if label == ref else vs_free.text("+.3f")])
    return markdown.table(["backend", "honest accuracy, none", "worst-10% accuracy, none", "improved, none",
                            "Δ honest vs fedavg, none", "honest accuracy, free riders",
                            "Δ from free riders (paired)", "Δ honest vs fedavg, free riders"], rows)


def _figures(out: common.Outputs, rec_a: Sequence[Dict[str, Any]], labels_a: Sequence[str],
             curves_b: Dict[Any, Any], labels_b: Sequence[str],
             numbers_c: Mapping[str, Mapping[str, Mapping[str, List[float]]]], labels_c: Sequence[str]) -> None:
    fig, axes = common.figure(19, 4.5, ncols=3)
    ax1, ax2, ax3 = axes[0, 0], axes[0, 1], axes[0, 2]
    eps_labels = [lb for lb in labels_c if lb != "fedavg"]
    x = np.arange(len(eps_labels))
    for offset, (scenario, color) in zip((-0.12, 0.12), zip(SCENARIOS_C, ("tab:blue", "tab:red"))):
        vals = [numbers_c[lb][scenario]["honest_acc_mean"] for lb in eps_labels]
        ax3.errorbar(x + offset, [np.mean(v) for v in vals], yerr=[np.std(v) for v in vals], fmt="o", color=color,
                     capsize=3, label=f"FedMGDA+, {scenario}")
        ref = numbers_c["fedavg"][scenario]["honest_acc_mean"]
        ax3.axhline(np.mean(ref), color=color, linestyle="--", linewidth=1, label=f"FedAvg, {scenario}")
    ax3.set_xticks(x, [lb.split("epsilon=")[-1].rstrip(")") for lb in eps_labels])
    ax3.set(title="C. Honest clients' final accuracy against ε\n(20% attackers; mean ± std over seeds)",
            xlabel="ε", ylabel="mean final test accuracy, honest clients")
    ax3.grid(alpha=0.3)
    ax3.legend(fontsize="x-small", loc="lower left")
    for label in labels_a:
        eps = common.episodes_of(rec_a, "random", label)
        fr = np.nanmean(np.array([e["curves"]["improved_fraction"] for e in eps], dtype=np.float64), axis=0)
        w = min(10, fr.size)
        ax1.plot(np.arange(w, fr.size + 1), np.convolve(fr, np.ones(w) / w, mode="valid"), label=label)
    ax1.set(title="A. Participants whose training loss did not increase\n(full-batch local steps; moving mean "
                  "over 10 rounds)", xlabel="communication round", ylabel="fraction of the round's participants")
    ax1.legend(fontsize="small", loc="lower right")
    styles = {1.0: "-", 10.0: "--", 100.0: ":"}
    colors = dict(zip(labels_b, ["tab:blue", "tab:orange", "tab:green", "tab:red"]))
    for (label, s), eps in curves_b.items():
        length = max(len(e["curves"]["accuracy"]) for e in eps)
        ys = np.stack([common.held(e["curves"]["accuracy"], length) for e in eps]).mean(0)
        ax2.plot(np.arange(length), ys, color=colors[label], linestyle=styles.get(s, "-."), label=f"{label}, s = {s:g}")
    ax2.set(title="B. Global accuracy when client 0 scales its update by s", xlabel="communication round",
            ylabel="global test accuracy")
    ax2.legend(fontsize="x-small", loc="center right")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    out.figure(fig, NAME)


if __name__ == "__main__":
    common.run_cli(main, "fedmgda_fairness.py")
