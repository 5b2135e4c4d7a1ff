"""The validation command: coverage, Holm and the average row as JSON; predicted power vs detection."""

import json

import numpy as np

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
