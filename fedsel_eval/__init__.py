"""Head-to-head evaluation of client-selection policies (docs/SPEC.md §1, §5): the library behind ``evaluate.py``
and ``experiments/``.

It sits above both the env (``fedsel_env``) and the agents (``agents``): it builds agents and saved
models into policies and runs them in the env; neither of those packages imports it. One module per
step, and :func:`run`, which does them all in order:

1. **Plan** (:mod:`.plan`, with :mod:`.policies` and :mod:`.params`): one env config (a preset, an env
   id or a YAML file, with overrides), the policies (registered agents with parameters, or saved SB3
   models), the aggregation backends and the seeds. Everything is checked here, before any episode
   runs; bad input raises ``ValueError`` naming what was wrong and what fits.
2. **Episodes** (:mod:`.episodes`): a policy acts for one episode from ``env.reset(seed=s)``. Every
   policy is a fresh object with SB3's ``predict`` and its own generator seeded from ``s``
   (:func:`agent_seed`), so all policies see the same partitions, model initialisations and system
   draws for the same seed (common random numbers) and a re-run gives the same numbers bit for bit.
   Hand-written agents and trained models go through the same loop (:mod:`.executors`), in this process,
   in ``workers`` worker processes or as Ray tasks (:mod:`.ray_executor`; the records are the same).
3. **Run folder** (:mod:`.run_folder`): ``config.json`` (the resolved evaluation, compared on
   ``--resume``), ``episodes.jsonl`` (one line per finished episode, appended and fsync'ed as it
   finishes), the tables (``summary.md``, ``main_table.csv``, ``fairness_table.csv``, ``episodes.csv``,
   ``summary.csv``), PNG plots. Every file but the JSONL is written whole through a temp file and
   ``os.replace``.
4. **Results** (:mod:`.results`, :mod:`.stats`, :mod:`.tables`, :mod:`.summary`): the per-episode
   metrics of docs/SPEC.md §5 (computed with :mod:`fedsel_env.metrics`); rounds and time to Ω, final accuracy
   and the fairness metrics as means over seeds with 95% bootstrap CIs; paired differences against a
   reference policy (``random`` by default); a main table and a fairness table.
5. **Plots** (:mod:`.plots`): the headline figure (to-target metrics with CIs, forest plot against the
   reference), the fairness figure, and accuracy / round-time curves as small multiples with 95% bands.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

from agents.training.atomic import lock_run_folder

from .episodes import evaluate_task, run_episode
from .executors import run_plan
from .params import parse_params, split_items
from .plan import (EVAL_CONFIG_KEYS, BackendSpec, EpisodeTask, EvalPlan, episode_key, load_eval_config, make_plan,
                   parse_backend)
from .plots import PLOT_FILES, plot_all
from .ray_executor import check_address as check_ray_address
from .policies import PolicySpec, agent_seed, build_policy, check_model_fits, hand_written_agents, parse_policy
from .run_folder import (CONFIG_FILE, EPISODES_FILE, FORMAT_VERSION, SUMMARY_CSV, SUMMARY_MD, RunFolder,
                         atomic_write_text, config_differences)
from .results import Results, compare, resolve_reference
from .stats import Interval, bootstrap_ci, paired_difference
from .summary import METRICS, summarise, summary_columns, summary_csv
from .tables import summary_markdown
from .vector_episodes import check_n_envs


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run`'s episodes; the finished ones are in :attr:`episodes` (``--resume`` them).

    :param episodes: the run folder's ``episodes.jsonl``.
    """

    def __init__(self, episodes: Path) -> None:
        super().__init__(str(episodes))
        self.episodes = episodes


@dataclass
class Evaluation:
    """What :func:`run` made: the plan, its run folder, the episode records (plan order), the summary
    rows (one per policy × backend: mean and std of every metric), the summary as Markdown, the plots
    written (none without ``plots``), and the comparison the tables and figures show (CIs, paired
    differences against the reference)."""

    plan: EvalPlan
    folder: RunFolder
    records: List[Dict[str, Any]]
    rows: List[Dict[str, Any]]
    markdown: str
    plots: List[Path]
    results: Optional[Results] = None


def run(out: Union[str, Path], env: Union[str, Mapping[str, Any]] = "default", policies: Sequence[str] = (),
        aggregators: Sequence[str] = (), aggregator_params: Optional[Mapping[str, Any]] = None,
        seeds: Sequence[int] = (0, 1, 2), rounds: Optional[int] = None, target: Optional[float] = None,
        env_overrides: Optional[Mapping[str, Any]] = None, env_name: Optional[str] = None, *,
        resume: bool = False, overwrite: bool = False, restart_if_changed: bool = False, workers: int = 1,
        torch_threads: int = 1, progress: bool = True, plots: bool = True,
        log: Optional[Callable[[str], Any]] = None, ray: Optional[str] = None,
        reference: Optional[str] = None, n_envs: int = 1) -> Evaluation:
    """One evaluation, start to end: plan → episodes → run folder → summary → plots.

    The plan's arguments are :func:`make_plan`'s (checked before anything is written). Then the run
    folder ``out`` is opened (:meth:`RunFolder.open`), the episodes it lacks are run and appended
    (:func:`run_plan`), ``summary.csv`` / ``summary.md`` are written and, with ``plots``, the PNGs.

    :param resume: take up a folder that holds this same evaluation (its finished episodes are kept).
    :param overwrite: discard the evaluation a folder holds and start over.
    :param restart_if_changed: with ``resume``, a folder made by a different evaluation is started
        over instead of refused (the reproduction scripts' rule: a changed config reruns its part); the
        old evaluation's files are moved to ``superseded-<UTC time>/`` inside it, not deleted.
    :param workers: worker processes for the episodes (1 = this process; the records are the same).
    :param ray: run the episodes as Ray tasks instead: ``"local"`` (start Ray on this machine), ``"auto"``
        or a cluster address (:mod:`.ray_executor`; the records are the same).
    :param n_envs: play up to this many episodes at once in this process, through the vector env
        (:mod:`.vector_episodes`; the records are the same; excludes ``workers`` > 1 and ``ray``).
    :param torch_threads: torch threads per process.
    :param progress: show a progress bar over the episodes.
    :param reference: the policy the others are compared with, paired by seed and backend (default:
        ``random`` when it is evaluated; a name that is not evaluated is a ``ValueError``). Not part of
        the evaluation's config: ``resume`` with another reference re-summarises the same episodes.
    :param log: called with each line for the user (the plan's notes, what runs where, the summary
        table); None = silent.
    :raises ValueError: for bad input (nothing is written), or a folder that holds another evaluation.
    :raises Interrupted: on Ctrl-C during the episodes (the finished ones are kept).
    """
    say = log or (lambda _line: None)
    out = Path(out)
    plan = make_plan(env=env, policies=policies, aggregators=aggregators, aggregator_params=aggregator_params,
                     seeds=seeds, rounds=rounds, target=target, env_overrides=env_overrides, env_name=env_name)
    reference = resolve_reference(plan, reference)  # a reference not evaluated: refused before anything runs
    check_ray_address(ray, workers)  # Ray missing: refused before the run folder is written
    check_n_envs(n_envs, workers, ray)
    for note in plan.notes:
        say(f"note: {note}")
    with lock_run_folder(out, "fedsel_eval.run"):  # one writer per run folder: a second is refused
        try:
            folder = RunFolder.open(out, plan.record(), resume=resume, overwrite=overwrite)
        except ValueError:
            if not (restart_if_changed and resume and not overwrite):
                raise
            kept = RunFolder.set_aside(out)
            if kept is not None:
                say(f"note: {out} held a different evaluation; its files were moved to {kept}")
            folder = RunFolder.open(out, plan.record(), overwrite=True)
        cfg = plan.env_config
        say(f"Evaluating {len(plan.policies)} policies × {len(plan.backends)} backend(s) × {len(plan.seeds)} seeds "
            f"= {len(plan.tasks())} episodes on {plan.env_name} (N={cfg['num_clients']}, K={cfg['clients_per_round']}, "
            f"Ω={cfg['target_accuracy']}, ≤{cfg['max_rounds']} rounds) → {out}")
        try:
            records = run_plan(plan, folder, workers=workers, progress=progress, torch_threads=torch_threads, ray=ray,
                               n_envs=n_envs)
        except KeyboardInterrupt as e:
            raise Interrupted(out / EPISODES_FILE) from e
        for r in records:  # a record written before a metric was added lacks it: not measured (NaN)
            for key in METRICS:
                r["metrics"].setdefault(key, None)
        rows, results = summarise(records, plan), compare(records, plan, reference)
        markdown = folder.write_summary(records, rows, results, plan)
        say(markdown)
        paths = plot_all(records, plan, out, results) if plots else []
        return Evaluation(plan=plan, folder=folder, records=records, rows=rows, markdown=markdown, plots=paths,
                          results=results)


__all__ = ["CONFIG_FILE", "EPISODES_FILE", "EVAL_CONFIG_KEYS", "FORMAT_VERSION", "METRICS",
           "PLOT_FILES", "SUMMARY_CSV", "SUMMARY_MD", "BackendSpec", "Interval", "Results",
           "EpisodeTask", "EvalPlan", "Evaluation", "Interrupted", "PolicySpec", "RunFolder",
           "agent_seed", "atomic_write_text", "build_policy", "check_model_fits", "check_ray_address",
           "config_differences",
           "episode_key", "evaluate_task", "hand_written_agents", "load_eval_config", "make_plan", "parse_backend",
           "parse_params", "parse_policy", "plot_all", "run", "run_episode", "run_plan",
           "split_items", "summarise", "summary_columns", "summary_csv", "summary_markdown", "bootstrap_ci", "compare",
           "paired_difference", "resolve_reference"]
