"""Learning curves of SB3-trained selectors on FedSelect-Bench (issue #41; docs/SPEC.md §5, docs/TRAINING.md).

An SB3 run folder (``train_agent.py``'s: ``tb/<ALGO>_1/events.*``) logs ``rollout/ep_rew_mean``, the mean return of
the last 100 training episodes. On a ``fedsel/Bench-*`` id with the objective reward (``reward: objective``) an
episode's return *is* its score (minus the objective when lower is better), so the curve reads in the objective's
units: :func:`read_curve` turns it into (env rounds, objective) points. A step is one round for the ``topk``
designs (``pl_ppo``) and 1/K of a round for the one-client-a-step DQN form (``pc_dqn``, ``one_mode_step: 1/K``),
whose rounds to the target count picks (the reward is −1 a pick): K of them are a round.

The points are the *training* episodes: fresh federations drawn from training seeds, played by the exploring
policy (PPO's sampled sets, DQN's ε-greedy picks). :func:`plot_curves` draws them against reference levels measured
on the reporting seeds (random, the best heuristic, ``set_es``, the oracle), which are other draws of the same
scenario: the lines say where a policy of that level would sit, not what it scored on these very federations.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .plots import save_figure

#: the TensorBoard scalar a curve is read from (SB3's rolling mean of the last 100 episode returns)
TAG = "rollout/ep_rew_mean"


def read_curve(folder: Path, rounds_per_step: float, lower_is_better: bool,
               value_scale: float = 1.0) -> List[Tuple[float, float]]:
    """(env rounds, objective) points of a finished SB3 run folder's training episodes.

    :param rounds_per_step: 1 for a ``topk`` design, 1/K for the ``one`` mode.
    :param lower_is_better: the objective's direction (the return is minus the objective when True).
    :param value_scale: what one unit of the return is in the objective's units: 1, but 1/K for rounds to the
        target in the ``one`` mode, where the reward is −1 a step (a one-client pick) and K picks make a round.
    :raises ValueError: when the folder has no TensorBoard events or they lack :data:`TAG`, naming the folder.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = sorted(Path(folder).glob("tb/*/events.out.tfevents.*"))
    if not files:
        raise ValueError(f"{folder}: no TensorBoard events under tb/ (train with train_agent.py, which logs them)")
    points: Dict[int, float] = {}
    for f in files:  # a resumed run logs to a second tb/<ALGO>_2: later steps after earlier ones
        acc = EventAccumulator(str(f), size_guidance={"scalars": 0})
        acc.Reload()
        if TAG in acc.Tags().get("scalars", []):
            points.update({int(e.step): float(e.value) for e in acc.Scalars(TAG)})
    if not points:
        raise ValueError(f"{folder}: its TensorBoard events have no {TAG} (no training episode ended)")
    sign = -1.0 if lower_is_better else 1.0
    return [(step * rounds_per_step, sign * value * value_scale) for step, value in sorted(points.items())]


def curve_rows(folder: Path, rounds_per_step: float, lower_is_better: bool, value_scale: float = 1.0,
               **fields: Any) -> List[Dict[str, Any]]:
    """:func:`read_curve`'s points as record rows (``role: "curve"``; ``fields`` name the scenario, design and
    training seed). They carry no ``policy`` or ``value``, so no episode summary selects them."""
    return [{**fields, "role": "curve", "rounds": r, "objective": v}
            for r, v in read_curve(folder, rounds_per_step, lower_is_better, value_scale)]


def plot_curves(rows: Sequence[Mapping[str, Any]], references: Mapping[str, Mapping[str, Optional[float]]],
                objectives: Mapping[str, Tuple[str, bool]], path: Path) -> Path:
    """One panel per scenario: each design's training curve per training seed, with reference levels.

    :param rows: curve rows (:func:`curve_rows`): scenario, design, training_seed, rounds, objective.
    :param references: scenario → {label: level} (e.g. ``random``, ``pow_d (best heuristic)``, ``set_es``,
        ``oracle``), levels on the reporting seeds; a None level is left out.
    :param objectives: scenario → (objective name, lower is better), for the axis labels.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    names = sorted({r["scenario"] for r in rows})
    cols = min(max(len(names), 1), 3)
    nrows = -(-max(len(names), 1) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.7 * nrows), squeeze=False)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    styles = {"random": ("grey", "--"), "oracle": ("k", ":"), "set_es": ("C4", "-.")}
    # one colour a design in every panel (a design missing from a panel does not shift the others'), never the
    # reference lines' C3 / C4
    palette = ["C0", "C1", "C2", "C5", "C6", "C7", "C8", "C9"]
    colour = {d: palette[i % len(palette)] for i, d in enumerate(sorted({r["design"] for r in rows}))}
    for ax, name in zip(axes.flat, names):
        mine = [r for r in rows if r["scenario"] == name]
        for design in sorted({r["design"] for r in mine}):
            for j, t in enumerate(sorted({r["training_seed"] for r in mine if r["design"] == design})):
                pts = [(r["rounds"], r["objective"]) for r in mine if r["design"] == design and r["training_seed"] == t]
                ax.plot(*zip(*pts), color=colour[design], lw=1, alpha=0.85, label=design if j == 0 else None)
        for label, level in references.get(name, {}).items():
            if level is not None and np.isfinite(level):
                color, ls = styles.get(label.split(" ")[0], ("C3", "-."))
                ax.axhline(level, color=color, ls=ls, lw=1, label=f"{label} (reporting seeds)")
        objective, lower = objectives[name]
        ax.set_title(f"{name}: {objective} ({'↓' if lower else '↑'})", fontsize=9)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x / 1000:g}k" if x >= 1000 else f"{x:g}"))
        ax.set_xlabel("env rounds (training)")
        ax.set_ylabel("training episodes, last-100 mean")
        ax.legend(fontsize=6)
    return save_figure(fig, path)


__all__ = ["TAG", "curve_rows", "plot_curves", "read_curve"]
