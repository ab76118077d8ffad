"""FAVOR's Double DQN (docs/SPEC.md §4): the target on a hand-built batch, masked exploration, the deployed agent."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch as th
import yaml
from stable_baselines3 import DQN
from stable_baselines3.common.logger import configure
from stable_baselines3.common.type_aliases import ReplayBufferSamples
from stable_baselines3.common.vec_env import DummyVecEnv

import agents
from agents.favor import DoubleDQN, FavorAgent, double_dqn_target, flat_size
from fedsel_env.server_view import flatten as flatten_observation
from fedsel_env.spec import CLIENT_FEATURES, SelectionSpec

th.set_num_threads(1)


class ToyEnv(gym.Env):
    """Two-number observations, ``n`` actions, a random availability mask each step."""

    def __init__(self, n: int = 3, obs_dim: int = 2, p_avail: float = 0.5, horizon: int = 10) -> None:
        self.observation_space = gym.spaces.Box(-10.0, 10.0, (obs_dim,), np.float32)
        self.action_space = gym.spaces.Discrete(n)
        self.p_avail, self.horizon = p_avail, horizon
        self.taken_unavailable = 0
        self.steps = 0

    def _draw_mask(self) -> None:
        self.mask = self.np_random.random(self.action_space.n) < self.p_avail
        if not self.mask.any():
            self.mask[self.np_random.integers(self.action_space.n)] = True

    def action_masks(self) -> np.ndarray:
        return self.mask.copy()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self._draw_mask()
        return self.np_random.normal(size=self.observation_space.shape).astype(np.float32), {}

    def step(self, action):
        self.taken_unavailable += int(not self.mask[int(action)])
        self.steps += 1
        self.t += 1
        self._draw_mask()
        obs = self.np_random.normal(size=self.observation_space.shape).astype(np.float32)
        return obs, float(action == 0), False, self.t >= self.horizon, {}


def _linear_model(cls, w: np.ndarray, w_target: np.ndarray, gamma: float = 0.9):
    """A DQN-family model whose Q-network is one linear layer (net_arch=[]) with the given weights."""
    model = cls("MlpPolicy", ToyEnv(), policy_kwargs=dict(net_arch=[]), gamma=gamma, learning_starts=0,
                batch_size=2, buffer_size=16, seed=0, device="cpu")
    with th.no_grad():
        for net, weights in ((model.q_net, w), (model.q_net_target, w_target)):
            linear = net.q_net[0]
            linear.weight.copy_(th.as_tensor(weights, dtype=th.float32))
            linear.bias.zero_()
    model.set_logger(configure(None, []))
    return model


# Q_online(s') = [1, 5, 2] (argmax 1), Q_target(s') = [4, 0, 3] (argmax 0): the two rules disagree.
W_ONLINE = np.array([[1.0, 0.5], [5.0, -1.0], [2.0, 3.0]])   # columns: s' = [1, 0], s = [0, 1]
W_TARGET = np.array([[4.0, 0.0], [0.0, 0.0], [3.0, 0.0]])
BATCH = ReplayBufferSamples(
    observations=th.tensor([[0.0, 1.0], [0.0, 1.0]]),
    actions=th.tensor([[2], [0]]),
    next_observations=th.tensor([[1.0, 0.0], [1.0, 0.0]]),
    dones=th.tensor([[0.0], [1.0]]),
    rewards=th.tensor([[-0.5], [-0.2]]),
)


def _huber(x: float) -> float:
    return 0.5 * x * x if abs(x) < 1 else abs(x) - 0.5


def test_double_dqn_target_by_hand():
    y = double_dqn_target(BATCH.rewards, BATCH.dones, 0.9,
                          next_q_online=th.tensor([[1.0, 5.0, 2.0]] * 2),
                          next_q_target=th.tensor([[4.0, 0.0, 3.0]] * 2))
    # non-terminal: r + γ Q_target(s', argmax Q_online = 1) = -0.5 + 0.9 * 0; terminal: r
    assert y.flatten().tolist() == pytest.approx([-0.5, -0.2])


@pytest.mark.parametrize("cls, expected", [
    # Q(s, a): online column s = [0, 1] → [0.5, -1, 3]; a = 2 → 3.0, a = 0 → 0.5
    (DoubleDQN, (_huber(3.0 - (-0.5)) + _huber(0.5 - (-0.2))) / 2),        # Y = r + γ Q_target(s', 1) = r + 0
    (DQN, (_huber(3.0 - (-0.5 + 0.9 * 4.0)) + _huber(0.5 - (-0.2))) / 2),  # Y = r + γ max Q_target(s') = r + 3.6
])
def test_train_step_loss_uses_the_double_target(cls, expected, monkeypatch):
    model = _linear_model(cls, W_ONLINE, W_TARGET)
    monkeypatch.setattr(model.replay_buffer, "sample", lambda *a, **k: BATCH)
    target_before = model.q_net_target.q_net[0].weight.detach().clone()
    online_before = model.q_net.q_net[0].weight.detach().clone()
    model.train(gradient_steps=1, batch_size=2)
    assert model.logger.name_to_value["train/loss"] == pytest.approx(expected, rel=1e-6)
    # one optimiser step moved the online network only
    assert th.equal(model.q_net_target.q_net[0].weight, target_before)
    assert not th.equal(model.q_net.q_net[0].weight, online_before)


def test_double_dqn_n_step_discounts():
    y = double_dqn_target(th.tensor([[1.0]]), th.tensor([[0.0]]), th.tensor([[0.5]]),
                          th.tensor([[0.0, 2.0]]), th.tensor([[10.0, 4.0]]))
    assert y.item() == pytest.approx(1.0 + 0.5 * 4.0)


def test_masked_exploration_never_picks_unavailable_actions():
    env = DummyVecEnv([lambda: ToyEnv(n=6, p_avail=0.4)] * 2)
    model = DoubleDQN("MlpPolicy", env, policy_kwargs=dict(net_arch=[16]), learning_starts=30, batch_size=8,
                      buffer_size=200, exploration_fraction=0.5, seed=1, device="cpu")
    model.learn(total_timesteps=120)
    assert sum(e.steps for e in env.envs) >= 120
    assert sum(e.taken_unavailable for e in env.envs) == 0
    # the same run without masking does pick unavailable actions (the check can fail)
    env2 = DummyVecEnv([lambda: ToyEnv(n=6, p_avail=0.4)])
    DoubleDQN("MlpPolicy", env2, policy_kwargs=dict(net_arch=[16]), learning_starts=30, batch_size=8,
              buffer_size=200, seed=1, mask_actions=False, device="cpu").learn(total_timesteps=60)
    assert env2.envs[0].taken_unavailable > 0


def test_masked_greedy_action_is_best_available():
    env = DummyVecEnv([lambda: ToyEnv(n=3)])
    model = _linear_model(DoubleDQN, W_ONLINE, W_TARGET)
    model.set_env(env)
    model._last_obs = np.array([[1.0, 0.0]], dtype=np.float32)  # Q = [1, 5, 2]
    model.exploration_rate = 0.0
    model.num_timesteps = 10
    env.envs[0].reset(seed=0)
    env.envs[0].mask = np.array([True, False, True])
    action, _ = model._sample_action(learning_starts=0, n_envs=1)
    assert action.tolist() == [2]
    env.envs[0].mask = np.array([True, True, True])
    assert model._sample_action(learning_starts=0, n_envs=1)[0].tolist() == [1]


def test_save_load_keeps_double_dqn_and_exploration_stream(tmp_path):
    model = DoubleDQN("MlpPolicy", ToyEnv(), policy_kwargs=dict(net_arch=[8]), seed=3, mask_actions=False,
                      device="cpu")
    model.exploration_rng.random(5)
    model.save(tmp_path / "m.zip")
    loaded = DoubleDQN.load(tmp_path / "m.zip", device="cpu")
    assert loaded.mask_actions is False
    assert loaded.exploration_rng.random() == model.exploration_rng.random()
    obs = np.ones(2, dtype=np.float32)
    assert loaded.predict(obs, deterministic=True)[0] == model.predict(obs, deterministic=True)[0]


# -- the deployed agent -----------------------------------------------------------------------------------
def _spec(n=6, k=3, d=4, mode="topk") -> SelectionSpec:
    return SelectionSpec(num_clients=n, clients_per_round=k, action_mode=mode, num_samples=np.full(n, 50),
                         max_rounds=10, pca_components=d, model_bytes=1000)


def _obs(spec: SelectionSpec, rng: np.random.Generator, available) -> dict:
    clients = rng.random((spec.num_clients, len(CLIENT_FEATURES))).astype(np.float32)
    clients[:, CLIENT_FEATURES.index("available")] = np.asarray(available, dtype=np.float32)
    return {"weights": rng.normal(size=(spec.num_clients + 1, spec.pca_components)).astype(np.float32),
            "clients": clients, "progress": np.array([0.1, 0.5], dtype=np.float32)}


def _saved_model(tmp_path, spec, flat_parts):
    dim = flat_size(spec, flat_parts)
    env = ToyEnv(n=spec.num_clients, obs_dim=dim)
    model = DoubleDQN("MlpPolicy", env, policy_kwargs=dict(net_arch=[32]), seed=0, device="cpu")
    model.save(tmp_path / "model.zip")
    with open(tmp_path / "env_config.yaml", "w") as f:
        yaml.safe_dump({"flat_parts": list(flat_parts), "action_mode": "one", "observation": "flat"}, f)
    return model


def test_flatten_observation_order_and_batch():
    spec = _spec()
    obs = _obs(spec, np.random.default_rng(0), np.ones(6))
    flat = flatten_observation(obs, ["weights", "clients", "progress"])
    assert flat.shape == (flat_size(spec, ["weights", "clients", "progress"]),)
    np.testing.assert_array_equal(flat[: 7 * 4], obs["weights"].ravel())
    np.testing.assert_array_equal(flat[-2:], obs["progress"])
    batch = {k: v[None] for k, v in obs.items()}
    np.testing.assert_array_equal(flatten_observation(batch, ["weights", "clients", "progress"])[0], flat)
    with pytest.raises(ValueError, match="flat_parts"):
        flatten_observation(obs, ["labels"])


@pytest.mark.parametrize("flat_parts", [["weights"], ["weights", "clients", "progress"]])
def test_favor_agent_takes_top_k_available_by_q(tmp_path, flat_parts):
    spec = _spec()
    model = _saved_model(tmp_path, spec, flat_parts)
    agent = agents.favor.FavorAgent.load(tmp_path / "model.zip", spec)
    rng = np.random.default_rng(1)
    for available in ([1, 1, 1, 1, 1, 1], [0, 1, 0, 1, 1, 1], [1, 0, 0, 0, 0, 1]):
        obs = _obs(spec, rng, available)
        q = model.q_net(th.as_tensor(flatten_observation(obs, flat_parts)[None])).detach().numpy()[0]
        avail = np.flatnonzero(available)
        expected = avail[np.argsort(-q[avail])][:3]
        action, _ = agent.predict(obs)
        chosen = np.argsort(-action)[: len(expected)]
        assert sorted(chosen.tolist()) == sorted(expected.tolist())
        assert set(chosen) <= set(avail)
        assert (action[np.setdiff1d(np.arange(6), expected)] < action[expected].min()).all()
    # batched observations from a one-env VecEnv, and the "one" mode: the best available client
    batch = {k: v[None] for k, v in obs.items()}
    assert agent.predict(batch)[0].shape == (1, 6)
    one = FavorAgent.load(tmp_path / "model.zip", _spec(mode="one"))
    assert int(one.predict(obs)[0]) == expected[0]


def test_favor_agent_rejects_mismatched_model(tmp_path):
    _saved_model(tmp_path, _spec(), ["weights"])
    with pytest.raises(ValueError, match="shape"):
        FavorAgent.load(tmp_path / "model.zip", _spec(d=5))
    with pytest.raises(ValueError, match="Discrete"):
        FavorAgent.load(tmp_path / "model.zip", _spec(n=5, d=4))
    with pytest.raises(ValueError, match="does not exist"):
        FavorAgent.load(tmp_path / "nothing.zip", _spec())
    (tmp_path / "env_config.yaml").unlink()
    with pytest.raises(ValueError, match="env_config.yaml"):
        FavorAgent.load(tmp_path / "model.zip", _spec())
    agent = FavorAgent.load(tmp_path / "model.zip", _spec(), flat_parts=["weights"])
    assert agent.flat_parts == ["weights"]


def test_agents_make_favor(tmp_path):
    _saved_model(tmp_path, _spec(), ["weights"])
    agent = agents.make("favor", _spec(), model_path=str(tmp_path / "model.zip"))
    assert isinstance(agent, FavorAgent)


def test_flatten_matches_the_env_flat_observation():
    import gymnasium

    import fedsel_env  # noqa: F401

    parts = ["weights", "clients", "progress"]
    base = {"action_mode": "topk", "flat_parts": parts}
    dict_env = gymnasium.make("fedsel/FedSelect-Tiny-v0", config={**base, "observation": "dict"})
    flat_env = gymnasium.make("fedsel/FedSelect-Tiny-v0", config={**base, "observation": "flat"})
    obs_d, _ = dict_env.reset(seed=5)
    obs_f, _ = flat_env.reset(seed=5)
    np.testing.assert_array_equal(flatten_observation(obs_d, parts), obs_f)
    action = np.arange(8, dtype=np.float32)
    obs_d, *_ = dict_env.step(action)
    obs_f, *_ = flat_env.step(action)
    np.testing.assert_array_equal(flatten_observation(obs_d, parts), obs_f)
    assert flat_size(dict_env.unwrapped.selection_spec, parts) == flat_env.observation_space.shape[0]
