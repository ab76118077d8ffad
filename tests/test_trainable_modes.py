"""Every action mode trainable by the ecosystem's algorithms (issue #16, part 1).

``subset`` batched by Gymnasium's vector envs samples valid subsets; ``SubsetRepair`` turns any bit vector
into a round by its documented rule and gives MaskablePPO its 2N masks; ``train_agent.py`` trains
MaskablePPO (subset, one), PPO (topk, subset) and SAC (topk) on the tiny preset, and every round those
runs played (training and evaluation) was a valid action, with no masked client ever picked by MaskablePPO.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import fedsel_env  # noqa: F401  (registers the env ids)
from fedsel_env.actions import SubsetBatch, SubsetSpace
from fedsel_env.env import FedSelectEnv
from fedsel_env.wrappers import SubsetRepair, repair_subset, subset_masks

ROOT = Path(__file__).resolve().parents[1]
torch.set_num_threads(1)


def test_vector_env_samples_valid_subsets():
    envs = gym.make_vec("fedsel/FedSelect-Tiny-v0", 3, config={"action_mode": "subset"})
    try:
        assert isinstance(envs.action_space, SubsetBatch) and envs.action_space.shape == (3, 8)
        envs.action_space.seed(0)
        single = envs.single_action_space
        for _ in range(50):
            batch = envs.action_space.sample()
            assert envs.action_space.contains(batch)
            assert all(single.contains(row) for row in batch)  # each row between 1 and K = 3 marks
        assert not envs.action_space.contains(np.ones((3, 8), dtype=np.int8))
    finally:
        envs.close()


def test_env_keeps_its_strict_contract_and_the_wrapper_repairs():
    env = FedSelectEnv(preset="tiny", config={"action_mode": "subset"})
    env.reset(seed=0)
    with pytest.raises(ValueError, match="between 1 and K=3"):
        env.step(np.ones(8, dtype=np.int8))  # a hand-written agent's bug is still an error

    wrapped = SubsetRepair(FedSelectEnv(preset="tiny", config={"action_mode": "subset"}))
    assert wrapped.action_space == gym.spaces.MultiBinary(8)
    wrapped.reset(seed=0)
    _, _, _, _, info = wrapped.step(np.ones(8, dtype=np.int8))
    assert info["marked"] == 8 and len(info["selected"]) == 3
    _, _, _, _, info = wrapped.step(np.zeros(8, dtype=np.int8))
    assert info["marked"] == 0 and len(info["selected"]) == 1
    with pytest.raises(ValueError, match="0/1 vector of shape"):
        wrapped.step(np.full(8, 2))
    with pytest.raises(ValueError, match="action_mode 'subset'"):
        SubsetRepair(FedSelectEnv(preset="tiny"))


def test_repair_rule():
    rng = np.random.default_rng(0)
    available = np.array([1, 1, 0, 1, 1, 0, 1, 1], dtype=bool)
    over = np.array([1, 1, 1, 1, 1, 0, 0, 0])
    picks = [np.flatnonzero(repair_subset(over, 3, available, rng)) for _ in range(300)]
    assert all(len(p) == 3 and set(p) <= {0, 1, 2, 3, 4} for p in picks)  # K of the marked ones
    counts = np.bincount(np.concatenate(picks), minlength=8)[:5]
    assert counts.min() > 120  # each marked client about 3/5 of the time: no index is favoured
    empty = [int(np.flatnonzero(repair_subset(np.zeros(8), 3, available, rng))[0]) for _ in range(200)]
    assert set(empty) == set(np.flatnonzero(available).tolist())  # one available client
    valid = np.array([0, 1, 0, 0, 0, 0, 1, 0])
    np.testing.assert_array_equal(repair_subset(valid, 3, available, rng), valid)  # a valid action is kept


def test_masks_in_sb3_contribs_layout():
    np.testing.assert_array_equal(subset_masks(np.array([True, False, True])),
                                  [True, True, True, False, True, True])
    env = SubsetRepair(FedSelectEnv(preset="tiny", config={"action_mode": "subset"}))
    env.reset(seed=1)
    masks = env.action_masks()
    assert masks.shape == (16,)
    np.testing.assert_array_equal(masks[1::2], env.unwrapped.action_masks())


def test_repair_draws_follow_the_episode_not_the_call_order():
    """The wrapper's generator is seeded from the env's episode: the same episode repairs the same way."""
    def run():
        env = SubsetRepair(FedSelectEnv(preset="tiny", config={"action_mode": "subset"}))
        env.reset(seed=5)
        return [tuple(env.step(np.ones(8, dtype=np.int8))[4]["selected"]) for _ in range(3)]

    assert run() == run()


def _load_train_agent():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    if "train_agent" in sys.modules:
        return sys.modules["train_agent"]
    spec = importlib.util.spec_from_file_location("train_agent", ROOT / "train_agent.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_agent"] = module
    spec.loader.exec_module(module)
    return module


# (algo, extra train_agent.py arguments, whether unavailable clients are masked)
RUNS = [
    ("maskable_ppo", [], True),                                       # its config: subset
    ("maskable_ppo", ["--env-kwargs", "action_mode=one"], True),
    ("ppo", [], False),                                               # its config: topk
    ("sac", [], False),                                               # its config: topk
    ("ppo", ["--env-kwargs", "action_mode=subset"], False),
]


@pytest.mark.parametrize("algo,extra,masked", RUNS, ids=["maskable_ppo-subset", "maskable_ppo-one", "ppo-topk",
                                                          "sac-topk", "ppo-subset"])
def test_train_agent_trains_every_mode(algo, extra, masked, tmp_path, monkeypatch):
    played = []  # (mode, selected, available before the step) of every round any env of the run played
    step = FedSelectEnv.step

    def recorded(self, action):
        available = self.action_masks().copy()
        out = step(self, action)  # the env's strict decode: an invalid action raises here
        played.append((self.config["action_mode"], np.asarray(out[4]["selected"]), available))
        return out

    monkeypatch.setattr(FedSelectEnv, "step", recorded)
    marked = []
    import fedsel_env.wrappers as wrappers
    repair = wrappers.repair_subset
    monkeypatch.setattr(wrappers, "repair_subset", lambda bits, *a: (marked.append(int(np.sum(bits))),
                                                                     repair(bits, *a))[1])
    fast = ["policy_kwargs={net_arch: [32]}"] + (["learning_starts=50", "batch_size=32"] if algo == "sac" else
                                                 ["n_steps=64", "batch_size=64", "n_epochs=2"])
    run_dir = _load_train_agent().main(
        ["--algo", algo, "--env", "tiny", "--n-timesteps", "200", "--runs-dir", str(tmp_path), "--name", "run",
         "--eval-freq", "100", "--eval-episodes", "1", "--save-freq", "0", "--no-progress-bar", "--verbose", "0",
         "--hyperparams", *fast, *extra])

    assert (run_dir / "model.zip").is_file()
    mode = dict(a.split("=") for a in extra[1:]).get("action_mode", "topk" if algo in ("ppo", "sac") else "subset")
    assert len(played) >= 200 and {m for m, _, _ in played} == {mode}  # training + evaluation rounds
    k = 1 if mode == "one" else 3
    for _, selected, available in played:
        assert 1 <= len(selected) <= k and len(set(selected.tolist())) == len(selected)
    unavailable_seen = sum(not available.all() for _, _, available in played)
    assert unavailable_seen > 10  # availability 0.8: masking had something to do
    if masked:
        assert all(available[selected].all() for _, selected, available in played), "a masked client was picked"
    if mode == "subset" and not masked:
        assert max(marked) > 3  # PPO's independent bits marked too many clients, and the rule made a round of them
