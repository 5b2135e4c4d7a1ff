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
