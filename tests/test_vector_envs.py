"""Gymnasium's vector envs work with fedsel out of the box (part of issue #16)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import fedsel_env  # noqa: F401  (registers the ids and the fork hook)

ASYNC_AFTER_TORCH = textwrap.dedent("""
    import torch
    x = torch.randn(300, 300); (x @ x).sum()   # torch's OpenMP pool has run in the parent
    import gymnasium as gym, fedsel_env
    envs = gym.make_vec("fedsel/FedSelect-Tiny-v0", 2, vectorization_mode="async")   # fork, gymnasium's default
    envs.reset(seed=0)
    for _ in range(3):
        envs.step(envs.action_space.sample())
    envs.close()
    print("done")
""")


def test_async_vector_env_after_torch_ran_in_the_parent_does_not_hang():
    """Before the fork hook this hung forever in the workers' first torch call (OpenMP is not fork-safe)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", ASYNC_AFTER_TORCH], capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("done")


def test_a_forked_child_runs_torch_on_one_thread():
    before = torch.get_num_threads()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.write(write, str(torch.get_num_threads()).encode())
        os._exit(0)
    os.close(write)
    child_threads = int(os.read(read, 16).decode())
    os.waitpid(pid, 0)
    os.close(read)
    assert child_threads == 1
    assert torch.get_num_threads() == before  # the parent keeps its setting


def test_env_computes_on_its_torch_threads_and_gives_the_caller_its_setting_back(monkeypatch):
    from fedsel_env.env import FedSelectEnv

    seen = []
    env = FedSelectEnv(preset="tiny")
    real = env.view.__class__.observe
    monkeypatch.setattr(env.view.__class__, "observe", lambda view: (seen.append(torch.get_num_threads()),
                                                                     real(view))[1])
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        env.reset(seed=0)
        env.step(np.ones(env.num_clients, dtype=np.float32))
        assert torch.get_num_threads() == 2  # the caller's setting is back
        assert seen == [1, 1]  # reset and step ran on the config's one thread
        seen.clear()
        other = FedSelectEnv(preset="tiny", config={"torch_threads": None})  # leave torch's setting alone
        other.reset(seed=0)
        assert seen == [2]
    finally:
        torch.set_num_threads(before)


def test_torch_threads_field_is_validated():
    import pytest

    from fedsel_env.config import make_config

    for bad in (0, -1, 2.5, "2", True, 10**6):
        with pytest.raises(ValueError, match="torch_threads"):
            make_config({"torch_threads": bad})
    assert make_config({"torch_threads": None})["torch_threads"] is None


# ------------------------------------------------------------------- info of vector envs, every action mode
# Few clients available and some dropping out or arriving late: the client-id lists of ``info`` differ in
# length between envs and rounds, which broke gymnasium's ``VectorEnv._add_info`` while they were ndarrays
# ("could not broadcast input array from shape (2,) into shape (3,)").
UNRELIABLE = {"system": {"availability": 0.3},
              "adversary": {"dropout": 0.3, "straggler_fraction": 0.25, "deadline": 6.0}}
CLIENT_ID_LISTS = ("selected", "responders", "dropped", "late", "attackers")
VECTOR_STEPS = 12  # the tiny preset's episodes last 5 rounds: two or more episode ends and autoresets per env


def _vector_run(vectorization_mode, action_mode):
    """12 steps of ``make_vec(tiny, 2)`` on random actions: the actions and every step's batched ``info``."""
    import gymnasium as gym

    envs = gym.make_vec("fedsel/FedSelect-Tiny-v0", 2, vectorization_mode=vectorization_mode,
                        config={"action_mode": action_mode, **UNRELIABLE})
    try:
        envs.action_space.seed(0)
        envs.reset(seed=0)
        steps = []
        for _ in range(VECTOR_STEPS):
            action = envs.action_space.sample()
            _, _, terminated, truncated, info = envs.step(action)
            steps.append((action, terminated | truncated, info))
    except BaseException:
        envs.close(terminate=True)  # an async env whose step failed would wait for that step in close()
        raise
    envs.close()
    return steps


def _single_env_replay(action_mode, env_index, steps):
    """What env ``env_index`` of the vector env saw, replayed on its own (seed 0 + index, the same actions,
    gymnasium's next-step autoreset: the step after an episode's end is a ``reset()``)."""
    import gymnasium as gym

    env = gym.make("fedsel/FedSelect-Tiny-v0", config={"action_mode": action_mode, **UNRELIABLE})
    env.reset(seed=env_index)
    infos, ended = [], False
    for action, _, _ in steps:
        if ended:
            infos.append(env.reset()[1])
            ended = False
        else:
            _, _, terminated, truncated, info = env.step(action[env_index])
            infos.append(info)
            ended = terminated or truncated
    env.close()
    return infos


@pytest.mark.parametrize("action_mode", ["one", "topk", "subset"])
@pytest.mark.parametrize("vectorization_mode", ["sync", "async"])
def test_make_vec_steps_every_action_mode_with_few_available_clients(vectorization_mode, action_mode):
    steps = _vector_run(vectorization_mode, action_mode)
    assert sum(int(done.sum()) for _, done, _ in steps) >= 4  # both envs ended episodes and were reset
    lengths_differ = False
    for _, _, info in steps:
        stepped = info.get("_selected", np.zeros(2, dtype=bool))  # False: this env was reset this step
        if stepped.any():
            assert info["client_accuracies"].shape == (2, 8) and info["participation"].shape == (2, 8)
        for i in np.flatnonzero(stepped):
            ids = {key: info[key][i] for key in CLIENT_ID_LISTS}
            for key, value in ids.items():  # a list of Python ints per env, usable as an index
                assert type(value) is list and all(type(c) is int and 0 <= c < 8 for c in value), (key, value)
            assert 1 <= len(ids["selected"]) <= 3
            arrived = ids["responders"] + ids["dropped"] + ids["late"]
            assert sorted(arrived) == sorted(set(arrived)) and set(arrived) <= set(ids["selected"])
            assert info["participation"][i][ids["responders"]].min(initial=1) >= 1
        if stepped.all():
            lengths_differ |= any(len(info[k][0]) != len(info[k][1]) for k in ("selected", "responders"))
    assert lengths_differ  # the case that crashed: envs with client lists of different lengths in one step
    # each env's info is the one it would give on its own
    for i in range(2):
        alone = _single_env_replay(action_mode, i, steps)
        for t, (_, _, info) in enumerate(steps):
            stepped = bool(info.get("_selected", np.zeros(2, dtype=bool))[i])
            assert stepped == ("selected" in alone[t]), t
            for key, value in alone[t].items():
                assert info[f"_{key}"][i] and np.array_equal(info[key][i], value, equal_nan=True), (t, key)
