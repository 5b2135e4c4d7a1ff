"""A paper's ablation table beside this run's estimates: per contrast, the paper's difference, this run's
difference with its multi-bootstrap interval, and a verdict. Pure functions (no printing): the entry
script (sweeps/reproduce.py) prints the table and writes paper_vs_run.md / paper_vs_run.png.

    from analysis.paper import PaperContrast, compare, to_markdown, plot
    rows = compare(export_dir, [PaperContrast("full", "mlm_only", "MNLI-m", 84.4, 83.9)])
    print(to_markdown(rows, title="BERT Table 5"))

Verdicts, in this order: ``consistent`` (the paper's difference lies in this run's interval);
``same direction, resolved`` / ``opposite direction, resolved`` (the interval excludes the paper's value
and the cell is called by ``analysis.inference.called``: reliable, excludes 0, Holm p < 0.05);
``inconclusive`` otherwise (unreliable interval, or one that neither holds the paper's value nor is
called). A paper task the run did not measure (smoke and quick scales fine-tune on built-in tasks, not
GLUE) is paired with the run's average row, and the row says so: the verdict then compares a GLUE
difference with a different task's, which is a statement about direction and size only.

Contrasts the report already derives (same weight vector) keep the report's interval and its Holm p over
the report's whole family; the others (ELECTRA vs BERT, two mask rates of one objective) are estimated
here with the same multi-bootstrap, Holm over the paper's cells only; the row's ``source`` says which.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analysis.bootstrap import Interval
from analysis.inference import called

AVERAGE = "average (finetune)"
NOT_ESTIMABLE = "not estimable (the task row was not learned, or a variant not measured)"
# Paper column names -> this repo's task labels (trainables.tasks.hub; MNLI reports mnli_m and mnli_mm).
TASK_LABELS = {"MNLI-m": "mnli_m", "MNLI": "mnli_m", "QNLI": "qnli", "MRPC": "mrpc", "SST-2": "sst2",
               "CoLA": "cola", "SQuAD": "squad", "SQuAD1.1": "squad", "GLUE": AVERAGE, "Avg": AVERAGE}


@dataclass(frozen=True)
class PaperContrast:
    """One difference a paper reports: ``plus`` - ``minus`` (this run's variant labels) on ``task`` (the
    paper's column name), from the paper's two scores in points (0-100)."""

    plus: str
    minus: str
    task: str
    paper_plus: float
    paper_minus: float
    verified: bool = False  # checked against the paper's own text (see the recipe's note)
    metric: str = "acc"

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


def estimate_weights(export_dir: str | Path, weights: list[dict[str, float]], n_boot: int = 1000,
                     level: float = 0.95, seed: int = 0) -> dict[tuple[str, int], tuple[Interval, float]]:
    """(task label, index into ``weights``) -> (interval, Holm p over these cells) for contrasts the report
    does not derive, on the learned task rows and their average, by the report's own multi-bootstrap."""
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
    usable = [i for i, w in enumerate(weights) if all(v in variants for v in w)]
    if not usable:
        return {}
    seeds = tuple(sorted(int(s) for s in done["pretrain_seed"].unique()))
    evals = export.evals[export.evals["run_id"].isin(done["run_id"])]
    rows = np.array([[1.0 if u == v else 0.0 for u in variants] for v in variants]
                    + [[float(weights[i].get(u, 0.0)) for u in variants] for i in usable])
    rng = np.random.default_rng(seed)
    tasks, _ = _measure_tasks(export, done, evals, variants, seeds, rows, rng, n_boot, level)
    tasks += _averages(tasks, variants, rows, rng, n_boot, level)
    cells = [(t.label, i, iv) for t in tasks if t.learned for i, iv in zip(usable, t.intervals[len(variants):])]
    adjusted, _, _ = family_calls([iv for *_, iv in cells])
    return {(task, i): (iv, float(p)) for (task, i, iv), p in zip(cells, adjusted)}


def compare(export_dir: str | Path, claims: list[PaperContrast], contributions=None, n_boot: int = 1000,
            seed: int = 0) -> list[PaperRow]:
    """One row per paper claim: the run's estimate of the same contrast beside the paper's difference."""
    if contributions is None:
        from analysis.report import build_report

        contributions = build_report(export_dir, n_boot=n_boot, seed=seed).contributions
    tasks = tuple(contributions.tasks)
    found, missing = {}, []
    for j, c in enumerate(claims):
        task, _ = _run_task(c, tasks)
        hit = _from_report(contributions, c, task)
        if hit is not None:
            found[j] = (*hit, "report")
        else:
            missing.append(j)
    if missing:
        extra = estimate_weights(export_dir, [claims[j].weights for j in missing], n_boot, seed=seed)
        for k, j in enumerate(missing):
            task, _ = _run_task(claims[j], tasks)
            if (task, k) in extra:
                found[j] = (*extra[(task, k)], "paper cells")
    rows = []
    for j, c in enumerate(claims):
        task, same = _run_task(c, tasks)
        iv, p, source = found.get(j, (None, float("nan"), NOT_ESTIMABLE))
        rows.append(PaperRow(c, task, same, iv, p, source, paper_verdict(c.paper_diff / 100.0, iv, p)))
    return rows


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def format_run(iv: Interval | None) -> str:
    """This run's difference in points (x 100), with its interval when reliable."""
    if iv is None:
        return "n/a"
    if not iv.reliable or not np.isfinite(iv.lo):
        return f"{_pts(iv.estimate)} (unreliable, {iv.n_seeds} seeds)"
    return f"{_pts(iv.estimate)} [{_pts(iv.lo)}, {_pts(iv.hi)}]"


def to_markdown(rows: list[PaperRow], title: str = "", note: str = "") -> str:
    """The paper's table and this run's side by side, one line per claim (points: metric x 100)."""
    out = [f"## {title}" if title else "## Paper vs this run", ""]
    if note:
        out += [note, ""]
    out += ["| contrast | paper task | paper | paper diff | run task | run diff [95% interval] | verdict | verified |",
            "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r.claim
        run_task = r.run_task + ("" if r.same_task else " (paper's task not measured)")
        out.append(f"| {c.name} | {c.task} | {c.paper_plus:.1f} vs {c.paper_minus:.1f} | {c.paper_diff:+.1f} | "
                   f"{run_task} | {format_run(r.interval)} | {r.verdict} | {'yes' if c.verified else 'no'} |")
    out += ["", "Differences in points (metric x 100). Run intervals: multi-bootstrap over pretraining seeds and "
                "test examples; source of each: " + "; ".join(sorted({f'{r.claim.name} on {r.run_task}: {r.source}'
                                                                      for r in rows})) + "."]
    if any(not r.same_task for r in rows):
        out.append("Rows marked 'paper's task not measured' pair the paper's task with this run's average over "
                   "its own tasks: the comparison is of direction and size, not of the same benchmark.")
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
    ax.set_yticklabels([f"{r.claim.name}\n{r.claim.task} / {r.run_task}" for r in rows], fontsize=7)
    ax.set_xlabel("difference (points)")
    ax.set_title(title or "paper vs this run", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
