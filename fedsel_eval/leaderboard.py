"""FedSelect-Bench's leaderboard (``evaluate.py --suite``, ``experiments/bench_reference.py``): the Markdown tables
and the figure drawn from the per-scenario summaries of :func:`fedsel_eval.bench.summarise`.

- :func:`leaderboard_markdown`: per scenario each policy's objective, its paired difference from random and its
  normalised score, each with its 95% CI; each policy's mean normalised score over the scenarios with headroom;
  per scenario the policies ahead of and behind random (:func:`versus_random`).
- :func:`plot_leaderboard`: one panel per scenario of the normalised scores on an axis of ±:data:`PLOT_LIMIT`;
  a CI or a score beyond it is drawn at the edge (:func:`ci_marks`, issue #45).

The statistics are docs/BENCHMARK.md's "Objectives and scores".
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from .markdown import table
from .stats import TInterval


def mean_normalised(summaries: Sequence[Mapping[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Each policy's mean normalised score over the scenarios with headroom (and how many it covers)."""
    acc: Dict[str, List[float]] = {}
    for s in summaries:
        if s.get("low_headroom", True):
            continue
        for p, v in s["policies"].items():
            acc.setdefault(p, []).append(v["normalised"]["mean"])
    return {p: {"mean": float(np.mean(v)), "scenarios": len(v)} for p, v in acc.items()}


# ============================================================================================ tables
def _cell(iv: Mapping[str, Any], spec: str) -> str:
    """A stored interval as ``mean [lo, hi]`` (a bootstrap one, or a Student-t one with its ``p``)."""
    return TInterval(**iv).text(spec)


def objective_format(objective: str) -> str:
    return {"rounds_to_target": ".1f", "time_to_target": ".0f"}.get(objective, ".3f")


def leaderboard_markdown(summaries: Sequence[Mapping[str, Any]], policies: Optional[Sequence[str]] = None) -> str:
    """Per scenario: objective and normalised score of each policy; then each policy's mean normalised score."""
    lines = []
    for s in summaries:
        if "headroom" not in s:
            lines.append(f"**{s['scenario']}**: incomplete (random or the oracle has not played every seed yet)\n")
            continue
        f = objective_format(s["objective"])
        arrow = "lower is better" if s["lower_is_better"] else "higher is better"
        flag = " — **low-headroom**" if s["low_headroom"] else ""
        lines.append(f"**{s['scenario']}** (`{s['env_id']}`), {s['objective']} ({arrow}), seeds "
                     f"{_seed_range(s['seeds'])}: headroom {_cell(s['headroom'], '+' + f)}{flag}\n")
        names = [p for p in (policies or sorted(s["policies"])) if p in s["policies"]]
        rows = []
        for p in sorted(names, key=lambda q: -_finite(s["policies"][q]["normalised"]["mean"])):
            v = s["policies"][p]
            delta = "—" if p == "random" or "vs_random" not in v else _cell(v["vs_random"], "+" + f)
            rows.append([p, _cell(v["objective"], f), delta, _cell(v["normalised"], "+.2f")])
        lines.append(table(["policy", "objective [95% CI]", "Δ vs random [95% CI]", "normalised score [95% CI]"],
                           rows))
    means = mean_normalised(summaries)
    if means:
        lines.append("**Mean normalised score** over the scenarios with headroom:\n")
        lines.append(table(["policy", "mean normalised score", "scenarios"],
                           [[p, f"{v['mean']:+.2f}", v["scenarios"]]
                            for p, v in sorted(means.items(), key=lambda kv: -kv[1]["mean"])]).rstrip("\n"))
    verdicts = versus_random(summaries)
    if verdicts:
        lines.append("\n**Against random** (Δ vs random: the policy's objective minus random's on the same seed, "
                     "mean with its paired 95% Student-t CI, one interval per policy, not adjusted for the "
                     "number of policies; ahead / behind: the CI wholly on the better / worse side of 0; the "
                     "lookahead oracle is privileged and left out):\n")
        lines += [f"- {v}" for v in verdicts]
    lines.append("\n`*`: some episodes missed Ω and count as the cap (a bound).")
    return "\n".join(lines)


def versus_random(summaries: Sequence[Mapping[str, Any]]) -> List[str]:
    """Per scenario, the deployable policies whose paired difference from random (``vs_random``) has a 95% CI
    wholly on one side of 0: ahead of random (best first, with the difference and its CI) and behind it."""
    out = []
    for s in summaries:
        if "headroom" not in s:
            continue
        lower, f = s["lower_is_better"], objective_format(s["objective"])
        ahead, behind = [], []
        for p, v in s["policies"].items():
            if p in ("random", "lookahead") or "vs_random" not in v:
                continue
            lo, hi = _nan(v["vs_random"]["lo"]), _nan(v["vs_random"]["hi"])  # NaN (one seed): neither
            if (hi < 0) if lower else (lo > 0):
                ahead.append((p, v["vs_random"]))
            elif (lo > 0) if lower else (hi < 0):
                behind.append(p)
        ahead.sort(key=lambda x: x[1]["mean"] * (1 if lower else -1))
        text = ", ".join(f"`{p}` {_cell(iv, '+' + f)}" for p, iv in ahead) or "none"
        out.append(f"{s['scenario']} ({s['objective']}, {'lower' if lower else 'higher'} is better): ahead "
                   f"{text}; behind {', '.join(f'`{p}`' for p in sorted(behind)) or 'none'}")
    return out


def _finite(x: Any) -> float:
    return float(x) if x is not None and math.isfinite(float(x)) else -math.inf


def _seed_range(seeds: Sequence[int]) -> str:
    if not seeds:
        return "none"
    contiguous = list(seeds) == list(range(seeds[0], seeds[0] + len(seeds)))
    return f"{seeds[0]}–{seeds[-1]} ({len(seeds)})" if contiguous else ", ".join(map(str, seeds))


#: the leaderboard figure's x range: a normalised score or CI end beyond ±PLOT_LIMIT is drawn at the edge
PLOT_LIMIT = 3.0


def ci_marks(est: float, lo: float, hi: float, limit: float = PLOT_LIMIT) -> Dict[str, Any]:
    """What the leaderboard figure draws of one normalised score and its 95% CI on an axis of ±``limit``.

    :return: ``bar``: (left, right), the CI cut at the edges (None when it lies wholly beyond one edge, or
        there is no CI); ``cut_left`` / ``cut_right``: the CI goes on beyond that edge (an arrow there);
        ``point``: the estimate, or the edge it lies beyond; ``off_axis``: the estimate lies beyond the edge
        (drawn as a triangle at the edge, with its numbers written beside it). Before issue #45 the bar was
        the CI's half-widths drawn around the point moved to the edge, so a CI of [−32.3, −6.7] was drawn
        from −3 to +1.8.
    """
    has_ci = math.isfinite(lo) and math.isfinite(hi)
    left, right = (max(lo, -limit), min(hi, limit)) if has_ci else (math.nan, math.nan)
    bar = (float(left), float(right)) if has_ci and left < right else None
    return {"bar": bar, "cut_left": bar is not None and lo < -limit, "cut_right": bar is not None and hi > limit,
            "point": float(min(max(est, -limit), limit)), "off_axis": bool(abs(est) > limit)}


def plot_leaderboard(summaries: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """One panel per scenario: each policy's normalised score with its 95% CI (0 = random, 1 = the oracle), on
    an axis of ±:data:`PLOT_LIMIT`; what lies beyond it is drawn at the edge as :func:`ci_marks` says."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lim, colour, beyond = PLOT_LIMIT, "C0", "C3"
    done = [s for s in summaries if s.get("policies")]
    cols = min(4, max(1, len(done)))
    rows = max(1, math.ceil(len(done) / cols))
    tallest = max([len(s["policies"]) for s in done] or [1])
    fig, axes = plt.subplots(rows, cols, figsize=(3.8 * cols, (1.0 + 0.24 * tallest) * rows), squeeze=False)
    for ax, s in zip(axes.ravel(), done):
        names = sorted(s["policies"])
        for y, name in enumerate(names):
            iv = s["policies"][name]["normalised"]
            est, lo, hi = _nan(iv["mean"]), _nan(iv["lo"]), _nan(iv["hi"])
            if not math.isfinite(est):
                continue
            m = ci_marks(est, lo, hi, lim)
            if m["bar"] is not None:
                left, right = m["bar"]
                ax.hlines(y, left, right, color=colour, lw=1.2)
                for x, cut, arrow in ((left, m["cut_left"], "<"), (right, m["cut_right"], ">")):
                    ax.plot([x], [y], marker=arrow if cut else "|", color=colour, ms=5 if cut else 6,
                            clip_on=False, ls="none")
            if m["off_axis"]:
                side = 1 if est > 0 else -1
                ax.plot([m["point"]], [y], marker=">" if side > 0 else "<", color=beyond, ms=6, clip_on=False,
                        ls="none")
                ci = f" [{lo:+.1f}, {hi:+.1f}]" if math.isfinite(lo) and math.isfinite(hi) else ""
                # the numbers beside the edge, past the part of the bar that is drawn
                inner = m["point"] if m["bar"] is None else (m["bar"][1] if side < 0 else m["bar"][0])
                ax.text(inner - side * 0.12, y, f"{est:+.1f}{ci}", ha="right" if side > 0 else "left",
                        va="center", fontsize=6, color=beyond)
            else:
                ax.plot([m["point"]], [y], marker="o", color=colour, ms=4, ls="none")
        ax.axvline(0, color="grey", lw=0.8)
        ax.axvline(1, color="black", lw=0.8, ls="--")
        for edge in (-lim, lim):
            ax.axvline(edge, color="lightgrey", lw=0.6, ls=":")
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.set_ylim(-0.7, len(names) - 0.3)
        ax.set_xlim(-lim - 0.2, lim + 0.2)
        flag = " (low headroom)" if s.get("low_headroom") else ""
        ax.set_title(f"{s['scenario']}{flag}", fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
    for ax in axes.ravel()[len(done):]:
        ax.axis("off")
    fig.suptitle(f"FedSelect-Bench: normalised score (0 = random, 1 = lookahead oracle), 95% CI; beyond ±{lim:g}: "
                 f"at the edge (arrow), a score there in red with its numbers", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _nan(x: Any) -> float:
    return math.nan if x is None else float(x)
