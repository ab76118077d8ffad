"""FedSelectStrategy: Flower's FedAvg with client selection by a fedsel agent and aggregation by a fedsel backend.

A subclass of Flower's Message-API ``flwr.serverapp.strategy.FedAvg`` (H. B. McMahan,
E. Moore, D. Ramage, S. Hampson, B. Agüera y Arcas, "Communication-Efficient Learning of
Deep Networks from Decentralized Data", AISTATS 2017). The profiling round and the PCA
state are FAVOR's (H. Wang, Z. Kaplan, D. Niu, B. Li, "Optimizing Federated Learning on
Non-IID Data with Reinforcement Learning", IEEE INFOCOM 2020; docs/SPEC.md §2). Only two things
change:

- **who trains** (``configure_train``): instead of sampling nodes at random, the
  strategy builds the Dict observation a fedsel agent was trained on with the env's own
  server view (:class:`fedsel_env.server_view.ServerView`, docs/SPEC.md §2) from the clients' reports
  and its own contexts' estimates (:class:`ContextEstimate`), asks the
  agent (``predict``: any hand-written agent of ``agents``, a trained FAVOR model or a per-client one)
  and decodes its action with the env's action mode (``fedsel_env.actions``): the
  chosen clients' SuperNodes — and only they — get the ``train`` message;
- **how their results are combined** (``aggregate_train``): by a fedsel aggregation
  backend (``fedsel_env.sim.aggregators``, docs/SPEC.md §3.5) on flat weights
  (``ClientUpdates``: w_t, the responders' local weights or full gradients, n_k, F_k(w_t)).

Before round 1, :meth:`FedSelectStrategy.start` plays FAVOR's profiling round, as
``FedSelectEnv.reset`` does: every client trains one epoch from w_0 and reports its
partition id, n_k, F_k(w_0) and timings; the PCA of the N+1 weight vectors is fitted
and kept fixed; the agent is built from the :class:`~fedsel_env.spec.SelectionSpec`
this gives (N, K, action mode, the reported n_k, the budget, d, the model size).
Client ``k`` of the agent is the SuperNode whose node config says ``partition-id=k``.
Evaluation (``configure_evaluate``/``aggregate_evaluate``) is FedAvg's; its
examples-weighted ``accuracy`` (or the ``accuracy`` of a server-side ``evaluate_fn``)
is the observation's global accuracy.
"""
from __future__ import annotations

import time
from logging import INFO, WARNING
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Union

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Result
from flwr.supercore import log

import agents
from agents.deploy import algorithm, check_saved_models, deploy, resolve_model
from fedsel_env.actions import ACTION_MODES
from fedsel_env.sim.aggregators import Aggregator, ClientUpdates, make_aggregator
from fedsel_env.sim.aggregators.base import checked_aggregate
from fedsel_env.sim.federation import Evaluation, RoundOpening, RoundReport
from fedsel_env.server_view import ServerView
from fedsel_env.spec import SelectionSpec
from fedsel_env.sim.training import ParamLayout

from .contexts import ContextEstimate
from .validation import ReplyLimits, capped_weights, check_evaluate_reply, check_train_reply
from .task import (CONFIG_KEY, EPOCHS_KEY, EVALUATE_TEST_KEY, GENERATOR_ROUND_KEY, NUM_EXAMPLES_KEY,
                   PARTITION_KEY, PROX_MU_KEY, TRAIN_SEED_KEY, UPDATE_KEY, config_to_json,
                   fedsel_config, flat_of, state_dict_of)

AgentFactory = Callable[[SelectionSpec], Any]


class FedSelectStrategy(FedAvg):
    """Flower FedAvg whose clients are chosen by a fedsel agent and aggregated by a fedsel backend.

    :param config: the fedsel config (overrides of ``DEFAULT_CONFIG``; ``num_clients`` N must equal the
        number of SuperNodes, with partition ids 0..N-1). Its ``clients_per_round``, ``action_mode``,
        ``max_rounds``, ``pca_components``, ``aggregator``/``aggregator_params`` and local-training
        fields are used; ``federation_seed`` (0 when ``None``) fixes the clients' partitions.
    :param agent: a registered agent name (``agents.make(name, spec, seed=agent_seed, **agent_params)``,
        e.g. ``"favor"`` or ``"per_client"`` with ``agent_params={"model_path": ...}``) or a callable
        ``spec -> agent``. The agent needs only SB3's ``predict(obs)``. A ``per_client`` model whose PCA
        width is not the config's ``pca_components`` is refused here (the error names the width to set).
    :param agent_params: keyword parameters of the named agent.
    :param model: instead of ``agent``, a trained model (a ``.zip`` or a ``train_agent.py`` run folder) deployed as
        its algorithm's entry of ``agents.deploy``'s table says (FAVOR's top-K, the per-client scorer, the SB3
        policy; ``agents.deploy.deploy``), seeded by ``agent_seed``.
    :param agent_seed: the named agent's seed.
    :param train_seed: root of the clients' minibatch-order generators (the env's ``Federation.train_seed``).
    :param pca_seed: ``random_state`` of the profiling round's PCA.
    :param fraction_evaluate: share of SuperNodes asked to evaluate each round (FedAvg's; 0 = none).
    :param timeout: seconds to wait for the N SuperNodes to connect and for the profiling round's replies.
    :param limits: what a client's reply may claim (:class:`fedsel_flower.validation.ReplyLimits`: the most
        examples a client may register, the update-norm bound, the largest share of a round's aggregation
        weight one client's ``num_examples`` buys: 1/2 by default). A reply that fails the checks is a failed
        client of its round (``history[t]["rejected"]``, the ``rejected`` metric, not a responder in the
        observation's records); in the profiling round it stops the start, naming the node.
    :param kwargs: other arguments of ``flwr.serverapp.strategy.FedAvg`` (``min_evaluate_nodes``, ...).
    """

    def __init__(self, config: Optional[Mapping[str, Any]] = None, agent: Union[str, AgentFactory] = "random",
                 agent_params: Optional[Mapping[str, Any]] = None, agent_seed: Optional[int] = None,
                 model: Union[str, Path, None] = None,
                 train_seed: int = 0, pca_seed: int = 0, fraction_evaluate: float = 1.0,
                 timeout: float = 3600.0, limits: Optional[ReplyLimits] = None, **kwargs: Any) -> None:
        cfg = fedsel_config(config)
        if limits is not None and not isinstance(limits, ReplyLimits):
            raise ValueError(f"limits = {limits!r} is invalid: expected a fedsel_flower.ReplyLimits or None")
        self.limits = limits or ReplyLimits()
        if not (isinstance(agent, str) or callable(agent)):
            raise ValueError(f"agent = {agent!r} is invalid: expected a registered agent name "
                             f"({sorted(agents.AGENTS)}) or a callable spec -> agent")
        if isinstance(agent, str):
            agents.AGENTS.lookup(agent)  # a typo fails here, not after the profiling round
            if agent == "pow_d":
                raise ValueError("agent 'pow_d' asks its candidates for their current loss before each selection, "
                                 "a query FedSelectStrategy does not send; use 'rpow_d' (ranks by the last "
                                 "reported losses)")
        for name, v in (("train_seed", train_seed), ("pca_seed", pca_seed)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"{name} = {v!r} is invalid: expected an integer >= 0")
        for key in ("fraction_train", "min_train_nodes"):
            if key in kwargs:
                raise ValueError(f"{key} is not a parameter of FedSelectStrategy: the agent chooses who trains "
                                 f"(config field 'clients_per_round' bounds how many)")
        n = cfg["num_clients"]
        # FedAvg's sampler waits for min_available_nodes before every evaluation: 1, so that a SuperNode
        # that drops out does not stall the job (the profiling round itself waits for all N).
        kwargs.setdefault("min_available_nodes", 1)
        kwargs.setdefault("min_evaluate_nodes", 1 if fraction_evaluate > 0 else 0)
        super().__init__(fraction_train=1.0, fraction_evaluate=fraction_evaluate, min_train_nodes=1,
                         weighted_by_key=NUM_EXAMPLES_KEY, **kwargs)
        self.config = cfg
        self.config_json = config_to_json(cfg)
        self.num_clients, self.k = n, cfg["clients_per_round"]
        self.agent_spec: Union[str, AgentFactory] = agent
        self.agent_params = dict(agent_params or {})
        self.agent_seed = agent_seed
        self.train_seed, self.pca_seed = int(train_seed), int(pca_seed)
        self.timeout = float(timeout)
        self.aggregator: Aggregator = make_aggregator(cfg["aggregator"], cfg["aggregator_params"],
                                                       cfg["clients_per_round"])
        self.action_mode = ACTION_MODES.lookup(cfg["action_mode"])(n, self.k)
        self.pca_components = SelectionSpec.pca_width(cfg)
        # a saved model that cannot act here (a per-client model's d) is refused before the SuperNodes are
        # waited for and the profiling round is played (its deployment's check; FAVOR's fails when it is built)
        self.model: Optional[tuple] = None
        if model is not None:
            if agent != "random" or agent_params:
                raise ValueError("give agent= (and agent_params=) or model=, not both")
            self.model = resolve_model(model)  # (zip, algorithm, training env config); ValueError: not a model
            check = algorithm(self.model[1]).deployment.check
            if check is not None:
                check(self.model[0], self.pca_components, n)
        elif isinstance(agent, str):
            check_saved_models(agent, self.agent_params, self.pca_components, n)
        self.layout: Optional[ParamLayout] = None
        self.global_params: Optional[torch.Tensor] = None
        self.node_of: Dict[int, int] = {}      # client index -> node id
        self.client_of: Dict[int, int] = {}    # node id -> client index
        self.view: Optional[ServerView] = None
        self.contexts: Optional[ContextEstimate] = None
        self.selection_spec: Optional[SelectionSpec] = None
        self.agent: Any = None
        #: One entry per round: the agent's observation, its choice, who was sent and who trained.
        self.history: List[Dict[str, Any]] = []
        self.profile_info: Dict[str, Any] = {}
        self._sent_at: Dict[int, float] = {}
        self._pending: Dict[str, Any] = {}

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _layout_for(arrays: ArrayRecord) -> ParamLayout:
        """The parameter layout (names, shapes, order) of the arrays the server was started with."""
        named = list(arrays.to_torch_state_dict().items())
        return ParamLayout(SimpleNamespace(named_parameters=lambda: iter(named)))

    def _base_config(self, config: ConfigRecord) -> ConfigRecord:
        out = ConfigRecord(dict(config))
        out[CONFIG_KEY] = self.config_json
        out[TRAIN_SEED_KEY] = self.train_seed
        return out

    def _available(self, grid: Grid) -> np.ndarray:
        connected = set(grid.get_node_ids())
        return np.array([self.node_of.get(c) in connected for c in range(self.num_clients)], dtype=bool)

    def _arrays(self, flat: torch.Tensor) -> ArrayRecord:
        return ArrayRecord(state_dict_of(self.layout, flat))

    def _messages(self, arrays: ArrayRecord, config: ConfigRecord, clients: Iterable[int],
                  message_type: str) -> List[Message]:
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        msgs = list(self._construct_messages(record, [self.node_of[c] for c in clients], message_type))
        for m in msgs:
            self._sent_at[m.metadata.dst_node_id] = m.metadata.created_at
        return msgs

    def _reply_stats(self, replies: List[Message]) -> Dict[str, np.ndarray]:
        """Per-reply arrays: client index, n_k, losses, timings, flat weights (or gradients)."""
        clients, n_k, loss, rms, compute, tau, transfer, flats = [], [], [], [], [], [], [], []
        for msg in replies:
            m = next(iter(msg.content.metric_records.values()))
            node = msg.metadata.src_node_id
            c = int(m[PARTITION_KEY])  # checked against the node's registration (validation.check_train_reply)
            clients.append(c)
            n_k.append(int(m[NUM_EXAMPLES_KEY]))
            loss.append(float(m["loss"]))
            rms.append(float(m["loss-rms"]))
            epochs = max(int(self._pending.get("epochs", 1)), 1)
            compute.append(float(m["train-time"]) / max(int(m[NUM_EXAMPLES_KEY]) * epochs, 1))
            t = max(msg.metadata.created_at - self._sent_at.get(node, msg.metadata.created_at), 0.0)
            tau.append(t)
            transfer.append(max(t - float(m["handle-time"]), 0.0))
            flats.append(flat_of(self.layout, next(iter(msg.content.array_records.values())).to_torch_state_dict()))
        order = np.argsort(clients, kind="stable")
        out = {k: np.asarray(v, dtype=np.float64)[order] for k, v in
               (("n_k", n_k), ("loss", loss), ("rms", rms), ("compute", compute), ("tau", tau),
                ("transfer", transfer))}
        out["clients"] = np.asarray(clients, dtype=np.int64)[order]
        out["flats"] = torch.stack(flats)[torch.as_tensor(order)] if flats else torch.zeros(0, self.layout.size)
        return out

    def _validated(self, replies: List[Message], profiling: bool = False) -> tuple:
        """The replies that pass :func:`~fedsel_flower.validation.check_train_reply`, and {client or node: why}
        for those that do not (each logged)."""
        sent = None if profiling else set(self.history[-1]["sent_nodes"]) if self.history else set()
        registered = None if profiling else dict(enumerate(self.view.num_samples.tolist()))
        full_gradient = not profiling and self.aggregator.client_update == "full_gradient"
        valid, rejected = [], {}
        for msg in replies:
            problem = check_train_reply(msg, self.layout, self.global_params, self.limits, registered,
                                        None if profiling else self.client_of, sent, full_gradient)
            if problem is None:
                valid.append(msg)
                continue
            node = msg.metadata.src_node_id
            who = self.client_of.get(node, node) if not profiling else node
            rejected[int(who)] = problem
            log(WARNING, "fedsel: reply of %s %d rejected: %s", "node" if profiling else "client", who, problem)
        return valid, rejected

    @staticmethod
    def _report(round_index: int, selected: np.ndarray, st: Dict[str, Any], global_params: torch.Tensor,
                evaluation: Optional[Evaluation] = None) -> RoundReport:
        """The replies of one round as the simulator's ``RoundReport`` (what the server view records)."""
        tau = st["tau"]
        return RoundReport(round_index, np.asarray(selected, dtype=np.int64), st["clients"], st["flats"], st["loss"],
                           st["rms"], st["n_k"].astype(np.int64), tau, float(tau.max()) if tau.size else 0.0,
                           0.0, global_params, evaluation=evaluation)

    # --------------------------------------------------------------- profiling
    def profile(self, grid: Grid, initial_arrays: ArrayRecord, timeout: Optional[float] = None) -> None:
        """FAVOR's profiling round: every client trains one epoch from w_0; fit the PCA; build the agent.

        :raises RuntimeError: when fewer than N clients reply, or partition ids are missing or repeated.
        """
        n = self.num_clients
        self.layout = self._layout_for(initial_arrays)
        self.global_params = flat_of(self.layout, initial_arrays.to_torch_state_dict())
        self.aggregator.reset(self.global_params.clone())
        timeout = self.timeout if timeout is None else float(timeout)
        deadline = time.monotonic() + timeout
        while len(nodes := list(grid.get_node_ids())) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"profiling round: {len(nodes)} of {n} SuperNodes connected within {timeout:.0f} s")
            log(INFO, "fedsel profiling: waiting for %d SuperNodes (%d connected)", n, len(nodes))
            time.sleep(1.0)
        if len(nodes) > n:
            raise RuntimeError(f"{len(nodes)} SuperNodes are connected but config field 'num_clients' is {n}")
        cfg = self._base_config(ConfigRecord())
        cfg.update({GENERATOR_ROUND_KEY: 0, EPOCHS_KEY: 1, UPDATE_KEY: "local_sgd", EVALUATE_TEST_KEY: True,
                    PROX_MU_KEY: float(self.aggregator.local_options().get("prox_mu", 0.0))})
        record = RecordDict({self.arrayrecord_key: initial_arrays, self.configrecord_key: cfg})
        msgs = list(self._construct_messages(record, nodes, MessageType.TRAIN))
        for m in msgs:
            self._sent_at[m.metadata.dst_node_id] = m.metadata.created_at
        t0 = time.perf_counter()
        log(INFO, "fedsel profiling round: %d clients train one epoch from w_0", n)
        replies, errors = self._check_and_log_replies(
            list(grid.send_and_receive(msgs, timeout=timeout)), is_train=True, validate=False)
        replies, rejected = self._validated(replies, profiling=True)
        if rejected:  # the profiling round registers the clients: a federation cannot start without all N
            raise RuntimeError(f"profiling round: the replies of node(s) {sorted(rejected)} were rejected: "
                               + "; ".join(f"node {k}: {v}" for k, v in sorted(rejected.items())))
        if errors or len(replies) != n:
            raise RuntimeError(f"profiling round: {len(replies)} of {n} clients replied ({len(errors)} errors)")
        ids = sorted(int(next(iter(r.content.metric_records.values()))[PARTITION_KEY]) for r in replies)
        if ids != list(range(n)):
            raise RuntimeError(f"profiling round: partition ids {ids} are not 0..{n - 1}")
        for r in replies:
            c = int(next(iter(r.content.metric_records.values()))[PARTITION_KEY])
            self.node_of[c], self.client_of[r.metadata.src_node_id] = r.metadata.src_node_id, c
        self._pending = {"epochs": 1}
        st = self._reply_stats(replies)
        metrics = [next(iter(r.content.metric_records.values())) for r in replies]
        tests = np.array([float(m["test-examples"]) for m in metrics])
        acc0 = float(np.sum([float(m["test-accuracy"]) * t for m, t in zip(metrics, tests)]) / max(tests.sum(), 1))
        self.view = ServerView(self.config, st["n_k"].astype(np.int64), self.layout.size, self.pca_components)
        self.view.start(self._report(0, st["clients"], st, self.global_params,
                                     Evaluation(acc0, float("nan"), np.zeros(n))), pca_seed=self.pca_seed)
        self.contexts = ContextEstimate(st["compute"], st["transfer"])
        self.selection_spec = SelectionSpec.from_config(self.config, st["n_k"].astype(np.int64), self.layout.size)
        self.agent = self.make_agent(self.selection_spec)
        self.profile_info = {"time": time.perf_counter() - t0, "accuracy": acc0, "losses": st["loss"].copy(),
                             "num_samples": st["n_k"].astype(np.int64)}
        log(INFO, "fedsel profiling round done in %.2fs: w_0 accuracy %.4f", self.profile_info["time"], acc0)

    def make_agent(self, spec: SelectionSpec) -> Any:
        """The selector for the problem the profiling round told: the model deployed, the named agent built,
        or the factory called. :raises ValueError: for one without ``predict``."""
        if self.model is not None:
            zip_path, algo, train_config = self.model
            agent = deploy(zip_path, spec, train_config, seed=self.agent_seed, algo=algo)
        elif isinstance(self.agent_spec, str):
            agent = agents.make(self.agent_spec, spec, seed=self.agent_seed, **self.agent_params)
        else:
            agent = self.agent_spec(spec)
        if not hasattr(agent, "predict"):
            raise ValueError(f"agent {agent!r} has no predict(observation) method")
        return agent

    # ------------------------------------------------------------------- rounds
    def start(self, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int = 3, timeout: float = 3600,
              train_config: Optional[ConfigRecord] = None, evaluate_config: Optional[ConfigRecord] = None,
              evaluate_fn: Optional[Callable[[int, ArrayRecord], Optional[MetricRecord]]] = None) -> Result:
        """The profiling round, then Flower's round loop (``Strategy.start``)."""
        self.profile(grid, initial_arrays, timeout)
        wrapped = None
        if evaluate_fn is not None:
            def wrapped(server_round: int, arrays: ArrayRecord) -> Optional[MetricRecord]:
                res = evaluate_fn(server_round, arrays)
                if res is not None and "accuracy" in res and self.view is not None:
                    self.view.accuracy = float(res["accuracy"])
                return res
        return super().start(grid, initial_arrays, num_rounds=num_rounds, timeout=timeout,
                             train_config=train_config, evaluate_config=evaluate_config, evaluate_fn=wrapped)

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """The agent chooses; only the chosen clients' SuperNodes get the ``train`` message."""
        if self.view is None:
            raise RuntimeError("FedSelectStrategy.configure_train before the profiling round: call start()")
        available = self._available(grid)
        self.view.open_round(RoundOpening(available, self.contexts.context()))
        obs = self.view.observe()
        action, _ = self.agent.predict(obs, deterministic=True)
        selected = self.action_mode.decode(action, available)
        self.global_params = flat_of(self.layout, arrays.to_torch_state_dict())
        cfg = self._base_config(config)
        cfg["server-round"] = server_round
        cfg.update({GENERATOR_ROUND_KEY: server_round, EPOCHS_KEY: int(self.config["local_epochs"]),
                    UPDATE_KEY: self.aggregator.client_update,
                    PROX_MU_KEY: float(self.aggregator.local_options().get("prox_mu", 0.0))})
        to_send = [int(c) for c in selected if available[c]]
        self._pending = {"round": server_round, "selected": np.asarray(selected, dtype=np.int64),
                         "epochs": int(self.config["local_epochs"])}
        self.history.append({"round": server_round, "observation": obs, "action": action,
                             "selected": np.asarray(selected, dtype=np.int64).copy(),
                             "sent_nodes": [self.node_of[c] for c in to_send], "trained": np.zeros(0, np.int64)})
        log(INFO, "configure_train: agent %s chose clients %s", type(self.agent).__name__, list(map(int, selected)))
        return self._messages(arrays, cfg, to_send, MessageType.TRAIN)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        """Aggregate the responders' updates with the fedsel backend; record what they reported."""
        valid, _ = self._check_and_log_replies(list(replies), is_train=True, validate=False)
        valid, rejected = self._validated(valid)  # a reply that fails is a failed client: never an abort
        self.history[-1]["rejected"] = rejected
        selected = self._pending.get("selected", np.zeros(0, np.int64))
        w_t = self.global_params
        if not valid:
            nobody = np.zeros(0, np.int64)
            self.view.record(RoundReport(server_round, selected, nobody, None, np.zeros(0), np.zeros(0), nobody,
                                         np.zeros(0), 0.0, 0.0, w_t, dropped=np.array(sorted(rejected), np.int64)))
            self.contexts.update(nobody, np.zeros(0), np.zeros(0))
            self.history[-1]["global_params"] = w_t.clone()
            return None, MetricRecord({"responders": 0, "rejected": len(rejected)})
        st = self._reply_stats(valid)
        full_gradient = self.aggregator.client_update == "full_gradient"
        updates = ClientUpdates(global_params=w_t, local_params=None if full_gradient else st["flats"],
                                gradients=st["flats"] if full_gradient else None,
                                # n_k as the aggregation weights, no client above max_weight_share of the round
                                num_samples=torch.as_tensor(capped_weights(st["n_k"], self.limits.max_weight_share),
                                                            dtype=torch.float32),
                                losses_before=torch.as_tensor(st["loss"], dtype=torch.float32),
                                client_ids=st["clients"], lr=float(self.config["lr"]), round=server_round - 1)
        w_next = checked_aggregate(self.aggregator, updates)
        diverged = not bool(torch.isfinite(w_next).all())
        if diverged:
            w_next = w_t
        report = self._report(server_round, selected, st, w_next)
        report.dropped = np.array(sorted(rejected), dtype=np.int64)
        report.local_models = None if full_gradient else st["flats"]  # gradients say nothing of the weight space
        self.view.record(report)
        self.contexts.update(st["clients"], st["compute"], st["transfer"])
        self.global_params = w_next
        self.history[-1]["trained"] = st["clients"].copy()
        self.history[-1]["diverged"] = diverged
        self.history[-1]["global_params"] = w_next.clone()
        n = st["n_k"]
        metrics = MetricRecord({"train-loss-before": float(np.sum(st["loss"] * n) / n.sum()),
                                "responders": int(st["clients"].size), "diverged": int(diverged),
                                "rejected": len(rejected)})
        return self._arrays(w_next), metrics

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """FedAvg's sampled evaluation, with the fedsel config the clients need."""
        return super().configure_evaluate(server_round, arrays, self._base_config(config), grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> Optional[MetricRecord]:
        """FedAvg's examples-weighted metrics over the replies that pass
        :func:`~fedsel_flower.validation.check_evaluate_reply`; their ``accuracy`` becomes the observation's."""
        ok, _ = self._check_and_log_replies(list(replies), is_train=False, validate=False)
        replies = []
        for msg in ok:
            problem = check_evaluate_reply(msg, self.limits)
            if problem is None:
                replies.append(msg)
            else:
                log(WARNING, "fedsel: evaluate reply of node %d rejected: %s", msg.metadata.src_node_id, problem)
        metrics = super().aggregate_evaluate(server_round, replies)
        if metrics is not None and "accuracy" in metrics and self.view is not None:
            self.view.accuracy = float(metrics["accuracy"])
        return metrics

    def summary(self) -> None:
        """Log the configuration."""
        log(INFO, "\t├──> fedsel: N=%d, K=%d, agent=%s, aggregator=%s, action_mode=%s, d=%d", self.num_clients,
            self.k, f"model {self.model[0]}" if self.model else self.agent_spec if isinstance(self.agent_spec, str)
            else "callable", self.config["aggregator"],
            self.config["action_mode"], self.pca_components)
        super().summary()
