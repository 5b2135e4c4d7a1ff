"""Coverage check of the multi-bootstrap on simulated ablations whose true effects are known.

    python -m analysis.validate --simulations 1000 --json            # ~1-2 min on 2 cores
    python -m analysis.validate --simulations 200 --pretrain-seeds 3 --json

Each simulation draws a fresh ablation: 4 variants (full, mlm_only, nsp_only, none) x P pretraining
seeds x F fine-tuning seeds x N test examples, each answer correct with probability

    sigmoid(mu_v + s_p + a_vp + c_vpf + d_n + g_vn)

with a seed effect shared by all variants (s: same initial weights and data order), a
variant-specific seed effect (a), fine-tuning noise (c), example difficulty (d) and a variant x
example interaction (g); the standard deviations are themselves drawn per simulation so the check
covers seed-dominated and example-dominated designs. The truth of a contrast is its population
value: each variant's expected accuracy over seeds *and* examples, E[sigmoid(N(mu_v, total var))],
by Gauss-Hermite quadrature. The simulated answers go through ``analysis.bootstrap.multibootstrap``,
the same function the report uses; coverage is the share of intervals holding the truth.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from analysis.bootstrap import Measurement, multibootstrap

SIM_VARIANTS = ("full", "mlm_only", "nsp_only", "none")
# Contrasts checked: every variant mean, the seed's contributions, every variant minus none, the
# 2x2 interaction. Rows over SIM_VARIANTS.
SIM_CONTRASTS: dict[str, tuple[float, ...]] = {
    "mean full": (1, 0, 0, 0),
    "mean none": (0, 0, 0, 1),
    "full - nsp_only": (1, 0, -1, 0),
    "full - mlm_only": (1, -1, 0, 0),
    "full - none": (1, 0, 0, -1),
    "mlm_only - none": (0, 1, 0, -1),
    "nsp_only - none": (0, 0, 1, -1),
    "interaction": (1, -1, -1, 1),
}


@dataclass(frozen=True)
class SimDesign:
    """The shape of each simulated ablation and the ranges its noise scales are drawn from."""

    pretrain_seeds: int = 5
    finetune_seeds: int = 3
    examples: int = 300
    n_boot: int = 1000
    level: float = 0.95


@dataclass(frozen=True)
class CoverageResult:
    coverage: float  # over all contrasts and simulations
    raw_coverage: float  # of the plain percentile interval, for reference
    n: int  # simulations
    per_contrast: dict[str, float]
    raw_per_contrast: dict[str, float]
    mean_width: dict[str, float]
    seconds: float
    design: dict


def _expected_accuracy(mu: np.ndarray, sd: float) -> np.ndarray:
    """E[sigmoid(X)], X ~ N(mu, sd^2), by Gauss-Hermite quadrature (exact to ~1e-10 here)."""
    x, w = np.polynomial.hermite_e.hermegauss(80)
    return (w / w.sum() * (1 / (1 + np.exp(-(mu[:, None] + sd * x[None, :]))))).sum(axis=1)


def simulate_ablation(design: SimDesign, rng: np.random.Generator) -> tuple[Measurement, np.ndarray]:
    """One simulated ablation: a Measurement (accuracy) and the true value of each SIM_CONTRASTS row."""
    v, p, f, n = len(SIM_VARIANTS), design.pretrain_seeds, design.finetune_seeds, design.examples
    mu = rng.normal(0.6, 0.4, size=v)
    sd_s, sd_a, sd_c = rng.uniform(0.0, 0.5), rng.uniform(0.05, 0.5), rng.uniform(0.0, 0.3)
    sd_d, sd_g = rng.uniform(0.5, 2.0), rng.uniform(0.0, 0.8)
    logit = (mu[:, None, None, None]
             + rng.normal(0, sd_s, (1, p, 1, 1)) + rng.normal(0, sd_a, (v, p, 1, 1))
             + rng.normal(0, sd_c, (v, p, f, 1))
             + rng.normal(0, sd_d, (1, 1, 1, n)) + rng.normal(0, sd_g, (v, 1, 1, n)))
    correct = (rng.random(logit.shape) < 1 / (1 + np.exp(-logit))).astype(np.float64)
    stats = np.stack([correct, np.ones_like(correct)], axis=-1)  # (V, P, F, N, 2)
    truth_means = _expected_accuracy(mu, float(np.sqrt(sd_s**2 + sd_a**2 + sd_c**2 + sd_d**2 + sd_g**2)))
    truth = np.array(list(SIM_CONTRASTS.values()), dtype=float) @ truth_means
    return Measurement("accuracy", stats, np.ones((v, p, f), dtype=bool)), truth


def run_coverage(n_sims: int, design: SimDesign, rng: np.random.Generator) -> CoverageResult:
    """Empirical coverage of the multi-bootstrap intervals over ``n_sims`` simulated ablations."""
    names = list(SIM_CONTRASTS)
    contrasts = np.array(list(SIM_CONTRASTS.values()), dtype=float)
    hit = np.zeros((n_sims, len(names)), dtype=bool)
    raw_hit = np.zeros_like(hit)
    width = np.zeros((n_sims, len(names)))
    start = time.perf_counter()
    for i in range(n_sims):
        measurement, truth = simulate_ablation(design, rng)
        intervals = multibootstrap([measurement], contrasts, rng, n_boot=design.n_boot, level=design.level)
        for j, (iv, t) in enumerate(zip(intervals, truth)):
            hit[i, j] = iv.lo <= t <= iv.hi
            raw_hit[i, j] = iv.raw_lo <= t <= iv.raw_hi
            width[i, j] = iv.hi - iv.lo
    return CoverageResult(
        coverage=float(hit.mean()), raw_coverage=float(raw_hit.mean()), n=n_sims,
        per_contrast={k: float(x) for k, x in zip(names, hit.mean(axis=0))},
        raw_per_contrast={k: float(x) for k, x in zip(names, raw_hit.mean(axis=0))},
        mean_width={k: float(x) for k, x in zip(names, width.mean(axis=0))},
        seconds=time.perf_counter() - start, design=asdict(design))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simulations", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pretrain-seeds", type=int, default=SimDesign.pretrain_seeds)
    ap.add_argument("--finetune-seeds", type=int, default=SimDesign.finetune_seeds)
    ap.add_argument("--examples", type=int, default=SimDesign.examples)
    ap.add_argument("--boot", type=int, default=SimDesign.n_boot)
    ap.add_argument("--level", type=float, default=SimDesign.level)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if args.simulations < 1 or args.pretrain_seeds < 2 or args.examples < 2:
        ap.error("--simulations must be >= 1, --pretrain-seeds >= 2 and --examples >= 2")
    design = SimDesign(args.pretrain_seeds, args.finetune_seeds, args.examples, args.boot, args.level)
    result = run_coverage(args.simulations, design, np.random.default_rng(args.seed))
    if args.json:
        print(json.dumps(asdict(result), indent=2))
    else:
        print(f"coverage {result.coverage:.3f} of nominal {design.level:.2f} over {result.n} simulations "
              f"(plain percentile: {result.raw_coverage:.3f}); {result.seconds:.1f} s")
        for name, cov in result.per_contrast.items():
            print(f"  {name:18s} {cov:.3f}  (plain {result.raw_per_contrast[name]:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
