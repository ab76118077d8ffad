"""The Flower ServerApp of a fedsel federation, for ``run_simulation`` and for ``flwr run``.

:func:`make_server_app` wraps a :class:`~fedsel_flower.strategy.FedSelectStrategy` built in
Python (the simulation examples and the test use it, then read the strategy's ``history``).
The module-level ``app`` is what ``flwr run`` loads (``serverapp =
"fedsel_flower.server_app:app"``); it reads the run config (``[tool.flwr.app.config]``):

| key | meaning | default |
|---|---|---|
| ``num-server-rounds`` | rounds after the profiling round | 3 |
| ``fedsel-preset`` | a fedsel preset name | ``"tiny"`` |
| ``fedsel-overrides`` | JSON object of config overrides | ``"{}"`` |
| ``agent`` | a registered agent name (``favor`` for a trained model) | ``"random"`` |
| ``agent-params`` | JSON object of the agent's parameters (``{"model_path": ...}``) | ``"{}"`` |
| ``agent-seed``, ``train-seed``, ``init-seed`` | seeds of the agent, the minibatch orders and w_0 | 0 |
| ``fraction-evaluate`` | share of SuperNodes that evaluate each round | 1.0 |
"""
from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Optional

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from fedsel_env.sim.models import init_params
from fedsel_env.sim.training import ParamLayout

from .strategy import FedSelectStrategy
from .task import build_model, federated_data, state_dict_of


def draw_initial_arrays(config: Mapping[str, Any], input_shape: tuple, num_classes: int, seed: int) -> ArrayRecord:
    """w_0 of the config's model drawn as the env draws it (``init_params``, ``torch.Generator`` seeded by ``seed``).

    :param config: the fedsel config.
    :param input_shape: the dataset's input shape.
    :param num_classes: the dataset's number of classes.
    :param seed: the generator's seed.
    """
    model = build_model(config, input_shape, num_classes)
    layout = ParamLayout(model)
    w0 = layout.flatten(init_params(model, torch.Generator().manual_seed(int(seed))))
    return ArrayRecord(state_dict_of(layout, w0))


def initial_arrays_for(strategy: FedSelectStrategy, init_seed: int = 0) -> ArrayRecord:
    """w_0 for the strategy's config, drawn as the env draws it; the dataset is read for its shape only."""
    data = federated_data(strategy.config)
    return draw_initial_arrays(strategy.config, data.input_shape, data.num_classes, init_seed)


def make_server_app(strategy: FedSelectStrategy, num_rounds: int, init_seed: int = 0,
                    initial_arrays: Optional[ArrayRecord] = None,
                    evaluate_fn: Optional[Callable[[int, ArrayRecord], Optional[MetricRecord]]] = None,
                    timeout: float = 3600.0) -> ServerApp:
    """A ServerApp that runs ``strategy`` for ``num_rounds`` rounds (after its profiling round).

    :param strategy: the strategy (kept: read its ``history`` afterwards).
    :param num_rounds: communication rounds.
    :param init_seed: seed of w_0 when ``initial_arrays`` is not given.
    :param initial_arrays: w_0 as an ArrayRecord.
    :param evaluate_fn: Flower's optional server-side evaluation ``(round, arrays) -> MetricRecord``.
    :param timeout: seconds to wait for a round's replies.
    """
    if isinstance(num_rounds, bool) or not isinstance(num_rounds, int) or num_rounds < 1:
        raise ValueError(f"num_rounds = {num_rounds!r} is invalid: expected an integer >= 1")
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        arrays = initial_arrays if initial_arrays is not None else initial_arrays_for(strategy, init_seed)
        strategy.start(grid, arrays, num_rounds=num_rounds, timeout=timeout, train_config=ConfigRecord(),
                       evaluate_config=ConfigRecord(), evaluate_fn=evaluate_fn)

    return server_app


def _json_object(run_config: Any, key: str) -> dict:
    raw = run_config.get(key, "{}")
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as e:
        raise ValueError(f"run config {key!r} = {raw!r} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ValueError(f"run config {key!r} must be a JSON object, got {raw!r}")
    return value


#: The ServerApp for ``flwr run``.
app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Build the strategy from the run config and run it."""
    rc = context.run_config
    overrides = _json_object(rc, "fedsel-overrides")
    overrides.setdefault("preset", str(rc.get("fedsel-preset", "tiny")))
    strategy = FedSelectStrategy(overrides, agent=str(rc.get("agent", "random")),
                                 agent_params=_json_object(rc, "agent-params"),
                                 agent_seed=int(rc.get("agent-seed", 0)), train_seed=int(rc.get("train-seed", 0)),
                                 fraction_evaluate=float(rc.get("fraction-evaluate", 1.0)))
    arrays = initial_arrays_for(strategy, int(rc.get("init-seed", 0)))
    strategy.start(grid, arrays, num_rounds=int(rc.get("num-server-rounds", 3)))
