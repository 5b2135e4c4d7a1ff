"""Contribution estimates per task: variant means, derived contrasts with Holm and power, flags.

Pure functions over an ``Export`` (``analysis.export``). Only runs with phase 'measure' and status
'completed' enter the estimates; stopped and failed ones are counted.

    contrasts   derived from the measured variants' weights and input formats (analysis.contrasts)
    tasks       one row per (task, mode); a task on which no variant, none included, scores above
                its chance baseline *on dev* (analysis.baseline.learned_on_dev; on test only for
                exports without dev values) is "not learned at this budget": its means are shown,
                its contrasts are not
    averages    'average (finetune)' / 'average (probe)' over every task the design measured (the same set in
                every seed block and at every point of a curve, learned or not), each source task
                weighing the same (mnli_m and mnli_mm are halves of one; evals.source_task)
    Holm        two families, each over every task row of the learned rows, averages included: the
                primary contrasts (analysis.contrasts.PRIMARY: MLM's effect over none, NSP's loss
                effect), declared before any run, and every other cell (analysis.inference.family_calls);
                the baseline readings' cells are families of their own (_family, context, over_baselines)
    non-neural  a probe trial's TF-IDF or most-frequent-tag baseline (finetune.text_baselines) reads no
                encoder, so it is no reading with contrasts: its score sits beside the chance baseline
                (text_baselines) and each variant's probe is read against it (over_baselines)
    power       per contrast: the minimal detectable effect at that family's first Holm step
                (alpha/m), the prospective MDE with more seeds, the seeds that would resolve it
                (with the range the seed variance's 2 df allow)
    did not learn  a fine-tuning whose test predictions are one label for >= 95% of examples
                (analysis.flags.did_not_learn) is left out of every estimate: a contrast needing its
                (variant, pretraining seed) drops that seed there; counted and listed in the messages
    flags       a variant collapsed beyond none (analysis.flags: cosines and one-label fine-tuning), and per
                task a variant whose interval of (variant - none) lies entirely below 0; a contrast
                that subtracts a flagged variant is marked and not credited to the other objective
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.baseline import chance_baseline, dev_seed_values, learned, learned_on_dev, task_golds
from analysis.bootstrap import Interval, Measurement, multibootstrap
from analysis.contrasts import ContrastDef, derive_contrasts, holm_family, pair_level_objectives
from analysis.export import Export
from analysis.flags import Flag, collapse_flags, contrast_notes, did_not_learn, worse_than_none
from analysis.inference import Power, contrast_power, family_calls, holm, tost_p
from analysis.stats import example_stats
from analysis.variants import NONE, VariantSpec, variant_specs
from trainables.config import EMBEDDING_PROBE, TEXT_BASELINES
from trainables.metrics import METRIC_RANGES

NAN = float("nan")


@dataclass(frozen=True)
class ContrastEstimate:
    task: str
    contrast: ContrastDef
    interval: Interval
    notes: tuple[str, ...] = ()  # flags of the variants it involves
    p_adjusted: float = NAN  # Holm within its family (holm_family) over every task row
    power: Power | None = None
    # primary (analysis.contrasts.PRIMARY) | secondary | baseline | context | text_baseline
    holm_family: str = "secondary"
    # TOST within +-analysis.inference.EQUIVALENCE_MARGIN, Holm within the same family: below 0.05, a tie is shown
    p_equivalence: float = NAN


@dataclass(frozen=True)
class Budget:
    """What each pretraining run cost (means over the pretrained measure runs; NaN when not recorded)."""

    epochs: float
    tokens: float
    steps: float
    pretrain_seeds: int
    finetune_seeds: int
    kind: str = "steps"  # optim.budget the runs shared: steps | tokens | flops
    flops: dict = field(default_factory=dict)  # variant -> mean training FLOPs per run (when recorded)
    seconds: float = NAN  # mean wall seconds of one pretraining run (as the sweep ran them, several at once)


@dataclass(frozen=True)
class Contributions:
    """Everything the report shows; tasks include 'average (finetune)' / 'average (probe)' rows."""

    variants: tuple[str, ...]
    tasks: tuple[str, ...]
    metrics: dict[str, str]  # task -> headline metric
    pretrain_seeds: tuple[int, ...]
    means: dict[tuple[str, str], Interval]  # (task, variant) -> interval of the mean
    contrasts: list[ContrastEstimate]
    flags: list[Flag]
    messages: list[str]
    excluded: dict[str, int]  # status -> measure runs left out
    epochs: dict[str, float] = field(default_factory=dict)  # variant -> mean pretraining epochs
    level: float = 0.95
    baselines: dict[str, float] = field(default_factory=dict)  # task -> chance baseline
    not_learned: tuple[str, ...] = ()  # tasks no variant scored above baseline on
    budget: Budget | None = None
    specs: dict[str, VariantSpec] = field(default_factory=dict)
    # the contrasts of the tasks not learned, never called nor in any family (a negative control's truth is
    # 0: whether its intervals cover 0 is still worth reading, analysis.known_answer)
    unlearned: list[ContrastEstimate] = field(default_factory=list)
    did_not_learn: int = 0  # fine-tunings left out of every estimate: one label for >= 95% of dev examples
    mlm_acc: dict[str, float] = field(default_factory=dict)  # variant -> mean held-out MLM accuracy (MLM variants)
    nsp_acc: dict[str, float] = field(default_factory=dict)  # variant -> mean held-out NSP accuracy (NSP variants)
    preset: str = ""  # the measure runs' preset (their config), when the export records it
    # the fine-tuned primary cells with every fine-tuning counted (one-label ones too): the intention-to-treat
    # estimate beside the main one, computed only when some fine-tuning was left out
    itt: list[ContrastEstimate] = field(default_factory=list)
    # per probed task and variant: the probe of the encoder minus the probe of its own embedding layer
    # (finetune.embedding_probe), Holm within these cells: what the layers add over word identity and frequency
    context: list[ContrastEstimate] = field(default_factory=list)
    # the tasks whose fine-tunings predicted one label and were left out, and the most rates fine-tuning tried per
    # (run, task): above 1, the rate (and epoch) were already chosen on dev, the fair protocol
    one_label_tasks: tuple[str, ...] = ()
    rates_tried: int = 1
    # per fine-tuned task: the one-label fine-tunings left out, and how far its worst variant's mean dev score lies
    # above the chance baseline (a rule may hold one-label runs only where every variant learns the task)
    one_label_counts: dict[str, int] = field(default_factory=dict)
    dev_floor: dict[str, float] = field(default_factory=dict)
    # per probe row (finetune.text_baselines): the task's non-neural baseline in plain words and its mean test score
    # over the pretraining and fine-tuning seeds (the same for every variant of a seed: it reads no encoder)
    text_baselines: dict[str, tuple[str, float]] = field(default_factory=dict)
    # per probed task and variant: the probe minus that baseline, fitted on the same labels of the same run, Holm
    # within these cells (family text_baseline): what the encoder gives a probe beyond the words' surface
    over_baselines: list[ContrastEstimate] = field(default_factory=list)


def _clip(intervals: list[Interval], n_variants: int, span: tuple[float, float]) -> list[Interval]:
    """Keep interval ends inside what the metric can take: a mean within its range, a difference
    within +-(range width). The t-rescaled interval can otherwise overshoot with 3 seeds."""
    lo, hi = span
    out = []
    for i, iv in enumerate(intervals):
        a, b = (lo, hi) if i < n_variants else (lo - hi, hi - lo)
        out.append(dataclasses.replace(iv, lo=float(np.clip(iv.lo, a, b)), hi=float(np.clip(iv.hi, a, b))))
    return out


def primary_metrics(evals: pd.DataFrame) -> tuple[dict[tuple[str, str], str], list[str]]:
    """(task, mode) -> headline metric, and a message where a task has several: the encoders' readings. A
    non-neural baseline's rows (``TEXT_BASELINES``) are none: they read no encoder, so every variant of a seed
    scores the same and its contrasts would be 0 by construction (``text_baseline_scores``, ``_over_baselines``)."""
    prim = evals[evals["is_primary"] & ~evals["mode"].isin(tuple(TEXT_BASELINES))]
    out, messages = {}, []
    for (task, mode), grp in prim.groupby(["task", "mode"], sort=True):
        names = grp["metric"].value_counts()
        out[(task, mode)] = str(names.index[0])
        if len(names) > 1:
            messages.append(f"task {task!r} ({mode}) has several primary metrics {list(names.index)}; "
                            f"using {names.index[0]!r}")
    return out, messages


def mode_label(mode: str) -> str:
    """How a reading is named in the report: finetune, probe, or "probe, N labels" for the probe at budget N."""
    if mode == EMBEDDING_PROBE:
        return "embeddings probe"
    return f"probe, {mode.split('@', 1)[1]} labels" if mode.startswith("probe@") else mode


def task_label(task: str, mode: str) -> str:
    return task if mode == "finetune" else f"{task} ({mode_label(mode)})"


def split_label(label: str) -> tuple[str, str]:
    """A report row's task and reading: 'topic (probe, 100 labels)' -> ('topic', 'probe, 100 labels'); 'pos' and
    'average (finetune)' -> (..., 'fine-tuned')."""
    m = re.fullmatch(r"(.*) \((finetune|probe(?:, \d+ labels)?)\)", label)
    task, mode = (m.group(1), m.group(2)) if m else (label, "finetune")
    return task, "fine-tuned" if mode == "finetune" else mode


def _first_text(evals: pd.DataFrame, task: str, column: str) -> str:
    if column not in evals.columns:
        return ""
    values = [str(v) for v in evals.loc[evals["task"] == task, column].dropna().unique() if str(v)]
    return values[0] if values else ""


def build_measurement(runs: pd.DataFrame, evals: pd.DataFrame, predictions: pd.DataFrame, task: str,
                      mode: str, metric: str, variants: tuple[str, ...],
                      seeds: tuple[int, ...], left_out: pd.DataFrame | None = None) -> Measurement:
    """The (V, P, F, N, K) statistics of one task from its predictions (or, lacking them, its evals).

    ``runs`` must hold one completed measure run per (variant, pretrain_seed). Binary F1 counts the
    task's ``evals.positive_label`` as positive when recorded. ``left_out`` rows (run_id, task,
    finetune_seed; fine-tunings that did not learn) are marked not present.
    """
    vi = {v: i for i, v in enumerate(variants)}
    si = {s: i for i, s in enumerate(seeds)}
    cell = {r.run_id: (vi[r.variant], si[r.pretrain_seed]) for r in runs.itertuples()}
    sel = predictions[(predictions["task"] == task) & (predictions["mode"] == mode)
                      & predictions["run_id"].isin(cell)]
    if sel.empty:  # no per-example rows: one "example" per cell carrying the stored value
        sel = evals[(evals["task"] == task) & (evals["mode"] == mode) & (evals["metric"] == metric)
                    & evals["run_id"].isin(cell)]
        ex = np.zeros(len(sel), dtype=int)
        values = np.stack([sel["value"].to_numpy(float), np.ones(len(sel))], axis=1)
        metric = "value"
    else:
        ex = pd.factorize(sel["example_id"])[0]
        positive = _first_text(evals, task, "positive_label") or None
        values = example_stats(metric, sel["prediction"].to_numpy(), sel["gold"].to_numpy(),
                               positive=positive).values
    fseeds, fi = np.unique(sel["finetune_seed"].to_numpy(), return_inverse=True)
    pos = np.array([cell[r] for r in sel["run_id"]]).reshape(-1, 2)
    stats = np.zeros((len(variants), len(seeds), len(fseeds), int(ex.max()) + 1, values.shape[1]))
    stats[pos[:, 0], pos[:, 1], fi, ex] = values
    present = np.zeros(stats.shape[:3], dtype=bool)
    present[pos[:, 0], pos[:, 1], fi] = True
    if left_out is not None and len(left_out) and mode == "finetune":
        for r in left_out[left_out["task"] == task].itertuples():
            if r.run_id in cell and r.finetune_seed in fseeds:
                v, p_ = cell[r.run_id]
                present[v, p_, int(np.searchsorted(fseeds, r.finetune_seed))] = False
    return Measurement(metric, stats, present)


def measure_runs(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int], list[str]]:
    """Completed measure runs (one per variant and seed), counts of the others, and messages."""
    measure = runs[runs["phase"] == "measure"]
    done = measure[measure["status"] == "completed"]
    excluded = {str(k): int(v) for k, v in measure.loc[measure["status"] != "completed", "status"]
                .value_counts().items()}
    dup = done.duplicated(["variant", "pretrain_seed"], keep="first")
    messages = [f"{int(dup.sum())} duplicate completed measure runs of the same (variant, pretrain_seed) "
                "ignored (kept the first)"] if dup.any() else []
    return done[~dup], excluded, messages


@dataclass
class _Task:
    label: str
    mode: str
    metric: str
    source: str
    measurement: Measurement
    intervals: list[Interval]
    span: tuple[float, float]
    baseline: float = NAN
    learned: bool = True
    dev_floor: float = NAN  # the lowest variant's mean dev score (over pretraining seeds) minus the chance baseline


def _measure_tasks(export: Export, done, evals, variants, seeds, rows, rng, n_boot, level, metrics=None,
                   left_out: pd.DataFrame | None = None):
    """One ``_Task`` per (task, mode) on its headline metric, or, with ``metrics`` ((task, mode) -> metric),
    on those metrics for those tasks only (analysis.paper compares a paper's own metric: MRPC's accuracy)."""
    headline, messages = primary_metrics(evals)
    metrics = headline if metrics is None else metrics
    out, on_test, few = [], [], []
    for (task, mode), metric in metrics.items():
        m = build_measurement(done, evals, export.predictions, task, mode, metric, variants, seeds, left_out)
        span = METRIC_RANGES.get(metric, (-np.inf, np.inf))
        ivs = _clip(multibootstrap([m], rows, rng, n_boot, level), len(variants), span)
        t = _Task(task_label(task, mode), mode, metric, _first_text(evals, task, "source_task") or task, m, ivs, span)
        golds = task_golds(export.predictions, task, mode, done["run_id"])
        if m.metric != "value" and golds:
            t.baseline = chance_baseline(metric, golds, _first_text(evals, task, "positive_label") or None)
            dev = dev_seed_values(evals, done, task, mode, metric)
            if dev is None:  # an export without dev values: only the test scores can say
                t.learned = learned(dict(zip(variants, ivs)), t.baseline)
                on_test.append(t.label)
            else:
                t.learned = learned_on_dev(dev, t.baseline)
                means = [float(np.nanmean(v)) for v in dev.values() if np.isfinite(v).any()]
                t.dev_floor = min(means) - t.baseline if len(means) == len(variants) else NAN
                few += [t.label] if max(len(v) for v in dev.values()) < 3 else []
        out.append(t)
    if on_test:
        messages.append(f"no dev values for {', '.join(on_test)}: whether each was learned was decided on its test "
                        "scores (selection on the values the contrasts use)")
    if few:
        messages.append(f"whether {', '.join(few)} were learned was decided on dev point estimates (fewer than 3 "
                        "pretraining seeds)")
    if any(t.measurement.metric == "value" for t in out):
        messages.append("no predictions for some tasks: their chance baselines (was the task learned at all?) "
                        "were not checked")
    return out, messages


def _averages(tasks: list[_Task], variants, rows, rng, n_boot, level) -> list[_Task]:
    out = []
    for mode in dict.fromkeys(t.mode for t in tasks):
        # Every task the design measured, learned or not: which tasks were learned is decided per export, so an
        # average over the learned ones would change its meaning between seed blocks (three tasks in one, four in
        # another) and along a curve. A task nobody learned adds noise around 0, not bias.
        group = [t for t in tasks if t.mode == mode]
        sources = {t.source for t in group}
        if len(sources) < 2:  # mnli_m and mnli_mm alone are one task, not an average
            continue
        size = {s: sum(t.source == s for t in group) for s in sources}
        w = [1.0 / (len(sources) * size[t.source]) for t in group]
        span = (min(t.span[0] for t in group), max(t.span[1] for t in group))
        ivs = _clip(multibootstrap([t.measurement for t in group], rows, rng, n_boot, level, task_weights=w),
                    len(variants), span)
        out.append(_Task(f"average ({mode_label(mode)})", mode, "mean of tasks", "", group[0].measurement, ivs, span))
    return out


def _budget(done: pd.DataFrame, evals: pd.DataFrame, seeds, variants) -> tuple[Budget, dict[str, float]]:
    pre = done[done["variant"] != NONE]
    mean = {c: float(pre[c].astype(float).mean()) if c in pre.columns and len(pre) else NAN
            for c in ("epochs", "tokens_seen", "steps")}
    by = done.groupby("variant")["epochs"].mean() if "epochs" in done.columns else {}
    epochs = {v: float(by[v]) for v in variants if v in by}
    kinds = sorted(set(pre["budget"].dropna())) if "budget" in pre.columns else []
    flops = {}
    if "train_flops" in pre.columns:
        by_flops = pre.groupby("variant")["train_flops"].mean()
        flops = {v: float(by_flops[v]) for v in variants if v in by_flops and np.isfinite(by_flops[v])}
    seconds = float(pre["wall_time_s"].astype(float).mean()) if "wall_time_s" in pre.columns and len(pre) else NAN
    return Budget(mean["epochs"], mean["tokens_seen"], mean["steps"], len(seeds), int(evals["finetune_seed"].nunique()),
                  "/".join(kinds) or "steps", flops, seconds), epochs


DEGENERATE = "no information: every resampled estimate is the same (e.g. both variants predicted one label " \
             "everywhere); left out of its family"


def degenerate(iv: Interval) -> bool:
    """A cell that carries no information: its interval has no width (every seed and example gave the same
    difference), so it can be neither called nor counted in a family."""
    return bool(np.isfinite(iv.lo) and np.isfinite(iv.hi) and iv.hi - iv.lo <= 1e-12)


def _family(t: _Task, d: ContrastDef) -> str:
    """The Holm family of a cell: the embeddings probe's rows are a baseline reading, a family of their own, so
    they never dilute the primary question's; otherwise the contrast's (analysis.contrasts.holm_family)."""
    return "baseline" if t.mode == EMBEDDING_PROBE else holm_family(d)


def _estimates(rows_of: list[_Task], defs, variants, collapsed, worse) -> list[ContrastEstimate]:
    """Every (contrast, row) cell, Holm-adjusted within its family (``analysis.contrasts.holm_family``: the
    primary contrasts on every row, then the rest; ``analysis.inference.family_calls``), with its power at
    that family's Holm level. A degenerate cell (``degenerate``) is in no family: its p stays NaN."""
    cells = [(t, d, iv) for t in rows_of for d, iv in zip(defs, t.intervals[len(variants):])]
    out: list[ContrastEstimate | None] = [None] * len(cells)
    for i, (t, d, iv) in enumerate(cells):
        if degenerate(iv):
            out[i] = ContrastEstimate(t.label, d, iv, contrast_notes(d, t.label, collapsed, worse) + (DEGENERATE,),
                                      NAN, None, _family(t, d))
    for family in ("primary", "secondary", "baseline"):
        idx = [i for i, (t, d, _) in enumerate(cells) if _family(t, d) == family and out[i] is None]
        adjusted, _, m = family_calls([cells[i][2] for i in idx])
        same = holm([tost_p(cells[i][2]) for i in idx])  # equivalence claims are a family of their own
        for i, p, q in zip(idx, adjusted, same):
            t, d, iv = cells[i]
            out[i] = ContrastEstimate(t.label, d, iv, contrast_notes(d, t.label, collapsed, worse), float(p),
                                      contrast_power(iv, m), family, float(q))
    return out


def estimate_contributions(export: Export, rng: np.random.Generator, n_boot: int = 1000,
                           level: float = 0.95) -> Contributions:
    """Means, contrasts with multi-bootstrap intervals, Holm and power, flags and messages of an export."""
    done, excluded, messages = measure_runs(export.runs)
    if done.empty:
        return Contributions((), (), {}, (), {}, [], [], messages + ["no completed measure runs in the export"],
                             excluded, level=level)
    done = done.assign(pretrain_seed=done["pretrain_seed"].astype(int))
    specs, spec_msgs = variant_specs(done, export.objectives)
    variants = tuple(specs)
    seeds = tuple(sorted(int(s) for s in done["pretrain_seed"].unique()))
    defs, missing = derive_contrasts(specs, export.objectives,
                                     pair_level_objectives(specs, export.objectives, done.columns))
    evals = export.evals[export.evals["run_id"].isin(done["run_id"])]
    rows = np.array([[1.0 if u == v else 0.0 for u in variants] for v in variants]
                    + [[float(d.weights.get(u, 0.0)) for u in variants] for d in defs]).reshape(-1, len(variants))
    left_out = did_not_learn(export.predictions[export.predictions["run_id"].isin(done["run_id"])], evals)
    tasks, task_msgs = _measure_tasks(export, done, evals, variants, seeds, rows, rng, n_boot, level,
                                      left_out=left_out)
    tasks += _averages(tasks, variants, rows, rng, n_boot, level)
    not_learned = tuple(t.label for t in tasks if not t.learned)
    messages += spec_msgs + missing + task_msgs + [
        f"task {t.label!r} was not learned at this budget: no variant, none included, scores above its chance "
        f"baseline {t.baseline:.3f} ({t.metric}) on dev; its contrasts are not computed (it stays in the averages, whose "
        "task set the design fixes)"
        for t in tasks if not t.learned]
    if len(left_out):
        names = dict(zip(done["run_id"], done["variant"]))
        per = left_out.assign(variant=left_out["run_id"].map(names)).groupby(["variant", "task"]).size()
        total = evals[(evals["mode"] == "finetune") & evals["is_primary"]].groupby(
            [evals["run_id"].map(names), "task"]).size()
        listed = ", ".join(f"{v} on {t} ({n} of {int(total.get((v, t), n))})" for (v, t), n in per.items())
        where = "dev" if "dev_majority_share" in evals.columns and evals["dev_majority_share"].notna().any() \
            else "test (this export did not record dev's)"
        messages.append(f"{len(left_out)} fine-tuning(s) did not learn (one label for >= 95% of {where} examples) and "
                        f"are left out of the estimates: {listed}; the intention-to-treat estimates, every "
                        "fine-tuning counted, are beside them (contributions.md)")
    means = {(t.label, v): t.intervals[i] for t in tasks for i, v in enumerate(variants)}
    collapsed, flags, collapse_msgs = collapse_flags(done, export.predictions, variants)
    messages += collapse_msgs
    vs_none = [(t.label, d.weights, iv) for t in tasks if t.learned
               for d, iv in zip(defs, t.intervals[len(variants):]) if d.family == "vs_none"]
    worse, worse_flags = worse_than_none(vs_none)
    estimates = _estimates([t for t in tasks if t.learned], defs, variants, collapsed, worse)
    empty = [e for e in estimates if degenerate(e.interval)]
    if empty:
        messages.append(f"{len(empty)} contrast cell(s) carry no information (every resampled estimate the same) "
                        "and are left out of every family: " + ", ".join(f"{e.contrast.name} on {e.task}" for e in empty))
    unlearned = [ContrastEstimate(t.label, d, iv) for t in tasks if not t.learned
                 for d, iv in zip(defs, t.intervals[len(variants):])]
    itt = _intention_to_treat(export, done, evals, variants, seeds, rows, defs, rng, n_boot, level) \
        if len(left_out) else []
    context = _context(export, done, evals, variants, seeds, tasks, rng, n_boot, level)
    over = _over_baselines(export, done, evals, variants, seeds, tasks, rng, n_boot, level)
    budget, epochs = _budget(done, evals, seeds, variants)
    return Contributions(variants, tuple(t.label for t in tasks), {t.label: t.metric for t in tasks}, seeds, means,
                         estimates, flags + worse_flags, messages, excluded, epochs, level,
                         {t.label: t.baseline for t in tasks if np.isfinite(t.baseline)}, not_learned, budget, specs,
                         unlearned, len(left_out), _intrinsic(done, _trained(specs, export.objectives, "mlm"), "mlm_acc"),
                         _intrinsic(done, _trained(specs, export.objectives, "nsp"), "pair_acc_nsp"), _preset(done),
                         itt, context, tuple(sorted(set(left_out["task"]))) if len(left_out) else (),
                         _rates_tried(evals),
                         {str(k): int(n) for k, n in left_out.groupby("task").size().items()} if len(left_out) else {},
                         {t.label: t.dev_floor for t in tasks if t.mode == "finetune" and np.isfinite(t.dev_floor)},
                         text_baseline_scores(evals, done, tasks), over)


def _rates_tried(evals: pd.DataFrame) -> int:
    """The most fine-tuning rates any (run, task) tried (``finetune.lr_grid``; ``analysis.export`` counts them
    before the rates not chosen are left out); 1 when none recorded."""
    if "rates_tried" not in evals.columns:
        return 1
    ft = evals[(evals["mode"] == "finetune") & evals["is_primary"]]
    return int(max(ft["rates_tried"].max(), 1)) if len(ft) else 1


def _intention_to_treat(export, done, evals, variants, seeds, rows, defs, rng, n_boot, level) -> list[ContrastEstimate]:
    """The fine-tuned primary cells with every fine-tuning counted, one-label ones included: the estimand without
    the condition "given that no fine-tuning predicted one label", Holm-adjusted within themselves. Shown beside
    the main estimates whenever some fine-tuning was left out; the tasks and averages are the main estimate's."""
    headline, _ = primary_metrics(evals)
    tuned = {key: metric for key, metric in headline.items() if key[1] == "finetune"}
    tasks, _ = _measure_tasks(export, done, evals, variants, seeds, rows, rng, n_boot, level, tuned, left_out=None)
    tasks += _averages(tasks, variants, rows, rng, n_boot, level)
    cells = [(t, d, iv) for t in tasks if t.learned for d, iv in zip(defs, t.intervals[len(variants):])
             if holm_family(d) == "primary" and not degenerate(iv)]
    adjusted, _, _ = family_calls([iv for _, _, iv in cells])
    return [ContrastEstimate(t.label, d, iv, (), float(p), None, "primary") for (t, d, iv), p in zip(cells, adjusted)]


EMB = "#embeddings"  # suffix of the pseudo-variants that carry a run's embeddings-probe predictions


def _probe_minus(preds: pd.DataFrame, done, evals, variants, seeds, t: _Task, other: str, suffix: str, rng, n_boot,
                 level) -> list[Interval]:
    """Per variant: its probe's score on ``t``'s task minus mode ``other``'s on the same runs, fine-tuning seeds and
    test examples, the two resampled together (``other``'s rows ride as pseudo-variants ``<variant><suffix>``)."""
    raw = t.label.split(" (")[0]
    runs = pd.concat([done, done.assign(run_id=done["run_id"] + suffix, variant=done["variant"] + suffix)])
    pseudo = (*variants, *(v + suffix for v in variants))
    rows = np.hstack([np.eye(len(variants)), -np.eye(len(variants))])
    sel = preds[(preds["task"] == raw) & preds["mode"].isin(("probe", other))]
    sel = sel.assign(run_id=np.where(sel["mode"] == other, sel["run_id"] + suffix, sel["run_id"]), mode="probe")
    m = build_measurement(runs, evals, sel, raw, "probe", t.metric, pseudo, seeds)
    return multibootstrap([m], rows, rng, n_boot, level)


def _own_family(cells: list[tuple[str, ContrastDef, Interval]], family: str) -> list[ContrastEstimate]:
    """``cells`` (task row, contrast, interval) Holm-adjusted within themselves as ``family``; a degenerate cell is
    in no family (its p NaN)."""
    live = [i for i, (_, _, iv) in enumerate(cells) if not degenerate(iv)]
    adjusted, _, _ = family_calls([cells[i][2] for i in live])
    p = dict(zip(live, adjusted))
    return [ContrastEstimate(label, d, iv, () if i in p else (DEGENERATE,), float(p.get(i, NAN)), None, family)
            for i, (label, d, iv) in enumerate(cells)]


def _probed(tasks: list[_Task]) -> list[_Task]:
    """The main probe's rows that were learned and have per-example predictions to pair another reading with."""
    return [t for t in tasks if t.mode == "probe" and t.learned and t.source and t.measurement.metric != "value"]


def _context(export: Export, done, evals, variants, seeds, tasks: list[_Task], rng, n_boot, level
             ) -> list[ContrastEstimate]:
    """Per task the main probe read that was learned and whose embedding layer was probed too, per variant: the
    probe's score minus its embeddings probe's, the two resampled together (the same seeds and test examples), Holm
    within these cells. Above zero: the encoder's layers add something over word identity and frequency."""
    preds = export.predictions
    if not len(preds) or EMBEDDING_PROBE not in set(preds["mode"]):
        return []
    task_of = {t.label: t for t in tasks if t.mode == EMBEDDING_PROBE}
    cells = []
    for t in _probed(tasks):
        if task_label(t.label.split(" (")[0], EMBEDDING_PROBE) not in task_of:
            continue
        for v, iv in zip(variants, _probe_minus(preds, done, evals, variants, seeds, t, EMBEDDING_PROBE, EMB, rng,
                                                n_boot, level)):
            d = ContrastDef(f"{v} - its embeddings", {v: 1.0}, "vs_none",
                            meaning="the probe of the encoder minus the probe of its own embedding layer: what the "
                                    "layers add over word identity and frequency")
            cells.append((t.label, d, iv))
    return _own_family(cells, "context")


def _baseline_mode(preds: pd.DataFrame, task: str) -> str:
    """The non-neural baseline mode with predictions on ``task`` ('' when none: switched off, or QA)."""
    modes = set(preds.loc[preds["task"] == task, "mode"]) & set(TEXT_BASELINES)
    return min(modes) if modes else ""


def _over_baselines(export: Export, done, evals, variants, seeds, tasks: list[_Task], rng, n_boot, level
                    ) -> list[ContrastEstimate]:
    """Per learned main-probe task that has a non-neural baseline (finetune.text_baselines), per variant: the probe's
    score minus the baseline's, fitted on the same training labels of the same run and scored on the same test
    examples, resampled together; Holm within these cells, a family of their own (text_baseline), so they never
    dilute the primary or secondary family nor count toward a rule's calls. Above zero: the encoder gives a probe
    more than a TF-IDF logistic regression or the most frequent tag per word reads from the words alone."""
    preds = export.predictions
    if not len(preds) or not set(preds["mode"]) & set(TEXT_BASELINES):
        return []
    cells = []
    for t in _probed(tasks):
        mode = _baseline_mode(preds, t.label.split(" (")[0])
        if not mode:
            continue
        name = TEXT_BASELINES[mode]
        for v, iv in zip(variants, _probe_minus(preds, done, evals, variants, seeds, t, mode, f"#{mode}", rng,
                                                n_boot, level)):
            d = ContrastDef(f"{v} - {name}", {v: 1.0}, "vs_none",
                            meaning=f"the probe of the encoder minus a {name} fitted on the same labels: what the "
                                    "encoder gives beyond the words' surface")
            cells.append((t.label, d, iv))
    return _own_family(cells, "text_baseline")


def text_baseline_scores(evals: pd.DataFrame, done: pd.DataFrame, tasks: list[_Task]) -> dict[str, tuple[str, float]]:
    """Per main-probe row whose task has a non-neural baseline: (its name in plain words, its mean test score on the
    row's metric over the pretraining and fine-tuning seeds). Every variant of a pretraining seed shares the
    baseline (the same draw of training labels, no encoder), so each (pretraining seed, fine-tuning seed) counts
    once, whichever variants ran it."""
    if "mode" not in evals.columns or not evals["mode"].isin(tuple(TEXT_BASELINES)).any():
        return {}
    seed_of = dict(zip(done["run_id"], done["pretrain_seed"]))
    rows = evals[evals["mode"].isin(tuple(TEXT_BASELINES)) & evals["run_id"].isin(seed_of)]
    rows = rows.assign(pretrain_seed=rows["run_id"].map(seed_of))
    out = {}
    for t in tasks:
        if t.mode != "probe":
            continue
        raw = t.label.split(" (")[0]
        sel = rows[(rows["task"] == raw) & (rows["metric"] == t.metric)]
        if len(sel):
            sel = sel.drop_duplicates(["mode", "pretrain_seed", "finetune_seed"])
            out[t.label] = (TEXT_BASELINES[min(set(sel["mode"]))], float(sel["value"].mean()))
    return out


def _trained(specs: dict[str, VariantSpec], objectives, objective: str) -> tuple[str, ...]:
    """The variants whose loss includes ``objective`` (another variant's head for it is untrained)."""
    return tuple(v for v, spec in specs.items() if objective in spec.on(tuple(objectives)))


def _intrinsic(done: pd.DataFrame, variants, column: str) -> dict[str, float]:
    """Mean of an intrinsic metric (held-out MLM accuracy, ...) over the pretraining seeds, per variant that has
    it (a variant without the objective has NaN there)."""
    if column not in done.columns:
        return {}
    by = done.groupby("variant")[column].apply(lambda x: float(np.nanmean(x.astype(float))) if
                                                x.astype(float).notna().any() else NAN)
    return {v: float(by[v]) for v in variants if v in by and np.isfinite(by[v]) and v != NONE}


def _preset(done: pd.DataFrame) -> str:
    import json

    if "config_json" not in done.columns or not len(done):
        return ""
    try:
        return str(json.loads(done["config_json"].iloc[0]).get("preset", ""))
    except (TypeError, ValueError):
        return ""
