"""The report's pictures read at a glance: each fits a screen, nothing is cut at an edge, no two labels
overlap, and a resolved cell of the forest is drawn with its filled marker (Agg backend, no display)."""

import itertools

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgba
from matplotlib.text import Text

from analysis.bootstrap import Interval
from analysis.contrasts import FAMILIES, ContrastDef
from analysis.contributions import ContrastEstimate, Contributions
from analysis.plots import DPI, SCREEN_PX, bars_figure, forest_figure, search_figure
from analysis.search import SearchSummary


def _interval(est: float, half: float, n_seeds: int = 3) -> Interval:
    return Interval(est, est - half, est + half, 0.5, half / 2, 10.0, n_seeds, n_seeds >= 3, est - half, est + half)


def contributions(n_contrasts: int, n_tasks: int, rng: np.random.Generator, n_seeds: int = 3) -> Contributions:
    """``n_contrasts`` contrasts (the longest names the report makes, every family) on ``n_tasks`` tasks
    (long names too) plus the average; a
    third of the cells resolved (p_adjusted 0.001, the interval away from 0), the rest inconclusive."""
    tasks = tuple(f"headline_match_{i} (probe)" for i in range(n_tasks)) + ("average (finetune)",)
    variants = ("full", "mlm_only", "none")
    defs = [ContrastDef(f"NSP's share (MLM x NSP, sentence_pairs_{k})",  # the longest kind of name
                        {"full": 1.0, "none": -1.0}, FAMILIES[k * len(FAMILIES) // n_contrasts])
            for k in range(n_contrasts)]
    cells = []
    for t, d in itertools.product(tasks, defs):
        called = rng.random() < 1 / 3
        est = rng.choice([-1, 1]) * rng.uniform(0.05, 0.2) if called else rng.uniform(-0.03, 0.03)
        cells.append(ContrastEstimate(t, d, _interval(est, 0.04, n_seeds), p_adjusted=0.001 if called else 0.6))
    means = {(t, v): _interval(0.6, 0.05, n_seeds) for t in tasks for v in variants}
    return Contributions(variants, tasks, {t: "accuracy" for t in tasks}, tuple(range(n_seeds)), means, cells,
                         [], [], {}, baselines={t: 0.5 for t in tasks})


def _pixels(fig) -> tuple[int, int]:
    """The saved PNG's size."""
    return round(fig.get_figwidth() * DPI), round(fig.get_figheight() * DPI)


def _texts(fig):
    """Every text the figure draws (titles, tick labels, legend entries), with its box, after one draw."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    found = fig.findobj(lambda a: isinstance(a, Text) and a.get_visible() and a.get_text().strip() != "")
    return [(t.get_text(), t.get_rotation(), t.get_window_extent(r))
            for t in {id(t): t for t in found}.values() if id(t) not in _undrawn_tick_labels(fig)]


def _undrawn_tick_labels(fig) -> set[int]:
    """Tick labels matplotlib keeps but does not draw: their ticks lie outside the axis's view."""
    out = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            eps = 1e-9 * max(1.0, hi - lo)
            out |= {id(lab) for tick in axis.get_major_ticks() + axis.get_minor_ticks()
                    if not lo - eps <= tick.get_loc() <= hi + eps for lab in (tick.label1, tick.label2)}
    return out


def layout_problems(fig) -> tuple[list[str], list[tuple[str, str]]]:
    """(texts cut at an edge of the figure, pairs of texts over each other). Two labels tilted alike (a
    tilted axis's tick labels) are parallel: their upright boxes overlap while their letters do not, so
    such a pair is not compared."""
    texts = _texts(fig)
    w, h = fig.bbox.width, fig.bbox.height  # display pixels, at the figure's own dpi
    cut = [t for t, _, b in texts if b.x0 < -0.5 or b.y0 < -0.5 or b.x1 > w + 0.5 or b.y1 > h + 0.5]
    over = [(a, b) for (a, ra, ba), (b, rb, bb) in itertools.combinations(texts, 2) if not (ra == rb != 0)
            and ba.x0 < bb.x1 - 1 and bb.x0 < ba.x1 - 1 and ba.y0 < bb.y1 - 1 and bb.y0 < ba.y1 - 1]
    return cut, over


def assert_reads_on_a_screen(fig) -> None:
    w, h = _pixels(fig)
    assert w <= SCREEN_PX[0] and h <= SCREEN_PX[1], (w, h)
    legend = fig.legends[0].get_window_extent(fig.canvas.get_renderer())
    assert fig.bbox.contains(legend.x0, legend.y0) and fig.bbox.contains(legend.x1, legend.y1), legend
    cut, over = layout_problems(fig)
    assert not cut, f"cut at an edge: {cut}"
    assert not over, f"over each other: {over[:3]}"


@pytest.mark.parametrize("n_contrasts,n_tasks", [(11, 1), (55, 8)])
def test_the_forest_fits_a_screen_with_its_legend_inside_and_no_label_over_another(n_contrasts, n_tasks):
    fig = forest_figure(contributions(n_contrasts, n_tasks, np.random.default_rng(0)))
    assert_reads_on_a_screen(fig)
    assert len(fig.axes) == n_tasks + 1  # one column per task, the average included
    assert all(ax.get_position().width * _pixels(fig)[0] > 80 for ax in fig.axes)  # room to read a column


def test_a_resolved_cell_is_a_filled_coloured_marker_on_a_band_and_an_open_one_is_grey():
    c = contributions(11, 2, np.random.default_rng(1))
    fig = forest_figure(c)
    names = list(dict.fromkeys(e.contrast.name for e in c.contrasts))
    for ax, task in zip(fig.axes, c.tasks):
        for e in (e for e in c.contrasts if e.task == task):
            y = names.index(e.contrast.name)
            marks = [ln for ln in ax.get_lines() if ln.get_marker() == "o" and ln.get_ydata()[0] == y]
            assert len(marks) == 1
            m = marks[0]
            assert m.get_xdata()[0] == pytest.approx(e.interval.estimate)
            if e.p_adjusted < 0.05:
                assert to_rgba(m.get_markerfacecolor()) == to_rgba(m.get_color()) != to_rgba("0.55")  # filled
                assert m.get_markersize() > 5
                assert any(p.get_gid() == "resolved-band" and p.get_y() < y < p.get_y() + p.get_height()
                           for p in ax.patches)
            else:
                assert to_rgba(m.get_markerfacecolor()) == to_rgba("white")  # open
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("resolved after Holm, positive" in t for t in legend) and "inconclusive" in legend


def test_unreliable_cells_are_points_named_in_the_legend_not_whiskers():
    fig = forest_figure(contributions(11, 2, np.random.default_rng(2), n_seeds=2))
    whiskers = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_transform() == ax.transData
                and len(ln.get_xdata()) == 2 and ln.get_ydata()[0] == ln.get_ydata()[1]]
    assert not whiskers
    assert all(ln.get_marker() == "x" for ax in fig.axes for ln in ax.get_lines() if ln.get_gid())
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["unreliable (2 seeds): no interval"]


@pytest.mark.parametrize("n_tasks,n_variants", [(1, 2), (9, 10)])
def test_the_task_bars_fit_a_screen_with_the_legend_inside(n_tasks, n_variants):
    c = contributions(3, n_tasks - 1, np.random.default_rng(3))
    variants = tuple(f"variant_{i}" for i in range(n_variants))
    c = Contributions(variants, c.tasks, c.metrics, c.pretrain_seeds,
                      {(t, v): _interval(0.6, 0.05) for t in c.tasks for v in variants}, c.contrasts, [], [], {},
                      baselines=c.baselines, not_learned=c.tasks[:1])
    fig = bars_figure(c)
    assert_reads_on_a_screen(fig)
    assert {t.get_text() for t in fig.legends[0].get_texts()} == set(variants)


@pytest.mark.parametrize("n_params", [1, 6])
def test_the_search_response_fits_a_screen_and_marks_the_best_trial(n_params):
    rng = np.random.default_rng(4)
    params = tuple(f"objective_{i}_weight" for i in range(n_params))
    trials = pd.DataFrame({**{p: rng.uniform(0, 2, 12) for p in params}, "probe_score": rng.uniform(0.4, 0.7, 12)})
    fig = search_figure(SearchSummary(trials, params, {p: 0.1 for p in params}, {}, {}))
    assert_reads_on_a_screen(fig)
    best = trials["probe_score"].max()
    stars = [ln for ax in fig.axes if ax.get_visible() for ln in ax.get_lines() if ln.get_marker() == "*"]
    assert len(stars) == n_params and all(ln.get_ydata()[0] == best for ln in stars)
