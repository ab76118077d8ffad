"""The trainer registry (issue #46): every learned design by name, each trained by one function of one signature.

    train(scenario_or_env, seed, folder, hyperparams, *, resume=False, progress=False, deadline=math.inf,
          log=print, mapper=None, stop_after=None) -> summary

- ``scenario_or_env``: a registered scenario's name (``Churn``), its id (``fedsel/Bench-Churn-v0``) or the path of a
  YAML scenario file (``fedsel_env.scenarios``); an SB3 trainer also takes any ``--env`` of ``train_agent.py``;
- ``seed``: the training seed; ``folder``: the run folder (``runs/train/<name>/`` from ``train_agent.py``);
- ``hyperparams``: the complete settings, :func:`load_settings` of ``configs/<name>.yml`` (its entry for the
  scenario's id or name, else its ``default`` entry, as rl-zoo3 keys them) with the caller's overrides over it;
  ``env_overrides`` holds env-config fields over the scenario's (``train_agent.py --env-kwargs``);
- ``resume``: continue the run in ``folder`` (without it a folder holding a run is refused);
- ``progress``: a progress bar; ``deadline``: ``time.time()`` after which no new generation / episode starts;
  ``log``: where the per-generation lines go; ``mapper``: who plays ``set_es``'s episodes (``agents/training/
  set_es.py``'s :data:`~agents.training.set_es.Mapper`; ``None``: this process); ``stop_after``: at most this many
  generations / episodes in this call (a chunk; the run resumes from there).

The designs registered here (docs/SPEC.md §4, the selection agents): ``set_es`` and ``set_es_q`` (CMA-ES over a
linear set value — N. Hansen & A. Ostermeier, "Completely Derandomized Self-Adaptation in Evolution Strategies",
Evolutionary Computation 9(2), 2001; ``agents/training/set_es.py``), ``set_distill`` and ``set_distill_cover`` (DAgger
from the lookahead oracle — S. Ross, G. Gordon & J. A. Bagnell, "A Reduction of Imitation Learning and Structured
Prediction to No-Regret Online Learning", AISTATS 2011; ``agents/training/set_distill.py``). Every Stable-Baselines3 algorithm of ``agents.deploy.ALGORITHMS``
(``pc_dqn``, ``pc_ppo``, ``favor``, ``favor+``, ``pl_ppo``, ``pl_a2c``, ``ppo``, ``dqn``, …) is a trainer too
(:func:`train_sb3`, the path ``train_agent.py`` has always taken). A new design is one :func:`register_trainer`
call and a ``configs/<name>.yml``; the env is not touched (docs/TRAINING.md, "Adding a trainer").

Every design trainer writes TensorBoard scalars (``<folder>/tb/<NAME>``: the per-generation fitness or the
per-episode loss and regret, and the learning curve on the tuning seeds) and shows a progress bar as SB3 does.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from fedsel_env.config import read_yaml

#: ``train(scenario_or_env, seed, folder, hyperparams, *, resume, progress, deadline, log, mapper) -> summary``
TrainFn = Callable[..., Dict[str, Any]]
#: the hyper-parameter files (``configs/<name>.yml`` at the repository root)
CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"


@dataclass(frozen=True)
class Trainer:
    """One registered trainer.

    :param name: ``train_agent.py --algo NAME``; its settings are ``configs/<name>.yml``.
    :param train: the :data:`TrainFn`.
    :param fields: the hyper-parameters it takes (a typo is refused, naming the field and these).
    :param check: ``(scenario_or_env, seed, hyperparams)``, raising ``ValueError`` before anything is built.
    :param sb3: a Stable-Baselines3 algorithm (its settings read by ``agents.training.hyperparams``).
    :param about: one line for ``--help`` and error messages.
    :param mapped: its episodes are independent tasks a ``mapper`` plays (``train_agent.py --ray`` / ``--n-envs``);
        without it a mapper is refused before anything is written.
    """

    name: str
    train: TrainFn
    fields: Sequence[str] = ()
    check: Optional[Callable[[str, int, Mapping[str, Any]], Any]] = None
    sb3: bool = False
    about: str = ""
    mapped: bool = False


#: the design trainers by name (the SB3 algorithms come from ``agents.deploy.ALGORITHMS``: :func:`trainer`)
TRAINERS: Dict[str, Trainer] = {}


def register_trainer(entry: Trainer, replace: bool = False) -> Trainer:
    """Add ``entry`` to :data:`TRAINERS`. :raises ValueError: for a name already taken (``replace=True`` replaces)."""
    from agents.deploy import ALGORITHMS

    if (entry.name in TRAINERS or entry.name in ALGORITHMS) and not replace:
        raise ValueError(f"trainer {entry.name!r} is registered already (replace=True to replace it)")
    TRAINERS[entry.name] = entry
    return entry


def registered() -> List[str]:
    """Every name ``train_agent.py --algo`` trains: the design trainers and the SB3 algorithms, sorted."""
    import agents  # noqa: F401 — the agent modules register their algorithms (favor, pc_dqn, …) on import
    from agents.deploy import trainable_algorithms

    return sorted({*TRAINERS, *trainable_algorithms()})


def trainer(name: str) -> Trainer:
    """The trainer of ``name``: a design of :data:`TRAINERS`, or an SB3 algorithm (a trainable name of
    ``agents.deploy.ALGORITHMS`` or an SB3 class's import path ``package.module:Class``).

    :raises ValueError: for an unknown name, listing the registered ones.
    """
    import agents  # noqa: F401 — the agent modules register their algorithms (favor, pc_dqn, …) on import
    from agents.deploy import ALGORITHMS
    from fedsel_env.registry import is_import_path

    if name in TRAINERS:
        return TRAINERS[name]
    if (name in ALGORITHMS and ALGORITHMS[name].trainable) or is_import_path(name):
        return Trainer(name, functools.partial(train_sb3, algo=name), sb3=True,
                       about=ALGORITHMS[name].about if name in ALGORITHMS else name)
    if name in ALGORITHMS:  # a name whose saved models load but that nothing here trains
        raise ValueError(f"--algo {name}: its saved models load (evaluate.py --policy {name}:MODEL.zip), but "
                         f"train_agent.py does not train it; trainers: {registered()}")
    close = difflib.get_close_matches(name, registered(), n=1)
    raise ValueError(f"unknown --algo {name!r}{f' (did you mean {close[0]!r}?)' if close else ''}; registered "
                     f"trainers: {registered()}, or an SB3 algorithm class's import path 'package.module:Class'")


def train(name: str, scenario_or_env: str, seed: int, folder: Path, hyperparams: Optional[Mapping[str, Any]] = None,
          **kwargs: Any) -> Dict[str, Any]:
    """Train the design ``name`` (:func:`trainer`) with :func:`load_settings` (``hyperparams`` as overrides); the
    keyword arguments are the :data:`TrainFn`'s."""
    entry = trainer(name)
    hp = dict(hyperparams or {}) if entry.sb3 else load_settings(name, scenario_or_env, hyperparams)
    return entry.train(scenario_or_env, seed, Path(folder), hp, **kwargs)


# ----------------------------------------------------------------------------------- the settings files
def prepare_design(args: Any) -> Dict[str, Any]:
    """The settings of a registered design's run (``train_agent.py --algo set_es|set_es_q|set_distill|…``), checked
    before anything is built: the run folder, the design's settings (``configs/<algo>.yml``'s entry for the scenario,
    ``--hyperparams`` over it, ``--env-kwargs`` as its ``env_overrides``; on ``--resume`` the run's own, as saved),
    and the training env config (saved as ``env_config.yaml`` beside the model).

    :raises ValueError: for an unknown scenario, a setting the design does not take (naming it), a run folder that
        holds a run already (without ``--resume``) or none to resume.
    """
    from .cli import parse_key_values
    from .runs import check_new_run, default_run_name, resumed_settings

    entry = trainer(args.algo)
    if args.resume:  # the run's own settings, as saved when it started
        args, _env_config, hp = resumed_settings(args)
    else:
        overrides = parse_key_values(args.hyperparams, "hyperparams")
        env_kwargs = parse_key_values(args.env_kwargs, "env-kwargs")
        if env_kwargs:
            overrides["env_overrides"] = {**(overrides.get("env_overrides") or {}), **env_kwargs}
        hp = load_settings(args.algo, args.env, overrides, args.conf_file)
        args.name = args.name or default_run_name(args.algo, args.env, args.seed)
        check_new_run(Path(args.runs_dir) / args.name)
    cfg = entry.check(args.env, args.seed, hp) if entry.check is not None else None  # ValueError: a bad setting
    env_config = cfg.env_config() if hasattr(cfg, "env_config") else {}
    return {"args": args, "run_dir": Path(args.runs_dir) / args.name, "env_config": env_config, "hp": hp,
            "trainer": entry}



def _entry_keys(scenario_or_env: str) -> List[str]:
    """The keys a scenario's entry may have in ``configs/<name>.yml``: its id, its name, the text as given."""
    from fedsel_env.bench import scenario

    sc = scenario(scenario_or_env)  # ValueError for something that is no scenario (naming the registered ones)
    return list(dict.fromkeys([sc.env_id, sc.name, str(scenario_or_env)]))


def load_settings(name: str, scenario_or_env: str, overrides: Optional[Mapping[str, Any]] = None,
                conf_file: Optional[str] = None) -> Dict[str, Any]:
    """A design's settings for a scenario: the entry of ``configs/<name>.yml`` (or ``conf_file``) keyed by the
    scenario's id or name, else its ``default`` entry (rl-zoo3's rule: an entry replaces the default, it is not
    merged), then ``overrides``. A trainer without a file takes its own defaults and the overrides.

    :raises ValueError: for a malformed file, or a key the trainer does not take (naming it and the allowed ones).
    """
    entry_ = trainer(name)
    path = Path(conf_file) if conf_file else CONFIG_DIR / f"{name}.yml"
    table = read_yaml(path, "hyper-parameter file") if (conf_file or path.is_file()) else {"default": {}}
    table = table or {}
    if not isinstance(table, dict) or not all(isinstance(v, dict) or v is None for v in table.values()):
        raise ValueError(f"hyper-parameter file {str(path)!r} must map scenario ids (or 'default') to entries of "
                         f"settings, as configs/set_es.yml does; correct it there")
    key = next((k for k in _entry_keys(scenario_or_env) if k in table), "default")
    hp = dict(table.get(key) or {})
    env_over = dict(hp.get("env_overrides") or {})
    for k, v in (overrides or {}).items():
        if k == "env_overrides":  # the caller's env fields go over the file's, field by field
            env_over.update(v or {})
        else:
            hp[k] = v
    if env_over:
        hp["env_overrides"] = env_over
    check_fields(entry_, hp, f"{path.name} entry {key!r} with the overrides")
    return hp


def check_fields(entry: Trainer, hp: Mapping[str, Any], where: str) -> None:
    """:raises ValueError: for a key ``entry`` does not take, naming it, the closest field and the allowed ones."""
    if not entry.fields:
        return
    for k in hp:
        if k not in entry.fields:
            close = difflib.get_close_matches(k, entry.fields, n=1)
            raise ValueError(f"unknown {entry.name} hyper-parameter {k!r} ({where})"
                             + (f": did you mean {close[0]!r}?" if close else "")
                             + f" {entry.name} takes: {sorted(entry.fields)}")


# ----------------------------------------------------------------------------------- progress and TensorBoard
class _Monitor:
    """A progress bar over the run's generations / episodes and its TensorBoard scalars (``<folder>/tb/<NAME>``)."""

    def __init__(self, folder: Path, name: str, total: int, progress: bool) -> None:
        from torch.utils.tensorboard import SummaryWriter
        from tqdm import tqdm

        prog = folder / "progress.jsonl"
        done = len(prog.read_text().splitlines()) if prog.is_file() else 0
        self.bar = tqdm(total=total, initial=min(done, total), unit="gen" if name.startswith("set_es") else "ep",
                        desc=name, disable=not progress, dynamic_ncols=True)
        self.writer = SummaryWriter(str(folder / "tb" / name.upper()))

    def log(self, log: Callable[[str], Any]) -> Callable[[str], Any]:
        """``log``, its lines written above the bar while the bar shows (tqdm.write)."""
        return log if self.bar.disable else (lambda line: self.bar.write(str(line)))

    def scalars(self, step: int, values: Mapping[str, Any]) -> None:
        for tag, v in values.items():
            if v is not None and math.isfinite(float(v)):
                self.writer.add_scalar(tag, float(v), step)
        self.writer.flush()
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()
        self.writer.close()


def _refuse_a_started_run(folder: Path, resume: bool) -> None:
    if not resume and (folder / "progress.jsonl").is_file():
        raise ValueError(f"{str(folder)!r} holds a run already: pass resume=True (train_agent.py --resume) to "
                         f"continue it, or train into another folder")


# ----------------------------------------------------------------------------------- set_es, set_es_q
def _es_fields() -> List[str]:
    from .set_es import ESConfig

    return [f.name for f in dataclasses.fields(ESConfig) if f.name not in ("scenario", "seed")]


def es_config(design: str, scenario_or_env: str, seed: int, hp: Mapping[str, Any]) -> Any:
    """The :class:`~agents.training.set_es.ESConfig` of a run. ``set_es_q`` asks d = min(2K, N) clients their loss
    each round unless ``queries`` says otherwise (``pow_d``'s d = 2K, Cho et al. 2022); ``eval_seeds`` default to
    the scenario's tuning seeds."""
    from fedsel_env.bench import scenario
    from fedsel_env.config import DEFAULT_CONFIG

    from .set_es import ESConfig

    check_fields(TRAINERS[design], hp, "its hyper-parameters")
    kw = dict(hp)
    sc = scenario(scenario_or_env)
    kw.setdefault("eval_seeds", list(getattr(sc, "tuning_seeds", ESConfig.eval_seeds)))
    cfg = ESConfig(scenario=str(scenario_or_env), seed=seed, **kw)
    if design == "set_es_q" and "queries" not in hp:
        env = {**DEFAULT_CONFIG, **cfg.env_config()}
        cfg = dataclasses.replace(cfg, queries=min(2 * int(env["clients_per_round"]), int(env["num_clients"])))
    return cfg


def _train_es(design: str) -> TrainFn:
    def train_es(scenario_or_env: str, seed: int, folder: Path, hyperparams: Mapping[str, Any], *,
                 resume: bool = False, progress: bool = False, deadline: float = math.inf,
                 log: Callable[[str], Any] = print, mapper: Any = None,
                 stop_after: Optional[int] = None) -> Dict[str, Any]:
        from fedsel_env.bench import scenario

        from .set_es import train as es_train

        cfg = es_config(design, scenario_or_env, seed, hyperparams)
        folder = Path(folder)
        _refuse_a_started_run(folder, resume)
        lower = scenario(scenario_or_env).lower_is_better
        mon = _Monitor(folder, design, cfg.generations, progress)

        def on_generation(row: Dict[str, Any]) -> None:
            vals = row["values_mean"]
            mon.scalars(row["generation"], {
                "fitness/best_rank": min(row["fitness"]), "train/sigma": row["sigma"],
                "rollout/candidates_objective_best": min(vals) if lower else max(vals),
                "rollout/candidates_objective_mean": sum(vals) / len(vals),
                "rollout/candidates_objective_worst": max(vals) if lower else min(vals),
                "eval/tuning_objective": row.get("eval_mean"), "time/env_rounds": row["env_rounds"]})

        try:
            return es_train(cfg, folder, log=mon.log(log), deadline=deadline, stop_after=stop_after, mapper=mapper,
                            on_generation=on_generation)
        finally:
            mon.close()

    return train_es


# ----------------------------------------------------------------------------------- set_distill, set_distill_cover
def _distill_fields() -> List[str]:
    from .set_distill import DistillConfig

    return [f.name for f in dataclasses.fields(DistillConfig) if f.name not in ("scenario", "seed", "cover_features")]


def distill_config(design: str, scenario_or_env: str, seed: int, hp: Mapping[str, Any]) -> Any:
    """The :class:`~agents.training.set_distill.DistillConfig` of a run (``set_distill_cover``: the cover-aware
    tokens); ``eval_seeds`` default to the scenario's first 5 tuning seeds."""
    from fedsel_env.bench import scenario

    from .set_distill import DistillConfig

    check_fields(TRAINERS[design], hp, "its hyper-parameters")
    kw = dict(hp)
    sc = scenario(scenario_or_env)
    kw.setdefault("eval_seeds", list(getattr(sc, "tuning_seeds", DistillConfig.eval_seeds))[:5])
    return DistillConfig(scenario=str(scenario_or_env), seed=seed, cover_features=design == "set_distill_cover", **kw)


def _train_distill(design: str) -> TrainFn:
    def train_distill(scenario_or_env: str, seed: int, folder: Path, hyperparams: Mapping[str, Any], *,
                      resume: bool = False, progress: bool = False, deadline: float = math.inf,
                      log: Callable[[str], Any] = print, mapper: Any = None,
                      stop_after: Optional[int] = None) -> Dict[str, Any]:
        from .set_distill import greedy_curve
        from .set_distill import train as distill_train

        if mapper is not None:
            raise ValueError(f"{design} trains in one process (each DAgger episode learns from the ones before): "
                             f"no mapper, --ray nor --n-envs for it")
        cfg = distill_config(design, scenario_or_env, seed, hyperparams)
        folder = Path(folder)
        _refuse_a_started_run(folder, resume)
        mon = _Monitor(folder, design, cfg.episodes, progress)

        def on_episode(row: Dict[str, Any]) -> None:
            mon.scalars(row["episode"], {
                "train/loss": row["loss"], "train/regret": row["regret"], "train/learner_best": row["learner_best"],
                "train/beta": row["beta"], "train/div_weight": row["div_weight"],
                "eval/tuning_objective": row.get("eval_mean"), "time/oracle_rounds": row["oracle_rounds"]})

        try:
            return distill_train(cfg, folder, log=mon.log(log), deadline=deadline, stop_after=stop_after,
                                 evaluate=greedy_curve, on_episode=on_episode)
        finally:
            mon.close()

    return train_distill


# ----------------------------------------------------------------------------------- the SB3 algorithms
#: ``train_agent.py`` flags an SB3 trainer also takes in ``hyperparams`` (they change how it runs, not the model)
SB3_RUN_KEYS = ("eval_freq", "eval_episodes", "save_freq", "keep_checkpoints", "vec_env", "torch_threads", "device",
                "verbose")


def train_sb3(scenario_or_env: str, seed: int, folder: Path, hyperparams: Mapping[str, Any], *, algo: str = "",
              resume: bool = False, progress: bool = False, deadline: float = math.inf,
              log: Callable[[str], Any] = print, mapper: Any = None,
              stop_after: Optional[int] = None) -> Dict[str, Any]:
    """An SB3 algorithm as ``train_agent.py`` trains it (``agents.training.settings.prepare`` then
    ``agents.training.sb3.learn``): ``hyperparams`` over ``configs/<algo>.yml``'s entry, ``env_overrides`` as
    ``--env-kwargs``, :data:`SB3_RUN_KEYS` as the flags of the same name. It runs to ``n_timesteps``."""
    from .atomic import lock_run_folder
    from .cli import Args
    from .sb3 import learn
    from .settings import prepare

    if mapper is not None:
        raise ValueError(f"{algo}: Stable-Baselines3 trains in one process: no mapper / --ray for it")
    if math.isfinite(deadline) or stop_after is not None:
        raise ValueError(f"{algo}: Stable-Baselines3 trains to n_timesteps: no deadline / stop_after (give a smaller "
                         f"n_timesteps)")
    hp = dict(hyperparams)
    run = {k: hp.pop(k) for k in SB3_RUN_KEYS if k in hp}
    env_kwargs = [f"{k}={json.dumps(v)}" for k, v in (hp.pop("env_overrides", None) or {}).items()]
    steps = hp.pop("n_timesteps", None)
    n_envs = hp.pop("n_envs", None)
    args = Args(algo=algo, env=str(scenario_or_env), seed=seed, runs_dir=str(Path(folder).parent),
                name=Path(folder).name, resume=resume, progress_bar=progress, env_kwargs=env_kwargs,
                hyperparams=[f"{k}={json.dumps(v)}" for k, v in hp.items()],
                n_timesteps=None if steps is None else int(steps), n_envs=None if n_envs is None else int(n_envs),
                **run)
    setup = prepare(args)
    with lock_run_folder(setup["run_dir"], "agents.training.trainers"):
        run_dir = learn(setup)
    import yaml

    return yaml.safe_load((run_dir / "summary.yaml").read_text())


for _name, _about in (("set_es", "CMA-ES over a linear set value on the scenario's objective"),
                      ("set_es_q", "set_es asking d = 2K clients their current loss each round")):
    register_trainer(Trainer(_name, _train_es(_name), fields=tuple(_es_fields()),
                             check=lambda env, seed, hp, _n=_name: es_config(_n, env, seed, hp), about=_about,
                             mapped=True))
for _name, _about in (("set_distill", "DAgger from the lookahead oracle, a set-level value"),
                      ("set_distill_cover", "set_distill with kcenter_cover's state in the token")):
    register_trainer(Trainer(_name, _train_distill(_name), fields=tuple(_distill_fields()),
                             check=lambda env, seed, hp, _n=_name: distill_config(_n, env, seed, hp), about=_about))

__all__ = ["SB3_RUN_KEYS", "TRAINERS", "Trainer", "TrainFn", "check_fields", "distill_config", "es_config",
           "load_settings", "prepare_design", "register_trainer", "registered", "train", "train_sb3", "trainer"]
