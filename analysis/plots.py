"""The report's pictures (PNG, matplotlib's Agg backend), each sized to fit a screen (SCREEN_PX at DPI).

    plot_task_bars(contributions, path)      each variant's mean per task with interval whiskers
    plot_forest(contributions, path)         the contrasts as a grid: a column per task, a row per contrast
                                             (families separated), one shared x; a resolved cell (called
                                             after Holm) is a filled, coloured marker on a shaded band, an
                                             inconclusive one open and grey, an unreliable interval a
                                             point marked x, never a whisker
    plot_search_response(search, path)       probe score against each varied search parameter
    bars_figure / forest_figure / search_figure   the same figures, unsaved (for notebooks and tests)

Every legend and title is inside the figure (constrained layout; nothing is cut at an edge).
"""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path

import numpy as np

from analysis.contributions import ContrastEstimate, Contributions
from analysis.headline import family_size, resolved
from analysis.search import SearchSummary

DPI = 120
SCREEN_PX = (1600, 1000)  # the most a picture takes (width, height): one screen, no scrolling
MAX_W, MAX_H = SCREEN_PX[0] / DPI, SCREEN_PX[1] / DPI  # inches
MIN_W = 8.0  # the forest's title and legend need this much, even for one task
POSITIVE, NEGATIVE, INCONCLUSIVE, UNRELIABLE = "C0", "C3", "0.55", "C1"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def flagged(c: Contributions, task: str, variant: str) -> bool:
    return any(f.variant == variant and f.task in ("", task) for f in c.flags)


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=DPI)
    _pyplot().close(fig)
    return path


# ------------------------------------------------------------------ per-task bars


def bars_figure(c: Contributions):
    """Per-task bars of each variant's mean with interval whiskers (hatched when flagged)."""
    plt = _pyplot()
    n_t, n_v = len(c.tasks), len(c.variants)
    fig, ax = plt.subplots(figsize=(min(MAX_W, max(7.0, 1.5 + 0.2 * n_t * n_v)), 4.2), layout="constrained")
    width = 0.8 / n_v
    for j, v in enumerate(c.variants):
        ivs = [c.means[(t, v)] for t in c.tasks]
        x = np.arange(n_t) + (j - (n_v - 1) / 2) * width
        est = np.array([iv.estimate for iv in ivs])
        err = np.array([[iv.estimate - iv.lo, iv.hi - iv.estimate] if iv.reliable and np.isfinite(iv.lo)
                        else [0.0, 0.0] for iv in ivs]).T
        bars = ax.bar(x, est, width, yerr=err, capsize=2, label=v, error_kw=dict(linewidth=0.8))
        for bar, t in zip(bars, c.tasks):
            if flagged(c, t, v):
                bar.set_hatch("//")
    for i, t in enumerate(c.tasks):
        if t in c.baselines:
            ax.hlines(c.baselines[t], i - 0.45, i + 0.45, colors="k", linestyles=":", linewidth=1)
    labels = [f"{t}\n(not learned)" if t in c.not_learned else t for t in c.tasks]
    tilt = n_t > 4 or max(map(len, c.tasks)) * 6 > 900 / max(n_t, 1)  # a label wider than its group tilts
    ax.set_xticks(np.arange(n_t), labels, rotation=30 if tilt else 0, ha="right" if tilt else "center",
                  rotation_mode="anchor", fontsize=8)
    ax.set_ylabel("headline metric")
    fig.suptitle(f"Each variant's score per task with its {c.level:.0%} multi-bootstrap interval\n"
                 "dotted: the task's chance score; hatched: flagged (collapsed, or worse than none)", fontsize=9)
    fig.legend(loc="outside lower center", fontsize=8, ncols=min(n_v, 10), frameon=False)
    return fig


def plot_task_bars(c: Contributions, path: Path) -> Path:
    return _save(bars_figure(c), path)


# ------------------------------------------------------------------ the forest grid


def _cell_style(e: ContrastEstimate) -> dict:
    if not resolved(e):
        return dict(color=INCONCLUSIVE, mfc="white", linewidth=1.0, markersize=4)
    color = POSITIVE if e.interval.estimate > 0 else NEGATIVE
    return dict(color=color, mfc=color, linewidth=2.2, markersize=5.5)


def _draw_cell(ax, e: ContrastEstimate, y: float) -> None:
    """One (task, contrast) cell at row ``y``: a whisker and a marker, or an x without a reliable interval."""
    iv = e.interval
    if not (iv.reliable and np.isfinite(iv.lo)):
        ax.plot(iv.estimate, y, "x", color=UNRELIABLE, markersize=5, gid="unreliable")
        return
    style = _cell_style(e)
    if resolved(e):
        ax.axhspan(y - 0.45, y + 0.45, color=style["color"], alpha=0.1, linewidth=0, gid="resolved-band")
    ax.plot([iv.lo, iv.hi], [y, y], color=style["color"], linewidth=style["linewidth"], solid_capstyle="butt")
    ax.plot(iv.estimate, y, "o", color=style["color"], mfc=style["mfc"], markersize=style["markersize"],
            gid="resolved" if resolved(e) else "inconclusive")


def _wrap(name: str, chars: int) -> list[str]:
    """``name`` in lines of at most ``chars`` characters, broken after '_' or ' ' (never inside a word)."""
    lines: list[str] = []
    for piece in re.split(r"(?<=[_ ])", name):
        if lines and len(lines[-1]) + len(piece) <= chars:
            lines[-1] += piece
        elif piece:
            lines.append(piece)
    return [ln.strip() for ln in lines]


def _forest_layout(n_rows: int, n_cols: int, longest: int) -> tuple[tuple[float, float], float]:
    """(figure size in inches, label font size): rows share what a screen's height leaves, columns its width."""
    row_h = min(0.3, (MAX_H - 1.9) / max(n_rows, 1))
    font = float(np.clip(row_h * 72 * 0.62, 5.5, 8.0))
    label_w = 0.4 + longest * font * 0.52 / 72
    col_w = float(np.clip((MAX_W - label_w - 0.3) / max(n_cols, 1), 0.8, 1.8))
    width = float(np.clip(label_w + n_cols * col_w + 0.3, MIN_W, MAX_W))
    return (width, min(MAX_H, 1.9 + n_rows * row_h)), font


def _forest_legend(fig, c: Contributions) -> None:
    """The styles the grid uses, each once, under the grid."""
    from matplotlib.lines import Line2D

    shown = c.contrasts
    seeds = sorted({e.interval.n_seeds for e in shown if not e.interval.reliable})
    entries = [(any(resolved(e) and e.interval.estimate > 0 for e in shown), POSITIVE, "o", POSITIVE, 2.2,
                "resolved after Holm, positive (shaded)"),
               (any(resolved(e) and e.interval.estimate < 0 for e in shown), NEGATIVE, "o", NEGATIVE, 2.2,
                "resolved after Holm, negative (shaded)"),
               (any(e.interval.reliable and not resolved(e) for e in shown), INCONCLUSIVE, "o", "white", 1.0,
                "inconclusive"),
               (bool(seeds), UNRELIABLE, "x", UNRELIABLE, 0.0,
                f"unreliable ({'/'.join(map(str, seeds))} seeds): no interval")]
    handles = [Line2D([], [], color=color, marker=marker, mfc=mfc, linewidth=lw, label=label)
               for used, color, marker, mfc, lw, label in entries if used]
    wide = fig.get_figwidth() >= 11
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4 if wide else 2),
               fontsize=8, frameon=False)


def forest_figure(c: Contributions):
    """The contrasts as a grid: tasks as columns (shared x), contrasts as rows, families separated."""
    plt = _pyplot()
    tasks = [t for t in c.tasks if any(e.task == t for e in c.contrasts)]
    names = list(dict.fromkeys(e.contrast.name for e in c.contrasts))
    family = {e.contrast.name: e.contrast.family for e in c.contrasts}
    cells = {(e.task, e.contrast.name): e for e in c.contrasts}
    size, font = _forest_layout(len(names), len(tasks), max(map(len, names)))
    fig, axes = plt.subplots(1, len(tasks), sharex=True, sharey=True, figsize=size, layout="constrained",
                             squeeze=False)
    breaks = [i - 0.5 for i in range(1, len(names)) if family[names[i]] != family[names[i - 1]]]
    for ax, t in zip(axes[0], tasks):
        for y, name in enumerate(names):
            if (t, name) in cells:
                _draw_cell(ax, cells[(t, name)], y)
        ax.axvline(0.0, color="k", linewidth=0.8)
        for b in breaks:
            ax.axhline(b, color="0.75", linewidth=0.6)
        metric = c.metrics.get(t, "")
        chars = int(ax.get_position().width * size[0] * 72 / (7.5 * 0.62))  # what the column's width holds
        ax.set_title("\n".join(_wrap(t, chars) + _wrap(metric, chars)), fontsize=7.5)
        ax.tick_params(axis="x", labelsize=7)
        ax.xaxis.set_major_locator(plt.MaxNLocator(3, prune="both"))  # no end label meets the next column's
        ax.grid(axis="x", color="0.92", linewidth=0.6)
        ax.margins(x=0.08)
    axes[0][0].set_yticks(range(len(names)), names, fontsize=font)
    axes[0][0].set_ylim(len(names) - 0.5, -0.5)  # the first contrast on top
    called = sum(resolved(e) for e in c.contrasts)
    unlearned = f"; not learned at this budget (not shown): {', '.join(c.not_learned)}" if c.not_learned else ""
    x_is = f"x: the difference in the task's headline metric with its {c.level:.0%} interval{unlearned}"
    fig.suptitle(f"Contrasts by task: {called} of {family_size(c)} cells resolved after Holm within each family\n"
                 + textwrap.fill(x_is, int(size[0] * 72 / (9 * 0.58))), fontsize=9)
    _forest_legend(fig, c)
    return fig


def plot_forest(c: Contributions, path: Path) -> Path:
    return _save(forest_figure(c), path)


# ------------------------------------------------------------------ the search's response


def search_figure(s: SearchSummary):
    """Probe score against each varied search parameter (completed full-budget trials), best trial marked."""
    plt = _pyplot()
    n = len(s.params)
    ncols = min(n, 4)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, sharey=True, squeeze=False, layout="constrained",
                             figsize=(min(MAX_W, 0.4 + 3.1 * ncols), min(MAX_H, 0.8 + 2.9 * nrows)))
    best = s.trials["probe_score"].idxmax() if len(s.trials) else None
    for ax, p in zip(axes.flat, s.params):
        ax.scatter(s.trials[p], s.trials["probe_score"], s=14, color=POSITIVE, label="trial")
        if best is not None:
            ax.plot(s.trials.loc[best, p], s.trials.loc[best, "probe_score"], "*", color=NEGATIVE, markersize=11,
                    label=f"best (probe score {s.trials.loc[best, 'probe_score']:.3f})")
        ax.margins(0.1)
        rho = s.spearman.get(p, float("nan"))
        ax.set_xlabel(f"{p} (rho {rho:+.2f})" if np.isfinite(rho) else f"{p} (too few completed trials)")
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel("probe score")
    title = (f"Search: probe score of {len(s.trials)} completed full-budget trials against each parameter "
             "(rho: Spearman)")
    fig.suptitle(textwrap.fill(title, int(fig.get_figwidth() * 72 / (10 * 0.6))), fontsize=10)
    if best is not None:
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    return fig


def plot_search_response(s: SearchSummary, path: Path) -> Path:
    return _save(search_figure(s), path)


# ------------------------------------------------------------------ effects over pretraining tokens


def curves_figure(points):
    """A row of panels per contrast of the primary family (the other contrasts when it has none), a panel per
    reading (fine-tuned, probe, probe at N labels): each task's estimate against pretraining tokens (log axis,
    ticks at the points read) with its interval as a band, a filled marker where the rule across points
    (``analysis.curves``) resolves it, and none at zero. A task keeps its colour in every panel; every row in
    one panel would repeat colours and hide rows behind each other."""
    from analysis.contributions import split_label
    from analysis.curves import curve_rows, tokens_text

    rows = curve_rows(points, "primary") or curve_rows(points, None)
    plt = _pyplot()
    names = list(dict.fromkeys(r.contrast for r in rows))
    readings = sorted({split_label(r.task)[1] for r in rows}, key=lambda m: (m != "fine-tuned", m != "probe", m))
    tasks = list(dict.fromkeys(sorted(split_label(r.task)[0] for r in rows)))
    colour = {t: f"C{i % 10}" for i, t in enumerate(tasks)}
    ticks = sorted({t for r in rows for t, _, _ in r.points})
    fig, axes = plt.subplots(len(names), len(readings), squeeze=False, layout="constrained", sharex=True,
                             figsize=(min(MAX_W, 0.8 + 3.6 * len(readings)), min(MAX_H, 1.2 + 3.0 * len(names))))
    for i, name in enumerate(names):
        for j, reading in enumerate(readings):
            ax = axes[i][j]
            for r in rows:
                task, mode = split_label(r.task)
                if r.contrast != name or mode != reading:
                    continue
                x = [t for t, _, _ in r.points]
                est = [e.interval.estimate for _, e, _ in r.points]
                c = colour[task]
                ax.plot(x, est, "-", color=c, label=task)
                ax.fill_between(x, [e.interval.lo for _, e, _ in r.points], [e.interval.hi for _, e, _ in r.points],
                                color=c, alpha=0.15, linewidth=0)
                if len(x) == 1:  # read at the end only: its interval as a bar, a band needs two points
                    ax.vlines(x, [r.points[0][1].interval.lo], [r.points[0][1].interval.hi], color=c, linewidth=1.5,
                              alpha=0.5)
                for t, e, ok in r.points:
                    ax.plot(t, e.interval.estimate, "o", color=c, markerfacecolor=c if ok else "white", markersize=5)
            ax.axhline(0.0, color="0.4", linewidth=0.8)
            ax.set_xscale("log")
            ax.set_xticks(ticks, [tokens_text(t) for t in ticks], fontsize=7)
            ax.minorticks_off()
            ax.set_title("\n".join(_wrap(f"{name}, {reading}", 44)), fontsize=9)
            if i == len(names) - 1:
                ax.set_xlabel("pretraining tokens per run")
            if j == 0:
                ax.set_ylabel("effect (0 = none)")
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7, loc="best")
    fig.suptitle("Effects over pretraining tokens\n(filled: resolved under the rule across points)", fontsize=10)
    return fig


def plot_curves(points, path: Path) -> Path:
    return _save(curves_figure(points), path)
