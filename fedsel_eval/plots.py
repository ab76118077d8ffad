"""The figures of an evaluation: six PNGs written into its run folder with matplotlib.

Owns the figures (:func:`plot_all`): the headline (rounds and time to Ω and the mean accuracy over the
rounds played — the area under the accuracy curve, which tells policies apart where the final accuracy
cannot: every episode that reaches Ω stops there — per policy with 95% bootstrap CIs, and their paired
differences against the reference policy as a forest plot), fairness
(per-client final accuracy, Jain's index, participation rates), and the curves — accuracy against round
and against simulated time, round time — as small multiples, one panel per policy with its mean and a
95% t band and the reference policy's mean in grey, so that nine or more policies stay legible; and a
heat map of participation per client. The numbers come from :class:`fedsel_eval.results.Results` (the
tables' numbers). matplotlib is imported when a plot is drawn, so ``--no-plots`` runs never load it. Each
file is written through a temp file and ``os.replace``.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .results import HEADLINE, Results, compare
from .stats import t_band
from .summary import num
from .tables import short_label

if TYPE_CHECKING:
    from .plan import EvalPlan

#: The PNG files :func:`plot_all` writes.
PLOT_FILES = ("headline.png", "fairness.png", "accuracy_vs_round.png", "accuracy_vs_time.png",
              "participation.png", "round_time.png")
#: The longest series label on a figure's axis (longer ones are shortened in the middle).
AXIS_LABEL_WIDTH = 28
#: Axis titles of the headline metrics.
HEADLINE_AXES = {"rounds_to_target": "rounds to Ω", "time_to_target": "simulated time to Ω (s)",
                 "final_accuracy": "final global test accuracy"}
#: Short names of the headline metrics (the forest plot's titles).
HEADLINE_SHORT = {"rounds_to_target": "rounds to Ω", "time_to_target": "time to Ω (s)",
                  "final_accuracy": "final accuracy", "accuracy_auc": "mean accuracy"}
#: The headline figure's panels: the table's to-target metrics, then the area under the accuracy curve in
#: place of the final accuracy (episodes stop at Ω, so every policy that reaches it ends near Ω).
HEADLINE_PANELS = ("rounds_to_target", "time_to_target", "accuracy_auc")
GREY = "0.45"


class _Series:
    """One policy × backend on the figures: its label, colour, episodes (by seed) and results."""

    def __init__(self, label: str, color: Any, eps: List[Mapping[str, Any]], result: Any, is_reference: bool,
                 reference: Optional["_Series"] = None) -> None:
        self.label, self.color, self.eps, self.result = label, color, eps, result
        self.is_reference, self.reference = is_reference, reference

    def panel_title(self, backends: int) -> str:
        """A small multiple's title: the label, and on a second line the backend (when several) and how
        many episodes reached Ω."""
        reached = f"{self.result.reached}/{self.result.episodes} reached Ω"
        if backends == 1:
            return f"{self.label}\n{reached}"
        return f"{short_label(self.result.policy, 24)}\n{self.result.backend} · {reached}"


def _width(series: List[_Series]) -> float:
    """A three-panel figure's width: 13.5 inches, plus room for long labels on the y axis."""
    return 13.5 + 0.075 * max(0, max(len(s.label) for s in series) - 18)


def _series(records: Sequence[Mapping[str, Any]], results: Results) -> List[_Series]:
    from matplotlib import colormaps

    # strong, distinct colours: tab10's, then Dark2's (tab20's pale halves are hard to see on white)
    palette = list(colormaps["tab10"].colors) + list(colormaps["Dark2"].colors)
    out: List[_Series] = []
    for i, s in enumerate(results.series):
        eps = sorted((r for r in records if r["policy"] == s.policy and r["backend"] == s.backend),
                     key=lambda r: r["seed"])
        label = short_label(s.policy, AXIS_LABEL_WIDTH) + (f" / {s.backend}" if results.backends > 1 else "")
        out.append(_Series(label, palette[i % len(palette)], eps, s, s.policy == results.reference))
    refs = {s.result.backend: s for s in out if s.is_reference}
    for s in out:
        if not s.is_reference:
            s.reference = refs.get(s.result.backend)
    return out


def _figure(width: float, height: float, nrows: int = 1, ncols: int = 1, **kw: Any) -> Tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig, fig.subplots(nrows, ncols, squeeze=False, **kw)


def _save(fig: Any, path: Path) -> Path:
    from agents.training.atomic import atomic_save  # the one write helper: a full disk named, no .tmp left

    atomic_save(lambda tmp: fig.savefig(tmp, format="png"), path)
    return path


def save_figure(fig: Any, path: Path, dpi: int = 90) -> Path:
    """Lay out a pyplot figure, write it to ``path`` as PNG (its folder made, written atomically) and close it: the
    tail every record's figure shares (``rl_curves``, ``generalist``, ``learned_tables``)."""
    import matplotlib.pyplot as plt

    from agents.training.atomic import atomic_save

    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_save(lambda tmp: fig.savefig(tmp, format="png", dpi=dpi), path)
    plt.close(fig)
    return path


def _policy_axis(ax: Any, series: List[_Series], labels: bool) -> None:
    """Series on the y axis, top to bottom in the plan's order; the reference's label in bold."""
    ax.set_yticks(range(len(series)))
    ax.set_ylim(len(series) - 0.5, -0.5)
    if labels:
        ax.set_yticklabels([f"{s.label} ({s.result.reached}/{s.result.episodes})" for s in series])
        for tick, s in zip(ax.get_yticklabels(), series):
            if s.is_reference:
                tick.set_fontweight("bold")
    else:
        ax.tick_params(axis="y", labelleft=False)
    ax.grid(axis="x", alpha=0.3)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(nbins=6))  # a few ticks: small differences keep readable labels


def _interval(ax: Any, y: float, iv: Any, color: Any, hollow: bool = False, size: float = 7,
              alpha: float = 1.0) -> None:
    """A mean as a dot with its CI as a horizontal bar (a hollow dot: a missed Ω counted as the cap)."""
    if not math.isfinite(iv.mean):
        return
    lo, hi = (iv.lo, iv.hi) if math.isfinite(iv.lo) else (iv.mean, iv.mean)
    ax.errorbar([iv.mean], [y], xerr=[[iv.mean - lo], [hi - iv.mean]], fmt="o", color=color, markersize=size,
                markerfacecolor="white" if hollow else color, markeredgewidth=1.8, capsize=3, elinewidth=2, zorder=3,
                alpha=alpha)


def _seed_dots(ax: Any, y: float, values: Sequence[float], color: Any) -> None:
    v = np.asarray([x for x in values if math.isfinite(x)], dtype=np.float64)
    if v.size:
        jitter = np.linspace(-0.22, 0.22, v.size) if v.size > 1 else np.zeros(1)
        ax.scatter(v, y + jitter, s=9, color=color, alpha=0.35, linewidths=0, zorder=2)


def plot_headline(series: List[_Series], results: Results, plan: EvalPlan, path: Path) -> Path:
    """Rounds and time to Ω and final accuracy (mean, 95% bootstrap CI, per-seed dots) and, with a
    reference policy, the paired differences against it (forest plot)."""
    from .stats import bootstrap_ci, episode_value

    ref = results.reference
    missed = any(s.result.intervals[m].missed for s in series for m in HEADLINE)
    nrows = 2 if ref else 1
    length = max(len(r["curves"]["accuracy"]) for s in series for r in s.eps)
    auc = {id(s): {(int(r["seed"]), str(r["backend"])): accuracy_auc(r, length) for r in s.eps} for s in series}
    axis_names = {**HEADLINE_AXES, "accuracy_auc": f"mean accuracy over rounds 0–{length - 1}"}

    def values(s: _Series, m: str) -> List[float]:
        return list(auc[id(s)].values()) if m == "accuracy_auc" else \
            [episode_value(r, m, results.cap)[0] for r in s.eps]

    def interval(s: _Series, m: str) -> Any:
        return bootstrap_ci(values(s, m)) if m == "accuracy_auc" else s.result.intervals[m]

    def delta(s: _Series, m: str) -> Any:
        if m != "accuracy_auc":
            return s.result.deltas.get(m)
        if s.reference is None:
            return None
        mine, theirs = auc[id(s)], auc[id(s.reference)]
        return bootstrap_ci([mine[k] - theirs[k] for k in sorted(set(mine) & set(theirs))])

    fig, axes = _figure(_width(series), nrows * (0.36 * len(series) + 1.3) + 0.9, nrows, len(HEADLINE_PANELS),
                        sharey=True)
    for j, m in enumerate(HEADLINE_PANELS):
        ax = axes[0, j]
        for i, s in enumerate(series):
            _seed_dots(ax, i, values(s, m), s.color)
            _interval(ax, i, interval(s, m), s.color, hollow=bool(interval(s, m).missed))
        refs = [s for s in series if s.is_reference]
        if len(refs) == 1:  # one backend: the reference's mean as a line to read the others against
            ax.axvline(interval(refs[0], m).mean, color=GREY, linestyle=":", linewidth=1)
        if m == "rounds_to_target" and missed:
            ax.axvline(results.cap, color="black", linestyle="--", linewidth=0.8)
        if m == "rounds_to_target" and not any(s.result.reached for s in series):
            ax.text(0.03, 0.5, f"no episode reached Ω:\nevery one counts\nas the cap ({results.cap})",
                    transform=ax.transAxes, fontsize="small", color=GREY, va="center")
        ax.set_title(f"{axis_names[m]}: mean [95% CI]", fontsize="medium")
        ax.set_xlabel(axis_names[m] + (" (area under the\naccuracy curve / rounds; a stopped episode holds)"
                                       if m == "accuracy_auc" else ""))
        if ax.get_xlim()[0] < 0:  # rounds, seconds and accuracies are never negative
            ax.set_xlim(left=0)
        _policy_axis(ax, series, labels=j == 0)
        if ref:
            ax = axes[1, j]
            for i, s in enumerate(series):
                if s.is_reference:  # written across the middle of the panel, whatever its x range
                    ax.text(0.5, i, "reference", ha="center", va="center", fontsize="small", color=GREY,
                            transform=ax.get_yaxis_transform())
                elif delta(s, m) is not None:
                    d = delta(s, m)  # faded: the CI holds 0 (no clear difference)
                    _interval(ax, i, d, s.color, hollow=bool(d.missed), alpha=1.0 if d.excludes_zero() else 0.4)
            ax.axvline(0, color="black", linewidth=1)
            ax.set_title(f"Δ {HEADLINE_SHORT[m]} vs {ref} [paired 95% CI]", fontsize="medium")
            ax.set_xlabel(f"policy − {ref}, same seed and backend")
            _policy_axis(ax, series, labels=j == 0)
    cfg = plan.env_config
    fig.suptitle(f"{plan.env_name}: N = {cfg['num_clients']}, K = {cfg['clients_per_round']}, Ω = "
                 f"{cfg['target_accuracy']:g}, ≤ {results.cap} rounds, {len(plan.seeds)} seeds; (n/m): episodes that "
                 f"reached Ω\ndots: seeds · bars: 95% bootstrap CI"
                 + (" · hollow: some episodes missed Ω and count as the cap (a lower bound) · dashed: the round cap"
                    if missed else "") + (f" · dotted: {ref}'s mean" if ref and results.backends == 1 else "")
                 + (" · faded Δ: its CI holds 0" if ref else ""),
                 fontsize="medium")
    return _save(fig, path)


def plot_fairness(series: List[_Series], results: Results, plan: EvalPlan, path: Path) -> Path:
    """Per-client final accuracy (box plots), Jain's index of the picks, per-client participation rates."""
    cfg = plan.env_config
    fig, axes = _figure(_width(series), 0.36 * len(series) + 2.4, 1, 3, sharey=True)

    ax = axes[0, 0]
    data = [np.concatenate([np.asarray(r["clients"]["accuracy"], dtype=np.float64) for r in s.eps]) for s in series]
    _boxes(ax, data, series)
    for i, s in enumerate(series):
        for m, marker in (("acc_worst10", "<"), ("acc_best10", ">")):
            v = s.result.intervals[m].mean
            if math.isfinite(v):
                ax.plot([v], [i], marker=marker, color="black", markersize=6, linestyle="none", zorder=4)
    ax.set_title("final per-client test accuracy\n| median · ◆ mean · ◀ ▶ worst / best 10%", fontsize="medium")
    ax.set_xlabel(f"per-client accuracy ({cfg['num_clients']} clients × seeds)")
    _policy_axis(ax, series, labels=True)

    ax = axes[0, 1]
    for i, s in enumerate(series):
        _seed_dots(ax, i, [num(r["metrics"].get("jain_index")) for r in s.eps], s.color)
        _interval(ax, i, s.result.intervals["jain_index"], s.color)
    ax.axvline(1.0, color="black", linestyle="--", linewidth=0.8)
    ax.set_title("Jain's index of the picks [95% CI]\n1 = all picked equally often", fontsize="medium")
    ax.set_xlabel("Jain's index of participation counts")
    _policy_axis(ax, series, labels=False)

    ax = axes[0, 2]
    rates = [np.concatenate([np.asarray(r["clients"]["participation"], dtype=np.float64)
                             / max(len(r["curves"]["round_time"]), 1) for r in s.eps]) for s in series]
    _boxes(ax, rates, series, means=False)
    for i, s in enumerate(series):
        _interval(ax, i - 0.38, s.result.intervals["min_participation_rate"], "black", size=4.5)
    uniform = cfg["clients_per_round"] / cfg["num_clients"]
    ax.axvline(uniform, color=GREY, linestyle=":", linewidth=1.2)
    ax.set_title(f"participation rate per client\n● min rate [95% CI] · dotted: K/N = {uniform:.2f}",
                 fontsize="medium")
    ax.set_xlabel("participation rate (rounds picked / rounds)")
    _policy_axis(ax, series, labels=False)
    fig.suptitle(f"Fairness on {plan.env_name} ({len(plan.seeds)} seeds; reached Ω / episodes after each name)",
                 fontsize="medium")
    return _save(fig, path)


def _boxes(ax: Any, data: List[np.ndarray], series: List[_Series], means: bool = True) -> None:
    box = ax.boxplot(data, positions=list(range(len(series))), orientation="horizontal", widths=0.6,
                     patch_artist=True, showmeans=means, showfliers=True, manage_ticks=False,
                     medianprops={"color": "black"}, flierprops={"markersize": 3, "alpha": 0.5},
                     meanprops={"marker": "D", "markerfacecolor": "white", "markeredgecolor": "black",
                                "markersize": 5})
    for patch, s in zip(box["boxes"], series):
        patch.set_facecolor(s.color)
        patch.set_alpha(0.55)


def plot_curves(series: List[_Series], results: Results, plan: EvalPlan, path: Path, x: np.ndarray,
                curves: Callable[[List[Mapping[str, Any]]], np.ndarray], title: str, xlabel: str, ylabel: str,
                target: Optional[float] = None, integer_x: bool = False,
                y_range: Tuple[Optional[float], Optional[float]] = (None, None)) -> Path:
    """Small multiples: one panel per series with its mean over seeds and a 95% t band, the reference
    policy's mean in grey, and the target as a dashed line. ``curves(eps)`` gives episodes × len(x)
    (NaN where an episode no longer runs). ``y_range``: the values' bounds (0 for times, [0, 1] for
    accuracies): the band is clipped to them and the axis does not go past them; x starts at 0."""
    n = len(series)
    ncols = min(4, n)
    nrows = math.ceil(n / ncols)
    fig, axes = _figure(3.4 * ncols + 0.6, 2.7 * nrows + 1.0, nrows, ncols, sharex=True, sharey=True)
    # (mean, lower, upper) per series; the band where at least 3 episodes (or all of them) still run
    bands = {id(s): t_band(curves(s.eps), min_episodes=min(3, len(s.eps))) for s in series}
    for i, s in enumerate(series):
        ax = axes[i // ncols, i % ncols]
        if s.reference is not None:
            ax.plot(x, bands[id(s.reference)][0], color=GREY, linewidth=1.2)
        mean, lo, hi = bands[id(s)] if y_range == (None, None) else \
            (np.clip(v, *y_range) for v in bands[id(s)])  # a t band can cross a bound the values keep
        ax.fill_between(x, lo, hi, color=s.color, alpha=0.3, linewidth=0)
        ax.plot(x, mean, color=s.color, linewidth=2)
        if target is not None:
            ax.axhline(target, color="black", linestyle="--", linewidth=0.8)
        ax.set_title(s.panel_title(results.backends), fontsize="medium",
                     fontweight="bold" if s.is_reference else "normal")
        ax.grid(alpha=0.3)
        if i // ncols == nrows - 1 or i + ncols >= n:
            ax.set_xlabel(xlabel)
            ax.tick_params(axis="x", labelbottom=True)
        if i % ncols == 0:
            ax.set_ylabel(ylabel)
        ax.set_xlim(left=0)
        if integer_x:
            from matplotlib.ticker import MaxNLocator

            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    bottom, top = axes[0, 0].get_ylim()  # shared y: one call sets every panel
    axes[0, 0].set_ylim(max(bottom, y_range[0]) if y_range[0] is not None else bottom,
                        min(top, y_range[1]) if y_range[1] is not None else top)
    for k in range(n, nrows * ncols):
        axes[k // ncols, k % ncols].set_visible(False)
    ref = f"; grey: {results.reference}'s mean (the reference)" if results.reference else ""
    omega = "; dashed: the target Ω" if target is not None else ""
    fig.suptitle(f"{title}\nmean over {len(plan.seeds)} seeds with a 95% t confidence band (where ≥ 3 episodes "
                 f"run){ref}{omega}",
                 fontsize="medium")
    return _save(fig, path)


def accuracy_auc(record: Mapping[str, Any], length: int) -> float:
    """The mean global accuracy over rounds 0 … length − 1, an episode that stopped holding its last value: the
    area under :file:`accuracy_vs_round.png`'s curve over its length (rounds not evaluated left out)."""
    with np.errstate(all="ignore"):
        return float(np.nanmean(_held(record["curves"]["accuracy"], length)))


def _held(values: Sequence[Optional[float]], length: int) -> np.ndarray:
    """A curve extended to ``length`` points by holding its last value (the training job has ended)."""
    v = np.array([num(x) for x in values], dtype=np.float64)
    return np.concatenate([v, np.full(length - v.size, v[-1])]) if v.size < length else v[:length]


def plot_participation(series: List[_Series], plan: EvalPlan, path: Path) -> Path:
    """A heat map: each client's participation rate (rounds picked / episode rounds, mean over seeds)."""
    n = plan.env_config["num_clients"]
    fig, axes = _figure(max(7.5, 0.3 * n + 3.5), max(3.0, 0.4 * len(series) + 1.8))
    ax = axes[0, 0]
    rates = np.stack([np.mean([np.asarray(r["clients"]["participation"], dtype=np.float64)
                               / max(len(r["curves"]["round_time"]), 1) for r in s.eps], axis=0) for s in series])
    im = ax.imshow(rates, aspect="auto", cmap="viridis", interpolation="nearest", vmin=0.0)
    ax.set_yticks(range(len(series)), [s.label for s in series])
    if n <= 40:  # every client labelled; beyond that the default ticks keep the axis legible
        ax.set_xticks(range(n), [str(i) for i in range(n)], fontsize="small")
    ax.set(title="Participation rate per client (rounds picked / episode rounds, mean over seeds)\n"
                 "client k is the same client for every policy under the same seed",
           xlabel="client index", ylabel="policy")
    fig.colorbar(im, ax=ax, label="participation rate")
    return _save(fig, path)


def plot_all(records: Sequence[Mapping[str, Any]], plan: EvalPlan, out: Union[str, Path],
             results: Optional[Results] = None) -> List[Path]:
    """Write the PNGs of :data:`PLOT_FILES` into ``out`` and return their paths.

    :param results: the comparison the tables show (default: :func:`~fedsel_eval.results.compare` with
        the default reference).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results = results if results is not None else compare(records, plan)
    series = _series(records, results)
    if not series:
        return []
    omega = float(plan.env_config["target_accuracy"])
    length = max(len(r["curves"]["accuracy"]) for s in series for r in s.eps)
    t_end = max(r["curves"]["clock"][-1] for s in series for r in s.eps)
    grid = np.linspace(0.0, max(t_end, 1e-9), 300)

    def by_time(eps: List[Mapping[str, Any]]) -> np.ndarray:  # each episode a step function of its clock
        ys = []
        for r in eps:
            clock = np.asarray(r["curves"]["clock"], dtype=np.float64)
            acc = np.array([num(a) for a in r["curves"]["accuracy"]])
            ys.append(acc[np.searchsorted(clock, grid, side="right") - 1])
        return np.stack(ys)

    rounds = max(len(r["curves"]["round_time"]) for s in series for r in s.eps)

    def round_times(eps: List[Mapping[str, Any]]) -> np.ndarray:  # NaN once an episode has ended
        ys = np.full((len(eps), rounds), np.nan)
        for i, r in enumerate(eps):
            ys[i, :len(r["curves"]["round_time"])] = r["curves"]["round_time"]
        return ys

    return [
        plot_headline(series, results, plan, out / "headline.png"),
        plot_fairness(series, results, plan, out / "fairness.png"),
        plot_curves(series, results, plan, out / "accuracy_vs_round.png", np.arange(length),
                    lambda eps: np.stack([_held(r["curves"]["accuracy"], length) for r in eps]),
                    "Global test accuracy by communication round (an episode that reached Ω keeps its accuracy)",
                    "communication round", "test accuracy", omega, integer_x=True, y_range=(0.0, 1.0)),
        plot_curves(series, results, plan, out / "accuracy_vs_time.png", grid, by_time,
                    "Global test accuracy by simulated time (an episode that reached Ω keeps its accuracy)",
                    "simulated time (s)", "test accuracy", omega, y_range=(0.0, 1.0)),
        plot_participation(series, plan, out / "participation.png"),
        plot_curves(series, results, plan, out / "round_time.png", np.arange(1, rounds + 1), round_times,
                    "Simulated round time (the slowest responder), over the episodes still running",
                    "communication round", "round time (s)", integer_x=True, y_range=(0.0, None)),
    ]


__all__ = ["HEADLINE_PANELS", "PLOT_FILES", "accuracy_auc", "plot_all", "plot_curves", "plot_fairness", "plot_headline", "plot_participation"]
