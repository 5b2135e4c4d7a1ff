"""Throughput benchmarks: our pretraining step against stock BertForPreTraining, and the data path.

    python -m trainables.bench --preset cpu-small [--steps 20] [--threads 2]
    python -m trainables.bench --preset bert-base --set optim.batch_size=128          # on a GPU: MFU
    python -m trainables.bench --preset bert-base --peak-tflops 400    # a GPU not in trainables.hardware
    python -m trainables.bench data --copies 1,4,16                                    # trainables.bench_data

Both sides of the step benchmark train the same ``BertForPreTraining`` size on the same masked batches
with the same batch size and threads, in this process, alternating rounds so machine noise hits both
alike. Ours: the real training step (``pretrain.train_step``: dynamic padding over length-bucketed
batches, MLM logits only at the masked positions through a fixed-shape gather, a prepared attention
mask, fused AdamW, bf16 autocast on CUDA, losses kept on the device). Reference: stock
``BertForPreTraining(labels=..., next_sentence_label=...)`` with full-vocabulary logits on batches
padded to the maximum length. Then ``run_pretraining`` end to end (the background input pipeline
included) on the same config, its tokens/s taken from its own log over the steps after the first.
Prints one JSON line: real tokens/s of each, their ratio, and on CUDA the model FLOPs utilisation
(``trainables.flops``: the matmuls each side actually computes, over the GPU's dense bf16 peak, looked up
by its exact name in ``trainables.hardware``; an unknown GPU's MFU is null until ``--peak-tflops`` gives it).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time

import torch

from trainables.config import ConfigError
from trainables.data.batches import Position, positions_from
from trainables.data.samples import IGNORE
from trainables.hardware import peak_bf16_tflops
from trainables.flops import StepShape, step_flops
from trainables.gpu_check.record import finite
from trainables.model import build_model, count_parameters
from trainables.objectives import get_objective
from trainables.presets import build_config
from trainables.pretrain import pretrain_model, build_optimizer, build_pretraining_data, resolve_device, train_step
from trainables.runtime import autocast

log = logging.getLogger(__name__)


def _sync(device) -> None:
    # the bench's own device: a bare synchronize() waits on the current device, which need not be it (cuda:1)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(fn, batches, device) -> tuple[float, float]:
    """(real tokens per second, seconds) of ``fn`` over ``batches`` (after one warm-up call)."""
    fn(batches[0], 0)
    _sync(device)
    t0, tokens = time.perf_counter(), 0
    for i, b in enumerate(batches):
        fn(b, i)
        tokens += b.n_tokens
    _sync(device)
    seconds = time.perf_counter() - t0
    return tokens / seconds, seconds


def _dense(m, seq_len: int, pad: int):
    """A masked batch padded to ``seq_len`` with (B, T) MLM labels over the whole vocabulary."""
    labels = torch.full_like(m.input_ids, IGNORE)
    keep = m.mlm_labels != IGNORE
    rows = torch.arange(len(labels))[:, None].expand_as(m.mlm_positions)
    labels[rows[keep], m.mlm_positions[keep]] = m.mlm_labels[keep]
    T = seq_len - m.input_ids.shape[1]
    pad_ = lambda t, v: torch.nn.functional.pad(t, (0, T), value=v)  # noqa: E731
    return pad_(m.input_ids, pad), pad_(m.token_type_ids, 0), pad_(m.attention_mask, 0), pad_(labels, IGNORE), m.pair_labels


def reference_step(cfg, dev: torch.device, vocab_size: int, pad: int):
    """(model, step): stock ``BertForPreTraining`` of ``cfg.model`` and one optimizer step of it on a dense
    batch from ``_dense`` (full-vocabulary logits at every position), in the run's autocast."""
    ref = build_model(cfg.model, vocab_size, pad, 0).to(dev)
    opt = torch.optim.AdamW(ref.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)

    def step(dense) -> None:
        ids, types, att, labels, pair = (t.to(dev, non_blocking=True) for t in dense)
        with autocast(dev, cfg.run.precision):
            loss = ref(input_ids=ids, token_type_ids=types, attention_mask=att, labels=labels,
                       next_sentence_label=pair).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return ref, step


def run_bench(preset: str, overrides: list[str], steps: int, rounds: int = 2, peak_tflops: float | None = None) -> dict:
    """The step benchmark's result (one JSON-able dict); ``peak_tflops`` overrides the table's peak."""
    cfg = build_config(preset, "full", overrides)
    dev = resolve_device(cfg.run.device)
    data = build_pretraining_data(cfg)
    sp, V = data.sp, data.sp.vocab_size
    batches = [data.steps.step(p) for p in positions_from(data.steps, Position(0, 0, 0, 0), steps)]
    pin = dev.type == "cuda"  # pinned host batches let .to(dev, non_blocking=True) overlap the copy, as training does
    batches = [b.pin_memory() for b in batches] if pin else batches
    objectives = [get_objective(n) for n in cfg.objective.active]
    ctx = lambda: autocast(dev, cfg.run.precision)  # noqa: E731

    ours = pretrain_model(cfg, build_model(cfg.model, V, sp.pad, 0)).to(dev)
    ours_opt, ours_sched = build_optimizer(ours, cfg)
    meter: dict = {}

    def ours_step(b, i):
        train_step(ours, ours_opt, ours_sched, cfg, b, meter, dev, ctx)

    ref, ref_fn = reference_step(cfg, dev, V, sp.pad)
    dense = [tuple(t.pin_memory() if pin else t for t in _dense(m.batch, cfg.data.seq_len, sp.pad)) for m in batches]

    def ref_step(b, i):
        ref_fn(dense[i])

    ours_runs, ref_runs = [], []
    for _ in range(rounds):  # alternate so that machine noise hits both sides alike
        ours_runs.append(_time(ours_step, batches, dev))
        ref_runs.append(_time(ref_step, batches, dev))
    ours_tps, ref_tps = max(r[0] for r in ours_runs), max(r[0] for r in ref_runs)
    ours_flops = sum(step_flops(cfg.model, objectives, cfg.objective.options, b.shape, V) for b in batches)
    B = cfg.optim.batch_size
    ref_shape = StepShape(B, cfg.data.seq_len, cfg.data.seq_len)  # every position gets full-vocabulary logits
    ref_flops = steps * step_flops(cfg.model, objectives, cfg.objective.options, ref_shape, V) / 1.0
    result = {"preset": preset, "device": str(dev), "precision": cfg.run.precision, "threads": torch.get_num_threads(), "steps": steps,
              "batch_size": B, "seq_len": cfg.data.seq_len, "vocab_size": V, "parameters": count_parameters(ref),
              "padding_fraction": round(1 - sum(b.n_tokens for b in batches) / sum(b.batch.input_ids.numel() for b in batches), 4),
              "ours_tokens_per_s": round(ours_tps, 1), "reference_tokens_per_s": round(ref_tps, 1),
              "ratio": round(ours_tps / ref_tps, 3),
              "loop_tokens_per_s": round(_loop_tokens_per_s(cfg, steps), 1)}
    result["loop_vs_step"] = round(result["loop_tokens_per_s"] / ours_tps, 3)
    if dev.type == "cuda" or peak_tflops:
        result.update(_mfu(ours_flops / min(r[1] for r in ours_runs), ref_flops / min(r[1] for r in ref_runs),
                           dev, peak_tflops))
    return result


def _loop_tokens_per_s(cfg, steps: int) -> float:
    """``run_pretraining`` end to end on ``cfg``: tokens/s over its logged windows after the first."""
    from trainables.overrides import apply_overrides
    from trainables.pretrain import run_pretraining

    seen = []
    with tempfile.TemporaryDirectory() as tmp:
        run_cfg = apply_overrides(cfg, {"optim.max_steps": steps + 5, "run.log_every": 5, "run.eval_every": 0,
                                        "run.checkpoint_every": 0, "run.tensorboard": False})
        run_pretraining(run_cfg, tmp, lambda m, checkpoint_dir=None: seen.append(m.get("tokens_per_s")))
    rates = [r for r in seen if r]
    return sum(rates[1:]) / max(len(rates) - 1, 1) if len(rates) > 1 else float("nan")


def device_name(dev: torch.device) -> str:
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"


def _mfu(ours_flops_per_s: float, ref_flops_per_s: float, dev: torch.device, peak_tflops: float | None = None) -> dict:
    """Achieved TFLOP/s of both sides and their MFU over the dense bf16 peak: ``peak_tflops`` if given, else
    the table's for this exact device name; unknown -> MFU null, with the note saying what to pass."""
    name = device_name(dev)
    peak = peak_tflops or peak_bf16_tflops(name)
    out = {"gpu": name, "achieved_tflops": round(ours_flops_per_s / 1e12, 3),
           "reference_tflops": round(ref_flops_per_s / 1e12, 3), "peak_tflops": peak,
           "peak_source": "--peak-tflops" if peak_tflops else ("trainables.hardware" if peak else None),
           "mfu": None, "reference_mfu": None}
    if peak:
        out.update(mfu=round(ours_flops_per_s / 1e12 / peak, 3), reference_mfu=round(ref_flops_per_s / 1e12 / peak, 3))
    else:
        out["mfu_note"] = (f"MFU unknown: {name!r} is not in trainables.hardware's peak table; "
                           "pass --peak-tflops X (its dense bf16 peak)")
        log.warning("%s", out["mfu_note"])
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["data"]:
        return _data_main(argv[1:])
    p = argparse.ArgumentParser(prog="python -m trainables.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="cpu-small")
    p.add_argument("--corpus", help="sets data.corpus (default: the preset's)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per side and round")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="the device's dense bf16 peak for MFU (default: looked up by the exact GPU name in "
                        "trainables.hardware; needed for a GPU not there, or to get MFU on a CPU)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.peak_tflops is not None and args.peak_tflops <= 0:
        print(f"error: --peak-tflops={args.peak_tflops} must be > 0", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = ([f"data.corpus={args.corpus}"] if args.corpus else []) + args.overrides
    try:
        result = run_bench(args.preset, overrides, args.steps, peak_tflops=args.peak_tflops)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if result.get("mfu_note"):
        print(result["mfu_note"], file=sys.stderr)
    print(json.dumps(finite(result), allow_nan=False))  # valid JSON: a loop rate not measured is null, not NaN
    return 0


def _data_main(argv: list[str]) -> int:
    from trainables.bench_data import run, run_one_file

    p = argparse.ArgumentParser(prog="python -m trainables.bench data", description="the data-path benchmark "
                                "(trainables.bench_data): preparation, warm start, memory, input pipeline")
    p.add_argument("--copies", default="1,4,16", help="comma-separated copies of the built-in corpus")
    p.add_argument("--one-file", action="store_true", help="the copies as ONE .txt and one parquet file: the cold "
                                                           "preparation's peak RSS (a user's own big corpus)")
    p.add_argument("--workdir", default=None, help="where the corpora and preparations go (default: a temp dir)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    try:
        copies = [int(c) for c in args.copies.split(",") if c.strip()]
    except ValueError:
        print(f"error: --copies {args.copies!r} must be comma-separated integers", file=sys.stderr)
        return 2
    (run_one_file if args.one_file else run)(copies, args.workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
