"""Contribution estimates per task: variant means, the seed's contrasts, the 2x2 factorial, flags.

Pure functions over an ``Export`` (``analysis.export``). Only runs with phase 'measure' and status
'completed' enter the estimates; stopped and failed ones are counted. Contrasts, as weights over
variants:

    every variant - none                         always, beside everything else
    MLM contribution  = full - nsp_only          (the seed's definitions)
    NSP contribution  = full - mlm_only
    2x2 factorial of {MLM, NSP}: main effect of MLM = ((full - nsp_only) + (mlm_only - none)) / 2,
        the same for NSP, interaction = full - mlm_only - nsp_only + none. In a two-factor game the
        Shapley share of each objective equals its main effect, so the two shares add up to
        full - none exactly.
    SOP vs NSP: mlm_sop - full, sop_only - nsp_only  (when SOP variants ran)
    best_mix - full                              (when a searched mix was measured)

A variant is flagged when its collapse diagnostic fired on any measured seed, or (per task) when its
mean is below ``none``; a contrast that subtracts a flagged variant is marked and not credited to
the other objective. A missing variant yields a message naming what cannot be computed.
"""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.bootstrap import Interval, Measurement, multibootstrap
from analysis.export import Export
from analysis.stats import example_stats
from trainables.metrics import METRIC_RANGES

VARIANT_ORDER = ("full", "mlm_only", "nsp_only", "sop_only", "mlm_sop", "best_mix", "custom",
                 "domain_adapt", "none")
CORE = ("full", "mlm_only", "nsp_only", "none")


@dataclass(frozen=True)
class ContrastDef:
    name: str
    weights: dict[str, float]
    family: str  # vs_none | seed | factorial | sop | best_mix
    credited: str = ""  # the objective this contrast is credited to ('' for vs_none)


@dataclass(frozen=True)
class Flag:
    variant: str
    task: str  # '' when it holds for every task (collapse)
    reason: str


@dataclass(frozen=True)
class ContrastEstimate:
    task: str
    contrast: ContrastDef
    interval: Interval
    notes: tuple[str, ...] = ()


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


def _sort_variants(names) -> tuple[str, ...]:
    rank = {v: i for i, v in enumerate(VARIANT_ORDER)}
    return tuple(sorted(set(names), key=lambda v: (rank.get(v, len(rank) - 1), v)))


def _clip(intervals: list[Interval], n_variants: int, span: tuple[float, float]) -> list[Interval]:
    """Keep interval ends inside what the metric can take: a mean within its range, a difference
    within +-(range width). The t-rescaled interval can otherwise overshoot with 3 seeds."""
    lo, hi = span
    out = []
    for i, iv in enumerate(intervals):
        a, b = (lo, hi) if i < n_variants else (lo - hi, hi - lo)
        out.append(dataclasses.replace(iv, lo=float(np.clip(iv.lo, a, b)), hi=float(np.clip(iv.hi, a, b))))
    return out


def contrast_definitions(variants: tuple[str, ...]) -> tuple[list[ContrastDef], list[str]]:
    """The contrasts computable from ``variants`` and one message per missing variant."""
    have = set(variants)
    wanted = [
        ContrastDef("MLM contribution (full - nsp_only)", {"full": 1, "nsp_only": -1}, "seed", "MLM"),
        ContrastDef("NSP contribution (full - mlm_only)", {"full": 1, "mlm_only": -1}, "seed", "NSP"),
        ContrastDef("MLM main effect = Shapley share", {"full": .5, "nsp_only": -.5, "mlm_only": .5,
                                                         "none": -.5}, "factorial", "MLM"),
        ContrastDef("NSP main effect = Shapley share", {"full": .5, "mlm_only": -.5, "nsp_only": .5,
                                                         "none": -.5}, "factorial", "NSP"),
        ContrastDef("MLM x NSP interaction", {"full": 1, "mlm_only": -1, "nsp_only": -1, "none": 1},
                    "factorial", "MLM x NSP"),
    ]
    if have & {"sop_only", "mlm_sop"}:
        wanted += [ContrastDef("SOP vs NSP with MLM (mlm_sop - full)", {"mlm_sop": 1, "full": -1}, "sop", "SOP"),
                   ContrastDef("SOP vs NSP alone (sop_only - nsp_only)", {"sop_only": 1, "nsp_only": -1},
                               "sop", "SOP")]
    if "best_mix" in have:
        wanted.append(ContrastDef("best_mix - full", {"best_mix": 1, "full": -1}, "best_mix", "best_mix"))
    defs = ([ContrastDef(f"{v} - none", {v: 1, "none": -1}, "vs_none") for v in variants if v != "none"]
            if "none" in have else [])
    blocked: dict[str, list[str]] = {}
    for d in wanted:
        missing = [v for v in d.weights if v not in have]
        if missing:
            for v in missing:
                blocked.setdefault(v, []).append(d.name)
        else:
            defs.append(d)
    if "none" not in have:
        blocked.setdefault("none", []).insert(0, "every variant - none")
    messages = [f"variant {v!r} was not measured: cannot compute {'; '.join(names)}"
                for v, names in blocked.items()]
    return defs, messages


def _primary_metrics(evals: pd.DataFrame) -> tuple[dict[tuple[str, str], str], list[str]]:
    prim = evals[evals["is_primary"]]
    out, messages = {}, []
    for (task, mode), grp in prim.groupby(["task", "mode"], sort=True):
        names = grp["metric"].value_counts()
        out[(task, mode)] = str(names.index[0])
        if len(names) > 1:
            messages.append(f"task {task!r} ({mode}) has several primary metrics {list(names.index)}; "
                            f"using {names.index[0]!r}")
    return out, messages


def _task_label(task: str, mode: str) -> str:
    return task if mode == "finetune" else f"{task} (probe)"


def build_measurement(runs: pd.DataFrame, evals: pd.DataFrame, predictions: pd.DataFrame, task: str,
                      mode: str, metric: str, variants: tuple[str, ...],
                      seeds: tuple[int, ...]) -> Measurement:
    """The (V, P, F, N, K) statistics of one task from its predictions (or, lacking them, its evals).

    ``runs`` must hold one completed measure run per (variant, pretrain_seed).
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
        values = example_stats(metric, sel["prediction"].to_numpy(), sel["gold"].to_numpy()).values
    fseeds, fi = np.unique(sel["finetune_seed"].to_numpy(), return_inverse=True)
    pos = np.array([cell[r] for r in sel["run_id"]]).reshape(-1, 2)
    stats = np.zeros((len(variants), len(seeds), len(fseeds), int(ex.max()) + 1, values.shape[1]))
    stats[pos[:, 0], pos[:, 1], fi, ex] = values
    present = np.zeros(stats.shape[:3], dtype=bool)
    present[pos[:, 0], pos[:, 1], fi] = True
    return Measurement(metric, stats, present)


def _notes(d: ContrastDef, task: str, collapsed: set[str], worse: set[tuple[str, str]]) -> tuple[str, ...]:
    notes = []
    for v, w in d.weights.items():
        if v == "none" or w == 0:
            continue
        reasons = (["collapsed"] if v in collapsed else []) + (  # below none is the vs_none row itself
            ["worse than none on this task"] if (task, v) in worse and d.family != "vs_none" else [])
        if not reasons:
            continue
        if w < 0 and d.credited:
            notes.append(f"contrast against {v} ({', '.join(reasons)}): not credited to {d.credited}")
        else:
            notes.append(f"{v} {' and '.join(reasons)}")
    return tuple(notes)


def _flags(done: pd.DataFrame, means: dict, tasks, variants) -> tuple[list[Flag], set, set]:
    by_variant = done.groupby("variant")["collapsed"]
    collapsed = {v for v, any_ in by_variant.any().items() if any_}
    flags = [Flag(v, "", "collapse diagnostic fired on pretraining seeds "
                  + ", ".join(str(s) for s in sorted(done[(done.variant == v) & done.collapsed].pretrain_seed)))
             for v in variants if v in collapsed]
    worse = set()
    for task in tasks:
        base = means.get((task, "none"))
        for v in variants:
            m = means.get((task, v))
            if v != "none" and base is not None and m is not None and m.estimate < base.estimate:
                worse.add((task, v))
                flags.append(Flag(v, task, f"mean {m.estimate:.3f} below none {base.estimate:.3f}"))
    return flags, collapsed, worse


def _measure_runs(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int], list[str]]:
    measure = runs[runs["phase"] == "measure"]
    done = measure[measure["status"] == "completed"]
    excluded = {str(k): int(v) for k, v in measure.loc[measure["status"] != "completed", "status"]
                .value_counts().items()}
    dup = done.duplicated(["variant", "pretrain_seed"], keep="first")
    messages = [f"{int(dup.sum())} duplicate completed measure runs of the same (variant, pretrain_seed) "
                "ignored (kept the first)"] if dup.any() else []
    return done[~dup], excluded, messages


def estimate_contributions(export: Export, rng: np.random.Generator, n_boot: int = 1000,
                           level: float = 0.95) -> Contributions:
    """Means, contrasts with multi-bootstrap intervals, flags and messages of an export."""
    done, excluded, messages = _measure_runs(export.runs)
    if done.empty:
        return Contributions((), (), {}, (), {}, [], [], messages + ["no completed measure runs in the export"],
                             excluded, level=level)
    variants = _sort_variants(done["variant"])
    seeds = tuple(sorted(int(s) for s in done["pretrain_seed"].unique()))
    done = done.assign(pretrain_seed=done["pretrain_seed"].astype(int))
    defs, missing = contrast_definitions(variants)
    evals = export.evals[export.evals["run_id"].isin(done["run_id"])]
    metrics, metric_msgs = _primary_metrics(evals)
    messages += missing + metric_msgs
    rows = np.array([[1.0 if u == v else 0.0 for u in variants] for v in variants]
                    + [[float(d.weights.get(u, 0.0)) for u in variants] for d in defs]).reshape(-1, len(variants))
    groups: dict[str, list[Measurement]] = {"finetune": [], "probe": []}
    results: dict[str, list[Interval]] = {}
    labels: dict[str, str] = {}
    ranges: dict[str, list[tuple[float, float]]] = {}
    for (task, mode), metric in metrics.items():
        m = build_measurement(done, evals, export.predictions, task, mode, metric, variants, seeds)
        label = _task_label(task, mode)
        results[label], labels[label] = _clip(multibootstrap([m], rows, rng, n_boot, level), len(variants),
                                              METRIC_RANGES.get(metric, (-np.inf, np.inf))), metric
        groups.setdefault(mode, []).append(m)
        ranges.setdefault(mode, []).append(METRIC_RANGES.get(metric, (-np.inf, np.inf)))
    for mode, ms in groups.items():
        if len(ms) >= 2:
            label = f"average ({mode})"
            span = (min(r[0] for r in ranges[mode]), max(r[1] for r in ranges[mode]))
            results[label], labels[label] = _clip(multibootstrap(ms, rows, rng, n_boot, level), len(variants),
                                                  span), "mean of tasks"
    tasks = tuple(results)
    means = {(t, v): results[t][i] for t in tasks for i, v in enumerate(variants)}
    flags, collapsed, worse = _flags(done, means, tasks, variants)
    estimates = [ContrastEstimate(t, d, results[t][len(variants) + j], _notes(d, t, collapsed, worse))
                 for t in tasks for j, d in enumerate(defs)]
    epochs = ({str(k): float(v) for k, v in done.groupby("variant")["epochs"].mean().items()}
              if "epochs" in done.columns else {})
    return Contributions(variants, tasks, labels, seeds, means, estimates, flags, messages, excluded,
                         epochs, level)
