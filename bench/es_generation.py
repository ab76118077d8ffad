"""One CMA-ES generation of ``set_es`` / ``set_es_q`` (issue #29): the single env against the vector env.

    python bench/es_generation.py                          # Churn, 12 candidates × 8 federations, n_envs 16 and 96
    python bench/es_generation.py --scenario QuantitySkew --candidates 4 --federations 4 --n-envs 16
    python bench/es_generation.py --profile 20             # where a set_es_q episode's time goes (cProfile)
    python bench/es_generation.py --scenario family:MixedRounds --no-queries --federations 4   # a family's draws

A generation plays P candidate weight vectors (random here, seeded) on E fresh federations each. It is timed
as the trainer plays it (``agents/training/set_es.py``'s tasks, federation by federation): by its ``SerialMapper``,
one episode after another on one ``FedSelectEnv``, and by its ``VectorMapper`` (the default, 16 at once) with each
``--n-envs`` (the same episodes, local training fused across the sub-envs of one vector env); it prints the seconds
and whether the two gave the same objectives and env rounds; ``--reset-cache both`` plays it all with the reset
cache (``fedsel_env/reset_cache.py``) off, then on. ``--profile N`` instead runs N
episodes under cProfile and prints the shares of local training, the loss queries, the agent's own scoring and
the rest. A benchmark, not a test: the figures go to docs/TRAINING.md with the load average printed here.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenario", default="Churn")
    p.add_argument("--candidates", type=int, default=12)
    p.add_argument("--federations", type=int, default=8)
    p.add_argument("--n-envs", type=int, nargs="+", default=[16, 96])
    p.add_argument("--no-queries", action="store_true", help="set_es (no loss queries) instead of set_es_q")
    p.add_argument("--profile", type=int, default=0, help="profile this many episodes instead")
    p.add_argument("--reset-cache", choices=("on", "off", "both"), default="on",
                   help="the reset cache (fedsel_env/reset_cache.py): on (the default), off, or both, interleaved")
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    from agents.set_es import SetESAgent, param_names
    from agents.training.set_es import ESEpisode, SerialMapper, VectorMapper, play_episode
    from fedsel_env.bench import scenario, training_env_config
    from fedsel_env.env import FedSelectEnv
    from fedsel_env.rollout import keep_env
    from fedsel_eval.bench import objectives

    sc = scenario(args.scenario)
    cfg = training_env_config(args.scenario, {})  # the trainer's env: the scenario's, the Dict observation
    env = FedSelectEnv(config=cfg)
    spec = env.selection_spec
    q = 0 if args.no_queries else min(2 * spec.clients_per_round, spec.num_clients)
    rng = np.random.default_rng(0)
    thetas = [rng.normal(size=len(param_names(spec, q))) for _ in range(args.candidates)]
    seeds = list(range(2_900_000, 2_900_000 + args.federations))  # none of the bench's federations
    make = lambda th: (lambda s: SetESAgent(s, model=th, queries=q))  # noqa: E731
    print(f"{sc.name}, {'set_es_q (d = %d)' % q if q else 'set_es'}, torch {torch.__version__}, "
          f"load {os.getloadavg()[0]:.2f}")
    if args.profile:
        import cProfile
        import pstats

        objectives(env, sc, make(thetas[0]), seeds[:1])
        prof = cProfile.Profile()
        prof.enable()
        objectives(env, sc, make(thetas[0]), [s + 100 for s in range(args.profile)])
        prof.disable()
        st = pstats.Stats(prof).stats
        total = max(v[3] for v in st.values())
        cum = lambda f, name: sum(v[3] for k, v in st.items() if k[2] == name and k[0].endswith(f))  # noqa: E731
        for what, f, fn in (("local training (train_fused)", "fused_sgd.py", "train_fused"),
                            ("loss queries (the env's query_losses)", "env.py", "query_losses"),
                            ("the agent's select (queries included)", "set_es.py", "select")):
            print(f"  {what}: {100 * cum(f, fn) / total:.0f}% of {total:.2f} s")
        return
    # the trainer's own unit of work: one ESEpisode per candidate and federation, federation by federation
    # (agents/training/set_es.py), played by its SerialMapper and by its VectorMapper (the default, n_envs 16)
    # a scenario family (family:<Name>, the generalist track) draws each federation's own config from its seed
    tasks = [ESEpisode(training_env_config(args.scenario, {}, seed=s), sc.objective, tuple(float(v) for v in th), q, s)
             for s in seeds for th in thetas]
    keep_env(cfg, env)
    from fedsel_env import reset_cache

    modes = ("off", "on") if args.reset_cache == "both" else (args.reset_cache,)
    budget = reset_cache.DEFAULT_MAX_BYTES
    first = None
    for mode in modes:  # every cache made below (the env's, each vector env's) on or off
        reset_cache.DEFAULT_MAX_BYTES = budget if mode == "on" else 0
        env.reset_cache = reset_cache.ResetCache()
        t = time.perf_counter()
        single = SerialMapper().map(play_episode, tasks)
        t_single = time.perf_counter() - t
        first = single if first is None else first
        rounds = sum(r for _, r in single)
        print(f"  reset cache {mode}: SerialMapper, one env, episode after episode: {t_single:.1f} s "
              f"({args.candidates} × {args.federations} episodes, {rounds} env rounds, {rounds / t_single:.1f} "
              f"rounds/s; the same objectives and rounds as the first run: {single == first}); "
              f"load {os.getloadavg()[0]:.2f}")
        for n in args.n_envs:
            mapper = VectorMapper(n)
            t = time.perf_counter()
            got = mapper.map(play_episode, tasks)
            dt = time.perf_counter() - t
            mapper.close()
            print(f"  reset cache {mode}: VectorMapper, n_envs = {n}: {dt:.1f} s, {t_single / dt:.2f}× the single "
                  f"env; the same objectives and rounds: {got == single}; load {os.getloadavg()[0]:.2f}")
    reset_cache.DEFAULT_MAX_BYTES = budget
    env.close()


if __name__ == "__main__":
    main()
