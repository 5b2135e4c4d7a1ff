"""A/A calibration: the report's intervals and calls on the pipeline's own noise, where every truth is 0.

    python -m analysis.calibrate --preset smoke --mode probe --tasks hedge,topic --design both \\
        --replicates 20 --seeds 3 --workers 2 --out runs/calibrate   # the pool: 180 smoke runs (docs/calibration.md)
    python -m analysis.calibrate --preset cpu-small --design paired --replicates 20 --seeds 3 --workers 2 \\
        --out runs/calibrate-cpu                      # fine-tuning on the preset's tasks: 120 cpu-small runs (hours)
    python -m analysis.calibrate ... --pool 12        # a smaller pool: replicates share runs, intervals say so
    python -m analysis.calibrate ... --json              # one JSON object instead of the tables
    python -m analysis.calibrate --simulate --replicates 200   # statistics only, a simulated pool

``analysis.validate`` checks the intervals on simulated ablations, whose noise is the simulation's
(normal seed effects, independent examples). This is the negative control on the real thing: a POOL of
pretraining runs of ONE variant (``--variant``, default full), each trained by
``trainables.pretrain.run_pretraining`` and fine-tuned by ``trainables.finetune.run_finetuning`` on
``--tasks`` over ``--finetune-seeds`` seeds, is written once as a sweep export by the sweeps' own writer
(``sweeps.export.export``: runs rows by ``run_row``, the rate chosen on dev by ``select_tables``). A pool
run is (pretraining seed, mask stream): the seed decides the initial weights, the data order (chunks,
pairs, batch order) and the fine-tuning draws (subset, head init, order); ``objective.mask_stream``
decides the training masks only (0: the seed's own). Each replicate is two arms of P = ``--seeds`` runs:
arm A is relabelled variant ``full`` and arm B ``best_mix``, index i of both arms pretraining seed i, in
a copy of the export; the analysis then runs unchanged (``analysis.contributions.estimate_contributions``:
intervals, the learned-on-dev gate, the average row and the report's Holm family). Why those two names:
between two variants of identical weights and input format the analysis derives exactly one contrast,
``best_mix - full`` (a searched mix that came out as BERT's own), so B - A is computed by its normal code.

Two designs (``--design``, default both):

* **paired**: arm A is P seeds on mask stream 0, arm B the same P seeds on mask stream 1. Seed i's two
  runs share initial weights, data order and fine-tuning draws, as two variants of one real contrast
  do, and differ only in a stream that decides nothing about the comparison: this calibrates what the
  report compares. Truth 0: the streams are exchangeable.
* **unpaired**: arm A and arm B are 2P distinct seeds (mask stream 0): seed i of A and seed i of B share
  nothing. Noisier than any real contrast; the upper bound on the seed noise.

Independence. Every replicate gets its own runs when the pool has at least P R (paired) or 2 P R
(unpaired) seeds; ``--pool 0`` (the default) is that size. A smaller pool is permuted anew per replicate:
the replicates share runs, the false-positive share is still an unbiased estimate of the per-design
error rate, but the replicates are positively correlated; the output then states the number of
independent replicates (the disjoint ones the pool holds, floor(N / P) or floor(N / 2P)) and sizes each
Clopper-Pearson interval by it (conservative). With ``--design both`` the designs share arm A's runs, so
their two tables are correlated with each other (each is valid on its own).

Reported per task row, the average row and every task cell pooled: the replicates where the contrast
was computed (a task not learned on dev in a replicate has none, as in the report), the share whose
interval excludes 0 (target <= 1 - level) with its 95% Clopper-Pearson interval on the independent n
(a pooled row's cells of one replicate share its runs: a replicate counts once), the coverage of 0 and
the mean width; the mean p (uniform under the null: 0.5; above it the test is conservative) and, for
reference, the share of the plain percentile intervals excluding 0; then "any task (Holm across the
row)": the share of replicates where any cell is *called* by the report's rule
(``analysis.inference.called`` on the Holm-adjusted p of the report's family), and the share where any
interval excludes 0 unadjusted.

Cost: the pool's pretraining and fine-tuning (cached under ``--out``: an interrupted calibration
resumes, finished runs are not redone; ``--design both`` trains 3 P R runs, paired alone 2 P R, unpaired
alone 2 P R); the replicates are statistics only, cheap beside the pool.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
from scipy import stats as sps

from analysis.contributions import estimate_contributions
from analysis.export import Export, check_export, load_export
from analysis.inference import ALPHA, called

log = logging.getLogger("analysis.calibrate")

ARM_A, ARM_B = "full", "best_mix"  # the one contrast the analysis derives between identical variants
DESIGNS = ("paired", "unpaired")
RunKey = tuple[int, int]  # a pool run: (pretraining seed, objective.mask_stream)
AVERAGE_PREFIX = "average ("
POOLED = "every task cell (pooled)"


# ----------------------------------------------------------------------------------------- replicates
def run_id(variant: str, key: RunKey) -> str:
    """A pool run's id: ``full-s4`` for seed 4's own masks, ``full-s4-m1`` for its mask stream 1."""
    seed, stream = key
    return f"{variant}-s{seed}" + (f"-m{stream}" if stream else "")


def seeds_per_replicate(design: str, p: int) -> int:
    """Pool seeds one replicate uses: P (paired: both arms are the same seeds) or 2P (unpaired)."""
    if design not in DESIGNS:
        raise ValueError(f"design {design!r} is not valid; allowed: {', '.join(DESIGNS)}")
    return p if design == "paired" else 2 * p


def independent_pool(designs: Sequence[str], p: int, r: int) -> int:
    """The smallest pool (pretraining seeds) in which every replicate of every design gets its own runs."""
    return max(seeds_per_replicate(d, p) * r for d in designs)


@dataclass(frozen=True)
class Draws:
    """The replicates of one design: per replicate the run keys of arm A and of arm B (index i of both arms
    becomes pretraining seed i of the analysis), and how many replicates are independent: all R when the
    pool gives each its own runs, else the disjoint replicates the pool holds (which the intervals are
    sized by)."""

    design: str
    arms: list[tuple[tuple[RunKey, ...], tuple[RunKey, ...]]]
    independent: int
    pool: int  # pretraining seeds drawn from

    @property
    def keys(self) -> set[RunKey]:
        return {k for a, b in self.arms for k in a + b}


def draw_replicates(design: str, seeds: Sequence[int], p: int, r: int, rng: np.random.Generator) -> Draws:
    """R replicates of ``design`` from the pool's ``seeds``.

    paired: P seeds; arm A is their mask stream 0, arm B their mask stream 1 (same weights, data and
    fine-tuning draws, other masks). unpaired: 2P seeds, P per arm, all on mask stream 0 (nothing shared).
    A pool of at least (P or 2P) R seeds is cut into disjoint blocks of one permutation (independent
    replicates); a smaller one is permuted anew per replicate (replicates share runs; independent: the
    disjoint replicates it holds)."""
    per = seeds_per_replicate(design, p)
    seeds = np.asarray(sorted(set(int(s) for s in seeds)))
    if len(seeds) < per:
        raise ValueError(f"a pool of {len(seeds)} seeds cannot give {design} arms of {p}: it needs >= {per}")
    if len(seeds) >= per * r:
        perm = rng.permutation(seeds)
        blocks, independent = [perm[per * i:per * (i + 1)] for i in range(r)], r
    else:
        blocks, independent = [rng.permutation(seeds)[:per] for _ in range(r)], len(seeds) // per
    keys = lambda ss, stream: tuple((int(s), stream) for s in ss)  # noqa: E731
    arms = [(keys(b, 0), keys(b, 1)) if design == "paired" else (keys(b[:p], 0), keys(b[p:], 0)) for b in blocks]
    return Draws(design, arms, independent, len(seeds))


def aa_export(pool: Export, arm_a: Sequence[str], arm_b: Sequence[str]) -> Export:
    """A copy of ``pool`` with only the runs of both arms: arm A as variant ``ARM_A``, arm B as ``ARM_B``,
    each with pretraining seeds 0..P-1 (the analysis pairs variants on the seed index: the paired design's
    index i is one pretraining seed in both arms; the unpaired arms share no run, so there the pairing is
    arbitrary and the seed-level differences are independent, mean 0)."""
    if len(arm_a) != len(arm_b) or set(arm_a) & set(arm_b):
        raise ValueError(f"arms must be disjoint and of one size: {list(arm_a)} vs {list(arm_b)}")
    ids = list(arm_a) + list(arm_b)
    runs = pool.runs.set_index("run_id").loc[ids].reset_index()
    runs = runs.assign(variant=[ARM_A] * len(arm_a) + [ARM_B] * len(arm_b),
                       pretrain_seed=list(range(len(arm_a))) * 2, phase="measure")
    keep = lambda df: df[df["run_id"].isin(ids)].reset_index(drop=True)  # noqa: E731
    return check_export(Export(runs, keep(pool.evals), keep(pool.predictions)))


@dataclass(frozen=True)
class Cell:
    """The B - A contrast of one row in one replicate."""

    row: str
    estimate: float
    lo: float
    hi: float
    p_value: float
    p_adjusted: float
    called: bool  # the report's rule: reliable, excludes 0, Holm-adjusted p < alpha
    raw_lo: float = float("nan")  # the plain percentile interval, for reference (analysis.bootstrap)
    raw_hi: float = float("nan")

    @property
    def excludes_zero(self) -> bool:
        return bool(self.lo > 0 or self.hi < 0)

    @property
    def raw_excludes_zero(self) -> bool:
        return bool(self.raw_lo > 0 or self.raw_hi < 0)


def aa_cells(export: Export, rng: np.random.Generator, n_boot: int = 1000, level: float = 0.95,
             alpha: float = ALPHA) -> tuple[list[Cell], tuple[str, ...]]:
    """The analysis's B - A cells of one A/A export (rows not learned have none), and every row label."""
    contrib = estimate_contributions(export, rng, n_boot=n_boot, level=level)
    out = []
    for est in contrib.contrasts:
        w = est.contrast.weights
        if {k: v for k, v in w.items() if v} != {ARM_B: 1.0, ARM_A: -1.0}:
            continue
        iv = est.interval
        out.append(Cell(est.task, iv.estimate, iv.lo, iv.hi, iv.p_value, est.p_adjusted,
                        called(iv, est.p_adjusted, alpha), iv.raw_lo, iv.raw_hi))
    return out, contrib.tasks


# ------------------------------------------------------------------------------------------- summary
def clopper_pearson(k: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval of k successes in n trials (k and n may be effective, non-integer counts)."""
    if n <= 0:
        return float("nan"), float("nan")
    a = (1 - level) / 2
    lo = float(sps.beta.ppf(a, k, n - k + 1)) if k > 0 else 0.0
    hi = float(sps.beta.ppf(1 - a, k + 1, n - k)) if k < n else 1.0
    return lo, hi


def effective_interval(k: int, n: int, n_eff: float, level: float = 0.95) -> tuple[float, float]:
    """The Clopper-Pearson interval of k false positives in n trials that carry ``n_eff`` independent ones
    (k scaled alike): n trials from overlapping replicates, or several cells of one replicate, count less."""
    return clopper_pearson(k / n * n_eff, n_eff, level) if n else (float("nan"), float("nan"))


@dataclass(frozen=True)
class RowSummary:
    row: str
    replicates: int  # replicates where the contrast was computed (the row was learned); pooled: its cells
    false_positives: int  # of them, intervals excluding 0
    share: float
    share_ci: tuple[float, float]  # 95% Clopper-Pearson on ``effective`` independent trials
    coverage: float  # of 0
    mean_width: float
    not_computed: int  # replicates where the row was not learned on dev (no contrast, as in the report)
    mean_p: float = float("nan")  # under the null p is uniform: 0.5; above it, conservative
    raw_share: float = float("nan")  # share of plain percentile intervals excluding 0, for reference
    effective: float = float("nan")  # independent trials the interval is sized by


@dataclass(frozen=True)
class Calibration:
    rows: list[RowSummary]
    family: RowSummary  # 'any task (Holm across the row)': false_positives = replicates with any call
    any_raw: float  # share of replicates where any interval excludes 0 (no multiplicity adjustment)
    replicates: int
    independent: bool  # every replicate has its own runs
    design: dict = field(default_factory=dict)
    seconds: float = float("nan")
    caveat: str = ""
    effective_replicates: int = 0  # replicates sharing no run (R when independent)


def _row(label: str, cells: list[Cell], n_eff: float, not_computed: int, level: float) -> RowSummary:
    k, n = sum(c.excludes_zero for c in cells), len(cells)
    mean = lambda xs: float(np.mean(xs)) if n else float("nan")  # noqa: E731
    return RowSummary(label, n, k, k / n if n else float("nan"), effective_interval(k, n, n_eff, level),
                      1 - k / n if n else float("nan"), mean([c.hi - c.lo for c in cells]), not_computed,
                      mean([c.p_value for c in cells]), mean([c.raw_excludes_zero for c in cells]), n_eff)


def summarise(replicates: list[tuple[list[Cell], tuple[str, ...]]], level: float = 0.95,
              independent: int | None = None) -> tuple[list[RowSummary], RowSummary, float]:
    """Per row, the false-positive share with its interval, coverage and width; then the family.

    Intervals are sized by independent trials: of the R replicates, ``independent`` (default all) share
    no run, so each counts ``independent / R`` of a trial (conservative: overlapping replicates carry
    some information beyond the disjoint ones, never less); and a pooled row's cells of one replicate
    share its runs, so there a replicate counts once, not once per cell."""
    R = len(replicates)
    frac = min(independent, R) / R if independent is not None and R else 1.0
    labels = list(dict.fromkeys(label for _, rows in replicates for label in rows))
    tasks = [label for label in labels if not label.startswith(AVERAGE_PREFIX)]
    out = []
    for label in labels + [POOLED]:
        group = set(tasks if label == POOLED else [label])  # pooled: every task cell, averages left out
        cells = [c for cells, _ in replicates for c in cells if c.row in group]
        units = sum(any(c.row in group for c in cells) for cells, _ in replicates)  # replicates with a cell
        missing = sum(g in rows for _, rows in replicates for g in group) - len(cells)
        out.append(_row(label, cells, units * frac, missing, level))
    k = sum(any(c.called for c in cells) for cells, _ in replicates)
    family = RowSummary("any task (Holm across the row)", R, k, k / R if R else float("nan"),
                        effective_interval(k, R, R * frac, level), 1 - k / R if R else float("nan"), float("nan"),
                        sum(not cells for cells, _ in replicates), effective=R * frac)
    any_raw = float(np.mean([any(c.excludes_zero for c in cells) for cells, _ in replicates])) if R else float("nan")
    return out, family, any_raw


def calibrate(pool: Export, runs_of: dict[RunKey, str], draws: Draws, rng: np.random.Generator,
              n_boot: int = 1000, level: float = 0.95, design: dict | None = None) -> Calibration:
    """The replicates ``draws`` of one design on ``pool`` (run key -> run_id in ``runs_of``), summarised."""
    start = time.perf_counter()
    reps = [aa_cells(aa_export(pool, [runs_of[k] for k in a], [runs_of[k] for k in b]), rng, n_boot, level)
            for a, b in draws.arms]
    rows, family, any_raw = summarise(reps, level, draws.independent)
    r, per = len(draws.arms), seeds_per_replicate(draws.design, len(draws.arms[0][0]))
    independent = draws.independent == r
    caveat = (f"the {r} replicates use disjoint runs: they are independent" if independent else
              f"a pool of {draws.pool} seeds holds {draws.independent} disjoint replicates of {per} seeds, so the "
              f"{r} replicates share runs: the shares estimate the per-design error rate without bias, and the "
              f"intervals are sized by the {draws.independent} independent replicates (conservative)")
    caveat += ("; a pooled row's cells of one replicate share its runs, so its interval counts a replicate once")
    info = dict(design or {}, design=draws.design, seeds=len(draws.arms[0][0]), replicates=r, n_boot=n_boot,
                level=level, pool=draws.pool)
    return Calibration(rows, family, any_raw, r, independent, info, time.perf_counter() - start, caveat,
                       draws.independent)


# --------------------------------------------------------------------------------- the pool (training)
class _Dir:
    """A Tune checkpoint's face for ``sweeps.export.finetune_tables``: a local directory."""

    def __init__(self, path: Path):
        self.path = str(path)

    def as_directory(self):
        return contextlib.nullcontext(self.path)


@dataclass(frozen=True)
class _Result:
    """The fields of a Tune result that ``sweeps.export.run_row`` / ``finetune_tables`` read."""

    config: dict
    metrics: dict
    path: str
    checkpoint: _Dir | None = None
    error: BaseException | None = None
    filesystem: object = None


def pool_config(preset: str, variant: str, overrides: Sequence[str], key: RunKey):
    """The measurement config of pool run ``key`` = (seed, mask stream), as ``sweeps.phases.measurement_specs``
    sets a variant's: the seed decides the initial weights, the data order and the fine-tuning draws, the
    stream (``objective.mask_stream``) only the training masks."""
    from trainables.presets import build_config

    seed, stream = key
    cfg = build_config(preset, variant=variant, overrides=list(overrides))
    return cfg.replace(run=dataclasses.replace(cfg.run, seed=seed, checkpoint_every=cfg.run.eval_every),
                       objective=dataclasses.replace(cfg.objective, mask_stream=stream))


def rows_key(cfg, tasks: Sequence[str], mode: str) -> str:
    """A short hash of what the fine-tuning rows depend on beyond the checkpoint: cached rows of other tasks,
    another mode or another recipe are never reused."""
    import hashlib

    what = json.dumps({"tasks": list(tasks), "mode": mode, "finetune": cfg.to_dict()["finetune"]}, sort_keys=True)
    return hashlib.sha256(what.encode()).hexdigest()[:10]


def pool_run(out: str, preset: str, variant: str, overrides: Sequence[str], key: RunKey, tasks: Sequence[str],
             finetune_seeds: int, mode: str = "finetune", threads: int = 0) -> tuple[_Result, list[_Result]]:
    """Pretrain pool run ``key`` and fine-tune it (each step skipped when its output exists): the Tune-result
    stand-ins the sweeps' export writer reads. A top-level function so a process pool can run it."""
    import torch

    from trainables.finetune import run_finetuning, write_tables
    from trainables.intrinsic import as_report
    from trainables.pretrain import run_pretraining

    if threads:
        torch.set_num_threads(threads)
    cfg = pool_config(preset, variant, overrides, key)
    rid = run_id(variant, key)
    ckpt = Path(out) / "pool" / rid
    res = run_pretraining(cfg, ckpt)  # returns the stored result when ckpt holds this finished run
    metrics = {"step": res.steps, "tokens_seen": res.tokens_seen, "epoch": res.epochs, "final": 1,
               "wall_time_s": res.wall_time_s, "train_flops": res.train_flops, **as_report(res.metrics),
               "checkpoint_path": str(ckpt)}
    pre = _Result({"run_id": rid, "variant": variant, "cfg": cfg.to_dict()}, metrics, str(ckpt))
    fts = []
    for f in range(finetune_seeds):
        rows = Path(out) / f"{mode}-{rows_key(cfg, tasks, mode)}" / f"{rid}-ft{f}"
        if not (rows / "predictions.parquet").exists():  # written last: its presence means both are done
            result = run_finetuning(ckpt, list(tasks), [f], cfg, run_id=rid, mode=mode)
            write_tables(result, rows, select=False)  # as a sweep trial: the export chooses the rate
        fts.append(_Result({}, {}, str(rows), _Dir(rows)))
    return pre, fts


def build_pool(out: str, preset: str, variant: str, overrides: Sequence[str], keys: Sequence[RunKey],
               tasks: Sequence[str], finetune_seeds: int, mode: str = "finetune",
               workers: int = 1) -> tuple[Export, dict[RunKey, str]]:
    """Train (or find) the pool runs ``keys`` and write ``OUT/export`` with the sweeps' writer; the export
    and run key -> run_id."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from sweeps.export import export

    keys = sorted(keys)
    args = [(out, preset, variant, tuple(overrides), k, tuple(tasks), finetune_seeds, mode, 1 if workers > 1 else 0)
            for k in keys]
    if workers > 1:
        # spawn, not fork: a forked child of a process that has run torch's thread pool can hang
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as ex:
            done = list(ex.map(pool_run, *zip(*args)))
    else:
        done = []
        for a in args:
            t0 = time.perf_counter()
            done.append(pool_run(*a))
            log.info("pool run %s: %.0f s", run_id(variant, a[4]), time.perf_counter() - t0)
    root = str(Path(out).resolve())
    export(root, {"measure": [d[0] for d in done], "finetune": [f for d in done for f in d[1]]})
    return load_export(Path(root) / "export"), {k: run_id(variant, k) for k in keys}


# ------------------------------------------------------------------------------------- simulated pool
@dataclass(frozen=True)
class Noise:
    """The simulated pool's noise (logit scale): seed effect, seed x example and fine-tuning noise are shared
    by a seed's mask streams (same weights, data and fine-tuning draws); a stream adds its own run effect
    and run x example noise."""

    seed: float = 0.3
    finetune: float = 0.1
    example: float = 1.0
    seed_example: float = 0.3
    stream: float = 0.15
    stream_example: float = 0.2
    base: float = 1.5


def simulated_pool(keys: Sequence[RunKey], rng: np.random.Generator, tasks: Sequence[str] = ("sim_a", "sim_b"),
                   finetune_seeds: int = 1, examples: int = 200,
                   noise: Noise = Noise()) -> tuple[Export, dict[RunKey, str]]:
    """The pool runs ``keys`` of one variant in the export schema, with no training: run (seed p, stream m,
    fine-tuning seed f) answers test example i correctly with probability
    sigmoid(base + s_p + c_pf + u_pm + d_i + g_pi + h_pmi): shared example difficulty d; seed effect s,
    seed x example g (per task) and fine-tuning noise c shared by the seed's streams; the stream's own
    effect u and noise h. Its dev value is the same model on other examples. Streams and seeds are
    exchangeable, so every A/A contrast drawn from it, paired or not, is truly 0: the check of the
    statistics code, not of training."""
    from trainables import schema
    from trainables.intrinsic import metric_columns
    from trainables.objectives import OBJECTIVES

    runs, evals, preds, seeds = [], [], [], {}
    difficulty = {t: rng.normal(0, noise.example, examples) for t in tasks}
    for key in sorted(keys):
        rid, (s, _) = run_id("full", key), key
        if s not in seeds:  # what a seed's streams share
            seeds[s] = (rng.normal(0, noise.seed), {t: rng.normal(0, noise.seed_example, examples) for t in tasks},
                        rng.normal(0, noise.finetune, finetune_seeds))
        runs.append({"run_id": rid, "phase": "measure", "variant": "full", "mlm_weight": 1.0, "nsp_weight": 1.0,
                     **{f"{o}_weight": 0.0 for o in OBJECTIVES if o not in ("mlm", "nsp")},
                     "mask_ratio": 0.15, "input_format": "nsp_pairs", "pretrain_seed": s, "status": "completed",
                     "collapsed": False, "probe_score": float("nan")})
        seed_effect, g, c = seeds[s]
        run_effect = seed_effect + rng.normal(0, noise.stream)
        for t in tasks:
            h = g[t] + rng.normal(0, noise.stream_example, examples)
            for f in range(finetune_seeds):
                e, pr = _simulated_eval(rid, t, f, run_effect + c[f], difficulty[t] + h, noise, rng)
                evals.append(e)
                preds += pr
    tables = (schema.build_table("runs", runs, tuple(OBJECTIVES), "simulated", metric_columns()),
              schema.build_table("evals", evals, code_version="simulated"),
              schema.build_table("predictions", preds, code_version="simulated"))
    return check_export(Export(*(t.to_pandas() for t in tables))), {k: run_id("full", k) for k in keys}


def _simulated_eval(rid: str, task: str, f: int, model: float, example_logit: np.ndarray, noise: Noise,
                    rng: np.random.Generator):
    """One simulated (run, task, fine-tuning seed): its eval record and per-example predictions."""
    from trainables import schema

    n = len(example_logit)
    gold = np.where(np.arange(n) % 2 == 0, "a", "b")
    right = rng.random(n) < 1 / (1 + np.exp(-(noise.base + model + example_logit)))
    pred = np.where(right, gold, np.where(gold == "a", "b", "a"))
    spread = np.sqrt(noise.example ** 2 + noise.seed_example ** 2 + noise.stream_example ** 2)
    dev_logit = noise.base + model + rng.normal(0, spread, n)
    dev = float((rng.random(n) < 1 / (1 + np.exp(-dev_logit))).mean())
    record = schema.EvalRecord(rid, task, f, "finetune", "accuracy", float(right.mean()), True, n, 0.0, task, "",
                               1e-3, dev, True, "pooler")
    return record, [schema.PredictionRecord(rid, task, f, "finetune", str(i), str(p), str(y), 1e-3)
                    for i, (p, y) in enumerate(zip(pred, gold))]


# ------------------------------------------------------------------------------------------------ text
def _pct(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{100 * x:.1f}%"


def calibration_table(c: Calibration, level: float = 0.95) -> str:
    """The Markdown table of one design: one line per row, then the family line, then the caveat."""
    head = (f"**{c.design.get('design', 'unpaired')} A/A** ({c.replicates} replicates, "
            f"{c.effective_replicates} independent)")
    lines = [head, "", "| row | replicates | false positives | share [95% CI] | independent n | coverage of 0 "
             "| mean width | mean p | plain percentile share | not learned |", "|---|---|---|---|---|---|---|---|---|---|"]
    num = lambda x: "" if not np.isfinite(x) else f"{x:.3f}"  # noqa: E731
    for s in c.rows + [c.family]:
        lo, hi = s.share_ci
        lines.append(f"| {s.row} | {s.replicates} | {s.false_positives} | {_pct(s.share)} [{_pct(lo)}, {_pct(hi)}] "
                     f"| {s.effective:.4g} | {_pct(s.coverage)} | {num(s.mean_width)} | {num(s.mean_p)} | "
                     f"{_pct(s.raw_share) if np.isfinite(s.raw_share) else ''} | {s.not_computed} |")
    target = 1 - level
    lines += ["", f"Target: share <= {target:.0%} per row (interval level {level:.2f}); family-wise error <= "
                  f"{ALPHA:.0%}. Any interval excluding 0 (no Holm): {_pct(c.any_raw)} of {c.replicates} "
                  f"replicates. The family line counts replicates where any cell was called (the report's rule); "
                  f"'not learned' there counts replicates with no computed cell. Each share's Clopper-Pearson "
                  f"interval is sized by its independent n.", "", f"Note: {c.caveat}."]
    return "\n".join(lines)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m analysis.calibrate", description=__doc__.splitlines()[0])
    ap.add_argument("--design", choices=("paired", "unpaired", "both"), default="both",
                    help="paired: the arms share a seed's weights, data and fine-tuning draws, other masks; "
                         "unpaired: the arms share nothing")
    ap.add_argument("--replicates", type=int, default=20)
    ap.add_argument("--seeds", type=int, default=3, help="pretraining seeds per arm (P)")
    ap.add_argument("--finetune-seeds", type=int, default=1)
    ap.add_argument("--pool", type=int, default=0,
                    help="pretraining seeds in the pool (0: the fewest giving independent replicates, P R paired "
                         "and 2 P R unpaired; a smaller pool sizes the intervals by the disjoint replicates it holds)")
    ap.add_argument("--preset", default="smoke")
    ap.add_argument("--variant", default="full", help="the one variant both arms are")
    ap.add_argument("--tasks", default="", help="comma-separated tasks or a group (default: the preset's)")
    ap.add_argument("--mode", choices=("finetune", "probe"), default="finetune",
                    help="fine-tuning, or the linear probe (frozen encoder; what smoke scale learns: see README)")
    ap.add_argument("--set", action="append", default=[], metavar="K=V", help="config override (repeatable)")
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--level", type=float, default=0.95)
    ap.add_argument("--seed", type=int, default=0, help="the replicates' draws and the bootstrap")
    ap.add_argument("--workers", type=int, default=1, help="processes training the pool (1 thread each when > 1)")
    ap.add_argument("--out", default="runs/calibrate", help="the pool's runs and export (reused on a rerun)")
    ap.add_argument("--simulate", action="store_true", help="a simulated pool (no training): checks the statistics")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    args.designs = DESIGNS if args.design == "both" else (args.design,)
    least = max(seeds_per_replicate(d, max(args.seeds, 1)) for d in args.designs)
    if args.seeds < 1 or args.replicates < 1 or args.finetune_seeds < 1:
        ap.error("--seeds, --replicates and --finetune-seeds must be >= 1")
    if args.pool and args.pool < least:
        ap.error(f"--pool {args.pool} cannot give {args.design} arms of {args.seeds} seeds: use 0 or >= {least}")
    args.pool = args.pool or independent_pool(args.designs, args.seeds, args.replicates)
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    start = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    draws = [draw_replicates(d, range(args.pool), args.seeds, args.replicates, rng) for d in args.designs]
    keys = set().union(*(d.keys for d in draws))  # the runs the designs use: the paired arms B only where drawn
    if args.simulate:
        pool, runs_of = simulated_pool(keys, rng, finetune_seeds=args.finetune_seeds)
        design = {"simulated": True, "tasks": ["sim_a", "sim_b"], "finetune_seeds": args.finetune_seeds}
    else:
        from trainables.presets import build_config
        from trainables.tasks import resolve_tasks

        tasks = resolve_tasks(args.tasks or build_config(args.preset, overrides=args.set).finetune.tasks)
        pool, runs_of = build_pool(args.out, args.preset, args.variant, args.set, keys, tasks,
                                   args.finetune_seeds, args.mode, args.workers)
        design = {"preset": args.preset, "variant": args.variant, "tasks": tasks, "mode": args.mode,
                  "overrides": list(args.set), "finetune_seeds": args.finetune_seeds, "runs": len(keys),
                  "export": str(Path(args.out).resolve() / "export")}
    results = {d.design: calibrate(pool, runs_of, d, rng, args.boot, args.level, design) for d in draws}
    wall = time.perf_counter() - start
    if args.json:
        print(json.dumps({"calibrations": {k: asdict(v) for k, v in results.items()}, "wall_s": wall},
                         indent=2, default=str))
        return 0
    for result in results.values():
        print(calibration_table(result, args.level) + "\n")
    print(f"{args.replicates} replicates per design, P={args.seeds}, F={args.finetune_seeds}, pool {args.pool} seeds "
          f"({len(keys)} runs); replicates {sum(r.seconds for r in results.values()):.0f} s, wall {wall:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
