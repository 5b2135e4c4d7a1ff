"""The few sentences that open the report: what the run can say, what it cannot, and why.

    headline(contributions) -> [sentence, ...]
    headline(contributions, check) -> the same, each quoted contrast tagged with what the instrument
                                       check (``analysis.known_answer``) says of it

A contrast is *resolved* when its interval is reliable, excludes 0 and its Holm-adjusted p-value within
its family (the primary question or the rest, ``analysis.contrasts.PRIMARY``) is below 0.05 (``analysis.inference.called``, the family
rule of ``analysis.inference.family_calls``); ``resolved`` is the one rule the tables and the CSV use
too. Power is stated at that level: the minimal detectable effect of Holm's first step (alpha/m).
"""

from __future__ import annotations

import numpy as np

from analysis.contributions import ContrastEstimate, Contributions
from analysis.inference import ALPHA, EQUIVALENCE_MARGIN, MAX_SEEDS, POWER, called, equivalent


def resolved(e: ContrastEstimate) -> bool:
    """The one verdict rule (``analysis.inference.called``) on the family-adjusted p of ``e``."""
    return called(e.interval, e.p_adjusted, ALPHA)


def tie(e: ContrastEstimate) -> bool:
    """Shown equivalent to 0 within the margin fixed before the run (TOST, Holm within the family)."""
    return not resolved(e) and equivalent(e.interval, getattr(e, "p_equivalence", float("nan")), ALPHA)


def verdict(e: ContrastEstimate) -> str:
    """'resolved', 'a tie within +-0.02 (TOST)', or 'not resolved': an open cell is never called a tie."""
    if resolved(e):
        return "resolved"
    return f"a tie within +-{EQUIVALENCE_MARGIN:g} (TOST)" if tie(e) else "not resolved"


def family_size(c: Contributions, family: str | None = None) -> int:
    """m of a Holm family (``primary`` | ``secondary``; None: both together): its contrast cells with a p-value
    (every task row and average)."""
    return sum(bool(np.isfinite(e.p_adjusted)) for e in c.contrasts if family in (None, e.holm_family))


def families(c: Contributions) -> str:
    """How the cells were adjusted, in one phrase."""
    prim, sec = family_size(c, "primary"), family_size(c, "secondary")
    if not prim:
        return f"Holm's adjustment over all {sec} contrast cells of every task row (one family)"
    base = family_size(c, "baseline")
    return (f"Holm's adjustment within each family (the primary question, MLM's effect over none and NSP's loss "
            f"effect: {prim} cells; the other contrasts: {sec} cells"
            + (f"; the embeddings probe's, a baseline reading: {base} cells" if base else "") + ")")


def _primary(c: Contributions, check=None) -> str:
    """The answer to the question the tool exists for: each primary contrast on each average row (or on every
    task row when there is no average), resolved or not, adjusted within its own family."""
    prim = [e for e in c.contrasts if e.holm_family == "primary" and np.isfinite(e.interval.estimate)]
    if not prim:
        return ""
    shown = [e for e in prim if e.task.startswith("average")] or prim
    tag = check if callable(check) else _first_mention(check)
    items = "; ".join(f"{e.contrast.name} on {e.task} {e.interval.estimate:+.3f} [{e.interval.lo:+.3f}, "
                      f"{e.interval.hi:+.3f}] {verdict(e)}{tag(e)}" for e in shown)
    pos = sum(resolved(e) and e.interval.estimate > 0 for e in prim)
    neg = sum(resolved(e) and e.interval.estimate < 0 for e in prim)
    return (f"The primary question (MLM's effect over none, NSP's loss effect; declared before the run): {items}. "
            f"Over all {len(prim)} primary cells (every task row): {pos} resolved positive, {neg} negative.")


# Held-out MLM accuracy, three stages on the built-in corpus. Always predicting the commonest token scores 4.4%;
# an encoder just above that has learned word frequencies and no reading finds anything there. Past UNIGRAM_STAGE
# the probe already reads POS better than random weights (cpu-long's first snapshot: docs/presets.md), so the
# encoder holds more than word frequencies. Past TRAINED_STAGE every task the tool has learned shows MLM's effect
# (docs/results.md). A rule file may set its own floor (analysis.rules).
UNIGRAM_STAGE = 0.06
TRAINED_STAGE = 0.15


def _stage(c: Contributions) -> str:
    """Says first when no encoder left the word-frequency stage: no reading can credit an objective there."""
    if not c.mlm_acc or max(c.mlm_acc.values()) >= UNIGRAM_STAGE:
        return ""
    accs = ", ".join(f"{v} {a:.1%}" for v, a in c.mlm_acc.items())
    longer = ("on two cores: the default or --preset cpu-long, which train each encoder longer"
              if c.preset in ("", "smoke") else "--set optim.max_steps=... on a larger budget")
    return (f"The encoders learned little beyond word frequencies (held-out MLM accuracy {accs}; below "
            f"{UNIGRAM_STAGE:.0%}), so at this budget no objective is expected to show an effect on real "
            f"tasks; a run that trains each encoder longer can ({longer}).")


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
    n_tasks = len({t.split(" (")[0] for t in c.tasks if not t.startswith("average")})
    rows = (f"{count(n_tasks, 'task')}" + (f" ({len(c.tasks)} rows with each reading and the averages)"
                                             if len(c.tasks) != n_tasks else ""))
    text = (f"This run pretrained {count(n_var, 'variant')}{each} at {equal}, with "
            f"{count(b.pretrain_seeds, 'pretraining seed')} x {count(b.finetune_seeds, 'fine-tuning seed')}, and "
            f"compared {'them' if n_var > 1 else 'it'} with no pretraining (none) on {rows}.")
    spread = compute_spread(b.flops)
    if spread:
        text += f" Their compute differs ({spread}): see gains per unit of compute."
    return text


def count(n: int, noun: str) -> str:
    """'1 variant', '3 variants'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def compute_spread(flops: dict[str, float], tolerance: float = 0.05) -> str:
    """'electra 1.31x, mlm_only 0.99x full's FLOPs' when the variants' FLOPs differ by more than ``tolerance``."""
    ref = flops.get("full") or (max(flops.values()) if flops else 0.0)
    if not ref or not flops or (max(flops.values()) - min(flops.values())) <= tolerance * ref:
        return ""
    name = "full's" if "full" in flops else "the largest"
    differ = [f"{v} {f / ref:.2f}x" for v, f in flops.items() if v != "full" and abs(f / ref - 1) > tolerance]
    return ", ".join(differ) + f" {name} training FLOPs"


def vouched(check: dict | None, e: ContrastEstimate) -> str:
    """' (instrument check: recovered on planted_lexical (probe))' when the check ran and measured a planted
    effect with ``e``'s contrast (the planted task named: the check is evidence that the pipeline recovers this
    contrast's effect where one exists, not a check of ``e``'s own task); otherwise what it says (not
    recovered, not checkable at this size) or that it has no such control."""
    if check is None:
        return ""
    from analysis.known_answer import planted_tasks_for, verdict_for

    weights = dict(e.contrast.weights)
    verdict = verdict_for(check, weights)
    if not verdict:
        return " (no planted control for this contrast)"
    tasks = planted_tasks_for(check, weights)
    where = f" on {', '.join(tasks)}" if tasks else ""  # the planted tasks' names: planted_lexical (probe), ...
    return f" (instrument check: {verdict}{where})"


def _first_mention(check: dict | None):
    """``vouched`` for the first sentence that quotes a contrast, '' after it: the check's verdict is about the
    contrast, not the task row, so it is said once per contrast."""
    seen: set[str] = set()

    def tag(e: ContrastEstimate) -> str:
        if e.contrast.name in seen:
            return ""
        seen.add(e.contrast.name)
        return vouched(check, e)
    return tag


def _said(c: Contributions, done: list[ContrastEstimate], check=None) -> str:
    m = len(c.contrasts)
    family = families(c)
    if not done:
        return (f"None of the {m} contrasts resolves after {family}: the run cannot say whether any objective "
                "helps or hurts.")
    top = sorted(done, key=lambda e: -abs(e.interval.estimate))[:3]
    tag = check if callable(check) else _first_mention(check)
    items = "; ".join(f"{e.contrast.name} on {e.task} {e.interval.estimate:+.3f} "
                      f"[{e.interval.lo:+.3f}, {e.interval.hi:+.3f}]{tag(e)}" for e in top)
    return f"After {family}, {len(done)} of {m} contrasts are resolved, largest: {items}."


def _median(values) -> float:
    values = [v for v in values if np.isfinite(v)]
    return float(np.median(values)) if values else float("nan")


# Accuracy, F1 and exact match span [0, 1] (trainables.metrics.METRIC_RANGES); MCC spans [-1, 1], where a difference
# of 1 is still far beyond any published objective ablation. A detectable effect this large is said in words.
METRIC_SPAN = 1.0


def effect_text(x: float) -> str:
    """A detectable effect in words when it is 1 or more (no [0, 1] metric can show it), else the number."""
    return ">= 1 (beyond a [0, 1] metric's range)" if x >= METRIC_SPAN else f"{x:.3f}"


def _power_sentence(c: Contributions, done: list[ContrastEstimate]) -> str:
    """The MDE at the Holm level now, and the prospective one with more seeds (medians over contrasts)."""
    ps = [e.power for e in c.contrasts if e.power is not None]
    now = _median(p.mde for p in ps)
    if not np.isfinite(now):
        return ""
    m = max((p.m for p in ps), default=1)
    level = f"median minimal detectable effect at Holm's first step, alpha {ALPHA}/{m}, power {POWER:.0%}"
    first = ("The other " + f"{len(c.contrasts) - len(done)} are inconclusive, not findings: at this design"
             if done else "At this design")
    if now >= METRIC_SPAN:
        text = (f"{first} no difference a metric can show would be detected reliably ({level}: "
                f"{effect_text(now)}): the seeds disagree too much.")
    else:
        text = f"{first} a difference must be about {now:.3f} ({level}) to be detected reliably."
    seeds = c.budget.pretrain_seeds if c.budget else 0
    ahead = [(n, _median(dict(p.mde_by_seeds).get(n, np.nan) for p in ps))
             for n in sorted({n for p in ps for n, _ in p.mde_by_seeds}) if n > seeds]
    ahead = [f"{n} seeds ~{x:.3f}" for n, x in ahead if np.isfinite(x) and x < METRIC_SPAN]
    if ahead:
        text += f" Prospectively, with the same family: {', '.join(ahead)}."
    return text


def _not_said(c: Contributions, done: list[ContrastEstimate]) -> list[str]:
    out = []
    if len(done) < len(c.contrasts):
        out += [s for s in (_power_sentence(c, done),) if s]
    if any(not e.interval.reliable for e in c.contrasts):
        seeds = c.budget.pretrain_seeds if c.budget else 0
        out.append(f"Intervals from fewer than 3 pretraining seeds are not reliable; {count(seeds, 'seed')} ran."
                   if seeds < 3 else "Cells marked unreliable have fewer than 3 pretraining seeds left (the others' "
                   "fine-tunings predicted one label and were left out): their intervals are not reliable.")
    if c.not_learned:
        one = len(c.not_learned) == 1
        out.append(f"{count(len(c.not_learned), 'task')} {'was' if one else 'were'} not learned at this budget "
                   f"({', '.join(c.not_learned)}): no variant, none included, beat the chance baseline on dev, so "
                   f"{'it says' if one else 'they say'} nothing about the objectives.")
    return out


def _what_would(c: Contributions, check=None) -> str:
    open_ = [e for e in c.contrasts if not resolved(e) and e.power is not None and e.contrast.family != "vs_none"]
    if not open_:
        return ""
    e = max(open_, key=lambda e: abs(e.interval.estimate))
    p = e.power
    tag = check if callable(check) else _first_mention(check)
    if p.seeds_needed is not None:
        lo, hi = p.seeds_range
        span = f"{lo if lo is not None else '?'}-{hi if hi is not None else f'>{MAX_SEEDS}'}"
        return (f"Resolving the largest open difference, {e.contrast.name} on {e.task} "
                f"({e.interval.estimate:+.3f}){tag(e)}, would take ~{p.seeds_needed} pretraining seeds at the Holm level "
                f"(post hoc, taking the estimate as the truth; {span} within the seed variance's uncertainty).")
    return (f"The largest open difference, {e.contrast.name} on {e.task} ({e.interval.estimate:+.3f})"
            f"{tag(e)}: {p.verdict}.")


def headline(c: Contributions, check: dict | None = None) -> list[str]:
    """Quotable sentences: the budget, what was resolved, what was not and why, what would resolve it; with the
    instrument check's verdicts (``check``), whether each quoted contrast has a planted control that passed."""
    if not c.tasks:
        return ["No completed measure runs with evaluations: this export can say nothing yet."]
    done = [e for e in c.contrasts if resolved(e)]
    collapsed = sorted({f.variant for f in c.flags if not f.task})
    tag = _first_mention(check)  # the check's verdict once per contrast, at its first quote
    out = [s for s in (_budget(c), _stage(c), _primary(c, tag), _said(c, done, tag)) if s] + _not_said(c, done)
    if collapsed:
        out.append(f"Collapsed encoders ({', '.join(collapsed)}): contrasts against them are not credited to the "
                   "other objective.")
    # at the word-frequency stage more seeds cannot resolve anything: the stage sentence already says what would
    return out + [s for s in (_what_would(c, tag),) if s and not _stage(c)]
