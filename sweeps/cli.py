"""The command line every sweep script shares: options, the per-preset defaults, the validated base config,
the experiment root."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from trainables.config import ConfigError, ExperimentConfig
from trainables.presets import PRESETS, build_config

# What a sweep does by default at each preset, for every sweep script (each script's own DEFAULTS add or
# override only what is its own: the search trials, the best mix, a bigger grid's seeds). cpu-small's are
# the default main job's and must not change. The GPU presets request GPUs: one trial of gpu-quick or
# bert-mini leaves most of an H100/H200 idle (its step is bound by kernel launches, sweeps.plan.step_floor_s),
# so 4 or 2 trials share one GPU (with CUDA MPS their kernels overlap: --mps); bert-small and bert-base
# fill a GPU each. CPUs feed the preset's data.loader_workers (2 or 4) plus the training loop.
PRESET_DEFAULTS: dict[str, dict] = {
    "smoke": dict(seeds=2, finetune_seeds=1),
    # the probe beside fine-tuning where it is a small part of the job: at laptop budgets it reads an encoder before
    # fine-tuning can (on topic the probe shows MLM's effect where fine-tuning does not: docs/presets.md)
    "cpu-small": dict(seeds=3, finetune_seeds=1, modes=("finetune", "probe")),
    # six seeds of one comparison, not three of two: three leave MLM's probe effect borderline (docs/presets.md)
    "cpu-long": dict(seeds=6, finetune_seeds=1, modes=("finetune", "probe")),
    # sweeps/known_answer.py: its gate, sized for 2 cores
    "known-answer": dict(seeds=3, finetune_seeds=1, modes=("finetune", "probe")),
    # the GPU presets probe too: it reads the snapshots they keep (run.snapshots), and the end's probe closes each
    # curve; a read costs little beside a fine-tuning
    "gpu-quick": dict(seeds=5, finetune_seeds=1, gpus_per_trial=0.25, cpus_per_trial=4, modes=("finetune", "probe")),
    "bert-mini": dict(seeds=5, finetune_seeds=2, gpus_per_trial=0.5, cpus_per_trial=4, modes=("finetune", "probe")),
    "bert-small": dict(seeds=3, finetune_seeds=2, gpus_per_trial=1, cpus_per_trial=8, modes=("finetune", "probe")),
    "bert-base": dict(seeds=3, finetune_seeds=2, gpus_per_trial=1, cpus_per_trial=8, modes=("finetune", "probe")),
}


def sweep_defaults(preset: str, own: dict[str, dict] | None = None) -> dict:
    """The parser defaults of one script at ``preset``: the shared table, then the script's own entries."""
    return {**PRESET_DEFAULTS.get(preset, {}), **(own or {}).get(preset, {})}


def build_parser(prog: str, description: str, *, num_samples: int = 0, seeds: int = 3,
                 finetune_seeds: int = 2) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="cpu-small", help=f"one of: {', '.join(PRESETS)} (default: %(default)s)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="dotted config override, e.g. objective.mask_ratio=0.3 or optim.max_steps=2000 (repeatable)")
    p.add_argument("--corpus", help="pretraining corpus: builtin | PATH | hub:NAME[:CONFIG] (default: the preset's)")
    p.add_argument("--tasks", help="downstream tasks: offline | glue | benchmarks | comma-separated names "
                                   "(default: the preset's finetune.tasks)")
    p.add_argument("--num-samples", type=int, default=num_samples, help="search trials (Optuna TPE + ASHA)")
    p.add_argument("--seeds", type=int, default=seeds, help="pretraining seeds per measured variant")
    p.add_argument("--finetune-seeds", type=int, default=finetune_seeds, help="fine-tuning seeds per checkpoint")
    p.add_argument("--first-seed", type=int, default=0, help="the first pretraining seed (seeds S..S+P-1): another "
                                                             "block of seeds replicates a run on fresh draws")
    p.add_argument("--modes", default=("finetune",), type=lambda t: tuple(m for m in t.split(",") if m),
                   help="how each checkpoint is read: finetune and/or probe (a linear probe of the frozen encoder: "
                        "what pretraining put in it, read in seconds), comma-separated (default: the preset's)")
    p.add_argument("--snapshot-reads", choices=("probe", "all"), default="probe",
                   help="how the snapshots a run keeps (run.snapshots) are read: by the probe modes of --modes, or by "
                        "all of them, fine-tuning included (each snapshot then costs what a run's fine-tuning does)")
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
    p.add_argument("--rule", help="a rule file (docs/rules/NAME.toml, committed before the run): each clause judged "
                                  "from the export at the end, PASS/FAIL beside the rule's git hash, exit 1 on FAIL "
                                  "(analysis.rules). Default: the preset's own rule where the main job has one "
                                  "(cpu-small: docs/rules/cpu-small.toml; its verdict is printed, the exit status "
                                  "unchanged), unless --set changes the design; none: no rule")
    p.add_argument("--quiet", action="store_true", help="only the final table")
    p.add_argument("--verbose", action="store_true", help="every trial event and every library's log line on the terminal (all are in <run>/run.log)")
    p.add_argument("--plan", action="store_true", help="print what the sweep will cost (runs, tokens, FLOPs, wall "
                                                       "time per phase) and exit without training")
    p.add_argument("--hardware", default="this", help="for --plan and the report's plan: this (time a few steps "
                                                      "here) or h200 | h100 | a100 | l4 | a10g")
    p.add_argument("--mfu", type=float, default=0.3, help="model FLOPs utilisation the plan assumes on an accelerator")
    p.add_argument("--calibration", help="for --plan: the GPU check's JSON (python -m trainables.gpu_check): its "
                                         "measured step floor, overlap, load time, start-up and MFU replace the "
                                         "plan's assumed ones")
    p.add_argument("--mps", action="store_true", help="with fractional --gpus-per-trial: start the CUDA MPS control "
                                                      "daemon on this node, so the trials sharing a GPU overlap")
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
    if args.first_seed < 0:
        raise ConfigError(f"--first-seed {args.first_seed} must be >= 0")
    bad = [m for m in args.modes if m not in ("finetune", "probe")]
    if bad or not args.modes:
        raise ConfigError(f"--modes {','.join(args.modes)!r}: unknown {bad or 'empty list'}; allowed: finetune, probe")
    if args.cpus_per_trial < 1 or args.workers_per_trial < 1 or args.gpus_per_trial < 0:
        raise ConfigError("--cpus-per-trial and --workers-per-trial must be >= 1 and --gpus-per-trial >= 0")
    check_gpus_per_worker(args.gpus_per_trial, args.workers_per_trial)
    if not 0 < args.mfu <= 1:
        raise ConfigError(f"--mfu={args.mfu} must be in (0, 1]")
    return cfg


def check_gpus_per_worker(gpus: float, workers: int) -> None:
    """A DDP trial's workers need whole GPUs each: two NCCL ranks on one GPU fail ("Duplicate GPU"), so with
    several workers --gpus-per-trial is 0 or a positive multiple of them. One worker may take a fraction."""
    if workers <= 1 or not gpus:
        return
    per = gpus / workers
    if per < 1 or per != int(per):
        raise ConfigError(f"--gpus-per-trial={gpus:g} over --workers-per-trial={workers} is {per:g} GPU per worker; "
                          f"DDP workers need whole GPUs: --gpus-per-trial must be 0 or a multiple of {workers} "
                          f"({workers}, {2 * workers}, ...)")


def experiment_root(args: argparse.Namespace, script: str) -> str:
    storage = args.storage if "://" in args.storage else str(Path(args.storage).expanduser().resolve())
    if not args.name:
        if args.resume:
            raise ConfigError("--resume needs --name (the experiment to continue)")
        args.name = f"{script}-{args.preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    return f"{storage.rstrip('/')}/{args.name}"
