"""One calibration trial, a plain process as a Ray trial would be (``calibrate.py`` starts 1 or 4 at once):
``python -m trainables.gpu_check.trial --cfg CFG.json --out DIR --result FILE --task TASK --started EPOCH``.

It pretrains ``CFG`` with every step timed twice, on the host (how long the step's Python took to queue its
kernels) and on the device (CUDA events around the step, read once at the end), then loads the checkpoint
into a fine-tuning head model (the model-load time) and fine-tunes it briefly (fine-tuning steps/s).
``--started`` is when the parent launched it, so the start-up (interpreter, imports, data, model) is
counted as a Ray trial's would be.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from trainables.gpu_check.record import write_json

STEADY_FROM = 5  # steps before this one warm up (allocator, autotuning): not timed


class StepTimer:
    """Wraps ``pretrain.train_step``: host and device time per step, the steady-state wall clock."""

    def __init__(self, real, device: torch.device, last_step: int, cost):
        self.real, self.device, self.last, self.cost = real, device, last_step, cost
        self.host, self.events, self.flops, self.first_at, self.t_from, self.t_end = [], [], 0.0, None, None, None

    def __call__(self, module, opt, sched, cfg, batch, *rest):
        n = len(self.host) + 1
        self.first_at = self.first_at or time.time()
        if n == STEADY_FROM:
            self._sync()
            self.t_from = time.perf_counter()
        cuda = self.device.type == "cuda"
        start = torch.cuda.Event(enable_timing=True) if cuda else None
        if cuda:
            start.record()
        t0 = time.perf_counter()
        self.real(module, opt, sched, cfg, batch, *rest)
        self.host.append(time.perf_counter() - t0)
        if cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.events.append((start, end))
        if n >= STEADY_FROM:
            self.flops += self.cost(batch.shape)
        if n == self.last:
            self._sync()
            self.t_end = time.perf_counter()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def figures(self) -> dict:
        steady = len(self.host) - STEADY_FROM + 1
        wall = (self.t_end - self.t_from) if self.t_from and self.t_end else float("nan")
        device_ms = [s.elapsed_time(e) for s, e in self.events[STEADY_FROM - 1:]]  # (read after the last sync)
        return {"steps": len(self.host), "steps_per_s": steady / wall if steady > 0 else float("nan"),
                "wall_ms_per_step": 1e3 * wall / steady if steady > 0 else float("nan"),
                "host_ms_per_step": 1e3 * sum(self.host[STEADY_FROM - 1:]) / max(steady, 1),
                "device_ms_per_step": sum(device_ms) / len(device_ms) if device_ms else None,
                "flops_per_s": self.flops / wall if steady > 0 else float("nan")}


def pretrain_timed(cfg, out: Path, device: torch.device) -> tuple[dict, float]:
    """(step figures, when the first step started) of ``run_pretraining(cfg)`` with the timer in place."""
    import trainables.pretrain as pretrain
    from trainables.flops import step_flops
    from trainables.objectives import get_objective

    active = [get_objective(n) for n in cfg.objective.active]
    cost = lambda shape: step_flops(cfg.model, active, cfg.objective.options, shape, cfg.model.vocab_size)  # noqa: E731
    timer = StepTimer(pretrain.train_step, device, cfg.optim.max_steps, cost)
    pretrain.train_step = timer  # this process is the check's own trial
    pretrain.run_pretraining(cfg, out, device=device)
    return timer.figures(), timer.first_at


def finetune_timed(cfg, checkpoint: Path, task: str, device: torch.device) -> dict:
    """Model-load time (checkpoint -> head model on the device) and fine-tuning steps/s on ``task``."""
    import numpy as np

    from trainables.finetune.heads import Checkpoint, build_head_model
    from trainables.finetune.inputs import encode_split
    from trainables.finetune.loop import train_model
    from trainables.tasks import load_task, subsample, with_labels_from_train

    ft, sync = cfg.finetune, (lambda: torch.cuda.synchronize(device) if device.type == "cuda" else None)
    data = with_labels_from_train(load_task(task, cfg.data.cache_dir or None))
    t0 = time.perf_counter()
    ck = Checkpoint.load(checkpoint)
    model = build_head_model(ck.path, data.spec, 0, ft.dropout, ft.head, ft.init).to(device)
    sync()
    load_s = time.perf_counter() - t0
    rows = subsample(data["train"], min(ft.max_train_examples or 10**9, 20 * ft.batch_size), np.random.default_rng(0))
    enc = encode_split(data, rows, ck.tokenizer, ft, ck.max_position, True)
    t1 = time.perf_counter()
    steps = train_model(model, enc, replace(ft, epochs=1.0), np.random.default_rng(0), device,
                        ck.tokenizer.pad_token_id, cfg.run.precision)
    sync()
    return {"model_load_s": load_s, "finetune_steps": steps, "finetune_steps_per_s": steps / (time.perf_counter() - t1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainables.gpu_check.trial")
    for flag in ("--cfg", "--out", "--result", "--task"):
        p.add_argument(flag, required=True)
    p.add_argument("--started", type=float, required=True)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    from trainables.config import from_dict

    cfg = from_dict(json.loads(Path(args.cfg).read_text()))
    device = torch.device(cfg.run.device)
    steps, first_at = pretrain_timed(cfg, Path(args.out), device)
    result = {"startup_s": first_at - args.started, **steps}
    write_json(Path(args.result), result)
    result.update(finetune_timed(cfg, Path(args.out), args.task, device))
    write_json(Path(args.result), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
