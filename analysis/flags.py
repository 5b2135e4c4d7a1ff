"""Flags on variants (collapse, worse than none) and the notes they put on contrasts.

Collapse is decided here, relative to ``none``'s runs in the same export; ``runs.collapsed`` is only the
raw diagnostic of the trainables side (token cosine > ``COLLAPSE_TOKEN_COSINE`` or [CLS] cosine >
``COLLAPSE_CLS_COSINE``, absolute thresholds). At the small CPU scale a random 2-layer encoder's [CLS]
vectors are already that alike, so the raw diagnostic fires on every encoder, ``none`` included, and says
nothing. A collapsed encoder shows two things at once: every vector at a cosine of 1 *and* fine-tuning
stuck at the majority class. So a pretrained variant's run is flagged collapsed when both

    geometry   its token or [CLS] cosine is within ``COLLAPSE_DISTANCE`` (1e-3) of 1 and closer to 1
               than none's of the same pretraining seed, or its distance from 1 is at most
               ``COLLAPSE_VS_NONE`` (a tenth) of none's (none's median over seeds when that seed's
               none is missing; the absolute clause alone when none was not measured)
    symptom    fine-tuning predicts one label for at least ``COLLAPSE_MAJORITY_SHARE`` (95%) of the test
               examples on at least half of its fine-tunings of label tasks (decided on the geometry
               alone, and said so, when the run has no label predictions)

hold; a variant is flagged when any of its measured seeds is. ``none`` is the reference, never flagged.
"Worse than none" on a task is decided by the interval of (variant - none), reliable and entirely
below 0, never by the point estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.bootstrap import Interval
from analysis.contrasts import ContrastDef
from analysis.variants import NONE

from trainables.schema import COLLAPSE_CLS_COSINE as CLS_COSINE_COLLAPSE  # noqa: E402
from trainables.schema import COLLAPSE_DISTANCE, COLLAPSE_MAJORITY_SHARE, COLLAPSE_VS_NONE  # noqa: E402
from trainables.schema import COLLAPSE_TOKEN_COSINE as TOKEN_COSINE_COLLAPSE  # noqa: E402

COSINES = (("token_cosine", "token"), ("cls_cosine", "[CLS]"))


@dataclass(frozen=True)
class Flag:
    variant: str
    task: str  # '' when it holds for every task (collapse)
    reason: str


def _cos(row, column: str) -> float:
    value = getattr(row, column, np.nan)
    return float(value) if value is not None and np.isfinite(float(value)) else float("nan")


def _none_cosines(done: pd.DataFrame) -> tuple[dict[int, dict[str, float]], dict[str, float]]:
    """none's cosines per pretraining seed, and their medians (for a seed without a none run)."""
    ref = done[done["variant"] == NONE]
    per_seed = {int(r.pretrain_seed): {c: _cos(r, c) for c, _ in COSINES} for r in ref.itertuples()}
    median = {c: float(np.nanmedian(ref[c].astype(float))) if c in ref.columns and ref[c].notna().any()
              else float("nan") for c, _ in COSINES}
    return per_seed, median


def _geometry(row, ref: dict[str, float]) -> str:
    """Why this run's vectors are collapsed beyond none's ('' if they are not)."""
    out = []
    for column, name in COSINES:
        cos, base = _cos(row, column), ref.get(column, float("nan"))
        if not np.isfinite(cos):
            continue
        d, d_none = 1.0 - cos, 1.0 - base
        near = d <= COLLAPSE_DISTANCE and (not np.isfinite(d_none) or d < d_none)
        beyond = np.isfinite(d_none) and d_none > 0 and d <= COLLAPSE_VS_NONE * d_none
        if near or beyond:
            out.append(f"{name} cosine {cos:.4f}" + (f" vs none's {base:.4f}" if np.isfinite(base) else ""))
    return " and ".join(out)


def _label_task(predictions: pd.Series) -> bool:
    """A task whose predictions are labels (not JSON tag lists or answers)."""
    text = predictions.astype(str)
    return not text.str.startswith(("[", '"')).any()


def did_not_learn(predictions: pd.DataFrame, evals: pd.DataFrame | None = None) -> pd.DataFrame:
    """The fine-tunings (run_id, task, finetune_seed) of label tasks that predict one label for
    >= COLLAPSE_MAJORITY_SHARE of examples: they learned nothing a contrast could credit to an objective (a
    short fine-tuning of a pretrained encoder can sit on the majority class while none's learns), so they
    are left out of the estimates (``analysis.contributions``, which puts an intention-to-treat estimate
    beside them) and counted. Probes are not judged here.

    Decided on dev (``evals.dev_majority_share``, the chosen rate's), as the rate and "learned" are: deciding
    on the test predictions would select on the values the contrasts use. Exports that did not record it
    fall back to the test predictions (``on_test``)."""
    cols = ["run_id", "task", "finetune_seed"]
    if evals is not None and "dev_majority_share" in evals.columns and len(evals):
        rows = evals[(evals["mode"] == "finetune") & evals["is_primary"] & evals.get("selected", True)]
        if rows["dev_majority_share"].notna().any():
            stuck = rows[rows["dev_majority_share"] >= COLLAPSE_MAJORITY_SHARE].drop_duplicates(cols)
            return pd.DataFrame({**{c: stuck[c].to_numpy() for c in cols},
                                 "share": stuck["dev_majority_share"].astype(float).to_numpy(),
                                 "label": [""] * len(stuck)}, columns=cols + ["share", "label"])
    return on_test(predictions)


def on_test(predictions: pd.DataFrame) -> pd.DataFrame:
    """``did_not_learn`` from the test predictions: for exports that did not record the dev share."""
    cols = ["run_id", "task", "finetune_seed"]
    sel = predictions[predictions["mode"] == "finetune"] if len(predictions) else predictions
    if sel.empty:
        return pd.DataFrame(columns=cols + ["share", "label"])
    out = []
    for key, grp in sel.groupby(cols, sort=True):
        if not _label_task(grp["prediction"]):
            continue
        counts = grp["prediction"].value_counts(normalize=True)
        if counts.iloc[0] >= COLLAPSE_MAJORITY_SHARE:
            out.append((*key, float(counts.iloc[0]), str(counts.index[0])))
    return pd.DataFrame(out, columns=cols + ["share", "label"])


def one_label_fine_tunings(predictions: pd.DataFrame, run_id: str) -> tuple[int, int]:
    """(fine-tunings of label tasks predicting one label for >= COLLAPSE_MAJORITY_SHARE of examples, all of them)."""
    sel = predictions[(predictions["run_id"] == run_id) & (predictions["mode"] == "finetune")]
    stuck = total = 0
    for _, grp in sel.groupby(["task", "finetune_seed"]):
        if grp.empty or not _label_task(grp["prediction"]):
            continue
        total += 1
        stuck += int(grp["prediction"].value_counts(normalize=True).iloc[0] >= COLLAPSE_MAJORITY_SHARE)
    return stuck, total


def collapse_flags(done: pd.DataFrame, predictions: pd.DataFrame,
                   variants) -> tuple[set[str], list[Flag], list[str]]:
    """Variants collapsed beyond none (module docstring), one flag each naming why, and messages."""
    per_seed, median = _none_cosines(done)
    reasons: dict[str, list[str]] = {}
    for r in done[done["variant"] != NONE].sort_values("pretrain_seed").itertuples():
        geometry = _geometry(r, per_seed.get(int(r.pretrain_seed), median))
        if not geometry:
            continue
        stuck, total = one_label_fine_tunings(predictions, r.run_id)
        if total and stuck * 2 < total:  # fine-tuning learned more than one label: no symptom, no collapse
            continue
        symptom = (f"fine-tuning predicts one label on {stuck}/{total} fine-tunings" if total
                   else "no label predictions to check fine-tuning")
        reasons.setdefault(r.variant, []).append(f"seed {int(r.pretrain_seed)}: {geometry}; {symptom}")
    flags = [Flag(v, "", f"collapsed ({'; '.join(reasons[v])})") for v in variants if v in reasons]
    raw = sorted(set(done.loc[done["collapsed"], "variant"]) - set(reasons))
    messages = [f"the raw diagnostic runs.collapsed (token cosine > {TOKEN_COSINE_COLLAPSE} or [CLS] cosine > "
                f"{CLS_COSINE_COLLAPSE}) fired for {', '.join(raw)} without a collapse flag: their cosines are not "
                "beyond none's (a random-init encoder's exceed those thresholds at small scale) or their fine-tuning "
                "learned more than one label (analysis.flags)"] if raw else []
    return set(reasons), flags, messages


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
