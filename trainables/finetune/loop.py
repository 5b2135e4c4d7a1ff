"""The fine-tuning loop and batched prediction: AdamW with warmup and decay, length-bucketed batches."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from trainables.batching import bucket_batches
from trainables.config import FinetuneConfig
from trainables.runtime import autocast, build_adamw
from trainables.task_types import Encoded


def collate(features: list[dict[str, Any]], pad_id: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Pad to the longest feature in the batch (dynamic padding); token labels pad with -100."""
    width = max(len(f["input_ids"]) for f in features)
    pad = {"input_ids": pad_id, "token_type_ids": 0, "attention_mask": 0, "labels": -100}
    batch: dict[str, torch.Tensor] = {}
    for key in features[0]:
        values = [f[key] for f in features]
        if isinstance(values[0], list):
            values = [v + [pad[key]] * (width - len(v)) for v in values]
        batch[key] = torch.tensor(values, dtype=torch.long, device=device)
    return batch


def build_optimizer(model: torch.nn.Module, ft: FinetuneConfig, total_steps: int):
    return build_adamw(model, lr=ft.lr, weight_decay=ft.weight_decay, warmup_steps=int(ft.warmup_frac * total_steps),
                       total_steps=total_steps)


def train_model(model, enc: Encoded, ft: FinetuneConfig, rng: np.random.Generator, device: torch.device,
                pad_id: int, precision: str = "auto", logger=None) -> int:
    """Fine-tune in place for ``ft.epochs`` (fractional epochs allowed); returns the optimizer steps.

    ``logger`` (optional) gets ``step(step, loss)`` after every step and ``epoch(epoch)`` after each
    epoch, the last one after the final step; it must not draw from torch's RNG (dev scoring in eval
    mode does not), so logging never changes what is trained."""
    n_batches = math.ceil(len(enc.inputs) / ft.batch_size)
    total = max(1, math.ceil(ft.epochs * n_batches))
    opt, sched = build_optimizer(model, ft, total)
    model.train()
    step = 0
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # dropout draws from torch's RNG: seed it, leave global state
        torch.manual_seed(int(rng.integers(2**31)))
        while step < total:
            for idx in bucket_batches(enc.lengths(), ft.batch_size, rng):
                batch = collate([enc.inputs[i] for i in idx], pad_id, device)
                with autocast(device, precision):
                    loss = model(**batch).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                opt.zero_grad(set_to_none=True)
                step += 1
                if logger is not None:
                    logger.step(step, loss.detach())
                if step >= total:
                    break
            if logger is not None:
                logger.epoch(step / n_batches)
                model.train()
    return step


@torch.inference_mode()
def predict_logits(model, enc: Encoded, batch_size: int, device: torch.device, pad_id: int,
                   precision: str = "auto") -> list:
    """Per-feature logits in feature order: classification (C,), tagging (T, C), QA ((T,), (T,))."""
    model.eval()
    out: list[Any] = [None] * len(enc.inputs)
    model_keys = ("input_ids", "token_type_ids", "attention_mask")
    for idx in bucket_batches(enc.lengths(), batch_size, None):
        feats = [{k: enc.inputs[i][k] for k in model_keys} for i in idx]
        batch = collate(feats, pad_id, device)
        with autocast(device, precision):
            res = model(**batch)
        if hasattr(res, "start_logits"):
            starts, ends = res.start_logits.float().cpu().numpy(), res.end_logits.float().cpu().numpy()
            for j, i in enumerate(idx):
                n = len(enc.inputs[i]["input_ids"])
                out[i] = (starts[j, :n], ends[j, :n])
        else:
            logits = res.logits.float().cpu().numpy()
            for j, i in enumerate(idx):
                out[i] = logits[j] if logits.ndim == 2 else logits[j, :len(enc.inputs[i]["input_ids"])]
    return out
