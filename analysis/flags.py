"""Flags on variants (collapse, worse than none) and the notes they put on contrasts.

``runs.collapsed`` is authoritative; ``token_cosine`` and ``cls_cosine`` say why (the trainables side
sets ``collapsed`` when the mean pairwise token or [CLS] cosine exceeds the thresholds in
``trainables.schema``; here they only pick which of the two to name). "Worse than none" on a task is decided by the
interval of (variant - none), reliable and entirely below 0, never by the point estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.bootstrap import Interval
from analysis.contrasts import ContrastDef
from analysis.variants import NONE

from trainables.schema import COLLAPSE_CLS_COSINE as CLS_COSINE_COLLAPSE  # noqa: E402
from trainables.schema import COLLAPSE_TOKEN_COSINE as TOKEN_COSINE_COLLAPSE  # noqa: E402


@dataclass(frozen=True)
class Flag:
    variant: str
    task: str  # '' when it holds for every task (collapse)
    reason: str


def _why(row) -> str:
    """Which cosine made one run's collapse diagnostic fire."""
    tok, cls = (float(getattr(row, c, np.nan)) for c in ("token_cosine", "cls_cosine"))
    reasons = ([f"token cosine {tok:.3f} > {TOKEN_COSINE_COLLAPSE}"] if tok > TOKEN_COSINE_COLLAPSE else []) + (
        [f"[CLS] cosine {cls:.3f} > {CLS_COSINE_COLLAPSE}"] if cls > CLS_COSINE_COLLAPSE else [])
    if reasons:
        return " and ".join(reasons)
    if np.isfinite(tok) or np.isfinite(cls):
        return f"token cosine {tok:.3f}, [CLS] cosine {cls:.3f}"
    return "cosines not recorded"


def collapse_flags(done: pd.DataFrame, variants) -> tuple[set[str], list[Flag]]:
    """Variants whose collapse diagnostic fired on any measured seed, with one flag naming why."""
    fired = done[done["collapsed"]]
    collapsed = set(fired["variant"])
    flags = []
    for v in variants:
        if v in collapsed:
            rows = fired[fired["variant"] == v].sort_values("pretrain_seed")
            why = "; ".join(f"seed {int(r.pretrain_seed)}: {_why(r)}" for r in rows.itertuples())
            flags.append(Flag(v, "", f"collapse diagnostic fired ({why})"))
    return collapsed, flags


def worse_than_none(vs_none: list[tuple[str, dict[str, float], Interval]]) -> tuple[set, list[Flag]]:
    """(task, variant) whose reliable interval of (variant - none) lies entirely below 0, and their flags."""
    worse, flags = set(), []
    for task, weights, iv in vs_none:
        v = next(u for u, w in weights.items() if w > 0)
        if iv.reliable and np.isfinite(iv.hi) and iv.hi < 0:
            worse.add((task, v))
            flags.append(Flag(v, task, f"worse than none: {v} - none {iv.estimate:+.3f} [{iv.lo:+.3f}, {iv.hi:+.3f}]"))
    return worse, flags


def contrast_notes(d: ContrastDef, task: str, collapsed: set[str], worse: set[tuple[str, str]]) -> tuple[str, ...]:
    """One note per flagged variant of a contrast; subtracting one means not crediting the other objective."""
    notes = []
    for v, w in d.weights.items():
        if v == NONE or w == 0:
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
