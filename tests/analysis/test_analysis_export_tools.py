"""An export opens in the usual notebook tools: pandas, polars and DuckDB with plain SQL."""

import pandas as pd
import pytest

import duckdb  # noqa: E402  (dev dependencies: the export must open in them)
import polars as pl  # noqa: E402


def _expected(root):
    ev = pd.read_parquet(root / "evals.parquet")
    return ev[ev["is_primary"]].groupby("task")["value"].mean().sort_index()


def test_export_opens_in_pandas_polars_and_duckdb(seed_export):
    expected = _expected(seed_export)
    assert expected.to_dict() == pytest.approx({"sst": 0.67, "topic": 0.67})  # mean of SEED_MEANS
    polars = (pl.read_parquet(seed_export / "evals.parquet").filter(pl.col("is_primary"))
              .group_by("task").agg(pl.col("value").mean()).sort("task"))
    assert polars["value"].to_list() == pytest.approx(expected.tolist())
    sql = (f"SELECT task, avg(value) AS value FROM '{seed_export / 'evals.parquet'}' "
           "WHERE is_primary GROUP BY task ORDER BY task")
    rows = duckdb.sql(sql).fetchall()
    assert [r[0] for r in rows] == list(expected.index) and [r[1] for r in rows] == pytest.approx(expected.tolist())
    joined = duckdb.sql(f"SELECT r.variant, count(*) FROM '{seed_export / 'runs.parquet'}' r JOIN "
                        f"'{seed_export / 'evals.parquet'}' e USING (run_id) WHERE e.is_primary "
                        "GROUP BY r.variant ORDER BY r.variant").fetchall()
    assert dict(joined) == {v: 3 * 2 * 2 for v in ("full", "mlm_only", "mlm_pairs", "nsp_only", "none")}
