"""Curves over pretraining tokens: snapshot rows never enter the end's estimates; each snapshot is estimated as
its own export; a cell is resolved at a point only under the rule across points (Holm at 0.05 / K)."""

from types import SimpleNamespace

import numpy as np
import pytest
import pandas as pd
from analysis_fixtures import write_export

from analysis.bootstrap import Interval
from analysis.curves import CurvePoint, curve_rows
from analysis.report import build_report, write_report

MEANS = {"mlm_only": 0.8, "none": 0.6}


def _with_snapshots(tmp_path, points):
    """The end's export plus, per (step, mlm_only's mean there), mlm_only's snapshot runs and their reads."""
    final = write_export(tmp_path / "final", MEANS, tasks=("sst",))
    runs, evals, preds = (pd.read_parquet(final / f"{n}.parquet") for n in ("runs", "evals", "predictions"))
    for step, mean in points:
        snap = write_export(tmp_path / f"s{step}", {"mlm_only": mean, "none": 0.6}, tasks=("sst",))
        r, e, p = (pd.read_parquet(snap / f"{n}.parquet") for n in ("runs", "evals", "predictions"))
        keep = r["variant"] == "mlm_only"
        rename = {rid: f"{rid}@{step}" for rid in r.loc[keep, "run_id"]}
        r = r[keep].assign(run_id=lambda d: d["run_id"].map(rename), phase="snapshot", steps=step,
                           tokens_seen=step * 1000, snapshot_of=lambda d: d["run_id"].str.split("@").str[0])
        e, p = (t[t["run_id"].isin(rename)].assign(run_id=lambda d: d["run_id"].map(rename)) for t in (e, p))
        runs, evals, preds = pd.concat([runs, r]), pd.concat([evals, e]), pd.concat([preds, p])
    out = tmp_path / "both"
    out.mkdir()
    for name, table in (("runs", runs), ("evals", evals), ("predictions", preds)):
        table.reset_index(drop=True).to_parquet(out / f"{name}.parquet")
    return final, out


def test_snapshots_never_enter_the_ends_estimates_and_each_point_is_its_own(tmp_path):
    final, both = _with_snapshots(tmp_path, [(25, 0.6), (50, 0.7)])
    alone, with_snaps = build_report(final, n_boot=200), build_report(both, n_boot=200)
    pd.testing.assert_frame_equal(alone.to_frame(), with_snaps.to_frame())
    assert not alone.curves and [p.tokens for p in with_snaps.curves] == [25_000, 50_000, 100_000]
    rows = {(r.contrast, r.task): r for r in curve_rows(list(with_snaps.curves), None)}
    row = next(r for (name, task), r in rows.items() if "mlm_only - none" in name and task == "sst")
    est = [round(e.interval.estimate, 3) for _, e, _ in row.points]
    assert est == [0.0, 0.1, 0.2]
    assert [ok for _, _, ok in row.points] == [False, True, True] and row.first_resolved == 50_000
    assert row.line() == "first detected at 50 k tokens"
    from analysis.report import format_table

    assert "Over pretraining tokens (snapshots, probed): mlm_only - none on sst: first detected at 50 k tokens" in \
        format_table(with_snaps).replace("\n", " ")
    assert "Over pretraining tokens" not in format_table(alone)
    md = with_snaps.to_markdown()
    assert "## Effects over pretraining tokens" in md and "first detected at 50 k tokens" in md
    written = {p.name: p for p in write_report(with_snaps, tmp_path / "rep")}
    assert "contributions_curves.png" in written
    table = pd.read_csv(written["contributions_curves.csv"])  # the notebook's curve_frame, as the report saw it
    sst = table[(table.contrast == "mlm_only - none") & (table.task == "sst")]
    assert sst.estimate.round(3).tolist() == [0.0, 0.1, 0.2] and sst.resolved.tolist() == [False, True, True]
    assert sst.tokens.tolist() == [25_000, 50_000, 100_000]


def _point(tokens, p_adjusted, estimate=0.1):
    iv = Interval(estimate, estimate - 0.05, estimate + 0.05, p_adjusted, 0.02, 10.0, 6, True, estimate - 0.05,
                  estimate + 0.05)
    e = SimpleNamespace(contrast=SimpleNamespace(name="mlm_only - none"), task="topic", interval=iv,
                        p_adjusted=p_adjusted, holm_family="primary")
    return CurvePoint(0, tokens, SimpleNamespace(contrasts=[e]))


def test_a_point_is_resolved_only_below_005_over_the_number_of_points():
    """Three points: a Holm p of 0.03 resolves a cell read once, not one read at three points (0.05/3)."""
    row = curve_rows([_point(1e6, 0.03), _point(2e6, 0.02), _point(4e6, 0.01)])[0]
    assert [ok for _, _, ok in row.points] == [False, False, True] and row.first_resolved == 4e6
    flat = curve_rows([_point(1e6, 0.5, 0.10), _point(2e6, 0.5, 0.11)])[0]
    assert flat.line() == "not resolved by 2 M tokens; flat over the last two mid-schedule points"
    rising = curve_rows([_point(1e6, 0.5, 0.0), _point(2e6, 0.5, 0.1)])[0]
    assert rising.trend() == "rising" and np.isfinite(rising.points[-1][1].interval.estimate)


def test_tensorboard_shows_the_report_s_curves_at_their_tokens(tmp_path):
    """The curves' TensorBoard streams (sweeps.export.write_curves) hold each point's estimate and interval at its
    tokens, the same numbers as the report, and whether the cell is resolved there."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from sweeps.export import write_curves

    _, both = _with_snapshots(tmp_path, [(25, 0.6), (50, 0.7)])
    report = build_report(both, n_boot=200)
    streams = write_curves(report.curves, str(tmp_path / "tb"))
    row = next(r for r in curve_rows(list(report.curves), None) if r.contrast == "mlm_only - none" and r.task == "sst")
    acc = EventAccumulator(next(s for s in streams if s.endswith("/mlm_only_none")))
    acc.Reload()
    seen = {name: [(e.step, round(e.value, 6)) for e in acc.Scalars(f"sst/{name}")]
            for name in ("estimate", "lo", "hi", "resolved")}
    assert seen["estimate"] == [(int(t), round(e.interval.estimate, 6)) for t, e, _ in row.points]
    assert seen["lo"] == [(int(t), round(e.interval.lo, 6)) for t, e, _ in row.points]
    assert seen["hi"] == [(int(t), round(e.interval.hi, 6)) for t, e, _ in row.points]
    assert [v for _, v in seen["resolved"]] == [0.0, 1.0, 1.0]


def _row(points, mde=0.05, resolved_end=False, annealed=()):
    """A primary row from (tokens, estimate, se) points, the end's power detecting ``mde``; ``annealed`` per point
    (default: all alike, as a WSD run's decay branches and its end)."""
    from analysis.curves import CurveRow
    from analysis.inference import Power

    pts = []
    for i, (t, est, se) in enumerate(points):
        iv = Interval(est, est - 1.96 * se, est + 1.96 * se, 0.5, se, 30.0, 6, True, est - 1.96 * se, est + 1.96 * se)
        e = SimpleNamespace(interval=iv, power=Power(mde, None, ""), holm_family="primary")
        pts.append((t, e, resolved_end and i == len(points) - 1))
    return CurveRow("mlm_only - none", "topic", "primary", tuple(pts), end_step=8000, annealed=tuple(annealed))


def test_the_extrapolated_budget_covers_a_known_log_linear_curve():
    """Known truth: an effect growing as 0.01 per doubling of tokens, read at 15 M and 30 M tokens with noise;
    the end's design detects 0.05, which the curve reaches at 30 M x 2^3 = 240 M tokens. The 80% range holds the
    truth in about 80% of simulated readings when the two points' errors are independent, and in at least that
    many when they are positively correlated (the same runs read twice), the case the method is stated for."""
    from analysis.curves import extrapolate

    rng = np.random.default_rng(1)
    truth, se, per_doubling = 240e6, 0.006, 0.01
    for rho, lo_cov, hi_cov in ((0.0, 0.72, 0.88), (0.7, 0.80, 1.0)):
        hits = far = 0
        for i in range(400):
            z = rng.multivariate_normal([0, 0], [[1, rho], [rho, 1]]) * se
            x = extrapolate(_row([(15e6, 0.01 + z[0], se), (30e6, 0.02 + z[1], se)]), draws=2000, seed=i)
            hits += x.lo <= truth <= x.hi
            far += not np.isfinite(x.hi)
        assert lo_cov <= hits / 400 <= hi_cov, (rho, hits / 400)


def test_extrapolation_only_where_tokens_limit_and_it_says_so():
    """No extrapolation for a resolved end, for an end already as large as the design detects (seeds or noise
    limit it then), or from a single point; a falling trend never reaches the effect; the text names it an
    extrapolation and gives the steps to plan."""
    from analysis.curves import extrapolate

    assert extrapolate(_row([(15e6, 0.01, 0.005), (30e6, 0.02, 0.005)], resolved_end=True)) is None
    assert extrapolate(_row([(15e6, 0.01, 0.005), (30e6, 0.06, 0.02)])) is None
    assert extrapolate(_row([(30e6, 0.02, 0.005)])) is None
    falling = extrapolate(_row([(15e6, 0.03, 0.002), (30e6, 0.01, 0.002)]))
    assert falling is not None and not np.isfinite(falling.tokens) and "does not reach" in falling.text()
    x = extrapolate(_row([(15e6, 0.01, 0.001), (30e6, 0.02, 0.001)]))
    assert x.tokens == pytest.approx(240e6, rel=0.1) and x.ratio == pytest.approx(8, rel=0.1)
    assert "extrapolated" in x.text() and "not measured" in x.text() and "--set optim.max_steps=6" in x.text()
    assert x.short().startswith("extrapolated to reach the detectable +0.050: ~2")
    negative = extrapolate(_row([(15e6, -0.01, 0.001), (30e6, -0.02, 0.001)]))
    assert negative.target == -0.05 and negative.tokens == pytest.approx(240e6, rel=0.1)


def test_a_row_read_at_the_end_only_says_so_and_is_judged_with_the_curve_s_family():
    """Fine-tuning reads the end only by default: its rows have no estimate at the snapshots. They show "not read"
    there, never say "first resolved at" the end as if the snapshots had been read and found nothing, and are
    judged at 0.05 / K like every row of the curve: judged at 0.05 beside rows at 0.05 / K, the family's error
    reached ~7% in a null simulation of cpu-long's shape."""
    from analysis.curves import curve_section

    def unread(tokens):
        iv = Interval(float("nan"), float("nan"), float("nan"), float("nan"), float("nan"), 0.0, 0, False,
                      float("nan"), float("nan"))
        e = SimpleNamespace(contrast=SimpleNamespace(name="mlm_only - none"), task="topic", interval=iv,
                            p_adjusted=float("nan"), holm_family="primary")
        return CurvePoint(0, tokens, SimpleNamespace(contrasts=[e]))

    points = [unread(1e6), unread(2e6), _point(4e6, 0.03)]
    (row,) = curve_rows(points)
    assert [t for t, _, _ in row.points] == [4e6] and row.unread == 2
    assert not row.points[0][2]  # 0.03 > 0.05 / 3: one family with the rows read at all three points
    (row,) = curve_rows([unread(1e6), unread(2e6), _point(4e6, 0.016)])
    assert row.points[0][2]  # 0.016 < 0.05 / 3
    assert row.line() == ("resolved at the end, 4 M tokens (read at the end only; --snapshot-reads all reads every "
                          "snapshot)")
    table = next(line for line in curve_section(points) if line.startswith("| mlm_only - none | topic |"))
    assert table.count("not read") == 2 and "nan" not in table


def test_the_curve_plot_has_a_panel_per_reading_and_a_colour_per_task():
    """Fifteen rows in one panel repeated colours (matplotlib's cycle has ten) and hid each other: the plot splits
    them by reading, and a task keeps its colour across the panels."""
    from analysis.plots import curves_figure

    def point(tokens):
        es = []
        for task in ("topic", "pos", "topic (probe)", "pos (probe)", "pos (probe, 100 labels)"):
            e = _point(tokens, 0.01).contributions.contrasts[0]
            es.append(SimpleNamespace(**{**vars(e), "task": task}))
        return CurvePoint(0, tokens, SimpleNamespace(contrasts=es))

    fig = curves_figure([point(1e6), point(2e6)])
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["mlm_only - none, fine-tuned", "mlm_only - none, probe", "mlm_only - none, probe, 100 labels"]
    colours = {}
    for ax in fig.axes:
        for line in ax.get_lines()[:-1]:  # the last is none's zero line
            if line.get_label() in ("topic", "pos"):
                colours.setdefault(line.get_label(), set()).add(line.get_color())
    assert colours.keys() == {"topic", "pos"} and all(len(c) == 1 for c in colours.values())
    assert colours["topic"] != colours["pos"]


def test_trends_and_extrapolations_join_like_points_only():
    """Under a linear schedule the end is annealed and the snapshots are not: the annealing step (MLM accuracy
    13% to 19% over cpu-long's last half) is not learning. The trend is read between the last two snapshots and
    says so, and no line is drawn through a snapshot and the end; under WSD (every point annealed) both are."""
    from analysis.curves import extrapolate

    points = [(4e6, 0.010, 0.002), (8e6, 0.011, 0.002), (30e6, 0.03, 0.002)]
    linear = _row(points, annealed=(False, False, True))
    assert linear.trend() == "flat" and extrapolate(linear) is None  # the end's jump would read "rising"
    assert linear.line() == "not resolved by 30 M tokens; flat over the last two mid-schedule points"
    wsd = _row(points, annealed=(True, True, True))
    assert wsd.trend() == "rising" and extrapolate(wsd) is not None
    assert wsd.line() == "not resolved by 30 M tokens; rising over the last two annealed points"
    assert _row(points[1:], annealed=(False, True)).trend() == ""  # one point of each kind: no trend at all


def test_a_detection_at_the_first_point_measured_says_it_may_have_been_earlier():
    from analysis.curves import curve_rows

    (row,) = curve_rows([_point(1e6, 0.001), _point(2e6, 0.001)])
    assert row.line() == "first detected at 1 M tokens (the first point measured: it may have been there earlier)"
    (later,) = curve_rows([_point(1e6, 0.5), _point(2e6, 0.001)])
    assert later.line() == "first detected at 2 M tokens"


def test_the_backtest_covers_a_log_linear_truth_and_misses_a_curve_that_levels_off():
    """Known truth: estimates exactly on a line in log tokens are predicted by the first two points at every later
    point; a curve that stops rising after its second point is not, and the report line names the misses. The
    annealed end is never predicted from mid-schedule snapshots."""
    import math
    from types import SimpleNamespace

    from analysis.curves import CurveRow, backtest, backtest_lines

    def point(tokens, estimate, se=0.002):
        iv = SimpleNamespace(estimate=estimate, se=se, lo=estimate - 2 * se, hi=estimate + 2 * se)
        return (tokens, SimpleNamespace(interval=iv), False)

    tokens = [1e6, 2e6, 4e6, 8e6, 16e6]
    line = [0.01 + 0.02 * math.log(t / 1e6) for t in tokens]
    flat = [0.01, 0.03, 0.031, 0.03, 0.2]  # levels off; the last point is the annealed end
    annealed = (False, False, False, False, True)
    rows = [CurveRow("mlm_only - none", "pos (probe)", "primary", tuple(point(t, e) for t, e in zip(tokens, line)),
                     annealed=annealed),
            CurveRow("mlm_only - none", "topic (probe)", "primary", tuple(point(t, e) for t, e in zip(tokens, flat)),
                     annealed=annealed)]
    got = backtest(rows)
    assert [(p.task, p.tokens) for p in got] == [("pos (probe)", 4e6), ("pos (probe)", 8e6),
                                                  ("topic (probe)", 4e6), ("topic (probe)", 8e6)]
    assert all(p.covered and abs(p.predicted - p.measured) < 1e-3 for p in got[:2])
    assert not any(p.covered for p in got[2:])
    text = backtest_lines(got)[0]
    assert "2 of 4 measured estimates fell inside the predicted 80% range" in text and "topic (probe) at 4 M" in text
