"""The few sentences that open the report: what the run can say, what it cannot, and why.

    headline(contributions) -> [sentence, ...]

A contrast is *resolved* when its interval is reliable, excludes 0 and its Holm-adjusted p-value
(within its task row) is below 0.05; ``resolved`` is the one rule the tables and the CSV use too.
"""

from __future__ import annotations

import numpy as np

from analysis.contributions import ContrastEstimate, Contributions

ALPHA = 0.05


def resolved(e: ContrastEstimate) -> bool:
    iv = e.interval
    return bool(iv.reliable and iv.excludes_zero and np.isfinite(e.p_adjusted) and e.p_adjusted < ALPHA)


def _budget(c: Contributions) -> str:
    b = c.budget
    if b is None:
        return ""
    cost = []
    if np.isfinite(b.epochs):
        cost.append(f"{b.epochs:.2g} epochs over the corpus")
    if np.isfinite(b.tokens):
        cost.append(f"{b.tokens / 1e6:.3g} M tokens")
    each = f" for {' ('.join(cost)}{')' if len(cost) > 1 else ''} each" if cost else ""
    n_var = sum(v != "none" for v in c.variants)
    equal = {"steps": "equal steps", "tokens": "equal tokens", "flops": "equal training FLOPs"}.get(b.kind, b.kind)
    text = (f"This run pretrained {n_var} variant(s){each} at {equal}, with {b.pretrain_seeds} pretraining seed(s) x "
            f"{b.finetune_seeds} fine-tuning seed(s), and compared them with no pretraining (none) on "
            f"{len(c.tasks)} task row(s).")
    spread = compute_spread(b.flops)
    if spread:
        text += f" Their compute differs ({spread}): see gains per unit of compute."
    return text


def compute_spread(flops: dict[str, float], tolerance: float = 0.05) -> str:
    """'electra 1.31x, mlm_only 0.99x full's FLOPs' when the variants' FLOPs differ by more than ``tolerance``."""
    ref = flops.get("full") or (max(flops.values()) if flops else 0.0)
    if not ref or not flops or (max(flops.values()) - min(flops.values())) <= tolerance * ref:
        return ""
    name = "full's" if "full" in flops else "the largest"
    differ = [f"{v} {f / ref:.2f}x" for v, f in flops.items() if v != "full" and abs(f / ref - 1) > tolerance]
    return ", ".join(differ) + f" {name} training FLOPs"


def _said(c: Contributions, done: list[ContrastEstimate]) -> str:
    m = len(c.contrasts)
    if not done:
        return (f"After Holm's adjustment within each task, none of the {m} contrasts is resolved: the run cannot "
                "say whether any objective helps or hurts.")
    top = sorted(done, key=lambda e: -abs(e.interval.estimate))[:3]
    items = "; ".join(f"{e.contrast.name} on {e.task} {e.interval.estimate:+.3f} "
                      f"[{e.interval.lo:+.3f}, {e.interval.hi:+.3f}]" for e in top)
    return f"After Holm's adjustment within each task, {len(done)} of {m} contrasts are resolved, largest: {items}."


def _not_said(c: Contributions, done: list[ContrastEstimate]) -> list[str]:
    out = []
    open_ = [e for e in c.contrasts if not resolved(e)]
    mdes = [e.power.mde for e in c.contrasts if e.power is not None and np.isfinite(e.power.mde)]
    if open_ and mdes:
        out.append(f"The other {len(open_)} are inconclusive, not findings: at this design a difference must be "
                   f"about {np.median(mdes):.3f} (median minimal detectable effect, alpha 0.05, power 0.8) to be "
                   "detected reliably.")
    if any(not e.interval.reliable for e in c.contrasts):
        out.append(f"Intervals from fewer than 3 pretraining seeds are not reliable; "
                   f"{c.budget.pretrain_seeds if c.budget else 'too few'} seed(s) ran.")
    if c.not_learned:
        out.append(f"{len(c.not_learned)} task(s) were not learned at this budget ({', '.join(c.not_learned)}): no "
                   "variant, none included, beat the majority baseline, so they say nothing about the objectives.")
    return out


def _what_would(c: Contributions) -> str:
    open_ = [e for e in c.contrasts if not resolved(e) and e.power is not None and e.contrast.family != "vs_none"]
    if not open_:
        return ""
    e = max(open_, key=lambda e: abs(e.interval.estimate))
    p = e.power
    if p.seeds_needed is not None:
        return (f"Resolving the largest open difference, {e.contrast.name} on {e.task} "
                f"({e.interval.estimate:+.3f}), would take ~{p.seeds_needed} pretraining seeds.")
    return f"The largest open difference, {e.contrast.name} on {e.task} ({e.interval.estimate:+.3f}): {p.verdict}."


def headline(c: Contributions) -> list[str]:
    """Quotable sentences: the budget, what was resolved, what was not and why, what would resolve it."""
    if not c.tasks:
        return ["No completed measure runs with evaluations: this export can say nothing yet."]
    done = [e for e in c.contrasts if resolved(e)]
    collapsed = sorted({f.variant for f in c.flags if not f.task})
    out = [s for s in (_budget(c), _said(c, done)) if s] + _not_said(c, done)
    if collapsed:
        out.append(f"Collapsed encoders ({', '.join(collapsed)}): contrasts against them are not credited to the "
                   "other objective.")
    return out + [s for s in (_what_would(c),) if s]
