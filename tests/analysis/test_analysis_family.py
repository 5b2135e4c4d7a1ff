"""One family rule for every verdict: Holm over every cell the report can call, not per task row, not raw p."""

import numpy as np
from analysis_fixtures import write_export
from test_analysis_domain import _shift, write_domain_export

from analysis.bootstrap import Interval
from analysis.domain import format_domain_table
from analysis.export import load_export
from analysis.contributions import estimate_contributions
from analysis.headline import headline, resolved
from analysis.inference import family_calls
from analysis.report import Report, format_table

TASKS = tuple(f"t{i}" for i in range(6))


def test_family_calls_adjust_over_every_cell_and_call_only_reliable_intervals_excluding_zero():
    iv = Interval(0.1, 0.02, 0.18, 0.01, 0.04, 50.0, 3, True, 0.0, 0.0, 1e-3, 1e-3)
    adjusted, calls, m = family_calls([iv] * 4)
    assert m == 4 and np.allclose(adjusted, 0.04) and calls.all()
    adjusted, calls, m = family_calls([iv] * 6)
    assert m == 6 and np.allclose(adjusted, 0.06) and not calls.any()
    two_seeds = Interval(**{**iv.__dict__, "reliable": False, "n_seeds": 2})
    assert not family_calls([two_seeds])[1].any()


def test_raw_p_below_005_in_every_task_row_is_not_called_when_the_family_adjusted_p_is_not(tmp_path):
    # full - none = +0.10 on six tasks, raw p ~0.015 in each row (one contrast per row: per-row Holm = raw p)
    root = write_export(tmp_path / "e", {"full": 0.7, "none": 0.6}, tasks=TASKS, n_examples=400, jitter=(0, 0, 0),
                        variant_jitter={"full": (0.02, -0.02, 0.0)})
    c = estimate_contributions(load_export(root), np.random.default_rng(0), n_boot=300)
    assert len(c.contrasts) == 7  # six tasks and their average
    assert all(e.interval.p_value < 0.05 and e.interval.excludes_zero for e in c.contrasts)
    assert all(e.p_adjusted > 0.05 and not resolved(e) for e in c.contrasts)
    text = " ".join(headline(c))
    assert "None of the 7 contrasts resolves" in text and "are resolved, largest" not in text
    assert "*" not in format_table(Report(root, c, None)).split("contrast", 1)[1].split("\n\n")[0]


def test_domain_gains_with_raw_p_below_005_are_not_called_when_the_family_adjusted_p_is_not(tmp_path):
    s = _shift(write_domain_export(tmp_path / "e", before=0.6, after=0.66, tasks=TASKS), n_boot=300)
    assert all(t.gain.p_value < 0.05 and t.gain.excludes_zero for t in s.tasks)
    assert all(t.p_adjusted > 0.05 for t in s.tasks)
    text = format_domain_table(s)
    assert "positive" not in text and "inconclusive after Holm" in text and "one family" in text
    frame = s.to_frame()
    assert (frame.loc[frame.quantity == "after - before", "p_holm"] > 0.05).all()


def test_a_cell_whose_every_estimate_is_the_same_is_in_no_family_and_listed_once(tmp_path):
    """Two variants that predict the same label on every example of every seed differ by exactly 0 in every
    resample: that cell carries no information, so it must not enlarge a Holm family (which would cost every
    other cell power) nor be called; it is listed once in the messages."""
    from analysis.headline import family_size

    means = {"full": 0.8, "mlm_only": 0.7, "mlm_pairs": 0.7, "none": 0.5}
    root = write_export(tmp_path / "e", means)
    c = estimate_contributions(load_export(root), np.random.default_rng(0), n_boot=200)
    empty = [e for e in c.contrasts if e.contrast.name.startswith("input-format effect")]
    assert empty and all(e.interval.lo == e.interval.hi == 0 for e in empty)
    assert all(np.isnan(e.p_adjusted) and not resolved(e) and e.power is None for e in empty)
    rest = [e for e in c.contrasts if e not in empty]
    assert family_size(c) == len(rest) and all(e.power.m == family_size(c, e.holm_family) for e in rest)
    listed = [m for m in c.messages if "carry no information" in m]
    assert len(listed) == 1 and all(f"input-format effect (mlm_pairs - mlm_only) on {e.task}" in listed[0]
                                    for e in empty)
