"""The measurement grid and its reads as Tune phases, shared by every sweep script (the phases themselves are
described once: ``sweeps.phase_kinds.PHASES``).

``measure``: named variants x pretraining seeds at full budget; ``finetune``: each completed measurement run x
fine-tuning seeds x modes on the task suite; ``snapshots``: each snapshot a run kept (run.snapshots) x
fine-tuning seeds, read by the probe modes (or all). Every variant of one pretraining seed has the same initial weights
and data; only the loss differs. The run (``measure_and_read``), the plan (``sweeps.plan.plan_sweep``), the
progress lines and the export (``sweeps.export.export``) all name and order the phases by ``PHASES``, and build a
phase's trials with the same function (``read_specs``): a new phase is an entry there, not edits in each.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from ray import tune

from sweeps.export import run_row
from sweeps.phase_kinds import PHASES, mode_tasks, read_specs, snapshot_modes  # noqa: F401 (PHASES: re-exported)
from sweeps.runner import Phase, run_phase
from trainables.config import ConfigError, ExperimentConfig, switch_variant
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
    return cfg.replace(objective=switch_variant(cfg.objective, name, **objective_changes))


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
    one fine-tuning process would leave 7 of them idle and run one fine-tuning trial per 8-GPU node."""
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


def read_phase(name: str, inputs: list[dict], of_mode: dict[str, list[str]], args, root: str = "") -> Phase:
    """A read phase (``PHASES[name].trainable == "finetune"``) over ``inputs``, as Ray trials (they spread over a
    cluster)."""
    from trainables.tune_adapters import finetune_trainable

    specs = read_specs(inputs, of_mode, args.finetune_seeds)
    for spec in specs:
        spec["run_id_ft"] = f"{spec['run_id']}-ft{spec['finetune_seed']}" + ("-probe" if spec["mode"] == "probe" else "")
    return Phase(name, flatten(finetune_trainable),
                 {"spec": tune.grid_search(specs), "cpus_per_trial": args.cpus_per_trial, "phase": name,
                  "storage_path": root},
                 finetune_resources(args), max_concurrent=args.max_concurrent)


def finetune_phase(measured: list[dict], tasks: list[str], args, root: str = "") -> Phase:
    """Each completed measurement run x fine-tuning seed x mode (``--modes``: finetune | probe, a frozen encoder's
    linear probe) on its tasks."""
    return read_phase("finetune", [_input(m) for m in measured], mode_tasks(args, tasks), args, root)


def snapshot_phase(snapshots: list[dict], tasks: list[str], args, root: str = "") -> Phase | None:
    """Each snapshot the runs kept x fine-tuning seed, read by the probe modes (``--snapshot-reads all``: by every
    mode); None when there is nothing to run."""
    modes = snapshot_modes(mode_tasks(args, tasks), getattr(args, "snapshot_reads", "probe"))
    if snapshots and not modes:
        log.warning("%d snapshots kept but not read: the probe reads them (--modes finetune,probe)", len(snapshots))
    if not snapshots or not modes or not args.finetune_seeds:
        return None
    return read_phase("snapshots", [_input(k) for k in snapshots], modes, args, root)


def _input(m: dict) -> dict:
    return {"run_id": m["run_id"], "cfg": m["cfg"], "checkpoint": m["checkpoint"]}


def flatten(trainable):
    """Trials get ``{"spec": {...}, common...}``; the trainables read one flat dict."""

    def run(config):
        return trainable({**{k: v for k, v in config.items() if k != "spec"}, **config.get("spec", {})})

    run.__name__ = trainable.__name__
    return run


def measure_and_read(variants: list[tuple[str, ExperimentConfig]], tasks: list[str], args, root: str,
                     progress, probe_tasks: list[str] = ()) -> dict[str, Any]:
    """The measurement grid (variants x pretraining seeds), its fine-tuning (x fine-tuning seeds) and its snapshot
    reads, phase by phase (``PHASES``); returns each phase's results by name (what ``sweeps.export.export`` takes)."""
    specs = measurement_specs(variants, args.seeds, getattr(args, "first_seed", 0))
    grids = {"measure": run_phase(measure_phase(specs, args, root, list(probe_tasks)), root, args, progress)}
    measured = completed_measurements(grids["measure"])
    if not measured or not args.finetune_seeds:
        print("no completed measurement run to fine-tune" if not measured else "--finetune-seeds 0: no fine-tuning",
              flush=True)
        return grids
    grids["finetune"] = run_phase(finetune_phase(measured, tasks, args, root), root, args, progress)
    snapshots = snapshot_phase([k for m in measured for k in m["snapshots"]], tasks, args, root)
    if snapshots is not None:
        grids["snapshots"] = run_phase(snapshots, root, args, progress)
    return grids


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
