"""Gymnasium's vector envs work with fedsel out of the box (part of issue #16)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
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
