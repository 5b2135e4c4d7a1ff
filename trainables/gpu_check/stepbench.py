"""The bert-base step bench part: the project's step against stock ``BertForPreTraining`` at B=256, T=128,
bf16, on random tokens over the full 30,522-token vocabulary (no data to carry; a dry run: the smoke model).

Batches are laid out as nsp_pairs rows, ``[CLS] A [SEP] B [SEP]``: "unpadded" batches have every row
``seq_len`` long (the fused attention path: no mask), "padded" ones rows of random length from half of it
(a key-padding mask). Figures: ms/step, tokens/s, MFU (``trainables.flops`` over the dense bf16 peak of
``trainables.hardware``), the ratio to stock, peak memory, the SDPA kernel the profiler saw on each kind of
batch, and the same with ``torch.compile`` (one static shape) where the part's time allows.
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np
import torch

from trainables.data.batches import PretrainBatch, SpecialIds, StepBatch, to_masked
from trainables.data.masking import mask_counts
from trainables.flops import StepShape, step_flops

log = logging.getLogger(__name__)

SPECIALS = dict(pad=0, cls=2, sep=3, mask=4, first_regular=5)  # the project's tokenizer order (data.tokenizer)
SDPA_KERNELS = (("cudnn", "cudnn_attention"), ("flash", "flash"), ("efficient", "efficient"), ("efficient", "fmha"),
                ("math", "attention_math"))
COMPILE_NEEDS_S = 75.0  # compiling bert-base's step and timing it; less time left: recorded as skipped


def random_batches(n: int, B: int, T: int, V: int, ratio: float, padded: bool, seed: int,
                   pad_to: tuple[int, int] | None = None) -> list[StepBatch]:
    """``n`` masked nsp_pairs batches of random regular tokens; every row ``T`` long, or (``padded``) rows
    of T/2..T real tokens (the first row the shortest)."""
    sp = SpecialIds(vocab_size=V, **SPECIALS)
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        lengths = rng.integers(T // 2, T + 1, B) if padded else np.full(B, T)
        lengths[0] = T // 2 if padded else T
        ids = rng.integers(sp.first_regular, V, (B, T))
        a = (lengths - 3) // 2  # A's length; B fills the rest
        pos = np.arange(T)[None, :]
        ids[:, 0], ids[np.arange(B), 1 + a], ids[np.arange(B), lengths - 1] = sp.cls, sp.sep, sp.sep
        attention = (pos < lengths[:, None]).astype(np.int64)
        ids = np.where(attention > 0, ids, sp.pad)
        types = ((pos > (1 + a)[:, None]) & (attention > 0)).astype(np.int64)
        labels, rows = rng.integers(0, 2, B), np.arange(B)
        laid = PretrainBatch(ids, types, attention, labels, rows, rows, np.zeros(B, np.int64))
        masked = to_masked(laid, sp, ratio=ratio, seed=seed, keys=np.arange(B) + i * B, pad_to=pad_to)
        P = int(mask_counts(ids, attention, sp.first_regular, ratio, laid.uncounted).max())
        out.append(StepBatch(masked, np.arange(B), int(attention.sum()), StepShape(B, T, P)))
    return out


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(step, batches: list, dev: torch.device, flops: list[float], warmup: int = 2) -> dict:
    """ms/step, tokens/s, FLOP/s and peak memory of ``step`` over ``batches`` after ``warmup`` of them."""
    for b in batches[:warmup]:
        step(b)
    _sync(dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    t0 = time.perf_counter()
    for b in batches[warmup:]:
        step(b)
    _sync(dev)
    dt, n = time.perf_counter() - t0, len(batches) - warmup
    peak = torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else None
    return {"ms_per_step": 1e3 * dt / n, "tokens_per_s": sum(b.n_tokens for b in batches[warmup:]) / dt,
            "flops_per_s": sum(flops[warmup:]) / dt, "peak_memory_gib": peak, "steps": n}


def sdpa_backend(step, batch, dev: torch.device) -> dict:
    """The scaled-dot-product-attention kernel one step ran, from the profiler's op and kernel names."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=activities) as prof:
        step(batch)
        _sync(dev)
    names = sorted({e.key for e in prof.key_averages()
                    if any(k in e.key.lower() for k in ("attention", "fmha", "flash"))})
    joined = " ".join(names).lower()
    backend = next((label for label, key in SDPA_KERNELS if key in joined), "unknown")
    return {"backend": backend, "ops": names[:12]}


def build_ours(cfg, dev: torch.device, V: int, compiled: bool):
    """(step function, model) of the project's training step (``pretrain.train_step``), optionally compiled."""
    from trainables.model import build_model
    from trainables.pretrain import build_optimizer, pretrain_model, train_step
    from trainables.runtime import autocast

    model = pretrain_model(cfg, build_model(cfg.model, V, SPECIALS["pad"], 0)).to(dev)
    opt, sched = build_optimizer(model, cfg)
    module = torch.compile(model) if compiled else model
    meter: dict = {}

    def step(batch):
        train_step(module, opt, sched, cfg, batch, meter, dev, lambda: autocast(dev, cfg.run.precision))
    return step, model


def run(part) -> None:
    from trainables.bench import _dense, reference_step
    from trainables.hardware import peak_bf16_tflops
    from trainables.objectives import get_objective
    from trainables.presets import build_config
    from trainables.runtime import enable_tf32

    dev = torch.device(part.device)
    preset, n = ("smoke", 3) if part.dry_run else ("bert-base", 12)
    cfg = build_config(preset, "full", [f"run.device={part.device}", "run.precision=bf16", "run.tensorboard=false"])
    B, T, V, ratio = cfg.optim.batch_size, cfg.data.seq_len, cfg.model.vocab_size, cfg.objective.mask_ratio
    enable_tf32(dev)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    peak = part.peak_tflops or peak_bf16_tflops(name)
    part.record(preset=preset, batch_size=B, seq_len=T, vocab_size=V, gpu=name, peak_tflops=peak,
                tokens="random over the full vocabulary")
    objectives = [get_objective(o) for o in cfg.objective.active]
    def cost(batches, shape=None) -> list[float]:
        return [step_flops(cfg.model, objectives, cfg.objective.options, shape or b.shape, V) for b in batches]
    mfu = lambda r: round(r["flops_per_s"] / 1e12 / peak, 4) if peak else None  # noqa: E731
    sets = {kind: random_batches(n, B, T, V, ratio, kind == "padded", seed=1) for kind in ("unpadded", "padded")}
    if dev.type == "cuda":
        sets = {k: [b.pin_memory() for b in v] for k, v in sets.items()}
    step, _ = build_ours(cfg, dev, V, compiled=False)
    eager = {}
    for kind, batches in sets.items():
        eager[kind] = {**timed(step, batches, dev, cost(batches)), **sdpa_backend(step, batches[0], dev)}
        eager[kind]["mfu"] = mfu(eager[kind])
        part.record(eager=eager)
    ref, ref_fn = reference_step(cfg, dev, V, SPECIALS["pad"])
    dense = {id(b): tuple(t.to(dev) for t in _dense(b.batch, T, SPECIALS["pad"])) for b in sets["unpadded"]}
    stock = timed(lambda b: ref_fn(dense[id(b)]), sets["unpadded"], dev, cost(sets["unpadded"], StepShape(B, T, T)))
    stock.update(mfu=mfu(stock), ratio=eager["unpadded"]["tokens_per_s"] / stock["tokens_per_s"])
    del ref, dense
    part.record(stock=stock)
    part.check("eager_steps_finite", all(math.isfinite(r["ms_per_step"]) for r in eager.values()))
    if dev.type == "cuda":  # the CPU's choice is the CPU's: recorded, not checked
        part.check("unpadded_batches_take_a_fused_kernel",
                   eager["unpadded"]["backend"] in ("flash", "cudnn", "efficient"), eager["unpadded"]["ops"])
    part.record(compiled=compiled_figures(part, cfg, dev, V, cost, mfu))
    part.record(summary={"ms_per_step": eager["unpadded"]["ms_per_step"], "mfu": eager["unpadded"]["mfu"],
                         "ratio_to_stock": stock["ratio"], "peak_memory_gib": eager["unpadded"]["peak_memory_gib"],
                         "sdpa_unpadded": eager["unpadded"]["backend"], "sdpa_padded": eager["padded"]["backend"],
                         "padded_ms_per_step": eager["padded"]["ms_per_step"],
                         "compiled_mfu": part.result["compiled"].get("mfu"),
                         "compiled_ms_per_step": part.result["compiled"].get("ms_per_step")})


def compiled_figures(part, cfg, dev: torch.device, V: int, cost, mfu) -> dict:
    """The step under ``torch.compile`` at one static shape (what ``model.compile`` makes every step)."""
    if part.dry_run:
        return {"skipped": "dry run: inductor's compile of the step takes minutes on a small CPU"}
    if part.left() < COMPILE_NEEDS_S:
        return {"skipped": f"{part.left():.0f} s left of the part, under the {COMPILE_NEEDS_S:.0f} s a compile needs"}
    B, T = cfg.optim.batch_size, cfg.data.seq_len
    pad_to = (T, max(1, math.ceil(T * cfg.objective.mask_ratio)))
    batches = [b.pin_memory() for b in random_batches(8, B, T, V, cfg.objective.mask_ratio, False, 2, pad_to)]
    step, _ = build_ours(cfg, dev, V, compiled=True)
    t0 = time.perf_counter()
    step(batches[0])  # the compile
    _sync(dev)
    out = {"compile_s": round(time.perf_counter() - t0, 1), **timed(step, batches, dev, cost(batches), warmup=2),
           **sdpa_backend(step, batches[1], dev)}
    out["mfu"] = mfu(out)
    return out
