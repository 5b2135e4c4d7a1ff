"""The report's pictures (PNG, matplotlib's Agg backend): per-task bars, the forest plot, search response.

    plot_task_bars(contributions, path)      each variant's mean per task with interval whiskers
    plot_forest(contributions, path)         every contrast with its interval, grouped by task; an
                                             unreliable interval is a labelled point, never a whisker
    plot_search_response(search, path)       probe score against each varied search parameter
    forest_figure / search_figure            the same figures, unsaved (for notebooks and tests)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from analysis.contributions import Contributions
from analysis.headline import resolved
from analysis.search import SearchSummary


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def flagged(c: Contributions, task: str, variant: str) -> bool:
    return any(f.variant == variant and f.task in ("", task) for f in c.flags)


def plot_task_bars(c: Contributions, path: Path) -> Path:
    """Per-task bars of each variant's mean with interval whiskers (hatched when flagged)."""
    plt = _pyplot()
    n_t, n_v = len(c.tasks), len(c.variants)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * n_t * n_v / 2), 4.0))
    width = 0.8 / n_v
    for j, v in enumerate(c.variants):
        ivs = [c.means[(t, v)] for t in c.tasks]
        x = np.arange(n_t) + (j - (n_v - 1) / 2) * width
        est = np.array([iv.estimate for iv in ivs])
        err = np.array([[iv.estimate - iv.lo, iv.hi - iv.estimate] if iv.reliable and np.isfinite(iv.lo)
                        else [0.0, 0.0] for iv in ivs]).T
        bars = ax.bar(x, est, width, yerr=err, capsize=3, label=v)
        for bar, t in zip(bars, c.tasks):
            if flagged(c, t, v):
                bar.set_hatch("//")
    for i, t in enumerate(c.tasks):
        if t in c.baselines:
            ax.hlines(c.baselines[t], i - 0.45, i + 0.45, colors="k", linestyles=":", linewidth=1)
    ax.set_xticks(np.arange(n_t), c.tasks, rotation=20, ha="right")
    ax.set_ylabel("headline metric")
    ax.set_title(f"Per-task scores, {c.level:.0%} multi-bootstrap intervals (hatched: flagged; dotted: chance)")
    ax.legend(fontsize=8, ncols=min(n_v, 4))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def forest_figure(c: Contributions):
    """Forest plot: one row per (task, contrast), intervals as whiskers, tasks as labelled blocks."""
    plt = _pyplot()
    rows = [e for t in c.tasks for e in c.contrasts if e.task == t]
    fig, ax = plt.subplots(figsize=(8.0, 1.0 + 0.24 * (len(rows) + len(c.tasks))))
    y, ticks, labels, headers = 0.0, [], [], set()
    for t in c.tasks:
        block = [e for e in rows if e.task == t]
        if not block:
            continue
        headers.add(len(ticks))
        ticks.append(y)
        labels.append(t)
        y -= 1
        for e in block:
            iv = e.interval
            if iv.reliable and np.isfinite(iv.lo):
                style = dict(color="C0" if resolved(e) else "0.45")
                ax.plot([iv.lo, iv.hi], [y, y], linewidth=1.5, **style)
                ax.plot(iv.estimate, y, "o", mfc=style["color"] if resolved(e) else "white", **style)
            else:
                ax.plot(iv.estimate, y, "x", color="C3")
                ax.annotate(f"unreliable ({iv.n_seeds} seed{'s' * (iv.n_seeds != 1)})", (iv.estimate, y),
                            xytext=(6, 0), textcoords="offset points", va="center", fontsize=7, color="C3")
            ticks.append(y)
            labels.append(e.contrast.name)
            y -= 1
        y -= 0.5
    ax.axvline(0.0, color="k", linewidth=0.8)
    ax.set_yticks(ticks, labels, fontsize=7)
    for i, tick in enumerate(ax.get_yticklabels()):
        if i in headers:
            tick.set_fontweight("bold")
            tick.set_fontsize(8)
    ax.set_xlabel(f"difference in the headline metric, {c.level:.0%} interval\n"
                  "(filled: resolved after Holm over every cell; open: inconclusive; x: no reliable interval)")
    ax.set_title("Contrasts by task")
    fig.tight_layout()
    return fig


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)
    return path


def plot_forest(c: Contributions, path: Path) -> Path:
    return _save(forest_figure(c), path)


def search_figure(s: SearchSummary):
    """Probe score against each varied search parameter (completed full-budget trials)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(s.params), figsize=(3.2 * len(s.params), 3.2), squeeze=False)
    for ax, p in zip(axes[0], s.params):
        ax.scatter(s.trials[p], s.trials["probe_score"], s=14)
        rho = s.spearman.get(p, float("nan"))
        ax.set_xlabel(f"{p} (rho {rho:+.2f})" if np.isfinite(rho) else f"{p} (too few completed trials)")
    axes[0][0].set_ylabel("probe score")
    fig.tight_layout()
    return fig


def plot_search_response(s: SearchSummary, path: Path) -> Path:
    return _save(search_figure(s), path)
