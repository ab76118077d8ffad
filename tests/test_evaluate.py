"""evaluate.py and fedsel_eval (issue #6): outputs, determinism, resume, common random
numbers, trained models through the same path as hand-written agents, bad input, parallel workers."""
import csv
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import fedsel_eval as ev
from fedsel_eval import episodes

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # evaluate.py and train_agent.py are scripts at the repository root
    sys.path.insert(0, str(REPO))
import evaluate  # noqa: E402

TINY = ["--env", "tiny", "--rounds", "3", "--no-progress"]


def records(run_dir):
    """Episode records by key, without the wall-clock time (the one field that may differ)."""
    out = {}
    with open(Path(run_dir) / "episodes.jsonl") as f:
        for line in f:
            r = json.loads(line)
            r.pop("wall_time_s")
            out[r["key"]] = r
    return out


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """The default evaluation (every hand-written agent) on the tiny preset, with plots."""
    out = tmp_path_factory.mktemp("eval") / "default"
    evaluate.main(TINY + ["--seeds", "0", "1", "--target", "0.25", "--out", str(out)])
    return out


def test_default_run_writes_table_csv_jsonl_and_plots(default_run, capsys):
    import agents

    # favor, per_client, set_distill and set_es need a model, lookahead is privileged (reads the simulator): left out
    # of 'all'
    expected = sorted(n for n in agents.AGENTS if n not in ("favor", "per_client", "set_distill", "set_es", "lookahead"))
    recs = records(default_run)
    assert sorted({r["policy"] for r in recs.values()}) == expected
    assert len(recs) == 2 * len(expected)
    config = json.loads((default_run / "config.json").read_text())
    assert config["seeds"] == [0, 1] and config["env_config"]["max_rounds"] == 3
    assert config["env_config"]["target_accuracy"] == 0.25

    r = recs["random|fedavg|0"]
    assert set(r) >= {"key", "policy", "backend", "seed", "agent_seed", "reached", "diverged", "metrics",
                      "curves", "clients", "profiling_time"}
    assert set(r["metrics"]) == set(ev.METRICS)
    rounds = len(r["curves"]["round_time"])
    assert 1 <= rounds <= 3
    assert len(r["curves"]["accuracy"]) == len(r["curves"]["clock"]) == rounds + 1
    assert len(r["clients"]["accuracy"]) == len(r["clients"]["participation"]) == 8

    with open(default_run / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ev.summary_columns()
    assert [row["policy"] for row in rows] == expected
    for col in ("rounds_to_target_mean", "time_to_target_mean", "final_accuracy_mean", "best_accuracy_mean",
                "acc_mean_mean", "acc_std_mean", "acc_var_mean", "acc_worst10_mean", "acc_best10_mean",
                "jain_index_mean", "min_participation_rate_mean", "mean_round_time_mean",
                "improved_fraction_mean", "updates_sent_mean", "diverged"):
        assert col in rows[0]

    md = (default_run / "summary.md").read_text()
    tables = md.split("**Fairness**")  # the main table, then the fairness table
    main, fair = ([line for line in t.splitlines() if line.startswith("|")] for t in tables)
    assert "rounds to Ω" in main[0] and "time to Ω" in main[0] and "Δ rounds vs random" in main[0]
    assert "Jain" in fair[0] and "worst 10%" in fair[0] and "min part. rate" in fair[0]
    assert len(main) == len(fair) == 2 + len(expected)
    assert max(len(line) for line in md.splitlines()) <= ev.tables.WIDTH
    with open(default_run / "main_table.csv") as f:
        main_rows = list(csv.DictReader(f))
    assert [row["policy"] for row in main_rows] == expected
    assert {"rounds_to_target_lo", "rounds_to_target_hi", "delta_rounds_to_target_mean"} <= set(main_rows[0])
    with open(default_run / "episodes.csv") as f:
        assert len(list(csv.DictReader(f))) == len(recs)  # every episode, every metric
    for name in ev.PLOT_FILES:
        png = (default_run / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_episode_metrics_follow_from_the_curves(default_run):
    """Every per-episode metric recomputed by hand from the stored curves and per-client arrays."""
    reached_some = not_reached_some = False
    for r in records(default_run).values():
        m, cur, cl = r["metrics"], r["curves"], r["clients"]
        acc, rounds = np.array(cur["accuracy"]), len(cur["round_time"])
        hit = [t for t in range(1, rounds + 1) if acc[t] >= 0.25]
        if r["reached"]:
            reached_some = True
            assert hit and hit[0] == rounds == m["rounds_to_target"]  # the env stops at the first hit
            assert m["time_to_target"] == pytest.approx(cur["clock"][rounds])
        else:
            not_reached_some = True
            assert not hit and m["rounds_to_target"] is None and m["time_to_target"] is None  # NaN → null
        assert m["final_accuracy"] == acc[-1] and m["best_accuracy"] == acc[1:].max()
        assert m["mean_round_time"] == pytest.approx(np.mean(cur["round_time"]))
        assert cur["clock"][-1] == pytest.approx(np.sum(cur["round_time"]))
        assert m["updates_sent"] == sum(cl["participation"]) == sum(cur["responders"])
        assert m["jain_index"] == pytest.approx(sum(cl["participation"]) ** 2
                                                / (8 * sum(c * c for c in cl["participation"])))
        assert m["min_participation_rate"] == pytest.approx(min(cl["participation"]) / rounds)
        worst, best = sorted(cl["accuracy"])[0], sorted(cl["accuracy"])[-1]  # 10% of 8 clients = 1 client
        assert (m["acc_worst10"], m["acc_best10"]) == (worst, best)
        assert m["acc_var"] == pytest.approx(np.var(cl["accuracy"]))
    assert reached_some and not_reached_some  # Ω = 0.25 splits the tiny episodes


def test_summary_is_mean_and_std_over_seeds(default_run):
    recs = records(default_run)
    with open(default_run / "summary.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["policy"] == "afl")
    eps = [recs[f"afl|fedavg|{s}"] for s in (0, 1)]
    finals = [e["metrics"]["final_accuracy"] for e in eps]
    assert float(row["final_accuracy_mean"]) == pytest.approx(np.mean(finals))
    assert float(row["final_accuracy_std"]) == pytest.approx(np.std(finals))
    assert int(row["reached"]) == sum(e["reached"] for e in eps)
    reached = [e["metrics"]["rounds_to_target"] for e in eps if e["reached"]]
    if reached:  # averaged over the episodes that reached Ω
        assert float(row["rounds_to_target_mean"]) == pytest.approx(np.mean(reached))
    else:
        assert row["rounds_to_target_mean"] == ""


def test_same_seed_same_results_on_a_rerun(default_run, tmp_path):
    out = tmp_path / "again"
    evaluate.main(TINY + ["--seeds", "0", "1", "--target", "0.25", "--out", str(out), "--no-plots",
                          "--policy", "all"])
    assert records(out) == records(default_run)
    assert (out / "summary.csv").read_text() == (default_run / "summary.csv").read_text()


def test_resume_with_another_reference_resummarises_without_running(default_run, tmp_path, monkeypatch):
    """The reference is not part of the evaluation's config: --resume --reference compares the same episodes."""
    import shutil

    out = tmp_path / "ref"
    shutil.copytree(default_run, out)
    monkeypatch.setattr(episodes, "run_episode", lambda *a, **k: pytest.fail("no episode should run"))
    evaluate.main(TINY + ["--seeds", "0", "1", "--target", "0.25", "--out", str(out), "--no-plots", "--resume",
                          "--reference", "afl"])
    md = (out / "summary.md").read_text()
    assert "Δ rounds vs afl" in md and "Δ rounds vs random" not in md
    assert records(out) == records(default_run)


def test_common_random_numbers(default_run, tmp_path):
    """Two policies making the same choices get identical metrics; every policy sees the same federation."""
    out = tmp_path / "crn"
    # two instances of the same seeded agent under different labels, and a deterministic agent twice
    evaluate.main(TINY + ["--seeds", "0", "1", "--out", str(out), "--no-plots", "--policy", "a=random",
                          "--policy", "b=random", "--policy", "c=fedcs", "--policy", "d=fedcs"])
    recs = records(out)
    for seed in (0, 1):
        for x, y in (("a", "b"), ("c", "d")):
            rx, ry = recs[f"{x}|fedavg|{seed}"], recs[f"{y}|fedavg|{seed}"]
            assert rx["metrics"] == ry["metrics"] and rx["curves"] == ry["curves"]
            assert rx["clients"] == ry["clients"]
    # different policies: the same partition, initial model and profiling round for the same seed
    default = records(default_run)
    for seed in (0, 1):
        first = {(r["curves"]["accuracy"][0], r["profiling_time"], tuple(r["clients"]["num_samples"]))
                 for r in default.values() if r["seed"] == seed}
        assert len(first) == 1
    assert default["random|fedavg|0"]["curves"]["accuracy"][0] != default["random|fedavg|1"]["curves"]["accuracy"][0]
    assert default["random|fedavg|0"]["metrics"] != default["rpow_d|fedavg|0"]["metrics"]


def test_resume_skips_finished_episodes(tmp_path, monkeypatch):
    out = tmp_path / "resume"
    args = TINY + ["--seeds", "0", "1", "--out", str(out), "--no-plots", "--policy", "random",
                   "--policy", "afl"]
    evaluate.main(args)
    full = records(out)
    lines = (out / "episodes.jsonl").read_text().splitlines(keepends=True)
    # an interruption: two episodes never finished, the last append was cut mid-line
    (out / "episodes.jsonl").write_text("".join(lines[:2]) + lines[2][:40])

    calls = []
    real = episodes.run_episode
    monkeypatch.setattr(episodes, "run_episode",
                        lambda env, policy, seed, **kw: calls.append(seed) or real(env, policy, seed, **kw))
    with pytest.raises(ValueError, match="--resume"):
        evaluate.main(args)  # an existing evaluation is not silently overwritten
    evaluate.main(args + ["--resume"])
    assert len(calls) == 2  # only the two unfinished episodes ran
    assert records(out) == full
    evaluate.main(args + ["--resume"])
    assert len(calls) == 2  # nothing left to run


def test_resume_refuses_a_different_config(tmp_path):
    out = tmp_path / "cfg"
    evaluate.main(TINY + ["--seeds", "0", "--out", str(out), "--no-plots", "--policy", "random"])
    with pytest.raises(ValueError, match=r"different evaluation.*max_rounds: 3 → 2"):
        evaluate.main(["--env", "tiny", "--rounds", "2", "--seeds", "0", "--out", str(out), "--no-plots",
                       "--no-progress", "--policy", "random", "--resume"])
    with pytest.raises(ValueError, match=r"seeds"):
        evaluate.main(TINY + ["--seeds", "0", "1", "--out", str(out), "--no-plots", "--policy", "random",
                              "--resume"])
    evaluate.main(TINY + ["--seeds", "0", "1", "--out", str(out), "--no-plots", "--policy", "random",
                          "--overwrite"])
    assert sorted(records(out)) == ["random|fedavg|0", "random|fedavg|1"]


@pytest.fixture(scope="module")
def trained_favor(tmp_path_factory):
    """A tiny FAVOR model trained by train_agent.py (its run folder: model.zip, env_config.yaml, args.yaml)."""
    import train_agent

    runs = tmp_path_factory.mktemp("train")
    return train_agent.main(["--algo", "favor", "--env", "tiny", "--n-timesteps", "30", "--runs-dir", str(runs),
                             "--name", "favor_tiny", "--eval-freq", "0", "--save-freq", "0", "--no-progress-bar",
                             "--verbose", "0", "--hyperparams", "learning_starts=10", "buffer_size=100"])


def test_trained_model_goes_through_the_same_path_as_agents(trained_favor, tmp_path):
    out = tmp_path / "model"
    zip_path = trained_favor / "model.zip"
    evaluate.main(TINY + ["--seeds", "0", "1", "--out", str(out), "--policy", "random",
                          "--policy", str(trained_favor), "--policy", f"byname=favor:model_path={zip_path}"])
    recs = records(out)
    model = recs["favor:favor_tiny|fedavg|0"]
    assert set(model) == set(recs["random|fedavg|0"])
    assert set(model["metrics"]) == set(recs["random|fedavg|0"]["metrics"])
    for seed in (0, 1):  # the run folder and the registered agent with model_path= are the same policy
        a, b = recs[f"favor:favor_tiny|fedavg|{seed}"], recs[f"byname|fedavg|{seed}"]
        assert a["metrics"] == b["metrics"] and a["curves"] == b["curves"]
    config = json.loads((out / "config.json").read_text())
    described = config["policies"][1]
    assert described["kind"] == "model" and described["algo"] == "favor" and len(described["sha256"]) == 64
    # the deployed FAVOR agent picks the K available clients with the highest Q-values: replay seed 0
    from agents.favor import FavorAgent
    from fedsel_env.env import FedSelectEnv

    env = FedSelectEnv(config=ev.make_plan(env="tiny", policies=["random"], rounds=3).env_config)
    agent = FavorAgent.load(zip_path, env.selection_spec)
    obs, _ = env.reset(seed=0)
    accs = []
    for _ in range(3):
        obs, _, term, trunc, info = env.step(agent.predict(obs)[0])
        accs.append(info["accuracy"])
        if term or trunc:
            break
    assert model["curves"]["accuracy"][1:] == accs


def test_model_with_a_policy_cut_short_names_the_file(trained_favor, tmp_path):
    """Issue #15, item 7: a policy.pth cut short inside a valid model zip (a partial copy) is a ValueError
    naming the file and the fix, not torch's RuntimeError; nothing is written."""
    import shutil
    import zipfile

    run = tmp_path / "favor_tiny"
    shutil.copytree(trained_favor, run)
    with zipfile.ZipFile(run / "model.zip") as z:
        items = {n: z.read(n) for n in z.namelist()}
    with zipfile.ZipFile(run / "model.zip", "w") as z:
        for name, data in items.items():
            z.writestr(name, data[: len(data) // 2] if name == "policy.pth" else data)
    with pytest.raises(ValueError, match=r"cannot load model '.*favor_tiny/model\.zip' \(RuntimeError: .*copy it "
                                         r"again, or train it again"):
        evaluate.main(TINY + ["--seeds", "0", "--out", str(tmp_path / "out"), "--policy", str(run)])
    assert not (tmp_path / "out").exists()


def test_sb3_policy_model_acts_in_the_env_mode(tmp_path):
    """A PPO model saved in train_agent.py's layout is evaluated through ModelPolicy (flat observation)."""
    import yaml
    from stable_baselines3 import PPO

    from fedsel_env.config import make_config
    from fedsel_env.env import FedSelectEnv

    cfg = make_config({"observation": "flat", "flat_parts": ["weights", "progress"], "max_rounds": 3},
                      preset="tiny")
    run = tmp_path / "ppo_run"
    run.mkdir()
    PPO("MlpPolicy", FedSelectEnv(config=cfg), n_steps=8, batch_size=8, seed=0, device="cpu").save(run / "model.zip")
    (run / "env_config.yaml").write_text(yaml.safe_dump(cfg))
    (run / "args.yaml").write_text(yaml.safe_dump({"algo": "ppo"}))
    out = tmp_path / "eval"
    evaluate.main(TINY + ["--seeds", "0", "--out", str(out), "--no-plots", "--policy", str(run)])
    recs = records(out)
    assert list(recs) == ["ppo:ppo_run|fedavg|0"]
    assert sum(recs["ppo:ppo_run|fedavg|0"]["curves"]["responders"]) > 0
    with pytest.raises(ValueError, match="action space"):  # trained in topk, asked to act in subset
        evaluate.main(TINY + ["--seeds", "0", "--out", str(tmp_path / "x"), "--policy", str(run),
                              "--env-kwargs", "action_mode=subset"])


@pytest.mark.parametrize("argv, message", [
    (["--policy", "nope"], r"unknown policy 'nope'.*'random'"),
    (["--policy", "rbcsf:v"], r"bad parameter 'v' for agent 'rbcsf'.*KEY=VALUE"),
    (["--policy", "rbcsf:zzz=1"], r"bad parameters \['zzz'\] for agent 'rbcsf'.*allowed"),
    (["--policy", "rbcsf:beta=0.9"], r"'beta' = 0.9 is infeasible"),
    (["--policy", "random", "--policy", "random"], r"\['random'\] given more than once.*LABEL="),
    (["--policy", "runs/none/model.zip"], r"model path 'runs/none/model.zip' does not exist"),
    (["--aggregator", "fedavgg"], r"unknown aggregator 'fedavgg'.*'qfedavg'"),
    (["--aggregator", "qfedavg:q=-1"], r"qfedavg parameter 'q' = -1.*>= 0|qfedavg parameter 'q' = -1.*≥ 0"),
    (["--aggregator", "fedavg:zz=1"], r"unknown aggregator parameter\(s\) \['zz'\].*'weighting'"),
    (["--aggregator", "fedavg", "--aggregator", "qfedavg", "--aggregator-param", "q=1"],
     r"--aggregator-param applies to a single --aggregator"),
    (["--env", "nowhere"], r"unknown --env 'nowhere'.*'tiny'"),
    (["--env", "missing.yaml"], r"config file 'missing.yaml' does not exist"),
    (["--seeds", "0", "0"], r"seed is repeated"),
    (["--rounds", "0"], r"max_rounds"),
    (["--target", "1.5"], r"target_accuracy"),
    (["--workers", "0"], r"--workers = 0"),
    (["--config", "nowhere.yaml"], r"eval config file 'nowhere.yaml' does not exist"),
    (["--policy", "afl", "--reference", "random"],
     r"--reference 'random' is not one of the evaluated policies \['afl'\].*--policy random"),
])
def test_bad_input_fails_at_once_with_a_clear_message(argv, message, tmp_path):
    base = ["--env", "tiny", "--no-progress", "--no-plots", "--out", str(tmp_path / "bad")]
    with pytest.raises(ValueError, match=message):
        evaluate.main(base + argv)
    assert not (tmp_path / "bad" / "episodes.jsonl").exists()


def test_model_folder_without_model_lists_what_is_there(tmp_path):
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "ckpt_10_steps.zip").write_bytes(b"")
    with pytest.raises(ValueError, match=r"no model.zip.*ckpt_10_steps.zip"):
        ev.parse_policy(str(tmp_path / "run"))


def test_params_and_policy_syntax():
    assert ev.parse_params("v=10,beta=0.1,alpha=[1, 2],name=x", "t") == {"v": 10, "beta": 0.1, "alpha": [1, 2],
                                                                        "name": "x"}
    p = ev.parse_policy("fast=rbcsf:v=50")
    assert (p.label, p.source, p.params) == ("fast", "rbcsf", {"v": 50})
    assert ev.parse_policy("rbcsf:v=10,beta=0.1").label == "rbcsf(v=10,beta=0.1)"
    b = ev.parse_backend("qfedavg:q=1")
    assert (b.label, b.name, b.params) == ("qfedavg(q=1)", "qfedavg", {"q": 1})
    with pytest.raises(ValueError, match="given twice"):
        ev.parse_params("q=1,q=2", "t")


def test_eval_config_files_resolve(tmp_path):
    """Every example in configs/eval/ is a valid evaluation; unknown keys are refused."""
    files = sorted((REPO / "configs" / "eval").glob("*.yaml"))
    assert len(files) >= 3
    for f in files:
        args = evaluate.parse_args(["--config", str(f)])
        plan = ev.make_plan(env=args.env, policies=args.policy, aggregators=args.aggregator,
                            aggregator_params=args.aggregator_param, seeds=args.seeds, rounds=args.rounds,
                            target=args.target, env_overrides=args.env_kwargs)
        assert plan.tasks() and args.name == f.stem
    bad = tmp_path / "bad.yaml"
    bad.write_text("env: tiny\npolicies: [random]\n")
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['policies'\].*'policy'"):
        evaluate.parse_args(["--config", str(bad)])
    # options on the command line win over the file
    args = evaluate.parse_args(["--config", str(REPO / "configs/eval/hetero_system.yaml"), "--seeds", "7"])
    assert args.seeds == [7] and args.env == "hetero" and args.rounds == 100


@pytest.mark.slow
def test_workers_give_the_same_results_as_serial(default_run, tmp_path):
    out = tmp_path / "parallel"
    evaluate.main(TINY + ["--seeds", "0", "1", "--target", "0.25", "--out", str(out), "--no-plots",
                          "--policy", "random", "--policy", "afl", "--policy", "rbcsf", "--workers", "2"])
    parallel = records(out)
    serial = records(default_run)
    assert len(parallel) == 6
    for key, r in parallel.items():
        assert r == serial[key]


def test_default_run_folders_are_numbered_so_the_same_command_reruns(tmp_path):
    args = TINY + ["--seeds", "0", "--no-plots", "--policy", "random", "--runs-dir", str(tmp_path)]
    evaluate.main(args)
    evaluate.main(args)  # the README's command run twice: a second folder, not an error
    assert (tmp_path / "tiny" / "config.json").exists() and (tmp_path / "tiny-2" / "config.json").exists()
    evaluate.main(args + ["--resume"])  # resumes the latest: nothing new to run, no third folder
    assert not (tmp_path / "tiny-3").exists()


@pytest.fixture(scope="module")
def trained_favor_d3(tmp_path_factory):
    """A tiny FAVOR model whose state has 3 PCA components (the tiny preset's default is N + 1 = 9)."""
    import train_agent

    runs = tmp_path_factory.mktemp("train_d3")
    return train_agent.main(["--algo", "favor", "--env", "tiny", "--n-timesteps", "20", "--runs-dir", str(runs),
                             "--name", "favor_d3", "--eval-freq", "0", "--save-freq", "0", "--no-progress-bar",
                             "--verbose", "0", "--hyperparams", "learning_starts=10", "buffer_size=100",
                             "--env-kwargs", "pca_components=3"])


def test_evaluation_env_takes_the_models_pca_size(trained_favor_d3):
    """The PCA size is the env's side of the model's input: the evaluation adopts it and says so."""
    plan = ev.make_plan(env="tiny", policies=["random", str(trained_favor_d3)], rounds=2)
    assert plan.env_config["pca_components"] == 3
    assert any("pca_components = 3" in n for n in plan.notes)
    # a value the user sets wins, and a model that cannot act there is refused, naming the field
    with pytest.raises(ValueError, match=r"d=4\).*pca_components"):
        ev.make_plan(env="tiny", policies=[str(trained_favor_d3)], rounds=2, env_overrides={"pca_components": 4})


def test_restart_if_changed_sets_the_old_evaluation_aside(tmp_path):
    """A folder of another config is started over (the reproduction scripts' rule), but its finished
    episodes are moved to superseded-<time>/, not deleted (a smoke run once wiped an hour-long run)."""
    out = tmp_path / "run"
    env = {"preset": "tiny", "max_rounds": 2}
    ev.run(out, env=env, policies=["random"], seeds=[0], resume=True, restart_if_changed=True, plots=False)
    first = (out / "episodes.jsonl").read_text()
    lines = []
    ev.run(out, env={**env, "max_rounds": 3}, policies=["random"], seeds=[0], resume=True, restart_if_changed=True,
           plots=False, log=lines.append)
    kept = list(out.glob("superseded-*"))
    assert len(kept) == 1 and (kept[0] / "episodes.jsonl").read_text() == first
    assert any("moved to" in line for line in lines)
    new = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(new) == 1 and new[0]["metrics"]["rounds"] == 3
    with pytest.raises(ValueError, match="different evaluation"):  # without the flag it is still refused
        ev.run(out, env=env, policies=["random"], seeds=[0], resume=True, plots=False)
