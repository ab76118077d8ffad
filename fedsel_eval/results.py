"""What an evaluation found, per policy × backend: the headline and fairness metrics with 95% CIs, and
the paired differences against a reference policy.

Owns the choice of metrics (:data:`HEADLINE`, :data:`FAIRNESS`), the reference policy (:func:`resolve_reference`:
``random`` when it was evaluated, or the one named, which must have been), and :func:`compare`, which
builds :class:`Results` from the episode records with :mod:`.stats`. The tables (:mod:`.tables`) and the
figures (:mod:`.plots`) draw from the same :class:`Results`, so their numbers agree.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence

from .stats import TO_TARGET, Interval, metric_ci, paired_difference

if TYPE_CHECKING:
    from .plan import EvalPlan

#: The headline metrics (main table, headline figure): each with a CI and a paired difference.
HEADLINE = ("rounds_to_target", "time_to_target", "final_accuracy")
#: The fairness metrics (fairness table and figure): each with a CI.
FAIRNESS = ("jain_index", "acc_std", "acc_worst10", "acc_best10", "min_participation_rate")
#: The reference policy when none is named, if it was evaluated.
DEFAULT_REFERENCE = "random"


@dataclass
class SeriesResult:
    """One policy on one backend: its episodes' counts, CIs of :data:`HEADLINE` + :data:`FAIRNESS`, and
    paired differences of :data:`HEADLINE` against the reference (none for the reference itself)."""

    policy: str
    backend: str
    episodes: int
    reached: int
    diverged: int
    intervals: Dict[str, Interval]
    deltas: Dict[str, Interval] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.policy} / {self.backend}"


@dataclass
class Results:
    """The comparison: the reference policy (None: none evaluated), the round budget that a missed Ω counts
    as, the number of backends, and one :class:`SeriesResult` per (policy, backend) in the plan's order."""

    reference: Optional[str]
    cap: int
    backends: int
    series: List[SeriesResult]

    def label(self, s: SeriesResult) -> str:
        """A series' name in tables and figures: the policy, with the backend when several were compared."""
        return s.policy if self.backends == 1 else s.label

    def main_rows(self) -> List[Dict[str, Any]]:
        """``main_table.csv``'s rows: counts, then ``<metric>_mean/_lo/_hi/_n/_missed`` and the same for
        ``delta_<metric>`` (vs ``reference``)."""
        rows = []
        for s in self.series:
            row: Dict[str, Any] = {"policy": s.policy, "backend": s.backend, "episodes": s.episodes,
                                   "reached": s.reached, "diverged": s.diverged, "reference": self.reference or ""}
            for prefix, ivs in (("", s.intervals), ("delta_", s.deltas)):
                for m in HEADLINE:
                    if m in ivs:  # "_missed" only where a missed Ω counts as the cap
                        row.update({k: v for k, v in ivs[m].fields(prefix + m).items()
                                    if m in TO_TARGET or not k.endswith("_missed")})
            rows.append(row)
        return rows

    def fairness_rows(self) -> List[Dict[str, Any]]:
        """``fairness_table.csv``'s rows: counts, then ``<metric>_mean/_lo/_hi/_n`` per fairness metric."""
        rows = []
        for s in self.series:
            row: Dict[str, Any] = {"policy": s.policy, "backend": s.backend, "episodes": s.episodes}
            for m in FAIRNESS:
                row.update({k: v for k, v in s.intervals[m].fields(m).items() if not k.endswith("_missed")})
            rows.append(row)
        return rows


def resolve_reference(plan: EvalPlan, reference: Optional[str] = None) -> Optional[str]:
    """The reference policy's label: ``reference`` if given (it must be one of the plan's policies), else
    ``random`` when it was evaluated, else None (no paired differences).

    :raises ValueError: when ``reference`` names no evaluated policy (naming the ones there are).
    """
    labels = [p.label for p in plan.policies]
    if reference is not None and not isinstance(reference, str):
        raise ValueError(f"--reference {reference!r} is invalid: expected a policy label, one of {labels}")
    if reference is None:
        return DEFAULT_REFERENCE if DEFAULT_REFERENCE in labels else None
    if reference not in labels:
        raise ValueError(f"--reference {reference!r} is not one of the evaluated policies {labels}: name one of "
                         f"them, or add it with --policy {reference}")
    return reference


def compare(records: Sequence[Mapping[str, Any]], plan: EvalPlan, reference: Optional[str] = None) -> Results:
    """The :class:`Results` of an evaluation's records (series without records are left out).

    :param reference: the reference policy (see :func:`resolve_reference`); its episodes pair with every
        other policy's on the same seed and backend.
    """
    ref = resolve_reference(plan, reference)
    cap = int(plan.env_config["max_rounds"])
    by_series: Dict[tuple, List[Mapping[str, Any]]] = {}
    for r in records:
        by_series.setdefault((r["policy"], r["backend"]), []).append(r)
    series = []
    for policy, backend in plan.series():
        eps = sorted(by_series.get((policy, backend), []), key=lambda r: r["seed"])
        if not eps:
            continue
        s = SeriesResult(policy=policy, backend=backend, episodes=len(eps),
                         reached=sum(bool(r["reached"]) for r in eps), diverged=sum(bool(r["diverged"]) for r in eps),
                         intervals={m: metric_ci(eps, m, cap) for m in HEADLINE + FAIRNESS})
        ref_eps = by_series.get((ref, backend), [])
        if ref is not None and policy != ref and ref_eps:
            s.deltas = {m: paired_difference(eps, ref_eps, m, cap) for m in HEADLINE}
        series.append(s)
    return Results(reference=ref, cap=cap, backends=len(plan.backends), series=series)


__all__ = ["DEFAULT_REFERENCE", "FAIRNESS", "HEADLINE", "Results", "SeriesResult", "compare", "resolve_reference"]
