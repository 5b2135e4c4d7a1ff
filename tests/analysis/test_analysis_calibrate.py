"""The A/A calibration: replicate construction, the statistics on a simulated pool (truth 0), and the real
path end to end on a tiny smoke pool (slow)."""

import json

import numpy as np
import pytest

from analysis.calibrate import (ARM_A, ARM_B, Cell, aa_cells, aa_export, calibrate, clopper_pearson,
                                draw_replicates, main, simulated_pool, summarise)


def test_replicates_are_two_disjoint_arms_and_say_whether_they_share_runs():
    rng = np.random.default_rng(0)
    draws, independent = draw_replicates(range(12), 3, 5, rng)
    assert not independent and len(draws) == 5
    for a, b in draws:
        assert len(a) == len(b) == 3 and not set(a) & set(b) and set(a) | set(b) <= set(range(12))
    draws, independent = draw_replicates(range(30), 3, 5, rng)  # 2 P R = 30: every replicate its own runs
    used = [s for a, b in draws for s in a + b]
    assert independent and len(used) == len(set(used)) == 30
    with pytest.raises(ValueError, match="disjoint arms"):
        draw_replicates(range(5), 3, 1, rng)


def test_the_export_copy_renames_arm_b_and_pairs_the_arms_on_seed_indices():
    pool, seeds_of = simulated_pool(8, np.random.default_rng(1), tasks=("sim_a",), examples=40)
    a, b = [seeds_of[s] for s in (5, 1, 6)], [seeds_of[s] for s in (0, 7, 3)]
    ex = aa_export(pool, a, b)
    runs = ex.runs.set_index("run_id")
    assert list(runs.loc[a, "variant"]) == [ARM_A] * 3 and list(runs.loc[b, "variant"]) == [ARM_B] * 3
    assert list(runs.loc[a, "pretrain_seed"]) == list(runs.loc[b, "pretrain_seed"]) == [0, 1, 2]
    assert set(ex.evals["run_id"]) == set(ex.predictions["run_id"]) == set(a + b)  # the other runs are left out
    assert set(pool.runs["variant"]) == {"full"}  # the pool itself is not changed
    with pytest.raises(ValueError, match="disjoint"):
        aa_export(pool, a, [a[0], *b[1:]])


def test_the_analysis_derives_exactly_the_b_minus_a_contrast():
    pool, seeds_of = simulated_pool(6, np.random.default_rng(2), tasks=("sim_a", "sim_b"), examples=60)
    cells, rows = aa_cells(aa_export(pool, [seeds_of[s] for s in (0, 1, 2)], [seeds_of[s] for s in (3, 4, 5)]),
                           np.random.default_rng(0), n_boot=100)
    assert set(rows) == {"sim_a", "sim_b", "average (finetune)"}
    assert sorted(c.row for c in cells) == sorted(rows)  # one cell per learned row, averages included
    assert all(c.lo <= c.estimate <= c.hi and 0 <= c.p_value <= c.p_adjusted <= 1 for c in cells)


def test_summary_counts_shares_coverage_and_the_holm_family():
    def cell(row, lo, hi, call=False):
        return Cell(row, (lo + hi) / 2, lo, hi, 0.01 if call else 0.5, 0.02 if call else 1.0, call)

    reps = [([cell("t1", -1, 1), cell("t2", 0.1, 0.3, call=True)], ("t1", "t2")),
            ([cell("t1", 0.2, 0.4), cell("t2", -1, 1)], ("t1", "t2")),
            ([cell("t1", -1, 1)], ("t1", "t2"))]  # t2 not learned in the third replicate
    rows, family, any_raw = summarise(reps)
    by = {r.row: r for r in rows}
    assert (by["t1"].replicates, by["t1"].false_positives, by["t1"].not_computed) == (3, 1, 0)
    assert (by["t2"].replicates, by["t2"].false_positives, by["t2"].not_computed) == (2, 1, 1)
    assert by["t1"].coverage == pytest.approx(2 / 3) and by["t1"].mean_width == pytest.approx((2 + 0.2 + 2) / 3)
    pooled = by["every task cell (pooled)"]
    assert (pooled.replicates, pooled.false_positives, pooled.not_computed) == (5, 2, 1)
    assert family.false_positives == 1 and family.replicates == 3  # only the called cell counts
    assert any_raw == pytest.approx(2 / 3)


def test_clopper_pearson():
    assert clopper_pearson(0, 40)[0] == 0 and clopper_pearson(0, 40)[1] == pytest.approx(1 - 0.025 ** (1 / 40))
    lo, hi = clopper_pearson(2, 40)
    assert 0.006 < lo < 0.007 and 0.16 < hi < 0.17
    assert clopper_pearson(40, 40)[1] == 1.0


def test_false_positive_share_is_near_alpha_on_a_null_pool():
    # Independent replicates (pool = 2 P R) from a pool with sizeable seed and seed x example effects: intervals
    # that ignored the seed spread would exclude 0 far more often than 5%. Deterministic (fixed seeds).
    rng = np.random.default_rng(7)
    pool, seeds_of = simulated_pool(2 * 3 * 30, rng, tasks=("sim_a",), examples=60, sd_seed=0.4)
    result = calibrate(pool, seeds_of, 3, 30, rng, n_boot=150)
    (row,) = [r for r in result.rows if r.row == "sim_a"]
    assert result.independent and row.replicates >= 25
    assert row.share <= 0.15 and row.coverage == pytest.approx(1 - row.share)
    assert result.family.share <= 0.15


@pytest.mark.slow
def test_calibration_of_a_tiny_smoke_pool_runs_end_to_end_and_resumes(tmp_path, capsys):
    argv = ["--preset", "smoke", "--pool", "2", "--seeds", "1", "--replicates", "2", "--tasks", "hedge",
            "--mode", "probe", "--boot", "100", "--out", str(tmp_path), "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["replicates"] == 2 and out["design"]["tasks"] == ["hedge"] and not out["independent"]
    assert [r["row"] for r in out["rows"]] == ["hedge (probe)", "every task cell (pooled)"]
    assert out["rows"][0]["replicates"] == 2
    assert (tmp_path / "export" / "runs.parquet").exists() and (tmp_path / "pool" / "full-s1" / "run.json").exists()
    first = out["wall_s"]
    assert main(argv) == 0  # the pool is cached: nothing is trained again
    again = json.loads(capsys.readouterr().out)
    assert again["rows"] == out["rows"] and again["wall_s"] < first
