"""What the pretraining and fine-tuning loops share: the device, AdamW with a linear schedule, autocast.

``trial_device`` is the one decision of which device a Ray trial (or Ray Train worker) trains on: the GPU
Ray assigned to it, or the CPU when it was assigned none. Since Ray 2.5x a task with no GPU no longer has
``CUDA_VISIBLE_DEVICES`` emptied (``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO``, ray-project/ray#54868): it sees
every GPU of the node, and ``torch.cuda.is_available()`` says nothing about what the trial may use.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import torch
from transformers import get_linear_schedule_with_warmup

from trainables.config import ConfigError

log = logging.getLogger(__name__)


def resolve_device(name: str | torch.device) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; asking for CUDA where there is none is an error."""
    name = str(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device={name!r} but CUDA is not available here; allowed: auto, cpu")
    return torch.device(name)


def cuda_index(gpu_id: str | int, visible: str | None = None) -> int:
    """The torch index (``cuda:k``) of the physical GPU that Ray calls ``gpu_id`` in this process.

    Ray's ids are the node's GPUs in the namespace of the ``CUDA_VISIBLE_DEVICES`` the raylet started
    with. By default Ray sets this process's ``CUDA_VISIBLE_DEVICES`` to its assigned ids (Ray Train to all
    its workers' on the node), so the GPU is at the id's position in that list; with
    ``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1`` the variable is left as the node had it (the same
    rule), or unset, when the id is the index itself. ``ray.train.torch.get_device`` uses the same rule."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    gpu_id = str(gpu_id).strip()
    if visible is None:
        if not gpu_id.isdigit():
            raise ConfigError(f"Ray assigned GPU {gpu_id!r} and CUDA_VISIBLE_DEVICES is unset: the id is no index")
        return int(gpu_id)
    listed = [v.strip() for v in visible.split(",") if v.strip()]
    if gpu_id not in listed:
        raise ConfigError(f"Ray assigned GPU {gpu_id!r} but CUDA_VISIBLE_DEVICES={visible!r} does not list it")
    return listed.index(gpu_id)


def trial_device(assigned_gpu_ids: Sequence[str | int], requested: str = "auto") -> torch.device:
    """The device of a Ray trial or worker: the (first) GPU Ray assigned it, the CPU when none was.

    ``requested`` is ``run.device``: ``cpu`` is honoured; ``auto`` and ``cuda[:N]`` mean "the GPU Ray gave
    me" (an index chosen by hand would bypass Ray's scheduling). A trial holding GPUs where torch sees no
    CUDA (a CPU wheel, a driver mismatch) is an error, not a silent CPU run."""
    ids = [str(i) for i in assigned_gpu_ids]
    requested = str(requested)
    if requested == "cpu":
        return torch.device("cpu")
    if not ids:
        if requested.startswith("cuda"):
            raise ConfigError(f"run.device={requested!r} but Ray assigned this trial no GPU; request one with "
                              "--gpus-per-trial, or use run.device=auto|cpu")
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError(f"Ray assigned GPU(s) {','.join(ids)} but torch.cuda.is_available() is False here "
                          f"(torch {torch.__version__}, built for CUDA {torch.version.cuda or 'none: a CPU-only wheel'}"
                          "); install a CUDA build of torch that matches the driver, or run with --gpus-per-trial 0")
    index = cuda_index(ids[0])
    count = torch.cuda.device_count()
    if index >= count:
        raise ConfigError(f"Ray assigned GPU {ids[0]} (cuda:{index}) but torch sees {count} GPU(s) "
                          f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
    log.info("trial device cuda:%d (Ray GPU id(s) %s)", index, ",".join(ids))
    return torch.device(f"cuda:{index}")


def build_adamw(model: torch.nn.Module, *, lr: float, weight_decay: float, warmup_steps: int, total_steps: int,
                betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
    """AdamW without weight decay on biases and LayerNorm; linear warmup then linear decay to 0."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "LayerNorm" in name else decay).append(p)
    fused = all(p.device.type in ("cpu", "cuda") for p in decay + no_decay)  # one kernel where torch has it
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=betas, eps=eps, fused=fused or None, foreach=None if fused else True)
    return opt, get_linear_schedule_with_warmup(opt, warmup_steps, max(total_steps, 1))


def use_deterministic_kernels(on: bool) -> None:
    """``run.deterministic``: deterministic algorithms only (an op without one raises instead of running),
    cuBLAS with a fixed workspace (it must be set before cuBLAS starts, hence the environment), no cuDNN
    autotuning. Process-wide, as torch's switch is."""
    if not on:
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


def autocast(device: torch.device, precision: str):
    """bf16 autocast on CUDA for precision auto/bf16; a no-op elsewhere."""
    use_bf16 = device.type == "cuda" and precision in ("auto", "bf16")
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16)


def enable_tf32(device: torch.device, deterministic: bool = False) -> bool:
    """On CUDA, let fp32 matmuls and convolutions run on TF32 tensor cores (Ampere and later; 10-bit
    mantissa inputs, fp32 accumulation): what bf16 autocast leaves in fp32, e.g. a run at
    ``precision=fp32``, the optimizer's and the loss's matmuls. Elsewhere nothing changes. Returns
    whether TF32 is on.

    ``deterministic`` (a run that asks for bit-reproducible results, e.g. a ``run.deterministic``
    option) keeps full fp32 ("highest") instead. Set through ``torch.set_float32_matmul_precision`` and
    ``cudnn.allow_tf32``, the API that ``torch.compile``'s inductor reads back
    (``torch.get_float32_matmul_precision()`` when it autotunes): setting only the newer per-backend
    ``fp32_precision`` leaves torch in a "mix of the legacy and new APIs" state in which that getter and
    ``torch.backends.cuda.matmul.allow_tf32`` raise (torch 2.10-2.13), so a compiled run failed."""
    if device.type != "cuda":
        return False
    torch.set_float32_matmul_precision("highest" if deterministic else "high")
    torch.backends.cudnn.allow_tf32 = not deterministic
    return not deterministic
