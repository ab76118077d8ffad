"""The plots of an evaluation: five PNGs written into its run folder with matplotlib.

Owns the figures (:func:`plot_all`): accuracy against round and against simulated time (mean with a
±1 std band over seeds), per-client accuracy distributions, participation per client, and round time
per round. matplotlib is imported when a plot is drawn, so ``--no-plots`` runs never load it. Each
file is written through a temp file and ``os.replace``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .summary import num

if TYPE_CHECKING:
    from .plan import EvalPlan

#: The PNG files :func:`plot_all` writes.
PLOT_FILES = ("accuracy_vs_round.png", "accuracy_vs_time.png", "client_accuracy.png",
              "participation.png", "round_time.png")


def _series_label(policy: str, backend: str, plan: EvalPlan) -> str:
    return policy if len(plan.backends) == 1 else f"{policy} / {backend}"


def _held(values: Sequence[Optional[float]], length: int) -> np.ndarray:
    """A curve extended to ``length`` points by holding its last value (the training job has ended)."""
    v = np.array([num(x) for x in values], dtype=np.float64)
    return np.concatenate([v, np.full(length - v.size, v[-1])]) if v.size < length else v[:length]


def _figure(width: float = 7.5, height: float = 4.5) -> Tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig, fig.add_subplot()


def _finish(ax: Any, integer_x: bool = False) -> None:
    """Legend outside the axes (it never hides a curve); whole-number ticks for rounds."""
    if integer_x:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _save(fig: Any, path: Path) -> Path:
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, format="png")
    os.replace(tmp, path)
    return path


def plot_all(records: Sequence[Mapping[str, Any]], plan: EvalPlan, out: Union[str, Path]) -> List[Path]:
    """Write the five PNG plots of an evaluation into ``out`` and return their paths.

    - ``accuracy_vs_round.png``: global test accuracy against the communication round;
    - ``accuracy_vs_time.png``: the same against simulated wall-clock time;
      (both: mean over seeds with a ±1 std band; an episode that reached Ω keeps its final accuracy);
    - ``client_accuracy.png``: box plots of the final per-client test accuracies (all clients, all seeds);
    - ``participation.png``: how many rounds each client took part in (mean over seeds);
    - ``round_time.png``: simulated round time against the round (mean ± std over the episodes still running).
    """
    out = Path(out)
    cfg = plan.env_config
    n_seeds = len(plan.seeds)
    groups = []
    for policy, backend in plan.series():
        eps = sorted((r for r in records if r["policy"] == policy and r["backend"] == backend),
                     key=lambda r: r["seed"])
        if eps:
            groups.append((_series_label(policy, backend, plan), eps))
    if not groups:
        return []
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(groups) <= 10 else "tab20"]
    colors = [cmap(i % cmap.N) for i in range(len(groups))]
    seeds_txt = f"mean ± std over {n_seeds} seed{'s' if n_seeds > 1 else ''}"
    omega = cfg["target_accuracy"]
    paths = []

    # accuracy against round
    fig, ax = _figure()
    length = max(len(r["curves"]["accuracy"]) for _, eps in groups for r in eps)
    x = np.arange(length)
    for (label, eps), c in zip(groups, colors):
        ys = np.stack([_held(r["curves"]["accuracy"], length) for r in eps])
        ax.plot(x, ys.mean(0), color=c, label=label)
        ax.fill_between(x, ys.mean(0) - ys.std(0), ys.mean(0) + ys.std(0), color=c, alpha=0.15, linewidth=0)
    ax.axhline(omega, color="black", linestyle="--", linewidth=1, label=f"target Ω = {omega:g}")
    ax.set(title=f"Global test accuracy by round ({seeds_txt})", xlabel="communication round",
           ylabel="global test accuracy (fraction)")
    _finish(ax, integer_x=True)
    paths.append(_save(fig, out / "accuracy_vs_round.png"))

    # accuracy against simulated time: each episode as a step function of its clock
    fig, ax = _figure()
    t_end = max(r["curves"]["clock"][-1] for _, eps in groups for r in eps)
    grid = np.linspace(0.0, max(t_end, 1e-9), 300)
    for (label, eps), c in zip(groups, colors):
        ys = []
        for r in eps:
            clock = np.asarray(r["curves"]["clock"], dtype=np.float64)
            acc = np.array([num(a) for a in r["curves"]["accuracy"]])
            ys.append(acc[np.searchsorted(clock, grid, side="right") - 1])
        ys = np.stack(ys)
        ax.plot(grid, ys.mean(0), color=c, label=label)
        ax.fill_between(grid, ys.mean(0) - ys.std(0), ys.mean(0) + ys.std(0), color=c, alpha=0.15, linewidth=0)
    ax.axhline(omega, color="black", linestyle="--", linewidth=1, label=f"target Ω = {omega:g}")
    ax.set(title=f"Global test accuracy by simulated time ({seeds_txt})", xlabel="simulated time (s)",
           ylabel="global test accuracy (fraction)")
    _finish(ax)
    paths.append(_save(fig, out / "accuracy_vs_time.png"))

    # final per-client accuracy
    fig, ax = _figure(max(7.5, 0.8 * len(groups) + 2))
    data = [np.concatenate([np.asarray(r["clients"]["accuracy"], dtype=np.float64) for r in eps])
            for _, eps in groups]
    box = ax.boxplot(data, patch_artist=True, showmeans=True, widths=0.6, medianprops={"color": "black"},
                     meanprops={"marker": "^", "markerfacecolor": "white", "markeredgecolor": "black"})
    for patch, c in zip(box["boxes"], colors):
        patch.set_facecolor(c)
        patch.set_alpha(0.6)
    ax.set_xticks(range(1, len(groups) + 1), [g[0] for g in groups], rotation=30, ha="right")
    ax.set(title=f"Final per-client test accuracy ({cfg['num_clients']} clients × {n_seeds} seeds per box)\n"
                 f"box: quartiles, line: median, ▲: mean", xlabel="policy", ylabel="per-client test accuracy (fraction)")
    paths.append(_save(fig, out / "client_accuracy.png"))

    # participation per client
    n = cfg["num_clients"]
    fig, ax = _figure(max(7.5, 0.3 * n + 3), max(3.0, 0.45 * len(groups) + 1.8))
    counts = np.stack([np.mean([r["clients"]["participation"] for r in eps], axis=0) for _, eps in groups])
    im = ax.imshow(counts, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_yticks(range(len(groups)), [g[0] for g in groups])
    if n <= 40:  # every client labelled; beyond that the default ticks keep the axis legible
        ax.set_xticks(range(n), [str(i) for i in range(n)], fontsize="small")
    ax.set(title="Rounds each client took part in (mean over seeds)\nan episode ends at Ω or at the round budget",
           xlabel="client index", ylabel="policy")
    fig.colorbar(im, ax=ax, label="rounds participated (count)")
    paths.append(_save(fig, out / "participation.png"))

    # round time per round
    fig, ax = _figure()
    for (label, eps), c in zip(groups, colors):
        length = max(len(r["curves"]["round_time"]) for r in eps)
        ys = np.full((len(eps), length), np.nan)
        for i, r in enumerate(eps):
            ys[i, :len(r["curves"]["round_time"])] = r["curves"]["round_time"]
        x = np.arange(1, length + 1)
        mean, std = np.nanmean(ys, 0), np.nanstd(ys, 0)
        ax.plot(x, mean, color=c, label=label)
        ax.fill_between(x, mean - std, mean + std, color=c, alpha=0.08, linewidth=0)
    ax.set(title="Simulated round time (slowest responder)\nmean ± std over the episodes still running",
           xlabel="communication round", ylabel="round time (s, simulated)")
    _finish(ax, integer_x=True)
    paths.append(_save(fig, out / "round_time.png"))
    return paths


__all__ = ["PLOT_FILES", "plot_all"]
