"""`python -m trainables.schedules`: per budget, the linear run's mid-run snapshot, the WSD branch and a run that
ends there, read on held-out MLM accuracy; bad shares are one line."""

import json

from trainables import schedules


def test_the_schedule_comparison_reads_every_budget_three_ways(tmp_path, capsys):
    out = tmp_path / "s"
    assert schedules.main(["--preset", "smoke", "--steps", "20", "--shares", "0.5", "--out", str(out),
                           "--set", "data.corpus=synthetic", "--set", f"data.cache_dir={tmp_path / 'cache'}"]) == 0
    text = capsys.readouterr().out
    result = json.loads((out / "s0" / "schedules.json").read_text())
    assert [r["budget_steps"] for r in result["rows"]] == [10, 20]
    mid = result["rows"][0]
    assert all(0 <= mid[k] <= 1 for k in ("linear_mid_run", "wsd_branch", "linear_ended"))
    # three different encoders at 10 steps: the linear run part-way, the branch that decayed, a 10-step run
    assert len({mid["linear_mid_run"], mid["wsd_branch"], mid["linear_ended"]}) >= 2
    assert "WSD branch" in text and "wall time: linear" in text


def test_bad_shares_are_one_line(capsys):
    assert schedules.main(["--shares", "0.5,1.5"]) == 2
    assert "--shares '0.5,1.5' must be comma-separated numbers in (0, 1)" in capsys.readouterr().err
