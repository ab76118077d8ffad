"""What a Flower server and its clients share: the fedsel config, the clients' data, the model, local SGD.

The server and every ClientApp rebuild the same federation from one fedsel config
(``fedsel_env.config``): the data are cut by ``fedsel_env.sim.data.build_federated_data``
with the generator the env uses for a fixed ``federation_seed``
(``np.random.default_rng([federation_seed, 1])``), so Flower client ``k`` (its
``partition-id``) holds exactly the training and test rows of the env's client ``k``.

Local training is the env's (docs/SPEC.md §3.4) written for one client in plain PyTorch:
the minibatch plan comes from ``BatchedTrainer.batch_plan`` with the generator the
env gives that client in that round (``default_rng([train_seed, round, client])``),
so a Flower client and the simulator take the same SGD steps; E epochs of minibatch
SGD at learning rate η (momentum without dampening, PyTorch's convention), plus the
proximal term μ/2 ‖w − w_t‖² when the backend asks for it (FedProx).
"""
from __future__ import annotations

import functools
import json
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedsel_env.config import make_config
from fedsel_env.sim.data import FederatedData, build_federated_data
from fedsel_env.sim.device import resolve_device
from fedsel_env.sim.models import make_model
from fedsel_env.sim.training import BatchedTrainer, ParamLayout

#: Keys of the ConfigRecord the server sends with every message.
CONFIG_KEY = "fedsel-config"          # the fedsel config as JSON (str)
TRAIN_SEED_KEY = "train-seed"         # root of the clients' minibatch-order generators (int)
GENERATOR_ROUND_KEY = "generator-round"  # 0 in the profiling round, t in round t (int)
EPOCHS_KEY = "local-epochs"           # E of this round (int; 1 in the profiling round)
PROX_MU_KEY = "prox-mu"               # μ of FedProx's proximal term (float; 0 = none)
UPDATE_KEY = "client-update"          # "local_sgd" | "full_gradient" (q-FedSGD)
EVALUATE_TEST_KEY = "evaluate-test"   # profiling round: also report test accuracy of w_0 (bool)

#: Keys of the MetricRecord a client replies with.
PARTITION_KEY = "partition-id"
NUM_EXAMPLES_KEY = "num-examples"


def fedsel_config(config: Optional[Mapping[str, Any]] = None, preset: Optional[str] = None) -> Dict[str, Any]:
    """A complete, validated fedsel config with ``federation_seed`` fixed (0 when left ``None``).

    Server and clients must build the same partition, so the seed cannot follow an episode's reset.

    :param config: overrides of ``fedsel_env.config.DEFAULT_CONFIG``.
    :param preset: a preset name.
    :raises ValueError: for any bad field (from ``make_config``).
    """
    cfg = make_config(config, preset=preset)
    if cfg["federation_seed"] is None:
        cfg["federation_seed"] = 0
    return cfg


def config_to_json(cfg: Mapping[str, Any]) -> str:
    """The config as the JSON string that travels in a ConfigRecord."""
    return json.dumps(cfg, sort_keys=True)


@functools.lru_cache(maxsize=2)
def _data_from_json(cfg_json: str) -> FederatedData:
    cfg = make_config(json.loads(cfg_json))
    return build_federated_data(cfg, np.random.default_rng([int(cfg["federation_seed"]), 1]))


def federated_data(cfg: Mapping[str, Any]) -> FederatedData:
    """The env's federation for ``cfg`` (cached per process: a Ray actor serves many clients).

    :param cfg: a config from :func:`fedsel_config` (``federation_seed`` set).
    :raises ValueError: when ``federation_seed`` is ``None``.
    """
    if cfg.get("federation_seed") is None:
        raise ValueError("config field 'federation_seed' must be an integer for a Flower federation "
                         "(server and clients must build the same partition); use fedsel_flower.fedsel_config")
    return _data_from_json(config_to_json(cfg))


def build_model(cfg: Mapping[str, Any], input_shape: Tuple[int, ...], num_classes: int) -> nn.Module:
    """The config's model (``fedsel_env.sim.models.make_model``)."""
    return make_model(cfg["model"], input_shape, num_classes, cfg["model_params"])


def state_dict_of(layout: ParamLayout, flat: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Named tensors of flat weights, in the model's parameter order (what an ArrayRecord carries)."""
    return {n: t.detach().clone() for n, t in layout.unflatten(flat).items()}


def flat_of(layout: ParamLayout, named: Mapping[str, Any]) -> torch.Tensor:
    """Flat (P,) float32 weights from named arrays (torch or numpy), checked against the layout.

    :raises ValueError: when a name is missing or a shape differs.
    """
    missing = [n for n in layout.names if n not in named]
    if missing or len(named) != len(layout.names):
        raise ValueError(f"arrays {sorted(named)} do not match the model's parameters {layout.names}")
    parts = []
    for n, s in zip(layout.names, layout.shapes):
        t = torch.as_tensor(np.asarray(named[n]) if not isinstance(named[n], torch.Tensor) else named[n])
        if tuple(t.shape) != tuple(s):
            raise ValueError(f"array {n!r} has shape {tuple(t.shape)}, the model expects {tuple(s)}")
        parts.append(t.reshape(-1).to(torch.float32))
    return torch.cat(parts)


class ClientTask:
    """One client's data and the model, with the env's losses and local SGD for that client.

    :param cfg: the fedsel config.
    :param data: the federation (``federated_data(cfg)``).
    :param client: the client's index k (its Flower ``partition-id``).

    The client computes on the config's ``device`` (``cpu`` when the config has none); the weights it
    receives and sends are CPU tensors, as they travel in Flower's records.
    """

    def __init__(self, cfg: Mapping[str, Any], data: FederatedData, client: int) -> None:
        n = data.num_clients
        if not isinstance(client, (int, np.integer)) or not 0 <= int(client) < n:
            raise ValueError(f"partition-id {client!r} is invalid: expected an integer in [0, {n})")
        self.client = int(client)
        self.cfg = cfg
        self.device = dev = resolve_device(cfg.get("device", "cpu"), model=cfg.get("model"))  # auto: as the env's
        x, y = (t.to(dev) for t in data.client_train(self.client))
        self.x_test, self.y_test = (t.to(dev) for t in data.client_test(self.client))
        self.num_samples = int(x.shape[0])
        self.model = build_model(cfg, data.input_shape, data.num_classes).to(dev)
        # A trainer over this client's rows alone gives the env's batch plan, losses and full gradient.
        self.trainer = BatchedTrainer(self.model, x, y, np.array([0, self.num_samples]),
                                      batch_size=cfg["batch_size"], lr=cfg["lr"],
                                      local_epochs=cfg["local_epochs"], momentum=cfg["momentum"])
        self.layout = self.trainer.layout

    def losses(self, flat: torch.Tensor) -> Tuple[float, float]:
        """F_k(w) (mean training loss) and √(mean squared loss) of weights ``flat`` on this client."""
        mean, rms = self.trainer.client_losses(flat.to(self.device), [0])
        return float(mean[0]), float(rms[0])

    def test_metrics(self, flat: torch.Tensor) -> Tuple[float, float, int]:
        """Accuracy, mean loss and size of this client's test split under ``flat``."""
        loss, correct = self.trainer.per_sample_losses(flat.to(self.device), self.x_test, self.y_test)
        t = int(self.y_test.shape[0])
        if t == 0:
            return 0.0, 0.0, 0
        return float(correct.double().mean()), float(loss.double().mean()), t

    def full_gradient(self, flat: torch.Tensor) -> torch.Tensor:
        """∇F_k(w) over the whole training set (q-FedSGD's update), shape (P,)."""
        return self.trainer.full_gradients(flat.to(self.device), [0])[0].cpu()

    def train(self, flat: torch.Tensor, train_seed: int, generator_round: int, epochs: int,
              prox_mu: float = 0.0) -> Tuple[torch.Tensor, int]:
        """E epochs of local SGD from ``flat`` with the env's minibatch order; returns (weights (P,), steps)."""
        g = np.random.default_rng([int(train_seed), int(generator_round), self.client])
        idx, mask = self.trainer.batch_plan([0], [g], epochs=epochs)
        idx, keep = idx[:, 0], mask[:, 0] > 0
        model = self.model
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(self.layout.unflatten(flat.to(self.device))[name])
        anchor = [p.detach().clone() for p in model.parameters()] if prox_mu > 0 else None
        opt = torch.optim.SGD(model.parameters(), lr=self.cfg["lr"], momentum=self.cfg["momentum"])
        x_all, y_all = self.trainer.x, self.trainer.y
        steps = 0
        for s in range(idx.shape[0]):
            rows = idx[s][keep[s]]
            if rows.numel() == 0:
                continue
            rows = rows.to(self.device)
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x_all[rows]), y_all[rows])
            if anchor is not None:
                loss = loss + 0.5 * prox_mu * sum(((p - a) ** 2).sum() for p, a in zip(model.parameters(), anchor))
            loss.backward()
            opt.step()
            steps += 1
        with torch.no_grad():
            out = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu().clone()
        return out, steps
