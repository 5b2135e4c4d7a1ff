"""Command line: ``python -m trainables.finetune`` (see the package docstring for examples)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import torch

from trainables.finetune.api import run_finetuning, write_tables
from trainables.task_types import TASK_TYPES
from trainables.tasks import TaskData, TaskError, load_hub_task, load_user_task, resolve_tasks, task_registry
from trainables.tasks import with_labels_from_train
from trainables.tasks.user import BAD_ROWS


def _list_tasks(as_json: bool) -> None:
    for spec in task_registry().values():
        entry = {"name": spec.name, "type": spec.type, "metric": spec.metric, "source": spec.source,
                 "metrics": list(spec.metrics), "reported_as": sorted(set(spec.reported_names().values())),
                 "description": spec.description}
        print(json.dumps(entry) if as_json else f"{spec.name:18s} {spec.type:8s} {spec.metric:15s} {spec.source}")


def _parser() -> argparse.ArgumentParser:
    from trainables import finetune

    p = argparse.ArgumentParser(prog="python -m trainables.finetune", description=finetune.__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", help="a checkpoint directory, or 'none' for the untrained baseline")
    p.add_argument("--tasks", default=None, help="offline | glue | benchmarks | all | comma-separated names "
                   "(default: cfg.finetune.tasks, or none when --task-file is given)")
    p.add_argument("--seeds", type=int, default=1, help="number of fine-tuning seeds (0..N-1)")
    p.add_argument("--preset", default="cpu-small", help="config preset whose finetune recipe is used")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted config override, e.g. finetune.epochs=3 (repeatable)")
    p.add_argument("--out", help="output directory for evals.parquet and predictions.parquet")
    p.add_argument("--probe", action="store_true", help="linear probe instead of fine-tuning")
    p.add_argument("--run-id", default="", help="run_id in the records (default: the checkpoint's name)")
    p.add_argument("--task-file", action="append", default=[], help="a user task file (CSV/JSONL/Parquet) or folder")
    p.add_argument("--task-type", action="append", default=[], help=f"{' | '.join(TASK_TYPES)}, per --task-file")
    p.add_argument("--task-name", action="append", default=[], help="name of each --task-file task (default: stem)")
    p.add_argument("--bad-rows", choices=BAD_ROWS, default="error",
                   help="a --task-file row with a missing or invalid value: error (default) or drop it and count")
    p.add_argument("--task-data", action="append", default=[], metavar="NAME=DIR",
                   help="run benchmark NAME from local files in the hub's schema (DIR holds train.*, validation.*, ...)")
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cfg.run.device)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch default)")
    p.add_argument("--list-tasks", action="store_true", help="print the task registry and exit")
    p.add_argument("--json", action="store_true", help="with --list-tasks: one JSON object per line")
    return p


def _user_tasks(args) -> list[TaskData]:
    if len(args.task_type) != len(args.task_file):
        raise TaskError(f"give one --task-type per --task-file ({len(args.task_file)} files, "
                        f"{len(args.task_type)} types)")
    names = args.task_name + [None] * (len(args.task_file) - len(args.task_name))
    loaded = [load_user_task(f, t, n, bad_rows=args.bad_rows) for f, t, n in zip(args.task_file, args.task_type, names)]
    for item in args.task_data:
        name, sep, folder = item.partition("=")
        if not sep:
            raise TaskError(f"--task-data {item!r} is not of the form NAME=DIR")
        loaded.append(load_hub_task(name.strip(), folder.strip()))
    return [with_labels_from_train(d) for d in loaded]


def _resolve_checkpoint(name: str, cfg) -> Path:
    """``none`` -> the untrained baseline of ``cfg`` (its seeded initial weights and tokenizer), built once."""
    if name != "none":
        return Path(name)
    from trainables.pretrain import none_checkpoint

    return none_checkpoint(cfg)


def main(argv: list[str] | None = None) -> int:
    from trainables.config import ConfigError
    from trainables.presets import build_config

    args = _parser().parse_args(argv)
    if args.list_tasks:
        _list_tasks(args.json)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        if not args.checkpoint or not args.out:
            raise TaskError("--checkpoint and --out are required (or use --list-tasks)")
        cfg = build_config(args.preset, overrides=args.overrides)
        spec = args.tasks if args.tasks is not None else ("" if args.task_file or args.task_data else cfg.finetune.tasks)
        user = _user_tasks(args)
        tasks = [t for t in (resolve_tasks(spec) if spec else []) if t not in {d.spec.name for d in user}]
        t0 = time.perf_counter()
        checkpoint = _resolve_checkpoint(args.checkpoint, cfg)
        result = run_finetuning(checkpoint, tasks, list(range(args.seeds)), cfg,
                                mode="probe" if args.probe else "finetune", device=args.device, datasets=user,
                                run_id=args.run_id or ("none" if args.checkpoint == "none" else ""),
                                report=lambda m: print(seed_line(m, cfg.finetune.rates), flush=True))
        evals_path, preds_path = write_tables(result, args.out)
    except (TaskError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for line in chosen_lines(evals_path):
        print(line)
    print(f"wrote {evals_path} ({len(result.evals)} rows) and {preds_path} ({len(result.predictions)} rows) "
          f"in {time.perf_counter() - t0:.1f}s")
    return 0


def seed_line(m: dict, rates: tuple[float, ...]) -> str:
    """One (task, seed) as it finished: the rate best on this seed's dev, its test and dev metrics; other
    rates' test metrics only with their rate in the name."""
    task = m["task"]
    head = f"[{m['done']}/{m['total']}] {task} seed {m['finetune_seed']}: "
    if f"lr/{task}" in m:
        head += f"lr {m[f'lr/{task}']:g}" + (f" (best on this seed's dev of {', '.join(f'{r:g}' for r in rates)})"
                                              if len(rates) > 1 else "")
        head += f", epoch {m[f'epoch/{task}']:g}, " if m.get(f"epoch/{task}") == m.get(f"epoch/{task}") else ", "
    return head + ", ".join(f"{k}={v:.4f}" for k, v in m.items()
                            if "/" in k and isinstance(v, float) and not k.startswith(("lr/", "epoch/")))


def chosen_lines(evals_path: Path) -> list[str]:
    """Per task and seed, the headline metric of the exported selected row: the rate chosen on dev (over
    the seeds), the epoch kept, test and dev, and the rates it was chosen from."""
    import pyarrow.parquet as pq

    ev = pq.read_table(evals_path).to_pandas()
    prim = ev[ev["is_primary"]]
    out = []
    for (task, mode, seed), grp in prim.groupby(["task", "mode", "finetune_seed"], sort=True):
        row = grp[grp["selected"]].iloc[0]
        rates = sorted({float(x) for x in grp["lr"] if x == x})
        where = mode if mode != "finetune" else (  # the probe's modes and the baselines have no rate
            f"chosen lr {row.lr:g}" + (f" of {', '.join(f'{r:g}' for r in rates)}" if len(rates) > 1 else "")
            + (f", epoch {row.epoch:g}" if "epoch" in row and row.epoch == row.epoch else ""))
        out.append(f"{task} seed {seed}: {where}: test {row.metric}={row.value:.4f}, dev {row.dev_value:.4f}")
    return out


if __name__ == "__main__":
    sys.exit(main())
