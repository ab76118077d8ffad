"""SB3's VecEnv over the batched vector env (``agents/training/batched_vec_env.py``, issue #27).

It must give SB3 what ``DummyVecEnv`` of Monitor-wrapped single envs gives (observations, rewards, dones,
terminal observations, time-limit flags, Monitor's episode records, the episode stream's starts, masks),
and ``train_agent.py --n-envs E`` trains DQN (``one``) and PPO (``topk``) on it by default.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml

import fedsel_env  # noqa: F401
from agents.training.batched_vec_env import BatchedVecEnv
from agents.training.envs import make_env_fn, make_vec_env
from agents.training.stream import START_KEY
from fedsel_env.config import make_config
from test_train_agent import QUIET, train_agent

torch.set_num_threads(1)


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=np.asarray(a).dtype.kind == "f")


@pytest.mark.parametrize("action_mode", ["one", "topk"])
def test_adapter_gives_what_dummy_vec_env_gives(action_mode):
    from stable_baselines3.common.vec_env import DummyVecEnv

    cfg = make_config({"action_mode": action_mode, "system": {"availability": 0.6}}, preset="tiny")
    ours = BatchedVecEnv(cfg, 3)
    theirs = DummyVecEnv([make_env_fn(cfg, i) for i in range(3)])
    rng = np.random.default_rng(0)
    ends = 0
    for envs in (ours, theirs):
        envs.seed(5)
    assert _same(ours.reset(), theirs.reset())
    assert all(_same(a[START_KEY], b[START_KEY]) for a, b in zip(ours.reset_infos, theirs.reset_infos))
    for _ in range(12):
        action = np.stack([ours.action_space.sample() for _ in range(3)]) if action_mode == "topk" else \
            rng.integers(0, 8, size=3)
        o1, r1, d1, i1 = ours.step(action)
        o2, r2, d2, i2 = theirs.step(action)
        assert _same(o1, o2) and _same(r1, r2) and _same(d1, d2)
        for a, b in zip(i1, i2):
            ea, eb = a.pop("episode", None), b.pop("episode", None)
            assert (ea is None) == (eb is None) and (ea is None or (ea["r"], ea["l"]) == (eb["r"], eb["l"]))
            assert _same(a, b), [k for k in set(a) | set(b) if k not in a or k not in b or not _same(a[k], b[k])]
        ends += int(d1.sum())
        assert all(_same(a[START_KEY], b[START_KEY]) for a, b in zip(ours.reset_infos, theirs.reset_infos))
    assert ends >= 3
    masks = ours.env_method("action_masks")
    assert len(masks) == 3 and all(_same(m, n) for m, n in zip(masks, theirs.env_method("action_masks")))
    assert ours.get_attr("server_step") == theirs.get_attr("server_step")
    ours.close()
    theirs.close()


def test_make_vec_env_kinds():
    from stable_baselines3.common.vec_env import DummyVecEnv

    cfg = make_config({}, preset="tiny")
    env = make_vec_env(cfg, 2)
    assert isinstance(env, BatchedVecEnv)
    env.close()
    env = make_vec_env(make_config({"action_mode": "subset"}, preset="tiny"), 2)
    assert isinstance(env, DummyVecEnv)  # SubsetRepair's learner-facing wrapper is per env
    env.close()
    with pytest.raises(ValueError, match="--vec-env"):
        make_vec_env(cfg, 2, "threads")


@pytest.mark.parametrize("algo,mode", [("dqn", "one"), ("ppo", "topk")])
def test_train_agent_trains_on_the_batched_vec_env(algo, mode, tmp_path):
    hp = ["learning_starts=50", "batch_size=16", "policy_kwargs={net_arch: [32]}"] if algo == "dqn" else \
        ["n_steps=32", "batch_size=32", "n_epochs=1", "policy_kwargs={net_arch: [32]}"]
    run = train_agent.main(["--algo", algo, "--env", "tiny", "--env-kwargs", f"action_mode={mode}",
                            "--n-timesteps", "256", "--n-envs", "4", "--eval-freq", "0", "--save-freq", "0",
                            "--runs-dir", str(tmp_path), "--name", "b", "--hyperparams", *hp, *QUIET])
    args = yaml.safe_load((run / "args.yaml").read_text())
    assert args["vec_env"] == "batched" and args["n_envs"] == 4
    summary = yaml.safe_load((run / "summary.yaml").read_text())
    assert summary["num_timesteps"] >= 256
