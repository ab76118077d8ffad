"""workers > 1 (fedsel_env/sim/parallel.py): the same federation, trained and evaluated across processes."""
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import fedsel_env.sim.parallel as parallel
from fedsel_env.env import FedSelectEnv
from fedsel_env.sim.models import init_params, make_model
from fedsel_env.sim.parallel import ParallelTrainer, WorkerPool, split_clients
from fedsel_env.sim.training import BatchedTrainer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def split_everything(monkeypatch):
    """Send every pass to the workers, however small (the tests' federations are tiny)."""
    monkeypatch.setattr(parallel, "MIN_SPLIT_WORK", 0)


SMALL = {"num_clients": 10, "clients_per_round": 5, "max_rounds": 4, "model": "mlp",
         "samples_per_client": 30, "target_accuracy": 0.99, "momentum": 0.5}


def _episode(workers, aggregator="fedavg", seed=3, rounds=4):
    env = FedSelectEnv(config={**SMALL, "workers": workers, "aggregator": aggregator})
    try:
        obs, info = env.reset(seed=seed)
        out = [(obs["weights"].copy(), info["accuracy"], None, None)]
        rng = np.random.default_rng(0)
        for _ in range(rounds):
            obs, r, term, trunc, info = env.step(rng.standard_normal(10).astype(np.float32))
            out.append((obs["weights"].copy(), info["accuracy"], r, info["selected"].copy()))
            if term or trunc:
                break
        return out, env.federation.global_params.clone()
    finally:
        env.close()


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2:].split()[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads parent pids from Linux's /proc")
def test_workers_are_not_forked_from_this_process():
    """Issue #33: the workers come from a forkserver (a clean process), never from a fork of the env's process."""
    assert parallel.start_method() in ("forkserver", "spawn")
    pool = WorkerPool(1)
    try:
        assert pool.start_method == parallel.start_method() != "fork"
        if pool.start_method == "forkserver":
            assert _ppid(pool._procs[0].pid) != os.getpid()  # the server's child, not ours
    finally:
        pool.close()


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (bench/gpu_check.sh runs it on one)"))])
def test_a_workers_env_after_autograd_in_this_process(device, split_everything):
    """Issue #33's failure: autograd run in this process (on a GPU, its device threads) before a ``workers: 2``
    env is built. Forked workers then died with "Unable to handle autograd's threading in combination with
    fork-based multiprocessing" (seen on an H100 host; on a CPU autograd starts no device threads, so there
    the case passes with fork too). The workers' episode must still be the one-process episode."""
    w = torch.randn(8, 8, device=device, requires_grad=True)
    (w @ w).sum().backward()
    assert w.grad is not None
    one, w1 = _episode(1, rounds=2)
    two, w2 = _episode(2, rounds=2)
    for (o1, a1, _, s1), (o2, a2, _, s2) in zip(one, two):
        np.testing.assert_allclose(o1, o2, rtol=1e-4, atol=1e-4)
        assert a1 == pytest.approx(a2, abs=1e-9)
        if s1 is not None:
            np.testing.assert_array_equal(s1, s2)
    torch.testing.assert_close(w1, w2, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("aggregator", ["fedavg", "qfedsgd"])
def test_two_workers_give_the_one_process_episode(aggregator, split_everything):
    one, w1 = _episode(1, aggregator)
    two, w2 = _episode(2, aggregator)
    assert len(one) == len(two)
    for (o1, a1, r1, s1), (o2, a2, r2, s2) in zip(one, two):
        np.testing.assert_allclose(o1, o2, rtol=1e-4, atol=1e-4)
        assert a1 == pytest.approx(a2, abs=1e-9)
        if s1 is not None:
            np.testing.assert_array_equal(s1, s2)
            assert r1 == pytest.approx(r2, abs=1e-6)
    torch.testing.assert_close(w1, w2, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_parallel_trainer_methods_equal_the_local_trainer(split_everything):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(230, 1, 28, 28, generator=g), torch.randint(0, 10, (230,), generator=g)
    offsets = np.array([0, 30, 50, 90, 100, 160, 230])  # unequal clients
    model = make_model("fedmgda_cnn", (1, 28, 28), 10)
    kwargs = dict(model=model, x_train=x, y_train=y, train_offsets=offsets, batch_size=8, lr=0.05)
    local = BatchedTrainer(**kwargs)
    x_test, y_test = torch.randn(37, 1, 28, 28, generator=g), torch.randint(0, 10, (37,), generator=g)
    pool = WorkerPool(1)
    try:
        par = ParallelTrainer(BatchedTrainer(**kwargs), kwargs, x_test, y_test, pool)
        flat = local.layout.flatten(init_params(model, torch.Generator().manual_seed(1)))
        ids = [5, 0, 3, 2, 4]
        gens = lambda: [np.random.default_rng([7, c]) for c in ids]  # noqa: E731
        torch.testing.assert_close(par.train(flat, ids, gens()), local.train(flat, ids, gens()))
        torch.testing.assert_close(par.full_gradients(flat, ids), local.full_gradients(flat, ids))
        for a, b in zip(par.client_losses(flat, ids), local.client_losses(flat, ids)):
            np.testing.assert_allclose(a, b, rtol=1e-6)
        for a, b in zip(par.per_sample_losses(flat, x_test, y_test), local.per_sample_losses(flat, x_test, y_test)):
            torch.testing.assert_close(a, b)
        # a worker's exception comes back as a RuntimeError that carries its traceback
        # (clients 0 and 1: client 0, the larger, is trained here; client 1 in the worker)
        with pytest.raises(RuntimeError, match="worker process failed"):
            par.train(flat, [0, 1], [np.random.default_rng(0), "not a generator"])
        # an error here still collects the worker's answer: the next call gets its own results
        with pytest.raises(AttributeError):
            par.train(flat, [0, 1], ["not a generator", np.random.default_rng(0)])
        torch.testing.assert_close(par.train(flat, ids, gens()), local.train(flat, ids, gens()))
        pool.close()
        assert pool.closed
        with pytest.raises(RuntimeError, match="closed"):
            par.train(flat, ids, gens())
    finally:
        pool.close()


def test_split_clients_balances_and_covers():
    sizes = np.array([100, 10, 90, 20, 80, 30, 70])
    groups = split_clients(np.arange(7), sizes, 2)
    assert sorted(np.concatenate(groups).tolist()) == list(range(7))
    totals = [sizes[g].sum() for g in groups]
    assert abs(totals[0] - totals[1]) <= 100
    assert len(split_clients(np.array([3]), sizes, 2)) == 1  # no empty group


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_bad_workers_value_names_the_field(bad):
    with pytest.raises(ValueError, match="workers"):
        FedSelectEnv(config={**SMALL, "workers": bad})


def test_close_stops_the_workers_and_reset_starts_new_ones(split_everything):
    env = FedSelectEnv(config={**SMALL, "workers": 2})
    env.reset(seed=0)
    procs = list(env._pool._procs)
    assert all(p.is_alive() for p in procs)
    env.close()
    assert not any(p.is_alive() for p in procs)
    env.reset(seed=0)  # a closed env can be reset again: new workers
    env.step(np.arange(10, dtype=np.float32))
    env.close()


def test_shared_memory_failure_says_what_to_do(monkeypatch):
    x, y = torch.zeros(4, 3), torch.zeros(4, dtype=torch.long)
    model = make_model("logreg", (3,), 2)
    kwargs = dict(model=model, x_train=x, y_train=y, train_offsets=np.array([0, 2, 4]), batch_size=2, lr=0.1)

    def no_room(self):
        raise RuntimeError("unable to write to file </torch_1_2>: No space left on device (28)")

    pool = WorkerPool(1)
    try:
        monkeypatch.setattr(torch.Tensor, "share_memory_", no_room)
        with pytest.raises(RuntimeError, match=r"--shm-size.*workers: 1"):
            ParallelTrainer(BatchedTrainer(**kwargs), kwargs, x.clone(), y.clone(), pool)
    finally:
        pool.close()


def test_small_passes_stay_in_this_process(monkeypatch):
    """Under MIN_SPLIT_WORK (rows x parameters) nothing is sent to a worker; above it, the work is split."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(60, 1, 28, 28, generator=g), torch.randint(0, 10, (60,), generator=g)
    model = make_model("fedmgda_cnn", (1, 28, 28), 10)
    kwargs = dict(model=model, x_train=x, y_train=y, train_offsets=np.array([0, 30, 60]), batch_size=10, lr=0.05)
    pool = WorkerPool(1)
    try:
        par = ParallelTrainer(BatchedTrainer(**kwargs), kwargs, x[:20].clone(), y[:20].clone(), pool)
        flat = par.layout.flatten(init_params(model, torch.Generator().manual_seed(1)))
        sent = []
        real_submit = pool.submit
        monkeypatch.setattr(pool, "submit", lambda *a: (sent.append(a[2]), real_submit(*a)))
        par.train(flat, [0, 1], [np.random.default_rng(0), np.random.default_rng(1)])
        par.client_losses(flat, [0, 1])
        par.per_sample_losses(flat, par.x_test, par.y_test)
        assert sent == []  # 60 rows x 21,840 parameters < 2^24
        monkeypatch.setattr(parallel, "MIN_SPLIT_WORK", 60 * model_size(model))
        par.train(flat, [0, 1], [np.random.default_rng(0), np.random.default_rng(1)])
        assert sent == ["train"]
    finally:
        pool.close()


def model_size(model):
    return sum(p.numel() for p in model.parameters())


def test_this_process_works_on_one_thread_and_gets_its_threads_back(split_everything):
    """P processes on P cores: the main process's share runs single-threaded, then its setting returns."""
    seen = []
    env = FedSelectEnv(config={**SMALL, "workers": 2})
    before = torch.get_num_threads()
    try:
        env.reset(seed=0)
        real_train = env.federation.trainer.local.train
        env.federation.trainer.local.train = lambda *a, **k: (seen.append(torch.get_num_threads()), real_train(*a, **k))[1]
        torch.set_num_threads(2)
        env.step(np.arange(10, dtype=np.float32))
        assert seen == [1]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
        env.close()


# ============================================================ workers end with their parent (issue #15, item 3)
# the env's pool (an env with `workers: W` forks W - 1 at its first reset); a bare pool starts in 2 s, an env in 5
PARENT = """
import threading, time
from fedsel_env.sim.parallel import WorkerPool
pools = []
if {in_thread}:  # the pool is forked from a thread that then ends: prctl's signal is not used, the watcher is
    t = threading.Thread(target=lambda: pools.append(WorkerPool({workers} - 1))); t.start(); t.join()
else:
    pools.append(WorkerPool({workers} - 1))
print(" ".join(str(p.pid) for p in pools[0]._procs), flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    from fedsel_env.sim.lifeline import start_time

    return start_time(pid) is not None  # a zombie left for PID 1 to reap counts as gone


@pytest.mark.slow
def test_workers_end_when_their_parent_is_killed():
    """A parent killed without clean-up (SIGKILL; SIGTERM's default action) takes its workers with it.

    Three parents at once (to save time): workers 2 and SIGKILL; workers 3 and SIGTERM; workers 2 forked
    from a thread that has ended (so the kernel's parent-death signal is not set) and SIGKILL.
    """
    cases = [(signal.SIGKILL, 2, False), (signal.SIGTERM, 3, False), (signal.SIGKILL, 2, True)]
    # the checkout first, then whatever PYTHONPATH already holds (bench/gpu_check.sh installs the dependencies there)
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    procs = [subprocess.Popen([sys.executable, "-c", PARENT.format(workers=w, in_thread=t)],
                              stdout=subprocess.PIPE, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": pythonpath, "OMP_NUM_THREADS": "1"})
             for _, w, t in cases]
    workers = {}
    try:
        for proc, (sig, w, _) in zip(procs, cases):
            workers[proc.pid] = [int(p) for p in proc.stdout.readline().split()]
            assert len(workers[proc.pid]) == w - 1
        time.sleep(0.3)  # (a pool forked from a thread that ended is not killed with the thread)
        assert all(_alive(pid) for pids in workers.values() for pid in pids)
        for proc, (sig, _, _) in zip(procs, cases):
            os.kill(proc.pid, sig)
        for proc, (sig, _, _) in zip(procs, cases):
            assert proc.wait(timeout=30) == -sig
        deadline = time.monotonic() + 5.0
        while any(_alive(pid) for pids in workers.values() for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        left = {parent: [p for p in pids if _alive(p)] for parent, pids in workers.items()}
        for pid in (p for pids in left.values() for p in pids):
            os.kill(pid, signal.SIGKILL)
    assert not any(left.values()), f"workers outlived their killed parents: {left}"


@pytest.mark.slow
def test_pool_forked_from_an_ended_thread_keeps_working():
    """prctl's parent-death signal fires when the forking *thread* ends: it is not used then."""
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("pool", WorkerPool(1)))
    t.start()
    t.join()
    pool = box["pool"]
    try:
        time.sleep(0.3)
        assert pool._procs[0].is_alive()
        x, y = torch.zeros(4, 3), torch.zeros(4, dtype=torch.long)
        kwargs = dict(model=make_model("logreg", (3,), 2), x_train=x, y_train=y, train_offsets=np.array([0, 2, 4]),
                      batch_size=2, lr=0.1)
        local = BatchedTrainer(**kwargs)
        par = ParallelTrainer(local, kwargs, x.clone(), y.clone(), pool)
        flat = local.layout.flatten(init_params(kwargs["model"], torch.Generator().manual_seed(1)))
        worker_answer = par._run("client_losses", [(flat, [0]), (flat, [1])])[1]
        np.testing.assert_allclose(worker_answer[0], local.client_losses(flat, [1])[0])
    finally:
        pool.close()
