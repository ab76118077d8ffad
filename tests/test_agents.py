"""Tests of the selection agents (docs/SPEC.md §4, issue #4): each agent's rule checked on small cases by hand,
statistical checks of the randomised ones with fixed seeds, the shared contract (≤ K distinct available
clients) as a property, and full episodes on the tiny preset with every aggregation backend."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import agents
from agents.kcenter import farthest_point
from agents.qffl import weighted_sample
from fedsel_env.spec import CLIENT_FEATURES, FEATURE_INDEX, SelectionSpec

MY_AGENTS = ("kcenter", "kcenter_cover", "afl", "qffl", "fedcs", "rpow_d", "oort", "rbcsf")
FI = FEATURE_INDEX


# ----------------------------------------------------------------- helpers
def make_spec(n: int = 10, k: int = 3, mode: str = "subset", d: int = 4, num_samples=None) -> SelectionSpec:
    ns = np.arange(20, 20 + 7 * n, 7) if num_samples is None else np.asarray(num_samples)
    return SelectionSpec(num_clients=n, clients_per_round=k, action_mode=mode, num_samples=ns,
                         max_rounds=100, pca_components=d, model_bytes=2600)


def make_obs(spec: SelectionSpec, rng: np.random.Generator, **features) -> dict:
    """An observation as the env builds it, with random values; ``features`` overrides columns by name."""
    n = spec.num_clients
    c = np.zeros((n, len(CLIENT_FEATURES)))
    loss = rng.uniform(0.1, 3.0, n)
    c[:, FI["loss"]] = loss
    c[:, FI["loss_rms"]] = loss * rng.uniform(1.0, 1.5, n)
    c[:, FI["num_samples"]] = spec.num_samples / spec.num_samples.max()
    c[:, FI["available"]] = rng.random(n) < 0.8
    c[:, FI["ctx_cpu"]] = 1.0 / rng.uniform(0.5, 2.0, n)
    c[:, FI["ctx_cold"]] = rng.integers(0, 2, n)
    c[:, FI["ctx_comm"]] = spec.model_bytes / rng.uniform(2e6, 4e6, n)
    c[:, FI["last_exchange_time"]] = rng.uniform(1.0, 5.0, n)
    for name, value in features.items():
        c[:, FI[name]] = value
    return {"weights": rng.normal(size=(n + 1, spec.pca_components)).astype(np.float32),
            "clients": c.astype(np.float32), "progress": np.array([0.0, 0.1], dtype=np.float32)}


def started(name: str, spec: SelectionSpec, obs: dict, seed: int = 0, **params):
    agent = agents.make(name, spec, seed=seed, **params)
    agent.reset(obs)
    return agent


def check_selection(chosen, obs, spec, k) -> None:
    chosen = np.asarray(chosen)
    avail = np.flatnonzero(obs["clients"][:, FI["available"]] > 0.5)
    assert chosen.dtype.kind == "i"
    assert len(set(chosen.tolist())) == chosen.size, "selection repeats a client"
    assert set(chosen.tolist()) <= set(avail.tolist()), "selection holds an unavailable client"
    assert chosen.size == min(k, avail.size)


# --------------------------------------------------------- the shared contract
def test_every_agent_is_registered():
    assert set(MY_AGENTS) <= set(agents.AGENTS)
    for name in MY_AGENTS:
        assert set(agents.AGENTS[name].supported_modes) >= {"topk", "subset"}


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 10), k_frac=st.floats(0.0, 1.0), mode=st.sampled_from(["one", "topk", "subset"]),
       seed=st.integers(0, 2**16), p_avail=st.floats(0.0, 1.0))
def test_every_agent_picks_at_most_k_distinct_available_clients(n, k_frac, mode, seed, p_avail):
    spec = make_spec(n=n, k=max(1, round(k_frac * n)), mode=mode)
    k = 1 if mode == "one" else spec.clients_per_round
    for name in MY_AGENTS + ("random", "random_nk"):
        rng = np.random.default_rng(seed)
        obs = make_obs(spec, rng, available=rng.random(n) < p_avail)
        agent = started(name, spec, obs, seed=seed)
        for _ in range(4):
            chosen = agent.select(obs)
            check_selection(chosen, obs, spec, k)
            responded = np.isin(np.arange(n), chosen)
            obs = make_obs(spec, rng, available=rng.random(n) < p_avail, responded_last_round=responded,
                           selected_last_round=responded)
        action, _ = agent.predict(obs)
        if mode == "subset":
            assert 1 <= action.sum() <= spec.clients_per_round
        elif mode == "one":
            assert 0 <= int(action) < n


@pytest.mark.parametrize("name", MY_AGENTS)
def test_same_seed_same_choices(name):
    spec = make_spec(n=12, k=4)
    picks = []
    for _ in range(2):
        rng = np.random.default_rng(5)
        obs = make_obs(spec, rng)
        agent = started(name, spec, obs, seed=11)
        run = []
        for _ in range(6):
            chosen = agent.select(obs)
            run.append(chosen.tolist())
            resp = np.isin(np.arange(12), chosen)
            obs = make_obs(spec, rng, responded_last_round=resp, selected_last_round=resp)
        picks.append(run)
    assert picks[0] == picks[1]


@pytest.mark.parametrize("name, params, field", [
    ("afl", {"alpha1": 1.0}, "alpha1"), ("afl", {"alpha3": -0.1}, "alpha3"),
    ("qffl", {"q": -1}, "q"), ("rpow_d", {"d": 2}, "d"), ("rpow_d", {"d": 11}, "d"),
    ("fedcs", {"estimator": "mean"}, "estimator"), ("fedcs", {"lam": 0}, "lam"),
    ("oort", {"exploration_decay": 1.5}, "exploration_decay"), ("oort", {"pacer_step": 0}, "pacer_step"),
    ("rbcsf", {"beta": 0.5}, "beta"), ("rbcsf", {"v": -1}, "v"), ("rbcsf", {"lam": 0.0}, "lam"),
    ("kcenter", {"bogus": 1}, "bogus"),
])
def test_bad_parameters_raise_naming_the_parameter(name, params, field):
    with pytest.raises(ValueError, match=field):
        agents.make(name, make_spec(n=10, k=3), seed=0, **params)


# ------------------------------------------------------------------------ AFL
def test_afl_lowest_alpha1_n_valuations_get_probability_zero():
    ns = np.array([100, 25, 64, 49, 16, 81, 36, 9])
    spec = make_spec(n=8, k=2, num_samples=ns)
    loss = np.array([0.5, 2.0, 1.0, 0.2, 3.0, 0.4, 1.5, 4.0])
    obs = make_obs(spec, np.random.default_rng(0), loss=loss)
    agent = started("afl", spec, obs, alpha1=0.5, alpha2=0.3)
    v = np.sqrt(ns) * loss  # [5, 10, 8, 1.4, 12, 3.6, 9, 12]
    np.testing.assert_allclose(agent.valuations, v, rtol=1e-6)
    p = agent.probabilities()
    assert set(np.flatnonzero(p == 0)) == {0, 2, 3, 5}  # the 4 lowest: 1.4, 3.6, 5, 8
    keep = np.array([1, 4, 6, 7])
    expected = np.exp(0.3 * v[keep]) / np.exp(0.3 * v[keep]).sum()
    np.testing.assert_allclose(p[keep], expected, rtol=1e-5)
    chosen_ever = set()
    for _ in range(200):  # α3·K = 0.2 rounds to 0: every pick comes from p
        chosen_ever |= set(agent.select(obs).tolist())
    assert chosen_ever <= set(keep.tolist())


def test_afl_probability_draw_follows_softmax_of_valuations():
    spec = make_spec(n=6, k=1)
    loss = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    obs = make_obs(spec, np.random.default_rng(0), loss=loss, available=np.ones(6))
    agent = started("afl", spec, obs, seed=3, alpha1=0.0, alpha2=0.1, alpha3=0.0)
    p = agent.probabilities()
    counts = np.bincount([int(agent.select(obs)[0]) for _ in range(4000)], minlength=6)
    assert stats.chisquare(counts, 4000 * p).pvalue > 1e-3
    assert p[5] > 2 * p[0]  # the softmax really prefers high valuations here


def test_afl_alpha3_picks_are_uniform_over_the_remaining_clients():
    spec = make_spec(n=20, k=10)
    rng = np.random.default_rng(1)
    obs = make_obs(spec, rng, available=np.ones(20))
    # α1 = 0.5: 10 clients keep p > 0; α3·K = 1: 9 draws from p, then 1 uniform draw from the 11 left
    agent = started("afl", spec, obs, seed=2, alpha1=0.5)
    assert agent.num_uniform(10) == 1
    zero = np.flatnonzero(agent.probabilities() == 0)
    assert zero.size == 10
    counts = np.zeros(20)
    rounds = 3000
    for _ in range(rounds):
        chosen = agent.select(obs)
        assert np.isin(chosen, zero).sum() <= 1  # only the uniform draw can reach a p = 0 client
        counts[chosen] += 1
    # the uniform draw lands on a p = 0 client with probability 10/11 (the 11th is the undrawn p > 0 one)
    assert stats.binomtest(int(counts[zero].sum()), rounds, 10 / 11).pvalue > 1e-3
    assert stats.chisquare(counts[zero]).pvalue > 1e-3  # and uniformly among them


def test_afl_valuations_of_clients_that_did_not_take_part_stay_stale():
    spec = make_spec(n=6, k=2)
    rng = np.random.default_rng(4)
    obs0 = make_obs(spec, rng)
    agent = started("afl", spec, obs0)
    before = agent.valuations.copy()
    responded = np.array([1, 0, 0, 1, 0, 0])
    new_loss = np.full(6, 9.0)
    agent.select(make_obs(spec, rng, loss=new_loss, responded_last_round=responded))
    sqrt_n = np.sqrt(spec.num_samples)
    np.testing.assert_allclose(agent.valuations[[0, 3]], 9.0 * sqrt_n[[0, 3]], rtol=1e-6)
    np.testing.assert_array_equal(agent.valuations[[1, 2, 4, 5]], before[[1, 2, 4, 5]])



def test_afl_alpha2_relative_scales_the_temperature_by_the_reset_spread():
    ns = np.array([100, 25, 64, 49, 16, 81, 36, 9])
    spec = make_spec(n=8, k=2, num_samples=ns)
    loss = np.array([0.5, 2.0, 1.0, 0.2, 3.0, 0.4, 1.5, 4.0])
    obs = make_obs(spec, np.random.default_rng(0), loss=loss)
    v = np.sqrt(ns) * loss
    agent = started("afl", spec, obs, alpha1=0.0, alpha2_relative=2.0)
    assert agent.reset_spread == pytest.approx(np.std(v), rel=1e-6)
    assert agent.alpha2 == pytest.approx(2.0 / np.std(v), rel=1e-6)
    p = agent.probabilities()
    # two clients one reset-std apart get weights in the ratio e^c, whatever the valuations' scale
    np.testing.assert_allclose(np.log(p[4] / p[0]), 2.0 * (v[4] - v[0]) / np.std(v), rtol=1e-5)
    scaled = started("afl", make_spec(n=8, k=2, num_samples=ns), make_obs(spec, np.random.default_rng(0),
                                                                          loss=100.0 * loss),
                     alpha1=0.0, alpha2_relative=2.0)
    np.testing.assert_allclose(scaled.probabilities(), p, rtol=1e-5)
    # fixed for the episode: a later round's valuations do not move α2; the next reset does
    alpha2 = agent.alpha2
    agent.select(make_obs(spec, np.random.default_rng(1), loss=loss * 3, responded_last_round=np.ones(8)))
    assert agent.alpha2 == alpha2
    agent.reset(make_obs(spec, np.random.default_rng(2), loss=loss * 3))
    assert agent.alpha2 == pytest.approx(alpha2 / 3, rel=1e-6)
    # the default stays the paper's fixed 0.01
    assert started("afl", spec, obs).alpha2 == 0.01


def test_afl_alpha2_relative_without_spread_is_uniform_and_bad_values_are_refused():
    spec = make_spec(n=6, k=2, num_samples=np.full(6, 58))
    obs = make_obs(spec, np.random.default_rng(0), loss=np.full(6, 0.1))  # equal valuations: std at rounding level
    agent = started("afl", spec, obs, alpha1=0.0, alpha2_relative=3.0)
    assert agent.alpha2 == 0.0
    np.testing.assert_allclose(agent.probabilities(), np.full(6, 1 / 6))
    with pytest.raises(ValueError, match="alpha2_relative"):
        agents.make("afl", spec, alpha2_relative=-1.0)
    with pytest.raises(ValueError, match="alpha2_relative"):
        agents.make("afl", spec, alpha2_relative=float("nan"))
    with pytest.raises(ValueError, match="both"):
        agents.make("afl", spec, alpha2=0.5, alpha2_relative=1.0)

# ---------------------------------------------------------------------- q-FFL
def test_qffl_probabilities_are_n_times_loss_to_the_q():
    ns = np.array([10, 20, 30, 40, 50])
    spec = make_spec(n=5, k=2, num_samples=ns)
    loss = np.array([1.0, 0.5, 2.0, 1.5, 0.1])
    avail = np.array([1, 1, 1, 0, 1])
    obs = make_obs(spec, np.random.default_rng(0), loss=loss, available=avail)
    for q in (0.0, 1.0, 3.0):
        p = agents.make("qffl", spec, q=q).probabilities(obs)
        w = ns * loss ** q * avail
        np.testing.assert_allclose(p, w / w.sum(), rtol=1e-5)
    agent = agents.make("qffl", make_spec(n=5, k=1, num_samples=ns), seed=0, q=2.0)
    p = agent.probabilities(obs)
    counts = np.bincount([int(agent.select(obs)[0]) for _ in range(3000)], minlength=5)
    assert counts[3] == 0
    assert stats.chisquare(counts[[0, 1, 2, 4]], 3000 * p[[0, 1, 2, 4]]).pvalue > 1e-3


def test_weighted_sample_takes_every_positive_weight_before_zero_ones():
    rng = np.random.default_rng(0)
    for _ in range(20):
        got = weighted_sample(rng, np.arange(6), np.array([0, 2.0, 0, 0, 1.0, 0]), 4)
        assert {1, 4} <= set(got.tolist()) and len(set(got.tolist())) == 4
    with pytest.raises(ValueError, match="weights"):
        weighted_sample(rng, np.arange(3), np.array([1.0, -1.0, 1.0]), 2)


# ------------------------------------------------------------ Power-of-Choice
def test_power_of_choice_keeps_the_highest_losses_of_its_candidate_set():
    spec = make_spec(n=15, k=3)
    rng = np.random.default_rng(7)
    agent = started("rpow_d", spec, make_obs(spec, rng), seed=7, d=7)
    for _ in range(50):
        obs = make_obs(spec, rng)
        chosen = agent.select(obs)
        cand = agent.last_candidates
        avail = np.flatnonzero(obs["clients"][:, FI["available"]] > 0.5)
        assert set(cand.tolist()) <= set(avail.tolist()) and cand.size == min(7, avail.size)
        loss = obs["clients"][:, FI["loss"]]
        top = cand[np.argsort(-loss[cand])[:3]]
        assert set(chosen.tolist()) == set(top.tolist())
        # the highest losses of the candidates, not of the available list (the published bug)
        assert loss[chosen].min() >= np.sort(loss[cand])[::-1][min(3, cand.size) - 1]


def test_power_of_choice_candidates_are_drawn_proportional_to_n_k():
    ns = np.array([10, 20, 30, 40])
    spec = make_spec(n=4, k=1, num_samples=ns)
    obs = make_obs(spec, np.random.default_rng(0), available=np.ones(4))
    agent = started("rpow_d", spec, obs, seed=3, d=1)  # d = K = 1: the pick is the one candidate
    counts = np.bincount([int(agent.select(obs)[0]) for _ in range(3000)], minlength=4)
    assert stats.chisquare(counts, 3000 * ns / ns.sum()).pvalue > 1e-3
    assert agents.make("rpow_d", make_spec(n=10, k=3)).d == 6  # default d = 2K


# ---------------------------------------------------------------------- FedCS
def test_fedcs_last_estimator_picks_the_fastest_available():
    spec = make_spec(n=8, k=3)
    tau = np.array([5.0, 1.0, 3.0, 0.5, 2.0, 4.0, 1.5, 0.7])
    avail = np.array([1, 1, 1, 0, 1, 1, 1, 1])
    obs = make_obs(spec, np.random.default_rng(0), last_exchange_time=tau, available=avail)
    agent = started("fedcs", spec, obs, estimator="last")
    assert set(agent.select(obs).tolist()) == {1, 6, 7}


def test_fedcs_ridge_estimator_learns_and_then_picks_the_truly_fastest():
    n, k = 8, 3
    spec = make_spec(n=n, k=k)
    rng = np.random.default_rng(3)
    theta = np.array([[1, 1, 0.145], [2, 1, 0.217], [3, 1, 0.417], [4, 1, 1.443]])[np.arange(n) % 4]
    agent = agents.make("fedcs", spec, seed=0, lam=1e-6)
    obs = make_obs(spec, rng, available=np.ones(n))
    agent.reset(obs)
    ctx_names = [FI["ctx_cpu"], FI["ctx_cold"], FI["ctx_comm"]]
    # never-observed clients are estimated at 0 (observed ones above 0), so the first ⌈N/K⌉ rounds try everyone
    tried = set()
    for rnd in range(43):
        chosen = agent.select(obs)
        if rnd < 3:
            untried = set(range(n)) - tried
            assert set(chosen.tolist()) <= untried or untried <= set(chosen.tolist())
            tried |= set(chosen.tolist())
        tau = np.einsum("nd,nd->n", obs["clients"][:, ctx_names].astype(np.float64), theta)  # noiseless
        # only the chosen report in the first rounds; later every client does, so every regression learns
        resp = np.isin(np.arange(n), chosen) if rnd < 3 else np.ones(n)
        obs = make_obs(spec, rng, available=np.ones(n), last_exchange_time=tau, responded_last_round=resp,
                       ctx_comm=rng.uniform(0.3, 1.0, n))
    assert tried == set(range(n))
    np.testing.assert_allclose(agent.ridge.theta(), theta, atol=1e-3)
    true_tau = np.einsum("nd,nd->n", obs["clients"][:, ctx_names].astype(np.float64), theta)
    assert set(agent.select(obs).tolist()) == set(np.argsort(true_tau)[:k].tolist())


# ------------------------------------------------------------------- K-Center
def test_farthest_point_by_hand():
    pts = np.array([[0.0], [1.0], [2.0], [10.0]])
    # mean 3.25: 10 is farthest; then 0 (10 from 10); then 2 (2 from 0, vs 1 for the point at 1)
    np.testing.assert_array_equal(farthest_point(pts, np.arange(4), np.array([], dtype=int), 3), [3, 0, 2])
    np.testing.assert_array_equal(farthest_point(pts, np.array([0, 1, 2]), np.array([3]), 1), [0])


def test_kcenter_cover_covers_every_client_before_reuse():
    n, k = 10, 3
    spec = make_spec(n=n, k=k)
    rng = np.random.default_rng(0)
    obs = make_obs(spec, rng, available=np.ones(n))
    agent = started("kcenter_cover", spec, obs)
    first = agent.select(obs)
    np.testing.assert_array_equal(first, farthest_point(obs["weights"][1:].astype(np.float64), np.arange(n),
                                                        np.array([], dtype=int), k))
    sequence = list(first)
    for _ in range(19):  # 60 picks = 6 covers
        sequence += agent.select(make_obs(spec, rng, available=np.ones(n))).tolist()
    for cover in range(6):
        assert sorted(sequence[cover * n:(cover + 1) * n]) == list(range(n))


def test_kcenter_cover_reuses_a_client_only_when_no_unused_one_is_available():
    n, k = 9, 3
    spec = make_spec(n=n, k=k)
    rng = np.random.default_rng(1)
    agent = started("kcenter_cover", spec, make_obs(spec, rng))
    reuses = 0
    for _ in range(40):
        obs = make_obs(spec, rng, available=rng.random(n) < 0.6)
        avail = set(np.flatnonzero(obs["clients"][:, FI["available"]] > 0.5).tolist())
        used_before = set(np.flatnonzero(agent.used).tolist())
        chosen = set(agent.select(obs).tolist())
        if chosen & used_before:  # a reuse: only once every unused available client is in
            reuses += 1
            assert avail - used_before <= chosen
    assert reuses > 0  # the case did occur


# ----------------------------------------------------------------------- Oort
def test_oort_exploration_decays_and_stops_once_everyone_is_explored():
    n, k = 12, 4
    spec = make_spec(n=n, k=k)
    rng = np.random.default_rng(0)
    obs = make_obs(spec, rng, available=np.ones(n))
    agent = started("oort", spec, obs, seed=0)
    eps = 0.9
    chosen = agent.select(obs)
    eps = max(eps * 0.95, 0.2)
    assert agent.exploration == pytest.approx(eps)
    assert agent.exploit_clients.size == 0  # nothing explored yet: all four are exploration picks
    # the exploration draw is from the sample_window·4 best utilities, i.e. all 12 here; draws ∝ utility
    assert set(agent.explore_clients.tolist()) == set(chosen.tolist())
    for _ in range(10):
        resp = np.isin(np.arange(n), chosen)
        obs = make_obs(spec, rng, available=np.ones(n), responded_last_round=resp)
        chosen = agent.select(obs)
        if not agent.explored.all():
            eps = max(eps * 0.95, 0.2)
            assert agent.exploration == pytest.approx(eps)
            assert agent.exploit_clients.size == min(int(k * (1 - eps)), agent.explored.sum())
    assert agent.explored.all() and agent.exploration == 0.0
    assert agent.exploit_clients.size == k


def test_oort_score_by_hand_with_system_penalty():
    n = 4
    ns = np.array([10, 20, 30, 40])
    spec = make_spec(n=n, k=2, num_samples=ns)
    rms = np.array([1.0, 1.0, 1.0, 1.0])
    obs0 = make_obs(spec, np.random.default_rng(0), loss_rms=rms, available=np.ones(n))
    agent = started("oort", spec, obs0, round_threshold=50, clip_bound=1.0)
    agent.round = 4
    agent.explored[:] = True
    agent.last_round[:] = [1, 2, 3, 1]
    agent.duration[:] = [1.0, 2.0, 3.0, 6.0]
    agent.preferred_duration = agent._preferred_duration()
    assert agent.preferred_duration == 3.0  # the 50th percentile of [1, 2, 3, 6]: index int(4·0.5) = 2
    s = agent.scores(np.arange(n))
    u = ns * rms
    lo = 0.999 * u.min()
    expected = (u - lo) / (u.max() - lo) + np.sqrt(0.1 * np.log(4) / np.array([1, 2, 3, 1]))
    expected[3] *= (3.0 / 6.0) ** 2.0  # slower than T: (T/t)^α
    np.testing.assert_allclose(s, expected, rtol=1e-9)


def test_oort_pacer_tightens_on_a_jump_and_relaxes_when_utility_stalls():
    n = 6
    spec = make_spec(n=n, k=2, num_samples=np.full(n, 30))
    rng = np.random.default_rng(0)
    rms = np.ones(n)  # every client's utility is 30: the exploited utility is 0 or 30 a round
    obs = make_obs(spec, rng, loss_rms=rms, available=np.ones(n))
    agent = started("oort", spec, obs, seed=0, pacer_step=3)
    thresholds = []
    for _ in range(15):
        chosen = agent.select(obs)
        thresholds.append(agent.round_threshold)
        resp = np.isin(np.arange(n), chosen)
        obs = make_obs(spec, rng, loss_rms=rms, available=np.ones(n), responded_last_round=resp)
    # rounds 1–3 explore all six clients, round 4 fills at random, exploitation starts in round 5 and is
    # first measured in round 6: the window sum jumps from 0 to 30 (≥ 5×) → tighten to 5; round 9 compares
    # 30 with 90 (neither ≤ 10% nor ≥ 5× apart) → keep; rounds 12 and 15 compare 90 with 90 → relax by 5
    assert thresholds == [10.0] * 5 + [5.0] * 6 + [10.0] * 3 + [15.0]


# ------------------------------------------------------------ SB3's interface
@pytest.mark.parametrize("mode", ["one", "topk", "subset"])
def test_predict_encodes_the_selection_in_the_action_mode(mode):
    spec = make_spec(n=8, k=3, mode=mode)
    obs = make_obs(spec, np.random.default_rng(0), available=np.ones(8))
    agent = agents.make("fedcs", spec, seed=0, estimator="last")
    action, state = agent.predict(obs)
    fastest = np.argsort(obs["clients"][:, FI["last_exchange_time"]])
    if mode == "one":
        assert int(action) == fastest[0]
    elif mode == "subset":
        assert set(np.flatnonzero(action).tolist()) == set(fastest[:3].tolist())
    else:
        assert set(np.argsort(-action)[:3].tolist()) == set(fastest[:3].tolist())
    batched, _ = agent.predict({k: v[None] for k, v in obs.items()})
    assert np.asarray(batched).shape[0] == 1


# ------------------------------------------------------- full episodes in the env
def run_episode(name: str, config: dict, seed: int = 0):
    import gymnasium as gym

    import fedsel_env  # noqa: F401  (registers the env ids)

    env = gym.make("fedsel/FedSelect-Tiny-v0", config=config)
    obs, _ = env.reset(seed=seed)
    spec = env.unwrapped.selection_spec
    agent = agents.make(name, spec, seed=seed)
    k = 1 if spec.action_mode == "one" else spec.clients_per_round
    rounds, done = 0, False
    while not done:
        action, _ = agent.predict(obs)
        obs, reward, terminated, truncated, info = env.step(action)
        assert 1 <= len(info["selected"]) <= k
        assert set(info["responders"]) <= set(info["selected"])
        assert -1.0 < reward <= 0.0
        rounds += 1
        done = terminated or truncated
    env.close()
    return rounds, info


def _backends():
    from fedsel_env.sim.aggregators import AGGREGATORS

    return sorted(AGGREGATORS)


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("name", MY_AGENTS)
def test_every_agent_runs_a_full_episode_with_every_backend(name, backend):
    rounds, info = run_episode(name, {"aggregator": backend})
    assert rounds >= 1 and (rounds == 5 or info["is_success"])
    assert not info["diverged"]


@pytest.mark.parametrize("mode", ["one", "subset"])
@pytest.mark.parametrize("name", MY_AGENTS)
def test_every_agent_runs_a_full_episode_in_the_other_action_modes(name, mode):
    run_episode(name, {"action_mode": mode})
