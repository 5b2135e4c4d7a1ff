"""The export schema module: one definition, versioned files, a newer version refused in one line."""

import pyarrow.parquet as pq
import pytest

from analysis.export import ExportError, load_export
from trainables import schema


def _write(tmp_path, version=None):
    for name in schema.TABLES:
        table = schema.build_table(name, [], ("mlm", "nsp"), code_version="test")
        if version is not None:
            table = table.replace_schema_metadata({**table.schema.metadata, schema.META_SCHEMA: str(version).encode()})
        pq.write_table(table, tmp_path / f"{name}.parquet")


def test_tables_carry_versions_and_weight_columns_per_objective(tmp_path):
    _write(tmp_path)
    meta = pq.read_schema(tmp_path / "runs.parquet").metadata
    assert schema.version_of(meta) == schema.SCHEMA_VERSION and meta[schema.META_CODE] == b"test"
    assert load_export(tmp_path).objectives == ("mlm", "nsp")


def test_a_newer_schema_version_is_refused_in_one_line(tmp_path):
    _write(tmp_path, version=schema.SCHEMA_VERSION + 1)
    with pytest.raises(ExportError, match="newer than this code") as err:
        load_export(tmp_path)
    assert len(str(err.value).splitlines()) == 1


def test_records_follow_the_column_order():
    assert schema.EvalRecord._fields == tuple(c.name for c in schema.EVAL_COLUMNS)
    assert schema.PredictionRecord._fields == tuple(c.name for c in schema.PREDICTION_COLUMNS)


def test_data_dictionary_lists_every_column():
    text = schema.data_dictionary(("mlm", "rtd"))
    for name in schema.TABLES:
        assert all(f"`{c.name}`" in text for c in schema.columns(name, ("mlm", "rtd")))
    assert "`rtd_weight`" in text


def test_an_export_from_before_the_rename_still_reads(tmp_path):
    """Schema 1 named the headline-metric flag ``primary`` (an SQL keyword); it is read as is_primary."""
    import pandas as pd

    _write(tmp_path)
    old = pd.DataFrame([dict(run_id="full-s0", task="sentiment", finetune_seed=0, mode="finetune",
                             metric="accuracy", value=0.7, primary=True)])
    old.to_parquet(tmp_path / "evals.parquet")  # no version metadata, as schema 1 files were written
    evals = load_export(tmp_path).evals
    assert "primary" not in evals.columns and evals["is_primary"].tolist() == [True]
