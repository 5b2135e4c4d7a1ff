"""Two DDP ranks of ``run_pretraining`` in gloo processes: the harness of the GPU check's DDP part and of
tests/trainables/test_ddp.py (the CPU, the same code).

So that a box with one GPU can check it, both ranks share ``cuda:0`` with gloo carrying CUDA tensors (NCCL
refuses two ranks on one device): not NCCL's speed, but the same collectives at the same points of the loop,
so what would hang or diverge on a multi-GPU run shows here:

* under gradient accumulation only the last micro-batch all-reduces the gradients (``no_sync``): the
  buckets all-reduced per step are the same at ``optim.grad_accum`` 1 and 2;
* a NaN first seen on one rank at a log step stops both ranks there (the logged losses are all-reduced);
* at a token budget both ranks count the global batch, so they stop at the same step, with the
  one-worker run's steps and tokens.
"""

from __future__ import annotations

import contextlib
import datetime
import json
from pathlib import Path

import torch

TIMEOUT_S = 60  # a rank waiting on a collective the other never joins fails instead of hanging


@contextlib.contextmanager
def _instrumented(pretrain, mode: str, rank: int, record: dict):
    """This rank's instruments for one job (the rank's own process): a NaN injected, bucket all-reduces
    counted, the dropout generator read; the module's own functions are back when the job ends, for the next."""
    hooks = [0]
    real = {name: getattr(pretrain, name) for name in ("total_loss", "_training_module", "train_step")}
    if mode == "nan" and rank == 1:
        calls = [0]

        def nan_at_second_step(out_, mb, *args):  # log_every=2: the second step is a log step
            loss, parts = real["total_loss"](out_, mb, *args)
            calls[0] += 1
            return (loss * float("nan"), parts) if calls[0] == 2 else (loss, parts)
        pretrain.total_loss = nan_at_second_step
    if mode == "no_sync":
        def counted(model, cfg_, world_):
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            module = real["_training_module"](model, cfg_, world_)

            def hook(state, bucket):
                hooks[0] += 1
                return default_hooks.allreduce_hook(None, bucket)
            module.register_comm_hook(None, hook)
            return module
        pretrain._training_module = counted
    if mode in ("no_sync", "dropout"):
        def step(*args):
            if mode == "dropout" and not record["dropout"]:
                record["dropout"] = torch.rand(16).tolist()  # torch's generator as the first step finds it
            before = hooks[0]
            real["train_step"](*args)
            if mode == "no_sync":
                record["allreduce_per_step"].append(hooks[0] - before)
        pretrain.train_step = step
    try:
        yield
    finally:
        for name, fn in real.items():
            setattr(pretrain, name, fn)


def worker(rank: int, world: int, init: str, jobs_json: str, device: str) -> None:
    """One rank: each job's ``run_pretraining`` on ``device`` under one gloo group, in turn; a job's record goes
    to ``<its out>/rank{rank}.json``. The ranks start once for all the jobs: a rank process spends seconds
    importing torch and transformers (on a GPU, starting CUDA too), more than a job here trains."""
    import torch.distributed as dist

    import trainables.pretrain as pretrain
    from trainables.config import from_dict

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    torch.set_num_threads(1)
    for job in json.loads(jobs_json):
        out, record = job["out"], {"allreduce_per_step": [], "dropout": [], "device": device, "out": job["out"]}
        with _instrumented(pretrain, job["mode"], rank, record):
            try:
                result = pretrain.run_pretraining(from_dict(json.loads(job["cfg"])), f"{out}/rank{rank}",
                                                  device=device)
                record.update(steps=result.steps, tokens=result.tokens_seen, flops=result.train_flops)
            except pretrain.NonFiniteLossError as e:  # every rank stops at the same log step, so the next
                record["nan"] = str(e)                  # job starts on every rank
        Path(out, f"rank{rank}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


def run_jobs(jobs: list[tuple], device: str = "cpu") -> list[list[dict]]:
    """Both ranks' records of each ``(cfg, out, mode)`` job (``mode``: "", nan, no_sync or dropout), the two
    rank processes started once for all of them; each job's corpus is prepared here first."""
    from trainables.pretrain import build_pretraining_data

    for cfg, out, _ in jobs:
        build_pretraining_data(cfg)
        Path(out).mkdir(parents=True, exist_ok=True)
    spec = json.dumps([{"cfg": cfg.to_json(), "out": str(out), "mode": mode} for cfg, out, mode in jobs])
    init = f"file://{Path(jobs[0][1]).resolve()}/rendezvous"
    torch.multiprocessing.spawn(worker, args=(2, init, spec, device), nprocs=2, join=True)
    return [[json.loads((Path(out) / f"rank{r}.json").read_text()) for r in (0, 1)] for _, out, _ in jobs]


# batch 32 at max_steps 77: the two ranks' halves differ in tokens, so ranks that counted only their own rows
# would stop at different steps (docs/gpu.md, DDP)
TOKEN_BUDGET = ("optim.budget=tokens", "optim.batch_size=32", "optim.max_steps=77", "run.log_every=20")


def ddp_config(cache: Path, *extra: str, variant: str = "full"):
    """The smoke model on a small synthetic corpus cached in ``cache``: every DDP job here and in the tests."""
    from trainables.presets import build_config

    return build_config("smoke", variant, ["data.corpus=synthetic", "data.max_documents=80", "data.allow_epochs=100",
                                          "data.decontaminate=none", f"data.cache_dir={cache}", "run.tensorboard=false",
                                          *extra])


def run(part) -> None:
    from trainables.pretrain import run_pretraining

    dev, cache, work = ("cuda:0" if part.device == "cuda" else "cpu"), part.work / "cache", part.work
    sync1, sync2, (r0, r1), (b0, b1) = run_jobs(
        [*[(ddp_config(cache, "optim.max_steps=3", "optim.batch_size=8", f"optim.grad_accum={accum}"),
            work / f"no_sync{accum}", "no_sync") for accum in (1, 2)],
         (ddp_config(cache, "optim.max_steps=8", "run.log_every=2"), work / "nan", "nan"),
         (ddp_config(cache, *TOKEN_BUDGET), work / "budget", "")], dev)
    per_step = {1: sync1[0]["allreduce_per_step"], 2: sync2[0]["allreduce_per_step"]}
    part.record(allreduce_per_step=per_step)
    part.check("no_sync_all_reduces_once_per_step", len(per_step[1]) == 3 and per_step[1][0] > 0 and
               per_step[2] == per_step[1], per_step)
    part.record(nan=[r0.get("nan"), r1.get("nan")])
    part.check("a_nan_on_one_rank_stops_both", all("by step 2" in (r.get("nan") or "") for r in (r0, r1)))
    one = run_pretraining(ddp_config(cache, *TOKEN_BUDGET[:3]), work / "one", device=dev)
    part.record(token_budget={"rank0": [b0["steps"], b0["tokens"]], "rank1": [b1["steps"], b1["tokens"]],
                              "one_worker": [one.steps, one.tokens_seen]})
    part.check("a_token_budget_stops_both_at_one_step", (b0["steps"], b0["tokens"]) == (b1["steps"], b1["tokens"]) ==
               (one.steps, one.tokens_seen))
    part.record(summary={"passed": all(part.result["checks"].values()), "device": dev, "backend": "gloo"})
