"""The env's ``info`` dicts (docs/ENVIRONMENT.md lists every key): an episode's running tallies.

``info`` is for evaluation, not for agents: besides what the server knows (the view's records)
it names the simulator's truth — the attackers, the stragglers, the honest clients' accuracy.

Two kinds of values, so that Gymnasium's vector envs can batch ``info`` (``VectorEnv._add_info`` gives
an ndarray entry the first env's shape, and stores any other object as it is, per env):

- a per-client quantity (``client_accuracies``, ``participation``, ``num_samples``) is an ndarray of
  length N, the same in every env and round;
- a set of client ids (``selected``, ``responders``, ``dropped``, ``late``, ``attackers``,
  ``stragglers``) is a ``list`` of Python ints, whose length varies between rounds and envs.
  A list rather than a tuple: ``x[info["selected"]]`` then indexes rows as an index array does
  (a tuple ``(3,)`` or ``()`` would be read by numpy as a multi-dimensional index: one element, or
  the whole array).

A quantity that was not measured in a step is left out of that step's ``info``, not given as NaN
(``improved_fraction`` when ``track_improvement`` is off or no update arrived), so two runs of the same seed
and actions give equal ``info`` dicts (NaN != NaN: Gymnasium's ``check_env`` compares them), and Gymnasium's
vector envs mark the missing entries in ``info["_improved_fraction"]``.
"""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from . import metrics


def client_ids(ids: np.ndarray) -> List[int]:
    """A set of client ids as ``info`` holds it: a list of Python ints, in the simulator's order."""
    return np.asarray(ids, dtype=np.int64).reshape(-1).tolist()


class EpisodeTally:
    """Counts over one episode: updates, divergence, attackers picked and heard, drop-outs, late arrivals.

    :param adversary: the federation's clients (``fedsel_env.sim.adversary.HonestClients`` or ``Adversary``).
    :param profiling_time: the profiling round's length (seconds; not on the clock).
    :param profiling_diverged: profiling-round models that were not finite.
    """

    def __init__(self, adversary, profiling_time: float, profiling_diverged: int) -> None:
        self.adversary = adversary
        self.is_attacker = np.asarray(adversary.is_attacker, dtype=bool)
        self.profiling_time, self.profiling_diverged = float(profiling_time), int(profiling_diverged)
        self.steps = self.updates_sent = self.attacker_rounds = self.attacker_responses = 0
        self.dropouts = self.late = 0
        self.loss_queries = 0  # clients asked for their loss before a selection (Power-of-Choice)
        self.diverged = False

    def record(self, report) -> None:
        """Fold one step's ``RoundReport`` into the counts."""
        self.steps += 1
        self.updates_sent += int(report.responders.size)
        self.attacker_rounds += int(self.is_attacker[report.selected].any())
        self.attacker_responses += int(self.is_attacker[report.responders].sum())
        self.dropouts += int(report.dropped.size)
        self.late += int(report.late.size)
        self.diverged = self.diverged or bool(report.diverged)

    def honest_accuracy(self, client_accuracies: np.ndarray) -> float:
        """Mean test accuracy over the honest clients (every client when there are no attackers)."""
        return float(np.mean(client_accuracies[~self.is_attacker]))

    def reset_info(self, view, model_size: int) -> Dict[str, Any]:
        """``info`` of ``reset``."""
        return {"accuracy": view.accuracy, "loss": view.loss_global, "round": 0,
                "profiling_time": self.profiling_time, "clock": 0.0,
                "client_accuracies": view.client_accuracies.copy(), "num_samples": view.num_samples.copy(),
                "model_size": model_size, "attackers": client_ids(self.adversary.attackers),
                "stragglers": client_ids(self.adversary.stragglers),
                "honest_acc_mean": self.honest_accuracy(view.client_accuracies),
                "profiling_diverged": self.profiling_diverged}

    def step_info(self, report, view, terminated: bool) -> Dict[str, Any]:
        """``info`` of ``step``."""
        acc = view.client_accuracies
        info: Dict[str, Any] = {
            "round": self.steps,
            "accuracy": view.accuracy,
            "loss": view.loss_global,
            "evaluated": report.evaluation is not None,
            "client_accuracies": acc.copy(),
            "selected": client_ids(report.selected),
            "responders": client_ids(report.responders),
            "round_time": report.round_time,
            "clock": report.clock,
            "profiling_time": self.profiling_time,
            "participation": view.participation.copy(),
            "updates_sent": self.updates_sent,
            "loss_queries": self.loss_queries,
            "diverged": self.diverged,
            "is_success": terminated,
            # robustness (fedsel_env/sim/adversary.py, docs/ROBUSTNESS.md)
            "attackers": client_ids(np.flatnonzero(self.is_attacker)),
            "attacker_selected": bool(self.is_attacker[report.selected].any()),
            "attacker_selected_rate": self.attacker_rounds / self.steps,
            "attacker_response_share": self.attacker_responses / max(self.updates_sent, 1),
            "honest_acc_mean": self.honest_accuracy(acc),
            "dropped": client_ids(report.dropped),
            "late": client_ids(report.late),
            "dropouts": self.dropouts,
            "late_arrivals": self.late,
        }
        if np.isfinite(report.improved_fraction):  # measured: track_improvement on and at least one responder
            info["improved_fraction"] = float(report.improved_fraction)
        info.update(metrics.client_accuracy_summary(acc))
        info.update(metrics.participation_summary(view.participation, self.steps))
        return info
