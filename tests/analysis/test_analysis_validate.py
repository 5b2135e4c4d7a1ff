"""The validation command: coverage, Holm and the average row as JSON; predicted power vs detection."""

import json

import numpy as np
import pytest

from analysis.validate import main, run_power


def test_validate_cli_json(capsys):
    assert main(["--simulations", "6", "--boot", "100", "--json", "--seed", "3", "--pretrain-seeds", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 6 and out["n_null"] == 3 and 0 <= out["coverage"] <= 1 and out["seconds"] > 0
    assert 0 <= out["average_coverage"] <= 1 and 0 <= out["fwer_holm"] <= out["fwer_raw"] <= 1
    assert set(out["per_contrast"]) >= {"MLM contribution (full - nsp_only)", "full - none",
                                        "NSP loss effect with MLM (full - mlm_pairs)",
                                        "MLM x NSP interaction (nsp_pairs)"}


def test_predicted_power_matches_the_detection_rate():
    designs = [("weak seeds", 0.16, 0.04, 3), ("strong seeds", 0.16, 0.08, 3)]  # power ~0.7 and ~0.3
    points, _ = run_power(reps=150, n_boot=200, rng=np.random.default_rng(5), designs=designs, seeds_design=None,
                          truth_reps=500)
    for p in points:  # binomial sd at 150 runs <= 0.041; the predicted power itself carries Monte Carlo error
        assert abs(p.observed - p.predicted) < 0.13, p
        assert 0.6 < p.seed_var_ratio < 1.6, p  # the bootstrap's seed/example split is unbiased
    assert points[0].observed > points[1].observed + 0.2  # more seed spread, less power


def test_draws_are_nested_in_pretraining_seeds_or_shared_by_every_run():
    from analysis.simulate import Noise, draw_effects

    noise = Noise(0.1, 0.3, 0.1, 1.0, 0.2, draw=0.2, variant_draw=0.3)
    nested = draw_effects(noise, 7, 3, 2, "nested", np.random.default_rng(0))
    crossed = draw_effects(noise, 7, 3, 2, "crossed", np.random.default_rng(0))
    assert nested.shape == crossed.shape == (7, 3, 2, 1)
    assert not np.allclose(nested[:, 0], nested[:, 1])  # each pretraining seed draws anew
    assert np.allclose(crossed[:, 0], crossed[:, 1]) and np.allclose(crossed[:, 0], crossed[:, 2])
    assert not draw_effects(noise, 7, 3, 2, "independent", np.random.default_rng(0)).any()


def test_coverage_holds_with_nested_draws_and_falls_with_shared_ones():
    """A variant x draw interaction as large as the variant-seed effect, one fine-tuning draw (F = 1):
    nested in pretraining seeds (the design that runs) the intervals cover; one draw shared by every run
    is never resampled, and they undercover (measured at 300 simulations: 0.967 vs about 0.88)."""
    from analysis.simulate import SimDesign
    from analysis.validate import run_coverage

    cov = {d: run_coverage(30, SimDesign(3, 1, 150, 200, draws=d), np.random.default_rng(1)).coverage
           for d in ("nested", "crossed")}
    assert cov["nested"] >= 0.92, cov
    assert cov["crossed"] <= cov["nested"] - 0.04, cov


def test_each_holm_family_holds_its_error_under_the_null():
    """The report adjusts the primary question (MLM over none, NSP's loss effect) and the other cells as two
    families; validate measures each one's family-wise error on null designs. A p-value that is too small
    (e.g. the seed part's df taken at face value) would push these towards the raw rate."""
    from analysis.contrasts import PRIMARY
    from analysis.simulate import SimDesign, sim_contrasts, sim_families
    from analysis.validate import run_coverage

    names, weights = sim_contrasts()
    fams = sim_families()
    primary = {n for n, f in zip(names[2:], fams) if f == "primary"}
    assert len(primary) == len(PRIMARY) and "secondary" in fams
    r = run_coverage(60, SimDesign(3, 1, 150, 200), np.random.default_rng(2))
    assert set(r.fwer_family) == {"primary", "secondary"} and r.n_null == 30
    assert r.fwer_family["primary"] <= 0.1 and r.fwer_family["secondary"] <= 0.15, r.fwer_family


def test_the_rule_across_a_curves_points_holds_the_family_wise_error_that_point_by_point_calls_lose():
    """Null curves of 6 points: judged point by point, the primary family is falsely called somewhere on about a
    quarter of them; under Holm at 0.05/6 per point (analysis.curves), on at most the nominal 5%."""
    from analysis.simulate import SimDesign
    from analysis.validate import run_curves

    r = run_curves(60, 6, SimDesign(n_boot=200), np.random.default_rng(11))
    assert len(r.coverage) == 6 and all(0.85 < c <= 1 for c in r.coverage)
    assert r.fwer_per_point >= 0.12 and r.fwer_curve <= 0.1, r  # 60 curves: the docs run 1,000


def test_curve_shape_counts_only_null_rows_and_the_old_rule_is_never_stricter():
    """In a sweep's shape (rows read at every point, rows at the end only), a call on a row with a true effect is
    not an error: with every every-point row carrying a large effect and one null row at the end, false calls stay
    rare; counted wrongly, they would be near 1. Judging a row at 0.05 / its own points (the rule before) is never
    stricter than at 0.05 / K, so its error rate is at least the rule's."""
    from analysis.validate import curve_shape_text, run_curve_shape

    r = run_curve_shape(30, 3, 2, 1, 4, np.random.default_rng(5), true_rows=2, effect=0.5, examples=200, n_boot=100)
    assert r.n == 30 and r.fwer <= 0.2 and r.fwer <= r.fwer_by_own_points and r.fwer_upper > r.fwer
    assert r.true_detected > 0.9  # the large true effects are found: the design can call something
    assert "partial null (2 rows with a true effect)" in curve_shape_text(r)
    null = run_curve_shape(30, 3, 2, 1, 4, np.random.default_rng(6), examples=200, n_boot=100)
    assert null.fwer <= null.fwer_by_own_points


def test_curve_shape_refuses_a_design_that_cannot_call_anything(capsys):
    from analysis.validate import main

    with pytest.raises(SystemExit):
        main(["--curves", "3", "--curve-rows", "2,1", "--pretrain-seeds", "2", "--simulations", "2"])
    assert "--pretrain-seeds 2 with --curve-rows: at least 3" in capsys.readouterr().err
