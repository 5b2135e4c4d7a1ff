"""analysis.paper: the paper's differences beside the run's intervals, on fixture exports with known means."""

import math

from analysis_fixtures import write_export

from analysis.bootstrap import Interval
from analysis.paper import PaperContrast, compare, paper_verdict, plot, to_markdown


def _iv(est, lo, hi, reliable=True, p=0.001):
    return Interval(est, lo, hi, p, 0.01, 2.0, 3 if reliable else 2, reliable, lo, hi)


def test_verdicts_in_order():
    assert paper_verdict(0.02, _iv(0.03, 0.01, 0.05), 0.01) == "consistent"
    assert paper_verdict(0.10, _iv(0.03, 0.01, 0.05), 0.01) == "same direction, resolved"
    assert paper_verdict(-0.02, _iv(0.03, 0.01, 0.05), 0.01) == "opposite direction, resolved"
    assert paper_verdict(0.10, _iv(0.03, 0.01, 0.05), 0.2) == "inconclusive"  # excludes 0 but not called
    assert paper_verdict(0.10, _iv(0.0, -0.02, 0.02), 0.5) == "inconclusive"
    assert paper_verdict(0.0, _iv(0.03, 0.01, 0.05, reliable=False), 0.01).startswith("inconclusive (unreliable")
    assert paper_verdict(0.0, None, math.nan) == "inconclusive (no interval)"


def test_report_contrast_and_own_estimate_and_task_pairing(tmp_path):
    # full beats mlm_only by 0.05 on every task; electra is not derived against full by the report
    export = write_export(tmp_path / "export", {"full": 0.80, "mlm_only": 0.75, "electra": 0.70, "none": 0.55},
                          tasks=("sst2", "topic"))
    claims = [PaperContrast("full", "mlm_only", "SST-2", 92.7, 92.6, verified=True),  # same task
              PaperContrast("full", "mlm_only", "MNLI-m", 84.4, 83.9),  # not measured: the average row
              PaperContrast("electra", "full", "GLUE", 79.9, 75.1),
              PaperContrast("mlm_sop", "full", "Avg", 80.1, 79.2)]  # mlm_sop not measured
    rows = compare(export, claims, n_boot=300)
    sst, mnli, electra, missing = rows
    assert sst.run_task == "sst2" and sst.same_task and sst.source == "report"
    assert abs(sst.interval.estimate - 0.05) < 1e-9
    assert sst.verdict == "same direction, resolved"  # the paper's +0.1 point is below the run's +5 points
    assert mnli.run_task == "average (finetune)" and not mnli.same_task
    assert electra.source == "paper cells" and abs(electra.interval.estimate + 0.10) < 1e-9
    assert electra.verdict == "opposite direction, resolved"
    assert missing.interval is None and missing.verdict == "inconclusive (no interval)"
    md = to_markdown(rows, "BERT Table 5 vs this run")
    assert "| full - mlm_only | SST-2 | 92.7 vs 92.6 | +0.1 | sst2 | +5.0 [" in md
    assert "paper's task not measured" in md
    assert plot(rows, tmp_path / "p.png").stat().st_size > 0
