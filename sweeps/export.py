"""The sweep export: ``<root>/export/{runs,evals,predictions}.parquet`` in ``trainables.schema``.

    python -m sweeps.export <storage>/<name>     # rebuild export/ from the experiment directories

One runs row per pretraining trial (search and measure phases), the evals and predictions rows that
each fine-tuning trial returned as its checkpoint. Written atomically (temp file, then rename) on a
local path, s3:// or gs://.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from trainables import schema

log = logging.getLogger("sweeps")


def run_row(result, phase: str) -> dict[str, Any]:
    """One ``runs.parquet`` row from a Tune result of a pretraining trial."""
    from trainables.config import data_seed
    from trainables.intrinsic import metric_columns
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
        status, reason = "stopped_early", f"ASHA stopped it at step {int(m.get('step', 0))} (its score below the rung's cutoff)"
    nan = float("nan")
    o = cfg.objective
    steps = int(m.get("step", 0) or 0)
    checkpoint = _checkpoint_of(result) if status == "completed" else ""
    record = _run_record(checkpoint)
    return {
        "run_id": config.get("run_id") or f"search-{m.get('trial_id', result.path.rsplit('/', 1)[-1])}",
        "phase": phase, "variant": config.get("variant", o.variant),
        **{f"{n}_weight": w for n, w in o.weights.items()}, "mask_ratio": o.mask_ratio, "masking": o.masking,
        "input_format": o.input_format, "pretrain_seed": cfg.run.seed, "data_order": cfg.data.data_order,
        "data_seed": data_seed(cfg), "status": status, "stop_reason": reason,
        "steps": steps, "tokens_seen": int(m.get("tokens_seen", 0) or 0),
        # what each input format saw per step (trainables.budget.step_counts): full_sentences' separators, ...
        "tokens_per_step": int(m.get("tokens_seen", 0) or 0) / steps if steps else nan,
        "masked_per_step": _number(record.get("masked_per_step")),
        "epochs": float(m.get("epoch", nan)), "budget": cfg.optim.budget, "train_flops": float(m.get("train_flops", nan)),
        "wall_time_s": float(m.get("wall_time_s", m.get("time_total_s", nan))),
        "precision": str(record.get("precision") or ""), "allocator": str(record.get("allocator") or ""),
        **{name: float(m.get(f"eval/{name}", nan)) for name, _ in metric_columns() if name != "collapsed"},
        "collapsed": bool(m.get("eval/collapsed", 0.0)), "probe_score": float(m.get("probe_score", nan)),
        "checkpoint": checkpoint,
        "snapshot_of": "",
        "config_json": cfg.to_json(),
    }


def snapshot_rows(measure_row: dict) -> list[dict]:
    """One runs.parquet row per snapshot a completed measure run kept (run.snapshots), from each snapshot's
    run.json: run_id ``<run>@<step>``, phase ``snapshot``, its steps, tokens, FLOPs and held-out metrics."""
    from trainables.checkpoint import snapshot_subpath
    from trainables.intrinsic import metric_columns

    record = _run_record(measure_row["checkpoint"])
    rows = []
    for step in record.get("snapshot_steps") or []:
        where = f"{measure_row['checkpoint'].rstrip('/')}/{snapshot_subpath(int(step))}"
        snap = _run_record(where)
        if not snap:
            continue
        intrinsic = snap.get("intrinsic") or {}
        steps = int(snap.get("steps", step))
        rows.append({**measure_row, "run_id": f"{measure_row['run_id']}@{steps}", "phase": "snapshot",
                     "steps": steps, "tokens_seen": int(snap.get("tokens_seen", 0)),
                     "tokens_per_step": int(snap.get("tokens_seen", 0)) / steps if steps else float("nan"),
                     "epochs": _number(snap.get("epochs")), "train_flops": _number(snap.get("train_flops")),
                     "wall_time_s": _number(snap.get("wall_time_s")),
                     **{name: _number(intrinsic.get(name)) for name, _ in metric_columns() if name != "collapsed"},
                     "checkpoint": where, "snapshot_of": measure_row["run_id"], "probe_score": float("nan")})
    return rows


def _run_record(checkpoint: str) -> dict:
    """The run.json beside a completed run's checkpoint (local path or URI), or {} when there is none."""
    import json

    import pyarrow.fs as pafs

    if not checkpoint:
        return {}
    try:
        fs, base = pafs.FileSystem.from_uri(checkpoint) if "://" in checkpoint else (pafs.LocalFileSystem(), checkpoint)
        with fs.open_input_stream(f"{base.rstrip('/')}/run.json") as f:
            return json.loads(f.read())
    except (OSError, ValueError):  # no run.json (an older trial) or unreadable: the column is NaN
        return {}


def _number(x) -> float:
    """A number of run.json: NaN where it is absent or null (run.json writes non-finite numbers as null)."""
    return float("nan") if x is None else float(x)


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


def _conform(table: pa.Table, target: pa.Schema) -> pa.Table:
    """A trial's table in the current schema (columns a trial wrote before a schema change are filled)."""
    cols = [table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(len(table), f.type)
            for f in target]
    return pa.Table.from_arrays(cols, schema=target)


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


def export(root: str, grids: dict | None = None) -> str:
    """Write the three tables, the data dictionary (export/README.md) and the TensorBoard HParams view from each
    phase's results (``grids``: phase name -> Tune results, ``sweeps.phases.PHASES`` says which table each fills)."""
    from sweeps.phase_kinds import PHASES
    from trainables.checkpoint import code_version
    from trainables.intrinsic import metric_columns
    from trainables.objectives import OBJECTIVES

    grids = grids or {}
    unknown = sorted(set(grids) - set(PHASES))
    if unknown:
        raise ValueError(f"export: unknown phases {unknown}; allowed: {', '.join(PHASES)}")
    version = code_version()
    rows = [run_row(r, name) for name, kind in PHASES.items() if kind.rows == "runs" for r in (grids.get(name) or [])]
    rows += [s for row in rows if row["phase"] == "measure" and row["status"] == "completed" for s in snapshot_rows(row)]
    runs = schema.build_table("runs", rows, tuple(OBJECTIVES), version, metric_columns())
    evals, preds, failed = finetune_tables([r for name, kind in PHASES.items() if kind.rows == "evals"
                                            for r in (grids.get(name) or [])])
    if failed:
        log.warning("%d fine-tuning trials failed; their rows are missing from evals.parquet", failed)
    from trainables.finetune.api import select_tables

    tables = []
    for name, parts in (("evals", evals), ("predictions", preds)):
        empty = schema.build_table(name, [], code_version=version)
        tables.append(pa.concat_tables([_conform(t, empty.schema) for t in parts]) if parts else empty)
    selected = select_tables(*tables)  # the fine-tuning rate chosen on dev
    for name, table, empty in zip(("evals", "predictions"), selected, tables):
        write_table(table.replace_schema_metadata(empty.schema.metadata), root, name)
    write_table(runs, root, "runs")
    write_text(schema.data_dictionary(tuple(OBJECTIVES), metric_columns()), root, "README.md")
    write_hparams(runs.to_pandas(), selected[0].to_pandas(), f"{root}/tensorboard/hparams")
    return f"{root}/export"


def write_text(text: str, root: str, name: str) -> str:
    import pyarrow.fs as pafs

    fs, base = pafs.FileSystem.from_uri(root) if "://" in root else (pafs.LocalFileSystem(), root)
    fs.create_dir(f"{base}/export", recursive=True)
    with fs.open_output_stream(f"{base}/export/{name}") as f:
        f.write(text.encode())
    return f"{base}/export/{name}"


def write_curves(points, logdir: str) -> list[str]:
    """TensorBoard's view of the report's curves (``analysis.curves``): one stream per contrast under ``logdir``,
    per task row its estimate and the ends of its interval at each point, the step being the pretraining tokens
    (TensorBoard's horizontal axis), and 1 where the cell is resolved under the rule across points. Rewritten whole
    with the report; returns the streams written."""
    import re
    import shutil

    from torch.utils.tensorboard import SummaryWriter

    from analysis.curves import curve_rows

    shutil.rmtree(logdir, ignore_errors=True)
    by_contrast: dict[str, list] = {}
    for row in curve_rows(list(points), None):
        by_contrast.setdefault(row.contrast, []).append(row)
    streams = []
    for contrast, rows in by_contrast.items():
        stream = f"{logdir}/{re.sub(r'[^A-Za-z0-9_.]+', '_', contrast).strip('_')}"
        writer = SummaryWriter(log_dir=stream)
        for row in rows:
            tag = re.sub(r"[^A-Za-z0-9_.]+", "_", row.task).strip("_")
            for tokens, est, resolved in row.points:
                step = int(round(tokens))
                for name, value in (("estimate", est.interval.estimate), ("lo", est.interval.lo),
                                    ("hi", est.interval.hi), ("resolved", float(resolved))):
                    writer.add_scalar(f"{tag}/{name}", float(value), global_step=step)
        writer.close()
        streams.append(stream)
    return streams


def write_hparams(runs, evals, logdir: str) -> None:
    """TensorBoard's HParams table: every pretraining run's variant, weights, mask ratio and seeds against
    its intrinsic metrics and its downstream scores (mean over fine-tuning seeds, and their average)."""
    import math
    import shutil

    from torch.utils.tensorboard import SummaryWriter

    if "://" in logdir:  # remote storage: written here, then copied up whole
        import tempfile

        import pyarrow.fs as pafs

        with tempfile.TemporaryDirectory() as tmp:
            write_hparams(runs, evals, tmp)
            fs, base = pafs.FileSystem.from_uri(logdir)
            fs.delete_dir_contents(base, missing_dir_ok=True)
            pafs.copy_files(tmp, base, destination_filesystem=fs)
        return
    shutil.rmtree(logdir, ignore_errors=True)  # rewritten whole at every export
    params = ["variant", "phase", *[c for c in runs.columns if c.endswith("_weight")], "mask_ratio", "masking",
              "input_format", "pretrain_seed", "data_seed", "budget", "status"]
    skip = set(params) | {"run_id", "stop_reason", "checkpoint", "config_json"}
    prim = evals[evals["is_primary"] & (evals["mode"] == "finetune")] if len(evals) else evals
    if len(prim) and "selected" in prim.columns:  # the rate chosen on dev only, shown beside its score
        prim = prim[prim["selected"].astype(bool)]
    scores = prim.groupby(["run_id", "task"])["value"].mean() if len(prim) else None
    rates = prim.groupby(["run_id", "task"])["lr"].first() if len(prim) and "lr" in prim.columns else None
    writer = SummaryWriter(log_dir=logdir)
    for row in runs.to_dict("records"):
        hp = {k: (row[k] if isinstance(row[k], (str, bool)) else float(row[k])) for k in params
              if k in row and row[k] is not None and not (isinstance(row[k], float) and math.isnan(row[k]))}
        metrics = {f"run/{k}": float(v) for k, v in row.items() if k not in skip and isinstance(v, (int, float))
                   and not isinstance(v, bool) and math.isfinite(float(v))}
        if scores is not None and row["run_id"] in scores.index.get_level_values(0):
            mine = scores.loc[row["run_id"]]
            metrics.update({f"task/{t}": float(v) for t, v in mine.items()})
            metrics["task/mean"] = float(mine.mean())
            if rates is not None:
                metrics.update({f"lr/{t}": float(v) for t, v in rates.loc[row["run_id"]].items() if v == v})
        if metrics:
            writer.add_hparams(hp, metrics, run_name=row["run_id"])
    writer.close()


def export_from_experiment(root: str) -> str:
    """Rebuild ``export/`` from the experiment directories alone (no trial is run)."""

    from ray import tune

    from trainables.tune_adapters import finetune_trainable, pretrain_trainable

    from sweeps.phase_kinds import PHASES

    trainables = {"pretrain": pretrain_trainable, "finetune": finetune_trainable}
    grids = {}
    for name, kind in PHASES.items():
        path = f"{root}/{name}"
        if tune.Tuner.can_restore(path):
            grids[name] = tune.Tuner.restore(path, trainables[kind.trainable]).get_results()
    return export(root, grids)

def main(argv: list[str] | None = None) -> int:
    from sweeps.runner import configure_logging, reset_logging

    p = argparse.ArgumentParser(prog="python -m sweeps.export", description=__doc__.splitlines()[0])
    p.add_argument("root", help="the experiment directory, <storage>/<name>")
    args = p.parse_args(argv)
    configure_logging(False)
    try:
        print(export_from_experiment(args.root if "://" in args.root else str(Path(args.root).resolve())))
    finally:
        reset_logging()
    return 0


if __name__ == "__main__":
    sys.exit(main())
