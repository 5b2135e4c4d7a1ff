"""Before vs after domain-adaptive pretraining: per-task scores and the gain, with intervals.

Pure functions over an ``Export`` written by ``sweeps/domain_adapt.py``: one completed measure run of
the base checkpoint as it is (variant ``before``, 0 steps) and completed ``domain_adapt`` runs (the
checkpoint pretrained further on the user's corpus) over K pretraining seeds, all fine-tuned on the
same tasks.

    shift = estimate_domain_shift(load_export(dir), np.random.default_rng(0))
    print(format_domain_table(shift))

Pairing. The base checkpoint is one fixed model: on the 'before' side the only randomness is
fine-tuning. The sweep fine-tunes it with K x M seeds, which are split here into K blocks of M, block
k standing beside pretraining seed k of ``domain_adapt``. Each of the K slots then holds an
independent 'before' and 'after' measurement on the same test examples, and the multi-bootstrap
(``analysis.bootstrap``) resamples slots and examples jointly, exactly as for any two variants.
With fewer 'before' fine-tunings than slots, all of them are used in every slot (their fine-tuning
noise is then not resampled, and a message says so).

Verdicts. A gain is called positive / negative only by the report's family rule
(``analysis.inference.family_calls``): Holm over the gains of every task row printed (the averages
included), never on a raw p-value.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.bootstrap import Interval, multibootstrap
from analysis.contributions import build_measurement, measure_runs, primary_metrics, task_label
from analysis.export import Export
from analysis.inference import family_calls

NAN = float("nan")

BEFORE = "before"
AFTER = "domain_adapt"
INTRINSIC = ("mlm_acc", "mlm_ppl")  # held-out documents of the user's corpus, the same for both sides
CONTRASTS = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 1.0]])  # before, after, after - before


@dataclass(frozen=True)
class TaskShift:
    task: str  # task label ('sst2', 'topic (probe)', 'average (finetune)')
    metric: str
    before: Interval
    after: Interval
    gain: Interval  # after - before
    p_adjusted: float = NAN  # Holm over the gains of every task row (analysis.inference.family_calls)


@dataclass(frozen=True)
class DomainShift:
    tasks: tuple[TaskShift, ...]
    intrinsic: dict[str, tuple[float, float]]  # runs.parquet column -> (before, mean over after seeds)
    pretrain_seeds: tuple[int, ...]  # of the after runs (the slots)
    before_finetunes: int  # fine-tuning runs of the base checkpoint per task
    messages: tuple[str, ...]
    level: float = 0.95

    def to_frame(self) -> pd.DataFrame:
        """One row per (task, quantity): the CSV beside the table."""
        rows = []
        for t in self.tasks:
            for name, iv in (("before", t.before), ("after", t.after), ("after - before", t.gain)):
                rows.append(dict(task=t.task, metric=t.metric, quantity=name, estimate=iv.estimate, lo=iv.lo,
                                 hi=iv.hi, p_value=iv.p_value, n_seeds=iv.n_seeds, reliable=iv.reliable,
                                 p_holm=t.p_adjusted if name == "after - before" else NAN))
        return pd.DataFrame(rows)


def _slots(units: list[tuple[str, int]], n_slots: int) -> tuple[list[tuple[str, int, int, int]], bool]:
    """(run_id, finetune_seed) of the 'before' fine-tunings -> (run_id, seed, slot, seed in slot) rows.

    Contiguous blocks when there are enough fine-tunings for every slot; otherwise all in each slot."""
    if len(units) >= n_slots:
        blocks = np.array_split(np.arange(len(units)), n_slots)
        return [(*units[i], p, j) for p, block in enumerate(blocks) for j, i in enumerate(block)], False
    return [(*u, p, j) for p in range(n_slots) for j, u in enumerate(units)], True


def _relabel(df: pd.DataFrame, slots: pd.DataFrame) -> pd.DataFrame:
    """Rows of the 'before' runs moved to their slot's run id and in-slot fine-tuning seed."""
    merged = df.merge(slots, on=["run_id", "finetune_seed"], how="inner")
    return merged.drop(columns=["run_id", "finetune_seed"]).rename(
        columns={"slot_run_id": "run_id", "slot_seed": "finetune_seed"})[df.columns]


def _empty(messages: list[str], level: float) -> DomainShift:
    return DomainShift((), {}, (), 0, tuple(messages), level)


def estimate_domain_shift(export: Export, rng: np.random.Generator, n_boot: int = 1000, level: float = 0.95,
                          before: str = BEFORE, after: str = AFTER) -> DomainShift:
    """Per-task means of ``before`` and ``after`` and ``after - before``, with multi-bootstrap intervals."""
    done, excluded, messages = measure_runs(export.runs)
    if excluded:
        messages.append("measure runs left out (not completed): "
                        + ", ".join(f"{n} {k}" for k, n in excluded.items()))
    b_runs, a_runs = done[done["variant"] == before], done[done["variant"] == after]
    for name, runs in ((before, b_runs), (after, a_runs)):
        if runs.empty:
            messages.append(f"no completed measure run of variant {name!r}: no before/after comparison")
    if b_runs.empty or a_runs.empty:
        return _empty(messages, level)
    seeds = tuple(sorted(int(s) for s in a_runs["pretrain_seed"].unique()))
    b_evals = export.evals[export.evals["run_id"].isin(b_runs["run_id"])]
    units = sorted({(str(r), int(s)) for r, s in zip(b_evals["run_id"], b_evals["finetune_seed"])})
    if not units:
        return _empty(messages + [f"the {before!r} run has no evaluations"], level)
    rows, shared = _slots(units, len(seeds))
    if shared:
        messages.append(f"{len(units)} fine-tuning(s) of {before!r} for {len(seeds)} pretraining seeds of "
                        f"{after!r}: the same ones sit beside every seed, so their fine-tuning noise is not "
                        f"resampled (the sweep runs seeds x finetune-seeds of them to avoid this)")
    slots = pd.DataFrame([(r, s, f"{before}@{p}", j) for r, s, p, j in rows],
                         columns=["run_id", "finetune_seed", "slot_run_id", "slot_seed"])
    a_ids = set(a_runs["run_id"])
    evals = pd.concat([export.evals[export.evals["run_id"].isin(a_ids)], _relabel(b_evals, slots)])
    preds = export.predictions
    if not preds.empty:
        preds = pd.concat([preds[preds["run_id"].isin(a_ids)],
                           _relabel(preds[preds["run_id"].isin(b_runs["run_id"])], slots)])
    runs = pd.concat([a_runs[["run_id", "variant"]].assign(pretrain_seed=a_runs["pretrain_seed"].astype(int)),
                      pd.DataFrame({"run_id": [f"{before}@{p}" for p in range(len(seeds))], "variant": before,
                                    "pretrain_seed": list(seeds)})], ignore_index=True)
    tasks, metric_msgs = _task_shifts(runs, evals, preds, (before, after), seeds, rng, n_boot, level)
    intrinsic = {c: (float(b_runs[c].mean()), float(a_runs[c].mean())) for c in INTRINSIC if c in done.columns}
    return DomainShift(tasks, intrinsic, seeds, len(units), tuple(messages + metric_msgs), level)


def _task_shifts(runs, evals, preds, variants, seeds, rng, n_boot, level) -> tuple[tuple[TaskShift, ...], list[str]]:
    metrics, messages = primary_metrics(evals)
    out, groups = [], {}
    for (task, mode), metric in metrics.items():
        sides = set(runs.set_index("run_id").loc[evals.loc[evals["task"] == task, "run_id"].unique(), "variant"])
        if len(sides) < 2:
            messages.append(f"task {task!r} ({mode}) was evaluated for {sorted(sides)} only: no comparison")
            continue
        m = build_measurement(runs, evals, preds, task, mode, metric, variants, seeds)
        out.append(TaskShift(task_label(task, mode), metric, *multibootstrap([m], CONTRASTS, rng, n_boot, level)))
        groups.setdefault(mode, []).append(m)
    for mode, ms in groups.items():
        if len(ms) >= 2:
            ivs = multibootstrap(ms, CONTRASTS, rng, n_boot, level)
            out.append(TaskShift(f"average ({mode})", "mean of tasks", *ivs))
    adjusted, _, _ = family_calls([t.gain for t in out])
    return tuple(dataclasses.replace(t, p_adjusted=float(p)) for t, p in zip(out, adjusted)), messages


def format_domain_table(shift: DomainShift) -> str:
    """The terminal table: before, after and the gain per task, with a verdict on the gain."""
    from analysis.report import format_interval, verdict

    lines = []
    if shift.tasks:
        w = max(len(t.task) for t in shift.tasks) + 2
        mw = max(len(t.metric) for t in shift.tasks) + 2
        lines.append("task".ljust(w) + "metric".ljust(mw) + "before".ljust(24) + "after".ljust(24)
                     + "gain (after - before)".ljust(30) + "verdict")
        for t in shift.tasks:
            lines.append(t.task.ljust(w) + t.metric.ljust(mw) + format_interval(t.before, short=True).ljust(24)
                         + format_interval(t.after, short=True).ljust(24)
                         + format_interval(t.gain, True, short=True).ljust(30)
                         + verdict(t.gain, t.p_adjusted))
        lines += ["", f"{shift.level:.0%} multi-bootstrap intervals over {len(shift.pretrain_seeds)} pretraining "
                  f"seed(s) of the adapted model and test examples; the base checkpoint fine-tuned "
                  f"{shift.before_finetunes} time(s) per task. Verdicts: Holm over the gains of all "
                  f"{len(shift.tasks)} rows (one family), never on raw p."]
    names = {"mlm_acc": "held-out MLM accuracy", "mlm_ppl": "held-out MLM perplexity"}
    for col, (b, a) in shift.intrinsic.items():
        lines.append(f"{names.get(col, col)} on the corpus: before {b:.4g}, after {a:.4g} "
                     f"(mean of {len(shift.pretrain_seeds)} seed(s))")
    return "\n".join(lines + list(shift.messages))
