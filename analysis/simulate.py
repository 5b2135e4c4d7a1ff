"""Simulated ablations whose true effects are known, for ``analysis.validate``.

Ablation (one task). Variants full, mlm_only, mlm_pairs, nsp_only, sop_only, mlm_sop, none x P
pretraining seeds x F fine-tuning seeds x N test examples; each answer is correct with probability

    sigmoid(mu_v + s_p + a_vp + c_vpf + e_D + h_vD + d_n + g_vn)

with a seed effect shared by all variants (s: same initial weights and data order), a variant-specific
seed effect (a), fine-tuning noise (c), example difficulty (d) and a variant x example interaction
(g); the noise scales are drawn per simulation so the checks cover seed- and example-dominated
designs. D is the fine-tuning *draw* (training subset, head init, data order) that run (v, p, f)
used: e_D is its effect on every variant, h_vD the variant x draw interaction, as large as the
variant-seed effect (sd of a). Where the draw comes from is ``SimDesign.draws``:

    nested       D = (p, f): derived from the pretraining seed and f (``trainables.finetune``'s design);
                 every variant of seed p shares it, other seeds draw anew
    crossed      D = f: one draw per fine-tuning seed for every run (the shared-draw alternative);
                 the multibootstrap does not resample it, so its interaction is never counted
    independent  no draw effect (e = h = 0): only independent fine-tuning noise c

The truth of a variant is its expected accuracy over seeds, draws *and* examples,
E[sigmoid(N(mu_v, total var))], by Gauss-Hermite quadrature; a null design gives every variant the
same mu, so every contrast is truly 0. The contrasts are the ones ``analysis.contrasts`` derives.

Average (three tasks). Tasks with their own effects (mu per task), different example counts (N, N/3,
2N) and seeds shared across tasks: a_vp splits into a part shared by the tasks and a task part;
tasks 1 and 2 are one source task evaluated twice (MNLI matched / mismatched: the same fine-tuned
model, so the same seed and fine-tuning noise, other examples) and weigh 1/4 each, task 0 1/2.

Power (two variants). Accuracy pi_vp = mu_v + a_vp, a ~ N(0, sd_seed^2) per variant and seed, and
example n correct when u_n + e_vpn < pi_vp (u ~ U(0, 1) shared: paired examples; e ~ N(0, 0.1^2)):
the true difference is exactly mu_1 - mu_0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from analysis.bootstrap import Measurement
from analysis.contrasts import derive_contrasts, pair_level_objectives
from analysis.variants import VariantSpec

SIM_OBJECTIVES = ("mlm", "nsp", "sop")
_RAW = {"full": ((1, 1, 0), "nsp_pairs"), "mlm_only": ((1, 0, 0), "single"), "mlm_pairs": ((1, 0, 0), "nsp_pairs"),
        "nsp_only": ((0, 1, 0), "nsp_pairs"), "sop_only": ((0, 0, 1), "sop_pairs"),
        "mlm_sop": ((1, 0, 1), "sop_pairs"), "none": ((0, 0, 0), "")}
SIM_SPECS = {n: VariantSpec(n, tuple(float(x) for x in w), f, 0.15) for n, (w, f) in _RAW.items()}
SIM_VARIANTS = tuple(SIM_SPECS)
AVERAGE_WEIGHTS = (0.5, 0.25, 0.25)
DRAWS = ("nested", "crossed", "independent")


@dataclass(frozen=True)
class SimDesign:
    """The shape of each simulated ablation."""

    pretrain_seeds: int = 5
    finetune_seeds: int = 3
    examples: int = 300
    n_boot: int = 1000
    level: float = 0.95
    draws: str = "nested"  # where the fine-tuning draw comes from: nested | crossed | independent (docstring)

    def __post_init__(self):
        if self.draws not in DRAWS:
            raise ValueError(f"draws={self.draws!r} is not valid; allowed: {', '.join(DRAWS)}")


class Noise(NamedTuple):
    seed: float  # s: shared by all variants
    variant_seed: float  # a
    finetune: float  # c
    example: float  # d
    variant_example: float  # g
    draw: float = 0.0  # e: the fine-tuning draw's effect on every variant
    variant_draw: float = 0.0  # h: variant x draw

    @property
    def total(self) -> float:
        return float(np.sqrt(sum(x ** 2 for x in self)))


def sim_contrasts() -> tuple[list[str], np.ndarray]:
    """Names and (C, V) weights: the means of full and none, then every contrast analysis derives."""
    defs, _ = derive_contrasts(SIM_SPECS, SIM_OBJECTIVES, pair_level_objectives(SIM_SPECS, SIM_OBJECTIVES))
    rows = [("mean full", {"full": 1.0}), ("mean none", {"none": 1.0})] + [(d.name, d.weights) for d in defs]
    return [n for n, _ in rows], np.array([[w.get(v, 0.0) for v in SIM_VARIANTS] for _, w in rows])


def sim_families() -> list[str]:
    """The Holm family of each ``sim_contrasts`` contrast row (the means excluded): 'primary' or 'secondary', as
    the report adjusts them (``analysis.contrasts.holm_family``)."""
    from analysis.contrasts import holm_family

    defs, _ = derive_contrasts(SIM_SPECS, SIM_OBJECTIVES, pair_level_objectives(SIM_SPECS, SIM_OBJECTIVES))
    return [holm_family(d) for d in defs]


def expected_accuracy(mu: np.ndarray, sd: float) -> np.ndarray:
    """E[sigmoid(X)], X ~ N(mu, sd^2), by Gauss-Hermite quadrature (exact to ~1e-10 here)."""
    x, w = np.polynomial.hermite_e.hermegauss(80)
    return (w / w.sum() * (1 / (1 + np.exp(-(mu[:, None] + sd * x[None, :]))))).sum(axis=1)


def draw_noise(rng: np.random.Generator, draws: str = "independent") -> Noise:
    """Noise scales of one simulation; with a draw design, a draw effect and a variant x draw interaction
    as large as the variant-seed effect (the part of the seed effect contrasts see)."""
    noise = Noise(rng.uniform(0.0, 0.5), rng.uniform(0.05, 0.5), rng.uniform(0.0, 0.3), rng.uniform(0.5, 2.0),
                  rng.uniform(0.0, 0.8))
    if draws == "independent":
        return noise
    return noise._replace(draw=rng.uniform(0.0, 0.5), variant_draw=noise.variant_seed)


def draw_effects(noise: Noise, v: int, p: int, f: int, draws: str, rng: np.random.Generator) -> np.ndarray:
    """e_D + h_vD on the (V, P, F, 1) grid: one draw per (p, f) when nested, per f when crossed."""
    if draws == "independent":
        return np.zeros((v, p, f, 1))
    cells = p if draws == "nested" else 1  # crossed: the same draw f for every pretraining seed
    e = rng.normal(0, noise.draw, (1, cells, f, 1))
    h = rng.normal(0, noise.variant_draw, (v, cells, f, 1))
    return np.broadcast_to(e + h, (v, p, f, 1))


def _answers(logit_seed: np.ndarray, mu: np.ndarray, noise: Noise, n: int, rng) -> Measurement:
    """Correct answers for seed-level logits (V, P, F, 1) plus example effects on n examples."""
    v = len(mu)
    logit = (mu[:, None, None, None] + logit_seed + rng.normal(0, noise.example, (1, 1, 1, n))
             + rng.normal(0, noise.variant_example, (v, 1, 1, n)))
    correct = (rng.random(logit.shape) < 1 / (1 + np.exp(-logit))).astype(np.float64)
    return Measurement("accuracy", np.stack([correct, np.ones_like(correct)], axis=-1),
                       np.ones(correct.shape[:3], dtype=bool))


def simulate_ablation(design: SimDesign, rng: np.random.Generator, null: bool = False):
    """One simulated task: a Measurement and the true value of each ``sim_contrasts`` row."""
    v, p, f = len(SIM_VARIANTS), design.pretrain_seeds, design.finetune_seeds
    mu = np.full(v, rng.normal(0.6, 0.4)) if null else rng.normal(0.6, 0.4, size=v)
    noise = draw_noise(rng, design.draws)
    seed = (rng.normal(0, noise.seed, (1, p, 1, 1)) + rng.normal(0, noise.variant_seed, (v, p, 1, 1))
            + rng.normal(0, noise.finetune, (v, p, f, 1)) + draw_effects(noise, v, p, f, design.draws, rng))
    m = _answers(seed, mu, noise, design.examples, rng)
    return m, sim_contrasts()[1] @ expected_accuracy(mu, noise.total)


def simulate_average(design: SimDesign, rng: np.random.Generator):
    """Three tasks sharing seeds (tasks 1, 2 one source): Measurements, weights, true contrast values."""
    v, p, f, n = len(SIM_VARIANTS), design.pretrain_seeds, design.finetune_seeds, design.examples
    noise = draw_noise(rng, design.draws)
    shared = rng.uniform(0.0, 1.0)  # share of the variant-seed effect common to tasks
    base = rng.normal(0.6, 0.4, size=v)
    common = rng.normal(0, noise.seed, (1, p, 1, 1)) + rng.normal(0, noise.variant_seed * np.sqrt(shared), (v, p, 1, 1))
    own = [rng.normal(0, noise.variant_seed * np.sqrt(1 - shared), (v, p, 1, 1))
           + rng.normal(0, noise.finetune, (v, p, f, 1)) + draw_effects(noise, v, p, f, design.draws, rng)
           for _ in range(2)]  # task 0; the source of tasks 1, 2 (a draw is per task: its own subset)
    mus = [base + rng.normal(0, 0.3, v) for _ in range(2)]
    mus.append(mus[1] + rng.normal(0, 0.1, v))  # mismatched: near matched
    sizes, which = (n, max(n // 3, 2), 2 * n), (0, 1, 1)
    ms = [_answers(common + own[w], mu, noise, size, rng) for mu, size, w in zip(mus, sizes, which)]
    truth = sum(wk * expected_accuracy(mu, noise.total) for wk, mu in zip(AVERAGE_WEIGHTS, mus))
    return ms, AVERAGE_WEIGHTS, sim_contrasts()[1] @ truth


def simulate_pair(effect: float, sd_seed: float, seeds: int, examples: int, rng: np.random.Generator,
                  base: float = 0.5) -> Measurement:
    """The power design: variant 1 scores ``base + effect`` on average, variant 0 ``base``."""
    pi = np.clip(np.array([[base], [base + effect]]) + rng.normal(0, sd_seed, (2, seeds)), 0.02, 0.98)
    u = rng.random(examples)
    correct = (u[None, None, :] + rng.normal(0, 0.1, (2, seeds, examples)) < pi[:, :, None]).astype(np.float64)
    correct = correct[:, :, None, :]  # one fine-tuning seed
    return Measurement("accuracy", np.stack([correct, np.ones_like(correct)], axis=-1),
                       np.ones((2, seeds, 1), dtype=bool))


def _pair_variance(effect, sd_seed, seeds, examples, rng, reps) -> float:
    est = np.empty(reps)
    for i in range(reps):
        acc = simulate_pair(effect, sd_seed, seeds, examples, rng).stats[..., 0].mean(axis=(2, 3))  # (2, P)
        est[i] = (acc[1] - acc[0]).mean()
    return float(est.var())


def true_pair_variance(effect: float, sd_seed: float, seeds: int, examples: int, rng: np.random.Generator,
                       reps: int = 3000) -> tuple[float, float]:
    """(part scaling as 1/P, part that does not) of the variance of the estimated difference at ``seeds``.

    By Monte Carlo at P and 4P seeds, solving V(P) = A/P + B (the seed x example interaction is in A)."""
    v1, v4 = (_pair_variance(effect, sd_seed, k * seeds, examples, rng, reps) for k in (1, 4))
    a = max((v1 - v4) * 4 / 3, 0.0)  # A/P
    return a, max(v1 - a, 0.0)
