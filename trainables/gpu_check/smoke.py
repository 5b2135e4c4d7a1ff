"""The CUDA smoke part: the whole Ray-free core once on the GPU, at smoke size, in bf16.

Every input format and ELECTRA train 30 steps each (4 in a dry run) on the synthetic corpus; from its
second step on, every training step runs under ``torch.cuda.set_sync_debug_mode("error")``, so a step that
waits on the device (an ``.item()``, a data-dependent shape, a blocking copy) fails with the operation's
name instead of passing slowly. Then a run interrupted at its checkpoint resumes where it stopped, and its
checkpoint is probed and fine-tuned on a planted task (generated: no data to carry). Every logged loss
and every downstream score must be finite.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time

import torch

log = logging.getLogger(__name__)

# one variant per input format, and ELECTRA (its own objective and generator on single segments)
VARIANTS = {"single": "mlm_only", "nsp_pairs": "full", "sop_pairs": "mlm_sop", "full_sentences": "full_sentences",
            "sentence_pairs": "sentence_pair", "electra": "electra"}
TASK = "planted_lexical"


class _Interrupt(Exception):
    pass


def guarded_steps(device: torch.device):
    """A wrapper for ``pretrain.train_step`` that runs every step after the first (warm-up: lazy CUDA set-up)
    with torch's sync debug mode at "error"; off CUDA it only counts the steps."""
    import trainables.pretrain as pretrain

    real, calls = pretrain.train_step, [0]

    def step(*args, **kwargs):
        calls[0] += 1
        if device.type != "cuda" or calls[0] == 1:
            return real(*args, **kwargs)
        torch.cuda.set_sync_debug_mode("error")
        try:
            return real(*args, **kwargs)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return step, calls


@contextlib.contextmanager
def sync_guard(device: torch.device):
    """``pretrain.train_step`` under the guard for the duration (this process is the check's own)."""
    import trainables.pretrain as pretrain

    real = pretrain.train_step
    pretrain.train_step, calls = guarded_steps(device)
    try:
        yield calls
    finally:
        pretrain.train_step = real


def smoke_config(part, variant: str, steps: int, *extra: str):
    from trainables.presets import build_config

    small = ["finetune.max_train_examples=64", "finetune.max_eval_examples=32", "finetune.probe_max_train=64",
             "run.eval_batches=1"] if part.dry_run else []  # a dry run's CPU is slow, and often shared
    return build_config("smoke", variant, ["data.corpus=synthetic", "data.max_documents=200", "data.decontaminate=none",
                                           f"data.cache_dir={part.work / 'cache'}", "data.allow_epochs=1000",
                                           f"run.device={part.device}", "run.precision=bf16",
                                           "run.tensorboard=false", f"optim.max_steps={steps}", "run.log_every=2",
                                           "run.eval_every=0", *small, *extra])


def train_variant(part, fmt: str, variant: str, steps: int) -> dict:
    """One short run of ``variant``: its logged losses and final metrics, under the sync guard."""
    from trainables.pretrain import run_pretraining

    losses: list[float] = []

    def report(metrics, checkpoint_dir=None):
        losses.extend(v for k, v in metrics.items() if k == "loss/total")
    t0 = time.perf_counter()
    with sync_guard(torch.device(part.device)) as calls:
        result = run_pretraining(smoke_config(part, variant, steps), part.work / fmt, report, device=part.device)
    return {"variant": variant, "steps": result.steps, "guarded_steps": max(calls[0] - 1, 0), "losses": losses,
            "finite": bool(losses) and all(math.isfinite(v) for v in losses),
            "seconds": round(time.perf_counter() - t0, 1),
            "mlm_acc": result.metrics.get("mlm_acc"), "out": str(part.work / fmt)}


def resume(part, steps: int) -> dict:
    """A run stopped right after its checkpoint at half its steps continues there, not from step 0."""
    from trainables.pretrain import run_pretraining

    half = max(steps // 2, 1)
    cfg = smoke_config(part, "full", steps, f"run.checkpoint_every={half}", "run.log_every=1")
    out = part.work / "resume"

    def stop(metrics, checkpoint_dir=None):
        if checkpoint_dir:
            raise _Interrupt
    with contextlib.suppress(_Interrupt):
        run_pretraining(cfg, out, stop, device=part.device)
    seen: list[int] = []
    result = run_pretraining(cfg, out, lambda m, checkpoint_dir=None: seen.append(m["step"]), device=part.device)
    return {"checkpoint_step": half, "first_step_after_resume": min(seen) if seen else None, "steps": result.steps}


def downstream(part, checkpoint: str) -> dict:
    """The probe and one fine-tuning run of ``checkpoint`` on the planted task: every score finite."""
    from trainables.finetune.api import run_finetuning

    cfg = smoke_config(part, "full", 1)
    scores = {}
    for mode in ("probe", "finetune"):
        t0 = time.perf_counter()
        result = run_finetuning(checkpoint, [TASK], [0], cfg, mode=mode, device=part.device)
        scores[mode] = {f"{r.task}/{r.metric}": r.value for r in result.evals}
        scores[f"{mode}_seconds"] = round(time.perf_counter() - t0, 1)
    return scores


def run(part) -> None:
    steps = 4 if part.dry_run else 30
    runs = {}
    for fmt, variant in VARIANTS.items():
        try:
            runs[fmt] = train_variant(part, fmt, variant, steps)
        except Exception as e:  # a sync in the step raises here: record which format, go on with the next
            runs[fmt] = {"variant": variant, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        part.record(runs=runs)
        part.check(f"{fmt}_trains_finite", runs[fmt].get("finite", False) and runs[fmt].get("steps") == steps,
                   runs[fmt].get("error"))
    part.check("step_never_waits_on_the_device" if part.device == "cuda" else "step_guard_ran_every_step",
               all("error" not in r and r["guarded_steps"] == steps - 1 for r in runs.values()),
               {f: r.get("error") for f, r in runs.items() if "error" in r} or None)
    res = resume(part, steps)
    part.record(resume=res)
    part.check("resume_continues_after_its_checkpoint",
               res["first_step_after_resume"] == res["checkpoint_step"] + 1 and res["steps"] == steps, res)
    scores = downstream(part, runs["nsp_pairs"].get("out") or str(part.work / "nsp_pairs"))
    part.record(downstream=scores)
    values = [v for m in ("probe", "finetune") for v in scores[m].values()]
    part.check("probe_and_finetuning_score_finite", bool(values) and all(math.isfinite(v) for v in values), scores)
    part.record(summary={"formats_ok": sum(r.get("finite", False) for r in runs.values()), "formats": len(runs),
                         "sync_free": part.result["checks"].get("step_never_waits_on_the_device"),
                         "seconds_per_format": {f: r.get("seconds") for f, r in runs.items()}})
