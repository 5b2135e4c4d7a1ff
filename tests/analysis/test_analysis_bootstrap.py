"""Multi-bootstrap: pairing, seed averaging, reliability, and a small coverage check."""

import numpy as np
import pytest

from analysis.bootstrap import Measurement, multibootstrap
from analysis.validate import SimDesign, run_coverage


def _measurement(acc, n=200, present=None):
    """acc: (V, P, F) accuracies; the first round(acc * n) examples are correct."""
    acc = np.asarray(acc, dtype=float)
    k = np.rint(acc * n).astype(int)
    correct = (np.arange(n) < k[..., None]).astype(float)
    stats = np.stack([correct, np.ones_like(correct)], axis=-1)
    return Measurement("accuracy", stats, np.ones(acc.shape, bool) if present is None else present)


def test_estimate_averages_finetune_seeds_within_pretraining_seed():
    # variant 0: seed 0 has fine-tuning seeds 0.6 and 0.8 (mean 0.7), seed 1 has 0.5 (one present)
    acc = np.array([[[0.6, 0.8], [0.5, 0.9]], [[0.5, 0.5], [0.5, 0.5]], [[0.5, 0.5], [0.5, 0.5]]])
    present = np.ones((3, 2, 2), bool)
    present[0, 1, 1] = False
    iv = multibootstrap([_measurement(acc, present=present)], np.array([[1.0, 0, 0]]),
                        np.random.default_rng(0), n_boot=50)[0]
    assert iv.estimate == pytest.approx((0.7 + 0.5) / 2)  # not (0.6 + 0.8 + 0.5) / 3


def test_paired_resampling_gives_zero_width_for_a_constant_shift():
    rng = np.random.default_rng(0)
    base = rng.uniform(0.4, 0.6, size=(1, 5, 2))
    acc = np.concatenate([base + 0.1, base, base, base])
    # the same examples are correct up to 0.1*n more: a constant difference under pairing except examples
    iv = multibootstrap([_measurement(acc, n=1000)], np.array([[1.0, -1, 0, 0]]), rng, n_boot=200)[0]
    assert iv.estimate == pytest.approx(0.1, abs=2e-3)
    assert iv.lo > 0.05 and iv.hi < 0.15 and iv.p_value < 1e-6 and iv.reliable


def test_fewer_than_three_seeds_is_unreliable():
    acc = np.full((2, 2, 1), 0.5)
    acc[0] += 0.1
    iv = multibootstrap([_measurement(acc)], np.array([[1.0, -1]]), np.random.default_rng(0), n_boot=100)[0]
    assert not iv.reliable and iv.n_seeds == 2


def test_missing_variant_cell_drops_that_seed_from_the_pair_only():
    acc = np.full((2, 4, 1), 0.5)
    acc[0, :, 0] = [0.6, 0.6, 0.6, 0.9]
    present = np.ones((2, 4, 1), bool)
    present[1, 3, 0] = False  # variant 1 lacks seed 3: seed 3 leaves the difference
    ivs = multibootstrap([_measurement(acc, present=present)], np.array([[1.0, -1], [1.0, 0]]),
                         np.random.default_rng(0), n_boot=100)
    assert ivs[0].estimate == pytest.approx(0.1) and ivs[0].n_seeds == 3
    assert ivs[1].estimate == pytest.approx(0.675) and ivs[1].n_seeds == 4


def test_bad_input_is_named():
    m = _measurement(np.full((2, 3, 1), 0.5))
    with pytest.raises(ValueError, match="3 columns for 2 variants"):
        multibootstrap([m], np.ones((1, 3)), np.random.default_rng(0))
    with pytest.raises(ValueError, match="level=1.5"):
        multibootstrap([m], np.ones((1, 2)), np.random.default_rng(0), level=1.5)


def test_an_average_is_not_surer_than_its_tasks_when_their_seed_effects_cancel():
    # the export: each task's interval includes 0, yet the per-seed means over tasks agree
    # (seed 0 helps task a and hurts task b, seed 2 the reverse), which once gave p = 2e-10
    a = _measurement(np.array([[[0.8], [0.6], [0.4]], [[0.5], [0.5], [0.5]]]), n=400)
    b = _measurement(np.array([[[0.4], [0.6], [0.8]], [[0.5], [0.5], [0.5]]]), n=400)
    diff = np.array([[1.0, -1.0]])
    tasks = [multibootstrap([m], diff, np.random.default_rng(0), n_boot=400)[0] for m in (a, b)]
    avg = multibootstrap([a, b], diff, np.random.default_rng(0), n_boot=400)[0]
    assert all(t.lo < 0 < t.hi for t in tasks)
    assert avg.estimate == pytest.approx(0.1) and avg.lo < 0 < avg.hi and avg.p_value > 0.05
    assert avg.hi - avg.lo > 0.5 * min(t.hi - t.lo for t in tasks)


def test_task_weights_weigh_the_mean_and_bad_weights_are_named():
    a = _measurement(np.full((2, 3, 1), 0.6))
    b = _measurement(np.full((2, 3, 1), 0.9))
    iv = multibootstrap([a, b], np.array([[1.0, 0]]), np.random.default_rng(0), n_boot=50, task_weights=[0.75, 0.25])[0]
    assert iv.estimate == pytest.approx(0.675)
    with pytest.raises(ValueError, match=r"task_weights=\[0.5, 0.2\] must be 2 non-negative numbers adding up to 1"):
        multibootstrap([a, b], np.array([[1.0, 0]]), np.random.default_rng(0), task_weights=[0.5, 0.2])


def test_vectorised_speed():
    rng = np.random.default_rng(0)
    acc = rng.uniform(0.4, 0.9, size=(6, 5, 3))
    import time
    t = time.perf_counter()
    multibootstrap([_measurement(acc, n=3000)], np.eye(6), rng, n_boot=1000)
    assert time.perf_counter() - t < 15


def test_coverage_small_version():
    # 120 simulations x 18 rows, single task and the three-task average; nominal 0.95. The binomial sd
    # at n=120 is 0.02, so the pooled coverage (rows are correlated, count it as n=120) must lie within
    # ~3 sd, each row within ~4.5 sd; Holm's family-wise error on the 60 null designs stays near 0.05.
    res = run_coverage(120, SimDesign(pretrain_seeds=3, examples=150, n_boot=200), np.random.default_rng(7))
    assert 0.89 <= res.coverage <= 0.995 and 0.89 <= res.average_coverage <= 0.995, res
    assert all(0.85 <= c <= 1.0 for c in res.per_contrast.values()), res.per_contrast
    assert all(0.85 <= c <= 1.0 for c in res.average_per_contrast.values()), res.average_per_contrast
    assert res.fwer_holm <= 0.12 < res.fwer_raw, res
