"""The export schema: the one definition of runs / evals / predictions, with Arrow types and meanings.

The sweeps write these tables (``<storage>/<name>/export/*.parquet``) and ``trainables.finetune``
writes evals and predictions; ``analysis`` reads them. All of them build and check the tables here:

    runs.parquet         one row per pretraining run (search trials and measurement runs)
    evals.parquet        one row per (run, task, fine-tuning seed, mode, metric)
    predictions.parquet  one row per predicted test example (string predictions, as metrics take them)

Every file carries its schema version and the code version in the Parquet metadata
(``bert_objectives.schema_version``, ``bert_objectives.code_version``). The loss-weight columns of
``runs`` are one per registered objective (``<name>_weight``), so the schema of a runs table is built
from the objective names it is given. ``data_dictionary()`` renders every column's meaning as Markdown.
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple, Sequence

import pyarrow as pa

SCHEMA_VERSION = 2  # 2: evals.primary -> is_primary (an SQL keyword), source_task, positive_label
META_SCHEMA = b"bert_objectives.schema_version"
META_CODE = b"bert_objectives.code_version"
META_TABLE = b"bert_objectives.table"
TABLES = ("runs", "evals", "predictions")
PHASES = ("search", "measure", "snapshot")  # snapshot: a measure run's encoder kept mid-run (run.snapshots)
# runs.collapsed: the raw representation-collapse diagnostic (trainables.intrinsic sets it on these absolute
# thresholds). At small scale a random-init encoder exceeds them too, so the report's collapse flag is decided
# in analysis.flags relative to none's runs of the same export, with the thresholds below.
COLLAPSE_TOKEN_COSINE = 0.95  # mean pairwise cosine of held-out token vectors above this: near-identical
COLLAPSE_CLS_COSINE = 0.99  # of [CLS] vectors above this: they carry almost nothing of their input
COLLAPSE_DISTANCE = 1e-3  # analysis: a cosine within this of 1 (and closer to 1 than none's) is collapsed geometry
COLLAPSE_VS_NONE = 0.1  # analysis: or a distance from 1 at most this share of none's (same pretraining seed)
COLLAPSE_MAJORITY_SHARE = 0.95  # analysis: the symptom, fine-tuning predicting one label for this share of examples
STATUSES = ("completed", "stopped_early", "failed")


class SchemaError(ValueError):
    """A table that does not follow the export schema (missing column, unknown value, newer version)."""


class Column(NamedTuple):
    name: str
    type: pa.DataType
    doc: str
    required: bool = True  # the analysis needs it; optional columns may be absent from older exports


def weight_column(objective: str) -> Column:
    return Column(f"{objective}_weight", pa.float64(), f"loss weight of the {objective!r} objective (0 = off)")


def metric_column(name: str, doc: str) -> Column:
    return Column(name, pa.float64(), doc, False)


RUN_COLUMNS: tuple[Column, ...] = (
    Column("run_id", pa.string(), "the run's name: VARIANT-sSEED for measurement runs, search-TRIAL for search trials"),
    Column("phase", pa.string(), f"which phase ran it: {' | '.join(PHASES)}"),
    Column("variant", pa.string(), "named variant (a set of loss weights and an input format), or custom/best_mix"),
    # <objective>_weight columns go here (weight_column), one per registered objective
    Column("mask_ratio", pa.float64(), "share of maskable tokens masked in training"),
    Column("masking", pa.string(), "masking strategy: token | whole_word", False),
    Column("input_format", pa.string(), "pretraining input: single (one segment) | nsp_pairs (A/B, B random half "
           "the time) | sop_pairs (A/B, swapped half the time) | full_sentences (the step's chunks packed into full "
           "rows across documents, a [SEP] between them) | sentence_pairs (each chunk's sentence pairs packed in its "
           "row, each attending to itself only)", False),
    Column("pretrain_seed", pa.int64(), "pretraining seed: initial weights, masking and (data_order per_seed) data; "
           "0..P-1 for every measured variant, and for search trials a reserved seed (10000 + run.seed) that no "
           "measurement run uses, so best_mix's measurements never include the trial the search chose"),
    Column("data_order", pa.string(), "per_seed: the pretraining seed also set chunking, pairs and batch order; "
           "fixed: one data order (data_seed) for every seed", False),
    Column("data_seed", pa.int64(), "the seed of chunking, pairs and batch order this run used", False),
    Column("status", pa.string(), f"{' | '.join(STATUSES)}"),
    Column("stop_reason", pa.string(), "why a run did not complete (ASHA rung, NaN loss, error); empty if completed",
           False),
    Column("steps", pa.int64(), "optimizer steps trained", False),
    Column("tokens_seen", pa.int64(), "real (non-padding) tokens trained on", False),
    Column("tokens_per_step", pa.float64(), "real tokens per optimizer step on average (tokens_seen / steps): "
           "single rows ([CLS] A B+ [SEP], B+ with the document's next token) hold as many as pair rows of the "
           "same chunk but where the chunk ends its document (one fewer)", False),
    Column("masked_per_step", pa.float64(), "masked (MLM / generator) positions per optimizer step on average: the "
           "same per row in every input format for the same chunk (0 without masking; NaN where not recorded)",
           False),
    Column("epochs", pa.float64(), "passes over the pretraining corpus", False),
    Column("budget", pa.string(), "what the run could spend (optim.budget): steps | tokens | flops (then every "
           "variant spent what full spends in optim.max_steps)", False),
    Column("train_flops", pa.float64(), "training FLOPs spent (trainables.flops: matmuls, forward + backward)", False),
    Column("wall_time_s", pa.float64(), "training wall time in seconds", False),
    Column("precision", pa.string(), "what the pretraining step ran in (run.precision resolved on its device; for none, "
           "which trains 0 steps, what it would have): bf16 | fp32; empty where the run recorded none", False),
    Column("allocator", pa.string(), "the host allocator rule in force at the run's end: retain | system (system also "
           "where run.allocator=retain could not apply: run.json's allocator_why says why); empty where not recorded",
           False),
    # intrinsic metric columns go here (metric_column), one per metric the objectives and diagnostics report
    Column("collapsed", pa.bool_(), f"the raw collapse diagnostic fired: token cosine > {COLLAPSE_TOKEN_COSINE} or "
           f"[CLS] cosine > {COLLAPSE_CLS_COSINE} (absolute thresholds; a random-init encoder exceeds them at small "
           f"scale). Not the report's flag: analysis.flags flags a variant collapsed when a cosine is within "
           f"{COLLAPSE_DISTANCE:g} of 1 and closer to 1 than none's of the same seed (or at most {COLLAPSE_VS_NONE:g} "
           f"of none's distance from 1) and its fine-tuning predicts one label for >= {COLLAPSE_MAJORITY_SHARE:.0%} "
           f"of test examples on half its label tasks or more"),
    Column("probe_score", pa.float64(), "mean linear-probe dev score of the probe tasks (search trials)"),
    Column("checkpoint", pa.string(), "where the final checkpoint is (local path or s3:// / gs:// URI)", False),
    Column("snapshot_of", pa.string(), "for a snapshot row (phase snapshot, run_id <run>@<step>): the measure run "
           "whose encoder was kept at this step (run.snapshots; its steps, tokens_seen and intrinsic metrics are "
           "the snapshot's); '' otherwise", False),
    Column("config_json", pa.string(), "the run's whole configuration as JSON", False),
)
EVAL_COLUMNS: tuple[Column, ...] = (
    Column("run_id", pa.string(), "the pretraining run (runs.run_id) whose checkpoint was fine-tuned"),
    Column("task", pa.string(), "downstream task as reported (MNLI: mnli_m and mnli_mm)"),
    Column("finetune_seed", pa.int64(), "fine-tuning seed (head initialisation, training subset, order)"),
    Column("mode", pa.string(), "finetune (full fine-tuning) | probe (frozen encoder, logistic regression) | "
           "probe@N (the probe fitted on N labels) | probe-emb (the probe of the embedding layer's output) | "
           "baseline-tfidf (single, pair: TF-IDF logistic regression on the probe's training labels, no encoder) | "
           "baseline-tag (tagging: the most frequent tag per word in them) (finetune.text_baselines; QA has none)"),
    Column("metric", pa.string(), "metric name (trainables.metrics)"),
    Column("value", pa.float64(), "the metric on the test split"),
    Column("is_primary", pa.bool_(), "this metric is the task's headline metric"),
    Column("n_examples", pa.int64(), "test examples scored", False),
    Column("wall_time_s", pa.float64(), "fine-tuning and scoring time in seconds", False),
    Column("source_task", pa.string(), "the registered task this row comes from (mnli for mnli_m and mnli_mm): "
           "tasks sharing it count once in averages", False),
    Column("positive_label", pa.string(), "positive class of binary F1 ('' when the task has none)", False),
    Column("lr", pa.float64(), "fine-tuning learning rate of this row (NaN for the probe)", False),
    Column("dev_value", pa.float64(), "the same metric on the dev split (the probe's: its classifier scored on dev): "
           "what the learning rate is chosen on and whether a task was learned is decided on", False),
    Column("selected", pa.bool_(), "this row's rate is the one chosen on dev for its (run, task): mean dev value "
           "of the selecting metric (selects) over fine-tuning seeds; estimates use only selected rows", False),
    Column("head", pa.string(), "sequence classification head (finetune.head): pooler (BERT's, the checkpoint's "
           "pooler weights; NSP trains them, so full - mlm_pairs includes a trained pooler) | cls (a fresh dense+tanh "
           "on [CLS], the pooler weights unused); '' for heads on token states (tagging, qa) and the probe", False),
    Column("epoch", pa.float64(), "fine-tuning epochs trained when the scored state was reached: with "
           "finetune.keep_best the epoch best on dev (training stops finetune.patience epochs after it), else the "
           "last; NaN for the probe", False),
    Column("dev_majority_share", pa.float64(), "the share of dev examples given the commonest predicted label, for "
           "a label task's fine-tuning (NaN otherwise): a fine-tuning at or above 0.95 predicted one label and is "
           "left out of the estimates (analysis.flags.did_not_learn), decided on dev as the rate is", False),
    Column("probe_c", pa.float64(), "the probe's inverse L2 strength C, chosen on dev per encoder and label budget "
           "from finetune.probe_c_grid (the TF-IDF baseline's likewise; NaN for fine-tuning and the tag baseline)",
           False),
    Column("probe_iters", pa.float64(), "the iterations the probe's solver took at the chosen C; it stopped "
           "unconverged when this equals finetune.probe_max_iter (NaN for fine-tuning and the tag baseline)", False),
    Column("selects", pa.bool_(), "this metric's dev value chose the rate, the epoch and the probe's C "
           "(TaskSpec.selection_metric: macro-F1 for label tasks, which a constant prediction cannot win; else the "
           "headline metric); false in exports written before it was recorded, where the headline chose", False),
)
PREDICTION_COLUMNS: tuple[Column, ...] = (
    Column("run_id", pa.string(), "the pretraining run (runs.run_id)"),
    Column("task", pa.string(), "downstream task as reported"),
    Column("finetune_seed", pa.int64(), "fine-tuning seed"),
    Column("mode", pa.string(), "finetune | probe | probe@N | probe-emb | baseline-tfidf | baseline-tag "
           "(as evals.mode)"),
    Column("example_id", pa.string(), "the test example's id in its task"),
    Column("prediction", pa.string(), "the prediction: a label, a JSON list of tags, or a JSON string answer"),
    Column("gold", pa.string(), "the gold answer in the same encoding (QA: a JSON list of answers)"),
    Column("lr", pa.float64(), "fine-tuning learning rate (only the rate chosen on dev is exported)", False),
)


class EvalRecord(NamedTuple):
    """One evals.parquet row."""

    run_id: str
    task: str
    finetune_seed: int
    mode: str
    metric: str
    value: float
    is_primary: bool
    n_examples: int
    wall_time_s: float
    source_task: str = ""
    positive_label: str = ""
    lr: float = float("nan")
    dev_value: float = float("nan")
    selected: bool = True
    head: str = ""
    epoch: float = float("nan")
    dev_majority_share: float = float("nan")
    probe_c: float = float("nan")
    probe_iters: float = float("nan")
    selects: bool = False


class PredictionRecord(NamedTuple):
    """One predictions.parquet row."""

    run_id: str
    task: str
    finetune_seed: int
    mode: str
    example_id: str
    prediction: str
    gold: str
    lr: float = float("nan")


def columns(table: str, objectives: Sequence[str] = (), metrics: Sequence[tuple[str, str]] = ()) -> tuple[Column, ...]:
    """The columns of ``table``; for runs, one weight column per objective after ``variant`` and one
    column per intrinsic metric ``(name, meaning)`` after ``wall_time_s`` (``collapsed`` is always there)."""
    if table == "runs":
        names = [c.name for c in RUN_COLUMNS]
        at, mt = names.index("variant") + 1, names.index("wall_time_s") + 1
        extra = tuple(metric_column(n, d) for n, d in metrics if n != "collapsed")
        return (RUN_COLUMNS[:at] + tuple(weight_column(o) for o in objectives) + RUN_COLUMNS[at:mt] + extra
                + RUN_COLUMNS[mt:])
    if table == "evals":
        return EVAL_COLUMNS
    if table == "predictions":
        return PREDICTION_COLUMNS
    raise SchemaError(f"unknown table {table!r}; allowed: {', '.join(TABLES)}")


def arrow_schema(table: str, objectives: Sequence[str] = (), code_version: str = "",
                 metrics: Sequence[tuple[str, str]] = ()) -> pa.Schema:
    """The Arrow schema of ``table``, with the schema and code versions in its metadata."""
    meta = {META_SCHEMA: str(SCHEMA_VERSION).encode(), META_CODE: code_version.encode(), META_TABLE: table.encode()}
    return pa.schema([(c.name, c.type) for c in columns(table, objectives, metrics)], metadata=meta)


def build_table(table: str, rows: Iterable[dict[str, Any] | tuple], objectives: Sequence[str] = (),
                code_version: str = "", metrics: Sequence[tuple[str, str]] = ()) -> pa.Table:
    """``rows`` (dicts, or records in column order) as an Arrow table in the schema of ``table``."""
    schema = arrow_schema(table, objectives, code_version, metrics)
    rows = list(rows)
    if rows and not isinstance(rows[0], dict):
        rows = [dict(zip(schema.names, r)) for r in rows]
    return pa.Table.from_pylist(rows, schema=schema)


# Renames between schema versions, applied when an older file is read: {version: {old: new}}.
RENAMED: dict[int, dict[str, str]] = {2: {"primary": "is_primary"}}


def upgrade_columns(names: Sequence[str], version: int) -> dict[str, str]:
    """Old column name -> current name for a table written with schema ``version``."""
    out: dict[str, str] = {}
    for v in sorted(RENAMED):
        if version < v:
            out.update({old: new for old, new in RENAMED[v].items() if old in names})
    return out


def version_of(metadata: dict[bytes, bytes] | None) -> int:
    """The schema version recorded in a file's metadata; files written before versioning count as 1."""
    raw = (metadata or {}).get(META_SCHEMA)
    return int(raw) if raw else 1


def check_version(version: int, what: str) -> None:
    if version > SCHEMA_VERSION:
        raise SchemaError(f"{what} has export schema version {version}, newer than this code's {SCHEMA_VERSION}; "
                          "update bert-objectives to read it")


def objectives_in(names: Iterable[str]) -> tuple[str, ...]:
    """Objective names of the ``<name>_weight`` columns among ``names`` (a runs table's columns)."""
    return tuple(n[:-len("_weight")] for n in names if n.endswith("_weight"))


def data_dictionary(objectives: Sequence[str] = ("mlm", "nsp", "sop"), metrics: Sequence[tuple[str, str]] = ()) -> str:
    """Every column of the three tables with its type and meaning, as Markdown."""
    out = [f"# Export data dictionary (schema version {SCHEMA_VERSION})", ""]
    for table in TABLES:
        out += [f"## {table}.parquet", "", "| column | type | meaning |", "|---|---|---|"]
        out += [f"| `{c.name}` | {c.type} | {c.doc} |" for c in columns(table, objectives, metrics)]
        out.append("")
    return "\n".join(out)
