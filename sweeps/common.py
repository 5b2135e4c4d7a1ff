"""Shared pieces of the sweep scripts: the command line, Ray set-up, the three phases, progress, export.

A sweep is up to three Tune experiments under ``<storage>/<name>/``: ``search`` (Optuna TPE + ASHA
over loss weights and mask ratio, ranked on the dev probe score), ``measure`` (named variants x
pretraining seeds at full budget) and ``finetune`` (each measured checkpoint x fine-tuning seeds on
the task suite). ``export/`` then holds ``runs.parquet``, ``evals.parquet`` and
``predictions.parquet`` (the contract with ``analysis``), regenerable from the experiment directories
with ``python -m sweeps.common export <storage>/<name>``. ``--resume`` restores each phase with
``Tuner.restore``: finished trials are not run again.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq
from ray import tune

from trainables import schema
from trainables.config import ConfigError, ExperimentConfig, PRESETS, build_config, objective_for_variant
from trainables.data.text import CorpusError

log = logging.getLogger("sweeps")

MEASURE_VARIANTS = ("full", "mlm_only", "nsp_only", "none")
WEIGHT_OBJECTIVES = ("mlm", "nsp", "sop")


# ------------------------------------------------------------------ command line

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
    p.add_argument("--gpus-per-trial", type=float, default=0, help="GPUs per pretraining trial")
    p.add_argument("--workers-per-trial", type=int, default=1,
                   help="Ray Train (DDP) workers per pretraining trial; 1 runs the core in the trial's process")
    p.add_argument("--max-concurrent", type=int, default=0, help="trials at once (0: as many as resources allow)")
    p.add_argument("--address", help="join a running Ray cluster (e.g. auto); default: start a local Ray instance")
    p.add_argument("--storage", default="runs", help="results root: a directory, s3://BUCKET/PATH or gs://BUCKET/PATH")
    p.add_argument("--name", help="experiment name (default: SCRIPT-PRESET-TIMESTAMP)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted sweep of the same --name")
    p.add_argument("--quiet", action="store_true", help="only the final table")
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
    return cfg


def experiment_root(args: argparse.Namespace, script: str) -> str:
    storage = args.storage if "://" in args.storage else str(Path(args.storage).expanduser().resolve())
    if not args.name:
        if args.resume:
            raise ConfigError("--resume needs --name (the experiment to continue)")
        args.name = f"{script}-{args.preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    return f"{storage.rstrip('/')}/{args.name}"


def prepare_local_data(cfg: ExperimentConfig, task_names: list[str], corpus: bool = True) -> None:
    """Fetch the built-in data and build the tokenizer/token caches once, before trials race for them."""
    from trainables.pretrain import build_pretraining_data
    from trainables.tasks import load_task

    if corpus:
        build_pretraining_data(cfg)
    for name in task_names:
        load_task(name, cfg.data.cache_dir or None)


# ------------------------------------------------------------------ Ray

def init_ray(args: argparse.Namespace) -> None:
    import ray

    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "0")
    if args.address:
        ray.init(address=args.address, log_to_driver=False)
    else:
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=True, logging_level=logging.WARNING)


@dataclass
class Phase:
    name: str  # search | measure | finetune
    trainable: Callable
    param_space: dict[str, Any]
    resources: dict[str, float]
    num_samples: int = 1
    search_alg: Any = None
    scheduler: Any = None
    max_concurrent: int = 0


def run_phase(phase: Phase, root: str, args: argparse.Namespace, progress: "Progress"):
    """Run (or, with --resume, restore and finish) one Tune experiment at ``<root>/<phase.name>``."""

    trainable = tune.with_resources(phase.trainable, phase.resources)
    path = f"{root}/{phase.name}"
    progress.phase = phase.name
    if tune.Tuner.can_restore(path):
        if not args.resume:
            raise ConfigError(f"experiment {path} already exists; add --resume to continue it, or choose another --name")
        tuner = tune.Tuner.restore(path, trainable, resume_errored=True, param_space=phase.param_space)
    else:
        tuner = tune.Tuner(
            trainable, param_space=phase.param_space,
            tune_config=tune.TuneConfig(num_samples=phase.num_samples, search_alg=phase.search_alg,
                                        scheduler=phase.scheduler, max_concurrent_trials=phase.max_concurrent or None,
                                        trial_dirname_creator=_trial_dirname, trial_name_creator=_trial_name),
            run_config=tune.RunConfig(
                name=phase.name, storage_path=root, callbacks=[progress], verbose=0,
                failure_config=tune.FailureConfig(max_failures=2),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=2)))
    return tuner.fit()


def _trial_name(trial) -> str:
    spec = trial.config.get("spec", {})
    return spec.get("run_id_ft") or spec.get("run_id") or f"search-{trial.trial_id}"


def _trial_dirname(trial) -> str:
    return _trial_name(trial)  # TensorBoard shows runs by this name: variant and seed


# ------------------------------------------------------------------ progress

class Progress(tune.Callback):
    """A Tune callback printing one line per event: trials running, finished, stopped, failed."""

    def __init__(self, quiet: bool = False, out=sys.stdout):
        self.quiet, self.out, self.phase = quiet, out, ""
        self.counts: dict[str, dict[str, int]] = {}
        self._last: dict[str, float] = {}
        self._results: dict[str, dict] = {}

    def _c(self) -> dict[str, int]:
        return self.counts.setdefault(self.phase, {"running": 0, "finished": 0, "stopped": 0, "failed": 0})

    def _line(self, text: str) -> None:
        if self.quiet:
            return
        c = self._c()
        print(f"[{time.strftime('%H:%M:%S')}] {self.phase:8s} {c['running']} running, {c['finished']} finished, "
              f"{c['stopped']} stopped, {c['failed']} failed | {text}", file=self.out, flush=True)

    def on_trial_start(self, iteration, trials, trial, **info):
        self._c()["running"] += 1
        self._line(f"{trial} started")

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self._results[trial.trial_id] = result
        now = time.time()
        if now - self._last.get(trial.trial_id, 0) < 10 and not result.get("final"):
            return
        self._last[trial.trial_id] = now
        shown = {k: result[k] for k in ("step", "probe_score", "eval/mlm_acc", "mean_primary") if k in result}
        self._line(f"{trial} " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items()))

    def on_trial_complete(self, iteration, trials, trial, **info):
        c = self._c()
        c["running"] -= 1
        last = self._results.get(trial.trial_id, {})
        if last.get("failed"):
            c["failed"] += 1
            self._line(f"{trial} FAILED: {last.get('stop_reason', '')}")
        elif last.get("final"):
            c["finished"] += 1
            self._line(f"{trial} finished")
        else:
            c["stopped"] += 1
            self._line(f"{trial} stopped early by ASHA at step {int(last.get('step', 0))}")

    def on_trial_error(self, iteration, trials, trial, **info):
        c = self._c()
        c["running"] -= 1
        c["failed"] += 1
        self._line(f"{trial} FAILED (error; see {trial.local_path})")


# ------------------------------------------------------------------ phases

def measurement_specs(variants: list[tuple[str, ExperimentConfig]], seeds: int) -> list[dict]:
    """One spec per (variant, pretraining seed): same data order (data_seed) and initial weights (seed)."""
    specs = []
    for name, vcfg in variants:
        for seed in range(seeds):
            run = vcfg.replace(run=dataclasses.replace(vcfg.run, seed=seed, checkpoint_every=vcfg.run.eval_every))
            specs.append({"run_id": f"{name}-s{seed}", "variant": name, "pretrain_seed": seed, "phase": "measure",
                          "cfg": run.to_dict()})
    return specs


def variant_config(cfg: ExperimentConfig, name: str, **objective_changes) -> ExperimentConfig:
    o = cfg.objective
    keep = {"mask_ratio": o.mask_ratio, "mask_token_frac": o.mask_token_frac, "random_token_frac": o.random_token_frac,
            "static_masking": o.static_masking, "eval_mask_ratio": o.eval_mask_ratio}
    return cfg.replace(objective=objective_for_variant(name, **{**keep, **objective_changes}))


def pretrain_resources(args) -> dict[str, float]:
    if args.workers_per_trial > 1 or args.gpus_per_trial > 0:
        return {"CPU": 0, "memory": 2**28}  # the trial only drives a TorchTrainer, which requests its own workers
    return {"CPU": args.cpus_per_trial}


def common_trial_config(args, root: str, probe_tasks: list[str]) -> dict[str, Any]:
    return {"cpus_per_trial": args.cpus_per_trial, "gpus_per_trial": args.gpus_per_trial,
            "workers": args.workers_per_trial, "probe_tasks": probe_tasks, "storage_path": root}


def measure_phase(specs: list[dict], args, root: str, probe_tasks: list[str]) -> Phase:

    from trainables.tune_adapters import pretrain_trainable

    return Phase("measure", _flatten(pretrain_trainable),
                 {"spec": tune.grid_search(specs), **common_trial_config(args, root, probe_tasks)},
                 pretrain_resources(args), max_concurrent=args.max_concurrent)


def finetune_phase(measured: list[dict], tasks: list[str], args) -> Phase:
    """Each completed measurement run x fine-tuning seed, as Ray trials (they spread over a cluster)."""

    from trainables.tune_adapters import finetune_trainable

    specs = [{"run_id": m["run_id"], "cfg": m["cfg"], "checkpoint": m["checkpoint"], "finetune_seed": s,
              "tasks": tasks} for m in measured for s in range(args.finetune_seeds)]
    for spec in specs:
        spec["run_id_ft"] = f"{spec['run_id']}-ft{spec['finetune_seed']}"
    return Phase("finetune", _flatten(finetune_trainable),
                 {"spec": tune.grid_search(specs), "cpus_per_trial": args.cpus_per_trial},
                 {"CPU": args.cpus_per_trial}, max_concurrent=args.max_concurrent)


def _flatten(trainable):
    """Trials get ``{"spec": {...}, common...}``; the trainables read one flat dict."""

    def run(config):
        return trainable({**{k: v for k, v in config.items() if k != "spec"}, **config.get("spec", {})})

    run.__name__ = trainable.__name__
    return run


def measure_and_finetune(variants: list[tuple[str, ExperimentConfig]], tasks: list[str], args, root: str,
                         progress, probe_tasks: list[str] = ()):
    """The measurement grid (variants x pretraining seeds) and its fine-tuning (x fine-tuning seeds)."""
    specs = measurement_specs(variants, args.seeds)
    measure = run_phase(measure_phase(specs, args, root, list(probe_tasks)), root, args, progress)
    measured = completed_measurements(measure)
    if not measured or not args.finetune_seeds:
        print("no completed measurement run to fine-tune" if not measured else "--finetune-seeds 0: no fine-tuning",
              flush=True)
        return measure, None
    finetune = run_phase(finetune_phase(measured, tasks, args), root, args, progress)
    return measure, finetune


def sweep_main(script: str, doc: str, run: Callable, argv: list[str] | None, *, defaults: dict[str, dict],
               extra_args: Callable | None = None) -> int:
    """The frame every sweep script shares: parse, validate, announce, prepare data, start Ray, run,
    export, print the table. ``run(cfg, args, root, tasks, progress)`` returns the grids for ``export``."""
    p = build_parser(f"python sweeps/{script}.py", doc.split("\n\n")[0])
    if extra_args:
        extra_args(p)
    known, _ = p.parse_known_args(argv)
    p.set_defaults(**defaults.get(known.preset, defaults["cpu-small"]))
    args = p.parse_args(argv)
    configure_logging(args.quiet)
    t0 = time.time()
    try:
        cfg = base_config(args)
        root = experiment_root(args, script)
        from trainables.tasks import resolve_tasks

        tasks = resolve_tasks(cfg.finetune.tasks)
        print(f"sweep {args.name}: preset {args.preset}, corpus {cfg.data.corpus}, tasks {','.join(tasks)}; "
              f"{args.num_samples} search trials, {args.seeds} pretraining x {args.finetune_seeds} fine-tuning seeds\n"
              f"results: {root}\nTensorBoard: tensorboard --logdir {root}", flush=True)
        prepare_local_data(cfg, tasks)
        init_ray(args)
        grids = run(cfg, args, root, tasks, Progress(quiet=args.quiet))
        export_dir = export(root, *grids)
    except (ConfigError, CorpusError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return finish(root, export_dir, t0, final_report)


def finish(root: str, export_dir: str, t0: float, report: Callable[[str], str | None]) -> int:
    """The last lines every sweep prints: where the export, the report and the TensorBoard logs are."""
    print(f"\nexport: {export_dir}", flush=True)
    report_dir = report(root)
    print(f"report: {report_dir}\nTensorBoard: tensorboard --logdir {root}\n"
          f"finished in {(time.time() - t0) / 60:.1f} min", flush=True)
    return 0


# ------------------------------------------------------------------ export

def run_row(result, phase: str) -> dict[str, Any]:
    """One ``runs.parquet`` row from a Tune result of a pretraining trial."""
    from trainables.tune_adapters import trial_config

    config = {**{k: v for k, v in result.config.items() if k != "spec"}, **result.config.get("spec", {})}
    cfg = trial_config(config)
    m = result.metrics or {}
    if result.error is not None:
        status, reason = "failed", str(result.error).strip().splitlines()[-1][:500]
    elif m.get("failed"):
        status, reason = "failed", str(m.get("stop_reason", ""))
    elif m.get("final"):
        status, reason = "completed", ""
    else:
        status, reason = "stopped_early", f"ASHA stopped it at step {int(m.get('step', 0))} (probe_score below the rung cutoff)"
    nan = float("nan")
    o = cfg.objective
    return {
        "run_id": config.get("run_id") or f"search-{m.get('trial_id', result.path.rsplit('/', 1)[-1])}",
        "phase": phase, "variant": config.get("variant", o.variant), "mlm_weight": o.mlm_weight,
        "nsp_weight": o.nsp_weight, "sop_weight": o.sop_weight, "mask_ratio": o.mask_ratio,
        "input_format": o.input_format, "pretrain_seed": cfg.run.seed, "status": status, "stop_reason": reason,
        "steps": int(m.get("step", 0) or 0), "tokens_seen": int(m.get("tokens_seen", 0) or 0),
        "epochs": float(m.get("epoch", nan)), "wall_time_s": float(m.get("wall_time_s", m.get("time_total_s", nan))),
        "mlm_acc": float(m.get("eval/mlm_acc", nan)), "mlm_ppl": float(m.get("eval/mlm_ppl", nan)),
        "pair_acc_nsp": float(m.get("eval/pair_acc_nsp", nan)), "pair_acc_sop": float(m.get("eval/pair_acc_sop", nan)),
        "cls_cosine": float(m.get("eval/cls_cosine", nan)), "token_cosine": float(m.get("eval/token_cosine", nan)),
        "collapsed": bool(m.get("eval/collapsed", 0.0)), "probe_score": float(m.get("probe_score", nan)),
        "checkpoint": _checkpoint_of(result) if status == "completed" else "",
        "config_json": cfg.to_json(),
    }


def _checkpoint_of(result) -> str:
    """The trial's last checkpoint as a URI; Ray Train trials pass theirs as ``checkpoint_path``
    (TuneReportCallback), in the same storage filesystem as the trial."""
    from trainables.tune_adapters import checkpoint_uri

    if result.checkpoint is not None:
        return checkpoint_uri(result.checkpoint)
    path = (result.metrics or {}).get("checkpoint_path", "")
    scheme = {"s3": "s3", "gcs": "gs"}.get(getattr(result.filesystem, "type_name", "local"), "")
    return f"{scheme}://{path}" if path and scheme else path


def finetune_tables(grid) -> tuple[list[pa.Table], list[pa.Table], int]:
    evals, preds, failed = [], [], 0
    for result in grid:
        if result.error is not None or result.checkpoint is None:
            failed += 1
            continue
        with result.checkpoint.as_directory() as d:
            evals.append(pq.read_table(Path(d) / "evals.parquet"))
            preds.append(pq.read_table(Path(d) / "predictions.parquet"))
    return evals, preds, failed


def write_table(table: pa.Table, root: str, name: str) -> str:
    """Write ``<root>/export/<name>.parquet`` atomically (temp file, then rename) on any filesystem."""
    import pyarrow.fs as pafs

    if "://" in root:
        fs, base = pafs.FileSystem.from_uri(root)
    else:
        fs, base = pafs.LocalFileSystem(), root
    fs.create_dir(f"{base}/export", recursive=True)
    final, tmp = f"{base}/export/{name}.parquet", f"{base}/export/.{name}.parquet.tmp"
    with fs.open_output_stream(tmp) as f:
        pq.write_table(table, f)
    fs.move(tmp, final)
    return final


def export(root: str, search_grid=None, measure_grid=None, finetune_grid=None) -> str:
    from trainables.checkpoint import code_version

    version = code_version()
    rows = [run_row(r, "search") for r in (search_grid or [])] + [run_row(r, "measure") for r in (measure_grid or [])]
    runs = schema.build_table("runs", rows, WEIGHT_OBJECTIVES, version)
    evals, preds, failed = finetune_tables(finetune_grid or [])
    if failed:
        log.warning("%d fine-tuning trials failed; their rows are missing from evals.parquet", failed)
    for name, parts in (("evals", evals), ("predictions", preds)):
        empty = schema.build_table(name, [], code_version=version)
        table = pa.concat_tables([t.cast(empty.schema) for t in parts]) if parts else empty
        write_table(table.replace_schema_metadata(empty.schema.metadata), root, name)
    write_table(runs, root, "runs")
    return f"{root}/export"


def export_from_experiment(root: str) -> str:
    """Rebuild ``export/`` from the experiment directories alone (no trial is run)."""

    from trainables.tune_adapters import finetune_trainable, pretrain_trainable

    grids = {}
    for name, trainable in (("search", pretrain_trainable), ("measure", pretrain_trainable),
                            ("finetune", finetune_trainable)):
        path = f"{root}/{name}"
        grids[name] = tune.Tuner.restore(path, trainable).get_results() if tune.Tuner.can_restore(path) else None
    return export(root, grids["search"], grids["measure"], grids["finetune"])


def completed_measurements(measure_grid) -> list[dict]:
    out = []
    for r in measure_grid:
        row = run_row(r, "measure")
        if row["status"] == "completed":
            spec = r.config["spec"]
            out.append({"run_id": spec["run_id"], "cfg": spec["cfg"], "checkpoint": row["checkpoint"]})
        else:
            log.warning("measurement run %s is %s (%s): it gets no fine-tuning", row["run_id"], row["status"],
                        row["stop_reason"])
    return out


# ------------------------------------------------------------------ the end

def final_report(root: str, out=sys.stdout) -> str | None:
    """Analysis of the export: the contribution table on the terminal, Markdown/CSV/PNG beside it."""
    export_dir = f"{root}/export"
    if "://" in root:
        print(f"export: {export_dir} (run `python -m analysis.report` on a local copy for the table)", file=out)
        return None
    from analysis.report import build_report, format_table, write_report

    report = build_report(export_dir)
    print(format_table(report), file=out)
    paths = write_report(report, f"{root}/report")
    return str(Path(paths[0]).parent) if paths else None


def configure_logging(quiet: bool) -> None:
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, format="%(asctime)s %(message)s",
                        datefmt="%H:%M:%S")
    for noisy in ("ray", "transformers", "datasets", "filelock", "urllib3", "optuna"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def _main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sweeps.common")
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="rebuild <storage>/<name>/export from the experiment directories")
    e.add_argument("root")
    args = p.parse_args(argv)
    configure_logging(False)
    print(export_from_experiment(args.root if "://" in args.root else str(Path(args.root).resolve())))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
