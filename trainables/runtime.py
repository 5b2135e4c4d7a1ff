"""What the pretraining and fine-tuning loops share: the device, AdamW with a linear schedule, autocast."""

from __future__ import annotations

import torch
from transformers import get_linear_schedule_with_warmup

from trainables.config import ConfigError


def resolve_device(name: str | torch.device) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; asking for CUDA where there is none is an error."""
    name = str(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device={name!r} but CUDA is not available here; allowed: auto, cpu")
    return torch.device(name)


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


def autocast(device: torch.device, precision: str):
    """bf16 autocast on CUDA for precision auto/bf16; a no-op elsewhere."""
    use_bf16 = device.type == "cuda" and precision in ("auto", "bf16")
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16)
