"""A scenario's objective over a plain evaluation's episodes (issue #46): ``evaluate.py --env <scenario>``.

A scenario (``fedsel_env.scenarios``: a bench id or a user's YAML file with ``objective:``) is scored by one
objective (docs/BENCHMARK.md; SPEC.md §5's metrics: rounds or simulated seconds to Ω, a miss counted as the cap,
final or worst-10% accuracy). ``evaluate.py`` evaluates every policy on it as on any env; this module adds the
table the scenario is judged by: per policy and backend, the objective's mean over seeds with its 95% bootstrap CI
and the paired difference from the reference policy (95% Student-t CI over the seeds both played).
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from fedsel_env.bench import episode_objective
from fedsel_env.scenarios import Scenario

from .markdown import table
from .stats import bootstrap_ci, paired_t


#: (policy, backend) → seed → (objective value, censored)
Values = Dict[Tuple[str, str], Dict[int, Tuple[float, bool]]]


def objective_values(records: Sequence[Mapping[str, Any]], sc: Scenario) -> Values:
    """(policy, backend) → seed → (the episode's objective, whether it is censored: Ω missed, a bound)."""
    out: Values = {}
    for r in records:
        out.setdefault((r["policy"], r.get("backend", "")), {})[int(r["seed"])] = episode_objective(sc, r)
    return out


def objective_markdown(records: Sequence[Mapping[str, Any]], sc: Scenario,
                       reference: Optional[str] = "random") -> str:
    """The objective table of an evaluation on scenario ``sc`` (Markdown, a paragraph above it).

    :param reference: the policy each other is paired with by seed and backend (None or absent: no Δ column).
    """
    values = objective_values(records, sc)
    refs = {b: v for (p, b), v in values.items() if p == reference}
    better = "lower" if sc.lower_is_better else "higher"
    headers = ["policy", "backend", sc.objective] + ([f"Δ vs {reference}"] if refs else [])
    fmt = ".1f" if sc.objective.endswith("_to_target") else ".3f"  # rounds and seconds; accuracies
    rows: List[List[str]] = []
    for (policy, backend), by_seed in values.items():
        v = [x for x, _ in by_seed.values()]
        cells = [policy, backend, bootstrap_ci(v, missed=sum(c for _, c in by_seed.values())).text(fmt)]
        if refs:
            ref = refs.get(backend, {})
            seeds = sorted(set(by_seed) & set(ref))
            cells.append("reference" if policy == reference else
                         paired_t([by_seed[s][0] for s in seeds], [ref[s][0] for s in seeds]).text("+" + fmt))
        rows.append(cells)
    head = (f"**Objective** of scenario `{sc.name}` ({sc.env_id}): `{sc.objective}`, {better} is better — mean over "
            f"seeds [95% bootstrap CI]" + (f"; Δ vs {reference}: paired by seed [95% t CI]" if refs else "")
            + ". * = an episode that missed Ω counted as the cap (the mean is a bound).")
    return head + "\n\n" + table(headers, rows, "ll" + "r" * (len(headers) - 2), pad=True)


__all__ = ["objective_markdown", "objective_values"]
