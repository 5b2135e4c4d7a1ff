"""Holm's family-wise error rate and the power formulas, by simulations with known truth."""

import numpy as np
import pytest

from analysis.bootstrap import Interval
from analysis.inference import contrast_power, holm, mde, power


def test_holm_holds_the_family_wise_error_rate_where_raw_p_values_do_not():
    rng = np.random.default_rng(0)
    p = rng.uniform(size=(4000, 12))  # 12 true null hypotheses per family
    p[:, :3] = rng.uniform(0, 1e-3, size=(4000, 3))  # and 3 real effects
    adjusted = np.array([holm(row) for row in p])
    fwer = (adjusted[:, 3:] < 0.05).any(axis=1).mean()
    assert fwer <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 4000)
    assert (p[:, 3:] < 0.05).any(axis=1).mean() > 0.3  # unadjusted: a false finding in most families
    assert (adjusted[:, :3] < 0.05).mean() > 0.95  # the real effects still come through
    assert np.isnan(holm([0.01, np.nan])[1]) and holm([0.01, np.nan])[0] == pytest.approx(0.01)


@pytest.mark.parametrize("df", [2.0, 8.0, 1e6])
def test_power_predicts_the_detection_rate_of_a_t_test(df):
    rng = np.random.default_rng(int(df))
    se, effect, n = 0.02, 0.05, 20000
    est = rng.normal(effect, se, n)
    se_hat = se * np.sqrt(rng.chisquare(df, n) / df)  # a variance estimated on df degrees of freedom
    from scipy import stats as sps
    detected = (2 * sps.t.sf(np.abs(est) / se_hat, df) < 0.05).mean()
    assert detected == pytest.approx(float(power(effect, se, df)), abs=0.015)


def test_the_minimal_detectable_effect_is_detected_80_percent_of_the_time():
    for df in (2.0, 5.0, 1e6):
        assert float(power(mde(0.03, df), 0.03, df)) == pytest.approx(0.8, abs=1e-6)
    assert float(mde(1.0, 1e6)) == pytest.approx(2.80, abs=0.01)  # the textbook 1.96 + 0.84


def _iv(estimate, seed_var, example_var, seeds=3, df=4.0):
    se = np.sqrt(seed_var + example_var)
    return Interval(estimate, estimate - 2 * se, estimate + 2 * se, 0.1, se, df, seeds, True, 0, 0, seed_var,
                    example_var)


def test_seeds_needed_reach_the_target_power_and_example_noise_cannot_be_bought_with_seeds():
    p = contrast_power(_iv(0.05, seed_var=0.0009, example_var=0.0001))
    assert p.seeds_needed is not None and p.seeds_needed > 3
    from analysis.inference import design_se
    se, df = design_se(0.0009, 0.0001, 3, [p.seeds_needed - 1, p.seeds_needed])
    assert power(0.05, se[0], df[0]) < 0.8 <= power(0.05, se[1], df[1])
    stuck = contrast_power(_iv(0.01, seed_var=0.0001, example_var=0.0004))
    assert stuck.seeds_needed is None and "more test examples needed" in stuck.verdict


def test_the_mde_is_at_holm_first_step_of_the_family_the_calls_use():
    from scipy.stats import norm

    iv = _iv(0.0, seed_var=0.00006, example_var=0.00004, df=1e6)  # se 0.01, known df
    for m in (1, 11, 33):
        p = contrast_power(iv, m=m)
        want = (norm.ppf(1 - 0.05 / (2 * m)) + norm.ppf(0.8)) * iv.se
        assert p.mde == pytest.approx(want, rel=2e-3) and p.m == m
    assert contrast_power(iv, m=11).mde == pytest.approx(0.0368, abs=2e-4)  # 2.84 + 0.84 se, not 2.80
    assert float(mde(1.0, 1e6, m=11)) == pytest.approx(3.68, abs=0.01)
    ahead = dict(contrast_power(_iv(0.0, 0.00006, 0.00004, seeds=3), m=11).mde_by_seeds)  # prospective figure
    assert ahead[3] > ahead[5] > ahead[10] > ahead[20] > np.sqrt(0.00004) * 3.68


def test_seeds_needed_come_with_a_range_that_brackets_them_and_widens_as_seeds_fall():
    per_seed, ratios = 0.003, []  # the same per-seed variance measured with P seeds: seed_var = per_seed / P
    for seeds in (10, 5, 3):
        p = contrast_power(_iv(0.05, seed_var=per_seed / seeds, example_var=0.0001, seeds=seeds), m=11)
        lo, hi = p.seeds_range
        assert p.seeds_needed is not None and lo is not None and hi is not None
        assert lo <= p.seeds_needed <= hi and lo < hi and "range" in p.verdict and "m=11" in p.verdict
        ratios.append(hi / lo)
    assert ratios[0] < ratios[1] < ratios[2] and ratios[2] > 10  # 2 df: 0.33x to 19.5x the seed variance


def test_tost_shows_a_tie_only_within_the_margin_at_its_stated_rate():
    """Known truth: a difference exactly at the margin is shown equivalent in at most 5% of simulated readings
    (TOST's size), a true zero with a small se in most; an interval as wide as cpu-long's fine-tuned average
    (-0.008 [-0.044, +0.028] at 6 seeds) is no tie at 0.01, 0.02 or 0.03."""
    from scipy import stats as sps

    from analysis.bootstrap import Interval
    from analysis.inference import tost_p

    rng = np.random.default_rng(0)

    def reading(truth, se, df=5.0):
        est = truth + se * rng.standard_t(df)
        return Interval(est, est - 2.57 * se, est + 2.57 * se, 0.5, se, df, 6, True, est, est)

    at_margin = np.mean([tost_p(reading(0.02, 0.006)) < 0.05 for _ in range(4000)])
    at_zero = np.mean([tost_p(reading(0.0, 0.004)) < 0.05 for _ in range(2000)])
    assert at_margin <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 4000) and at_zero > 0.6
    half = 0.036 / sps.t.ppf(0.975, 5)
    wide = Interval(-0.008, -0.044, 0.028, 0.6, half, 5.0, 6, True, -0.044, 0.028)
    assert all(tost_p(wide, m) > 0.05 for m in (0.01, 0.02, 0.03))


def test_tie_sensitivity_shows_how_a_tie_hangs_on_the_margin_with_holm_per_margin():
    """A true zero read precisely is a tie at every margin; a wider one only at the wider margins; an interval as
    wide as cpu-long's fine-tuned average at none. Holm applies per margin: two cells each a tie alone at p ~0.03
    are not both ties in one family."""
    from scipy import stats as sps

    from analysis.bootstrap import Interval
    from analysis.inference import tie_sensitivity, tost_p

    def iv(est, half, df=5.0):
        se = half / sps.t.ppf(0.975, df)
        return Interval(est, est - half, est + half, 0.5, se, df, 6, True, est - half, est + half)

    precise, middling, wide = iv(0.0, 0.004), iv(0.0, 0.02), iv(-0.008, 0.036)
    table = tie_sensitivity([precise, middling, wide])
    assert table[0].tolist() == [True, True, True] and table[2].tolist() == [False, False, False]
    assert not table[1, 0] and table[1, 2]
    borderline = iv(0.0, 0.0)  # find a half-width whose TOST p at 0.02 is ~0.03
    for half in np.linspace(0.005, 0.03, 200):
        borderline = iv(0.0, half)
        if 0.025 < tost_p(borderline, 0.02) < 0.04:
            break
    assert tie_sensitivity([borderline], (0.02,))[0, 0] and not tie_sensitivity([borderline] * 2, (0.02,)).any()


def test_the_report_shows_ties_at_other_margins_for_unresolved_primary_cells(tmp_path):
    from analysis_fixtures import write_export

    from analysis.report import build_report

    md = build_report(write_export(tmp_path / "e", {"mlm_only": 0.605, "none": 0.6},
                                   variant_jitter={"mlm_only": (0.02, -0.02, 0.0)}), n_boot=200).to_markdown()
    assert "## Ties at other margins (sensitivity; the claim is +-0.02)" in md
    assert "| contrast | task | estimate [interval] | +-0.01 | +-0.02 | +-0.03 |" in md
