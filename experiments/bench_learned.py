"""Learned selectors on FedSelect-Bench (issue #29): train on fresh federations, report on the reporting seeds.

Design ``set_distill`` (``agents/set_distill.py``, trained by ``agents/training/set_distill.py``): a per-client
scorer with a set-level value, distilled by DAgger from the bench's lookahead oracle. For each scenario and
training seed (0, 1, 2 by default) a run trains on episodes of new federations (seeds from 1,000,000 up,
checked to be none of the bench's tuning or reporting federations); its learning curve is played on the
tuning seeds 100–104. The report plays every trained model on the 30 reporting seeds 9000–9029 (never used
for anything else) and pairs it, seed by seed, with random, the scenario's best heuristic (the hand-written
agent with the best mean objective in the committed reference) and the oracle, whose episodes come from
``experiments/results/bench_reference.json`` (same config, same seeds: common random numbers).

The other designs (``--design``): ``set_distill_cover`` (``set_distill`` with ``kcenter_cover``'s state in the token);
``set_es`` and ``set_es_q`` (a linear set value searched by CMA-ES on the scenario's own episode objective,
``agents/training/set_es.py``; ``set_es_q`` asks 2K clients their current loss each round, as ``pow_d`` does);
``pc_dqn``, ``pc_ppo`` and ``favor_plus`` (``train_agent.py`` on the batched vector env: the per-client selector by
Double DQN and by PPO, and FAVOR+). ``--part larger_n`` plays the per-client models at 2 × N, ``--part confirm`` the
ES models on 30 further seeds (20000–20029), ``--part picks`` the ES models beside the oracle round by round.

    .venv/bin/python experiments/bench_learned.py --part train --scenarios Churn --max-minutes 30
    .venv/bin/python experiments/bench_learned.py --part eval      # the reporting episodes (resumable)
    .venv/bin/python experiments/bench_learned.py --part report    # experiments/results/bench_learned.json
    .venv/bin/python experiments/bench_learned.py --smoke          # every part, tiny, in seconds; publishes nothing

Every part resumes: training from each run's last finished episode, evaluation from the episodes already in
``runs/bench_learned/eval/<scenario>/episodes.jsonl``. The record's summaries are recomputable from its rows
(``python -m fedsel_eval.recompute experiments/results/bench_learned.json``).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from agents.training.set_distill import DistillConfig, train
from fedsel_env.bench import REPORTING_SEEDS, SCENARIOS, TUNING_SEEDS, normalised_score, scenario
from fedsel_eval import records
from fedsel_eval.bench import reference_policies, reference_rows, run_scenario, splice_doc

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "experiments" / "results" / "bench_learned.json"
#: the learned designs: ``set_distill`` (DAgger from the oracle) and ``pc_dqn`` (the per-client Double DQN of
#: issue #19, FAVOR+'s one-client 1/K step, the env's FAVOR reward, trained on the batched vector env)
DESIGNS = ("set_distill", "pc_dqn", "set_distill_cover", "set_es", "set_es_q", "pc_ppo", "favor_plus")
#: the CMA-ES-searched designs (``agents/training/set_es.py``); ``set_es_q`` asks 2K clients their loss each round
ES_DESIGNS = ("set_es", "set_es_q")
#: the DAgger-trained designs (``agents/training/set_distill.py``); ``set_distill_cover`` is its cover-aware variant
DISTILLED = ("set_distill", "set_distill_cover")
#: pc_dqn's training steps per scenario (one client a step: K steps a round) and its vector env's size
PC_DQN_STEPS: Dict[str, int] = {"QuantitySkew": 50_000, "Stragglers": 50_000, "Churn": 50_000}
PC_DQN_ENVS = 16
#: the designs ``train_agent.py`` trains (SB3 on the batched vector env, ``PC_DQN_ENVS`` sub-envs, a new federation
#: every episode): design → (its ``--algo``, its steps per scenario, whether a step is one client (K a round) or a
#: whole round). ``pc_ppo``: the per-client scorer by PPO on the ``topk`` scores; ``favor_plus``: FAVOR+ (FAVOR's
#: Double DQN with this suite's departures, configs/favor+.yml). The same 10,000 rounds as ``pc_dqn``.
SB3_DESIGNS: Dict[str, tuple] = {"pc_dqn": ("pc_dqn", PC_DQN_STEPS, True),
                                 "pc_ppo": ("pc_ppo", {"QuantitySkew": 10_000}, False),
                                 "favor_plus": ("favor+", {"QuantitySkew": 50_000}, True)}
TRAIN_SEEDS = (0, 1, 2)
#: set_es's budget per scenario: (CMA-ES generations, federations per generation), fixed from the cost of a
#: scenario's first generations (each seed ~13-20 min here with two runs at once; docs/TRAINING.md)
ES_BUDGET: Dict[str, tuple] = {"Churn": (50, 16), "QuantitySkew": (40, 8), "Stragglers": (60, 24),
                               "FreeRiders": (60, 16), "NoisyLabels": (60, 16), "PowerOfChoice": (45, 4)}
#: set_es's other settings where they are not the trainer's defaults: PowerOfChoice's generations cost ~31 s here,
#: so its search starts at ``kcenter_cover`` (weight 1 on ``cover_pick``, the scenario's best heuristic) with a
#: small step and 8 candidates a generation, to look for what improves on the heuristic within 30 minutes
ES_SETTINGS: Dict[str, Dict[str, Any]] = {"PowerOfChoice": {"start": "kcenter_cover", "sigma0": 0.3, "popsize": 8}}
#: training episodes per scenario, fixed before any reporting episode was played (a scenario's episode costs
#: differ: chosen so that one training seed takes at most ~30 min on this machine; docs/TRAINING.md)
EPISODES: Dict[str, int] = {"QuantitySkew": 300, "PowerOfChoice": 150, "NoisyLabels": 300, "FreeRiders": 200,
                            "Stragglers": 300, "Churn": 300, "Large": 150, "FMNISTControl": 40}
SMOKE = {"scenario": "Churn", "overrides": {"max_rounds": 3}, "episodes": 2, "candidates": 3,
         "train_seeds": (0,), "seeds": [9000, 9001]}


def best_heuristic(sc_name: str, rows: Sequence[Mapping[str, Any]]) -> str:
    """The hand-written agent with the best mean objective on the scenario in the committed reference."""
    sc = scenario(sc_name)
    means: Dict[str, List[float]] = {}
    for r in rows:
        if r["scenario"] == sc_name and r["policy"] not in ("random", "lookahead"):
            means.setdefault(r["policy"], []).append(float(r["value"]))
    if not means:
        raise ValueError(f"no reference rows for {sc_name}: run experiments/bench_reference.py first")
    pick = min if sc.lower_is_better else max
    return pick(sorted(means), key=lambda p: float(np.mean(means[p])))


def run_folder(out: Path, sc_name: str, seed: int, design: str = "set_distill") -> Path:
    return out / design / sc_name / f"seed{seed}"


def training_summary(out: Path, sc_name: str, seed: int, design: str) -> Optional[Dict[str, Any]]:
    """A finished training run's cost (None while it is not finished): wall seconds, env rounds, oracle rounds."""
    folder = run_folder(out, sc_name, seed, design)
    if design in DISTILLED or design in ES_DESIGNS:
        path = folder / "summary.json"
        summ = json.loads(path.read_text()) if path.is_file() else None
        return summ if summ and summ["complete"] else None
    import yaml

    path = folder / "summary.yaml"
    if not path.is_file():
        return None
    summ = yaml.safe_load(path.read_text())
    args = yaml.safe_load((folder / "args.yaml").read_text())
    if summ["num_timesteps"] < int(args["n_timesteps"]):
        return None
    k = scenario(sc_name).config["clients_per_round"] if SB3_DESIGNS[design][2] else 1
    return {"train_seconds": float(summ["train_seconds_this_call"]), "env_rounds": int(summ["num_timesteps"]) // k,
            "oracle_rounds": 0, "episodes_done": None, "env_steps": int(summ["num_timesteps"])}


def greedy_eval(model: Any, cfg: DistillConfig) -> List[float]:
    """The learner's objective on ``cfg.eval_seeds`` (tuning seeds), played through ``fedsel_eval`` (a missed Ω
    counts as the cap): the learning curve of a training run."""
    from agents.set_distill import SetDistillAgent
    from fedsel_env.env import FedSelectEnv
    from fedsel_eval.bench import objectives

    env = FedSelectEnv(config=cfg.env_config())
    try:
        return objectives(env, scenario(cfg.scenario), lambda spec: SetDistillAgent(spec, model=model),
                          cfg.eval_seeds)[0]
    finally:
        env.close()


def train_sb3(args: argparse.Namespace, name: str, seed: int, design: str = "pc_dqn") -> None:
    """``train_agent.py --algo <design's>`` on the scenario (its own PCA width, so the model deploys on it unchanged),
    a new federation every episode, ``PC_DQN_ENVS`` sub-envs of the batched vector env; resumes a cut run."""
    import subprocess

    from fedsel_env.config import DEFAULT_CONFIG
    from fedsel_env.spec import SelectionSpec

    cfg = {**DEFAULT_CONFIG, **scenario(name).env_config()}
    cfg.update(args.overrides)
    folder = run_folder(args.out, name, seed, design)
    algo, budget, _one = SB3_DESIGNS[design]
    steps = args.steps or budget[name]
    cmd = [sys.executable, str(ROOT / "train_agent.py"), "--algo", algo, "--env", scenario(name).env_id,
           "--n-envs", str(PC_DQN_ENVS), "--vec-env", "batched", "-n", str(steps), "--seed", str(seed),
           "--runs-dir", str(folder.parent), "--name", folder.name, "--no-progress-bar", "--eval-freq", "0",
           "--env-kwargs", f"pca_components={SelectionSpec.pca_width(cfg)}", "federation_seed=null",
           *[f"{k}={json.dumps(v)}" for k, v in args.overrides.items()]]
    if (folder / "checkpoints").is_dir() and any((folder / "checkpoints").iterdir()):
        cmd.append("--resume")
    subprocess.run(cmd, check=True, cwd=ROOT)


def part_train(args: argparse.Namespace, deadline: float) -> None:
    for name in args.scenarios:
        for seed in args.train_seeds:
            if time.time() >= deadline:
                return
            if args.design in ES_DESIGNS:
                from agents.training.set_es import ESConfig, train as train_es

                gens, eps = ES_BUDGET[name] if not args.smoke else (2, 2)
                k, n = scenario(name).config["clients_per_round"], scenario(name).config["num_clients"]
                extra = dict(ES_SETTINGS.get(name, {})) if not args.smoke else {"popsize": 3}
                es_cfg = ESConfig(scenario=name, seed=seed, generations=args.generations or gens, episodes=eps,
                                  env_overrides=dict(args.overrides), eval_seeds=list(TUNING_SEEDS),
                                  eval_every=1 if args.smoke else 5,
                                  queries=min(2 * k, n) if args.design == "set_es_q" else 0, **extra)
                summary = train_es(es_cfg, run_folder(args.out, name, seed, args.design), deadline=deadline)
                print(f"{name} seed {seed}: {summary}", flush=True)
                continue
            if args.design in SB3_DESIGNS:
                if training_summary(args.out, name, seed, args.design) is None:
                    train_sb3(args, name, seed, args.design)
                print(f"{name} seed {seed}: {training_summary(args.out, name, seed, args.design)}", flush=True)
                continue
            cfg = DistillConfig(scenario=name, seed=seed, episodes=args.episodes or EPISODES[name],
                                candidates=args.candidates, env_overrides=dict(args.overrides),
                                eval_seeds=list(TUNING_SEEDS[:5]), eval_every=args.eval_every,
                                beta_episodes=max(1, (args.episodes or EPISODES[name]) // 6),
                                cover_features=args.design == "set_distill_cover")
            summary = train(cfg, run_folder(args.out, name, seed, args.design), deadline=deadline,
                            evaluate=greedy_eval)
            print(f"{name} seed {seed}: {summary}", flush=True)
            if time.time() >= deadline:
                return


def _policy_text(args: argparse.Namespace, name: str, seed: int, design: str) -> str:
    folder = run_folder(args.out, name, seed, design)
    if design in ES_DESIGNS:
        return f"{design}_s{seed}=set_es:model={folder}"
    return f"{design}_s{seed}=" + (f"set_distill:model={folder}" if design in DISTILLED else str(folder))


def trained_designs(args: argparse.Namespace, name: str) -> List[str]:
    """The designs whose every training seed has finished on ``name``."""
    return [d for d in DESIGNS if all(training_summary(args.out, name, s, d) for s in args.train_seeds)]


def part_eval(args: argparse.Namespace, deadline: float) -> None:
    ref = reference_rows()
    for name in args.scenarios:
        sc = scenario(name)
        designs = trained_designs(args, name)
        if not designs:
            print(f"{name}: no design has all its training seeds trained to the end yet: nothing to evaluate")
            continue
        cfg = sc.env_config()
        cfg.update(args.overrides)
        best = best_heuristic(name, ref) if not args.smoke else "pow_d"
        policies = [*reference_policies(sc), best,
                    *[_policy_text(args, name, s, d) for d in designs for s in args.train_seeds]]
        run_scenario(args.out / "eval" / name, sc, policies, args.seeds, cfg, deadline, ref,
                     log=lambda line: print(line, flush=True))
        if set(designs) & set(ES_DESIGNS):  # the lines its learning curve is read against: random and the best heuristic there
            run_scenario(args.out / "tuning" / name, sc, ["random", best], list(TUNING_SEEDS), cfg, deadline, (),
                         log=lambda line: print(line, flush=True))


def larger_config(name: str, factor: int = 2) -> Dict[str, Any]:
    """The scenario at ``factor`` × N (a per-client list such as Churn's availability repeated), keeping the PCA
    width the models were trained with (no weight of theirs depends on N, but the token's width does)."""
    from fedsel_env.config import DEFAULT_CONFIG
    from fedsel_env.spec import SelectionSpec

    cfg = scenario(name).env_config()
    d = SelectionSpec.pca_width({**DEFAULT_CONFIG, **cfg})
    cfg["num_clients"] = factor * int(cfg["num_clients"])
    system = dict(cfg.get("system", {}))
    if isinstance(system.get("availability"), list):
        system["availability"] = list(system["availability"]) * factor
        cfg["system"] = system
    cfg["pca_components"] = d
    return cfg


#: the per-client designs played at 2 × N by ``--part larger_n`` (their weights do not depend on N; FAVOR+'s flat
#: Q-network does, so it is not among them)
LARGER_N_DESIGNS = ("set_distill", "set_es", "set_es_q", "pc_dqn", "pc_ppo")


def part_larger_n(args: argparse.Namespace, deadline: float) -> None:
    """The per-client models at 2 × the N they were trained at, beside random and the best heuristic (same seeds)."""
    ref = reference_rows()
    for name in args.scenarios:
        designs = [d for d in LARGER_N_DESIGNS if d in trained_designs(args, name)]
        if not designs:
            continue
        sc = scenario(name)
        best = best_heuristic(name, ref) if not args.smoke else "pow_d"
        policies = ["random", best, *[_policy_text(args, name, s, d) for d in designs for s in args.train_seeds]]
        cfg = larger_config(name)
        cfg.update(args.overrides)
        run_scenario(args.out / "eval_2n" / name, sc, policies, args.seeds, cfg, deadline, (),
                     log=lambda line: print(line, flush=True))


#: seeds no version of any learned design had been reported on: set_es's wins re-played there (``--part confirm``),
#: beside random and the best heuristic (none is a tuning, reporting or training federation: checked)
CONFIRM_SEEDS = tuple(range(20_000, 20_030))
#: the seed sets played without the oracle after the reporting rows were in: role → (seeds, how the record's
#: summaries name them, the designs played there). ``confirm``: the ES designs' wins re-played (``--part confirm``);
#: ``fresh``: seeds no version of any design had been played on before ``set_es_q`` was reported (``--part
#: fresh``), for ``set_es_q``, which was built after the confirmation seeds had been used for ``set_es``
CONFIRM_SETS: Dict[str, tuple] = {
    "confirm": (CONFIRM_SEEDS, "on the confirmation seeds", ES_DESIGNS),
    "fresh": (tuple(range(30_000, 30_030)), "on the fresh seeds 30000-30029", ("set_es_q",))}


def part_confirm(args: argparse.Namespace, deadline: float, role: str = "confirm") -> None:
    """The designs of ``CONFIRM_SETS[role]`` (their models), random and the best heuristic on its seeds (the
    scenario's own config)."""
    from fedsel_env.bench import check_fresh_federations

    seeds, _label, candidates = CONFIRM_SETS[role]
    check_fresh_federations({f"{role} seed {s}": s for s in seeds})
    ref = reference_rows()
    for name in args.scenarios:
        designs = [d for d in candidates if d in trained_designs(args, name)]
        if not designs:
            continue
        best = best_heuristic(name, ref) if not args.smoke else "pow_d"
        cfg = scenario(name).env_config()
        cfg.update(args.overrides)
        run_scenario(args.out / role / name, scenario(name), ["random", best,
                     *[_policy_text(args, name, s, d) for d in designs for s in args.train_seeds]],
                     list(seeds), cfg, deadline, (), log=lambda line: print(line, flush=True))


#: the reporting seeds ``--part picks`` replays with the oracle beside the learned policy (the first of them)
PICK_SEEDS = 10


def picks_episode(env: Any, sc: Any, folder: Path, seed: int) -> Dict[str, Any]:
    """One episode of an ES model (``folder``) on reporting seed ``seed``, the oracle asked at every round of it what
    it would pick from the same state (``LookaheadOracle.plan`` with the learned pick among its candidates; the
    federation is put back after each candidate, so the episode is the model's own). Per round: the share of the
    oracle's K clients the model also picked, whether the model's pick scored best among the candidates, the share
    of candidates that scored better, and the oracle's picks' mean standardised token minus the model's."""
    from agents.lookahead import LookaheadOracle
    from agents.set_es import SetESAgent, standardise, token_names

    obs, _ = env.reset(seed=int(seed))
    spec = env.selection_spec
    agent = SetESAgent(spec, model=str(folder))
    oracle = LookaheadOracle(spec, seed=int(seed), objective=sc.objective)
    for a in (agent, oracle):
        a.bind(env)
        a.reset(obs)
    overlap, best, worse_than, dz = [], [], [], []
    done = False
    while not done:
        pick = agent.select(obs)
        avail = spec.feature(obs, "available") > 0.5
        z = standardise(np.concatenate([np.asarray(obs["clients"], np.float64), agent.tracker.features(obs)], axis=1),
                        avail)
        cands, scores = oracle.plan(obs, extra=[pick])
        mine = next(i for i, c in enumerate(cands) if set(c.tolist()) == set(pick.tolist()))
        theirs = cands[int(np.argmax(scores))]
        overlap.append(len(set(pick.tolist()) & set(theirs.tolist())) / max(len(theirs), 1))
        best.append(float(scores[mine] >= scores.max()))
        worse_than.append(float(np.mean(np.delete(scores, mine) > scores[mine])) if len(cands) > 1 else 0.0)
        dz.append(z[theirs].mean(axis=0) - z[pick].mean(axis=0))
        obs, _, term, trunc, _ = env.step(agent.to_action(pick))
        done = term or trunc
    return {"rounds": len(overlap), "overlap": float(np.mean(overlap)), "learned_best": float(np.mean(best)),
            "candidates_better": float(np.mean(worse_than)),
            "oracle_minus_learned": dict(zip(token_names(spec), np.mean(dz, axis=0).tolist()))}


def part_picks(args: argparse.Namespace, deadline: float) -> None:
    """Where the ES models' picks differ from the oracle's (:func:`picks_episode`), on the first
    :data:`PICK_SEEDS` reporting seeds, every training seed; resumable (``<out>/picks/<scenario>/<design>.jsonl``)."""
    from agents.training.atomic import append_line
    from fedsel_env.env import FedSelectEnv

    for name in args.scenarios:
        sc = scenario(name)
        for design in [d for d in ES_DESIGNS if d in trained_designs(args, name)]:
            path = args.out / "picks" / name / f"{design}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            done = {(r["training_seed"], r["seed"]) for r in map(json.loads, path.read_text().splitlines())} \
                if path.is_file() else set()
            cfg = sc.env_config()
            cfg.update(args.overrides)
            env = FedSelectEnv(config=cfg)
            try:
                for t in args.train_seeds:
                    for s in args.seeds[:PICK_SEEDS]:
                        if (t, s) in done:
                            continue
                        if time.time() >= deadline:
                            return
                        t0 = time.perf_counter()
                        row = picks_episode(env, sc, run_folder(args.out, name, t, design), s)
                        append_line(path, json.dumps({"scenario": name, "design": design, "training_seed": t,
                                                      "seed": s, **row}))
                        print(f"{name} {design} s{t} seed {s}: overlap {row['overlap']:.2f}, best "
                              f"{row['learned_best']:.2f}, {time.perf_counter() - t0:.1f} s", flush=True)
            finally:
                env.close()


def add_picks(rec: records.Record, args: argparse.Namespace, chunk: str) -> None:
    """Rows and summaries of ``part_picks`` (each scenario and design whose episodes are all there)."""
    for name in args.scenarios:
        for design in ES_DESIGNS:
            path = args.out / "picks" / name / f"{design}.jsonl"
            if not path.is_file():
                continue
            rows = {(r["training_seed"], r["seed"]): r for r in map(json.loads, path.read_text().splitlines())}
            want = [(t, s) for t in args.train_seeds for s in args.seeds[:PICK_SEEDS]]
            if not all(k in rows for k in want):
                continue
            w = {"scenario": name, "design": design}
            for key in want:
                r = rows[key]
                rec.add_row(chunk, **w, role="picks", training_seed=key[0], seed=key[1], rounds=r["rounds"],
                            overlap=r["overlap"], learned_best=r["learned_best"],
                            candidates_better=r["candidates_better"])
                for feat, v in r["oracle_minus_learned"].items():
                    rec.add_row(chunk, **w, role="picks_token", training_seed=key[0], seed=key[1], param=feat, value=v)
            for fld, what in (("overlap", "share of the oracle's clients it also picks"),
                              ("learned_best", "share of rounds its pick is the oracle's best candidate"),
                              ("candidates_better", "share of the oracle's candidates that score better than its pick")):
                rec.summarise(f"{name}: {design} vs the oracle, {what}", "t_interval", fld, where={**w, "role": "picks"})
            for feat in rows[want[0]]["oracle_minus_learned"]:
                rec.summarise(f"{name}: {design} vs the oracle, oracle − learned mean standardised {feat}", "t_interval",
                              "value", where={**w, "role": "picks_token", "param": feat})


def picks_table(rec: records.Record) -> str:
    """Where the ES models' picks differ from the oracle's (from the record's summaries): agreement, and the three
    token columns whose standardised means differ most between the oracle's picks and the model's."""
    lines = ["| scenario | design | episodes | oracle's clients it also picks | its pick the oracle's best | candidates "
             "scoring better | the oracle picks clients with (oracle − learned, standardised) |",
             "|---|---|---:|---:|---:|---:|---|"]
    cell = lambda x: f"{x['mean']:.2f} [{x['lo']:.2f}, {x['hi']:.2f}]"  # noqa: E731
    for name in [n for n in SCENARIOS if any(r.get("role") == "picks" and r["scenario"] == n for r in rec.rows)]:
        for design in ES_DESIGNS:
            rows = [r for r in rec.rows if r.get("role") == "picks" and r["scenario"] == name and r["design"] == design]
            if not rows:
                continue
            pre = f"{name}: {design} vs the oracle, "
            v = [rec.value(pre + x) for x in ("share of the oracle's clients it also picks",
                                             "share of rounds its pick is the oracle's best candidate",
                                             "share of the oracle's candidates that score better than its pick")]
            feats = list(dict.fromkeys(r["param"] for r in rec.rows if r.get("role") == "picks_token"
                                       and r["scenario"] == name and r["design"] == design))  # token order: ties stable
            d = {f: rec.value(pre + f"oracle − learned mean standardised {f}") for f in feats}
            top = sorted(d, key=lambda f: -abs(d[f]["mean"]))[:3]
            lines.append(f"| {name} | `{design}` | {len(rows)} | {cell(v[0])} | {cell(v[1])} | {cell(v[2])} | "
                         + ", ".join(f"`{f}` {d[f]['mean']:+.2f} [{d[f]['lo']:+.2f}, {d[f]['hi']:+.2f}]" for f in top)
                         + " |")
    return "\n".join(lines)


def add_confirm(rec: records.Record, args: argparse.Namespace, chunk: str, role: str = "confirm") -> None:
    """Rows and paired differences of ``part_confirm``'s episodes for ``role`` (scenarios where all of them are
    there)."""
    seeds, label, candidates = CONFIRM_SETS[role]
    ref = reference_rows()
    for name in args.scenarios:
        path = args.out / role / name / "episodes.jsonl"
        if not path.is_file():
            continue
        best = best_heuristic(name, ref) if not args.smoke else "pow_d"
        rows = {(r["policy"], r["seed"]): r for r in map(json.loads, path.read_text().splitlines())}
        if not all((p, s) in rows for p in ("random", best) for s in seeds):
            continue
        designs = [d for d in candidates if all((f"{d}_s{t}", s) in rows for t in args.train_seeds for s in seeds)]
        if not designs:
            continue
        for p in ["random", best, *[f"{d}_s{t}" for d in designs for t in args.train_seeds]]:
            design = p.rsplit("_s", 1)[0] if p.rsplit("_s", 1)[0] in designs else None
            for s in seeds:
                r = rows[(p, s)]
                rec.add_row(chunk, scenario=name, role=role, policy=design or p,
                            training_seed=int(p.rsplit("_s", 1)[1]) if design else None, seed=s,
                            objective=r["objective"], value=r["value"], censored=r["censored"], config_sha=r["config_sha"])
        w = {"scenario": name, "role": role}
        for design in designs:
            for ref_pol in ("random", best):
                rec.summarise(f"{name} {label}: {design} − {ref_pol}, paired by seed", "paired_t",
                              "value", where={**w, "policy": design}, minus={**w, "policy": ref_pol})
        for p in ("random", best, *designs):
            rec.summarise(f"{name} {label}: {p} mean {scenario(name).objective}", "mean", "value",
                          where={**w, "policy": p})


def _against_references(rec: records.Record, prefix: str, rows: Sequence[Mapping[str, Any]],
                        candidates: Sequence[str]) -> tuple:
    """For a table of designs against random and the best heuristic, from the summaries named ``"<prefix>: <policy>
    mean <objective>"`` and ``"<prefix>: <design> − <policy>, paired by seed"``: (the designs among ``candidates`` in
    ``rows``, the best heuristic, the means by policy, the paired differences by design and reference, the number
    format, a cell formatter for a difference with its CI)."""
    obj = rows[0]["objective"]
    designs = [d for d in candidates if any(r["policy"] == d for r in rows)]
    best = next(r["policy"] for r in rows if r["policy"] not in ("random", *designs))
    f = ".3f" if obj == "acc_worst10" else ".1f"
    means = {p: rec.value(f"{prefix}: {p} mean {obj}") for p in ("random", best, *designs)}
    diffs = {d: {p: rec.value(f"{prefix}: {d} − {p}, paired by seed") for p in ("random", best)} for d in designs}
    cell = lambda x: f"{x['mean']:+{f}} [{x['lo']:+{f}}, {x['hi']:+{f}}]"  # noqa: E731
    return designs, best, means, diffs, f, cell


def confirm_table(rec: records.Record, role: str = "confirm") -> str:
    """The designs on ``CONFIRM_SETS[role]``'s seeds: means and paired differences (from the record's summaries)."""
    _seeds, label, candidates = CONFIRM_SETS[role]
    lines = ["| scenario | design | random | best heuristic | learned | learned − random [95% CI] "
             "| learned − best heuristic [95% CI] |", "|---|---|---:|---:|---:|---:|---:|"]
    for name in sorted({r["scenario"] for r in rec.rows if r.get("role") == role}, key=list(SCENARIOS).index):
        rows = [r for r in rec.rows if r.get("role") == role and r["scenario"] == name]
        designs, best, v, diffs, f, cell = _against_references(rec, f"{name} {label}", rows, candidates)
        for dsg in designs:
            d = diffs[dsg]
            lines.append(f"| {name} | `{dsg}` | {v['random']:{f}} | `{best}` {v[best]:{f}} | {v[dsg]:{f}} | "
                         f"{cell(d['random'])} | {cell(d[best])} |")
    return "\n".join(lines)


def add_larger_n(rec: records.Record, args: argparse.Namespace, chunk: str) -> None:
    """Rows and paired differences of ``part_larger_n``'s episodes (each scenario and design whose episodes are all
    there)."""
    ref = reference_rows()
    for name in args.scenarios:
        path = args.out / "eval_2n" / name / "episodes.jsonl"
        if not path.is_file():
            continue
        best = best_heuristic(name, ref) if not args.smoke else "pow_d"
        rows = {(r["policy"], r["seed"]): r for r in map(json.loads, path.read_text().splitlines())}
        if not all((p, s) in rows for p in ("random", best) for s in args.seeds):
            continue
        designs = [d for d in LARGER_N_DESIGNS
                   if all((f"{d}_s{t}", s) in rows for t in args.train_seeds for s in args.seeds)]
        if not designs:
            continue
        n = larger_config(name)["num_clients"]
        for p in ["random", best, *[f"{d}_s{t}" for d in designs for t in args.train_seeds]]:
            design = p.rsplit("_s", 1)[0] if p.rsplit("_s", 1)[0] in designs else None
            for s in args.seeds:
                r = rows[(p, s)]
                rec.add_row(chunk, scenario=name, num_clients=n, role="larger_n", policy=design or p,
                            training_seed=int(p.rsplit("_s", 1)[1]) if design else None, seed=s,
                            objective=r["objective"], value=r["value"], censored=r["censored"], config_sha=r["config_sha"])
        w = {"scenario": name, "role": "larger_n"}
        for design in designs:
            for ref_pol in ("random", best):
                rec.summarise(f"{name} at N = {n}: {design} − {ref_pol}, paired by seed", "paired_t", "value",
                              where={**w, "policy": design}, minus={**w, "policy": ref_pol})
        for p in ("random", best, *designs):
            rec.summarise(f"{name} at N = {n}: {p} mean {scenario(name).objective}", "mean", "value",
                          where={**w, "policy": p})


def build_record(args: argparse.Namespace) -> records.Record:
    """The record: every reporting episode of every model, and of random, the best heuristic and the oracle."""
    ref = reference_rows()
    rec = records.Record("bench_learned", config={
        "designs": list(DESIGNS), "train_seeds": list(args.train_seeds), "reporting_seeds": list(args.seeds),
        "set_distill_episodes": {n: (args.episodes or EPISODES[n]) for n in args.scenarios},
        "set_distill_candidates": args.candidates, "pc_dqn_steps": dict(PC_DQN_STEPS), "pc_dqn_envs": PC_DQN_ENVS,
        "sb3_designs": {d: {"algo": a, "steps": dict(b), "step_is_one_client": o} for d, (a, b, o) in SB3_DESIGNS.items()},
        "es_budget": {n: list(v) for n, v in ES_BUDGET.items()}, "es_settings": ES_SETTINGS,
        "overrides": dict(args.overrides)})
    chunk = rec.chunk(records.git_provenance(ROOT, ("fedsel_env", "agents", "fedsel_eval", "experiments")),
                      note="the report: every episode gathered (and any missing one played) at this commit; the "
                           "models' own episodes were played by `--part eval` (runs/bench_learned/eval/)")
    leaderboard = []
    for name in args.scenarios:
        sc = scenario(name)
        path = args.out / "eval" / name / "episodes.jsonl"
        if not path.is_file():
            continue
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        best = best_heuristic(name, ref) if not args.smoke else "pow_d"
        seeds = set(args.seeds)
        by_key = {}
        for r in [*ref, *rows]:
            if r["scenario"] == name and r["seed"] in seeds:
                by_key[(r["policy"], r["seed"])] = r
        designs = [d for d in trained_designs(args, name)
                   if all((f"{d}_s{t}", s) in by_key for t in args.train_seeds for s in seeds)]
        if not designs or not all((p, s) in by_key for p in ("random", "lookahead", best) for s in seeds):
            print(f"{name}: not every policy has played every reporting seed yet: not reported")
            continue
        want = {"random", "lookahead", best, *[f"{d}_s{t}" for d in designs for t in args.train_seeds]}
        for (pol, seed), r in sorted(by_key.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            if pol not in want:
                continue
            design = pol.rsplit("_s", 1)[0] if pol not in ("random", "lookahead", best) else None
            rec.add_row(chunk, scenario=name, policy=design or pol,
                        role="learned" if design else ("best_heuristic" if pol == best else pol),
                        training_seed=int(pol.rsplit("_s", 1)[1]) if design else None, seed=seed,
                        objective=sc.objective, value=r["value"], censored=r["censored"], rounds=r["rounds"],
                        sim_time=r["sim_time"], final_accuracy=r["final_accuracy"], acc_worst10=r["acc_worst10"],
                        wall_time_s=r["wall_time_s"], config_sha=r["config_sha"])
        w = {"scenario": name}
        ep = {**w, "role": ["learned", "random", "lookahead", "best_heuristic"]}  # episode rows, not training rows
        mean = {p: rec.summarise(f"{name}: {p} mean {sc.objective}", "mean", "value",
                                 where={**ep, "policy": p}) for p in ("random", "lookahead", best)}
        for design in designs:
            for t in args.train_seeds:
                summ = training_summary(args.out, name, t, design)
                rec.add_row(chunk, scenario=name, design=design, role="training", training_seed=t,
                            train_seconds=summ["train_seconds"], env_rounds=summ["env_rounds"],
                            oracle_rounds=summ["oracle_rounds"])
            mean[design] = rec.summarise(f"{name}: {design} mean {sc.objective}", "mean", "value",
                                         where={**ep, "policy": design})
            diffs = {}
            for ref_pol, tag in (("random", "random"), (best, "best_heuristic"), ("lookahead", "oracle")):
                diffs[tag] = rec.summarise(f"{name}: {design} − {tag} ({ref_pol}), paired by seed", "paired_t",
                                           "value", where={**ep, "policy": design}, minus={**ep, "policy": ref_pol})
                rec.summarise(f"{name}: {design} − {tag} ({ref_pol}), across training seeds", "paired_t_across",
                              "value", where={**ep, "policy": design}, minus={**ep, "policy": ref_pol})
            if design in DISTILLED:  # its learning curve: greedy objective on tuning seeds, regret to the oracle
                for t in args.train_seeds:
                    prog = run_folder(args.out, name, t, design) / "progress.jsonl"
                    for line in prog.read_text().splitlines():
                        r = json.loads(line)
                        rec.add_row(chunk, scenario=name, design=design, role="curve", training_seed=t,
                                    episode=r["episode"], regret=r["regret"], learner_best=r["learner_best"],
                                    beta=r["beta"], div_weight=r["div_weight"], tuning_objective=r.get("eval_mean"))
                last = args.episodes or EPISODES[name]
                tail = {"scenario": name, "role": "curve", "design": design, "episode": list(range(last - 49, last + 1))}
                rec.summarise(f"{name}: {design}'s pick the best candidate, share of rounds, last 50 episodes",
                              "mean", "learner_best", where=tail)
                rec.summarise(f"{name}: {design}'s regret to the best candidate, last 50 episodes", "mean",
                              "regret", where=tail)
                end = {"scenario": name, "role": "curve", "design": design, "episode": last}
                rec.summarise(f"{name}: {design}'s diversity weight w at the end, lowest", "min", "div_weight", where=end)
                rec.summarise(f"{name}: {design}'s diversity weight w at the end, highest", "max", "div_weight", where=end)
                rec.summarise(f"{name}: {design}'s tuning-seed objective at the end", "t_interval",
                              "tuning_objective", where=end)
            if design in ES_DESIGNS:  # its learning curve: the search's mean on the tuning seeds, per generation
                for t in args.train_seeds:
                    prog = run_folder(args.out, name, t, design) / "progress.jsonl"
                    for line in prog.read_text().splitlines():
                        r = json.loads(line)
                        rec.add_row(chunk, scenario=name, design=design, role="curve", training_seed=t,
                                    generation=r["generation"], sigma=r["sigma"],
                                    candidates_best=float(min(r["values_mean"]) if sc.lower_is_better
                                                          else max(r["values_mean"])),
                                    tuning_objective=r.get("eval_mean"))
                end = {"scenario": name, "role": "curve", "design": design,
                       "generation": int(json.loads(prog.read_text().splitlines()[-1])["generation"])}
                rec.summarise(f"{name}: {design}'s tuning-seed objective at the end", "t_interval",
                              "tuning_objective", where=end)
                for t in args.train_seeds:  # the deployed weights, by name (what the search found)
                    pol = json.loads((run_folder(args.out, name, t, design) / "set_es.json").read_text())
                    for pname, v in pol["params"].items():
                        rec.add_row(chunk, scenario=name, design=design, role="weights", training_seed=t,
                                    param=pname, value=float(v))
                tpath = args.out / "tuning" / name / "episodes.jsonl"
                trows = [json.loads(x) for x in tpath.read_text().splitlines()] if tpath.is_file() else []
                for r in trows if not any(x.get("role") == "tuning_reference" and x["scenario"] == name
                                          for x in rec.rows) else ():
                    if r["policy"] in ("random", best) and r["seed"] in TUNING_SEEDS:
                        rec.add_row(chunk, scenario=name, role="tuning_reference", policy=r["policy"], seed=r["seed"],
                                    objective=sc.objective, value=r["value"], config_sha=r["config_sha"])
                for p in ("random", best):
                    key = f"{name}: {p} mean {sc.objective} on the tuning seeds"
                    if any(r["policy"] == p for r in trows) and not any(sm["name"] == key for sm in rec.summaries):
                        rec.summarise(f"{name}: {p} mean {sc.objective} on the tuning seeds", "mean", "value",
                                      where={**w, "role": "tuning_reference", "policy": p})
            tw = {**w, "role": "training", "design": design}
            train_s = rec.summarise(f"{name}: {design} training wall seconds per training seed", "mean",
                                    "train_seconds", where=tw)
            env_rounds = rec.summarise(f"{name}: {design} env rounds per training seed", "mean", "env_rounds", where=tw)
            lo, hi = diffs["best_heuristic"]["lo"], diffs["best_heuristic"]["hi"]
            better = (hi < 0) if sc.lower_is_better else (lo > 0)
            leaderboard.append({
                "scenario": name, "policy": design, "learned": True, "objective": sc.objective,
                "lower_is_better": sc.lower_is_better, "best_heuristic": best, "mean": mean[design],
                "normalised": normalised_score(mean["random"], mean["lookahead"], mean[design]),
                "best_heuristic_normalised": normalised_score(mean["random"], mean["lookahead"], mean[best]),
                "delta_vs_random_ci": [diffs["random"]["lo"], diffs["random"]["hi"]],
                "delta_vs_random": diffs["random"]["mean"],
                "delta_vs_best_heuristic": diffs["best_heuristic"]["mean"],
                "delta_vs_best_heuristic_ci": [lo, hi], "beats_best_heuristic": bool(better),
                "delta_vs_oracle": diffs["oracle"]["mean"], "delta_vs_oracle_ci": [diffs["oracle"]["lo"], diffs["oracle"]["hi"]],
                "train_seconds_per_seed": train_s, "env_rounds_per_seed": env_rounds})
    add_larger_n(rec, args, chunk)
    for role in CONFIRM_SETS:
        add_confirm(rec, args, chunk, role)
    add_picks(rec, args, chunk)
    rec.notes["leaderboard"] = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in e.items()}
                                for e in leaderboard]  # a normalised score without headroom is None, not NaN
    rec.notes["reading"] = ("normalised = (random − policy) / (random − oracle) of the means over the reporting "
                            "seeds; deltas are policy − reference in the objective's units, paired by seed, the "
                            "learned policy's value averaged over its training seeds; 'beats_best_heuristic': the "
                            "95% t CI lies on the better side of 0")
    return rec


def plot_curves(rec: records.Record, path: Path) -> Path:
    """set_distill's learning curves from the record: the greedy learner's objective on the tuning seeds and its
    regret to the best of the oracle's candidates (per training episode, a 20-episode running mean)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [e["scenario"] for e in rec.notes["leaderboard"] if e["policy"] == "set_distill"]
    fig, axes = plt.subplots(2, max(len(names), 1), figsize=(4.2 * max(len(names), 1), 6.5), squeeze=False)
    for j, name in enumerate(names):
        entry = next(e for e in rec.notes["leaderboard"] if e["scenario"] == name and e["policy"] == "set_distill")
        curve = [r for r in rec.rows if r.get("role") == "curve" and r["scenario"] == name
                 and r.get("design", "set_distill") == "set_distill"]  # set_distill's (the figure the docs show)
        for t in sorted({r["training_seed"] for r in curve}):
            rows = [r for r in curve if r["training_seed"] == t]
            ev = [(r["episode"], r["tuning_objective"]) for r in rows if r["tuning_objective"] is not None]
            axes[0, j].plot(*zip(*ev), marker="o", label=f"training seed {t}")
            reg = np.array([r["regret"] if r["regret"] is not None else np.nan for r in rows], dtype=float)
            if reg.size >= 20:
                axes[1, j].plot([r["episode"] for r in rows][19:], np.convolve(np.nan_to_num(reg), np.ones(20) / 20, "valid"))
        axes[0, j].axhline(entry["mean"], color="k", ls=":", lw=1, label="learned, reporting seeds")
        axes[0, j].set_title(f"{name}: {entry['objective']} ({'↓' if entry['lower_is_better'] else '↑'})")
        axes[0, j].set_xlabel("training episode")
        axes[0, j].set_ylabel("greedy learner, tuning seeds 100–104")
        axes[1, j].set_xlabel("training episode")
        axes[1, j].set_ylabel("regret to the oracle's best candidate")
        axes[0, j].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_es_curves(rec: records.Record, path: Path) -> Path:
    """set_es's learning curves from the record: the search's mean on the tuning seeds 100-109 every 5 generations,
    per training seed, against random and the best heuristic on the same seeds, and the reporting-seed mean."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = [e for e in rec.notes["leaderboard"] if e["policy"] in ES_DESIGNS]
    cols = min(max(len(entries), 1), 4)
    rows = -(-max(len(entries), 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False)
    for ax in axes.flat[len(entries):]:
        ax.set_visible(False)
    for j, entry in enumerate(entries):
        name, design, ax = entry["scenario"], entry["policy"], axes.flat[j]
        curve = [r for r in rec.rows if r.get("role") == "curve" and r["scenario"] == name and r.get("design") == design]
        for t in sorted({r["training_seed"] for r in curve}):
            pts = [(r["generation"], r["tuning_objective"]) for r in curve
                   if r["training_seed"] == t and r["tuning_objective"] is not None]
            ax.plot(*zip(*pts), marker="o", ms=3, label=f"{design}, training seed {t}")
        for p, style in (("random", "--"), (entry["best_heuristic"], "-.")):
            key = f"{name}: {p} mean {entry['objective']} on the tuning seeds"
            if any(sm["name"] == key for sm in rec.summaries):
                ax.axhline(rec.value(key), color="grey" if p == "random" else "C3", ls=style, lw=1,
                           label=f"{p}, tuning seeds")
        ax.axhline(entry["mean"], color="k", ls=":", lw=1, label=f"{design}, reporting seeds")
        ax.set_title(f"{name}, {design}: {entry['objective']} ({'↓' if entry['lower_is_better'] else '↑'})",
                     fontsize=9)
        ax.set_xlabel("CMA-ES generation")
        ax.set_ylabel("search mean, tuning seeds 100–109")
        ax.legend(fontsize=6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def table(rec: records.Record) -> str:
    lines = ["| scenario | design | objective | best heuristic | learned mean | normalised (heuristic's) | Δ vs random [95% CI] "
             "| Δ vs best heuristic [95% CI] | beats it | training per seed |",
             "|---|---|---|---|---:|---:|---:|---:|---|---:|"]
    for e in rec.notes["leaderboard"]:
        arrow = "↓" if e["lower_is_better"] else "↑"
        f = ".3f" if e["objective"] == "acc_worst10" else ".1f"
        lines.append(
            f"| {e['scenario']} | `{e['policy']}` | {e['objective']} {arrow} | `{e['best_heuristic']}` | {e['mean']:{f}} | "
            f"{_num(e['normalised'])} ({_num(e['best_heuristic_normalised'])}) | {e['delta_vs_random']:+{f}} "
            f"[{e['delta_vs_random_ci'][0]:+{f}}, {e['delta_vs_random_ci'][1]:+{f}}] | "
            f"{e['delta_vs_best_heuristic']:+{f}} [{e['delta_vs_best_heuristic_ci'][0]:+{f}}, "
            f"{e['delta_vs_best_heuristic_ci'][1]:+{f}}] | {'yes' if e['beats_best_heuristic'] else 'no'} | "
            f"{e['train_seconds_per_seed'] / 60:.1f} min, {e['env_rounds_per_seed']:,.0f} rounds |")
    return "\n".join(lines)


def larger_table(rec: records.Record) -> str:
    """The per-client designs at 2 × N: means and paired differences (from the record's summaries)."""
    lines = ["| scenario | N (trained at) | design | random | best heuristic | learned | learned − random [95% CI] "
             "| learned − best heuristic [95% CI] |", "|---|---:|---|---:|---:|---:|---:|---:|"]
    for name in rec.config.get("scenarios", []) or sorted({r["scenario"] for r in rec.rows if r.get("role") == "larger_n"}):
        rows = [r for r in rec.rows if r.get("role") == "larger_n" and r["scenario"] == name]
        if not rows:
            continue
        n = rows[0]["num_clients"]
        designs, best, v, diffs, f, cell = _against_references(rec, f"{name} at N = {n}", rows, LARGER_N_DESIGNS)
        for d in designs:
            diff = diffs[d]
            lines.append(f"| {name} | {n} ({scenario(name).config['num_clients']}) | `{d}` | {v['random']:{f}} | "
                         f"`{best}` {v[best]:{f}} | {v[d]:{f}} | {cell(diff['random'])} | {cell(diff[best])} |")
    return "\n".join(lines)


def es_weights_table(rec: records.Record, design: str = "set_es") -> str:
    """``design``'s deployed weights per scenario, from the record's rows: each training seed's vector (θ, w) over its
    length (the greedy choice is the same for any positive multiple, so only the direction compares), the mean over
    the seeds and each seed's. The weights act on columns standardised over the round's available clients."""
    rows = [r for r in rec.rows if r.get("role") == "weights" and r.get("design", "set_es") == design]
    names = sorted({r["scenario"] for r in rows}, key=lambda n: list(SCENARIOS).index(n) if n in SCENARIOS else 99)
    if not names:
        return f"(no {design} model reported yet)"
    params = list(dict.fromkeys(r["param"] for r in rows))
    unit: Dict[tuple, float] = {}
    for n in names:
        for t in sorted({r["training_seed"] for r in rows if r["scenario"] == n}):
            vec = {r["param"]: r["value"] for r in rows if r["scenario"] == n and r["training_seed"] == t}
            norm = float(np.linalg.norm(list(vec.values()))) or 1.0
            unit.update({(n, t, p): v / norm for p, v in vec.items()})
    lines = ["| weight (unit vector) | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for p in params:
        cells = []
        for n in names:
            v = [x for (n2, _t, p2), x in sorted(unit.items()) if n2 == n and p2 == p]
            cells.append(f"{np.mean(v):+.2f} ({', '.join(f'{x:+.2f}' for x in v)})")
        lines.append(f"| `{p}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _num(x: Any) -> str:
    return "—" if x is None else f"{x:+.2f}"


def main(argv: Optional[Sequence[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--part", choices=("train", "eval", "larger_n", "confirm", "fresh", "picks", "report", "all"),
                   default="all",
                   help="larger_n: the per-client models (LARGER_N_DESIGNS) at 2 × N (the PCA width they were trained with); "
                        "fresh: set_es_q on seeds 30000-30029; picks: the ES models' picks beside the oracle's, round by round")
    p.add_argument("--scenarios", default=None, help="comma-separated scenario names (default: every one with an "
                                                     "episode budget)")
    p.add_argument("--train-seeds", type=int, nargs="+", default=None)
    p.add_argument("--design", choices=DESIGNS, default="set_distill", help="what --part train trains")
    p.add_argument("--steps", type=int, default=None, help="pc_dqn's, pc_ppo's or favor_plus's training steps "
                                                           "(default: SB3_DESIGNS)")
    p.add_argument("--episodes", type=int, default=None, help="training episodes (default: EPISODES per scenario)")
    p.add_argument("--generations", type=int, default=None, help="set_es's CMA-ES generations (default: ES_BUDGET)")
    p.add_argument("--candidates", type=int, default=16, help="the oracle's candidates per round (default 16)")
    p.add_argument("--eval-every", type=int, default=50, help="learning-curve evaluation every N episodes")
    p.add_argument("--max-minutes", type=float, default=math.inf, help="stop starting new work after this")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "bench_learned")
    p.add_argument("--smoke", action="store_true", help="tiny: Churn, 3 rounds, 2 episodes, 2 seeds; publishes nothing")
    p.add_argument("--no-publish", action="store_true", help="write the record to --out only")
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    deadline = time.time() + 60 * args.max_minutes
    if args.smoke:
        args.scenarios, args.overrides = [SMOKE["scenario"]], SMOKE["overrides"]
        args.episodes, args.candidates = args.episodes or SMOKE["episodes"], SMOKE["candidates"]
        args.train_seeds, args.seeds, args.eval_every = args.train_seeds or list(SMOKE["train_seeds"]), SMOKE["seeds"], 1
        args.out = args.out if args.out != ROOT / "runs" / "bench_learned" else ROOT / "runs" / "bench_learned_smoke"
    else:
        args.overrides, args.seeds = {}, list(REPORTING_SEEDS)
        args.scenarios = [scenario(s).name for s in args.scenarios.split(",")] if args.scenarios else list(EPISODES)
        args.train_seeds = args.train_seeds or list(TRAIN_SEEDS)
    if args.part in ("train", "all"):
        part_train(args, deadline)
    if args.part in ("eval", "all"):
        part_eval(args, deadline)
    if args.part in ("larger_n", "all"):
        part_larger_n(args, deadline)
    if args.part in ("confirm", "all"):
        part_confirm(args, deadline)
    if args.part in ("fresh", "all"):
        part_confirm(args, deadline, "fresh")
    if args.part in ("picks", "all"):
        part_picks(args, deadline)
    if args.part in ("report", "all"):
        rec = build_record(args)
        rec.write(args.out / "record.json", written_by={"command": " ".join(["experiments/bench_learned.py", *(argv or sys.argv[1:])])})
        if not args.smoke and not args.no_publish and rec.notes["leaderboard"]:
            rec.write(RESULT)
            plot_curves(rec, ROOT / "docs" / "img" / "bench_learned_curves.png")
            if any(e["policy"] in ES_DESIGNS for e in rec.notes["leaderboard"]):
                plot_es_curves(rec, ROOT / "docs" / "img" / "bench_learned_es_curves.png")
                for design in ES_DESIGNS:
                    if any(e["policy"] == design for e in rec.notes["leaderboard"]):
                        splice_doc(ROOT / "docs" / "TRAINING.md", f"{design}_weights", es_weights_table(rec, design))
            for role, marker in (("confirm", "learned_confirm"), ("fresh", "learned_fresh")):
                if any(r.get("role") == role for r in rec.rows):
                    splice_doc(ROOT / "docs" / "BENCHMARK.md", marker, confirm_table(rec, role))
            if any(r.get("role") == "picks" for r in rec.rows):
                splice_doc(ROOT / "docs" / "TRAINING.md", "learned_picks", picks_table(rec))
            splice_doc(ROOT / "docs" / "BENCHMARK.md", "learned", table(rec))
            splice_doc(ROOT / "docs" / "BENCHMARK.md", "learned_larger_n", larger_table(rec))
        elif args.smoke and rec.notes["leaderboard"]:  # the figures too, into --out
            plot_curves(rec, args.out / "curves.png")
            if any(e["policy"] in ES_DESIGNS for e in rec.notes["leaderboard"]):
                plot_es_curves(rec, args.out / "es_curves.png")
        print(table(rec) if rec.notes["leaderboard"] else "nothing complete to report yet")
        print(larger_table(rec))
        for design in ES_DESIGNS:
            if any(e["policy"] == design for e in rec.notes["leaderboard"]):
                print(es_weights_table(rec, design))
        for role in CONFIRM_SETS:
            if any(r.get("role") == role for r in rec.rows):
                print(confirm_table(rec, role))
        if any(r.get("role") == "picks" for r in rec.rows):
            print(picks_table(rec))


if __name__ == "__main__":
    main()
