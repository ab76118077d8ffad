"""Training ``set_es`` (``agents/set_es.py``): CMA-ES over its weights, on the scenario's own episode objective.

One training run = one scenario (``fedsel_env/bench.py``), one training seed, a number of generations. Each
generation g:

1. CMA-ES (the ``cma`` package) proposes P weight vectors (θ, w);
2. every one of them plays the same E fresh federations, episode j from ``env.reset(seed=ES_SEED_BASE +
   10_000·seed + E·g + j)`` (common random numbers: the candidates differ only in their selections); every
   training federation (``fedsel_env.bench.federation_seed``) is checked to be none of the bench's tuning or
   reporting ones;
3. on each federation the P episodes' objectives (rounds to Ω, a miss counted as the cap; worst-10% accuracy;
   seconds to Ω) are ranked, and a candidate's fitness is its mean rank over the E federations (so a hard
   federation weighs no more than an easy one);
4. CMA-ES is told the fitnesses; its mean is the policy, saved after every generation (``set_es.json``).

Every ``eval_every`` generations (and at the end) the mean plays ``eval_seeds`` (the bench's tuning seeds, never
the reporting ones): the learning curve in ``progress.jsonl``.

Resumable without pickles: ``progress.jsonl`` holds every generation's candidates and fitnesses; a resumed run
rebuilds the search from its seed and tells it the recorded candidates and fitnesses generation by generation
(checking that it proposes the recorded candidates, to 1e-6 of their size), then goes on. CMA-ES's random
numbers come from numpy's global generator; the trainer keeps that generator's state apart (restoring the caller's around every ``ask``), so nothing else in the
process moves it. A resumed run therefore equals an uninterrupted one (``tests/test_set_es.py``).
"""
from __future__ import annotations

import json
import math
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from fedsel_env.rollout import forget_env, keep_env

from .atomic import append_line, atomic_write_text, pin_run_config

ES_SEED_BASE = 2_000_000


@dataclass
class ESConfig:
    """What one training run does (``config.json`` in its folder; a resume must match it).

    :param scenario: a scenario: a registered name, an id, or the path of a YAML scenario file (issue #46).
    :param seed: the training seed (the search's random numbers and the training federations).
    :param generations: CMA-ES generations.
    :param episodes: E, the federations every candidate of a generation plays.
    :param popsize: P, candidates per generation (None: CMA-ES's default 4 + ⌊3 ln n⌋, 12 for 16 weights).
    :param sigma0: the search's initial step size (the weights act on standardised columns, so 1 is one unit).
    :param eval_every: every this many generations (and at the end) the mean plays ``eval_seeds``.
    :param eval_seeds: the learning curve's seeds (the bench's tuning seeds; never reporting ones).
    :param env_overrides: env-config fields over the scenario's (e.g. a smaller ``max_rounds`` for a test).
    :param queries: d, the clients the policy asks for their current loss each round (the named variant
        ``set_es_q``, ``agents/set_es.py``); 0 = ``set_es``, no queries.
    :param start: where the search starts: ``None``, the zero vector (every candidate of the first generation a
        random direction), or ``"kcenter_cover"``, weight 1 on ``cover_pick`` alone (the heuristic itself, so the
        search looks for what improves on it; use a smaller ``sigma0`` with it).
    """

    scenario: str
    seed: int = 0
    generations: int = 40
    episodes: int = 8
    popsize: Optional[int] = None
    sigma0: float = 1.0
    eval_every: int = 5
    eval_seeds: Sequence[int] = (100, 101, 102, 103, 104, 105, 106, 107, 108, 109)
    env_overrides: Dict[str, Any] = field(default_factory=dict)
    queries: int = 0
    start: Optional[str] = None

    def __post_init__(self) -> None:
        from fedsel_env.bench import curve_seeds, scenario

        if isinstance(self.scenario, os.PathLike):  # a YAML scenario file's path, kept as text in config.json
            self.scenario = str(self.scenario)
        sc = scenario(self.scenario)  # a name, an id or a YAML scenario file (issue #46); raises for anything else
        for name in ("generations", "episodes", "eval_every"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"set_es: {name} = {v!r} is invalid: expected an integer >= 1")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"set_es: seed = {self.seed!r} is invalid: expected an integer >= 0")
        if self.popsize is not None and (isinstance(self.popsize, bool) or not isinstance(self.popsize, int)
                                         or self.popsize < 2):
            raise ValueError(f"set_es: popsize = {self.popsize!r} is invalid: expected an integer >= 2 or None")
        if not (isinstance(self.sigma0, (int, float)) and math.isfinite(self.sigma0) and self.sigma0 > 0):
            raise ValueError(f"set_es: sigma0 = {self.sigma0!r} is invalid: expected a finite number > 0")
        if isinstance(self.queries, bool) or not isinstance(self.queries, int) or self.queries < 0:
            raise ValueError(f"set_es: queries = {self.queries!r} is invalid: expected 0 (no loss queries) or an "
                             f"integer d with K <= d <= N")
        if self.start not in (None, "kcenter_cover"):
            raise ValueError(f"set_es: start = {self.start!r} is invalid: expected None (the zero vector) or "
                             f"'kcenter_cover' (weight 1 on cover_pick)")
        if self.queries and hasattr(sc, "config_for"):
            raise ValueError(f"set_es: queries = {self.queries} on the scenario family {self.scenario!r}: K and N "
                             f"differ between its draws, so one d does not fit them; train set_es (queries 0) on a "
                             f"family")
        if self.generations * self.episodes > 10_000:
            raise ValueError(f"set_es: generations × episodes = {self.generations * self.episodes} exceeds 10,000, "
                             f"the training seed's range of federations: use fewer")
        self.eval_seeds = curve_seeds("set_es", self.eval_seeds, sc)  # never the scenario's reporting seeds

    def env_config(self) -> Dict[str, Any]:
        from fedsel_env.bench import training_env_config

        return training_env_config(self.scenario, self.env_overrides)

    def episode_env_config(self, seed: int) -> Dict[str, Any]:
        """The env config of the episode reset with ``seed``: the scenario's (:meth:`env_config`), or, on a scenario
        family (``family:<Name>``, issue #42), the federation the family draws from that seed."""
        from fedsel_env.bench import training_env_config

        return training_env_config(self.scenario, self.env_overrides, seed=seed)

    def episode_seed(self, generation: int, j: int) -> int:
        return ES_SEED_BASE + 10_000 * self.seed + self.episodes * generation + j


def check_training_seeds(cfg: ESConfig) -> None:
    """Refuse a run whose training federations would include a tuning or reporting federation of its scenario."""
    from fedsel_env.bench import check_fresh_federations, scenario
    from fedsel_env.families import check_family_seeds, is_family_key

    seeds = {f"training generation {g} episode {j}": cfg.episode_seed(g, j)
             for g in range(cfg.generations) for j in range(cfg.episodes)}
    if is_family_key(cfg.scenario):  # a family: none of its own held-out draws, none of the bench's federations
        check_family_seeds(scenario(cfg.scenario), seeds)
    else:
        check_fresh_federations(seeds, scenario(cfg.scenario))


def rank_fitness(values: np.ndarray, lower_is_better: bool) -> np.ndarray:
    """(P, E) objectives → (P,) mean rank over the E federations (0 = best; ties share their mean rank)."""
    from scipy.stats import rankdata

    v = np.asarray(values, dtype=np.float64)
    v = v if lower_is_better else -v
    return np.mean([rankdata(v[:, j]) - 1.0 for j in range(v.shape[1])], axis=0)


def candidate_values(played: Sequence[float], episodes: int, candidates: int) -> np.ndarray:
    """A generation's objectives, played federation by federation (E × P, the mappers' task order), as the (P, E)
    array of each candidate's row. The rows are contiguous: numpy sums a contiguous row pairwise and a strided one
    in order, so a candidate's logged mean (``values_mean``) is its own row's ``mean()`` to the last digit, as in the
    runs from before the tasks went federation by federation (bench_learned's record)."""
    return np.ascontiguousarray(np.asarray(played, dtype=np.float64).reshape(episodes, candidates).T)


class _IsolatedNumpyRandom:
    """numpy's global generator as CMA-ES's own: its state is swapped in around each use and out after."""

    def __init__(self, seed: int) -> None:
        outer = np.random.get_state()
        np.random.seed(seed)
        self.state = np.random.get_state()
        np.random.set_state(outer)

    @contextmanager
    def active(self) -> Iterator[None]:
        outer = np.random.get_state()
        np.random.set_state(self.state)
        try:
            yield
        finally:
            self.state = np.random.get_state()
            np.random.set_state(outer)


def make_search(cfg: ESConfig, names: Sequence[str]):
    """The CMA-ES search over the weights ``names`` from ``cfg.start``, and its isolated random generator."""
    import cma

    rng = _IsolatedNumpyRandom(10_007 + cfg.seed)
    opts = {"seed": 10_007 + cfg.seed, "verbose": -9, "verb_disp": 0, "verb_log": 0, "verb_filenameprefix": "",
            "tolfun": 0, "tolflatfitness": 10**9, "tolstagnation": 10**9}
    if cfg.popsize is not None:
        opts["popsize"] = cfg.popsize
    with rng.active():
        x0 = np.zeros(len(names))
        if cfg.start == "kcenter_cover":
            x0[list(names).index("cover_pick")] = 1.0
        es = cma.CMAEvolutionStrategy(x0, cfg.sigma0, opts)
    return es, rng


@dataclass(frozen=True)
class ESEpisode:
    """One episode of a generation, the unit of work a :data:`Mapper` runs (picklable: a Ray task's argument).

    :param env_config: the training env's config (``ESConfig.env_config()``).
    :param objective: the scenario's objective (``fedsel_env.bench.OBJECTIVES``).
    :param theta: the candidate's weights (θ, w), in ``agents.set_es.param_names`` order.
    :param queries: d, the clients asked for their loss each round (0: ``set_es``).
    :param seed: the episode's ``env.reset`` seed.
    """

    env_config: Dict[str, Any]
    objective: str
    theta: Tuple[float, ...]
    queries: int
    seed: int


def play_episode(task: ESEpisode) -> Tuple[float, int]:
    """Play ``task`` on this process's env of its config (``fedsel_env.rollout.env_for``): the weights deployed
    as ``set_es`` (bound to the env for its loss queries) → (the episode's objective, a missed Ω counted as the
    cap; the env rounds it took)."""
    from types import SimpleNamespace

    from agents.set_es import SetESAgent
    from fedsel_env.rollout import env_for, scenario_objectives

    theta = np.asarray(task.theta, dtype=np.float64)
    values, rounds = scenario_objectives(env_for(task.env_config), SimpleNamespace(objective=task.objective),
                                         lambda spec: SetESAgent(spec, model=theta, queries=task.queries),
                                         [task.seed])
    return values[0], rounds


class SerialMapper:
    """A :data:`Mapper` that plays the tasks one after another in this process, in order (one env per config,
    kept by ``fedsel_env.rollout.env_for``)."""

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> List[Any]:
        return [fn(item) for item in items]


class VectorMapper:
    """The default :data:`Mapper` (issue #43): a generation's episodes ``n_envs`` at a time in the sub-envs of one
    :class:`~fedsel_env.vector.FedSelectVectorEnv` (``fedsel_env.rollout.play_vector``: every sub-env's local training
    in one fused call), kept between generations. Each episode is still its own seed's, so the results are
    :class:`SerialMapper`'s bit for bit (a sub-env's trajectory is the single env's; ``tests/test_set_es.py``); only
    the time differs. Episodes whose config no other episode of the call shares (a scenario family's draws) and any
    ``fn`` other than :func:`play_episode` are played one after another, as :class:`SerialMapper` plays them.

    :param n_envs: the episodes played at once (1: one after another).
    """

    def __init__(self, n_envs: int = 16) -> None:
        if isinstance(n_envs, bool) or not isinstance(n_envs, int) or n_envs < 1:
            raise ValueError(f"n_envs = {n_envs!r} is invalid: expected an integer >= 1 (the episodes of a set_es "
                             f"generation played at once)")
        self.n_envs = n_envs
        self._venv: Optional[Tuple[str, Any]] = None

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> List[Any]:
        from fedsel_env.rollout import config_key

        groups: Dict[str, List[int]] = {}
        for i, item in enumerate(items):
            groups.setdefault(config_key(item.env_config) if fn is play_episode else "", []).append(i)
        out: List[Any] = [None] * len(items)
        for key, idx in groups.items():
            if fn is not play_episode or len(idx) == 1 or self.n_envs == 1:
                for i in idx:
                    out[i] = fn(items[i])
                continue
            for i, value in self._play(key, [items[i] for i in idx], idx):
                out[i] = value
        return out

    def _play(self, key: str, tasks: Sequence[ESEpisode],
              tags: Sequence[int]) -> Iterator[Tuple[int, Tuple[float, int]]]:
        from types import SimpleNamespace

        from agents.set_es import SetESAgent
        from fedsel_env.bench import episode_objective
        from fedsel_env.rollout import EpisodeJob, play_vector
        from fedsel_env.vector import FedSelectVectorEnv

        size = min(self.n_envs, len(tasks))
        if self._venv is None or self._venv[0] != key or self._venv[1].num_envs < size:
            self.close()
            self._venv = (key, FedSelectVectorEnv(size, config=dict(tasks[0].env_config), autoreset_mode="disabled"))

        def agent(task: ESEpisode) -> Callable[[Any], Any]:
            theta = np.asarray(task.theta, dtype=np.float64)
            return lambda spec: SetESAgent(spec, model=theta, queries=task.queries)

        jobs = [EpisodeJob(t.seed, agent(t), (tag, t.objective)) for t, tag in zip(tasks, tags)]
        for (tag, objective), rec in play_vector(None, jobs, self.n_envs, venv=self._venv[1]):
            yield tag, (float(episode_objective(SimpleNamespace(objective=objective), rec)[0]),
                        int(rec["metrics"]["rounds"]))

    def close(self) -> None:
        """Close the vector env kept between calls (the next call builds one again)."""
        if self._venv is not None:
            self._venv[1].close()
            self._venv = None


#: ``mapper.map(fn, items) -> [fn(item) for item in items]``, in order: how a generation's P × E episodes (and the
#: learning curve's) are played. :class:`VectorMapper` (the default) or :class:`SerialMapper` in this process;
#: ``agents/training/ray_map.py`` as Ray tasks
#: (``train_agent.py --ray``). ``fn`` is :func:`play_episode`, a module-level function of one :class:`ESEpisode`.
Mapper = Any


def train(cfg: ESConfig, folder: Path, log: Callable[[str], Any] = print,
          deadline: float = math.inf, stop_after: Optional[int] = None, mapper: Optional[Mapper] = None,
          on_generation: Optional[Callable[[Dict[str, Any]], Any]] = None) -> Dict[str, Any]:
    """Train (or resume) ``cfg``'s run in ``folder``; return its summary (also ``summary.json``).

    :param deadline: ``time.time()`` after which no new generation starts (the run resumes from there later).
    :param stop_after: play at most this many generations in this call.
    :param mapper: plays each generation's episodes (:data:`Mapper`; default :class:`VectorMapper`, 16 at once).
        The results are the same whichever plays them: each episode's randomness comes from its own seed.
    :param on_generation: called with each generation's ``progress.jsonl`` row once it is written (a progress bar,
        TensorBoard scalars).
    :raises ValueError: when ``folder`` holds a run of another config, or its log does not replay.
    """
    from agents.set_es import POLICY_FILE, check_queries, param_names
    from fedsel_env.bench import scenario
    from fedsel_env.env import FedSelectEnv

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    conf = asdict(cfg)
    for key, default in (("queries", 0), ("start", None)):
        if conf[key] == default:
            del conf[key]  # run folders from before these settings stay resumable
    sc = scenario(cfg.scenario)
    env_config = cfg.env_config()
    env = FedSelectEnv(config=env_config)
    try:
        check_queries(cfg.queries, env.selection_spec)
        pin_run_config(folder, conf, "set_es")
        check_training_seeds(cfg)
    except ValueError:
        env.close()
        raise
    names = param_names(env.selection_spec, cfg.queries)
    own_mapper = mapper is None
    if own_mapper:  # this process plays the episodes: E at a time (one at a time on the env just built, kept)
        keep_env(env_config, env)
        mapper = VectorMapper()

    def play(theta: np.ndarray, seeds: Sequence[int]) -> List[ESEpisode]:
        return [ESEpisode(cfg.episode_env_config(int(s)), sc.objective, tuple(float(v) for v in theta), cfg.queries,
                          int(s)) for s in seeds]

    es, rng = make_search(cfg, names)
    progress_path = folder / "progress.jsonl"
    done_rows = [json.loads(x) for x in progress_path.read_text().splitlines()] if progress_path.is_file() else []
    for row in done_rows:  # replay the recorded generations
        with rng.active():
            xs = es.ask()
        recorded = [np.asarray(x, dtype=np.float64) for x in row["candidates"]]
        # another CPU's floating point may move the proposals in their last digits: the check allows that, and the
        # search is told the recorded candidates, so its state follows the log rather than drifting from it
        if not np.allclose(np.asarray(xs), np.asarray(recorded), rtol=1e-6, atol=1e-9):
            raise ValueError(f"{progress_path}: generation {row['generation']} does not replay (the search proposed "
                             f"other candidates): the run was made by another version of cma or of this trainer; "
                             f"train into a new folder")
        with rng.active():
            es.tell(recorded, row["fitness"])
    if done_rows:
        log(f"{sc.name} seed {cfg.seed}: resumed after generation {len(done_rows)}")
    start = len(done_rows)
    meta = {"scenario": sc.name, "seed": cfg.seed, "design": "set_es_q" if cfg.queries else "set_es",
            "objective": sc.objective, **({"queries": cfg.queries} if cfg.queries else {})}
    for g in range(start, cfg.generations):
        if time.time() >= deadline or (stop_after is not None and g - start >= stop_after):
            break
        t0 = time.perf_counter()
        with rng.active():
            xs = es.ask()
        seeds = [cfg.episode_seed(g, j) for j in range(cfg.episodes)]
        # federation by federation (E × P): a serial mapper builds each federation's env once (a family's federations
        # differ in config); every episode's result depends on its seed and candidate alone, whatever the order
        per_x = [play(np.asarray(x), seeds) for x in xs]
        played = mapper.map(play_episode, [per_x[p][j] for j in range(cfg.episodes) for p in range(len(xs))])
        values = candidate_values([v for v, _ in played], cfg.episodes, len(xs))  # (P, E)
        env_rounds = sum(r for _, r in played)
        fitness = rank_fitness(values, sc.lower_is_better)
        with rng.active():
            es.tell(xs, fitness.tolist())
        mean = np.asarray(es.mean, dtype=np.float64)
        row = {"generation": g + 1, "candidates": [np.asarray(x).tolist() for x in xs], "fitness": fitness.tolist(),
               "values_mean": values.mean(axis=1).tolist(), "episodes": int(values.size),
               "sigma": float(es.sigma), "mean": mean.tolist()}
        if (g + 1) % cfg.eval_every == 0 or g + 1 == cfg.generations:
            curve = mapper.map(play_episode, play(mean, cfg.eval_seeds))
            vals = [float(v) for v, _ in curve]
            row["eval_mean"], row["eval_values"] = float(np.mean(vals)), vals
            env_rounds += sum(r for _, r in curve)
        row["env_rounds"] = int(env_rounds)
        row["wall_s"] = round(time.perf_counter() - t0, 3)
        atomic_write_text(folder / POLICY_FILE, json.dumps(
            {"params": dict(zip(names, mean.tolist())), **meta, "generations": g + 1}, indent=1) + "\n")
        append_line(progress_path, json.dumps(row))
        best = values.mean(axis=1)
        log(f"{sc.name} seed {cfg.seed} generation {g + 1}/{cfg.generations}: σ {es.sigma:.3f}, candidates' mean "
            f"{sc.objective} {best.min():.4g}–{best.max():.4g}"
            + (f", eval {row['eval_mean']:.4g}" if "eval_mean" in row else "") + f", {row['wall_s']:.1f} s")
        if on_generation is not None:
            on_generation(row)
    forget_env(env)  # kept for the episodes played one at a time: dropped from the cache, closed here
    env.close()
    if own_mapper:
        mapper.close()
    rows = [json.loads(x) for x in progress_path.read_text().splitlines()] if progress_path.is_file() else []
    summary = {"scenario": sc.name, "seed": cfg.seed, "generations_done": len(rows),
               "complete": len(rows) >= cfg.generations, "train_seconds": round(sum(r["wall_s"] for r in rows), 2),
               "training_episodes": int(sum(r["episodes"] for r in rows)),
               "env_rounds": int(sum(r["env_rounds"] for r in rows)), "oracle_rounds": 0,
               "eval_episodes": int(sum(len(r.get("eval_values", ())) for r in rows))}
    atomic_write_text(folder / "summary.json", json.dumps(summary, indent=1) + "\n")
    return summary


__all__ = ["ESConfig", "ESEpisode", "ES_SEED_BASE", "Mapper", "SerialMapper", "VectorMapper", "play_episode",
           "candidate_values", "check_training_seeds", "make_search", "rank_fitness", "train"]
