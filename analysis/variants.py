"""What each measured variant is: its loss-weight vector, input format and mask ratio, read from runs.

Contrasts are derived from these descriptions (``analysis.contrasts``), never from a list of names,
so a new objective (a new ``<objective>_weight`` column) needs no change here. Input formats are
``single`` | ``nsp_pairs`` | ``sop_pairs`` | ``full_sentences``; exports written before the split recorded ``pair``, read
as ``sop_pairs`` when the run's ``sop_weight`` > 0 and as ``nsp_pairs`` otherwise. ``none`` (all
weights 0: the initial weights, never pretrained) has no meaningful input format.

    specs, messages = variant_specs(done_runs, export.objectives)
    sort_variants(names)   # the conventional order; unknown names sort sensibly (see below)
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

NONE = "none"
INPUT_FORMATS = ("single", "nsp_pairs", "sop_pairs", "full_sentences", "sentence_pairs")
LEGACY_PAIR = "pair"
# The conventional order of the named variants (tables, plots); searched and other mixes after them.
VARIANT_ORDER = ("full", "mlm_only", "mlm_pairs", "full_sentences", "sentence_pair", "nsp_only", "sop_only", "mlm_sop", "electra", "electra_nsp",
                 "best_mix", "custom", "domain_adapt", "before", NONE)
_SEARCHED = VARIANT_ORDER.index("best_mix")
# The conventional named variants as (objectives on, input format): used only to *name* a variant in a
# message when it was not measured (contrasts are derived from what ran, not from this table).
CONVENTIONAL: dict[str, tuple[dict[str, float], str]] = {
    "full": ({"mlm": 1, "nsp": 1}, "nsp_pairs"), "mlm_only": ({"mlm": 1}, "single"),
    "mlm_pairs": ({"mlm": 1}, "nsp_pairs"), "full_sentences": ({"mlm": 1}, "full_sentences"), "nsp_only": ({"nsp": 1}, "nsp_pairs"),
    "sop_only": ({"sop": 1}, "sop_pairs"), "mlm_sop": ({"mlm": 1, "sop": 1}, "sop_pairs"),
    "electra": ({"rtd": 1}, "single"), "electra_nsp": ({"rtd": 1, "nsp": 1}, "nsp_pairs"),
    "sentence_pair": ({"mlm": 1, "nsp": 1}, "sentence_pairs"),
}


class VariantSpec(NamedTuple):
    """One variant as it ran: weights over ``objectives`` (0 = off), input format, mask ratio."""

    name: str
    weights: tuple[float, ...]
    input_format: str  # '' when the export does not record it, or for none
    mask_ratio: float

    def on(self, objectives: tuple[str, ...]) -> dict[str, float]:
        """The objectives that are switched on, with their weights."""
        return {o: w for o, w in zip(objectives, self.weights) if w != 0}


def _variant_key(name: str) -> tuple:
    rank = {v: i for i, v in enumerate(VARIANT_ORDER)}
    if name == NONE:
        return (len(VARIANT_ORDER), 0.0, name)
    base, _, suffix = name.partition("@")  # 'mlm_only@0.30' sorts right after mlm_only
    if base in rank:
        return (rank[base], 0.5 if suffix else 0.0, name)
    return (_SEARCHED - 0.5, 0.0, name)  # unknown named variants: after the named ones, before searched


def sort_variants(names) -> tuple[str, ...]:
    """Conventional order; ``X@...`` after X; unknown names before the searched mixes; none last."""
    return tuple(sorted(set(names), key=_variant_key))


def normalise_format(value, sop_weight: float) -> str:
    """An input_format cell in the current vocabulary ('pair' -> nsp_pairs / sop_pairs)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    text = str(value)
    if text == LEGACY_PAIR:
        return "sop_pairs" if sop_weight > 0 else "nsp_pairs"
    return text


def _one_spec(name: str, rows: pd.DataFrame, objectives: tuple[str, ...]) -> tuple[VariantSpec, list[str]]:
    weights = rows[[f"{o}_weight" for o in objectives]].astype(float).fillna(0.0)
    sop = rows["sop_weight"].astype(float).fillna(0.0) if "sop_weight" in rows else pd.Series(0.0, rows.index)
    formats = ([normalise_format(f, s) for f, s in zip(rows["input_format"], sop)]
               if "input_format" in rows else [""] * len(rows))
    messages = []
    if len(weights.drop_duplicates()) > 1 or len(set(formats)) > 1:
        messages.append(f"variant {name!r} ran with different weights or input formats across seeds; "
                        "its first run's are used to derive contrasts")
    bad = sorted({f for f in formats if f and f not in INPUT_FORMATS})
    if bad and name != NONE:
        messages.append(f"variant {name!r} has input_format {bad}; known: {list(INPUT_FORMATS)}")
    mask = float(rows["mask_ratio"].iloc[0]) if "mask_ratio" in rows else float("nan")
    fmt = "" if name == NONE else formats[0]
    return VariantSpec(name, tuple(float(w) for w in weights.iloc[0]), fmt, mask), messages


def variant_specs(runs: pd.DataFrame, objectives: tuple[str, ...]) -> tuple[dict[str, VariantSpec], list[str]]:
    """One ``VariantSpec`` per variant of ``runs`` (the completed measure runs), in conventional order."""
    specs, messages = {}, []
    if "input_format" not in runs.columns:
        messages.append("runs.parquet has no input_format column: every variant is taken to have the same "
                        "input format, so loss effects and input-format effects cannot be told apart")
    for name in sort_variants(runs["variant"]):
        specs[name], msgs = _one_spec(name, runs[runs["variant"] == name], objectives)
        messages += msgs
    return specs, messages


def describe(on: dict[str, float], input_format: str) -> str:
    """"'mlm_pairs'" (its conventional name) or "with mlm 1 on sop_pairs", for a variant not measured."""
    name = next((n for n, (w, f) in CONVENTIONAL.items() if w == on and f == input_format), None)
    if name:
        return repr(name)
    weights = " + ".join(f"{o} {w:g}" for o, w in on.items()) or "no objective"
    return f"with {weights} on {input_format}" if input_format else f"with {weights}"
