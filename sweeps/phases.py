"""The measurement grid and its fine-tuning as Tune phases, shared by every sweep script.

``measure``: named variants x pretraining seeds at full budget; ``finetune``: each completed
measurement run x fine-tuning seeds on the task suite. Every variant of one pretraining seed has the
same initial weights and data; only the loss differs.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from ray import tune

from sweeps.export import run_row
from sweeps.plan import mode_tasks
from sweeps.runner import Phase, run_phase
from trainables.config import ConfigError, ExperimentConfig, objective_for_variant
from trainables.objectives import VARIANTS

log = logging.getLogger("sweeps")

MEASURE_VARIANTS = ("full", "mlm_only", "mlm_pairs", "nsp_only", "none")  # the main job's grid
# The pretraining seed of every search trial (plus the base config's run.seed): one the measurement never uses.
# A searched mix measured at the search's own seed would count the very run chosen for its dev probe score among
# its measurements (a winner's curse on best_mix - full); measurement seeds are 0..P-1 for every variant.
SEARCH_SEED = 10_000


def parse_variants(text: str) -> list[str]:
    """``--variants``: named variants, comma-separated; one line naming the bad names and the allowed ones."""
    names = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in names if v not in VARIANTS]
    if bad or not names:
        raise ConfigError(f"--variants {text!r}: unknown {bad or 'empty list'}; allowed: {', '.join(VARIANTS)}")
    return names


def measurement_seeds(seeds: int, first: int = 0) -> range:
    """The pretraining seeds of the measurement grid, first .. first + seeds - 1, the same for every variant
    (contrasts pair on them)."""
    if first + seeds > SEARCH_SEED:
        raise ValueError(f"--seeds {seeds} from {first}: seeds from {SEARCH_SEED} on are the search's "
                         "(sweeps.phases.SEARCH_SEED)")
    return range(first, first + seeds)


def search_seed(cfg: ExperimentConfig) -> int:
    """The pretraining seed of the search trials: reserved, so no measurement run is a search trial again."""
    return SEARCH_SEED + cfg.run.seed


def measurement_specs(variants: list[tuple[str, ExperimentConfig]], seeds: int, first: int = 0) -> list[dict]:
    """One spec per (variant, pretraining seed): same data order (data_seed) and initial weights (seed)."""
    specs = []
    for name, vcfg in variants:
        for seed in measurement_seeds(seeds, first):
            run = vcfg.replace(run=dataclasses.replace(vcfg.run, seed=seed, checkpoint_every=vcfg.run.eval_every))
            specs.append({"run_id": f"{name}-s{seed}", "variant": name, "pretrain_seed": seed, "phase": "measure",
                          "cfg": run.to_dict()})
    return specs


def variant_config(cfg: ExperimentConfig, name: str, **objective_changes) -> ExperimentConfig:
    """``cfg`` with variant ``name``'s weights and input format; every other objective setting (mask ratio,
    masking strategy, 80/10/10 fractions, static masking, mask stream, objective options) is kept."""
    kept = {f.name: getattr(cfg.objective, f.name) for f in dataclasses.fields(cfg.objective)
            if f.name not in ("variant", "weights", "input_format")}
    return cfg.replace(objective=objective_for_variant(name, **{**kept, **objective_changes}))


def pretrain_resources(args) -> dict[str, float]:
    """A multi-worker trial only drives a TorchTrainer, which requests its own workers; a one-worker trial
    runs the core in its own process, with a fraction of a GPU when the model is small (several trials
    then share one GPU, so it stays busy)."""
    if args.workers_per_trial > 1:
        return {"CPU": 0, "memory": 2**28}
    return {"CPU": args.cpus_per_trial, **({"GPU": args.gpus_per_trial} if args.gpus_per_trial else {})}


def finetune_resources(args) -> dict[str, float]:
    """A fine-tuning trial is one process on one device: the CPUs of a one-worker trial and at most one GPU (a
    fraction where trials share one). A DDP pretraining trial's --gpus-per-trial (8 over 8 workers) held for
    one fine-tuning process left 7 of them idle and ran one fine-tuning trial per 8-GPU node."""
    gpus = min(args.gpus_per_trial, 1.0)
    return {"CPU": args.cpus_per_trial, **({"GPU": gpus} if gpus else {})}


def common_trial_config(args, root: str, probe_tasks: list[str]) -> dict[str, Any]:
    return {"cpus_per_trial": args.cpus_per_trial, "gpus_per_trial": args.gpus_per_trial,
            "workers": args.workers_per_trial, "probe_tasks": probe_tasks, "storage_path": root}


def measure_phase(specs: list[dict], args, root: str, probe_tasks: list[str]) -> Phase:

    from trainables.tune_adapters import pretrain_trainable

    return Phase("measure", flatten(pretrain_trainable),
                 {"spec": tune.grid_search(specs), **common_trial_config(args, root, probe_tasks)},
                 pretrain_resources(args), max_concurrent=args.max_concurrent)


def finetune_phase(measured: list[dict], tasks: list[str], args, root: str = "",
                   snapshots: list[dict] = ()) -> Phase:
    """Each completed measurement run x fine-tuning seed, as Ray trials (they spread over a cluster); each of
    their ``snapshots`` (run.snapshots) read by the probe modes only: seconds per read, where fine-tuning
    every snapshot would cost as much as the runs' own fine-tuning again."""

    from trainables.tune_adapters import finetune_trainable

    of_mode = mode_tasks(args, tasks)  # finetune | probe (a frozen encoder's linear probe) -> the tasks it runs on
    probed = {mode: ts for mode, ts in of_mode.items() if mode.startswith("probe")}
    if snapshots and not probed:
        log.warning("%d snapshots kept but not read: the probe reads them (--modes finetune,probe)", len(snapshots))
    specs = [{"run_id": m["run_id"], "cfg": m["cfg"], "checkpoint": m["checkpoint"], "finetune_seed": s,
              "tasks": ts, "mode": mode} for m in measured for s in range(args.finetune_seeds)
             for mode, ts in of_mode.items()]
    specs += [{"run_id": m["run_id"], "cfg": m["cfg"], "checkpoint": m["checkpoint"], "finetune_seed": s,
               "tasks": ts, "mode": mode} for m in snapshots for s in range(args.finetune_seeds)
              for mode, ts in probed.items()]
    for spec in specs:
        spec["run_id_ft"] = f"{spec['run_id']}-ft{spec['finetune_seed']}" + ("-probe" if spec["mode"] == "probe" else "")
    return Phase("finetune", flatten(finetune_trainable),
                 {"spec": tune.grid_search(specs), "cpus_per_trial": args.cpus_per_trial, "phase": "finetune",
                  "storage_path": root},
                 finetune_resources(args), max_concurrent=args.max_concurrent)

def flatten(trainable):
    """Trials get ``{"spec": {...}, common...}``; the trainables read one flat dict."""

    def run(config):
        return trainable({**{k: v for k, v in config.items() if k != "spec"}, **config.get("spec", {})})

    run.__name__ = trainable.__name__
    return run


def measure_and_finetune(variants: list[tuple[str, ExperimentConfig]], tasks: list[str], args, root: str,
                         progress, probe_tasks: list[str] = ()):
    """The measurement grid (variants x pretraining seeds) and its fine-tuning (x fine-tuning seeds)."""
    specs = measurement_specs(variants, args.seeds, getattr(args, "first_seed", 0))
    measure = run_phase(measure_phase(specs, args, root, list(probe_tasks)), root, args, progress)
    measured = completed_measurements(measure)
    if not measured or not args.finetune_seeds:
        print("no completed measurement run to fine-tune" if not measured else "--finetune-seeds 0: no fine-tuning",
              flush=True)
        return measure, None
    snapshots = [k for m in measured for k in m["snapshots"]]
    finetune = run_phase(finetune_phase(measured, tasks, args, root, snapshots), root, args, progress)
    return measure, finetune


def completed_measurements(measure_grid) -> list[dict]:
    """The completed measurement runs as fine-tuning inputs (run_id, config, checkpoint), each with the snapshots
    it kept (run.snapshots) as inputs of their own, ``<run>@<step>`` with the snapshot's checkpoint."""
    from sweeps.export import snapshot_rows

    out = []
    for r in measure_grid:
        row = run_row(r, "measure")
        if row["status"] == "completed":
            spec = r.config["spec"]
            out.append({"run_id": spec["run_id"], "cfg": spec["cfg"], "checkpoint": row["checkpoint"],
                        "snapshots": [{"run_id": k["run_id"], "cfg": spec["cfg"], "checkpoint": k["checkpoint"]}
                                      for k in snapshot_rows(row)]})
        else:
            log.warning("measurement run %s is %s (%s): it gets no fine-tuning", row["run_id"], row["status"],
                        row["stop_reason"])
    return out
