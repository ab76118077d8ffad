"""The Flower ClientApp of a fedsel federation: a client trains the fedsel model on its partition.

A ``train`` message carries the global weights (an ArrayRecord named by the model's
parameters) and a ConfigRecord (``fedsel_flower.task`` keys: the fedsel config, the
train seed, the generator round, E, μ, the update kind; only the fedsel config is
required, so Flower's own strategies can drive these clients too). The client, whose index is
its node config's ``partition-id`` (``flower-supernode --node-config
"partition-id=3"``; the simulation sets it), replies with

- its local weights after E epochs of SGD (or its full-batch gradient ∇F_k(w_t) when
  the backend is q-FedSGD), and
- a MetricRecord: ``num-examples`` n_k, ``loss`` F_k(w_t) and ``loss-rms`` (the global
  model's training loss on its data, measured **before** training — what the
  observation's ``loss`` and ``loss_rms`` columns hold), ``train-time`` (seconds of
  local computation), ``handle-time`` (seconds from receiving the message to the
  reply), ``sgd-steps`` and ``partition-id``; in the profiling round also
  ``test-accuracy`` / ``test-examples`` of w_0 on its test split.

An ``evaluate`` message is answered with ``accuracy``, ``loss`` and ``num-examples`` of
the global model on the client's test split, so the examples-weighted average is the
env's global accuracy.
"""
from __future__ import annotations

import json
import time
from typing import Any, Dict, Tuple

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from .task import (CONFIG_KEY, EPOCHS_KEY, EVALUATE_TEST_KEY, GENERATOR_ROUND_KEY, NUM_EXAMPLES_KEY,
                   PARTITION_KEY, PROX_MU_KEY, TRAIN_SEED_KEY, UPDATE_KEY, ClientTask, federated_data,
                   flat_of, state_dict_of)

_TASKS: Dict[Tuple[str, int], ClientTask] = {}


def _config(msg: Message) -> ConfigRecord:
    records = msg.content.config_records
    if len(records) != 1:
        raise ValueError(f"a fedsel message carries exactly one ConfigRecord, got {sorted(records)}")
    return next(iter(records.values()))


def _task(msg: Message, context: Context) -> Tuple[ClientTask, ConfigRecord]:
    """The client's task for the message's fedsel config (one per config and partition per process)."""
    cfg_rec = _config(msg)
    if CONFIG_KEY not in cfg_rec:
        raise ValueError(f"the message's ConfigRecord has no {CONFIG_KEY!r}: was it sent by FedSelectStrategy?")
    if PARTITION_KEY not in context.node_config:
        raise ValueError(f"this SuperNode has no {PARTITION_KEY!r} in its node config: start it with "
                         f"--node-config \"{PARTITION_KEY}=<k>\"")
    cfg_json = str(cfg_rec[CONFIG_KEY])
    k = int(context.node_config[PARTITION_KEY])
    key = (cfg_json, k)
    if key not in _TASKS:
        cfg = json.loads(cfg_json)
        if len(_TASKS) > 256:  # a process serves at most N clients of one federation; bound it anyway
            _TASKS.clear()
        _TASKS[key] = ClientTask(cfg, federated_data(cfg), k)
    return _TASKS[key], cfg_rec


def _global_flat(msg: Message, task: ClientTask):
    arrays = msg.content.array_records
    if len(arrays) != 1:
        raise ValueError(f"a fedsel message carries exactly one ArrayRecord, got {sorted(arrays)}")
    record = next(iter(arrays.values()))
    return flat_of(task.layout, record.to_torch_state_dict())


def train(msg: Message, context: Context) -> Message:
    """Report F_k(w_t), then train (or take the full gradient) and reply with the result."""
    t0 = time.perf_counter()
    task, cfg = _task(msg, context)
    w = _global_flat(msg, task)
    loss, rms = task.losses(w)
    update = str(cfg.get(UPDATE_KEY, "local_sgd"))
    t1 = time.perf_counter()
    if update == "full_gradient":
        out, steps = task.full_gradient(w), 0
    elif update == "local_sgd":
        # Defaults let any Flower strategy (e.g. Flower's own FedAvg) drive this client: E from the fedsel
        # config, the minibatch order from Flower's "server-round".
        out, steps = task.train(w, int(cfg.get(TRAIN_SEED_KEY, 0)),
                                int(cfg.get(GENERATOR_ROUND_KEY, cfg.get("server-round", 0))),
                                int(cfg.get(EPOCHS_KEY, task.cfg["local_epochs"])),
                                prox_mu=float(cfg.get(PROX_MU_KEY, 0.0)))
    else:
        raise ValueError(f"{UPDATE_KEY} = {update!r} is invalid: expected 'local_sgd' or 'full_gradient'")
    train_time = time.perf_counter() - t1
    metrics: Dict[str, Any] = {NUM_EXAMPLES_KEY: task.num_samples, "loss": loss, "loss-rms": rms,
                               "train-time": train_time, "sgd-steps": steps, PARTITION_KEY: task.client}
    if bool(cfg.get(EVALUATE_TEST_KEY, False)):
        acc, _, t = task.test_metrics(w)
        metrics.update({"test-accuracy": acc, "test-examples": t})
    metrics["handle-time"] = time.perf_counter() - t0
    content = RecordDict({"arrays": ArrayRecord(state_dict_of(task.layout, out)),
                          "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)


def evaluate(msg: Message, context: Context) -> Message:
    """Accuracy and loss of the global weights on the client's test split."""
    task, _ = _task(msg, context)
    acc, loss, t = task.test_metrics(_global_flat(msg, task))
    metrics = MetricRecord({NUM_EXAMPLES_KEY: t, "accuracy": acc, "loss": loss})
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)


def make_client_app() -> ClientApp:
    """A ClientApp answering ``train`` and ``evaluate`` messages of :class:`FedSelectStrategy`."""
    client_app = ClientApp()
    client_app.train()(train)
    client_app.evaluate()(evaluate)
    return client_app


#: The ClientApp for ``flwr run`` (``clientapp = "fedsel_flower.client_app:app"``).
app = make_client_app()
