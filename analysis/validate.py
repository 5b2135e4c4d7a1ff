"""Checks of the statistics on simulated ablations whose truth is known (``analysis.simulate``).

    python -m analysis.validate --simulations 1000 --json                  # coverage, Holm, average row
    python -m analysis.validate --simulations 300 --pretrain-seeds 3
    python -m analysis.validate --simulations 300 --finetune-seeds 1 --draws crossed   # the shared-draw design
    python -m analysis.validate --power --reps 200                         # predicted power vs detection
    python -m analysis.validate --curves 5 --simulations 200               # the rule across a curve's points
    python -m analysis.validate --curves 5 --curve-rows 10,4 --pretrain-seeds 6 --examples 500 --boot 400 \
        --simulations 2000                                   # ... in cpu-long's shape, through curve_rows itself

Coverage: each simulation runs one task through ``analysis.bootstrap.multibootstrap`` (the function
the report uses) for the variant means and every contrast ``analysis.contrasts`` derives, and one
three-task average (shared seeds, different effects and example counts, one source task counted
once); coverage is the share of intervals holding the truth. Every other simulation is a null design
(all contrasts truly 0): the family-wise error rate is the share of null families with any Holm-
adjusted p < 0.05 (and, for reference, with any raw p < 0.05), over every contrast and within each of
the report's two families (the primary question, ``analysis.contrasts.PRIMARY``, and the rest), each
adjusted on its own as the report adjusts them. ``--draws`` sets where the fine-tuning
draw (subset, head init, data order) comes from, with a variant x draw interaction as large as the
variant-seed effect: ``nested`` (default; the design ``trainables.finetune`` runs: derived from the
pretraining seed and f), ``crossed`` (one draw per f for every run, the shared-draw alternative: it undercovers,
because the bootstrap never resamples the draw) or ``independent`` (no draw effect).

Power: designs with a known difference (two variants, seed spread sd_seed) at P pretraining seeds;
the predicted power (``analysis.inference.power`` on the design's true variance) against the share
of simulated runs whose bootstrap p-value is < 0.05, and the pretraining seeds predicted to reach
power 0.8 against the detection rate of designs run with that many seeds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from analysis.bootstrap import MIN_RELIABLE_SEEDS, Interval, multibootstrap
from analysis.inference import design_se, holm, power
from analysis.simulate import (DRAWS, SimDesign, simulate_ablation, simulate_average, simulate_pair, sim_contrasts,
                               sim_families, true_pair_variance)

N_MEANS = 2  # the first rows of sim_contrasts are means, not contrasts (not tested against 0)


@dataclass(frozen=True)
class CoverageResult:
    coverage: float  # one task: over all rows and simulations
    raw_coverage: float  # of the plain percentile interval, for reference
    average_coverage: float  # the three-task average row
    n: int  # simulations
    n_null: int  # of them null designs (every contrast truly 0)
    fwer_holm: float  # share of null families with any Holm-adjusted p < 0.05
    fwer_raw: float  # ... with any raw p < 0.05
    # The report's rule: each family (primary: analysis.contrasts.PRIMARY; secondary: the rest) adjusted within
    # itself; the share of null designs with a false call in that family
    fwer_family: dict[str, float]
    per_contrast: dict[str, float]
    raw_per_contrast: dict[str, float]
    average_per_contrast: dict[str, float]
    mean_width: dict[str, float]
    seconds: float
    design: dict


def _hits(intervals, truth) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    hit = np.array([iv.lo <= t <= iv.hi for iv, t in zip(intervals, truth)])
    raw = np.array([iv.raw_lo <= t <= iv.raw_hi for iv, t in zip(intervals, truth)])
    return hit, raw, np.array([iv.hi - iv.lo for iv in intervals])


def run_coverage(n_sims: int, design: SimDesign, rng: np.random.Generator) -> CoverageResult:
    """Coverage of single-task and average intervals, and Holm's family-wise error on null designs."""
    names, contrasts = sim_contrasts()
    families = np.array(sim_families())
    hit, raw, width, avg = (np.zeros((n_sims, len(names))) for _ in range(4))
    fwer, by_family = [], {f: [] for f in dict.fromkeys(families)}
    start = time.perf_counter()
    for i in range(n_sims):
        null = i % 2 == 1
        m, truth = simulate_ablation(design, rng, null=null)
        ivs = multibootstrap([m], contrasts, rng, n_boot=design.n_boot, level=design.level)
        hit[i], raw[i], width[i] = _hits(ivs, truth)
        if null:
            p = np.array([iv.p_value for iv in ivs[N_MEANS:]])
            fwer.append(((holm(p) < 0.05).any(), (p < 0.05).any()))
            for f, calls in by_family.items():
                calls.append(bool((holm(p[families == f]) < 0.05).any()))
        ms, weights, truth = simulate_average(design, rng)
        avg[i] = _hits(multibootstrap(ms, contrasts, rng, n_boot=design.n_boot, level=design.level,
                                      task_weights=weights), truth)[0]
    fwer = np.array(fwer, dtype=float).reshape(-1, 2)
    per = lambda x: {k: float(v) for k, v in zip(names, x.mean(axis=0))}  # noqa: E731
    return CoverageResult(
        coverage=float(hit.mean()), raw_coverage=float(raw.mean()), average_coverage=float(avg.mean()), n=n_sims,
        n_null=len(fwer), fwer_holm=float(fwer[:, 0].mean()) if len(fwer) else float("nan"),
        fwer_raw=float(fwer[:, 1].mean()) if len(fwer) else float("nan"),
        fwer_family={f: float(np.mean(c)) if c else float("nan") for f, c in by_family.items()}, per_contrast=per(hit),
        raw_per_contrast=per(raw), average_per_contrast=per(avg), mean_width=per(width),
        seconds=time.perf_counter() - start, design=asdict(design))


@dataclass(frozen=True)
class CurveResult:
    """The rule across a curve's points (``analysis.curves``) on null curves: K points, each a null ablation."""

    points: int  # K
    n: int  # simulated curves
    coverage: list[float]  # per point: the share of intervals (every row) holding the truth
    fwer_curve: float  # share of curves with a false call in the primary family at any point, at Holm 0.05/K
    fwer_per_point: float  # ... with each point judged alone at Holm 0.05 (what the rule corrects)
    seconds: float


def run_curves(n_sims: int, k: int, design: SimDesign, rng: np.random.Generator) -> CurveResult:
    """Null curves of ``k`` points, each point an independent null ablation: where Bonferroni over the points is
    nearest its bound (points of one run are positively correlated, which only lowers the error)."""
    from analysis.inference import called

    names, contrasts = sim_contrasts()
    primary = np.array(sim_families())[:] == "primary"
    hits = np.zeros((n_sims, k))
    curve, single = [], []
    start = time.perf_counter()
    for i in range(n_sims):
        any_curve = any_single = False
        for j in range(k):
            m, truth = simulate_ablation(design, rng, null=True)
            ivs = multibootstrap([m], contrasts, rng, n_boot=design.n_boot, level=design.level)
            hits[i, j] = _hits(ivs, truth)[0].mean()
            cells = [iv for iv, is_p in zip(ivs[N_MEANS:], primary) if is_p]
            p_adj = holm(np.array([iv.p_value for iv in cells]))
            any_curve |= any(called(iv, p * k, 0.05) for iv, p in zip(cells, p_adj))
            any_single |= any(called(iv, p, 0.05) for iv, p in zip(cells, p_adj))
        curve.append(any_curve)
        single.append(any_single)
    return CurveResult(k, n_sims, [float(x) for x in hits.mean(axis=0)], float(np.mean(curve)), float(np.mean(single)),
                       time.perf_counter() - start)


def curves_text(r: CurveResult, level: float) -> str:
    return (f"null curves of {r.points} points, {r.n} simulated: coverage per point "
            + ", ".join(f"{c:.3f}" for c in r.coverage) + f" (nominal {level:.2f}); family-wise error of the primary "
            f"family along the whole curve {r.fwer_curve:.3f} under the rule (Holm at 0.05/{r.points} per point), "
            f"{r.fwer_per_point:.3f} with each point judged alone; {r.seconds:.1f} s")


@dataclass(frozen=True)
class CurveShapeResult:
    """The rule across points (``analysis.curves.curve_rows``, the code the report runs) on curves of a sweep's
    shape: probe rows read at every point, fine-tuned rows at the end only, all in the primary family."""

    points: int  # K: snapshots and the end
    every_point_rows: int  # rows read at every point (the probe's)
    end_only_rows: int  # rows read at the end only (fine-tuning's, by default)
    true_rows: int  # of the every-point rows, ones with a true effect (a partial null); 0 = the global null
    pretrain_seeds: int
    n: int  # simulated curves
    fwer: float  # share of curves with a false call (a null row called at any point) under the rule
    fwer_upper: float  # its one-sided 95% Clopper-Pearson upper bound
    fwer_by_own_points: float  # the same curves judged by the alternative rule: each row at 0.05 / its own points
    seconds: float
    true_detected: float = float("nan")  # share of the true rows called positive at some point (the rule's power)


def _cells(effects: np.ndarray, seeds: int, examples: int, rng: np.random.Generator, n_boot: int) -> list:
    """One Interval per cell (variant 1 - variant 0, one fine-tuning seed, ``seeds`` pretraining seeds), each from
    its own simulated data, bootstrapped together as a sweep's task rows are (shared seed resamples)."""
    sd = rng.uniform(0.005, 0.05)  # the seed spread of the probe's and fine-tuning's scores at cpu-long
    base = rng.uniform(0.3, 0.8)
    ms = [simulate_pair(float(e), sd, seeds, examples, rng, base=base) for e in effects]
    stats = np.concatenate([m.stats for m in ms])  # (2 x cells, P, 1, N, 2)
    m = type(ms[0])(ms[0].metric, stats, np.ones(stats.shape[:3], dtype=bool))
    c = np.zeros((len(effects), stats.shape[0]))
    for i in range(len(effects)):
        c[i, 2 * i], c[i, 2 * i + 1] = -1.0, 1.0
    return multibootstrap([m], c, rng, n_boot=n_boot)


def run_curve_shape(n_sims: int, k: int, every_point_rows: int, end_only_rows: int, seeds: int,
                    rng: np.random.Generator, true_rows: int = 0, effect: float = 0.1, examples: int = 500,
                    n_boot: int = 400) -> CurveShapeResult:
    """Curves of ``k`` points in a sweep's shape, each point an independent ablation (the worst case for
    Bonferroni over points; points of one run are positively correlated), judged by ``curve_rows``. The first
    ``true_rows`` every-point rows carry a true ``effect`` at every point; a call on any other row is false."""
    from types import SimpleNamespace

    from scipy.stats import beta

    from analysis.curves import CurvePoint, curve_rows
    from analysis.inference import ALPHA, called

    nan = float("nan")
    unread = Interval(nan, nan, nan, nan, nan, 0.0, 0, False, nan, nan)
    false_new, false_old, found = [], [], []
    start = time.perf_counter()
    for _ in range(n_sims):
        points = []
        for j in range(k):
            end = j == k - 1
            rows = every_point_rows + (end_only_rows if end else 0)
            effects = np.zeros(rows)
            effects[:true_rows] = effect
            ivs = _cells(effects, seeds, examples, rng, n_boot)
            p_adj = holm([iv.p_value for iv in ivs])  # the primary family at this point: every row read there
            ivs += [unread] * (0 if end else end_only_rows)
            p_adj = list(p_adj) + [nan] * (0 if end else end_only_rows)
            es = [SimpleNamespace(contrast=SimpleNamespace(name="v - none"), task=f"row{i}", interval=iv,
                                  p_adjusted=float(p), holm_family="primary") for i, (iv, p) in enumerate(zip(ivs, p_adj))]
            points.append(CurvePoint(j, float(j + 1), SimpleNamespace(contrasts=es)))
        rows = curve_rows(points)
        null = [r for r in rows if int(r.task[3:]) >= true_rows]
        found += [any(ok and e.interval.estimate > 0 for _, e, ok in r.points) for r in rows
                  if int(r.task[3:]) < true_rows]
        false_new.append(any(ok for r in null for _, _, ok in r.points))
        false_old.append(any(called(e.interval, e.p_adjusted * len(r.points), ALPHA) for r in null for _, e, _ in r.points))
    hits = int(np.sum(false_new))
    upper = float(beta.ppf(0.95, hits + 1, n_sims - hits)) if hits < n_sims else 1.0
    return CurveShapeResult(k, every_point_rows, end_only_rows, true_rows, seeds, n_sims, hits / n_sims, upper,
                            float(np.mean(false_old)), time.perf_counter() - start,
                            float(np.mean(found)) if found else float("nan"))


def curve_shape_text(r: CurveShapeResult) -> str:
    null = "global null" if not r.true_rows else f"partial null ({r.true_rows} rows with a true effect)"
    return (f"{r.n} curves of {r.points} points, {r.pretrain_seeds} pretraining seeds, {r.every_point_rows} rows read "
            f"at every point and {r.end_only_rows} at the end only, {null}: family-wise error {r.fwer:.4f} (95% upper "
            f"bound {r.fwer_upper:.4f}) under the rule (every row at 0.05/{r.points}); {r.fwer_by_own_points:.4f} "
            f"with each row at 0.05 / its own points"
            + (f"; the true rows called at some point: {r.true_detected:.3f}" if r.true_rows else "")
            + f"; {r.seconds:.0f} s")


@dataclass(frozen=True)
class PowerPoint:
    label: str
    seeds: int
    sd_seed: float
    effect: float
    predicted: float  # analysis.inference.power on the design's true variance
    observed: float  # share of simulated runs with bootstrap p < 0.05
    reps: int
    seed_var_ratio: float  # mean estimated seed_var / true seed part (1 = the split is unbiased)


# (label, effect, sd_seed, pretraining seeds): the default design (MLM effect +0.16 at 3 seeds, over
# a range of seed spreads), and a small effect whose seeds-to-resolve is predicted.
POWER_DESIGNS = [("default, +0.16", 0.16, sd, 3) for sd in (0.02, 0.04, 0.06, 0.08, 0.10)]
SEEDS_DESIGN = ("seeds to resolve +0.05", 0.05, 0.04)
POWER_EXAMPLES = 500


def _power_point(label, effect, sd_seed, seeds, reps, n_boot, rng, truth_reps) -> PowerPoint:
    seed_true, ex_true = true_pair_variance(effect, sd_seed, seeds, POWER_EXAMPLES, rng, truth_reps)
    se, df = design_se(seed_true, ex_true, seeds, seeds)
    detected, ratio = [], []
    for _ in range(reps):
        iv = multibootstrap([simulate_pair(effect, sd_seed, seeds, POWER_EXAMPLES, rng)], np.array([[-1.0, 1.0]]),
                            rng, n_boot=n_boot)[0]
        detected.append(iv.p_value < 0.05 and iv.estimate > 0)
        ratio.append(iv.seed_var / seed_true if seed_true > 0 else np.nan)  # unbiased split: ~1
    return PowerPoint(label, seeds, sd_seed, effect, float(power(effect, se, df)), float(np.mean(detected)), reps,
                      float(np.nanmean(ratio)))


def seeds_to_resolve(effect: float, sd_seed: float, rng: np.random.Generator, target: float = 0.8,
                     truth_reps: int = 3000) -> int:
    """Pretraining seeds predicted to detect ``effect`` with power ``target`` (from the 3-seed design's variance)."""
    seed_true, ex_true = true_pair_variance(effect, sd_seed, 3, POWER_EXAMPLES, rng, truth_reps)
    grid = np.arange(2, 400)
    se, df = design_se(seed_true, ex_true, 3, grid)
    return int(grid[np.argmax(power(effect, se, df) >= target)])


def run_power(reps: int, n_boot: int, rng: np.random.Generator, designs=POWER_DESIGNS, seeds_design=SEEDS_DESIGN,
              truth_reps: int = 3000) -> tuple[list[PowerPoint], float]:
    """Predicted power vs detection for each design, then for the seeds predicted to resolve ``seeds_design``."""
    start = time.perf_counter()
    points = [_power_point(*d, reps, n_boot, rng, truth_reps) for d in designs]
    if seeds_design is not None:
        label, effect, sd = seeds_design
        n = seeds_to_resolve(effect, sd, rng, truth_reps=truth_reps)
        points.append(_power_point(f"{label}: predicted {n} seeds", effect, sd, n, reps, n_boot, rng, truth_reps))
    return points, time.perf_counter() - start


def coverage_text(r: CoverageResult, level: float) -> str:
    lines = [f"coverage {r.coverage:.3f} of nominal {level:.2f} over {r.n} simulations (plain percentile: "
             f"{r.raw_coverage:.3f}); average row {r.average_coverage:.3f}; Holm family-wise error "
             f"{r.fwer_holm:.3f} (raw p: {r.fwer_raw:.3f}) over {r.n_null} null designs; {r.seconds:.1f} s",
             "family-wise error with each family adjusted within itself, as the report does: "
             + ", ".join(f"{f} {v:.3f}" for f, v in r.fwer_family.items())]
    lines += [f"  {name:48s} {cov:.3f}  (plain {r.raw_per_contrast[name]:.3f}, average row "
              f"{r.average_per_contrast[name]:.3f})" for name, cov in r.per_contrast.items()]
    return "\n".join(lines)


def power_text(points: list[PowerPoint]) -> str:
    return "\n".join(f"{p.label:36s} seeds {p.seeds:3d} sd_seed {p.sd_seed:.2f}: predicted power {p.predicted:.2f}, "
                     f"detected {p.observed:.2f} of {p.reps} (seed variance estimated x{p.seed_var_ratio:.2f})"
                     for p in points)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simulations", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pretrain-seeds", type=int, default=SimDesign.pretrain_seeds)
    ap.add_argument("--finetune-seeds", type=int, default=SimDesign.finetune_seeds)
    ap.add_argument("--examples", type=int, default=SimDesign.examples)
    ap.add_argument("--boot", type=int, default=SimDesign.n_boot)
    ap.add_argument("--level", type=float, default=SimDesign.level)
    ap.add_argument("--draws", choices=DRAWS, default=SimDesign.draws,
                    help="fine-tuning draws: nested in pretraining seeds (the design that runs), crossed (shared "
                         "by every run, not resampled) or independent (no draw effect)")
    ap.add_argument("--power", action="store_true", help="check predicted power against detection rates")
    ap.add_argument("--reps", type=int, default=200, help="simulated runs per power design")
    ap.add_argument("--curves", type=int, default=0, metavar="K",
                    help="check the rule across a curve's K points (analysis.curves) on null curves instead")
    ap.add_argument("--curve-rows", type=str, default="", metavar="EVERY,END",
                    help="with --curves: curves of a sweep's shape through analysis.curves.curve_rows, EVERY rows "
                         "read at every point (the probe's) and END at the end only (fine-tuning's), e.g. 10,4 with "
                         "--pretrain-seeds 6 for cpu-long")
    ap.add_argument("--true-rows", type=int, default=0,
                    help="with --curve-rows: this many every-point rows carry a true effect (a partial null)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if args.simulations < 1 or args.pretrain_seeds < 2 or args.examples < 6 or args.reps < 1:
        ap.error("--simulations and --reps must be >= 1, --pretrain-seeds >= 2 and --examples >= 6")
    rng = np.random.default_rng(args.seed)
    if args.power:
        points, seconds = run_power(args.reps, args.boot, rng)
        print(json.dumps({"points": [asdict(p) for p in points], "seconds": seconds}, indent=2) if args.json
              else power_text(points) + f"\n{seconds:.1f} s")
        return 0
    design = SimDesign(args.pretrain_seeds, args.finetune_seeds, args.examples, args.boot, args.level, args.draws)
    if args.curves:
        if args.curves < 2:
            ap.error(f"--curves {args.curves}: a curve has at least 2 points")
        if args.curve_rows:
            try:
                every, end = (int(x) for x in args.curve_rows.split(","))
            except ValueError:
                ap.error(f"--curve-rows {args.curve_rows!r}: give two counts, EVERY,END (e.g. 10,4)")
            if args.pretrain_seeds < MIN_RELIABLE_SEEDS:  # below it every interval is unreliable: nothing is called
                ap.error(f"--pretrain-seeds {args.pretrain_seeds} with --curve-rows: at least {MIN_RELIABLE_SEEDS}, "
                         "below which no interval is reliable and no call is made (a vacuous zero)")
            if every < 0 or end < 0 or every + end < 1 or not 0 <= args.true_rows <= every:
                ap.error(f"--curve-rows {args.curve_rows!r} --true-rows {args.true_rows}: counts >= 0, at least one "
                         "row, and --true-rows at most EVERY")
            shape = run_curve_shape(args.simulations, args.curves, every, end, args.pretrain_seeds, rng,
                                    true_rows=args.true_rows, examples=args.examples, n_boot=args.boot)
            print(json.dumps(asdict(shape), indent=2) if args.json else curve_shape_text(shape))
            return 0
        res = run_curves(args.simulations, args.curves, design, rng)
        print(json.dumps(asdict(res), indent=2) if args.json else curves_text(res, design.level))
        return 0
    result = run_coverage(args.simulations, design, rng)
    print(json.dumps(asdict(result), indent=2) if args.json else coverage_text(result, design.level))
    return 0


if __name__ == "__main__":
    sys.exit(main())
