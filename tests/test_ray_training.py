"""Training on a Ray cluster (issue #46): ``set_es``'s generations as Ray tasks on a real two-node cluster.

The test starts the cluster itself — ``ray start --head`` and a second ``ray start --address`` node, each on one
CPU, every node on the loopback address — trains ``set_es`` through :class:`agents.training.ray_map.RayMapper`
and checks the run equals the one-process run (``set_es.json`` and ``progress.jsonl`` but for the wall times);
then kills the worker node in the middle of a generation and checks the run is still the same (the lost
episodes re-run on the head). Every process it started is killed at the end, whatever happened (found by a
token in their environment and as descendants of those: never by name, so no other Ray on the machine is
touched).

Ray (since ray-project/ray#1596) replaces ``127.0.0.1`` by the machine's address wherever it is given as a
node's or the cluster's address (``ray._private.services.resolve_ip_for_localhost``; ray-project/ray#26293,
#59110), so its servers would listen on that address; the nodes here are started with that replacement
switched off, and then every Ray server listens on 127.0.0.1 alone. A real cluster needs none of this
(docs/TRAINING.md, "Training on a Ray cluster").
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # train_agent.py lives at the repository root
    sys.path.insert(0, str(REPO))

ray = pytest.importorskip("ray", reason="the optional extra 'ray' is not installed (pip install -e '.[ray]'); "
                                        "training on a Ray cluster cannot be tested without it")

from agents.training.ray_map import RayMapper, is_lost  # noqa: E402
from agents.training.set_es import ESEpisode, play_episode  # noqa: E402

# the killing map's task wrapper (_pause_then) travels to the Ray workers by value: this test module is not importable
# there (tests/ is no package on their path)
import ray.cloudpickle  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.ray_cluster

#: ``ray start`` with Ray's loopback replacement switched off (see the module's docstring)
LAUNCH = ("import sys, ray._private.services as s; s.resolve_ip_for_localhost = lambda host: host; "
          "from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()")
#: a lost node is noticed after ~3 missed 1-s health checks instead of Ray's default ~15 s
HEALTH = {"health_check_period_ms": 1000, "health_check_timeout_ms": 1000, "health_check_failure_threshold": 3}


def _free_ports(n: int) -> List[int]:
    """``n`` distinct free ports, their sockets held open together while they are chosen (one at a time, the OS may
    hand the same port out twice: the dashboard's and the client server's once collided, 'used by other components')."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


class LocalCluster:
    """A head and a worker node on this machine (one CPU each), every one of their processes known."""

    def __init__(self, root: Path) -> None:
        self.root, self.token = root, uuid.uuid4().hex
        self.port, self.dashboard_port, self.client_port = _free_ports(3)
        self.address = f"127.0.0.1:{self.port}"
        self.env = {**os.environ, "FEDSEL_RAY_CLUSTER": self.token, "RAY_USAGE_STATS_ENABLED": "0",
                    "OMP_NUM_THREADS": "1"}

    def start(self) -> None:
        node = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--object-store-memory=80000000",
                "--disable-usage-stats"]
        self._ray("start", "--head", f"--port={self.port}", "--include-dashboard=false",
                  f"--dashboard-port={self.dashboard_port}", f"--ray-client-server-port={self.client_port}",
                  f"--system-config={json.dumps(HEALTH)}", f"--temp-dir={self.root}/head", *node)
        self._ray("start", f"--address={self.address}", f"--temp-dir={self.root}/worker", *node)

    def _ray(self, *args: str) -> None:
        done = subprocess.run([sys.executable, "-c", LAUNCH, *args], env=self.env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, f"ray {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"

    def pids(self, node: Optional[str] = None) -> List[int]:
        """The cluster's processes (of one node: ``"head"`` / ``"worker"``): those started with this cluster's
        token in their environment, and their descendants (Ray's workers and agents rewrite their command line
        and environment with their title, so they are found through their parent)."""
        table: Dict[int, Any] = {}
        for p in filter(str.isdigit, os.listdir("/proc")):
            try:
                env = Path(f"/proc/{p}/environ").read_bytes().split(b"\0")
                cmd = Path(f"/proc/{p}/cmdline").read_bytes()
                ppid = int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            table[int(p)] = (ppid, env, cmd)
        mark = f"FEDSEL_RAY_CLUSTER={self.token}".encode()
        # the node's temp dir, as given or with the link resolved
        where = [f"{r}/{node}/".encode() for r in {str(self.root), os.path.realpath(self.root)}] if node else [b""]
        found = {p for p, (_, env, cmd) in table.items() if mark in env and any(w in cmd for w in where)}
        while True:
            more = {p for p, (ppid, _, _) in table.items() if ppid in found} - found
            if not more:
                return sorted(found)
            found |= more

    def kill(self, node: Optional[str] = None) -> None:
        """SIGKILL a node's processes (all the cluster's without ``node``), as a machine that is lost."""
        for _ in range(3):  # a process may start a child while its siblings die
            for p in self.pids(node):
                with contextlib.suppress(ProcessLookupError):  # it ended on its own since pids() listed it
                    os.kill(p, signal.SIGKILL)
            time.sleep(0.2)


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """A started two-node cluster with this process connected to it as the driver; stopped afterwards."""
    import ray._private.services as services

    (tmp_path / "ray").mkdir()
    # Ray's socket paths (temp dir + session + socket name) must fit 107 bytes: a short link to the test's folder
    link = Path(tempfile.mkdtemp(prefix="fr", dir="/tmp")) / "r"
    link.symlink_to(tmp_path / "ray", target_is_directory=True)
    c = LocalCluster(link)
    try:
        c.start()
        monkeypatch.setattr(services, "resolve_ip_for_localhost", lambda host: host)
        ray.init(address=c.address, _node_ip_address="127.0.0.1", logging_level="ERROR", log_to_driver=False)
        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.kill()
        left = c.pids()
        shutil.rmtree(link.parent, ignore_errors=True)
        assert not left, f"cluster processes left running: {left}"


class KillingMapper(RayMapper):
    """A :class:`RayMapper` that records the node of every result and, in its ``kill_at``-th ``map``, kills the
    worker node while it is playing one of that map's tasks (a Ray worker's title is ``ray::run_item`` while it
    runs one, ``ray::IDLE`` between them)."""

    def __init__(self, cluster: Optional[LocalCluster] = None, kill_at: int = 0) -> None:
        super().__init__("auto", log=lambda _line: None)
        self.cluster, self.kill_at, self.calls, self.all_nodes = cluster, kill_at, 0, []
        self.killed_busy = False

    def map(self, fn, items):
        self.calls += 1
        done = threading.Event()
        killer = threading.Thread(target=self._kill_when_busy, args=(done,), daemon=True)
        if self.calls == self.kill_at:
            # every task of this map first waits PAUSE_S (its result unchanged), so the killer finds the worker node
            # busy however fast an episode plays (a 3-round episode on an idle machine ends between two polls)
            fn = functools.partial(_pause_then, fn)
            killer.start()
        try:
            out = super().map(fn, items)
        finally:
            done.set()
            if killer.is_alive():
                killer.join()
        self.all_nodes += self.nodes
        return out

    def _kill_when_busy(self, done: threading.Event) -> None:
        while not done.is_set():
            for p in self.cluster.pids("worker"):
                try:
                    title = Path(f"/proc/{p}/cmdline").read_bytes()
                except OSError:
                    continue
                if title.startswith(b"ray::run_item"):
                    self.cluster.kill("worker")
                    self.killed_busy = True
                    return
            time.sleep(0.01)


#: the seconds each task of the killing map waits before it plays its episode
PAUSE_S = 1.0


def _pause_then(fn, item):
    """``fn(item)`` after :data:`PAUSE_S` seconds (in a Ray worker: this module is pickled by value below)."""
    time.sleep(PAUSE_S)
    return fn(item)


def _run(folder: Path) -> Dict[str, Any]:
    """What a run wrote that must not depend on where it ran: the policy and the log but for its wall times."""
    log = [{k: v for k, v in json.loads(x).items() if k != "wall_s"}
           for x in (folder / "progress.jsonl").read_text().splitlines()]
    return {"set_es.json": (folder / "set_es.json").read_text(), "progress": log}


#: set_es for 2 generations of 3 candidates × 2 federations of 3 rounds (and the learning curve on one seed)
TINY = ["--algo", "set_es", "--env", "Churn", "--hyperparams", "generations=2", "episodes=2", "popsize=3",
        "eval_every=2", "eval_seeds=[100]", "--env-kwargs", "max_rounds=3", "--no-progress-bar", "--verbose", "0"]


def test_set_es_on_a_two_node_cluster_equals_one_process_even_when_a_node_dies(cluster, tmp_path, monkeypatch):
    import train_agent

    one = _run(train_agent.main([*TINY, "--runs-dir", str(tmp_path / "one")]))

    made: List[KillingMapper] = []  # train_agent.py --ray ADDRESS, its RayMapper recording where each episode ran
    monkeypatch.setattr("agents.training.ray_map.RayMapper", lambda address: made.append(KillingMapper()) or made[-1])
    two = train_agent.main([*TINY, "--runs-dir", str(tmp_path / "two"), "--ray", cluster.address])
    assert _run(two) == one
    assert len(set(made[0].all_nodes)) == 2  # the episodes were played on both nodes

    # map 1: generation 1; map 2: generation 2 (P × E = 6 episodes), during which the worker node is killed
    lossy = KillingMapper(cluster, kill_at=2)
    monkeypatch.setattr("agents.training.ray_map.RayMapper", lambda address: lossy)
    lost = train_agent.main([*TINY, "--runs-dir", str(tmp_path / "lost"), "--ray", cluster.address])
    assert lossy.killed_busy and lossy.resubmitted >= 1  # the node died playing an episode: re-run elsewhere
    assert cluster.pids("worker") == []  # the worker node is gone
    assert _run(lost) == one

    rerun = lossy.resubmitted
    bad = ESEpisode({"num_clients": -1}, "rounds_to_target", (0.0,), 0, 1)
    with pytest.raises(ValueError, match="num_clients"):  # the task's own error, raised as itself, not re-run
        lossy.map(play_episode, [bad])
    assert lossy.resubmitted == rerun


def test_an_episode_task_does_not_depend_on_what_its_worker_played_before():
    """A Ray worker keeps its env between tasks (``fedsel_env.rollout.env_for``) and plays them in any order: each
    episode starts from ``env.reset(seed)``, so an episode (its accuracy curve, its selections) is the same after any
    other episodes, on the kept env or a fresh one — and so is ``play_episode``'s result."""
    import numpy as np

    from agents.set_es import SetESAgent
    from fedsel_env.rollout import close_envs, env_for, run_episode
    from fedsel_env.scenarios import lookup

    cfg = {**lookup("Churn").env_config(), "max_rounds": 3}
    thetas = [np.zeros(16), np.r_[1.0, -0.5, np.zeros(13), 0.3]]
    tasks = [(theta, seed) for theta in thetas for seed in (2_000_000, 2_000_001)]

    def episode(i):
        theta, seed = tasks[i]
        rec = run_episode(env_for(cfg), None, seed, make_policy=lambda spec: SetESAgent(spec, model=theta))
        return rec["curves"]["accuracy"], rec["curves"]["selected"]

    close_envs()
    in_order = [episode(i) for i in range(4)]
    shuffled = {i: episode(i) for i in (3, 1, 2, 0)}  # the same kept env, another order
    close_envs()
    assert [shuffled[i] for i in range(4)] == in_order and episode(2) == in_order[2]   # and on a fresh env
    assert in_order[0][1] != in_order[2][1]  # the two weight vectors select differently: the check can fail
    task = ESEpisode(cfg, "rounds_to_target", tuple(thetas[1]), 0, 2_000_001)
    assert play_episode(task) == play_episode(task)
    close_envs()


def test_a_lost_worker_or_node_is_told_apart_from_an_error_of_the_task():
    """Only a loss is re-run: a ``RayTaskError`` counts when what it wraps is one; bad settings are refused."""
    import ray.exceptions as rex

    assert is_lost(rex.NodeDiedError("node 1 died")) and is_lost(rex.WorkerCrashedError())
    assert is_lost(rex.OwnerDiedError("00" * 28, "", "")) and not is_lost(ValueError("bad input"))
    wrapped = rex.RayTaskError("play_episode", "Traceback …", rex.WorkerCrashedError())
    assert is_lost(wrapped) and not is_lost(rex.RayTaskError("f", "Traceback …", ValueError("bad")))
    with pytest.raises(ValueError, match="retries = -1"):
        RayMapper("auto", retries=-1)
    with pytest.raises(ValueError, match="--ray ''"):
        RayMapper("")


def test_ray_for_a_one_process_trainer_is_refused_before_anything_is_written(tmp_path):
    import train_agent

    with pytest.raises(ValueError, match="--ray: ppo is a Stable-Baselines3 algorithm"):
        train_agent.main(["--algo", "ppo", "--env", "tiny", "--runs-dir", str(tmp_path), "--ray"])
    with pytest.raises(ValueError, match="--ray '' is invalid"):
        train_agent.main([*TINY, "--runs-dir", str(tmp_path), "--ray", ""])
    assert not list(tmp_path.iterdir())


def measure(argv: Optional[List[str]] = None) -> None:
    """``.venv/bin/python tests/test_ray_training.py [--max-rounds R]``: the seconds of each set_es generation in
    one process, on the two-node cluster, and on its head alone after the worker node is killed (docs/TRAINING.md,
    "Training on a Ray cluster"); the three runs' ``set_es.json`` must be equal."""
    import argparse
    import os

    import ray._private.services as services

    import train_agent

    parser = argparse.ArgumentParser(description="seconds of each set_es generation: one process, a two-node "
                                                 "local Ray cluster, its head alone")
    parser.add_argument("--max-rounds", type=int, default=40, help="rounds of each training episode")
    rounds = parser.parse_args(argv).max_rounds
    hp = ["--algo", "set_es", "--env", "Churn", "--hyperparams", "generations=3", "episodes=2", "popsize=4",
          "eval_every=3", "eval_seeds=[100]", "--env-kwargs", f"max_rounds={rounds}", "--no-progress-bar",
          "--verbose", "0"]
    out = Path(tempfile.mkdtemp(prefix="fr", dir="/tmp"))
    (out / "ray").mkdir()
    (out / "r").symlink_to(out / "ray", target_is_directory=True)
    c, runs = LocalCluster(out / "r"), {}

    def run(label: str, *extra: str) -> None:
        start = time.perf_counter()
        folder = train_agent.main([*hp, "--runs-dir", str(out / label), *extra])
        walls = [json.loads(x)["wall_s"] for x in (folder / "progress.jsonl").read_text().splitlines()]
        runs[label] = (folder / "set_es.json").read_text()
        print(f"{label}: {time.perf_counter() - start:.1f} s, generations {walls} s, load {os.getloadavg()}")

    try:
        run("one process")
        start = time.perf_counter()
        c.start()
        print(f"cluster started in {time.perf_counter() - start:.1f} s")
        services.resolve_ip_for_localhost = lambda host: host
        ray.init(address=c.address, _node_ip_address="127.0.0.1", logging_level="ERROR", log_to_driver=False)
        run("two nodes", "--ray", c.address)
        c.kill("worker")
        run("the head alone", "--ray", c.address)
        print("the same set_es.json:", len(set(runs.values())) == 1)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.kill()
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    measure()
