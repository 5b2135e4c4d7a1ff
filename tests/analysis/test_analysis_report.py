"""The report command writes the table, the CSV and the plots; the verdict speaks plainly."""

import pandas as pd
from analysis_fixtures import write_export

from analysis.report import build_report, format_table, main


def test_report_command_writes_md_csv_png(seed_export, capsys):
    assert main([str(seed_export), "--boot", "100"]) == 0
    out = seed_export / "report"
    md = (out / "contributions.md").read_text()
    assert "| sst | accuracy | 0.800 [" in md and "Every variant minus none" in md
    assert "1 stopped_early" in md and "2 failed" in md and "Epochs over the pretraining corpus" in md
    csv = pd.read_csv(out / "contributions.csv")
    row = csv[(csv.task == "sst") & (csv.name == "MLM contribution (full - nsp_only)")].iloc[0]
    assert abs(row.estimate - 0.2) < 1e-9 and row.lo > 0 and row.verdict.startswith("positive")
    for png in ("contributions.png", "search_response.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    assert "MLM contribution (full - nsp_only)" in capsys.readouterr().out


def test_verdict_says_worse_than_none_and_inconclusive(tmp_path):
    means = {"full": 0.70, "mlm_only": 0.72, "nsp_only": 0.55, "none": 0.74}
    r = build_report(write_export(tmp_path / "e", means, collapsed=("nsp_only",), n_examples=400,
                                  jitter=(-0.005, 0, 0.005)), n_boot=100)
    md = r.to_markdown()
    assert "nsp_only is WORSE than no pretraining" in md
    assert "not credited to MLM" in md and "inconclusive" in md
    table = format_table(r)
    assert "not credited to MLM" in table and "nsp_only*" not in table  # flags mark cells, not names


def test_two_seed_export_prints_no_confident_interval(tmp_path):
    r = build_report(write_export(tmp_path / "e", {"full": 0.8, "mlm_only": 0.7, "nsp_only": 0.6, "none": 0.5},
                                  seeds=(0, 1), jitter=(-0.02, 0.02)), n_boot=50)
    md = r.to_markdown()
    assert "no reliable interval: 2 seeds" in md and "unreliable: 2 pretraining seed(s)" in md
    assert "positive (p=" not in md


def test_bad_export_dir_is_one_line_error(tmp_path, capsys):
    assert main([str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
