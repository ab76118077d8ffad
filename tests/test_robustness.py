"""Robustness and security (issue #8): attackers, unreliable clients, divergence, atomic writes.

- the ``adversary`` config is validated field by field; with every knob off the simulator is
  bit for bit the honest one;
- each attack forges exactly what docs/ROBUSTNESS.md says, checked by hand on small cases
  (reported losses, forged models and gradients, free riders), and FedMGDA+'s normalisation makes
  it immune to update scaling while FedAvg is pulled off (docs/SPEC.md §6);
- drop-outs, heavy-tailed stragglers and the deadline decide whose update counts and how long a
  round lasts; their draws are common random numbers across policies;
- the robustness metrics in ``info`` are counted by hand;
- diverging runs end with the divergence flag and a finite observation;
- evaluate.py and train_agent.py killed with SIGKILL mid-run leave their files intact and resume.
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import agents
from fedsel_env.sim.adversary import MAX_DELAY, Adversary, HonestClients
from fedsel_env.config import DEFAULT_CONFIG, make_config
from fedsel_env.env import FedSelectEnv
from fedsel_env.spec import FEATURE_INDEX
from fedsel_eval import markdown

from conftest import SMALL

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
# conftest's SMALL federation (6 clients, K = 2) in the subset mode with everyone available: the tests pick
# clients by index and count them by hand.
SUBSET = {"action_mode": "subset", "system": {"availability": 1.0}}
LOSS, RMS = FEATURE_INDEX["loss"], FEATURE_INDEX["loss_rms"]


@pytest.fixture
def make(make_env):
    """``make(adversary, **overrides)``: a SMALL subset-mode env with that adversary (none by default)."""
    def build(adversary=None, **over) -> FedSelectEnv:
        return make_env(**{**SUBSET, **over, "adversary": adversary or {}})
    return build


def pick(*clients: int, n: int = 6) -> np.ndarray:
    a = np.zeros(n, dtype=np.int8)
    a[list(clients)] = 1
    return a


def spy(env: FedSelectEnv) -> list:
    """Record every ClientUpdates the backend receives."""
    seen = []
    agg = env.federation.aggregator
    inner = agg.aggregate

    def aggregate(updates):
        seen.append(updates)
        return inner(updates)

    agg.aggregate = aggregate
    return seen


# ============================================================================================= config
@pytest.mark.parametrize("adversary, match", [
    ({"attackers": [6]}, r"adversary\.attackers"),
    ({"attackers": [0, 0]}, r"adversary\.attackers"),
    ({"attackers": [True]}, r"adversary\.attackers"),
    ({"attackers": "0,1"}, r"adversary\.attackers"),
    ({"attackers": [0, 1, 2, 3, 4, 5]}, "at least one client must be honest"),
    ({"attacker_fraction": 1.0}, r"adversary\.attacker_fraction"),
    ({"attacker_fraction": 0.99}, "at least one client must be honest"),
    ({"attacker_fraction": -0.1}, r"adversary\.attacker_fraction"),
    ({"attackers": [1], "attacker_fraction": 0.5}, "not both"),
    ({"attackers": [1], "loss_scale": -1.0}, r"adversary\.loss_scale"),
    ({"attackers": [1], "loss_shift": float("nan")}, r"adversary\.loss_shift"),
    ({"attackers": [1], "update_scale": float("inf")}, r"adversary\.update_scale"),
    ({"attackers": [1], "update_bias": -0.1}, r"adversary\.update_bias"),
    ({"attackers": [1], "free_rider": "yes"}, r"adversary\.free_rider"),
    ({"loss_scale": 10.0}, "no attackers"),
    ({"free_rider": True}, "no attackers"),
    ({"dropout": 1.5}, r"adversary\.dropout"),
    ({"straggler_fraction": 2}, r"adversary\.straggler_fraction"),
    ({"straggler_distribution": "cauchy"}, r"adversary\.straggler_distribution.*pareto"),
    ({"straggler_scale": 0}, r"adversary\.straggler_scale"),
    ({"straggler_shape": -1}, r"adversary\.straggler_shape"),
    ({"deadline": 0}, r"adversary\.deadline"),
    ({"deadline": float("inf")}, r"adversary\.deadline"),
    ({"delay": 3}, r"unknown config field\(s\) adversary"),
])
def test_bad_adversary_fields_raise_value_error_naming_them(adversary, match):
    with pytest.raises(ValueError, match=match):
        make_config({**SMALL, **SUBSET, "adversary": adversary})


def test_adversary_defaults_are_all_off_and_merge_key_by_key():
    cfg = make_config({"adversary": {"dropout": 0.25}})
    assert cfg["adversary"] == {**DEFAULT_CONFIG["adversary"], "dropout": 0.25}
    assert make_config({"adversary": None})["adversary"] == DEFAULT_CONFIG["adversary"]
    with pytest.raises(ValueError, match="'adversary'"):
        make_config({"adversary": 3})


def test_neutral_adversary_is_bit_for_bit_the_honest_simulator(make):
    """Labelled attackers with no attack, and the federation with honest clients' hooks, play identically."""
    def trajectory(adversary, drop_adversary):
        env = make(adversary, aggregator="qfedavg", system={"availability": 0.7})
        obs, _ = env.reset(seed=5)
        if drop_adversary:
            env.federation.adversary = HonestClients(env.num_clients)
        out = [obs]
        for a in ([1, 2], [0, 5], [3, 4], [2, 3]):
            obs, r, *_, info = env.step(pick(*a))
            out += [obs, r, info["clock"], env.federation.global_params.clone()]
        return out

    def same(a, b):
        for x, y in zip(a, b):
            if isinstance(x, dict):
                assert all(np.array_equal(x[k], y[k]) for k in x)
            elif isinstance(x, torch.Tensor):
                assert torch.equal(x, y)
            else:
                assert x == y

    base = trajectory({}, True)
    same(base, trajectory({}, False))
    same(base, trajectory({"attackers": [0, 2]}, False))


def test_env_checkers_pass_with_every_scenario_on(make):
    from gymnasium.utils.env_checker import check_env

    env = make({"attackers": [1], "loss_scale": 5.0, "update_scale": -2.0, "update_bias": 0.1, "dropout": 0.3,
                "straggler_fraction": 0.5, "straggler_distribution": "lognormal", "deadline": 9.0},
               system={"availability": 0.8})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, skip_render_check=True)  # includes: same seed, same observations (determinism)


def test_attackers_and_stragglers_are_drawn_from_the_federation_seed(make):
    env = make({"attacker_fraction": 0.3, "straggler_fraction": 0.5}, federation_seed=11)
    _, info_a = env.reset(seed=1)
    _, info_b = env.reset(seed=2)
    assert len(info_a["attackers"]) == 2 and len(info_a["stragglers"]) == 3  # round(0.3·6), round(0.5·6)
    np.testing.assert_array_equal(info_a["attackers"], info_b["attackers"])
    np.testing.assert_array_equal(info_a["stragglers"], info_b["stragglers"])
    assert len(make({"attacker_fraction": 0.01}).reset(seed=0)[1]["attackers"]) == 1  # a fraction > 0: at least one
    _, info = make({"attackers": [4, 1]}).reset(seed=0)
    assert info["attackers"] == [1, 4]


# ============================================================================================ attacks
def test_loss_inflation_reaches_the_observation_and_the_backend(make):
    """Each per-sample loss l is reported as s·l + b: F' = s·F + b, rms' = √(s²·rms² + 2sbF + b²)."""
    s, b = 3.0, 0.5
    env = make({"attackers": [0], "loss_scale": s, "loss_shift": b}, aggregator="qfedavg")
    obs, _ = env.reset(seed=0)
    fed = env.federation
    f0, r0 = fed.trainer.client_losses(fed.global_params, np.arange(6))
    np.testing.assert_allclose(obs["clients"][0, LOSS], s * f0[0] + b, rtol=1e-6)  # the profiling round too
    np.testing.assert_allclose(obs["clients"][1:, LOSS], f0[1:], rtol=1e-6)
    seen = spy(env)
    w_t = fed.global_params.clone()
    f, rms = fed.trainer.client_losses(w_t, [0, 1])
    obs, *_ = env.step(pick(0, 1))
    expect_f = [s * f[0] + b, f[1]]
    expect_rms = [np.sqrt(s * s * rms[0] ** 2 + 2 * s * b * f[0] + b * b), rms[1]]
    np.testing.assert_allclose(seen[0].losses_before.numpy(), expect_f, rtol=1e-6)
    np.testing.assert_allclose(obs["clients"][[0, 1], LOSS], expect_f, rtol=1e-6)
    np.testing.assert_allclose(obs["clients"][[0, 1], RMS], expect_rms, rtol=1e-6)


def test_negative_shift_is_clipped_at_zero(make):
    env = make({"attackers": [0], "loss_shift": -1e6})
    obs, _ = env.reset(seed=0)
    assert obs["clients"][0, LOSS] == 0.0 and obs["clients"][0, RMS] == 0.0
    env.step(pick(0, 1))  # q-FFL-style backends get a valid (non-negative) loss


def test_update_scaling_and_bias_forge_the_local_model(make):
    s, beta = 4.0, 0.3
    env = make({"attackers": [0], "update_scale": s, "update_bias": beta}, federation_seed=3)
    env.reset(seed=0)
    fed = env.federation
    seen = spy(env)
    w_t = fed.global_params.clone()
    honest = fed.trainer.train(w_t, [0, 1], fed.generators(env._round + 1, [0, 1]))
    env.step(pick(0, 1))
    u = fed.adversary.bias_direction
    assert float(u.norm()) == pytest.approx(1.0, rel=1e-6)
    torch.testing.assert_close(seen[0].local_params[0], w_t + s * (honest[0] - w_t) + beta * u)
    assert torch.equal(seen[0].local_params[1], honest[1])  # the honest client is untouched
    other = make({"attackers": [2], "update_bias": 1.0}, federation_seed=3)
    other.reset(seed=9)
    assert torch.equal(other.federation.adversary.bias_direction, u)  # one direction per federation


def test_free_riders_return_the_global_model_and_fedavg_averages_it_in(make):
    env = make({"attackers": [0], "free_rider": True})
    env.reset(seed=0)
    fed = env.federation
    seen = spy(env)
    w_t = fed.global_params.clone()
    honest = fed.trainer.train(w_t, [0, 1], fed.generators(env._round + 1, [0, 1]))
    env.step(pick(0, 1))
    assert torch.equal(seen[0].local_params[0], w_t)
    n = fed.num_samples[[0, 1]].astype(np.float64)
    expect = (n[0] * w_t.double() + n[1] * honest[1].double()) / n.sum()
    torch.testing.assert_close(fed.global_params.double(), expect, rtol=1e-5, atol=1e-6)


def test_gradient_backends_get_forged_gradients(make):
    for adversary, factor in (({"attackers": [0], "update_scale": -2.0}, -2.0), ({"attackers": [0], "free_rider": True}, 0.0)):
        env = make(adversary, aggregator="qfedsgd")
        env.reset(seed=0)
        fed = env.federation
        seen = spy(env)
        g = fed.trainer.full_gradients(fed.global_params, [0, 1])
        env.step(pick(0, 1))
        torch.testing.assert_close(seen[0].gradients[0], factor * g[0])
        torch.testing.assert_close(seen[0].gradients[1], g[1])


def _run_fixed(make, adversary, aggregator, rounds=4):
    env = make(adversary, aggregator=aggregator, max_rounds=rounds, system={"availability": 1.0, "noise_std": 0.0})
    env.reset(seed=2)
    for t in range(rounds):
        env.step(pick(0, 1 + t % 5))
    return env.federation.global_params.clone()


def test_fedmgda_plus_is_immune_to_update_scaling_while_fedavg_is_pulled_off(make):
    """docs/SPEC.md §6 / FedMGDA+ §5: the normalised updates ḡ_i = g_i / ‖g_i‖ ignore a client's scale factor."""
    attack = {"attackers": [0], "update_scale": 25.0}
    honest, scaled = _run_fixed(make, {}, "fedmgda+"), _run_fixed(make, attack, "fedmgda+")
    torch.testing.assert_close(scaled, honest, rtol=1e-4, atol=1e-5)
    honest, scaled = _run_fixed(make, {}, "fedavg"), _run_fixed(make, attack, "fedavg")
    assert float((scaled - honest).norm()) > 0.5 * float(honest.norm())


# ================================================================================== unreliable clients
def test_everyone_drops_out(make):
    env = make({"dropout": 1.0})
    obs, _ = env.reset(seed=0)
    w = env.federation.global_params.clone()
    obs2, r, term, trunc, info = env.step(pick(2, 4))
    assert info["responders"] == [] and info["dropped"] == [2, 4]
    assert info["round_time"] == 0.0 and info["dropouts"] == 2
    assert torch.equal(env.federation.global_params, w)
    np.testing.assert_array_equal(obs2["clients"][:, LOSS], obs["clients"][:, LOSS])
    assert np.all(obs2["clients"][[2, 4], FEATURE_INDEX["ctx_cold"]] == 1)  # they did not take part


def test_drop_outs_are_common_random_numbers_and_have_the_configured_rate(make):
    for seed in range(4):
        dropped = []
        for other in (1, 2):
            env = make({"dropout": 0.5})
            env.reset(seed=seed)
            dropped.append(0 in env.step(pick(0, other))[4]["dropped"])
        assert dropped[0] == dropped[1]  # client 0's fate does not depend on who else was picked
    adv = Adversary(make_config({"adversary": {"dropout": 0.3}})["adversary"], 50, 0, 0, 10)
    rate = np.mean([adv.draw_round().dropped.mean() for _ in range(400)])
    assert abs(rate - 0.3) < 4 * np.sqrt(0.3 * 0.7 / 20000)


@pytest.mark.parametrize("distribution", ["pareto", "lognormal"])
def test_straggler_delays_are_heavy_tailed_with_the_configured_quantiles(distribution):
    cfg = make_config({"adversary": {"straggler_fraction": 0.5, "straggler_distribution": distribution,
                                     "straggler_scale": 2.0, "straggler_shape": 1.5}})["adversary"]
    adv = Adversary(cfg, 10, federation_seed=7, episode_seed=0, model_size=10)
    delays = np.stack([adv.draw_round().delay for _ in range(4000)])  # (rounds, N)
    assert adv.stragglers.size == 5
    assert np.all(delays[:, ~adv.is_straggler] == 0)
    d = delays[:, adv.is_straggler].ravel()
    if distribution == "pareto":  # x_m·U^(−1/α): minimum x_m, median x_m·2^(1/α), P(X > x) = (x_m/x)^α
        assert d.min() >= 2.0
        assert np.median(d) == pytest.approx(2.0 * 2 ** (1 / 1.5), rel=0.05)
        assert np.mean(d > 20.0) == pytest.approx(0.1 ** 1.5, rel=0.2)
    else:  # median x_m, log-std σ
        assert np.median(d) == pytest.approx(2.0, rel=0.05)
        assert np.std(np.log(d)) == pytest.approx(1.5, rel=0.05)
    assert np.all(delays <= MAX_DELAY)


def test_deadline_cuts_late_clients_and_bounds_the_round(make):
    env = make({"straggler_fraction": 1.0, "straggler_scale": 100.0, "deadline": 50.0})
    env.reset(seed=0)
    w = env.federation.global_params.clone()
    obs, r, term, trunc, info = env.step(pick(1, 3))
    assert info["responders"] == [] and info["late"] == [1, 3]
    assert info["round_time"] == 50.0 and info["clock"] == 50.0 and info["late_arrivals"] == 2
    assert torch.equal(env.federation.global_params, w)
    assert np.all(obs["clients"][[1, 3], FEATURE_INDEX["ctx_cold"]] == 0)  # they trained: warm next round
    no_deadline = make({"straggler_fraction": 1.0, "straggler_scale": 100.0})
    no_deadline.reset(seed=0)
    info = no_deadline.step(pick(1, 3))[4]
    assert info["responders"] == [1, 3] and info["round_time"] >= 100.0


def test_partial_deadline_counts_only_the_clients_on_time(make):
    env = make({"straggler_fraction": 0.5, "straggler_scale": 3.0, "deadline": 8.0}, max_rounds=30,
               clients_per_round=6, target_accuracy=1.0)
    env.reset(seed=0)
    seen = spy(env)
    partial = 0
    for _ in range(30):
        obs, r, term, trunc, info = env.step(pick(*range(6)))
        tau = obs["clients"][info["responders"], FEATURE_INDEX["last_exchange_time"]]
        assert np.all(tau <= 8.0 + 1e-5)
        assert not set(info["late"]) & set(info["responders"])
        assert sorted([*info["late"], *info["responders"]]) == list(range(6))
        if info["late"]:
            assert info["round_time"] == 8.0
            partial += bool(info["responders"])
        else:
            assert info["round_time"] == pytest.approx(float(tau.max()), rel=1e-5)
        if info["responders"]:
            assert seen[-1].client_ids.tolist() == info["responders"]  # only they are aggregated
    assert partial > 0


# ============================================================================================ metrics
def test_robustness_metrics_counted_by_hand(make):
    env = make({"attackers": [0, 1]})
    _, info = env.reset(seed=0)
    assert info["honest_acc_mean"] == pytest.approx(np.mean(info["client_accuracies"][2:]))
    plan = [(0, 2), (2, 3), (1, 0), (3, 4)]
    for t, chosen in enumerate(plan, start=1):
        _, _, _, _, info = env.step(pick(*chosen))
        assert info["attacker_selected"] == bool({0, 1} & set(chosen))
    assert info["attacker_selected_rate"] == pytest.approx(2 / 4)
    assert info["attacker_response_share"] == pytest.approx(3 / 8)
    assert info["honest_acc_mean"] == pytest.approx(np.mean(info["client_accuracies"][2:]))
    assert info["attackers"] == [0, 1]
    _, info = make().reset(seed=0)
    assert info["attackers"] == [] and info["honest_acc_mean"] == pytest.approx(
        np.mean(info["client_accuracies"]))


@pytest.mark.parametrize("agent, params, honest_rate", [("rpow_d", {"d": 12}, 0.5), ("afl", {}, 0.7)])
def test_loss_inflation_games_valuation_based_selection(agent, params, honest_rate, make):
    """Power-of-Choice and AFL trust reported losses: inflating them buys the attackers a seat every round."""
    rates = []
    for adversary in ({"attackers": [0, 1]}, {"attackers": [0, 1], "loss_scale": 50.0}):
        env = make(adversary, action_mode="topk", max_rounds=10, target_accuracy=1.0, num_clients=12)
        policy = agents.make(agent, env.selection_spec, seed=0, **params)
        obs, _ = env.reset(seed=0)
        done = False
        while not done:
            obs, _, term, trunc, info = env.step(policy.predict(obs)[0])
            done = term or trunc
        rates.append(info["attacker_selected_rate"])
    assert rates[1] == 1.0 and rates[0] <= honest_rate, rates


# ========================================================================================= divergence
@pytest.mark.parametrize("aggregator", ["fedavg", "qfedavg", "qfedsgd", "fedmgda+", "fedprox"])
def test_exploding_learning_rate_ends_with_divergence_and_a_finite_observation(aggregator, make):
    env = make(lr=1e300, aggregator=aggregator, max_rounds=6, action_mode="topk")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obs, info = env.reset(seed=0)
        assert all(np.all(np.isfinite(v)) for v in obs.values())
        assert info["profiling_diverged"] > 0  # the profiling round's models blew up; reset still works
        done, rounds = False, 0
        while not done:
            obs, r, term, trunc, info = env.step(np.ones(6, np.float32))
            assert all(np.all(np.isfinite(v)) for v in obs.values()) and np.isfinite(r)
            assert env.observation_space.contains(obs)
            done, rounds = term or trunc, rounds + 1
    if aggregator == "qfedsgd":  # one gradient, L = 1/η: the step is η-free and never explodes
        assert not info["diverged"] and rounds == 6
    else:
        assert trunc and not term and info["diverged"] and rounds == 1


@pytest.mark.parametrize("q", [50.0, 1e6, 1e300])
def test_qfedavg_with_huge_q_stays_finite(q, make):
    """q-FedAvg divides every F_k^q by max_j F_j^q, so even q = 1e300 gives a finite (tiny) step."""
    env = make(aggregator="qfedavg", aggregator_params={"q": q}, action_mode="topk", max_rounds=5)
    obs, _ = env.reset(seed=0)
    w0 = env.federation.global_params.clone()
    done = False
    while not done:
        obs, r, term, trunc, info = env.step(np.ones(6, np.float32))
        assert all(np.all(np.isfinite(v)) for v in obs.values()) and np.isfinite(r)
        assert torch.isfinite(env.federation.global_params).all()
        done = term or trunc
    assert not info["diverged"]
    if q < 1e100:  # the step shrinks like 1/q: at q = 1e300 it is below float32's resolution
        assert not torch.equal(env.federation.global_params, w0)


@pytest.mark.parametrize("aggregator", ["fedavg", "qfedavg", "fedmgda+"])
def test_absurd_forged_updates_never_raise(aggregator, make):
    """A 10^30-times update and a 10^30 loss: the round ends (diverged or not) with a finite observation."""
    env = make({"attackers": [0], "update_scale": 1e30, "loss_scale": 1e30, "update_bias": 1e30},
               aggregator=aggregator, action_mode="topk")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        obs, _ = env.reset(seed=0)
        for _ in range(4):
            obs, r, term, trunc, info = env.step(np.ones(6, np.float32))
            assert all(np.all(np.isfinite(v)) for v in obs.values()) and np.isfinite(r)
            if term or trunc:
                break
    # FedAvg averages the 10^30 update in; q-FedAvg's h_k ∝ ‖Δw_k‖² and FedMGDA+'s normalisation shrink it
    assert info["diverged"] or aggregator != "fedavg"


# ====================================================================================== atomic writes
def _start(args, cwd):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, *args], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)


def _kill_when(proc, ready, timeout=120.0) -> None:
    """SIGKILL ``proc`` as soon as ``ready()`` holds (fail if it ends first)."""
    start = time.monotonic()
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"the run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}")
        if time.monotonic() - start > timeout:
            proc.kill()
            pytest.fail("the run never reached the point to kill it at")
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.slow
def test_evaluate_killed_mid_run_keeps_its_files_and_resumes(tmp_path):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import evaluate

    out = tmp_path / "killed"
    argv = ["--env", "tiny", "--policy", "random", "--seeds", *map(str, range(4)), "--no-plots", "--no-progress",
            "--out"]
    episodes = out / "episodes.jsonl"
    proc = _start([str(ROOT / "evaluate.py"), *argv, str(out)], tmp_path)
    _kill_when(proc, lambda: episodes.is_file() and episodes.read_text().count("\n") >= 1)
    config = json.loads((out / "config.json").read_text())  # whole, valid JSON
    assert config["seeds"] == list(range(4))
    lines = episodes.read_text().split("\n")
    done = [json.loads(line) for line in lines[:-1]]  # every complete line parses (the last may be cut)
    assert 1 <= len(done) < 4
    assert not (out / "summary.md").exists()  # the run died before its summary
    with pytest.raises(ValueError, match="--resume"):
        evaluate.main([*argv, str(out)])  # the folder is not silently overwritten
    evaluate.main([*argv, str(out), "--resume"])
    resumed = [json.loads(line) for line in episodes.read_text().splitlines()]
    assert [r["key"] for r in resumed[:len(done)]] == [r["key"] for r in done]  # earlier episodes kept as they were
    assert len({r["key"] for r in resumed}) == 4 == len(resumed)
    evaluate.main([*argv, str(tmp_path / "clean")])
    clean = {r["key"]: r for r in map(json.loads, (tmp_path / "clean" / "episodes.jsonl").read_text().splitlines())}
    for r in resumed:  # the interrupted-and-resumed evaluation gives the same numbers as an uninterrupted one
        assert r["metrics"] == clean[r["key"]]["metrics"] and r["curves"] == clean[r["key"]]["curves"]
    assert (out / "summary.md").read_text() == (tmp_path / "clean" / "summary.md").read_text()


def _session(sid: int):
    """The live processes of session ``sid`` other than its leader (zombies count as gone)."""
    from fedsel_env.sim.lifeline import start_time

    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != sid:
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            if int(stat[stat.rindex(b")") + 2:].split()[3]) == sid and start_time(int(entry)) is not None:
                found.append(int(entry))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_evaluate_workers_end_when_evaluate_is_killed(tmp_path):
    """SIGKILL'ed `evaluate.py --workers 2` leaves no pool, forkserver or resource tracker behind (issue #15)."""
    out = tmp_path / "killed"
    proc = _start([str(ROOT / "evaluate.py"), "--env", "tiny", "--policy", "random", "--seeds", *map(str, range(12)),
                   "--workers", "2", "--no-plots", "--no-progress", "--out", str(out)], tmp_path)
    episodes = out / "episodes.jsonl"
    helpers = []  # (start_new_session: the script's processes carry its pid as their session id)
    _kill_when(proc, lambda: episodes.is_file() and episodes.read_text().count("\n") >= 1
               and not helpers.extend(_session(proc.pid)))
    assert len(helpers) >= 4  # two workers, the forkserver and the resource tracker
    deadline = time.monotonic() + 5.0
    while _session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _session(proc.pid)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes {left} of the killed evaluate.py are still there"


def test_evaluation_files_survive_a_crash_between_write_and_rename(tmp_path, monkeypatch):
    """A writer that dies before ``os.replace`` leaves the previous file exactly as it was."""
    from fedsel_eval import run_folder

    target = tmp_path / "summary.md"
    target.write_text("previous summary\n")

    def die(*_):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(run_folder.os, "replace", die)
    with pytest.raises(KeyboardInterrupt):
        run_folder.atomic_write_text(target, "new summary that never lands\n" * 1000)
    assert target.read_text() == "previous summary\n"


def _load_train_agent():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    if "train_agent" not in sys.modules:
        spec = importlib.util.spec_from_file_location("train_agent", ROOT / "train_agent.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["train_agent"] = module
        spec.loader.exec_module(module)
    return sys.modules["train_agent"]


@pytest.mark.slow
def test_train_agent_killed_mid_run_keeps_its_files_and_resumes(tmp_path):
    from agents.favor import DoubleDQN
    from agents.training.runs import list_checkpoints, replay_buffer_path

    train_agent = _load_train_agent()
    run = tmp_path / "k"
    proc = _start([str(ROOT / "train_agent.py"), "--algo", "favor", "--env", "tiny", "--n-timesteps", "100000",
                   "--save-freq", "20", "--eval-freq", "0", "--runs-dir", str(tmp_path), "--name", "k",
                   "--no-progress-bar", "--verbose", "0", "--hyperparams", "learning_starts=10", "batch_size=8",
                   "policy_kwargs={net_arch: [32]}"], tmp_path)
    _kill_when(proc, lambda: len(list_checkpoints(run / "checkpoints")) >= 1)
    before = {name: (run / name).read_text() for name in ("args.yaml", "env_config.yaml", "hyperparams.yaml")}
    for text in before.values():
        assert isinstance(yaml.safe_load(text), dict)
    checkpoints = list_checkpoints(run / "checkpoints")
    last = checkpoints[-1]
    steps = DoubleDQN.load(last).num_timesteps  # every complete checkpoint loads, with its replay buffer
    DoubleDQN.load(last).load_replay_buffer(replay_buffer_path(last))
    assert not (run / "model.zip").exists()
    train_agent.main(["--name", "k", "--runs-dir", str(tmp_path), "--resume", "--n-timesteps", str(steps + 20),
                      "--no-progress-bar", "--verbose", "0"])
    assert {name: (run / name).read_text() for name in before} == before  # the run's settings are untouched
    final = DoubleDQN.load(run / "model.zip")
    assert final.num_timesteps == steps + 20
    assert yaml.safe_load((run / "summary.yaml").read_text())["num_timesteps"] == steps + 20


def test_train_agent_files_survive_a_crash_between_write_and_rename(tmp_path, monkeypatch):
    from agents.training import atomic  # train_agent.py's atomic writes
    target = tmp_path / "summary.yaml"
    target.write_text("previous: 1\n")

    def die(*_):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(atomic.os, "replace", die)
    with pytest.raises(KeyboardInterrupt):
        atomic.atomic_write_yaml(target, {"new": list(range(1000))})
    with pytest.raises(KeyboardInterrupt):
        atomic.atomic_save(lambda p: Path(p).write_text("half a model"), target)
    assert target.read_text() == "previous: 1\n"


# ================================================================================ the experiment's maths
def test_robustness_experiment_reads_episode_records_by_hand(tmp_path):
    sys.path.insert(0, str(ROOT))
    from experiments import robustness

    record = {"clients": {"accuracy": [1.0, 0.5, 0.75, 0.25], "participation": [3, 1, 0, 4]},
              "metrics": {"final_accuracy": 0.6, "sim_time": 12.0}, "diverged": False,
              "curves": {"accuracy": [0.95, 0.2, 0.89, 0.9, 0.99]}}
    got = robustness.episode_numbers(record, np.array([0, 3]))
    assert got["honest_accuracy"] == pytest.approx((0.5 + 0.75) / 2)  # clients 1 and 2
    assert got["attacker_share"] == pytest.approx(7 / 8)
    assert got["rounds_to_90"] == 3.0  # round 0 (before training) does not count
    assert np.isnan(robustness.first_round_at([0.1, 0.5], 0.9))
    assert robustness.mean_std([0.1, -0.3, float("nan")], "+.2f") == "-0.10 ± 0.20"
    assert robustness.rounds_cell([10.0, float("nan")], 40) == "10.0 (1/2)"
    doc = tmp_path / "doc.md"
    begin, end = markdown.markers(robustness.MARKER)
    doc.write_text(f"intro\n{begin}\nold\n{end}\noutro\n")
    markdown.splice(doc, robustness.MARKER, "new table\n", append=False)  # how main() publishes the table
    assert doc.read_text() == f"intro\n{begin}\nnew table\n{end}\noutro\n"


# ================================================================================== model poisoning (issue #44)
def test_sign_flip_times_k_is_a_negative_update_scale(make):
    """Sign-flipped and scaled updates: ``update_scale: -k`` sends w_t − k (w_k − w_t) (the honest update,
    turned round and stretched k times); honest clients are untouched."""
    env = make({"attackers": [0], "update_scale": -30.0})
    env.reset(seed=0)
    fed = env.federation
    seen = spy(env)
    w_t = fed.global_params.clone()
    honest = fed.trainer.train(w_t, [0, 1], fed.generators(env._round + 1, [0, 1]))
    env.step(pick(0, 1))
    torch.testing.assert_close(seen[0].local_params[0], w_t - 30.0 * (honest[0] - w_t))
    assert torch.equal(seen[0].local_params[1], honest[1])


@pytest.mark.parametrize("fraction, count", [(0.125, 1), (0.25, 2), (0.375, 3), (0.8, 6)])
def test_any_attacker_fraction_names_that_many_attackers(fraction, count):
    env = FedSelectEnv(config={"adversary": {"attacker_fraction": fraction, "update_scale": -30.0},
                               "max_rounds": 1}, preset="tiny")
    assert len(env.reset(seed=0)[1]["attackers"]) == count


def test_a_robust_aggregator_keeps_honest_accuracy_under_the_sign_flip_attack(tmp_path):
    """Issue #44's done-when, as experiments/robust_aggregation.py measures it: one of 8 clients sends its update
    sign-flipped ×30 for 15 rounds (tiny preset, random policy, seeds 0-2). FedAvg's honest accuracy falls by
    more than 0.2 on average; norm clipping keeps it within 0.05 of the attack-free run on every seed."""
    sys.path.insert(0, str(ROOT))
    import fedsel_eval
    from experiments import robust_aggregation as ra

    plan = ra.scenarios([0.125])
    names = ["none", "sign-flip ×30 0.125"]
    seeds = [0, 1, 2]
    results, dishonest = {}, {}
    for name in names:
        ev = fedsel_eval.run(tmp_path / ra.slug(name), env=ra.ENV, policies=["random"],
                             aggregators=["fedavg", "norm_clipping"], seeds=seeds, rounds=15, target=1.0,
                             env_overrides=ra.overrides(plan[name], 15), progress=False, plots=False)
        results[name] = ra.client_accuracies(ev.records)
        dishonest[name] = ra.dishonest_clients(plan[name], seeds)
    numbers = ra.measure(results, dishonest, names)[names[1]]
    assert all(len(dishonest[names[1]][s]) == 1 for s in seeds)
    fedavg = [numbers["fedavg"][s]["honest"] - numbers["fedavg"][s]["none"] for s in seeds]
    clipped = [numbers["norm_clipping"][s]["honest"] - numbers["norm_clipping"][s]["none"] for s in seeds]
    assert np.mean(fedavg) < -0.2, fedavg
    assert min(clipped) >= -0.05, clipped
