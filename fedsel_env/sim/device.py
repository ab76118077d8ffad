"""The torch device of the simulation (config ``device``; docs/ENVIRONMENT.md, docs/PERFORMANCE.md "GPU").

- :func:`check_device_field` — the config field's syntax (``cpu``, ``cuda``, ``cuda:N``, ``auto``) and
  ``workers`` beside an explicit GPU device, without asking torch about GPUs (``make_config`` calls it);
- :func:`resolve_device` — the field as a ``torch.device`` on this machine: ``auto`` becomes ``cuda``
  when torch sees a GPU and the model is one a GPU runs faster (:func:`gpu_is_faster`: a convolutional
  network), ``cpu`` otherwise; CUDA where torch sees none is a ``ValueError`` naming the
  fix (the env calls it when it is built, the federation when it is made);
- :func:`use_deterministic` — cuBLAS's workspace setting and ``torch.use_deterministic_algorithms`` for
  a CUDA device, so equal seeds give equal trajectories on the same GPU where torch allows;
- :func:`training_chunk` / :func:`gradient_chunk` — how many clients one vmapped call trains on the
  device: on the CPU today's fixed chunk (128 clients; all clients for full gradients), on a GPU
  as many as fit in half the free memory (``torch.cuda.mem_get_info``) by :func:`choose_chunk`.

Nothing here changes anything for ``device: cpu``: no CUDA call is made and the chunks are those the
trainer always used, so CPU trajectories stay bit for bit what they were (``tests/test_golden.py``).
"""
from __future__ import annotations

import math
import os
import re
from typing import Optional, Sequence, Union

import torch
from torch import nn

#: built-in models with convolutions: ``device: auto`` runs them on a GPU when there is one (docs/ENVIRONMENT.md)
CONV_MODELS = ("fedmgda_cnn", "favor_cnn", "cifar_cnn")

#: what the config field accepts
DEVICE_CHOICES = "'cpu', 'cuda', 'cuda:N' (N >= 0) or 'auto'"
_DEVICE_RE = re.compile(r"cpu|auto|cuda(:\d+)?")
#: clients per vmapped training call on the CPU (what ``BatchedTrainer`` always used)
CPU_CHUNK = 128
#: the share of the GPU's free memory one vmapped call may plan for (the rest: activations' slack,
#: the caching allocator's fragmentation, the evaluation passes, the learner)
MEMORY_FRACTION = 0.5
#: the most clients in one vmapped call on a GPU (beyond this a call is long enough that launches do not matter)
MAX_CHUNK = 4096
#: rows per client in one full-gradient step (``BatchedTrainer.full_gradients``' ``rows_per_step``)
GRADIENT_ROWS = 512
#: cuBLAS's deterministic workspace (NVIDIA's and PyTorch's reproducibility notes)
CUBLAS_WORKSPACE = ":4096:8"


def check_device_field(value: object, workers: int = 1) -> None:
    """The ``device`` field's syntax, and no ``workers`` > 1 beside an explicit CUDA device.

    Asks torch nothing about GPUs: a config naming ``cuda`` may be written on a machine without one.
    :raises ValueError: naming the field and what is allowed.
    """
    if not isinstance(value, str) or not _DEVICE_RE.fullmatch(value):
        raise ValueError(f"config field 'device' = {value!r} is invalid: expected {DEVICE_CHOICES}")
    if value.startswith("cuda") and workers > 1:
        raise ValueError(f"config field 'workers' = {workers!r} is invalid beside device {value!r}: worker "
                         "processes split a round over CPU cores, while on a GPU one process trains all the "
                         "round's clients at once; set workers: 1 (or device: cpu)")


def gpu_is_faster(model: Union[str, nn.Module, None]) -> bool:
    """``device: auto``'s rule where torch sees a GPU: whether the env's model runs faster there.

    A convolutional network (a built-in of :data:`CONV_MODELS`, or a module with a ``Conv`` layer) does: its
    local round is arithmetic a GPU does in parallel. A ReLU MLP or logistic regression (``mlp``, ``logreg``)
    does not: the round is a few small matrix products per step and the env's host-side work (the
    observation, the clients' losses on the host) weighs as much; one CPU core runs those presets faster
    (docs/PERFORMANCE.md, "GPU"). A model named by import path is not built to look: ``auto`` takes the GPU
    for it (name ``cpu`` to keep it there). ``None`` (no model: a learner's device) takes the GPU.
    """
    if model is None:
        return True
    if isinstance(model, nn.Module):
        return any(isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d)) for m in model.modules())
    if isinstance(model, str) and ":" not in model and "." not in model:
        return model in CONV_MODELS
    return True


def resolve_device(value: str, workers: int = 1, model: Union[str, nn.Module, None] = None) -> torch.device:
    """The ``device`` field as a ``torch.device`` on this machine.

    :param value: the config's ``device``.
    :param workers: the config's ``workers`` (refused beside a GPU, ``auto`` included).
    :param model: the env's model (its config name or the module), for ``auto``'s rule (:func:`gpu_is_faster`).
    :raises ValueError: for a bad value, CUDA where torch sees none (naming the fix), a GPU index torch
        does not have, or ``workers`` > 1 when the device is a GPU.
    """
    check_device_field(value, workers)
    if value == "cpu":
        return torch.device("cpu")  # no CUDA call at all
    available = torch.cuda.is_available()
    if value == "auto":
        if not available or not gpu_is_faster(model):
            return torch.device("cpu")
        if workers > 1:
            raise ValueError(f"config field 'workers' = {workers!r} is invalid beside device 'auto', which is a "
                             "CUDA GPU on this machine: worker processes are a CPU feature; set workers: 1, or "
                             "device: cpu to keep the workers")
        value = "cuda"
    if not available:
        build = torch.version.cuda
        why = (f"this torch ({torch.__version__}) was built for CUDA {build} but finds no GPU or driver"
               if build else f"this torch ({torch.__version__}) is a CPU-only build")
        raise ValueError(f"config field 'device' = {value!r} is invalid: torch sees no CUDA GPU here "
                         f"(torch.cuda.is_available() is False; {why}). Set device: cpu (or auto, which uses a "
                         "GPU when there is one), or run on a machine with an NVIDIA GPU and a CUDA build of torch")
    device = torch.device(value)
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise ValueError(f"config field 'device' = {value!r} is invalid: torch sees {count} CUDA GPU(s), "
                         f"cuda:0 to cuda:{count - 1}")
    return device


def use_deterministic(device: torch.device) -> None:
    """Make CUDA runs repeatable where torch allows; nothing for the CPU.

    Sets ``CUBLAS_WORKSPACE_CONFIG`` (when unset; cuBLAS reads it when its first handle is made, so before
    any CUDA matrix product of this process) and ``torch.use_deterministic_algorithms(True,
    warn_only=True)`` (kept as it is when the program already turned it on): deterministic cuDNN
    convolutions and index kernels; an operation without a deterministic CUDA kernel warns instead of
    failing. This is process-wide, as torch's setting is. ``FEDSEL_DETERMINISTIC=0`` in the environment
    leaves torch's settings alone (deterministic kernels may be slower).
    """
    if device.type != "cuda" or os.environ.get("FEDSEL_DETERMINISTIC", "1") == "0":
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    if not torch.are_deterministic_algorithms_enabled():
        set_deterministic_algorithms()
    torch.backends.cudnn.benchmark = False  # the autotuner may pick other algorithms run to run


def set_deterministic_algorithms() -> None:
    """``torch.use_deterministic_algorithms(True, warn_only=True)`` without its import of TorchInductor's config.

    The public function is two statements: it imports ``torch._inductor.config`` (which imports TorchDynamo:
    3.9 s of the first FAVOR reset on an H100's host, 0.9 s here) to set inductor's own ``deterministic`` flag,
    then sets ATen's. The simulator compiles nothing, so only ATen's flag is set here, unless inductor is
    already loaded (then its flag is set too, as the public function would), or this torch lacks the
    private setter (then the public function is called).
    """
    import sys

    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None or "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(True, warn_only=True)
        return
    setter(True, warn_only=True)


def activation_floats(model: nn.Module, input_shape: Sequence[int]) -> int:
    """Floats every leaf module of ``model`` outputs for one input sample (one forward pass on the CPU)."""
    total = [0]

    def count(_module, _inputs, output) -> None:
        if isinstance(output, torch.Tensor):
            total[0] += output.numel()

    hooks = [m.register_forward_hook(count) for m in model.modules() if not list(m.children())]
    try:
        with torch.no_grad():
            params = {n: torch.zeros(p.shape) for n, p in model.named_parameters()}
            torch.func.functional_call(model, params, (torch.zeros(1, *input_shape),))
    finally:
        for h in hooks:
            h.remove()
    return total[0]


def client_step_bytes(model_size: int, activations: int, input_floats: int, rows: int) -> int:
    """Bytes one client adds to a vmapped step of ``rows`` samples (float32, an upper estimate).

    Per client: its parameters, gradient, momentum, the update's temporaries and the vmapped backward's
    per-client weight gradients (6 P); per row: its input, the activations kept for the backward pass
    and their gradients (4 A + I).
    """
    return 4 * (6 * int(model_size) + int(rows) * (4 * int(activations) + int(input_floats)))


def choose_chunk(free_bytes: int, per_client_bytes: int, fraction: float = MEMORY_FRACTION,
                 cap: int = MAX_CHUNK) -> int:
    """Clients per vmapped call: as many as fit in ``fraction`` of ``free_bytes``, at least 1, at most ``cap``."""
    fit = int(fraction * max(int(free_bytes), 0) // max(int(per_client_bytes), 1))
    return max(1, min(int(cap), fit))


def _free_bytes(device: torch.device) -> int:
    free, _total = torch.cuda.mem_get_info(device)
    return int(free)


def training_chunk(device: torch.device, model: nn.Module, input_shape: Sequence[int], batch_size: int,
                   free_bytes: Optional[int] = None) -> int:
    """Clients per vmapped training call: :data:`CPU_CHUNK` on the CPU, from the free memory on a GPU.

    :param free_bytes: the device's free memory; ``None`` asks ``torch.cuda.mem_get_info`` (GPU only).
    """
    if device.type != "cuda" and free_bytes is None:
        return CPU_CHUNK
    per = client_step_bytes(sum(p.numel() for p in model.parameters()), activation_floats(model, input_shape),
                            math.prod(input_shape), batch_size)
    return choose_chunk(_free_bytes(device) if free_bytes is None else free_bytes, per)


def gradient_chunk(device: torch.device, model: nn.Module, input_shape: Sequence[int],
                   free_bytes: Optional[int] = None) -> Optional[int]:
    """Clients per vmapped full-gradient step (q-FedSGD): ``None`` (all at once, as always) on the CPU."""
    if device.type != "cuda" and free_bytes is None:
        return None
    return training_chunk(device, model, input_shape, GRADIENT_ROWS, free_bytes)
