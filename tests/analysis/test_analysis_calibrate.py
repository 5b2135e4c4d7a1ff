"""The A/A calibration: the two designs (the paired arms share everything but their masks, the unpaired
nothing), replicate construction and the effective number of independent replicates, the statistics on a
simulated pool (truth 0, and a known false-positive rate), and the real path end to end on a tiny smoke
pool (slow)."""

import json
import shutil

import numpy as np
import pytest
import torch
from scipy import stats as sps

from analysis.calibrate import (ARM_A, ARM_B, Cell, aa_cells, aa_export, calibrate, clopper_pearson,
                                draw_replicates, effective_interval, main, pool_config, simulated_pool, summarise)
from trainables.data.batches import Position, positions_from
from trainables.data.samples import IGNORE
from trainables.pretrain import build_pretraining_data, initial_model

SYNTHETIC = ["data.corpus=synthetic", "data.max_documents=80", "run.tensorboard=false"]


# ------------------------------------------------------------------------------------------- the designs
@pytest.fixture(scope="module")
def arms(tmp_path_factory):
    """Seed 0's two paired arms (mask streams 0 and 1) and an unpaired partner (seed 1), built by the pool's
    own config on the synthetic corpus."""
    cache = tmp_path_factory.mktemp("cache")
    draws = draw_replicates("paired", range(4), 2, 2, np.random.default_rng(0))
    (a, b) = draws.arms[0]
    seed = a[0][0]
    other = next(s for s in range(4) if s != seed)
    keys = {"A": a[0], "B": b[0], "unpaired": (other, 0)}
    assert keys["A"] == (seed, 0) and keys["B"] == (seed, 1)
    return {name: pool_config("smoke", "full", SYNTHETIC + [f"data.cache_dir={cache}"], k) for name, k in keys.items()}


def _walk(cfg, steps=12):
    """The chunks (ids) and the masked global batch of each of the first ``steps`` steps."""
    data = build_pretraining_data(cfg)
    walk = list(positions_from(data.steps, Position(0, 0, 0, 0), steps))
    return ([data.steps.phases[p.phase].batch_chunks(p.epoch, p.batch)[0].tolist() for p in walk],
            [data.steps.batch(p) for p in walk])


def _unmasked(batch):
    """The batch's input ids with every masked position's original token put back."""
    ids = batch.input_ids.clone()
    rows, cols = torch.nonzero(batch.mlm_labels != IGNORE, as_tuple=True)
    ids[rows, batch.mlm_positions[rows, cols]] = batch.mlm_labels[rows, cols]
    return ids


def test_paired_arms_share_every_batch_but_their_masks_and_unpaired_arms_share_nothing(arms):
    (chunks_a, a), (chunks_b, b), (chunks_u, u) = (_walk(arms[k]) for k in ("A", "B", "unpaired"))
    assert chunks_a == chunks_b and chunks_a != chunks_u  # the unpaired arm: another data order
    moved = 0
    for x, y in zip(a, b):
        for name in ("token_type_ids", "attention_mask", "pair_labels"):
            assert torch.equal(getattr(x, name), getattr(y, name)), name
        assert torch.equal(_unmasked(x), _unmasked(y))  # the same chunks, pairs and negatives in the same rows
        assert torch.equal((x.mlm_labels != IGNORE).sum(1), (y.mlm_labels != IGNORE).sum(1))  # as many per row
        either = torch.zeros_like(x.input_ids, dtype=torch.bool)
        for m in (x, y):
            r, c = torch.nonzero(m.mlm_labels != IGNORE, as_tuple=True)
            either[r, m.mlm_positions[r, c]] = True
        assert torch.equal(x.input_ids[~either], y.input_ids[~either])  # differ only where either masks
        moved += not torch.equal(x.mlm_positions, y.mlm_positions)
    assert moved == len(a)  # other masks at every step
    assert not any(torch.equal(_unmasked(x), _unmasked(z)) for x, z in zip(a, u))  # and other inputs at every step


def test_paired_arms_start_from_the_same_weights_and_unpaired_arms_do_not(arms):
    weights = {k: initial_model(cfg, build_pretraining_data(cfg)).state_dict() for k, cfg in arms.items()}
    assert all(torch.equal(weights["A"][n], weights["B"][n]) for n in weights["A"])
    assert not torch.equal(weights["A"]["bert.embeddings.word_embeddings.weight"],
                           weights["unpaired"]["bert.embeddings.word_embeddings.weight"])


def test_paired_arms_draw_the_same_finetuning_subset_head_and_order_and_unpaired_arms_do_not(
        arms, tiny_checkpoint, tmp_path, monkeypatch):
    from test_finetune_draws import _subsets  # the training rows and head init each fine-tuning seed used

    seen = {}
    for name, cfg in arms.items():
        path = tmp_path / name
        shutil.copytree(tiny_checkpoint, path)  # one checkpoint's weights, with the arm's run.json
        (path / "run.json").write_text(json.dumps({"status": "completed", "config": cfg.to_dict()}))
        seen[name] = _subsets(path, monkeypatch)
    assert seen["A"] == seen["B"]
    heads = lambda x: [v for k, v in x if k == "head"]  # noqa: E731
    rows = lambda x: [v for k, v in x if k == "rows"]  # noqa: E731
    assert heads(seen["A"]) != heads(seen["unpaired"]) and rows(seen["A"]) != rows(seen["unpaired"])


# ------------------------------------------------------------------------------------ replicates, export
def test_replicates_get_their_own_runs_when_the_pool_allows_and_say_how_many_are_independent():
    rng = np.random.default_rng(0)
    d = draw_replicates("unpaired", range(12), 3, 5, rng)  # 12 seeds hold 2 disjoint replicates of 2 x 3
    assert (d.independent, len(d.arms)) == (2, 5)
    for a, b in d.arms:
        assert len(a) == len(b) == 3 and not set(a) & set(b) and {s for s, m in a + b} <= set(range(12))
        assert {m for _, m in a + b} == {0}
    d = draw_replicates("unpaired", range(30), 3, 5, rng)  # 2 P R = 30: every replicate its own runs
    used = [s for a, b in d.arms for s, _ in a + b]
    assert d.independent == 5 and len(used) == len(set(used)) == 30
    d = draw_replicates("paired", range(15), 3, 5, rng)  # P R = 15: each replicate its own 3 seeds, 2 runs each
    assert d.independent == 5
    for a, b in d.arms:
        assert [s for s, _ in a] == [s for s, _ in b] and {m for _, m in a} == {0} and {m for _, m in b} == {1}
    seeds = [s for a, _ in d.arms for s, _ in a]
    assert len(seeds) == len(set(seeds)) == 15
    assert draw_replicates("paired", range(7), 3, 5, rng).independent == 2  # floor(7 / 3) disjoint replicates
    with pytest.raises(ValueError, match="needs >= 6"):
        draw_replicates("unpaired", range(5), 3, 1, rng)
    with pytest.raises(ValueError, match="allowed: paired, unpaired"):
        draw_replicates("crossed", range(12), 3, 1, rng)


def test_the_export_copy_renames_arm_b_and_pairs_the_arms_on_seed_indices():
    keys = [(s, m) for s in range(8) for m in (0, 1)]
    pool, runs_of = simulated_pool(keys, np.random.default_rng(1), tasks=("sim_a",), examples=40)
    a, b = [runs_of[(s, 0)] for s in (5, 1, 6)], [runs_of[(s, 1)] for s in (5, 1, 6)]  # paired: one seed per index
    assert b == ["full-s5-m1", "full-s1-m1", "full-s6-m1"]
    ex = aa_export(pool, a, b)
    runs = ex.runs.set_index("run_id")
    assert list(runs.loc[a, "variant"]) == [ARM_A] * 3 and list(runs.loc[b, "variant"]) == [ARM_B] * 3
    assert list(runs.loc[a, "pretrain_seed"]) == list(runs.loc[b, "pretrain_seed"]) == [0, 1, 2]
    assert set(ex.evals["run_id"]) == set(ex.predictions["run_id"]) == set(a + b)  # the other runs are left out
    assert set(pool.runs["variant"]) == {"full"}  # the pool itself is not changed
    with pytest.raises(ValueError, match="disjoint"):
        aa_export(pool, a, [a[0], *b[1:]])


def test_the_analysis_derives_exactly_the_b_minus_a_contrast():
    pool, runs_of = simulated_pool([(s, 0) for s in range(6)], np.random.default_rng(2), tasks=("sim_a", "sim_b"),
                                   examples=60)
    cells, rows = aa_cells(aa_export(pool, [runs_of[(s, 0)] for s in (0, 1, 2)], [runs_of[(s, 0)] for s in (3, 4, 5)]),
                           np.random.default_rng(0), n_boot=100)
    assert set(rows) == {"sim_a", "sim_b", "average (finetune)"}
    assert sorted(c.row for c in cells) == sorted(rows)  # one cell per learned row, averages included
    assert all(c.lo <= c.estimate <= c.hi and 0 <= c.p_value <= c.p_adjusted <= 1 for c in cells)


# ------------------------------------------------------------------------------------------- the summary
def _cell(row, lo, hi, call=False):
    return Cell(row, (lo + hi) / 2, lo, hi, 0.01 if call else 0.5, 0.02 if call else 1.0, call)


def test_summary_counts_shares_coverage_and_the_holm_family():
    reps = [([_cell("t1", -1, 1), _cell("t2", 0.1, 0.3, call=True)], ("t1", "t2")),
            ([_cell("t1", 0.2, 0.4), _cell("t2", -1, 1)], ("t1", "t2")),
            ([_cell("t1", -1, 1)], ("t1", "t2"))]  # t2 not learned in the third replicate
    rows, family, any_raw = summarise(reps)
    by = {r.row: r for r in rows}
    assert (by["t1"].replicates, by["t1"].false_positives, by["t1"].not_computed) == (3, 1, 0)
    assert (by["t2"].replicates, by["t2"].false_positives, by["t2"].not_computed) == (2, 1, 1)
    assert by["t1"].coverage == pytest.approx(2 / 3) and by["t1"].mean_width == pytest.approx((2 + 0.2 + 2) / 3)
    assert by["t1"].share_ci == pytest.approx(clopper_pearson(1, 3)) and by["t1"].effective == 3
    pooled = by["every task cell (pooled)"]
    assert (pooled.replicates, pooled.false_positives, pooled.not_computed) == (5, 2, 1)
    assert pooled.effective == 3  # its 5 cells come from 3 replicates: each counts once
    assert pooled.share_ci == pytest.approx(clopper_pearson(2 / 5 * 3, 3))
    assert family.false_positives == 1 and family.replicates == 3  # only the called cell counts
    assert any_raw == pytest.approx(2 / 3)


def test_intervals_of_replicates_that_share_runs_are_sized_by_the_independent_ones():
    reps = [([_cell("t", 0.1, 0.3, call=True) if i < 2 else _cell("t", -1, 1)], ("t",)) for i in range(20)]
    rows, family, _ = summarise(reps, independent=4)  # 20 replicates from a pool holding 4 disjoint ones
    t = rows[0]
    assert (t.replicates, t.false_positives, t.share, t.effective) == (20, 2, 0.1, 4)
    assert t.share_ci == pytest.approx(clopper_pearson(0.4, 4))  # 10% of 4 independent trials
    assert t.share_ci[1] > clopper_pearson(2, 20)[1] + 0.3  # far wider than 20 trials would give
    assert family.effective == 4 and family.share_ci == pytest.approx(clopper_pearson(0.4, 4))
    assert summarise(reps, independent=20)[0][0].share_ci == pytest.approx(clopper_pearson(2, 20))  # independent


def test_clopper_pearson():
    assert clopper_pearson(0, 40)[0] == 0 and clopper_pearson(0, 40)[1] == pytest.approx(1 - 0.025 ** (1 / 40))
    lo, hi = clopper_pearson(2, 40)
    assert 0.006 < lo < 0.007 and 0.16 < hi < 0.17
    assert clopper_pearson(40, 40)[1] == 1.0
    assert clopper_pearson(0.5, 4)[0] < clopper_pearson(1, 4)[0] < clopper_pearson(1.5, 4)[0]  # effective counts
    assert effective_interval(3, 30, 10) == pytest.approx(clopper_pearson(1, 10))


def test_intervals_on_the_independent_n_cover_a_known_rate_where_the_binomial_on_r_does_not():
    # Known truth: runs are N(0, 1) draws, a replicate's cell excludes 0 when its arms' means differ by more
    # than c, so its false-positive rate is exactly 20%. Each of 300 calibrations draws 20 replicates from a
    # pool of 12 runs (2 disjoint replicates of 2 x 3): the binomial interval on R = 20 ignores that they share
    # runs and misses the truth far more often than 5%; the interval on the independent n does not.
    p, r, rate = 3, 20, 0.2
    c = sps.norm.ppf(1 - rate / 2) * np.sqrt(2 / p)
    rng = np.random.default_rng(11)
    naive = effective = 0
    for _ in range(300):
        x = rng.normal(size=12)
        d = draw_replicates("unpaired", range(12), p, r, rng)
        reps = []
        for a, b in d.arms:
            diff = x[[s for s, _ in b]].mean() - x[[s for s, _ in a]].mean()
            reps.append(([_cell("t", diff - c, diff + c)], ("t",)))
        lo, hi = summarise(reps, independent=d.independent)[0][0].share_ci
        effective += lo <= rate <= hi
        k = sum(cells[0].excludes_zero for cells, _ in reps)
        lo, hi = clopper_pearson(k, r)
        naive += lo <= rate <= hi
    assert d.independent == 2
    assert naive / 300 < 0.92 and effective / 300 >= 0.95


def test_false_positive_share_is_near_alpha_on_a_null_pool_in_both_designs():
    # Independent replicates from a pool with sizeable seed and seed x example effects: intervals that ignored
    # the seed spread would exclude 0 far more often than 5%. Deterministic (fixed seeds).
    rng = np.random.default_rng(7)
    draws = [draw_replicates(design, range(2 * 3 * 30), 3, 30, rng) for design in ("paired", "unpaired")]
    pool, runs_of = simulated_pool(set().union(*(d.keys for d in draws)), rng, tasks=("sim_a",), examples=60)
    for d in draws:
        result = calibrate(pool, runs_of, d, rng, n_boot=150)
        (row,) = [r for r in result.rows if r.row == "sim_a"]
        assert result.independent and result.effective_replicates == 30 and row.replicates >= 25
        assert row.share <= 0.15 and row.coverage == pytest.approx(1 - row.share)
        assert result.family.share <= 0.15 and result.design["design"] == d.design


@pytest.mark.slow
def test_calibration_of_a_tiny_smoke_pool_runs_end_to_end_and_resumes(tmp_path, capsys):
    argv = ["--preset", "smoke", "--design", "both", "--pool", "2", "--seeds", "1", "--replicates", "2",
            "--tasks", "hedge", "--mode", "probe", "--boot", "100", "--out", str(tmp_path), "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    paired, unpaired = out["calibrations"]["paired"], out["calibrations"]["unpaired"]
    assert paired["independent"] and paired["effective_replicates"] == 2  # 2 seeds: 2 replicates of 1 seed
    assert not unpaired["independent"] and unpaired["effective_replicates"] == 1  # 2 seeds: 1 replicate of 2 x 1
    assert unpaired["design"]["tasks"] == ["hedge"] and unpaired["design"]["runs"] == 4  # s0, s1 and their m1
    assert [r["row"] for r in paired["rows"]] == ["hedge (probe)", "every task cell (pooled)"]
    assert paired["rows"][0]["replicates"] == 2
    assert (tmp_path / "export" / "runs.parquet").exists() and (tmp_path / "pool" / "full-s1-m1" / "run.json").exists()
    first = out["wall_s"]
    assert main(argv) == 0  # the pool is cached: nothing is trained again
    again = json.loads(capsys.readouterr().out)
    assert again["calibrations"]["paired"]["rows"] == paired["rows"] and again["wall_s"] < first
