"""experiments/per_client_analysis.py (issue #19) and the one-step oracle it plays (agents/one_step_oracle.py):
its statistics on hand-made cases, its --smoke run end to end (outputs, traces that replay the evaluated
episodes, nothing published), and clear errors for bad input."""
from __future__ import annotations

import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agents.one_step_oracle import OneStepOracle, one_mode_step, oracle_scores, shared_data  # noqa: E402
from experiments import common, per_client_analysis as pca  # noqa: E402

torch.set_num_threads(1)


def test_spearman_by_hand():
    assert pca.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert pca.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties take average ranks: (1, 2.5, 2.5, 4) against (1, 2, 3, 4) -> 4.5 / sqrt(4.5 * 5)
    assert pca.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert math.isnan(pca.spearman([1, 1, 1], [1, 2, 3]))  # a constant feature has no rank order
    assert math.isnan(pca.spearman([1], [2]))


def test_topk_overlap_by_hand_and_uniform_picks_score_k_over_n():
    values = [5.0, 4.0, 3.0, 2.0, 1.0]
    assert pca.topk_overlap([0, 1], values, 2) == 1.0
    assert pca.topk_overlap([0, 2], values, 2) == 0.5
    assert pca.topk_overlap([3, 4], values, 2) == 0.0
    # three clients tie for the last two of K = 3 places: each is in the top K with probability 2/3
    assert pca.topk_overlap([1], [9.0, 1.0, 1.0, 1.0], 3) == pytest.approx(2 / 3)
    assert pca.topk_overlap([0, 1], [1.0, 2.0], 2) == 1.0  # no more clients than K
    # averaged over every K-subset of picks, the overlap is K/N (the "random" column), with ties or without
    for vals in ([5.0, 4.0, 3.0, 2.0, 1.0, 0.0], [2.0, 1.0, 1.0, 1.0, 0.0, 0.0]):
        k, n = 2, len(vals)
        mean = np.mean([pca.topk_overlap(list(c), vals, k) for c in itertools.combinations(range(n), k)])
        assert mean == pytest.approx(k / n)


def test_r_squared_and_standardise():
    x = np.arange(10.0)
    assert pca.r_squared(2 * x + 1, x[:, None]) == pytest.approx(1.0)
    assert pca.r_squared(np.array([1.0, -1.0, 1.0, -1.0]), np.array([[1.0], [1.0], [2.0], [2.0]])) == pytest.approx(0.0)
    z = pca.standardise(np.array([[1.0, 3.0], [3.0, 3.0]]))
    assert z.tolist() == [[-1.0, 0.0], [1.0, 0.0]]  # a constant column becomes 0


def test_episode_stats_on_a_hand_made_trace():
    """Two rounds, four available clients, K = 2; the score follows the current loss and ignores the rest."""
    names = ["pca_0", "pca_distance", "loss", "rounds_since_selected"]
    loss_now = np.array([0.1, 0.4, 0.3, 0.2, 1.0, 2.0, 3.0, 4.0])
    tokens = np.column_stack([np.array([1.0, -1, 1, -1, 1, -1, 1, -1]),       # pca_0: unrelated
                              np.ones(8),                                     # pca_distance: constant
                              -loss_now,                                      # reported loss: opposite order
                              np.array([0.0, 0, 1, 1, 3, 2, 1, 0])])          # rounds since selected
    score = 10 * loss_now
    picked = np.array([False, True, True, False, False, False, True, True])  # the two highest scores
    tr = {"round": np.repeat([0, 1], 4), "client": np.tile(np.arange(4), 2), "tokens": tokens, "score": score,
          "current_loss": loss_now, "oracle": np.full(8, np.nan), "picked": picked, "rounds": np.int64(2),
          "reached": np.bool_(True)}
    e = pca.episode_stats(tr, names, k=2)
    assert e["spearman"]["current_loss"] == pytest.approx(1.0)
    assert e["spearman"]["loss"] == pytest.approx(-1.0)
    assert e["loss_spearman"]["loss"] == pytest.approx(-1.0)  # the current loss against the token's columns
    assert math.isnan(e["spearman"]["pca_distance"])
    assert math.isnan(e["spearman"]["oracle_value"])  # not recorded
    assert e["overlap"]["current_loss"] == 1.0 and e["overlap"]["reported_loss"] == 0.0
    # rounds since selected: round 0's top 2 are clients 2, 3 (picked 1, 2 -> 1/2); round 1's are 0, 1 (picked 2, 3 -> 0)
    assert e["overlap"]["rounds_since_selected"] == pytest.approx(0.25)
    assert e["random_overlap"] == pytest.approx(0.5)
    assert e["z_features"].shape == (8, 4) and np.allclose(e["z_features"][:, 1], 0.0)


def test_one_step_oracle_picks_the_k_best_one_step_clients_and_leaves_the_env_alone():
    from fedsel_env.env import FedSelectEnv

    cfg = {"preset": "tiny", "federation_seed": 0, "max_rounds": 3, "target_accuracy": 1.0}
    with FedSelectEnv(config=cfg) as env, FedSelectEnv(config=cfg) as twin:
        obs, _ = env.reset(seed=3)
        twin.reset(seed=3)
        agent = OneStepOracle(env.selection_spec)
        with pytest.raises(ValueError, match="bind it first"):
            agent.select(obs)
        agent.bind(env)
        picks = agent.select(obs)
        s = agent.last_scores
        avail = np.flatnonzero(env.action_masks())
        assert len(picks) == env.k and set(picks) <= set(avail.tolist())
        assert min(s[picks]) >= max(np.delete(s, picks)[np.isfinite(np.delete(s, picks))], default=-np.inf)
        assert np.array_equal(s, oracle_scores(env, one_mode_step("1/K", env.k)))  # deterministic
        action = agent.to_action(picks)
        _, _, _, _, info = env.step(action)
        _, _, _, _, info_twin = twin.step(action)  # the twin never played the probes
        assert info["accuracy"] == info_twin["accuracy"]
    with pytest.raises(ValueError, match="step"):
        one_mode_step("2", 5)
    assert one_mode_step("1/K", 5) == 0.2


def _docs_state() -> dict:
    files = [*sorted(common.IMG_DIR.glob("repro_*.png")), *sorted(common.RESULTS_DIR.glob("*.json")), common.DOC,
             ROOT / "docs" / "TRAINING.md"]
    return {str(f): f.stat().st_mtime_ns for f in files if f.exists()}


@pytest.mark.slow
def test_smoke_run_writes_its_outputs_and_replays_the_evaluated_episodes(tmp_path):
    before = _docs_state()
    out = pca.main(["--smoke", "--out", str(tmp_path / "a"), "--no-progress"])
    res = json.loads((out / "results.json").read_text())
    assert "commit" in res and "dirty" in res
    names = pca.analysed_features(pca.feature_names(res["pca_components"]))
    assert set(res["scores"]["features"]) == {*names, "current_loss", "oracle_value"}
    assert set(res["scores"]["oracle_features"]) == {*names, "current_loss"}
    assert set(res["scores"]["overlap"]) == {"per_client", "pow_d", "rpow_d", "random"}
    assert set(res["scores"]["loss_features"]) == set(names)
    assert set(res["scores"]["r2"]) == {"score", "current_loss", "oracle"}
    for r in res["scores"]["r2"].values():
        assert all(v["mean"] is None or -1e-9 <= v["mean"] <= 1 + 1e-9 for v in r.values())
    # num_samples is equal for every client of the tiny preset: no rank order, reported as constant
    assert "num_samples" in res["scores"]["constant_features"]
    assert {"oracle-random", "oracle-pow_d", "per_client-pow_d", "rpow_d-pow_d"} <= set(res["bound"]["paired"])
    assert all(res["traces_replay_evaluation"].values())  # the traces are the deployed, evaluated episodes
    assert len(list((out / "traces").glob("*.npz"))) == 4 * 2  # (model, pow_d, rpow_d, random) x 2 seeds
    table = (out / "table.md").read_text()
    assert "Produced at commit" in table and "--smoke" in table and "img/repro_per_client_analysis_smoke.png" in table
    assert (out / "per_client_analysis_smoke.png").stat().st_size > 1000
    assert any(out.rglob("episodes.jsonl"))
    assert _docs_state() == before, "a --smoke run must not touch docs/ or experiments/results/"
    # a second run reuses every cached part and gives the same numbers
    again = json.loads((pca.main(["--smoke", "--out", str(tmp_path / "a"), "--no-progress"]) / "results.json")
                       .read_text())
    assert again["scores"] == res["scores"] and again["bound"] == res["bound"]
    # --oracle-seeds 1: the oracle plays the first seed only; the other seed's trace is re-made without its values
    one = json.loads((pca.main(["--smoke", "--out", str(tmp_path / "a"), "--no-progress", "--oracle-seeds", "1"])
                      / "results.json").read_text())
    assert one["oracle_seeds"] == [0] and one["bound"]["oracle_seeds"] == [0]
    assert one["bound"]["paired"]["oracle-random"]["n"] == 1 and one["bound"]["paired"]["pow_d-random"]["n"] == 2
    with np.load(out / "traces" / "per_client_s0_1.npz") as z:
        assert np.isnan(z["oracle"]).all()
    with np.load(out / "traces" / "per_client_s0_0.npz") as z:
        assert np.isfinite(z["oracle"]).all()


def test_bad_arguments_fail_with_the_option_named(tmp_path):
    with pytest.raises(ValueError, match="--models"):
        pca.main(["--smoke", "--out", str(tmp_path), "--no-progress", "--models", str(tmp_path / "nothing")])
    with pytest.raises(ValueError, match="--oracle-seeds"):
        pca.main(["--smoke", "--out", str(tmp_path), "--no-progress", "--oracle-seeds", "0"])


def test_oracle_probes_share_the_data_and_score_as_full_copies():
    from fedsel_env.env import FedSelectEnv

    with FedSelectEnv(config={"preset": "tiny", "federation_seed": 0, "max_rounds": 3}) as env:
        env.reset(seed=5)
        data = env.federation.data
        before = data.x_train.clone()
        assert {id(data.x_train), id(data.y_train), id(data.x_test), id(data.y_test)} <= set(shared_data(env))
        shared = oracle_scores(env, 0.5)
        assert np.array_equal(shared, oracle_scores(env, 0.5, share_data=False))
        assert torch.equal(env.federation.data.x_train, before)  # the probes wrote nothing into the data
