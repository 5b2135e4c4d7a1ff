"""analysis.paper: the paper's differences beside the run's intervals, on fixture exports with known means."""

import math

from analysis_fixtures import write_export

from analysis.bootstrap import Interval
import pandas as pd
import pytest

from analysis.paper import (PaperContrast, PaperIntrinsic, compare, compare_intrinsic, intrinsic_markdown,
                            paper_verdict, plot, run_metric, to_markdown)
from trainables.metrics import f1


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
    assert "| full - mlm_only | SST-2 | acc | 92.7 vs 92.6 | +0.1 | sst2 (accuracy) | +5.0 [" in md
    assert "paper's task not measured" in md
    assert plot(rows, tmp_path / "p.png").stat().st_size > 0


def test_the_papers_metric_is_the_one_compared():
    assert run_metric("acc", "mrpc") == "accuracy" and run_metric("f1", "mrpc") == "f1"  # BERT Table 5: MRPC (Acc)
    assert run_metric("em", "squad") == "squad_em" and run_metric("f1", "squad") == "squad_f1"
    assert run_metric("mcc", "cola") == "mcc" and run_metric("avg", "average (finetune)") == "mean of tasks"
    with pytest.raises(ValueError, match="metric='spearman' is not valid"):
        PaperContrast("a", "b", "STS-B", 1, 0, metric="spearman")


def test_a_claim_on_another_metric_than_the_headline_is_estimated_on_that_metric(tmp_path):
    """The fixture's headline is accuracy; a paper reporting F1 on the task is compared on F1 (from the
    predictions), not on the headline: mlm_only's errors all fall on the positive class, so full - mlm_only is
    +10 points of accuracy and more of F1."""
    export = write_export(tmp_path / "export", {"full": 0.80, "mlm_only": 0.70}, tasks=("mrpc", "topic"))
    evals = pd.read_parquet(export / "evals.parquet")
    evals.loc[evals["task"] == "mrpc", "positive_label"] = "b"  # MRPC's F1 is of its 'equivalent' class
    evals.to_parquet(export / "evals.parquet")
    preds = pd.read_parquet(export / "predictions.parquet")
    for _, g in preds[(preds["task"] == "mrpc") & preds["run_id"].str.startswith("mlm_only")].groupby(["run_id", "finetune_seed"]):
        wrong = int((g["prediction"] != g["gold"]).sum())  # the same errors, all on 'b': accuracy kept, F1 lower
        b = g.index[g["gold"] == "b"]
        preds.loc[g.index, "prediction"] = g["gold"]
        preds.loc[b[len(b) - wrong:], "prediction"] = "a"
    preds.to_parquet(export / "predictions.parquet")
    acc, f1_row = compare(export, [PaperContrast("full", "mlm_only", "MRPC", 86.7, 86.5, metric="acc"),
                                   PaperContrast("full", "mlm_only", "MRPC", 88.0, 87.0, metric="f1")], n_boot=200)
    assert acc.metric == "accuracy" and acc.source == "report" and abs(acc.interval.estimate - 0.10) < 1e-9
    preds = preds[(preds["task"] == "mrpc") & (preds["finetune_seed"] == 0)]
    per_run = {r: f1(list(g["prediction"]), list(g["gold"]), positive="b") for r, g in preds.groupby("run_id")}
    want = (sum(v for r, v in per_run.items() if r.startswith("full")) / 3
            - sum(v for r, v in per_run.items() if r.startswith("mlm_only")) / 3)
    assert f1_row.metric == "f1" and f1_row.source == "paper cells"
    assert f1_row.interval.estimate == pytest.approx(want, abs=0.01) and abs(want - 0.10) > 0.02


def test_an_average_over_other_tasks_than_the_papers_is_flagged_and_medians_are_reported(tmp_path):
    export = write_export(tmp_path / "export", {"electra": 0.80, "full": 0.70}, tasks=("sst2", "topic"),
                          finetune_seeds=(0, 1, 2))
    evals = pd.read_parquet(export / "evals.parquet")
    outlier = evals["run_id"].str.startswith("full") & (evals["finetune_seed"] == 2) & (evals["task"] == "sst2")
    evals.loc[outlier & (evals["metric"] == "accuracy"), "value"] += 0.3  # the mean moves, the median does not
    evals.to_parquet(export / "evals.parquet")
    glue = PaperContrast("electra", "full", "GLUE", 79.9, 75.1, metric="avg",
                         covers=("CoLA (MCC)", "SST-2", "MRPC (acc)", "STS-B (Spearman)", "QQP", "MNLI", "QNLI", "RTE"))
    sst = PaperContrast("electra", "full", "SST-2", 90.0, 89.0)
    g, s = compare(export, [glue, sst], n_boot=200)
    assert g.run_task == "average (finetune)" and g.same_task and "covers CoLA (MCC), SST-2" in g.warning
    assert "this run's covers sst2 (accuracy), topic (accuracy)" in g.warning and not s.warning
    assert s.median == pytest.approx(0.10) and g.median == pytest.approx(0.10)
    md = to_markdown([g, s], "ELECTRA Table 1", notes=("protocol: paper median of 10",))
    assert "Warning: GLUE differs from this run's average" in md and "| +10.0 |" in md
    assert "- protocol: paper median of 10" in md


def test_intrinsic_metrics_beside_the_papers(tmp_path):
    export = write_export(tmp_path / "export", {"full": 0.8, "mlm_pairs": 0.7})  # mlm_acc 0.1, pair_acc_nsp 0.5
    items = [PaperIntrinsic("full", "NSP", 90.5, "pair_acc_nsp", True), PaperIntrinsic("full", "MLM", 54.5, "mlm_acc"),
             PaperIntrinsic("mlm_sop", "SOP", 86.5, "pair_acc_sop")]  # mlm_sop not measured
    nsp, mlm, sop = compare_intrinsic(export, items)
    assert (nsp.mean, nsp.n) == (0.5, 3) and mlm.mean == pytest.approx(0.1) and sop.n == 0
    md = intrinsic_markdown([nsp, mlm, sop], "ALBERT Table 5, intrinsic")
    assert "| full | NSP | 90.5 | pair_acc_nsp | 50.0 [50.0, 50.0] | 3 | yes |" in md and "n/a (not recorded)" in md
