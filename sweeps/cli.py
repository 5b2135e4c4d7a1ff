"""The command line every sweep script shares: options, the validated base config, the experiment root."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from trainables.config import ConfigError, ExperimentConfig
from trainables.presets import PRESETS, build_config


def build_parser(prog: str, description: str, *, num_samples: int = 0, seeds: int = 3,
                 finetune_seeds: int = 2) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="cpu-small", help=f"one of: {', '.join(PRESETS)} (default: cpu-small)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted config override, e.g. objective.mask_ratio=0.3 or optim.max_steps=2000 (repeatable)")
    p.add_argument("--corpus", help="pretraining corpus: builtin | PATH | hub:NAME[:CONFIG] (default: the preset's)")
    p.add_argument("--tasks", help="downstream tasks: offline | glue | benchmarks | comma-separated names "
                                   "(default: the preset's finetune.tasks)")
    p.add_argument("--num-samples", type=int, default=num_samples, help="search trials (Optuna TPE + ASHA)")
    p.add_argument("--seeds", type=int, default=seeds, help="pretraining seeds per measured variant")
    p.add_argument("--finetune-seeds", type=int, default=finetune_seeds, help="fine-tuning seeds per checkpoint")
    p.add_argument("--cpus-per-trial", type=int, default=1, help="CPUs (torch threads) per trial or per worker")
    p.add_argument("--gpus-per-trial", type=float, default=0,
                   help="GPUs per trial; a fraction (e.g. 0.25) lets several small trials share one GPU")
    p.add_argument("--workers-per-trial", type=int, default=1,
                   help="Ray Train (DDP) workers per pretraining trial; 1 runs the core in the trial's process")
    p.add_argument("--max-concurrent", type=int, default=0, help="trials at once (0: as many as resources allow)")
    p.add_argument("--address", help="join a running Ray cluster (e.g. auto); default: start a local Ray instance")
    p.add_argument("--storage", default="runs", help="results root: a directory, s3://BUCKET/PATH or gs://BUCKET/PATH")
    p.add_argument("--name", help="experiment name (default: SCRIPT-PRESET-TIMESTAMP)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted sweep of the same --name")
    p.add_argument("--quiet", action="store_true", help="only the final table")
    p.add_argument("--verbose", action="store_true", help="one line per trial event instead of the live status")
    p.add_argument("--plan", action="store_true", help="print what the sweep will cost (runs, tokens, FLOPs, wall "
                                                       "time per phase) and exit without training")
    p.add_argument("--hardware", default="this", help="for --plan and the report's plan: this (time a few steps "
                                                      "here) or h200 | h100 | a100 | l4 | a10g")
    p.add_argument("--mfu", type=float, default=0.3, help="model FLOPs utilisation the plan assumes on an accelerator")
    return p


def base_config(args: argparse.Namespace, variant: str = "full") -> ExperimentConfig:
    """Preset + --corpus + --tasks + --set, validated now (not hours later inside a trial)."""
    overrides = list(args.overrides)
    if args.corpus:
        # Trials run in their own directories: an existing relative path must be made absolute here.
        corpus = str(Path(args.corpus).resolve()) if Path(args.corpus).exists() else args.corpus
        overrides.insert(0, f"data.corpus={corpus}")
    if args.tasks:
        overrides.insert(0, f"finetune.tasks={args.tasks}")
    cfg = build_config(args.preset, variant, overrides)
    for name in ("num_samples", "finetune_seeds", "max_concurrent"):
        if getattr(args, name) < 0:
            raise ConfigError(f"--{name.replace('_', '-')}={getattr(args, name)} must be >= 0")
    if args.seeds < 1:
        raise ConfigError(f"--seeds={args.seeds} must be >= 1")
    if args.cpus_per_trial < 1 or args.workers_per_trial < 1 or args.gpus_per_trial < 0:
        raise ConfigError("--cpus-per-trial and --workers-per-trial must be >= 1 and --gpus-per-trial >= 0")
    if args.workers_per_trial > 1 and 0 < args.gpus_per_trial < 1:
        raise ConfigError(f"--gpus-per-trial={args.gpus_per_trial} with --workers-per-trial={args.workers_per_trial}: "
                          "a fraction of a GPU is for one-worker trials; give each worker a whole GPU")
    if not 0 < args.mfu <= 1:
        raise ConfigError(f"--mfu={args.mfu} must be in (0, 1]")
    return cfg


def experiment_root(args: argparse.Namespace, script: str) -> str:
    storage = args.storage if "://" in args.storage else str(Path(args.storage).expanduser().resolve())
    if not args.name:
        if args.resume:
            raise ConfigError("--resume needs --name (the experiment to continue)")
        args.name = f"{script}-{args.preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    return f"{storage.rstrip('/')}/{args.name}"
