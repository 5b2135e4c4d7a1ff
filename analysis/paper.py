"""A paper's ablation table beside this run's estimates: per contrast, the paper's difference, this run's
difference on the paper's own metric with its multi-bootstrap interval, the difference of medians over
fine-tuning seeds beside it, and a verdict; and the intrinsic metrics a paper reports (ALBERT's MLM, NSP
and SOP accuracies) beside the run's. Pure functions (no printing): the entry script (sweeps/reproduce.py)
prints the tables and writes paper_vs_run.md / paper_vs_run.png.

    from analysis.paper import PaperContrast, compare, to_markdown, plot
    rows = compare(export_dir, [PaperContrast("full", "mlm_pairs", "MNLI-m", 84.4, 83.9)])
    print(to_markdown(rows, title="BERT Table 5"))

The metric: a claim names the paper's (``PaperContrast.metric``: acc, f1, em, mcc, or avg for an average)
and the run is compared on the same one (``run_metric``): MRPC on accuracy where BERT reports accuracy
though the task's headline metric here is F1, SQuAD on EM and on F1. A claim on the task's headline metric
keeps the report's interval; one on another metric is estimated here from the predictions.

Verdicts, in this order: ``consistent`` (the paper's difference lies in this run's interval);
``same direction, resolved`` / ``opposite direction, resolved`` (the interval excludes the paper's value
and the cell is called by ``analysis.inference.called``: reliable, excludes 0, Holm p < 0.05);
``inconclusive`` otherwise (unreliable interval, or one that neither holds the paper's value nor is
called). A paper task the run did not measure (smoke and quick scales fine-tune on built-in tasks, not
GLUE) is paired with the run's average row, and the row says so: the verdict then compares a GLUE
difference with a different task's, which is a statement about direction and size only. A paper's
average (GLUE score, ALBERT's Avg) is paired with the run's average row, with a warning whenever the two
average different tasks or metrics (``PaperContrast.covers``).

Contrasts the report already derives (same weight vector, headline metric) keep the report's interval and
its Holm p over the report's whole family; the others (ELECTRA vs BERT, two mask rates of one objective, a
paper metric that is not the headline) are estimated here with the same multi-bootstrap, Holm over the
paper's cells only; the row's ``source`` says which.

Medians: the papers report the median over fine-tuning runs (RoBERTa and ALBERT of 5, ELECTRA of 10); the
run's intervals average fine-tuning seeds. ``run median`` is the same difference taken on medians: per
variant and pretraining seed the median over fine-tuning seeds of the selected rate's score, averaged over
pretraining seeds (for an average row, over the average's tasks, each source task weighing the same).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.bootstrap import Interval
from analysis.inference import called

AVERAGE = "average (finetune)"
MEAN_OF_TASKS = "mean of tasks"
NOT_ESTIMABLE = "not estimable (the task row was not learned, or a variant not measured)"
# Paper column names -> this repo's task labels (trainables.tasks.hub; MNLI reports mnli_m and mnli_mm).
TASK_LABELS = {"MNLI-m": "mnli_m", "MNLI": "mnli_m", "QNLI": "qnli", "MRPC": "mrpc", "SST-2": "sst2",
               "CoLA": "cola", "SQuAD": "squad", "SQuAD1.1": "squad", "GLUE": AVERAGE, "Avg": AVERAGE}
PAPER_METRICS = ("acc", "f1", "em", "mcc", "avg")  # what PaperContrast.metric may name


def run_metric(metric: str, run_task: str) -> str:
    """The run's metric (trainables.metrics) for a paper's ``metric`` on the run's task label."""
    if run_task == AVERAGE or metric == "avg":
        return MEAN_OF_TASKS
    squad = run_task.startswith("squad")
    return {"acc": "accuracy", "f1": "squad_f1" if squad else "f1", "em": "squad_em", "mcc": "mcc"}[metric]


@dataclass(frozen=True)
class PaperContrast:
    """One difference a paper reports: ``plus`` - ``minus`` (this run's variant labels) on ``task`` (the
    paper's column name) and ``metric`` (the paper's: acc, f1, em, mcc; avg for an average, whose tasks
    ``covers`` names as the paper does), from the paper's two scores in points (0-100)."""

    plus: str
    minus: str
    task: str
    paper_plus: float
    paper_minus: float
    verified: bool = False  # checked against the paper's own text (see the recipe's note)
    metric: str = "acc"
    covers: tuple[str, ...] = ()  # an average's tasks and metrics, as the paper names them

    def __post_init__(self):
        if self.metric not in PAPER_METRICS:
            raise ValueError(f"PaperContrast.metric={self.metric!r} is not valid; allowed: {', '.join(PAPER_METRICS)}")

    @property
    def name(self) -> str:
        return f"{self.plus} - {self.minus}"

    @property
    def paper_diff(self) -> float:
        return round(self.paper_plus - self.paper_minus, 6)

    @property
    def weights(self) -> dict[str, float]:
        return {self.plus: 1.0, self.minus: -1.0}


@dataclass(frozen=True)
class PaperRow:
    claim: PaperContrast
    run_task: str  # the run's row this claim is paired with
    same_task: bool  # False: the paper's task was not measured; paired with the run's average
    interval: Interval | None  # of plus - minus in the metric's units (0-1), None when not estimable
    p_adjusted: float
    source: str  # "report" (its contrast and family) | "paper cells" (estimated here) | why it is missing
    verdict: str
    metric: str = ""  # the run's metric the row compares (MEAN_OF_TASKS for an average)
    median: float = math.nan  # plus - minus on medians over fine-tuning seeds (units 0-1)
    warning: str = ""  # the run's average covers other tasks or metrics than the paper's


def paper_verdict(paper_diff_units: float, iv: Interval | None, p_adjusted: float) -> str:
    """The four verdicts of the module docstring for a paper difference in the run's units."""
    if iv is None or not np.isfinite(iv.lo):
        return "inconclusive (no interval)"
    if not iv.reliable:
        return f"inconclusive (unreliable: {iv.n_seeds} seed{'s' * (iv.n_seeds != 1)})"
    if iv.lo <= paper_diff_units <= iv.hi:
        return "consistent"
    if called(iv, p_adjusted):
        same = math.copysign(1, iv.estimate) == math.copysign(1, paper_diff_units)
        return "same direction, resolved" if same else "opposite direction, resolved"
    return "inconclusive"


def _run_task(claim: PaperContrast, tasks: tuple[str, ...]) -> tuple[str, bool]:
    label = TASK_LABELS.get(claim.task, claim.task.lower())
    if label in tasks:
        return label, label != AVERAGE or claim.task in ("GLUE", "Avg")
    return AVERAGE, False


def _key(weights: dict[str, float]) -> tuple:
    return tuple(sorted((v, round(float(w), 9)) for v, w in weights.items() if w))


def _from_report(contributions, claim: PaperContrast, task: str) -> tuple[Interval, float] | None:
    """The report's estimate of ``claim``'s weight vector on ``task`` (or of its negation, flipped)."""
    want, neg = _key(claim.weights), _key({v: -w for v, w in claim.weights.items()})
    for e in contributions.contrasts:
        if e.task != task:
            continue
        k = _key(e.contrast.weights)
        if k == want:
            return e.interval, e.p_adjusted
        if k == neg:
            iv = e.interval
            return Interval(-iv.estimate, -iv.hi, -iv.lo, iv.p_value, iv.se, iv.df, iv.n_seeds, iv.reliable,
                            -iv.raw_hi, -iv.raw_lo, iv.seed_var, iv.example_var), e.p_adjusted
    return None


def estimate_cells(export_dir: str | Path, cells: list[tuple[dict[str, float], str, str]], n_boot: int = 1000,
                   level: float = 0.95, seed: int = 0) -> dict[int, tuple[Interval, float]]:
    """Index into ``cells`` -> (interval, Holm p over these cells) for contrasts the report does not give.

    A cell is (weights, task label, metric): the task's row on that metric (its headline metric, or
    MEAN_OF_TASKS for the average row), by the report's own multi-bootstrap. Cells on a task not learned,
    or whose variants were not measured, are left out."""
    from analysis.contributions import _averages, _measure_tasks, measure_runs
    from analysis.export import load_export
    from analysis.inference import family_calls
    from analysis.variants import variant_specs

    export = load_export(export_dir)
    done, _, _ = measure_runs(export.runs)
    if done.empty:
        return {}
    done = done.assign(pretrain_seed=done["pretrain_seed"].astype(int))
    specs, _ = variant_specs(done, export.objectives)
    variants = tuple(specs)
    usable = [k for k, (w, _, _) in enumerate(cells) if all(v in variants for v in w)]
    if not usable:
        return {}
    seeds = tuple(sorted(int(s) for s in done["pretrain_seed"].unique()))
    evals = export.evals[export.evals["run_id"].isin(done["run_id"])]
    rows = np.array([[1.0 if u == v else 0.0 for u in variants] for v in variants]
                    + [[float(cells[k][0].get(u, 0.0)) for u in variants] for k in usable])
    rng = np.random.default_rng(seed)
    tasks, _ = _measure_tasks(export, done, evals, variants, seeds, rows, rng, n_boot, level)
    tasks += _averages(tasks, variants, rows, rng, n_boot, level)
    by_row = {(t.label, t.metric if t.label != AVERAGE else MEAN_OF_TASKS): t for t in tasks}
    other = {(label, "finetune"): metric for k in usable for _, label, metric in [cells[k]]
             if (label, metric) not in by_row and label != AVERAGE}
    if other:
        extra, _ = _measure_tasks(export, done, evals, variants, seeds, rows, rng, n_boot, level, metrics=other)
        by_row.update({(t.label, t.metric): t for t in extra})
    learned = {t.label: t.learned for t in tasks}  # a task not learned on its headline metric stays out
    found = []
    for j, k in enumerate(usable):
        t = by_row.get(cells[k][1:])
        if t is not None and learned.get(t.label, False):
            found.append((k, t.intervals[len(variants) + j]))
    adjusted, _, _ = family_calls([iv for _, iv in found])
    return {k: (iv, float(p)) for (k, iv), p in zip(found, adjusted)}


def average_tasks(contributions) -> list[tuple[str, str]]:
    """(task label, metric) of the tasks the run's fine-tuned average covers: the learned finetune rows."""
    return [(t, contributions.metrics[t]) for t in contributions.tasks
            if not t.startswith("average") and "(probe" not in t and t not in contributions.not_learned]


def _covers_warning(claim: PaperContrast, ours: list[tuple[str, str]]) -> str:
    """Non-empty when the run's average covers other tasks or metrics than the paper's average."""
    theirs = {TASK_LABELS.get(c.split(" (")[0], c.split(" (")[0].lower()) for c in claim.covers}
    mine = {t for t, _ in ours}
    metrics_differ = any(m not in ("accuracy", "mcc") for t, m in ours if t != "squad")  # GLUE scores: acc, MCC
    if claim.covers and theirs == mine and not metrics_differ:
        return ""
    run = ", ".join(f"{t} ({m})" for t, m in ours) or "no learned task"
    paper = ", ".join(claim.covers) or "not stated"
    return f"{claim.task} differs from this run's average: the paper's covers {paper}; this run's covers {run}"


def fine_tuning_medians(export_dir: str | Path, metrics: dict[str, str]) -> dict[tuple[str, str], float]:
    """(variant, task label) -> the mean over pretraining seeds of the median over fine-tuning seeds of the
    task's ``metrics[task]`` (the selected rate's rows of completed measure runs, finetune mode)."""
    from analysis.contributions import measure_runs
    from analysis.export import load_export

    export = load_export(export_dir)
    done, _, _ = measure_runs(export.runs)
    ev = export.evals[(export.evals["mode"] == "finetune") & export.evals["run_id"].isin(done["run_id"])]
    ev = ev[ev["metric"] == ev["task"].map(metrics)]
    if ev.empty:
        return {}
    med = ev.groupby(["run_id", "task"])["value"].median().reset_index()
    med = med.merge(done[["run_id", "variant"]], on="run_id")
    return {(str(v), str(t)): float(x) for (v, t), x in med.groupby(["variant", "task"])["value"].mean().items()}


def _median_diff(medians, claim: PaperContrast, task: str, metric: str, avg: list[tuple[str, str]],
                 sources: dict[str, str]) -> float:
    def value(variant: str) -> float:
        if task != AVERAGE:
            return medians.get((variant, task), math.nan)
        groups: dict[str, list[float]] = {}
        for t, _ in avg:
            groups.setdefault(sources.get(t, t), []).append(medians.get((variant, t), math.nan))
        return float(np.mean([np.mean(g) for g in groups.values()])) if groups else math.nan

    return value(claim.plus) - value(claim.minus)


def compare(export_dir: str | Path, claims: list[PaperContrast], contributions=None, n_boot: int = 1000,
            seed: int = 0) -> list[PaperRow]:
    """One row per paper claim: the run's estimate of the same contrast on the paper's metric beside the
    paper's difference, with the difference of medians over fine-tuning seeds."""
    if contributions is None:
        from analysis.report import build_report

        contributions = build_report(export_dir, n_boot=n_boot, seed=seed).contributions
    tasks = tuple(contributions.tasks)
    paired = [(*_run_task(c, tasks),) for c in claims]
    metrics = [run_metric(c.metric, task) for c, (task, _) in zip(claims, paired)]
    found, missing = {}, []
    for j, c in enumerate(claims):
        task = paired[j][0]
        headline = MEAN_OF_TASKS if task == AVERAGE else contributions.metrics.get(task)
        hit = _from_report(contributions, c, task) if metrics[j] == headline else None
        if hit is not None:
            found[j] = (*hit, "report")
        else:
            missing.append(j)
    if missing:
        extra = estimate_cells(export_dir, [(claims[j].weights, paired[j][0], metrics[j]) for j in missing],
                               n_boot, seed=seed)
        found.update({j: (*extra[k], "paper cells") for k, j in enumerate(missing) if k in extra})
    avg = average_tasks(contributions)
    need = {t: m for (t, _), m in zip(paired, metrics) if t != AVERAGE} | dict(avg)
    medians = fine_tuning_medians(export_dir, need)
    sources = _sources(export_dir)
    rows = []
    for j, c in enumerate(claims):
        task, same = paired[j]
        iv, p, source = found.get(j, (None, float("nan"), NOT_ESTIMABLE))
        warning = _covers_warning(c, avg) if task == AVERAGE and same else ""
        rows.append(PaperRow(c, task, same, iv, p, source, paper_verdict(c.paper_diff / 100.0, iv, p), metrics[j],
                             _median_diff(medians, c, task, metrics[j], avg, sources), warning))
    return rows


def _sources(export_dir: str | Path) -> dict[str, str]:
    """Task label -> its registered task (mnli_m and mnli_mm -> mnli), as the report's averages weigh them."""
    from analysis.export import load_export

    ev = load_export(export_dir).evals
    if "source_task" not in ev.columns:
        return {}
    pairs = ev[["task", "source_task"]].dropna().drop_duplicates()
    return {str(t): str(s) or str(t) for t, s in zip(pairs["task"], pairs["source_task"])}


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def format_run(iv: Interval | None) -> str:
    """This run's difference in points (x 100), with its interval when reliable."""
    if iv is None:
        return "n/a"
    if not iv.reliable or not np.isfinite(iv.lo):
        return f"{_pts(iv.estimate)} (unreliable, {iv.n_seeds} seeds)"
    return f"{_pts(iv.estimate)} [{_pts(iv.lo)}, {_pts(iv.hi)}]"


def to_markdown(rows: list[PaperRow], title: str = "", note: str = "", notes: tuple[str, ...] = ()) -> str:
    """The paper's table and this run's side by side, one line per claim (points: metric x 100), then the
    warnings, the sources and ``notes`` (the protocols, the scale's note, what differs)."""
    out = [f"## {title}" if title else "## Paper vs this run", ""]
    if note:
        out += [note, ""]
    out += ["| contrast | paper task | paper metric | paper | paper diff | run task (metric) | run diff [95% interval] "
            "| run diff of medians | verdict | verified |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r.claim
        run_task = f"{r.run_task} ({r.metric})" + ("" if r.same_task else ", paper's task not measured")
        median = _pts(r.median) if np.isfinite(r.median) else "n/a"
        out.append(f"| {c.name} | {c.task} | {c.metric} | {c.paper_plus:.1f} vs {c.paper_minus:.1f} | "
                   f"{c.paper_diff:+.1f} | {run_task} | {format_run(r.interval)} | {median} | {r.verdict} | "
                   f"{'yes' if c.verified else 'no'} |")
    out += ["", "Differences in points (metric x 100). Run intervals: multi-bootstrap over pretraining seeds and "
                "test examples, fine-tuning seeds averaged; the difference of medians takes the median over "
                "fine-tuning seeds instead, as the papers report. Source of each: "
            + "; ".join(sorted({f'{r.claim.name} on {r.run_task}: {r.source}' for r in rows})) + "."]
    out += [f"Warning: {w}." for w in dict.fromkeys(r.warning for r in rows if r.warning)]
    if any(not r.same_task for r in rows):
        out.append("Rows marked 'paper's task not measured' pair the paper's task with this run's average over "
                   "its own tasks: the comparison is of direction and size, not of the same benchmark.")
    out += [""] + [f"  - {n.strip()}" if n.startswith(" ") else f"- {n}" for n in notes] if notes else []
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------- intrinsic metrics

@dataclass(frozen=True)
class PaperIntrinsic:
    """An intrinsic metric a paper reports for one of its rows (ALBERT Table 5: MLM, NSP, SOP accuracy), in
    points, beside the run's held-out metric ``column`` (a runs.parquet column: mlm_acc, pair_acc_nsp, ...)."""

    variant: str  # this run's label of the row
    metric: str  # the paper's name
    paper: float
    column: str
    verified: bool = False


@dataclass(frozen=True)
class IntrinsicRow:
    item: PaperIntrinsic
    mean: float  # over the completed measure runs of the variant (0-1)
    lo: float  # the lowest and highest pretraining seed
    hi: float
    n: int  # pretraining seeds


def compare_intrinsic(export_dir: str | Path, items: list[PaperIntrinsic]) -> list[IntrinsicRow]:
    """Per item, the run's mean, lowest and highest value over pretraining seeds (NaN when not recorded)."""
    from analysis.contributions import measure_runs
    from analysis.export import load_export

    done, _, _ = measure_runs(load_export(export_dir).runs)
    out = []
    for it in items:
        values = pd.to_numeric(done.loc[done["variant"] == it.variant, it.column], errors="coerce").dropna() \
            if it.column in done.columns else pd.Series(dtype=float)
        v = values.to_numpy(float)
        out.append(IntrinsicRow(it, *(float(f(v)) if len(v) else math.nan for f in (np.mean, np.min, np.max)),
                                len(v)))
    return out


def intrinsic_markdown(rows: list[IntrinsicRow], title: str, note: str = "") -> str:
    out = [f"### {title}", ""] + ([note, ""] if note else [])
    out += ["| row | paper metric | paper | run metric | run mean [lowest, highest seed] | seeds | verified |",
            "|---|---|---|---|---|---|---|"]
    for r in rows:
        it = r.item
        run = (f"{100 * r.mean:.1f} [{100 * r.lo:.1f}, {100 * r.hi:.1f}]" if r.n else "n/a (not recorded)")
        out.append(f"| {it.variant} | {it.metric} | {it.paper:.1f} | {it.column} | {run} | {r.n} | "
                   f"{'yes' if it.verified else 'no'} |")
    return "\n".join(out) + "\n"


def plot(rows: list[PaperRow], path: str | Path, title: str = "") -> Path:
    """The paper's differences (points) over this run's intervals, one line per claim."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.5 * len(rows) + 1.5))
    for y, r in enumerate(rows):
        if r.interval is not None:
            iv = r.interval
            lo, hi = (iv.lo, iv.hi) if iv.reliable and np.isfinite(iv.lo) else (iv.estimate, iv.estimate)
            ax.plot([100 * lo, 100 * hi], [y, y], color="tab:blue", lw=3, alpha=0.6,
                    label="this run (95% interval)" if y == 0 else None)
            ax.plot(100 * iv.estimate, y, "o", color="tab:blue")
        ax.plot(r.claim.paper_diff, y, "D", color="tab:red", label="paper" if y == 0 else None)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r.claim.name}\n{r.claim.task} ({r.claim.metric}) / {r.run_task}" for r in rows], fontsize=7)
    ax.set_xlabel("difference (points)")
    ax.set_title(title or "paper vs this run", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
