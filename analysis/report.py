"""The contributions report: Markdown table, CSV, PNG plots, and the terminal table of the main job.

    python -m analysis.report EXPORT_DIR [--out DIR] [--boot 1000] [--level 0.95] [--seed 0]

writes contributions.md, contributions.csv, contributions.png (per-task bars with interval whiskers)
and, when the export has search trials, search_response.png, into DIR (default: EXPORT_DIR/report).
From code (the sweep prints this at its end):

    from analysis.report import build_report, format_table
    report = build_report(export_dir)          # -> Report (values only, prints nothing)
    text = format_table(report)                # the tasks x variants table and the contrasts
    report.to_markdown(); write_report(report, out_dir)
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.bootstrap import MIN_RELIABLE_SEEDS, Interval
from analysis.contributions import Contributions, estimate_contributions
from analysis.export import load_export
from analysis.search import SearchSummary, summarize_search

log = logging.getLogger(__name__)


def _iv(iv: Interval, signed: bool = False, short: bool = False) -> str:
    f = "{:+.3f}" if signed else "{:.3f}"
    est = f.format(iv.estimate)
    if not np.isfinite(iv.lo):
        return est
    if not iv.reliable:
        return f"{est} (unreliable)" if short else (
            f"{est} (no reliable interval: {iv.n_seeds} seed{'s' * (iv.n_seeds != 1)})")
    return f"{est} [{f.format(iv.lo)}, {f.format(iv.hi)}]"


def verdict(iv: Interval) -> str:
    """Plain words for one difference: never a finding when the interval includes zero."""
    if not iv.reliable:
        return f"unreliable: {iv.n_seeds} pretraining seed(s), at least {MIN_RELIABLE_SEEDS} needed"
    if not np.isfinite(iv.lo):
        return "no interval"
    if iv.excludes_zero:
        return f"{'positive' if iv.estimate > 0 else 'negative'} (p={iv.p_value:.2g})"
    return "inconclusive: interval includes 0"


@dataclass(frozen=True)
class Report:
    export_dir: Path
    contributions: Contributions
    search: SearchSummary | None

    def to_frame(self) -> pd.DataFrame:
        """One row per (task, mean or contrast): the CSV."""
        c, rows = self.contributions, []
        for (task, v), iv in c.means.items():
            rows.append(dict(task=task, kind="mean", name=v, **_iv_fields(iv), verdict="", notes=""))
        for e in c.contrasts:
            rows.append(dict(task=e.task, kind=e.contrast.family, name=e.contrast.name,
                             **_iv_fields(e.interval), verdict=verdict(e.interval), notes="; ".join(e.notes)))
        return pd.DataFrame(rows)

    def to_markdown(self) -> str:
        return "\n".join(_markdown(self))


def _iv_fields(iv: Interval) -> dict:
    return dict(estimate=iv.estimate, lo=iv.lo, hi=iv.hi, p_value=iv.p_value, n_seeds=iv.n_seeds,
                reliable=iv.reliable)


def build_report(export_dir: str | Path, n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> Report:
    """Load an export and estimate everything the report shows (prints nothing)."""
    export = load_export(export_dir)
    rng = np.random.default_rng(seed)
    return Report(Path(export_dir), estimate_contributions(export, rng, n_boot, level),
                  summarize_search(export.runs, seed))


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(r) + " |" for r in rows]


def _flag_marks(c: Contributions, task: str, variant: str) -> str:
    marks = [f.reason for f in c.flags if f.variant == variant and f.task in ("", task)]
    return " **[flagged]**" if marks else ""


def _variant_table(c: Contributions) -> list[str]:
    rows = [[t, c.metrics[t]] + [_iv(c.means[(t, v)]) + _flag_marks(c, t, v) for v in c.variants]
            for t in c.tasks]
    return _md_table(["task", "metric", *c.variants], rows)


def _contrast_table(c: Contributions, families: tuple[str, ...]) -> list[str]:
    names = list(dict.fromkeys(e.contrast.name for e in c.contrasts if e.contrast.family in families))
    cell = {(e.task, e.contrast.name): e for e in c.contrasts}
    rows = []
    for t in c.tasks:
        row = [t]
        for n in names:
            e = cell.get((t, n))
            row.append("" if e is None else _iv(e.interval, signed=True) + (" (marked)" if e.notes else ""))
        rows.append(row)
    return _md_table(["task", *names], rows) if names else []


def _plain_verdict(c: Contributions) -> list[str]:
    lines = []
    for e in c.contrasts:
        if e.contrast.family not in ("vs_none", "seed", "sop", "best_mix"):
            continue
        iv, name = e.interval, e.contrast.name
        words = verdict(iv)
        if e.contrast.family == "vs_none" and iv.estimate < 0:
            v = name.split(" - ")[0]
            words = (f"{v} is WORSE than no pretraining ({_iv(iv, True)})" if iv.excludes_zero and iv.reliable
                     else f"{v} scores below no pretraining ({_iv(iv, True)}); {words}")
        else:
            words = f"{name}: {_iv(iv, True)}, {words}"
        if e.notes:
            words += "; " + "; ".join(e.notes)
        lines.append(f"- {e.task}: {words}")
    inconclusive = sum(1 for e in c.contrasts if not (e.interval.reliable and e.interval.excludes_zero))
    lines.append(f"- {inconclusive} of {len(c.contrasts)} differences have an interval that includes 0 or "
                 "is unreliable: they are inconclusive, not findings.")
    return lines


def _markdown(r: Report) -> list[str]:
    c = r.contributions
    out = [f"# Objective contributions: {r.export_dir}", ""]
    excluded = ", ".join(f"{n} {k}" for k, n in c.excluded.items()) or "none"
    out += [f"Measured variants: {', '.join(c.variants) or 'none'}; pretraining seeds: "
            f"{', '.join(map(str, c.pretrain_seeds))}. Intervals: {c.level:.0%} multi-bootstrap over "
            f"pretraining seeds and test examples (analysis.bootstrap; coverage checked by analysis.validate). "
            f"Measure runs excluded from the estimates (not completed): {excluded}.", ""]
    if c.epochs:
        out += ["Epochs over the pretraining corpus per run (mean): "
                + ", ".join(f"{v} {e:.2f}" for v, e in c.epochs.items()), ""]
    if c.messages:
        out += ["## Messages", ""] + [f"- {m}" for m in c.messages] + [""]
    if not c.tasks:
        return out + ["No completed measure runs with evaluations: nothing to estimate."]
    out += ["## Scores per variant", ""] + _variant_table(c) + [""]
    out += ["## Every variant minus none", ""] + _contrast_table(c, ("vs_none",)) + [""]
    out += ["## Contributions (the seed's contrasts, the 2x2 factorial, SOP, the searched mix)", "",
            "Main effects equal the Shapley shares in a 2x2; the two add up to full - none.", ""]
    out += _contrast_table(c, ("seed", "factorial", "sop", "best_mix")) + [""]
    if c.flags:
        out += ["## Flags", ""] + [f"- {f.variant}{' on ' + f.task if f.task else ''}: {f.reason}"
                                   for f in c.flags] + [""]
    out += ["## Verdict", ""] + _plain_verdict(c) + [""]
    if r.search is not None:
        out += _search_markdown(r.search)
    return out


def _search_markdown(s: SearchSummary) -> list[str]:
    out = ["## Search phase: probe score vs loss weights and mask ratio", "",
           f"{len(s.trials)} completed full-budget trials; excluded: "
           + (", ".join(f"{n} ({k})" for k, n in s.excluded.items()) or "none") + ".", ""]
    if s.spearman:
        rows = [[p, f"{s.spearman[p]:+.2f}"] + [f"{s.importance.get(ev, {}).get(p, float('nan')):.2f}"
                                                for ev in ("fanova", "ped_anova")] for p in s.params]
        out += _md_table(["parameter", "Spearman rho", "fANOVA importance", "PED-ANOVA importance"], rows)
        best = s.trials.loc[s.trials["probe_score"].idxmax()]
        out += ["", "Best trial: " + ", ".join(f"{p}={best[p]:.3g}" for p in s.params)
                + f" -> probe score {best['probe_score']:.3f}"]
    return out + [""] + [f"- {m}" for m in s.messages]


def format_table(report: Report) -> str:
    """The terminal table the main job prints at its end: variants per task, then the contrasts."""
    c = report.contributions
    if not c.tasks:
        return "\n".join(["no completed measure runs to report", *c.messages])
    w = max(len(t) for t in c.tasks) + 2
    lines = ["task".ljust(w) + "".join(v.ljust(24) for v in c.variants)]  # cells are <= 22 characters
    for t in c.tasks:
        lines.append(t.ljust(w) + "".join((_iv(c.means[(t, v)], short=True) + ("*" if _flag_marks(c, t, v) else ""))
                                          .ljust(24) for v in c.variants))
    lines.append("")
    cw = max(len(e.contrast.name) for e in c.contrasts) + 2 if c.contrasts else 10
    for e in c.contrasts:
        if e.contrast.family == "factorial":
            continue
        lines.append(f"{e.task.ljust(w)}{e.contrast.name.ljust(cw)}{_iv(e.interval, True, short=True):26s}"
                     f"{verdict(e.interval)}{' [' + '; '.join(e.notes) + ']' if e.notes else ''}")
    excluded = ", ".join(f"{n} {k}" for k, n in c.excluded.items()) or "none"
    lines += ["", f"* flagged (collapsed or below none). Excluded measure runs: {excluded}.", *c.messages]
    return "\n".join(lines)


def plot_task_bars(c: Contributions, path: Path) -> Path:
    """Per-task bars of each variant's mean with interval whiskers (hatched when flagged)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
            if _flag_marks(c, t, v):
                bar.set_hatch("//")
    ax.set_xticks(np.arange(n_t), c.tasks, rotation=20, ha="right")
    ax.set_ylabel("headline metric")
    ax.set_title(f"Per-task scores, {c.level:.0%} multi-bootstrap intervals (hatched: flagged)")
    ax.legend(fontsize=8, ncols=min(n_v, 4))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_search_response(s: SearchSummary, path: Path) -> Path:
    """Probe score against each varied search parameter (completed full-budget trials)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(s.params), figsize=(3.2 * len(s.params), 3.2), squeeze=False)
    for ax, p in zip(axes[0], s.params):
        ax.scatter(s.trials[p], s.trials["probe_score"], s=14)
        ax.set_xlabel(f"{p} (rho {s.spearman.get(p, float('nan')):+.2f})")
    axes[0][0].set_ylabel("probe score")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(report: Report, out_dir: str | Path) -> list[Path]:
    """Write contributions.md/.csv and the plots into ``out_dir``; return the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "contributions.md", out / "contributions.csv"]
    paths[0].write_text(report.to_markdown() + "\n")
    report.to_frame().to_csv(paths[1], index=False)
    if report.contributions.tasks:
        paths.append(plot_task_bars(report.contributions, out / "contributions.png"))
    if report.search is not None and report.search.params and len(report.search.trials):
        paths.append(plot_search_response(report.search, out / "search_response.png"))
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Contribution estimates with intervals from a sweep export.")
    ap.add_argument("export_dir", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: EXPORT_DIR/report)")
    ap.add_argument("--boot", type=int, default=1000, help="bootstrap resamples")
    ap.add_argument("--level", type=float, default=0.95)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        report = build_report(args.export_dir, args.boot, args.level, args.seed)
    except ValueError as err:  # ExportError and bad arguments: one line, no traceback
        print(f"error: {err}", file=sys.stderr)
        return 2
    paths = write_report(report, args.out or args.export_dir / "report")
    print(format_table(report))
    print("\nwrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
