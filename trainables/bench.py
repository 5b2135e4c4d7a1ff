"""Throughput benchmark: our pretraining step against what a first implementation would do.

    python -m trainables.bench --preset cpu-small [--corpus builtin] [--steps 20] [--threads 2]

Both sides train the same ``BertForPreTraining`` size on the same examples with the same batch size
and threads, in this process. Ours: dynamic padding over length-bucketed batches, MLM logits only at
masked positions, loss outside the model. Reference: stock ``BertForPreTraining(labels=...,
next_sentence_label=...)`` with full-vocabulary logits on batches padded to the maximum length.
Prints one JSON line: both real-tokens/s figures and ``ratio`` (ours / reference); on CUDA also the
model FLOPs utilisation of our step (6 x parameters x tokens, plus attention, over the peak bf16 rate).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

import torch

from trainables.config import ConfigError
from trainables.presets import build_config
from trainables.data.batches import Position, positions_from
from trainables.data.samples import IGNORE
from trainables.model import PretrainModel, build_model, count_parameters
from trainables.objectives import get_objective
from trainables.objectives import total_loss
from trainables.pretrain import build_optimizer, build_pretraining_data, resolve_device

PEAK_BF16_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L4": 121.0, "A10G": 125.0, "A10": 125.0}



def _time(fn, batches, device) -> float:
    """Real tokens per second of ``fn`` over ``batches`` (after one warm-up call)."""
    fn(batches[0], 0)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0, tokens = time.perf_counter(), 0
    for i, b in enumerate(batches):
        fn(b, i)
        tokens += int(b.attention_mask.sum())
    if device.type == "cuda":
        torch.cuda.synchronize()
    return tokens / (time.perf_counter() - t0)


def run_bench(preset: str, overrides: list[str], steps: int, rounds: int = 2) -> dict:
    cfg = build_config(preset, "full", overrides)
    dev = resolve_device(cfg.run.device)
    data = build_pretraining_data(cfg)
    sp, o = data.sp, cfg.objective
    masked = [data.steps.batch(p) for p in positions_from(data.steps, Position(0, 0, 0, 0), steps)]
    raw = masked
    bf16 = dev.type == "cuda" and cfg.run.precision != "fp32"
    ctx = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if bf16 else (lambda: torch.autocast("cpu", enabled=False))

    ours_model = build_model(cfg.model, sp.vocab_size, sp.pad, 0).to(dev)
    ours = PretrainModel(ours_model, [get_objective("mlm"), get_objective("nsp")])
    ours_opt, _ = build_optimizer(ours_model, cfg)

    def ours_step(b, i):
        b = masked[i].to(dev)
        with ctx():
            loss, _ = total_loss(ours(b), b, o.weights, o.options)
        loss.backward()
        ours_opt.step()
        ours_opt.zero_grad(set_to_none=True)

    ref_model = build_model(cfg.model, sp.vocab_size, sp.pad, 0).to(dev)
    ref_opt = torch.optim.AdamW(ref_model.parameters(), lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    padded = []
    for m in masked:  # same masked inputs, padded to the full length, labels over the whole vocabulary
        labels = torch.full_like(m.input_ids, IGNORE)
        keep = m.mlm_labels != IGNORE
        rows = torch.arange(len(labels))[:, None].expand_as(m.mlm_positions)
        labels[rows[keep], m.mlm_positions[keep]] = m.mlm_labels[keep]
        T = cfg.data.seq_len - m.input_ids.shape[1]
        pad = lambda t, v: torch.nn.functional.pad(t, (0, T), value=v)  # noqa: E731
        padded.append((pad(m.input_ids, sp.pad), pad(m.token_type_ids, 0), pad(m.attention_mask, 0),
                       pad(labels, IGNORE), m.pair_labels))

    def ref_step(b, i):
        ids, types, att, labels, pair = (t.to(dev) for t in padded[i])
        with ctx():
            loss = ref_model(input_ids=ids, token_type_ids=types, attention_mask=att, labels=labels,
                             next_sentence_label=pair).loss
        loss.backward()
        ref_opt.step()
        ref_opt.zero_grad(set_to_none=True)

    ours_tps, ref_tps = [], []
    for _ in range(rounds):  # alternate so that machine noise hits both sides alike
        ours_tps.append(_time(ours_step, raw, dev))
        ref_tps.append(_time(ref_step, raw, dev))
    result = {"preset": preset, "device": str(dev), "threads": torch.get_num_threads(), "steps": steps,
              "batch_size": cfg.optim.batch_size, "seq_len": cfg.data.seq_len, "vocab_size": sp.vocab_size,
              "parameters": count_parameters(ours_model),
              "ours_tokens_per_s": round(max(ours_tps), 1), "reference_tokens_per_s": round(max(ref_tps), 1),
              "ratio": round(max(ours_tps) / max(ref_tps), 3)}
    if dev.type == "cuda":
        result.update(_mfu(cfg, ours_model, max(ours_tps)))
    return result


def _mfu(cfg, model, tokens_per_s: float) -> dict:
    name = torch.cuda.get_device_name()
    peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if k in name), None)
    L, H, T = cfg.model.num_layers, cfg.model.hidden_size, cfg.data.seq_len
    flops_per_token = 6 * count_parameters(model) + 12 * L * H * T  # weights fwd+bwd, attention scores
    achieved = flops_per_token * tokens_per_s / 1e12
    return {"gpu": name, "achieved_tflops": round(achieved, 1),
            "mfu": round(achieved / peak, 3) if peak else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainables.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="cpu-small")
    p.add_argument("--corpus", help="sets data.corpus (default: the preset's)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per side and round")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = ([f"data.corpus={args.corpus}"] if args.corpus else []) + args.overrides
    try:
        print(json.dumps(run_bench(args.preset, overrides, args.steps)))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
