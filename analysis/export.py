"""Reading a sweep export (runs / evals / predictions Parquet) and checking it against the schema.

The schema is ``trainables.schema``, the one definition the sweeps write with: one row per
pretraining run, one per (run, task, fine-tuning seed, metric), one per predicted test example.
``predictions.parquet`` may be absent (estimates then fall back to the stored eval values, with
intervals over pretraining seeds only). A file whose schema version is newer than this code's is
refused with one line; older versions are read (renamed columns are renamed on reading). Eval rows of
fine-tuning learning rates that were not chosen on dev (``selected`` false) are left out here.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pandas as pd
import pyarrow.parquet as pq

from trainables import schema


class ExportError(ValueError):
    """An export that does not follow the schema (missing file or column, unknown value, newer version)."""


class Export(NamedTuple):
    runs: pd.DataFrame
    evals: pd.DataFrame
    predictions: pd.DataFrame  # empty (with the schema's columns) when the file is absent

    @property
    def objectives(self) -> tuple[str, ...]:
        """The objectives with a weight column in runs (``<name>_weight``)."""
        return schema.objectives_in(self.runs.columns)


def required_columns(table: str) -> tuple[str, ...]:
    return tuple(c.name for c in schema.columns(table) if c.required)


def _check_columns(df: pd.DataFrame, required: tuple[str, ...], name: str) -> None:
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ExportError(f"{name} lacks columns {missing}; required: {list(required)}")


def check_export(export: Export) -> Export:
    """Raise ExportError on a schema violation; return the export with normalised dtypes."""
    _check_columns(export.runs, required_columns("runs"), "runs.parquet")
    if not export.objectives:
        raise ExportError("runs.parquet has no <objective>_weight column; at least one is required")
    _check_columns(export.evals, required_columns("evals"), "evals.parquet")
    _check_columns(export.predictions, required_columns("predictions"), "predictions.parquet")
    for col, allowed in (("phase", schema.PHASES), ("status", schema.STATUSES)):
        bad = sorted(set(export.runs[col]) - set(allowed))
        if bad:
            raise ExportError(f"runs.parquet column {col!r} has {bad}; allowed: {list(allowed)}")
    runs = export.runs.assign(collapsed=export.runs["collapsed"].fillna(False).astype(bool))
    evals = export.evals.assign(is_primary=export.evals["is_primary"].fillna(False).astype(bool))
    if "lr" in evals.columns and len(evals):  # how many rates each (run, task, mode) tried, kept past the filter
        evals = evals.assign(rates_tried=evals.groupby(["run_id", "task", "mode"])["lr"].transform("nunique"))
    if "selected" in evals.columns:  # fine-tuning rates not chosen on dev: in the file, not in the estimates
        evals = evals[evals["selected"].fillna(True).astype(bool)]
    return Export(runs, evals, export.predictions)


def without_snapshots(export: Export) -> Export:
    """The export as of the runs' ends: snapshot rows (phase snapshot) and their reads left out."""
    snap = set(export.runs.loc[export.runs["phase"] == "snapshot", "run_id"])
    if not snap:
        return export
    return Export(export.runs[export.runs["phase"] != "snapshot"], export.evals[~export.evals["run_id"].isin(snap)],
                  export.predictions[~export.predictions["run_id"].isin(snap)])


def snapshot_exports(export: Export) -> list[tuple[int, Export]]:
    """One export per snapshot step (run.snapshots), each as if its snapshots were the measure runs: the
    snapshot runs of that step relabelled ``measure`` beside ``none``'s runs (no pretraining, the same at every
    step), with their reads. By step: every variant of a steps budget keeps its snapshots at the same steps."""
    runs = export.runs
    snaps = runs[(runs["phase"] == "snapshot") & (runs["status"] == "completed")]
    none = runs[(runs["phase"] == "measure") & (runs["variant"] == "none")]
    out = []
    for step, group in snaps.groupby("steps"):
        ids = set(group["run_id"]) | set(none["run_id"])
        at = pd.concat([group.assign(phase="measure"), none])
        out.append((int(step), Export(at, export.evals[export.evals["run_id"].isin(ids)],
                                      export.predictions[export.predictions["run_id"].isin(ids)])))
    return out


def _read(path: Path) -> pd.DataFrame:
    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises several classes for a damaged file
        raise ExportError(f"{path} is not a readable Parquet file: {str(err).splitlines()[0]}") from None
    version = schema.version_of(table.schema.metadata)
    try:
        schema.check_version(version, str(path))
    except schema.SchemaError as err:
        raise ExportError(str(err)) from None
    return table.to_pandas().rename(columns=schema.upgrade_columns(table.column_names, version))


def load_export(export_dir: str | Path) -> Export:
    """The three tables of an export directory, checked against the schema."""
    root = Path(export_dir)
    if not root.is_dir():
        raise ExportError(f"export directory {str(root)!r} does not exist")
    tables = {}
    for name in schema.TABLES:
        path = root / f"{name}.parquet"
        if path.exists():
            tables[name] = _read(path)
        elif name == "predictions":
            tables[name] = pd.DataFrame({c: pd.Series(dtype=object) for c in required_columns(name)})
        else:
            raise ExportError(f"{path} is missing; an export holds runs.parquet and evals.parquet "
                              "(and predictions.parquet)")
    return without_snapshots(check_export(Export(**tables)))


def load_with_snapshots(export_dir: str | Path) -> Export:
    """``load_export`` with the snapshot rows kept (``snapshot_exports`` splits them by step)."""
    root = Path(export_dir)
    load_export(root)  # the same checks and errors
    tables = {n: _read(root / f"{n}.parquet") for n in schema.TABLES if (root / f"{n}.parquet").exists()}
    tables.setdefault("predictions", pd.DataFrame({c: pd.Series(dtype=object) for c in required_columns("predictions")}))
    return check_export(Export(**tables))


# Config keys that say where or how fast a run ran, not what it measured: runs that differ only in these
# (and in their seeds) are one design and may be pooled.
_RUNTIME_KEYS = ("run.seed", "run.snapshots", "run.threads", "run.device", "run.allocator", "run.log_every", "run.eval_every",
                 "run.checkpoint_every", "run.tensorboard", "run.init_checkpoint", "data.prepared_root",
                 "data.prepared", "data.cache_dir", "data.tokenizer_dir", "data.loader_workers", "data.data_seed",
                 "model.compile", "model.gradient_checkpointing")
_DESIGN_COLUMNS = ("input_format", "mask_ratio", "masking", "data_order", "budget", "precision")


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _design(runs: pd.DataFrame) -> dict[str, dict]:
    """Per variant of the completed measure runs: what its runs hold fixed (weights, format, config)."""
    import json

    out: dict[str, dict] = {}
    done = runs[(runs["phase"] == "measure") & (runs["status"] == "completed")]
    cols = [c for c in runs.columns if c.endswith("_weight") or c in _DESIGN_COLUMNS]
    for _, row in done.iterrows():
        try:
            config = _flat(json.loads(row.get("config_json") or "{}"))
        except ValueError:
            config = {}
        design = {c: row[c] for c in cols if pd.notna(row[c])}
        design.update({k: v for k, v in config.items() if k not in _RUNTIME_KEYS})
        out.setdefault(row["variant"], design)
    return out


def _read_raw(export_dir: str | Path) -> dict[str, pd.DataFrame]:
    """An export's tables as written (every fine-tuning rate's rows kept), after checking the schema."""
    load_export(export_dir)
    root = Path(export_dir)
    return {n: _read(root / f"{n}.parquet") for n in schema.TABLES if (root / f"{n}.parquet").exists()}


def merge_exports(export_dirs: list[str | Path], out_dir: str | Path) -> Path:
    """Pool exports of one design run with different pretraining seeds (``--first-seed``) into one export.

    Refused, with one line naming what differs: a run id or a (variant, pretraining seed) in two exports
    (the same run counted twice), a variant whose weights, input format, masking or config differ, other
    test sets (a task's test size), or another pretraining corpus (``corpus.json``'s fingerprint).
    """
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    if len(export_dirs) < 2:
        raise ExportError(f"merging needs at least two exports; got {len(export_dirs)}")
    parts = [_read_raw(d) for d in export_dirs]
    first, first_design = str(export_dirs[0]), _design(parts[0]["runs"])
    ref_sizes = parts[0]["evals"].groupby(["task", "mode"])["n_examples"].max()
    seen: dict[tuple, str] = {}
    for d, part in zip(export_dirs, parts):
        for _, r in part["runs"].iterrows():
            for key in (("run", r["run_id"]), ("seed", r["variant"], r["pretrain_seed"], r["phase"])):
                if key in seen:
                    what = f"run {r['run_id']!r}" if key[0] == "run" else \
                        f"variant {r['variant']!r} at pretraining seed {r['pretrain_seed']}"
                    raise ExportError(f"{what} is in both {seen[key]} and {d}; merge exports of different "
                                      "pretraining seeds (--first-seed)")
                seen[key] = str(d)
        for variant, design in _design(part["runs"]).items():
            ref = first_design.get(variant)
            diff = sorted(k for k in set(design) | set(ref or {}) if ref is not None and design.get(k) != ref.get(k))
            if diff:
                k = diff[0]
                raise ExportError(f"variant {variant!r} differs between {first} and {d}: {k} "
                                  f"{ref.get(k)!r} vs {design.get(k)!r}; only runs of one design can be pooled")
        sizes = part["evals"].groupby(["task", "mode"])["n_examples"].max()
        for key in sizes.index.intersection(ref_sizes.index):
            if sizes[key] != ref_sizes[key]:
                raise ExportError(f"task {key[0]!r} ({key[1]}) has {sizes[key]} test examples in {d} and "
                                  f"{ref_sizes[key]} in {first}; only exports on the same test sets can be pooled")
    corpora = {}
    for d in export_dirs:
        path = Path(d) / "corpus.json"
        if path.exists():
            corpora[str(d)] = json.loads(path.read_text())
    prints = {rec.get("fingerprint") for rec in corpora.values()}
    if len(prints) > 1:
        raise ExportError(f"the exports were pretrained on different corpora (fingerprints {sorted(prints)}); "
                          "only runs on one corpus can be pooled")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in schema.TABLES:
        frames = [p[name] for p in parts if name in p]
        if len(frames) < len(parts):  # predictions: the estimates need every run's or none
            continue
        versions = sorted({(pq.read_schema(Path(d) / f"{name}.parquet").metadata or {}).get(schema.META_CODE, b"")
                           .decode() for d in export_dirs} - {""})
        table = pa.Table.from_pandas(pd.concat(frames, ignore_index=True), preserve_index=False)
        meta = {schema.META_SCHEMA: str(schema.SCHEMA_VERSION).encode(), schema.META_TABLE: name.encode(),
                schema.META_CODE: ",".join(versions).encode()}
        pq.write_table(table.replace_schema_metadata(meta), out / f"{name}.parquet")
    if corpora:
        (out / "corpus.json").write_text(json.dumps(next(iter(corpora.values())), indent=1))
    (out / "MERGED_FROM").write_text("\n".join(str(Path(d).resolve()) for d in export_dirs) + "\n")
    load_export(out)
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m analysis.export",
                                 description="Pool exports of one design run with different pretraining seeds.")
    ap.add_argument("command", choices=["merge"])
    ap.add_argument("exports", nargs="+", type=Path, help="export directories (<run>/export)")
    ap.add_argument("--out", type=Path, required=True, help="the pooled export's directory")
    args = ap.parse_args(argv)
    try:
        out = merge_exports(args.exports, args.out)
    except ExportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    runs = load_export(out).runs
    seeds = sorted(set(runs.loc[runs["phase"] == "measure", "pretrain_seed"]))
    print(f"pooled {len(args.exports)} exports into {out}: {len(runs)} runs, pretraining seeds {seeds}; "
          f"report: python -m analysis.report {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
