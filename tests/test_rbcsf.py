"""Tests of RBCS-F (seed 004, docs/SPEC.md §3.6, §4): Algorithm 1 against brute force, the virtual queues, the
ridge regressions and their lower confidence bound, and the long-run behaviour the paper reports
(every client's rate ≥ β, round time between FedCS's and random's, larger V → shorter rounds, longer
queues) — first on a synthetic system model driven directly, then on the HeteroSystem env preset."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agents
from agents.rbcsf import divide_and_conquer, p4_objective, update_queues
from fedsel_env.spec import CLIENT_FEATURES, FEATURE_INDEX, SelectionSpec

FI = FEATURE_INDEX
CTX = [FI["ctx_cpu"], FI["ctx_cold"], FI["ctx_comm"]]
# θ* of the four client classes of the public re-implementation (docs/SPEC.md §3.6)
THETA_CLASSES = np.array([[1, 1, 1 / np.log(1001)], [2, 1, 1 / np.log(101)],
                          [3, 1, 1 / np.log(11)], [4, 1, 1 / np.log(2)]])


def make_spec(n: int, k: int, mode: str = "subset") -> SelectionSpec:
    return SelectionSpec(num_clients=n, clients_per_round=k, action_mode=mode, num_samples=np.full(n, 50),
                         max_rounds=1000, pca_components=3, model_bytes=2 * 2**20)


def make_obs(n: int, contexts: np.ndarray, available: np.ndarray, tau: np.ndarray,
             responded: np.ndarray) -> dict:
    c = np.zeros((n, len(CLIENT_FEATURES)))
    c[:, FI["loss"]] = 1.0
    c[:, FI["loss_rms"]] = 1.0
    c[:, FI["num_samples"]] = 1.0
    c[:, FI["available"]] = available
    c[:, CTX] = contexts
    c[:, FI["last_exchange_time"]] = tau
    c[:, FI["selected_last_round"]] = responded
    c[:, FI["responded_last_round"]] = responded
    return {"weights": np.zeros((n + 1, 3), dtype=np.float32), "clients": c.astype(np.float32),
            "progress": np.zeros(2, dtype=np.float32)}


class SyntheticSystem:
    """docs/SPEC.md §3.6's system model on its own (no learning), to drive an agent for many rounds cheaply."""

    def __init__(self, n: int, seed: int, noise: float = 0.0, availability: float = 0.8) -> None:
        self.rng = np.random.default_rng(seed)
        self.n, self.noise, self.p = n, noise, availability
        self.theta = THETA_CLASSES[np.arange(n) % 4]
        self.took_part = np.ones(n, dtype=bool)  # the profiling round
        self.last_tau = np.zeros(n)
        self.responded = np.zeros(n)
        self.draw()

    def draw(self) -> None:
        r = self.rng
        self.available = r.random(self.n) < self.p
        self.contexts = np.stack([1 / r.uniform(0.5, 2.0, self.n), (~self.took_part).astype(float),
                                  2 * 2**20 / r.uniform(2e6, 4e6, self.n)], axis=1)

    def obs(self) -> dict:
        return make_obs(self.n, self.contexts, self.available, self.last_tau, self.responded)

    def step(self, chosen: np.ndarray) -> float:
        chosen = np.asarray(chosen, dtype=np.int64)
        assert self.available[chosen].all()
        tau = np.einsum("nd,nd->n", self.contexts[chosen], self.theta[chosen])
        tau = tau + self.noise * self.rng.standard_normal(chosen.size)
        self.last_tau[chosen] = tau
        self.responded = np.isin(np.arange(self.n), chosen).astype(float)
        self.took_part = self.responded > 0
        self.draw()
        return float(tau.max()) if tau.size else 0.0


def run_synthetic(name: str, rounds: int, n: int = 40, k: int = 8, seed: int = 0, noise: float = 0.0,
                  **params):
    system = SyntheticSystem(n, seed, noise)
    agent = agents.make(name, make_spec(n, k), seed=seed, **params)
    agent.reset(system.obs())
    counts, times, queue_sums = np.zeros(n), [], []
    for _ in range(rounds):
        chosen = agent.select(system.obs())
        counts[chosen] += 1
        times.append(system.step(chosen))
        queue_sums.append(float(agent.queues.sum()) if hasattr(agent, "queues") else 0.0)
    return agent, counts / rounds, np.asarray(times), np.asarray(queue_sums)


# ------------------------------------------------------------ Algorithm 1
def brute_force(tau_bar, queues, available, m, v):
    avail = np.flatnonzero(available)
    k = min(m, avail.size)
    if k == 0:
        return 0.0
    return min(p4_objective(np.array(s), tau_bar, queues, v) for s in itertools.combinations(avail, k))


values = st.one_of(st.floats(-3.0, 10.0, allow_nan=False), st.sampled_from([0.0, 1.0, 2.5]))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), n=st.integers(1, 8))
def test_algorithm1_matches_brute_force(data, n):
    tau_bar = np.array(data.draw(st.lists(values, min_size=n, max_size=n)))
    queues = np.array(data.draw(st.lists(st.one_of(st.floats(0.0, 20.0), st.sampled_from([0.0, 1.0])),
                                         min_size=n, max_size=n)))
    available = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    m = data.draw(st.integers(1, n))
    v = data.draw(st.one_of(st.floats(0.0, 50.0), st.sampled_from([0.0, 1.0, 10.0])))
    chosen = divide_and_conquer(tau_bar, queues, available, m, v)
    k = min(m, int(available.sum()))
    assert chosen.size == k and len(set(chosen.tolist())) == k
    assert available[chosen].all()
    assert p4_objective(chosen, tau_bar, queues, v) == pytest.approx(brute_force(tau_bar, queues, available, m, v),
                                                                     abs=1e-9)


def test_algorithm1_by_hand():
    tau_bar = np.array([1.0, 5.0, 2.0, 3.0])
    queues = np.array([0.0, 9.0, 1.0, 2.0])
    avail = np.ones(4, dtype=bool)
    # V = 1: {1, 3} costs 5 − 11 = −6, the best ({1, 2}: −5, {0, 1}: −4);
    # V = 10: {0, 2} costs 20 − 1 = 19, the best ({2, 3}: 27, {0, 3}: 28, {0, 1}: 41)
    assert set(divide_and_conquer(tau_bar, queues, avail, 2, 1.0).tolist()) == {1, 3}
    assert set(divide_and_conquer(tau_bar, queues, avail, 2, 10.0).tolist()) == {0, 2}
    # V = 0 ignores time: the largest queues
    assert set(divide_and_conquer(tau_bar, queues, avail, 2, 0.0).tolist()) == {1, 3}
    # an unavailable client is never chosen, and |S| = min(m, ΣI)
    avail[1] = False
    assert set(divide_and_conquer(tau_bar, queues, avail, 5, 1.0).tolist()) == {0, 2, 3}
    with pytest.raises(ValueError, match="m must be"):
        divide_and_conquer(tau_bar, queues, avail, -1, 1.0)


# ------------------------------------------------------------ virtual queues
def test_queue_update_by_hand():
    z = np.array([0.0, 0.1, 2.0])
    np.testing.assert_allclose(update_queues(z, np.array([0, 2]), 0.25), [0.0, 0.35, 1.25])


def test_agent_queues_follow_the_recursion():
    system = SyntheticSystem(12, seed=1)
    agent = agents.make("rbcsf", make_spec(12, 3), beta=0.2, v=5.0)
    agent.reset(system.obs())
    for _ in range(60):
        before = agent.queues.copy()
        chosen = agent.select(system.obs())
        x = np.isin(np.arange(12), chosen).astype(float)
        np.testing.assert_allclose(agent.queues, np.maximum(before + 0.2 - x, 0.0))
        system.step(chosen)
    assert agent.queues.max() > 0  # the queues were exercised


def test_default_beta_keeps_the_reimplementations_share_and_infeasible_beta_is_refused():
    assert agents.make("rbcsf", make_spec(40, 8)).beta == pytest.approx(0.15)  # 0.75 · 8 / 40
    assert agents.make("rbcsf", make_spec(10, 4, mode="one")).beta == pytest.approx(0.075)  # m = 1
    with pytest.raises(ValueError, match="beta"):
        agents.make("rbcsf", make_spec(40, 8), beta=0.25)  # 0.25 · 40 = 10 > 8


# ------------------------------------------------------------ ridge regression and LCB
def test_ridge_and_lower_confidence_bound_by_hand():
    n = 3
    agent = agents.make("rbcsf", make_spec(n, 1), lam=2.0, alpha=0.5, beta=0.0)
    c1 = np.array([[1.0, 1.0, 0.5], [2.0, 0.0, 0.5], [0.5, 1.0, 1.0]])
    obs = make_obs(n, c1, np.ones(n), np.zeros(n), np.zeros(n))
    agent.reset(obs)
    np.testing.assert_allclose(agent.estimated_times(obs), -0.5 * np.linalg.norm(c1, axis=1) / np.sqrt(2.0))
    chosen = agent.select(obs)
    c2 = np.array([[0.5, 0.0, 0.7], [1.0, 1.0, 1.0], [2.0, 0.0, 0.3]])
    tau = np.array([3.0, 4.0, 5.0])
    responded = np.isin(np.arange(n), chosen).astype(float)
    obs2 = make_obs(n, c2, np.ones(n), tau * responded, responded)
    agent.observe_feedback(obs2)
    j = int(chosen[0])
    h = 2.0 * np.eye(3) + np.outer(c1[j], c1[j])
    theta = np.linalg.solve(h, tau[j] * c1[j])
    np.testing.assert_allclose(agent.theta_hat()[j], theta, rtol=1e-5)
    expected = c2[j] @ theta - 0.5 * np.sqrt(c2[j] @ np.linalg.solve(h, c2[j]))
    np.testing.assert_allclose(agent.estimated_times(obs2)[j], expected, rtol=1e-5)
    others = [i for i in range(n) if i != j]
    np.testing.assert_array_equal(agent.theta_hat()[others], 0.0)  # only the responder learnt


def test_ridge_estimate_converges_to_theta_star_on_the_noiseless_model():
    theta_star = SyntheticSystem(16, 2).theta

    def error(rounds, **params):
        agent, _, _, _ = run_synthetic("rbcsf", rounds, n=16, k=4, seed=2, **params)
        return np.abs(agent.theta_hat() - theta_star).max(), agent.ridge.count.min()

    # the fairness guarantee keeps every client observed, so every regression converges; with λ = 1 the
    # shrinkage fades slowly (s = 1 and M/B vary little for clients rarely picked twice in a row)
    errors = [error(t)[0] for t in (50, 200, 600)]
    assert errors[0] > errors[1] > errors[2]
    err, fewest = error(600, lam=0.01)
    assert err < 0.02 and fewest > 80


# ------------------------------------------------------------ long-run behaviour (synthetic system)
def test_long_run_fairness_and_round_time_between_fedcs_and_random():
    rounds, beta = 1500, 0.15
    rb, rate, t_rb, _ = run_synthetic("rbcsf", rounds, seed=3, noise=0.1, beta=beta)
    _, rate_cs, t_cs, _ = run_synthetic("fedcs", rounds, seed=3, noise=0.1)
    _, rate_rand, t_rand, _ = run_synthetic("random", rounds, seed=3, noise=0.1)
    assert rate.min() >= beta - 0.02  # every client's long-run rate ≥ β
    assert rate_cs.min() < beta / 3  # FedCS starves the slow clients
    assert t_cs.mean() < t_rb.mean() < t_rand.mean()


def test_larger_v_shortens_rounds_and_lengthens_queues():
    _, _, t5, q5 = run_synthetic("rbcsf", 800, seed=4, v=5.0)
    _, _, t50, q50 = run_synthetic("rbcsf", 800, seed=4, v=50.0)
    assert t50.mean() < t5.mean()
    assert q50.max() > q5.max()


# ------------------------------------------------------------ long-run behaviour (the env's HeteroSystem preset)
def test_long_run_on_the_heterogeneous_system_preset():
    import gymnasium as gym

    import fedsel_env  # noqa: F401  (registers the env ids)

    # logreg and one evaluation at the end keep a round cheap; V = 5 lets the queues settle within the run
    cfg = {"model": "logreg", "eval_every": 300}

    def run(name, rounds, **params):
        env = gym.make("fedsel/FedSelect-HeteroSystem-v0", config={**cfg, "max_rounds": rounds})
        obs, _ = env.reset(seed=0)
        agent = agents.make(name, env.unwrapped.selection_spec, seed=0, **params)
        times, done = [], False
        while not done:
            obs, _, terminated, truncated, info = env.step(agent.predict(obs)[0])
            times.append(info["round_time"])
            done = terminated or truncated
        return agent, info["participation"] / info["round"], np.mean(times)

    rb, rate, rb_time = run("rbcsf", 300, v=5.0)  # measured: min rate 0.147, mean round time 2.9 s
    assert rb.beta == pytest.approx(0.15)  # 40 clients, 8 per round
    _, _, random_time = run("random", 150)  # measured: 5.7 s
    assert rate.min() >= rb.beta - 0.02
    assert rb_time < 0.75 * random_time
