"""Throughput benchmarks: our pretraining step against stock BertForPreTraining, and the data path.

    python -m trainables.bench --preset cpu-small [--steps 20] [--threads 2] [--rounds 2]   # fp32 and bf16
    python -m trainables.bench --preset cpu-small --precision fp32                 # one precision
    python -m trainables.bench --preset bert-base --set optim.batch_size=128          # on a GPU: MFU
    python -m trainables.bench --preset bert-base --peak-tflops 400    # a GPU not in trainables.hardware
    python -m trainables.bench --preset cpu-small --set model.compile=true   # + our step compiled, same batches
    python -m trainables.bench data --copies 1,4,16                                    # trainables.bench_data

Both sides of the step benchmark train the same ``BertForPreTraining`` size on the same masked batches
with the same batch size, threads and precision, in this process, alternating rounds so machine noise hits
both alike. Ours: the real training step (``pretrain.train_step``: dynamic padding over length-bucketed
batches, MLM logits only at the masked positions through a fixed-shape gather, a prepared attention
mask, fused AdamW, bf16 autocast where ``runtime.resolve_precision`` says so, losses kept on the device).
Reference: stock ``BertForPreTraining(labels=..., next_sentence_label=...)`` with full-vocabulary logits on
batches padded to the maximum length. Each precision benched (``--precision``; by default the run's, and on
a CPU with native bf16 fp32 beside it) gets both sides, and the ratio is at the same precision. Then
``run_pretraining`` end to end (the background input pipeline included) on the same config at the first
precision, its tokens/s taken from its own log over the steps after the first.

With ``model.compile=true`` the batches take one static shape (as a compiled run's do) and a third side times our
step compiled (``torch.compile``, inductor) against the eager one on those same batches, in the same rounds; the
first compiled step, where the compilation happens, is timed apart (``compiled_first_step_s``).

``--profile`` adds where our step's time goes at each precision (``torch.profiler`` over the same batches): the
ops that take the most of it, in milliseconds per step, and their groups (``PROFILE_GROUPS``: matmuls,
attention, the MLM loss's softmax, copies and casts, the optimizer, the rest).

Prints one JSON line: real tokens/s of each side, their ratio, and the model FLOPs utilisation
(``trainables.flops``: the matmuls each side actually computes, per second, over the device's dense peak
at that precision). On CUDA the peak is the GPU's bf16 one, looked up by its exact name in
``trainables.hardware`` (an unknown GPU's MFU is null until ``--peak-tflops`` gives it); on a CPU it is
measured here, a 2048^3 matmul in fp32 and in bf16 (``matmul_peaks``, with the rate of the model's own FFN
matmul beside it). The top-level figures are the first precision's; ``by_precision`` holds each one's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import tempfile
import time
from typing import Callable, NamedTuple

import torch

from trainables.config import ConfigError
from trainables.data.batches import Position, positions_from
from trainables.data.samples import IGNORE
from trainables.hardware import peak_bf16_tflops
from trainables.flops import StepShape, step_flops
from trainables.model import build_model, count_parameters
from trainables.objectives import get_objective
from trainables.presets import build_config
from trainables.pretrain import (_training_module, build_optimizer, build_pretraining_data, pretrain_model,
                                 resolve_device, train_step)
from trainables.gpu_check.record import finite
from trainables.runtime import Precision, autocast, cpu_bf16_flag, resolve_precision, set_allocator

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


# Groups of the profile (--profile): the first pattern an op's name contains decides its group.
PROFILE_GROUPS = (("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul")),
                  ("attention", ("scaled_dot_product",)),
                  ("loss softmax", ("log_softmax", "nll_loss")),
                  ("copies", ("aten::copy_", "aten::_to_copy")),  # casts included
                  ("optimizer", ("adam",)))


def profile_step(step: Callable, batches, top: int = 12) -> dict:
    """Where one side's step spends its time over ``batches`` (after one warm-up call): milliseconds per step of
    the ``top`` ops by self CPU time, and of each ``PROFILE_GROUPS`` group ("other": every op in none)."""
    from torch.profiler import ProfilerActivity, profile

    step(batches[0], 0)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i, b in enumerate(batches):
            step(b, i)
    n = len(batches)
    ops = sorted(((e.key, e.self_cpu_time_total / 1e3 / n) for e in prof.key_averages()), key=lambda kv: -kv[1])
    groups = {name: 0.0 for name, _ in PROFILE_GROUPS} | {"other": 0.0}
    for key, ms in ops:
        group = next((name for name, pats in PROFILE_GROUPS if any(p in key.lower() for p in pats)), "other")
        groups[group] += ms
    return {"ms_per_step": round(sum(ms for _, ms in ops), 2), "groups": {k: round(v, 2) for k, v in groups.items()},
            "top_ops": [[k, round(ms, 2)] for k, ms in ops[:top]]}


def reference_step(cfg, dev: torch.device, vocab_size: int, pad: int, precision: str | None = None):
    """(model, step): stock ``BertForPreTraining`` of ``cfg.model`` and one optimizer step of it on a dense
    batch from ``_dense`` (full-vocabulary logits at every position), in the autocast of ``precision``
    (default: the run's)."""
    ref = build_model(cfg.model, vocab_size, pad, 0).to(dev)
    opt = torch.optim.AdamW(ref.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)

    def step(dense) -> None:
        ids, types, att, labels, pair = (t.to(dev, non_blocking=True) for t in dense)
        with autocast(dev, precision or cfg.run.precision):
            loss = ref(input_ids=ids, token_type_ids=types, attention_mask=att, labels=labels,
                       next_sentence_label=pair).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return ref, step


class Sides(NamedTuple):
    """Both sides of the step bench at one precision: ours (``pretrain.train_step``) and stock's step."""

    precision: Precision
    ours: Callable
    ref: Callable
    compiled: Callable | None = None  # with model.compile: ours compiled, on the same static-shape batches


def build_sides(cfg, data, batches, dev, precision: str) -> Sides:
    """Fresh models, optimizers and steps of both sides at ``precision`` (auto | fp32 | bf16), the same
    initial weights at every precision."""
    sp, V = data.sp, data.sp.vocab_size
    ctx = lambda: autocast(dev, precision)  # noqa: E731

    def our_step(wrap: Callable) -> Callable:
        """``pretrain.train_step`` on a fresh model (the same initial weights), run through ``wrap(model)``."""
        model = pretrain_model(cfg, build_model(cfg.model, V, sp.pad, 0)).to(dev)
        module, (opt, sched), meter = wrap(model), build_optimizer(model, cfg), {}
        return lambda b, i: train_step(module, opt, sched, cfg, b, meter, dev, ctx)

    ours_step = our_step(lambda model: model)
    ref, ref_fn = reference_step(cfg, dev, V, sp.pad, precision)
    pin = dev.type == "cuda"
    dense = [tuple(t.pin_memory() if pin else t for t in _dense(m.batch, cfg.data.seq_len, sp.pad)) for m in batches]

    def ref_step(b, i):
        ref_fn(dense[i])

    # with model.compile, the training loop's compiled forward; ``ours`` stays eager on the same batches
    compiled_step = our_step(lambda model: _training_module(model, cfg, 1)) if cfg.model.compile else None
    return Sides(resolve_precision(dev, precision), ours_step, ref_step, compiled_step)


def bench_precisions(requested: str | None, run_precision: str, dev: torch.device) -> list[str]:
    """The precisions to bench (comma-separated auto | fp32 | bf16; ``auto`` is ``run.precision``), the run's
    first. Default: the run's, and on a CPU where that is bf16, fp32 beside it (the speed bf16 buys)."""
    names = [p.strip() for p in (requested or "auto").split(",") if p.strip()]
    bad = [p for p in names if p not in ("auto", "fp32", "bf16")]
    if bad or not names:
        raise ConfigError(f"--precision {', '.join(map(repr, bad)) or repr(requested)} is not valid; allowed: "
                          "comma-separated auto, fp32, bf16")
    names = [run_precision if p == "auto" else p for p in names]
    if requested is None and dev.type == "cpu" and resolve_precision(dev, run_precision).name == "bf16":
        names.append("fp32")
    resolved = []
    for p in names:  # one entry per precision actually computed (auto and bf16 may be the same)
        if resolve_precision(dev, p).name not in [resolve_precision(dev, q).name for q in resolved]:
            resolved.append(p)
    return resolved


def run_bench(preset: str, overrides: list[str], steps: int, rounds: int = 2, peak_tflops: float | None = None,
              precision: str | None = None, profile: bool = False) -> dict:
    """The step benchmark's result (one JSON-able dict); ``peak_tflops`` overrides the peak (the table's on
    CUDA, the measured one on a CPU); ``precision``: what ``bench_precisions`` takes. The top-level figures
    are at the first precision (the run's); ``by_precision`` has each one's."""
    cfg = build_config(preset, "full", overrides)
    allocator = set_allocator(cfg.run.allocator)  # both sides share it (one process): --set run.allocator=system
    dev = resolve_device(cfg.run.device)
    precisions = bench_precisions(precision, cfg.run.precision, dev)
    data = build_pretraining_data(cfg)
    V = data.sp.vocab_size
    batches = [data.steps.step(p) for p in positions_from(data.steps, Position(0, 0, 0, 0), steps)]
    batches = [b.pin_memory() for b in batches] if dev.type == "cuda" else batches  # as training does
    sides = [build_sides(cfg, data, batches, dev, p) for p in precisions]
    runs = {s.precision.name: ([], []) for s in sides}
    compiled = {s.precision.name: {"runs": []} for s in sides if s.compiled}
    for s in sides:  # the compilation, once per shape, timed apart from the rounds (a trial pays it at its start)
        if s.compiled:
            t0 = time.perf_counter()
            s.compiled(batches[0], 0)
            _sync(dev)
            compiled[s.precision.name]["first_step_s"] = round(time.perf_counter() - t0, 2)
    for _ in range(rounds):  # alternate so that machine noise hits every side alike
        for s in sides:
            runs[s.precision.name][0].append(_time(s.ours, batches, dev))
            runs[s.precision.name][1].append(_time(s.ref, batches, dev))
            if s.compiled:
                compiled[s.precision.name]["runs"].append(_time(s.compiled, batches, dev))
    peaks = measured_peaks(cfg, batches) if dev.type == "cpu" else None
    by = {name: _figures(cfg, batches, V, dev, why, ours, ref, peak_tflops, peaks and peaks[f"{name}_tflops"])
          for (name, why), (ours, ref) in zip([s.precision for s in sides], runs.values())}
    for name, c in compiled.items():  # the compiled step against the eager one, same batches, same rounds
        best = max(r[0] for r in c["runs"])
        by[name].update({"compiled_tokens_per_s": round(best, 1), "compiled_first_step_s": c["first_step_s"],
                         "compiled_vs_eager": round(best / by[name]["ours_tokens_per_s"], 3)})
    main = sides[0].precision
    padded = sum(b.batch.input_ids.numel() for b in batches)
    result = {"preset": preset, "device": str(dev), "precision": main.name, "precision_why": main.why,
              "cpu_bf16": cpu_bf16_flag() if dev.type == "cpu" else None, "threads": torch.get_num_threads(),
              "allocator": allocator.name, "allocator_why": allocator.why,
              "steps": steps, "rounds": rounds, "batch_size": cfg.optim.batch_size, "seq_len": cfg.data.seq_len,
              "vocab_size": V, "parameters": count_parameters(build_model(cfg.model, V, data.sp.pad, 0)),
              "padding_fraction": round(1 - sum(b.n_tokens for b in batches) / padded, 4),
              **{k: v for k, v in by[main.name].items() if k != "why"}, "by_precision": by}
    if "bf16" in by and "fp32" in by:
        result["bf16_vs_fp32"] = round(by["bf16"]["ours_tokens_per_s"] / by["fp32"]["ours_tokens_per_s"], 3)
    if peaks:
        result["matmul_peaks"] = peaks
    if profile:
        for s in sides:
            by[s.precision.name]["profile"] = profile_step(s.ours, batches)
    loop_cfg = cfg.replace(run=dataclasses.replace(cfg.run, precision=main.name))
    result["loop_tokens_per_s"] = round(_loop_tokens_per_s(loop_cfg, steps), 1)
    result["loop_vs_step"] = round(result["loop_tokens_per_s"] / result["ours_tokens_per_s"], 3)
    return result


def _figures(cfg, batches, V: int, dev, why: str, ours_runs: list, ref_runs: list, peak_tflops: float | None,
             measured_tflops: float | None) -> dict:
    """One precision's figures from its timed rounds ((tokens/s, seconds) per round of each side): the best
    round's tokens/s, the ratio, and the MFU columns where a peak is known (CUDA, ``--peak-tflops``, a CPU's)."""
    objectives = [get_objective(n) for n in cfg.objective.active]
    ours_flops = sum(step_flops(cfg.model, objectives, cfg.objective.options, b.shape, V) for b in batches)
    ref_shape = StepShape(cfg.optim.batch_size, cfg.data.seq_len, cfg.data.seq_len)  # full-vocabulary logits
    ref_flops = len(batches) * step_flops(cfg.model, objectives, cfg.objective.options, ref_shape, V)
    ours_tps, ref_tps = max(r[0] for r in ours_runs), max(r[0] for r in ref_runs)
    out = {"why": why, "ours_tokens_per_s": round(ours_tps, 1), "reference_tokens_per_s": round(ref_tps, 1),
           "ratio": round(ours_tps / ref_tps, 3)}
    if dev.type == "cuda" or peak_tflops or measured_tflops:
        out.update(_mfu(ours_flops / min(r[1] for r in ours_runs), ref_flops / min(r[1] for r in ref_runs), dev,
                        peak_tflops, measured_tflops))
    return out


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


SQUARE = 2048  # the square matmul whose rate is a CPU's measured peak


def matmul_tflops(m: int, k: int, n: int, dtype: torch.dtype, seconds: float = 0.3, windows: int = 3) -> float:
    """This process's rate (TFLOP/s) of an (m, k) @ (k, n) matmul in ``dtype`` on the CPU, at torch's threads:
    the best of ``windows`` timed windows of at least ``seconds`` each, after a warm-up."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=g).to(dtype), torch.randn(k, n, generator=g).to(dtype)
    for _ in range(3):
        torch.mm(a, b)
    best = 0.0
    for _ in range(windows):
        t0, calls = time.perf_counter(), 0
        while (elapsed := time.perf_counter() - t0) < seconds:
            torch.mm(a, b)
            calls += 1
        best = max(best, 2.0 * m * k * n * calls / elapsed / 1e12)
    return best


def measured_peaks(cfg, batches) -> dict:
    """The CPU's dense matmul rates in fp32 and bf16, measured here: a large square matmul (the peak MFU
    divides by) and the model's FFN matmul at this batch's tokens (what small matrices leave of it)."""
    tokens = max(b.batch.input_ids.numel() for b in batches)
    H, I = cfg.model.hidden_size, cfg.model.intermediate_size
    out = {"square_matmul": f"{SQUARE}x{SQUARE}x{SQUARE}",
           "model_matmul": f"{tokens}x{H}x{I} (the FFN's first: batch x length tokens, hidden -> intermediate)"}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        out[f"{name}_tflops"] = _sig(matmul_tflops(SQUARE, SQUARE, SQUARE, dtype))
        out[f"{name}_model_matmul_tflops"] = _sig(matmul_tflops(tokens, H, I, dtype))
    return out


def _sig(x: float, digits: int = 4) -> float:
    """``x`` to significant digits, not decimals: a smoke model's MFU and emulated bf16's peak in TFLOP/s lie
    orders of magnitude below 1, where fixed decimals would lose the figure or skew ratios taken from it."""
    return float(f"{x:.{digits}g}")


def _mfu(ours_flops_per_s: float, ref_flops_per_s: float, dev: torch.device, peak_tflops: float | None = None,
         measured_tflops: float | None = None) -> dict:
    """Achieved TFLOP/s of both sides and their MFU over the device's dense peak at the step's precision:
    ``peak_tflops`` if given, else ``measured_tflops`` (a CPU's, ``measured_peaks``), else the table's bf16
    peak for this exact GPU name; unknown -> MFU null, with the note saying what to pass."""
    name = device_name(dev)
    peak = peak_tflops or measured_tflops or peak_bf16_tflops(name)
    source = "--peak-tflops" if peak_tflops else (f"measured: a {SQUARE}^3 matmul in this process" if measured_tflops
                                                  else "trainables.hardware" if peak else None)
    out = {"gpu": name, "achieved_tflops": _sig(ours_flops_per_s / 1e12),
           "reference_tflops": _sig(ref_flops_per_s / 1e12), "peak_tflops": peak and _sig(peak),
           "peak_source": source, "mfu": None, "reference_mfu": None}
    if peak:
        out.update(mfu=_sig(ours_flops_per_s / 1e12 / peak), reference_mfu=_sig(ref_flops_per_s / 1e12 / peak))
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
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds; each figure is the best round's "
                                                         "(more rounds on a busy machine)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--precision", default=None,
                   help="comma-separated precisions to bench side by side: auto (run.precision), fp32, bf16 "
                        "(default: the run's, and fp32 beside it on a CPU where the run's is bf16)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="the device's dense peak for MFU (default: on a GPU looked up by its exact name in "
                        "trainables.hardware, bf16; on a CPU measured here, at each precision)")
    p.add_argument("--profile", action="store_true", help="add where our step's time goes (torch.profiler): its top "
                                                          "ops and their groups, per precision")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.rounds < 1:
        print(f"error: --rounds={args.rounds} must be >= 1", file=sys.stderr)
        return 2
    if args.peak_tflops is not None and args.peak_tflops <= 0:
        print(f"error: --peak-tflops={args.peak_tflops} must be > 0", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = ([f"data.corpus={args.corpus}"] if args.corpus else []) + args.overrides
    try:
        result = run_bench(args.preset, overrides, args.steps, args.rounds, peak_tflops=args.peak_tflops,
                           precision=args.precision, profile=args.profile)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if result.get("mfu_note"):
        print(result["mfu_note"], file=sys.stderr)
    print(json.dumps(finite(result), allow_nan=False))  # valid JSON: a rate not measured is null, not NaN
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
