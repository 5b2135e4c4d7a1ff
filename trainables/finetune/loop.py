"""The fine-tuning loop and batched prediction: AdamW with warmup and decay, length-bucketed batches.

Nothing in a training step or an evaluation forward waits on the device: a batch is padded on the host
(pinned and copied asynchronously on CUDA), the attention takes the prepared (B, 1, 1, T) mask of
pretraining (``trainables.model.key_padding_mask``; a 2D mask would make transformers ask the device
whether any position is padded on every batch), and outputs are read back to the host in one transfer
per ``READBACK_BATCHES`` evaluation batches, not per batch or per example.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch

from trainables.batching import bucket_batches
from trainables.config import FinetuneConfig
from trainables.model import key_padding_mask
from trainables.readback import to_host
from trainables.runtime import autocast, build_adamw
from trainables.task_types import Encoded

READBACK_BATCHES = 16  # evaluation batches whose outputs cross to the host in one transfer
MODEL_KEYS = ("input_ids", "token_type_ids", "attention_mask")


def collate_host(features: list[dict[str, Any]], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad to the longest feature in the batch (dynamic padding) on the host; token labels pad with -100.
    Every tensor is a fresh contiguous (B, T) (or (B,) for a sequence label) int64 CPU tensor."""
    width = max(len(f["input_ids"]) for f in features)
    pad = {"input_ids": pad_id, "token_type_ids": 0, "attention_mask": 0, "labels": -100}
    batch: dict[str, torch.Tensor] = {}
    for key in features[0]:
        values = [f[key] for f in features]
        if isinstance(values[0], list):
            values = [v + [pad[key]] * (width - len(v)) for v in values]
        batch[key] = torch.tensor(values, dtype=torch.long)
    return batch


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """The host batch on ``device``. On CUDA through pinned memory with ``non_blocking``: the copy is
    queued behind the running kernels instead of waiting for them (pinning is CUDA's; a CPU-only build
    cannot pin, so other devices take a plain ``to``)."""
    if device.type != "cuda":
        return {k: v.to(device) for k, v in batch.items()}
    return {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}


def collate(features: list[dict[str, Any]], pad_id: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Pad to the longest feature in the batch (dynamic padding); token labels pad with -100."""
    return to_device(collate_host(features, pad_id), device)


def model_batch(features: list[dict[str, Any]], pad_id: int, device: torch.device,
                config) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(batch, model inputs): the padded batch on ``device`` (its 2D ``attention_mask``, (B, T), is what
    pooling reads), and the same with the attention mask the model takes as it is: ``None`` when no row
    is padded (SDPA's fused kernel, as transformers chooses for an all-ones mask), else the prepared
    (B, 1, 1, T) mask. Whether a row is padded is read from the host lists, so the device is never asked."""
    width = len(features[0]["input_ids"])
    unpadded = all(len(f["input_ids"]) == width and all(f["attention_mask"]) for f in features)
    host = collate_host(features, pad_id)
    batch = to_device(host, device)
    mask = None if unpadded else key_padding_mask(config, batch["attention_mask"])
    return batch, {**batch, "attention_mask": mask}


def read_back(batches: Iterable[tuple[Any, list[torch.Tensor]]],
              every: int = READBACK_BATCHES) -> Iterator[tuple[Any, list[np.ndarray]]]:
    """(key, device tensors) per batch -> (key, host arrays) per batch, with one transfer per ``every``
    batches: the device runs ahead of the host instead of stopping after each batch."""
    pending: list[tuple[Any, list[torch.Tensor]]] = []
    for item in batches:
        pending.append(item)
        if len(pending) == every:
            yield from _flush(pending)
            pending = []
    yield from _flush(pending)


def _flush(pending: list[tuple[Any, list[torch.Tensor]]]) -> Iterator[tuple[Any, list[np.ndarray]]]:
    arrays = to_host([t for _, tensors in pending for t in tensors])
    start = 0
    for key, tensors in pending:
        yield key, arrays[start:start + len(tensors)]
        start += len(tensors)


def build_optimizer(model: torch.nn.Module, ft: FinetuneConfig, total_steps: int):
    return build_adamw(model, lr=ft.lr, weight_decay=ft.weight_decay, warmup_steps=int(ft.warmup_frac * total_steps),
                       total_steps=total_steps)


def train_model(model, enc: Encoded, ft: FinetuneConfig, rng: np.random.Generator, device: torch.device,
                pad_id: int, precision: str = "auto", logger=None,
                on_epoch: Callable[[float], bool] | None = None) -> int:
    """Fine-tune in place for at most ``ft.epochs`` (fractional epochs allowed); returns the optimizer steps.

    ``logger`` (optional) gets ``step(step, loss)`` after every step. ``on_epoch(epoch)`` (optional) is
    called after each epoch, the last one after the final step, and ends training early by returning
    True. Neither may draw from torch's RNG (dev scoring in eval mode does not), so watching never
    changes what is trained; the schedule is always the one of ``ft.epochs``."""
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
                _, inputs = model_batch([enc.inputs[i] for i in idx], pad_id, device, model.config)
                with autocast(device, precision):
                    loss = model(**inputs).loss
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
            if on_epoch is not None:
                if on_epoch(step / n_batches):
                    break
                model.train()
    return step


def _eval_outputs(model, enc: Encoded, batch_size: int, device: torch.device, pad_id: int,
                  precision: str) -> Iterator[tuple[np.ndarray, list[torch.Tensor]]]:
    """(feature indices, device logits) per length-bucketed batch: QA [start (B, T), end (B, T)],
    else [logits (B, C) or (B, T, C)]."""
    for idx in bucket_batches(enc.lengths(), batch_size, None):
        _, inputs = model_batch([{k: enc.inputs[i][k] for k in MODEL_KEYS} for i in idx], pad_id, device,
                                model.config)
        with autocast(device, precision):
            res = model(**inputs)
        yield idx, ([res.start_logits, res.end_logits] if hasattr(res, "start_logits") else [res.logits])


@torch.inference_mode()
def predict_logits(model, enc: Encoded, batch_size: int, device: torch.device, pad_id: int,
                   precision: str = "auto") -> list:
    """Per-feature logits in feature order: classification (C,), tagging (T, C), QA ((T,), (T,))."""
    model.eval()
    out: list[Any] = [None] * len(enc.inputs)
    for idx, arrays in read_back(_eval_outputs(model, enc, batch_size, device, pad_id, precision)):
        for j, i in enumerate(idx):
            n = len(enc.inputs[i]["input_ids"])
            if len(arrays) == 2:  # QA: start and end logits, cut to the feature's own length
                out[i] = (arrays[0][j, :n], arrays[1][j, :n])
            else:
                out[i] = arrays[0][j] if arrays[0].ndim == 2 else arrays[0][j, :n]
    return out
