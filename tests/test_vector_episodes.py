"""Evaluation through the vector env (issue #27): ``evaluate.py --n-envs E`` / ``fedsel_eval.run(n_envs=E)``.

Several episodes are played at once in the sub-envs of one ``FedSelectVectorEnv``, each with its own policy
object and its seed's federation; a slot whose episode ends takes the next pending one. Every episode record
must equal the one the single-env path writes, bit for bit (all but ``wall_time_s``), for stateless, querying
(``pow_d``) and stateful (``rbcsf``) policies, on ``tiny`` and the default preset, and for the bench suite.
"""
import json

import pytest

import fedsel_eval
from fedsel_eval.vector_episodes import EpisodeJob, check_n_envs, play

POLICIES = ["random", "pow_d", "rbcsf"]


def _records(folder):
    lines = (folder / fedsel_eval.EPISODES_FILE).read_text().splitlines()
    out = {}
    for line in lines:
        r = json.loads(line)
        r.pop("wall_time_s")
        out[r["key"]] = r
    return out


@pytest.mark.parametrize("env,rounds,target,n_envs", [("tiny", None, 0.3, 4), ("default", 6, None, 2)])
def test_vector_path_writes_the_single_env_records(tmp_path, env, rounds, target, n_envs):
    """3 policies × 3 seeds in fewer slots than episodes: slots are refilled as episodes end (tiny's at Ω = 0.3
    end after 2 to 5 rounds); every record equals the single-env path's."""
    kw = dict(env=env, policies=POLICIES, seeds=[0, 1, 2], rounds=rounds, target=target, progress=False, plots=False)
    fedsel_eval.run(tmp_path / "single", **kw)
    fedsel_eval.run(tmp_path / "vector", n_envs=n_envs, **kw)
    a, b = _records(tmp_path / "single"), _records(tmp_path / "vector")
    assert set(a) == set(b) and len(a) == 9
    for key in a:
        assert json.dumps(a[key], sort_keys=True) == json.dumps(b[key], sort_keys=True), key
    assert len({r["metrics"]["rounds"] for r in a.values()}) > 1 or env != "tiny"  # episodes of different lengths


def test_evaluate_script_option_and_bench_suite(tmp_path):
    """``evaluate.py --n-envs`` and ``--suite bench --n-envs`` on one scenario with 2 rounds: the same rows."""
    import evaluate

    base = ["--env", "tiny", "--policy", "random", "--policy", "rbcsf", "--seeds", "0", "1", "--no-progress",
            "--no-plots"]
    evaluate.main(base + ["--out", str(tmp_path / "one")])
    evaluate.main(base + ["--out", str(tmp_path / "vec"), "--n-envs", "3"])
    assert _records(tmp_path / "one") == _records(tmp_path / "vec")

    suite = ["--suite", "bench", "--scenarios", "Churn", "--policy", "pow_d", "--rounds", "2", "--seeds", "0", "1",
             "--no-progress", "--no-plots"]
    evaluate.main(suite + ["--out", str(tmp_path / "b1")])
    evaluate.main(suite + ["--out", str(tmp_path / "b3"), "--n-envs", "3"])

    def rows(folder):
        out = {}
        for line in (folder / "Churn" / "episodes.jsonl").read_text().splitlines():
            r = json.loads(line)
            for k in ("wall_time_s", "planning_seconds"):
                r.pop(k, None)
            out[(r["policy"], r["seed"])] = r
        return out

    one, three = rows(tmp_path / "b1"), rows(tmp_path / "b3")
    from fedsel_eval.bench import heuristic_policies

    # every heuristic (random and pow_d among them) and the oracle × 2 seeds
    assert len(one) == 2 * (len(heuristic_policies()) + 1) and one == three


def test_idle_slots_deadline_and_bad_n_envs():
    import agents
    from fedsel_env.config import make_config

    cfg = make_config({"max_rounds": 3}, preset="tiny")
    jobs = [EpisodeJob(s, lambda spec, s=s: agents.make("random", spec, seed=s), tag=s) for s in (5, 6)]
    got = dict(play(cfg, jobs, n_envs=8))  # two episodes, two sub-envs (not eight)
    assert sorted(got) == [5, 6] and all(r["metrics"]["rounds"] <= 3 for r in got.values())
    assert dict(play(cfg, jobs, n_envs=2, deadline=0.0)) == {}  # nothing starts after the deadline
    with pytest.raises(ValueError, match="n_envs = 0"):
        check_n_envs(0)
    with pytest.raises(ValueError, match="workers = 2"):
        check_n_envs(4, workers=2)
    with pytest.raises(ValueError, match="n_envs"):
        fedsel_eval.run("/nonexistent/never-written", env="tiny", policies=["random"], seeds=[0], workers=2, n_envs=2)
