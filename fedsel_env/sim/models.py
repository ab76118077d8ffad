"""The models clients train (docs/SPEC.md §3.3), by name.

None uses BatchNorm: running statistics break both the vectorised training
(``torch.func`` needs pure functions of the parameters) and FedAvg's meaning.

- ``logreg``: multinomial logistic regression.
- ``mlp``: one hidden ReLU layer (``hidden``, default 64).
- ``fedmgda_cnn``: FedMGDA+'s Fashion-MNIST CNN, 21,840 parameters
  (conv 1→10 k5, pool, conv 10→20 k5, pool, FC 320→50, FC 50→10).
- ``favor_cnn``: FAVOR's MNIST CNN, 431,080 parameters
  (conv 1→20 k5, pool, conv 20→50 k5, pool, FC 800→500, FC 500→10).
- ``cifar_cnn``: a LeNet-style CIFAR-10 CNN (conv 3→6 k5, pool, conv 6→16 k5, pool, FC 400→120→84→10).

Every 2×2 pool is :class:`Pool2x2`: ``nn.MaxPool2d(2)`` itself while gradients are recorded
(training), and, in evaluation passes (no autograd), the same values computed as the
elementwise maximum of the four strided 2×2 corners, which is 8× faster than PyTorch's CPU
max-pool kernel here (``bench/pool_speed.py``; ``tests/test_models.py`` checks it is equal).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

import inspect
import math

import torch
from torch import nn

from ..registry import Registry, callable_with, check_params
from .limits import refuse_if_too_big, short

MODELS: Registry = Registry("model", check=callable_with(2, "(input_shape, num_classes, **model_params)",
                                                         "a model is a function or nn.Module class"))


class Pool2x2(nn.MaxPool2d):
    """``nn.MaxPool2d(2)`` with a fast exact forward for evaluation passes.

    With autograd recording, it is PyTorch's own max-pool (and its gradient, which goes to the first
    maximum of each window). Without (``torch.no_grad`` / ``inference_mode``: the server's evaluation
    and loss passes), the output is ``max(max(x00, x01), max(x10, x11))`` over the strided corners:
    the same values, NaN propagated as max-pool does, odd trailing rows and columns dropped as
    ``floor`` mode does.
    """

    def __init__(self) -> None:
        super().__init__(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            return super().forward(x)
        h, w = x.shape[-2] // 2 * 2, x.shape[-1] // 2 * 2
        return torch.maximum(torch.maximum(x[..., 0:h:2, 0:w:2], x[..., 0:h:2, 1:w:2]),
                             torch.maximum(x[..., 1:h:2, 0:w:2], x[..., 1:h:2, 1:w:2]))


def _need_image(name: str, input_shape: Tuple[int, ...], shape: Tuple[int, ...]) -> None:
    if tuple(input_shape) != shape:
        raise ValueError(
            f"model {name!r} needs inputs of shape {shape}, but the dataset gives {tuple(input_shape)}; "
            f"use 'logreg' or 'mlp' for this dataset"
        )


@MODELS.register("logreg")
def logreg(input_shape: Tuple[int, ...], num_classes: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))


#: The widest ``mlp`` hidden layer named (far beyond any machine's memory, which refuses much less): torch
#: sizes a tensor in int64, and 10**400 would not even reach the memory check (was a TypeError).
MAX_HIDDEN = 10**12


@MODELS.register("mlp")
def mlp(input_shape: Tuple[int, ...], num_classes: int, hidden: int = 64) -> nn.Module:
    if isinstance(hidden, bool) or not isinstance(hidden, int) or not 1 <= hidden <= MAX_HIDDEN:
        raise ValueError(f"model parameter 'hidden' = {short(hidden)} for 'mlp' is invalid: expected an integer in "
                         f"[1, {MAX_HIDDEN:.0e}] (the hidden layer's width; 64 by default)")
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden), nn.ReLU(),
                         nn.Linear(hidden, num_classes))


@MODELS.register("fedmgda_cnn")
def fedmgda_cnn(input_shape: Tuple[int, ...], num_classes: int) -> nn.Module:
    _need_image("fedmgda_cnn", input_shape, (1, 28, 28))
    return nn.Sequential(
        nn.Conv2d(1, 10, 5), Pool2x2(), nn.ReLU(),
        nn.Conv2d(10, 20, 5), Pool2x2(), nn.ReLU(),
        nn.Flatten(), nn.Linear(320, 50), nn.ReLU(), nn.Linear(50, num_classes),
    )


@MODELS.register("favor_cnn")
def favor_cnn(input_shape: Tuple[int, ...], num_classes: int) -> nn.Module:
    _need_image("favor_cnn", input_shape, (1, 28, 28))
    return nn.Sequential(
        nn.Conv2d(1, 20, 5), nn.ReLU(), Pool2x2(),
        nn.Conv2d(20, 50, 5), nn.ReLU(), Pool2x2(),
        nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, num_classes),
    )


@MODELS.register("cifar_cnn")
def cifar_cnn(input_shape: Tuple[int, ...], num_classes: int) -> nn.Module:
    _need_image("cifar_cnn", input_shape, (3, 32, 32))
    return nn.Sequential(
        nn.Conv2d(3, 6, 5), nn.ReLU(), Pool2x2(),
        nn.Conv2d(6, 16, 5), nn.ReLU(), Pool2x2(),
        nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, num_classes),
    )


_PARAM_DEFAULTS: Dict[str, Dict[str, Any]] = {"mlp": {"hidden": 64}}


def make_model(name: str, input_shape: Tuple[int, ...], num_classes: int,
               params: Dict[str, Any] | None = None) -> nn.Module:
    """Build the model registered as ``name`` (parameters uninitialised-but-random: re-init with a generator).

    :raises ValueError: for an unknown name, an unknown parameter or an input shape the model cannot take.
    """
    factory: Callable[..., nn.Module] = MODELS.lookup(name)
    # a model named by import path (my_pkg.nets:Wide) takes the keyword parameters its signature declares
    defaults = _PARAM_DEFAULTS[name] if name in _PARAM_DEFAULTS else {
        p.name: p.default for p in list(inspect.signature(factory).parameters.values())[2:]
        if p.default is not inspect.Parameter.empty}
    kw = check_params("model", name, params or {}, defaults)
    with torch.device("meta"):  # its size first, without allocating (nor drawing from any generator)
        try:
            probe = factory(tuple(input_shape), num_classes, **kw)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - a plug-in's own failure: named, not raw
            if name in MODELS:
                raise
            raise ValueError(f"config field 'model' = {short(name)} failed when called with input_shape "
                             f"{tuple(input_shape)}, num_classes {num_classes} ({type(e).__name__}: "
                             f"{short(str(e))}): a model is a function or nn.Module class taking them") from e
    if not isinstance(probe, nn.Module):
        raise ValueError(f"config field 'model' = {short(name)} gave {type(probe).__name__} {short(probe)}, not a "
                         f"torch.nn.Module: a model is a function or class returning one")
    size = num_parameters(probe)
    refuse_if_too_big(8.0 * size, f"model {name!r} with model_params {kw} ({size:,} parameters, held at least "
                                  f"twice in float32)", "choose a smaller model or smaller model_params")
    return factory(tuple(input_shape), num_classes, **kw)


def init_params(model: nn.Module, generator: torch.Generator) -> Dict[str, torch.Tensor]:
    """Fresh parameters drawn from ``generator`` with PyTorch's default (Kaiming-uniform) scheme.

    Drawn here instead of by ``reset_parameters`` so that no global RNG is touched.
    """
    out: Dict[str, torch.Tensor] = {}
    for mod_name, mod in model.named_modules():
        if isinstance(mod, (nn.Linear, nn.Conv2d)):
            fan_in = mod.weight[0].numel()
            bound = 1.0 / math.sqrt(fan_in)  # kaiming_uniform_(a=√5) and the bias rule both give 1/√fan_in
            prefix = f"{mod_name}." if mod_name else ""
            w = (torch.rand(mod.weight.shape, generator=generator) * 2 - 1) * bound
            out[prefix + "weight"] = w
            if mod.bias is not None:
                out[prefix + "bias"] = (torch.rand(mod.bias.shape, generator=generator) * 2 - 1) * bound
    names = [n for n, _ in model.named_parameters()]
    missing = set(names) - set(out)
    if missing:
        raise ValueError(f"init_params does not know how to initialise {sorted(missing)}")
    return {n: out[n] for n in names}


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
