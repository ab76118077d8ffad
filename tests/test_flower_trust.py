"""Malicious Flower clients (issue #30): a reply that fails validation is a failed client of its round,
recorded in the metrics and the observation's records, and the run goes on.

The federation runs in this process: an in-process ``Grid`` hands each message to the real ClientApp
functions (``fedsel_flower.client_app.train`` / ``evaluate``) with the SuperNode's node config, and lets
a test replace one client's replies by forged ones (no Ray, a few seconds per run).
"""
from __future__ import annotations

import time
from typing import Callable, Dict

import numpy as np
import pytest
import torch

pytest.importorskip("flwr", reason="the optional extra 'flower' is not installed: pip install '.[flower]'")

from flwr.app import ArrayRecord, Context, Message, MessageType, MetricRecord, RecordDict  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from fedsel_env.env import FedSelectEnv  # noqa: E402
from fedsel_flower import FedSelectStrategy, ReplyLimits, client_app  # noqa: E402
from fedsel_flower.task import NUM_EXAMPLES_KEY, PARTITION_KEY, state_dict_of  # noqa: E402

CFG = {"preset": "tiny", "system": {"availability": 1.0}, "federation_seed": 0}
ROUNDS = 2
BAD = 4  # the malicious client's partition id (the random agent of seed 0 picks it in round 1, not 2)


class InProcessGrid:
    """Flower's ``Grid`` as a strategy uses it, with the N SuperNodes in this process."""

    def __init__(self, n: int, forge: Callable[[Message, int], Message] = None, from_round: int = 1,
                 forge_evaluate: Callable[[Message, int], Message] = None):
        self.contexts = {100 + k: Context(run_id=1, node_id=100 + k, node_config={PARTITION_KEY: k},
                                          state=RecordDict(), run_config={}) for k in range(n)}
        self.forge, self.from_round, self.train_calls = forge, from_round, 0
        self.forge_evaluate = forge_evaluate

    def get_node_ids(self):
        return list(self.contexts)

    def send_and_receive(self, messages, timeout=None):
        replies, is_train = [], False
        for i, m in enumerate(messages):
            m.metadata.__dict__["_message_id"] = f"{i}-{time.time_ns()}"
            node = m.metadata.dst_node_id
            is_train = m.metadata.message_type == MessageType.TRAIN
            fn = client_app.train if is_train else client_app.evaluate
            reply = fn(m, self.contexts[node])
            if is_train and self.forge and node - 100 == BAD and self.train_calls >= self.from_round:
                reply = self.forge(reply, m)
            if not is_train and self.forge_evaluate and node - 100 == BAD:
                reply = self.forge_evaluate(reply, m)
            replies.append(reply)
        self.train_calls += is_train
        return replies


@pytest.fixture(autouse=True, scope="module")
def task_identity():
    """Flower's message constructors read the run's identity, which a real ServerApp process sets."""
    saved = {k: TaskIdentity.__dict__.get(k) for k in ("_run_id", "_node_id", "_task_id")}
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    yield
    for k, v in saved.items():
        setattr(TaskIdentity, k, v)


def forged(reply: Message, request: Message, metrics: Dict = None, arrays=None) -> Message:
    m = dict(next(iter(reply.content.metric_records.values())))
    m.update(metrics or {})
    a = arrays if arrays is not None else next(iter(reply.content.array_records.values()))
    return Message(content=RecordDict({"arrays": a, "metrics": MetricRecord(m)}), reply_to=request)


def scaled(factor: float):
    def forge(reply, request):
        sd = next(iter(reply.content.array_records.values())).to_torch_state_dict()
        return forged(reply, request, arrays=ArrayRecord({k: v * factor for k, v in sd.items()}))
    return forge


def wrong_shape(reply, request):
    sd = next(iter(reply.content.array_records.values())).to_torch_state_dict()
    name = next(iter(sd))
    sd[name] = torch.zeros(3)
    return forged(reply, request, arrays=ArrayRecord(sd))


ATTACKS = {
    "num_examples 10**15": lambda r, q: forged(r, q, {NUM_EXAMPLES_KEY: 10**15}),
    "num_examples -1000": lambda r, q: forged(r, q, {NUM_EXAMPLES_KEY: -1000}),
    "num_examples 0": lambda r, q: forged(r, q, {NUM_EXAMPLES_KEY: 0}),
    "weights 1e30": scaled(1e30),
    "wrong shape": wrong_shape,
    "spoofed partition id": lambda r, q: forged(r, q, {PARTITION_KEY: (BAD + 1) % 8}),
    "nan loss": lambda r, q: forged(r, q, {"loss": float("nan")}),
}


@pytest.fixture(scope="module")
def start():
    """w_0 and the train seed of the tiny federation, as the env draws them."""
    env = FedSelectEnv(config=CFG)
    env.reset(seed=3)
    fed = env.federation
    return ArrayRecord(state_dict_of(fed.layout, fed.global_params)), fed.train_seed, env.num_clients


def run(start, forge=None, limits=None, from_round=1, forge_evaluate=None):
    w0, train_seed, n = start
    strategy = FedSelectStrategy(CFG, agent="random", agent_seed=0, train_seed=train_seed, timeout=5, limits=limits)
    result = strategy.start(InProcessGrid(n, forge, from_round, forge_evaluate), w0, num_rounds=ROUNDS, timeout=5)
    return strategy, result


@pytest.fixture(scope="module")
def honest(start):
    return run(start)


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_malicious_reply_is_a_failed_client_and_the_run_goes_on(attack, start):
    strategy, result = run(start, ATTACKS[attack])
    assert len(strategy.history) == ROUNDS  # never an abort
    rounds_with_bad = 0
    for t, h in enumerate(strategy.history, start=1):
        assert BAD not in h["trained"].tolist()
        chosen = BAD in h["selected"].tolist()
        assert (BAD in h["rejected"]) == chosen
        assert result.train_metrics_clientapp[t]["rejected"] == int(chosen)
        rounds_with_bad += chosen
        w = h["global_params"]
        assert bool(torch.isfinite(w).all()) and float(w.abs().max()) < 1e3  # no take-over, no poison
    assert rounds_with_bad >= 1, "the agent never chose the malicious client: the test proves nothing"
    # the observation's records: the rejected client did not respond in the round it was chosen in
    last = [t for t, h in enumerate(strategy.history) if BAD in h["selected"].tolist()][-1]
    if last + 1 < len(strategy.history):
        from fedsel_env.spec import FEATURE_INDEX

        obs = strategy.history[last + 1]["observation"]
        assert obs["clients"][BAD, FEATURE_INDEX["selected_last_round"]] == 1
        assert obs["clients"][BAD, FEATURE_INDEX["responded_last_round"]] == 0


def test_honest_clients_all_pass_and_the_bound_is_configurable(honest, start):
    strategy, _ = honest
    assert all(not h["rejected"] for h in strategy.history)
    assert all(len(h["trained"]) == 3 for h in strategy.history)
    # a bound no honest update meets: the profiling round (the clients' registration) refuses them all
    with pytest.raises(RuntimeError, match=r"were rejected: node 100: its update's norm .* exceeds the bound 1e-09"):
        run(start, limits=ReplyLimits(max_update_norm=1e-9))
    with pytest.raises(ValueError, match="max_update_ratio"):
        ReplyLimits(max_update_ratio=-1)


def test_a_forged_profiling_reply_stops_the_start_naming_the_node(start):
    with pytest.raises(RuntimeError, match=rf"node\(s\) \[{100 + BAD}\] were rejected.*num-examples"):
        run(start, ATTACKS["num_examples 10**15"], from_round=0)


def test_a_forged_evaluate_reply_does_not_set_the_observed_accuracy(honest, start):
    """A client claiming 10**15 test examples at accuracy 1.0 would make FedAvg's weighted accuracy (the
    observation's) 1.0; its reply is dropped, and the accuracy is the honest clients' (finite, in [0, 1])."""
    def forge(reply, request):
        m = {NUM_EXAMPLES_KEY: 10**15, "accuracy": 1.0, "loss": 0.0}
        return Message(content=RecordDict({"metrics": MetricRecord(m)}), reply_to=request)

    strategy, result = run(start, forge_evaluate=forge)
    _, honest_result = honest
    for t in range(1, ROUNDS + 1):
        acc = result.evaluate_metrics_clientapp[t]["accuracy"]
        assert 0.0 <= acc < 0.99 and abs(acc - honest_result.evaluate_metrics_clientapp[t]["accuracy"]) < 0.2
    assert strategy.view.accuracy < 0.99
