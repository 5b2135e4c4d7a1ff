"""A/A calibration: the report's intervals and calls on the pipeline's own noise, where every truth is 0.

    python -m analysis.calibrate --preset cpu-small --replicates 40 --seeds 3 --pool 12 --workers 2 \\
        --out runs/calibrate-cpu                      # fine-tuning on the preset's tasks (sentiment,topic,hedge,pos)
    python -m analysis.calibrate --preset smoke --mode probe --tasks sentiment,topic,hedge,headline_match \\
        --replicates 40 --seeds 3 --pool 24 --workers 2 --out runs/calibrate   # minutes (smoke fine-tuning learns
                                                      # no task, so the probe: see README)
    python -m analysis.calibrate ... --json              # one JSON object instead of the table
    python -m analysis.calibrate --simulate --replicates 200 --pool 30   # statistics only, a simulated pool

``analysis.validate`` checks the intervals on simulated ablations, whose noise is the simulation's
(normal seed effects, independent examples). This is the negative control on the real thing: a POOL of
``--pool`` pretraining runs of ONE variant (``--variant``, default full) at seeds 0..N-1, each trained by
``trainables.pretrain.run_pretraining`` and fine-tuned by ``trainables.finetune.run_finetuning`` on
``--tasks`` over ``--finetune-seeds`` seeds, is written once as a sweep export by the sweeps' own writer
(``sweeps.export.export``: runs rows by ``run_row``, the rate chosen on dev by ``select_tables``). Each
replicate draws two disjoint sets of P = ``--seeds`` pool runs: arm A is relabelled variant ``full`` and
arm B ``best_mix``, both with pretraining seeds 0..P-1, in a copy of the export; the analysis then runs
unchanged (``analysis.contributions.estimate_contributions``: intervals, the learned-on-dev gate, the
average row and the report's Holm family). Why those two names: between two variants of identical
weights and input format the analysis derives exactly one contrast, ``best_mix - full`` (a searched mix
that came out as BERT's own), so B - A is computed by its normal code and its truth is 0 by exchange.

Reported per task row, the average row and every task cell pooled: the replicates where the contrast
was computed (a task not learned on dev in a replicate has none, as in the report), the share whose
interval excludes 0 (target <= 1 - level) with its 95% Clopper-Pearson interval, the coverage of 0 and
the mean width;
the mean p (uniform under the null: 0.5; above it the test is conservative) and, for reference, the
share of the plain percentile intervals excluding 0; then "any task (Holm across the row)": the share
of replicates where any cell is *called* by the report's rule (``analysis.inference.called`` on the
Holm-adjusted p of the report's family), and the share where any interval excludes 0 unadjusted.

Dependence. With ``--pool`` >= 2 P R every replicate gets its own runs and the replicates are
independent. With a smaller pool they share runs: the false-positive share is still an unbiased
estimate of the per-design error rate (each replicate is a valid A/A design), but the replicates are
positively correlated, so the binomial interval is optimistic (too narrow). The output says which.

Cost: the pool's pretraining and fine-tuning (cached under ``--out``: an interrupted calibration
resumes, finished runs are not redone); the replicates are seconds each.
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
import pandas as pd
from scipy import stats as sps

from analysis.contributions import estimate_contributions
from analysis.export import Export, check_export, load_export
from analysis.inference import ALPHA, called

log = logging.getLogger("analysis.calibrate")

ARM_A, ARM_B = "full", "best_mix"  # the one contrast the analysis derives between identical variants
AVERAGE_PREFIX = "average ("
POOLED = "every task cell (pooled)"


# ----------------------------------------------------------------------------------------- replicates
def draw_replicates(seeds: Sequence[int], p: int, r: int,
                    rng: np.random.Generator) -> tuple[list[tuple[tuple[int, ...], tuple[int, ...]]], bool]:
    """R pairs of disjoint seed sets of size P from ``seeds``, and whether replicates share no run.

    With len(seeds) >= 2PR, disjoint blocks of one permutation (independent replicates); otherwise each
    replicate permutes the pool anew (replicates share runs)."""
    seeds = np.asarray(sorted(set(int(s) for s in seeds)))
    if len(seeds) < 2 * p:
        raise ValueError(f"a pool of {len(seeds)} seeds cannot give two disjoint arms of {p}")
    if len(seeds) >= 2 * p * r:
        perm = rng.permutation(seeds)
        blocks = [perm[2 * p * i:2 * p * (i + 1)] for i in range(r)]
        independent = True
    else:
        blocks = [rng.permutation(seeds)[:2 * p] for _ in range(r)]
        independent = False
    return [(tuple(int(s) for s in b[:p]), tuple(int(s) for s in b[p:])) for b in blocks], independent


def aa_export(pool: Export, arm_a: Sequence[str], arm_b: Sequence[str]) -> Export:
    """A copy of ``pool`` with only the runs of both arms: arm A as variant ``ARM_A``, arm B as ``ARM_B``,
    each with pretraining seeds 0..P-1 (the analysis pairs variants on the seed index; the arms share no
    run, so the pairing is arbitrary and the seed-level differences are independent, mean 0)."""
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
def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval of k successes in n trials."""
    if n == 0:
        return float("nan"), float("nan")
    a = (1 - level) / 2
    lo = float(sps.beta.ppf(a, k, n - k + 1)) if k > 0 else 0.0
    hi = float(sps.beta.ppf(1 - a, k + 1, n - k)) if k < n else 1.0
    return lo, hi


@dataclass(frozen=True)
class RowSummary:
    row: str
    replicates: int  # replicates where the contrast was computed (the row was learned)
    false_positives: int  # of them, intervals excluding 0
    share: float
    share_ci: tuple[float, float]  # 95% Clopper-Pearson (optimistic when replicates share runs)
    coverage: float  # of 0
    mean_width: float
    not_computed: int  # replicates where the row was not learned on dev (no contrast, as in the report)
    mean_p: float = float("nan")  # under the null p is uniform: 0.5; above it, conservative
    raw_share: float = float("nan")  # share of plain percentile intervals excluding 0, for reference


@dataclass(frozen=True)
class Calibration:
    rows: list[RowSummary]
    family: RowSummary  # 'any task (Holm across the row)': false_positives = replicates with any call
    any_raw: float  # share of replicates where any interval excludes 0 (no multiplicity adjustment)
    replicates: int
    independent: bool
    design: dict = field(default_factory=dict)
    seconds: float = float("nan")
    caveat: str = ""


def summarise(replicates: list[tuple[list[Cell], tuple[str, ...]]],
              level: float = 0.95) -> tuple[list[RowSummary], RowSummary, float]:
    """Per row, the false-positive share with its interval, coverage and width; then the family."""
    labels = list(dict.fromkeys(label for _, rows in replicates for label in rows))
    tasks = [label for label in labels if not label.startswith(AVERAGE_PREFIX)]
    out = []
    for label in labels + [POOLED]:
        group = tasks if label == POOLED else [label]  # pooled: every task cell, averages left out
        cells = [c for cells, _ in replicates for c in cells if c.row in group]
        k, n = sum(c.excludes_zero for c in cells), len(cells)
        mean = lambda xs: float(np.mean(xs)) if n else float("nan")  # noqa: E731
        out.append(RowSummary(label, n, k, k / n if n else float("nan"), clopper_pearson(k, n, level),
                              1 - k / n if n else float("nan"), mean([c.hi - c.lo for c in cells]),
                              sum(g in rows for _, rows in replicates for g in group) - n,
                              mean([c.p_value for c in cells]), mean([c.raw_excludes_zero for c in cells])))
    n = len(replicates)
    k = sum(any(c.called for c in cells) for cells, _ in replicates)
    family = RowSummary("any task (Holm across the row)", n, k, k / n if n else float("nan"),
                        clopper_pearson(k, n, level), 1 - k / n if n else float("nan"), float("nan"),
                        sum(not cells for cells, _ in replicates))
    any_raw = float(np.mean([any(c.excludes_zero for c in cells) for cells, _ in replicates])) if n else float("nan")
    return out, family, any_raw


def calibrate(pool: Export, seeds_of: dict[int, str], p: int, r: int, rng: np.random.Generator,
              n_boot: int = 1000, level: float = 0.95, design: dict | None = None) -> Calibration:
    """R A/A replicates drawn from ``pool`` (pool seed -> run_id in ``seeds_of``), summarised."""
    start = time.perf_counter()
    draws, independent = draw_replicates(list(seeds_of), p, r, rng)
    reps = [aa_cells(aa_export(pool, [seeds_of[s] for s in a], [seeds_of[s] for s in b]), rng, n_boot, level)
            for a, b in draws]
    rows, family, any_raw = summarise(reps, level)
    caveat = ("replicates use disjoint runs: they are independent" if independent else
              f"replicates share runs (a pool of {len(seeds_of)} runs for {r} replicates of 2 x {p}): the shares "
              "estimate the per-design error rate without bias, but the replicates are correlated, so the "
              "binomial intervals are optimistic (too narrow)")
    return Calibration(rows, family, any_raw, r, independent, dict(design or {}, seeds=p, replicates=r, n_boot=n_boot,
                                                                 level=level, pool=len(seeds_of)),
                       time.perf_counter() - start, caveat)


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


def pool_config(preset: str, variant: str, overrides: Sequence[str], seed: int):
    """The measurement config of pool seed ``seed`` (as ``sweeps.phases.measurement_specs`` sets it)."""
    from trainables.presets import build_config

    cfg = build_config(preset, variant=variant, overrides=list(overrides))
    return cfg.replace(run=dataclasses.replace(cfg.run, seed=seed, checkpoint_every=cfg.run.eval_every))


def rows_key(cfg, tasks: Sequence[str], mode: str) -> str:
    """A short hash of what the fine-tuning rows depend on beyond the checkpoint: cached rows of other tasks,
    another mode or another recipe are never reused."""
    import hashlib

    what = json.dumps({"tasks": list(tasks), "mode": mode, "finetune": cfg.to_dict()["finetune"]}, sort_keys=True)
    return hashlib.sha256(what.encode()).hexdigest()[:10]


def pool_run(out: str, preset: str, variant: str, overrides: Sequence[str], seed: int, tasks: Sequence[str],
             finetune_seeds: int, mode: str = "finetune", threads: int = 0) -> tuple[_Result, list[_Result]]:
    """Pretrain pool seed ``seed`` and fine-tune it (each step skipped when its output exists): the Tune-result
    stand-ins the sweeps' export writer reads. A top-level function so a process pool can run it."""
    import torch

    from trainables.finetune import run_finetuning, write_tables
    from trainables.intrinsic import as_report
    from trainables.pretrain import run_pretraining

    if threads:
        torch.set_num_threads(threads)
    cfg = pool_config(preset, variant, overrides, seed)
    run_id = f"{variant}-s{seed}"
    ckpt = Path(out) / "pool" / run_id
    res = run_pretraining(cfg, ckpt)  # returns the stored result when ckpt holds this finished run
    metrics = {"step": res.steps, "tokens_seen": res.tokens_seen, "epoch": res.epochs, "final": 1,
               "wall_time_s": res.wall_time_s, "train_flops": res.train_flops, **as_report(res.metrics),
               "checkpoint_path": str(ckpt)}
    pre = _Result({"run_id": run_id, "variant": variant, "cfg": cfg.to_dict()}, metrics, str(ckpt))
    fts = []
    for f in range(finetune_seeds):
        rows = Path(out) / f"{mode}-{rows_key(cfg, tasks, mode)}" / f"{run_id}-ft{f}"
        if not (rows / "predictions.parquet").exists():  # written last: its presence means both are done
            result = run_finetuning(ckpt, list(tasks), [f], cfg, run_id=run_id, mode=mode)
            write_tables(result, rows, select=False)  # as a sweep trial: the export chooses the rate
        fts.append(_Result({}, {}, str(rows), _Dir(rows)))
    return pre, fts


def build_pool(out: str, preset: str, variant: str, overrides: Sequence[str], n: int, tasks: Sequence[str],
               finetune_seeds: int, mode: str = "finetune", workers: int = 1) -> tuple[Export, dict[int, str]]:
    """Train (or find) the pool's N runs and write ``OUT/export`` with the sweeps' writer; the export
    and pool seed -> run_id."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from sweeps.export import export

    args = [(out, preset, variant, tuple(overrides), s, tuple(tasks), finetune_seeds, mode, 1 if workers > 1 else 0)
            for s in range(n)]
    if workers > 1:
        # spawn, not fork: a forked child of a process that has run torch's thread pool can hang
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as ex:
            done = list(ex.map(pool_run, *zip(*args)))
    else:
        done = []
        for a in args:
            t0 = time.perf_counter()
            done.append(pool_run(*a))
            log.info("pool run %s: %.0f s", a[4], time.perf_counter() - t0)
    root = str(Path(out).resolve())
    export(root, measure_grid=[d[0] for d in done], finetune_grid=[f for d in done for f in d[1]])
    return load_export(Path(root) / "export"), {s: f"{variant}-s{s}" for s in range(n)}


# ------------------------------------------------------------------------------------- simulated pool
def simulated_pool(n: int, rng: np.random.Generator, tasks: Sequence[str] = ("sim_a", "sim_b"),
                   finetune_seeds: int = 1, examples: int = 200, sd_seed: float = 0.3,
                   sd_finetune: float = 0.1, sd_example: float = 1.0, sd_seed_example: float = 0.3,
                   base: float = 1.5) -> tuple[Export, dict[int, str]]:
    """A pool of N runs of one variant in the export schema, with no training: run (seed p, fine-tuning
    seed f) answers test example i correctly with probability sigmoid(base + s_p + c_pf + d_i + g_pi), shared
    example difficulty d, seed effect s, seed x example g (per task) and fine-tuning noise c; its dev value
    is the same model on other examples. Every A/A contrast drawn from it is truly 0: the check of the
    statistics code, not of training."""
    from trainables import schema
    from trainables.intrinsic import metric_columns
    from trainables.objectives import OBJECTIVES

    runs, evals, preds = [], [], []
    seeds_of = {}
    difficulty = {t: rng.normal(0, sd_example, examples) for t in tasks}
    for s in range(n):
        rid = f"full-s{s}"
        seeds_of[s] = rid
        runs.append({"run_id": rid, "phase": "measure", "variant": "full", "mlm_weight": 1.0, "nsp_weight": 1.0,
                     **{f"{o}_weight": 0.0 for o in OBJECTIVES if o not in ("mlm", "nsp")},
                     "mask_ratio": 0.15, "input_format": "nsp_pairs", "pretrain_seed": s, "status": "completed",
                     "collapsed": False, "probe_score": float("nan")})
        seed_effect = rng.normal(0, sd_seed)
        for t in tasks:
            g = rng.normal(0, sd_seed_example, examples)
            for f in range(finetune_seeds):
                model = base + seed_effect + rng.normal(0, sd_finetune)
                logit = model + difficulty[t] + g
                gold = np.where(np.arange(examples) % 2 == 0, "a", "b")
                right = rng.random(examples) < 1 / (1 + np.exp(-logit))
                pred = np.where(right, gold, np.where(gold == "a", "b", "a"))
                dev_logit = model + rng.normal(0, np.hypot(sd_example, sd_seed_example), examples)
                dev = float((rng.random(examples) < 1 / (1 + np.exp(-dev_logit))).mean())
                evals.append(schema.EvalRecord(rid, t, f, "finetune", "accuracy", float(right.mean()), True, examples,
                                               0.0, t, "", 1e-3, dev, True, "pooler"))
                preds += [schema.PredictionRecord(rid, t, f, "finetune", str(i), str(p), str(y), 1e-3)
                          for i, (p, y) in enumerate(zip(pred, gold))]
    tables = (schema.build_table("runs", runs, tuple(OBJECTIVES), "simulated", metric_columns()),
              schema.build_table("evals", evals, code_version="simulated"),
              schema.build_table("predictions", preds, code_version="simulated"))
    return check_export(Export(*(t.to_pandas() for t in tables))), seeds_of


# ------------------------------------------------------------------------------------------------ text
def _pct(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{100 * x:.1f}%"


def calibration_table(c: Calibration, level: float = 0.95) -> str:
    """The Markdown table: one line per row, then the family line, then the caveat."""
    lines = ["| row | replicates | false positives | share [95% CI] | coverage of 0 | mean width | mean p "
             "| plain percentile share | not learned |", "|---|---|---|---|---|---|---|---|---|"]
    num = lambda x: "" if not np.isfinite(x) else f"{x:.3f}"  # noqa: E731
    for s in c.rows + [c.family]:
        lo, hi = s.share_ci
        lines.append(f"| {s.row} | {s.replicates} | {s.false_positives} | {_pct(s.share)} [{_pct(lo)}, {_pct(hi)}] "
                     f"| {_pct(s.coverage)} | {num(s.mean_width)} | {num(s.mean_p)} | "
                     f"{_pct(s.raw_share) if np.isfinite(s.raw_share) else ''} | {s.not_computed} |")
    target = 1 - level
    lines += ["", f"Target: share <= {target:.0%} per row (interval level {level:.2f}); family-wise error <= "
                  f"{ALPHA:.0%}. Any interval excluding 0 (no Holm): {_pct(c.any_raw)} of {c.replicates} "
                  f"replicates. The family line counts replicates where any cell was called (the report's rule); "
                  f"'not learned' there counts replicates with no computed cell. The pooled row's cells of one "
                  f"replicate share its runs, so its interval is optimistic too.", "", f"Note: {c.caveat}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.calibrate", description=__doc__.splitlines()[0])
    ap.add_argument("--replicates", type=int, default=40)
    ap.add_argument("--seeds", type=int, default=3, help="pretraining seeds per arm (P)")
    ap.add_argument("--finetune-seeds", type=int, default=1)
    ap.add_argument("--pool", type=int, default=12, help="pretraining runs of the one variant (N >= 2P)")
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
    if args.seeds < 1 or args.replicates < 1 or args.pool < 2 * args.seeds or args.finetune_seeds < 1:
        ap.error("--seeds, --replicates and --finetune-seeds must be >= 1 and --pool >= 2 x --seeds")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    start = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    if args.simulate:
        pool, seeds_of = simulated_pool(args.pool, rng, finetune_seeds=args.finetune_seeds)
        design = {"simulated": True, "tasks": ["sim_a", "sim_b"], "finetune_seeds": args.finetune_seeds}
    else:
        from trainables.presets import build_config
        from trainables.tasks import resolve_tasks

        tasks = resolve_tasks(args.tasks or build_config(args.preset, overrides=args.set).finetune.tasks)
        pool, seeds_of = build_pool(args.out, args.preset, args.variant, args.set, args.pool, tasks,
                                    args.finetune_seeds, args.mode, args.workers)
        design = {"preset": args.preset, "variant": args.variant, "tasks": tasks, "mode": args.mode,
                  "overrides": list(args.set),
                  "finetune_seeds": args.finetune_seeds, "export": str(Path(args.out).resolve() / "export")}
    result = calibrate(pool, seeds_of, args.seeds, args.replicates, rng, args.boot, args.level, design)
    wall = time.perf_counter() - start
    if args.json:
        print(json.dumps({**asdict(result), "wall_s": wall}, indent=2, default=str))
    else:
        print(calibration_table(result, args.level))
        print(f"\n{args.replicates} replicates, P={args.seeds}, F={args.finetune_seeds}, pool {args.pool}; "
              f"replicates {result.seconds:.0f} s, wall {wall:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
