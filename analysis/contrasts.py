"""Contrasts between variants, derived from what each variant is (weights, input format), not listed.

From the measured ``VariantSpec``s (``analysis.variants``), for variants with the same mask ratio:

    X - none                       every variant, always (family vs_none)
    named contributions            MLM contribution = full - nsp_only, NSP contribution = full - mlm_only
    X loss effect   (A - B)        same input format, weights differ only in X, B has X = 0, B != none
    input-format effect (A - B)    same weights, different input format (pairs minus single)
    X instead of Y  (A - B)        one objective swapped for another of the same kind (both with a pair
                                   head, or neither) at the same weight, X the later objective of the
                                   export's order (rtd for mlm, sop for nsp); a note names both input
                                   formats when they differ
    2x2 factorial on one format    {X+Y, X, Y} on that format plus none: X's share and Y's share (the main
                                   effects, = the Shapley values of a 2x2; they add up to (X+Y) - none)
                                   and the interaction

Every contrast carries ``meaning``, what it measures in words; the report prints them once, as a glossary.
    best_mix - full                when a searched mix was measured

A weight vector that two rules produce is kept once, under the first name (the seed's names first),
the other names in ``also``. A contrast between variants on different input formats whose gap a
measured variant bridges carries ``parts``: e.g. full - mlm_only = (full - mlm_pairs) + (mlm_pairs -
mlm_only), the NSP loss effect plus the input-format effect. What cannot be computed for want of a
variant gives one message per missing variant.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

from analysis.variants import INPUT_FORMATS, NONE, VariantSpec, describe

FAMILIES = ("vs_none", "seed", "loss", "format", "swap", "factorial", "best_mix")
SEED_DEFINITIONS = (("MLM contribution (full - nsp_only)", "full", "nsp_only", "MLM",
                     "what MLM adds to NSP: MLM and NSP on sentence pairs, minus NSP alone on the same pairs"),
                    ("NSP contribution (full - mlm_only)", "full", "mlm_only", "NSP",
                     "what NSP with its sentence pairs adds to MLM: MLM and NSP on pairs, minus MLM alone on "
                     "single segments (a loss and an input change together; NSP's loss effect separates them)"))
# The primary family: the question the tool exists for, declared before any run. MLM's effect over no
# pretraining and NSP's loss effect (only the loss differs: same pairs, same inputs) are adjusted within
# themselves for the headline; every other cell is a secondary family with its own adjustment.
PRIMARY = {"MLM's effect over none": {"mlm_only": 1.0, "none": -1.0},
           "NSP's loss effect": {"full": 1.0, "mlm_pairs": -1.0}}


def holm_family(d: "ContrastDef") -> str:
    """'primary' for the contrasts of ``PRIMARY`` (by weights, whatever they are named), else 'secondary'."""
    key = _key(d.weights)
    return "primary" if any(key == _key(w) for w in PRIMARY.values()) else "secondary"


@dataclass(frozen=True)
class ContrastDef:
    name: str
    weights: dict[str, float]
    family: str  # one of FAMILIES
    credited: str = ""  # what the contrast is credited to ('' for vs_none)
    notes: tuple[str, ...] = ()  # e.g. the input formats differ
    parts: tuple[tuple[float, str], ...] = ()  # (sign, contrast name): this contrast = their signed sum
    also: tuple[str, ...] = field(default=())  # other names of the same weight vector
    meaning: str = ""  # what it measures, in words: the report's glossary


def _key(weights: dict[str, float]) -> tuple:
    return tuple(sorted((v, round(float(w), 9)) for v, w in weights.items() if w != 0))


def _objectives_text(spec: VariantSpec, objectives) -> str:
    on = spec.on(objectives)
    losses = " + ".join(_label(o) if w == 1 else f"{w:g} {_label(o)}" for o, w in on.items()) or "no loss"
    return f"{losses} on {spec.input_format}" if spec.input_format else losses


def primary_name(d: "ContrastDef") -> str:
    """The primary question's plain name for ``d`` ("MLM's effect over none"), or '' for a secondary cell."""
    key = _key(d.weights)
    return next((name for name, w in PRIMARY.items() if key == _key(w)), "")


def _same_mask(a: VariantSpec, b: VariantSpec) -> bool:
    return (math.isnan(a.mask_ratio) and math.isnan(b.mask_ratio)) or math.isclose(a.mask_ratio, b.mask_ratio)


def _label(objective: str) -> str:
    return objective.upper()


def _pair_contrast(a: VariantSpec, b: VariantSpec, objectives: tuple[str, ...],
                   pair_level: frozenset[str]) -> ContrastDef | None:
    """The derived contrast a - b, if the pair differs in exactly one of the ways the rules name."""
    wa, wb = a.on(objectives), b.on(objectives)
    diff = [o for o in objectives if wa.get(o, 0.0) != wb.get(o, 0.0)]
    sub = {a.name: 1.0, b.name: -1.0}
    if not diff and a.input_format != b.input_format:
        rank = {f: i for i, f in enumerate(INPUT_FORMATS)}
        if rank.get(a.input_format, -1) > rank.get(b.input_format, -1):
            return ContrastDef(f"input-format effect ({a.name} - {b.name})", sub, "format", "input format",
                               (f"{a.input_format} vs {b.input_format} with the same losses",),
                               meaning=f"what {a.input_format} inputs do instead of {b.input_format}, the losses "
                                       "unchanged")
    elif len(diff) == 1 and a.input_format == b.input_format and wb and wb.get(diff[0], 0.0) == 0:
        x = diff[0]
        rest = " + ".join(_label(o) for o in wb)
        return ContrastDef(f"{_label(x)} loss effect with {rest} ({a.name} - {b.name})", sub, "loss", _label(x),
                           meaning=f"what switching on {_label(x)}'s loss adds to {rest}, the inputs unchanged")
    elif len(diff) == 2:
        y, x = diff  # objectives order: x is the later one
        same_kind = (x in pair_level) == (y in pair_level)  # rtd for mlm, sop for nsp; not nsp for mlm
        if same_kind and wa.get(x, 0) == wb.get(y, 0) != 0 and x not in wb and y not in wa:
            notes = ((f"input formats differ: {a.name} on {a.input_format}, {b.name} on {b.input_format}",)
                     if a.input_format != b.input_format else ())
            return ContrastDef(f"{_label(x)} instead of {_label(y)} ({a.name} - {b.name})", sub, "swap",
                               _label(x), notes,
                               meaning=f"{_label(x)} in place of {_label(y)} at the same weight, the rest unchanged")
    return None


def _factorials(specs: dict[str, VariantSpec], objectives, blocked: dict) -> list[ContrastDef]:
    """2x2 factorials with the input format held fixed, for every two-objective variant."""
    out = []
    for xy in specs.values():
        on = xy.on(objectives)
        if xy.name == NONE or len(on) != 2:
            continue
        (x, wx), (y, wy) = on.items()
        cells = {}
        for o, w in ((x, wx), (y, wy)):
            cells[o] = next((s.name for s in specs.values() if s.on(objectives) == {o: w}
                             and s.input_format == xy.input_format and _same_mask(s, xy)), None)
        what = f"{_label(x)} x {_label(y)} factorial on {xy.input_format or 'the recorded inputs'}"
        missing = [describe({o: w}, xy.input_format) for o, w in ((x, wx), (y, wy)) if cells[o] is None]
        missing += ["'none'"] if NONE not in specs else []
        if missing:
            if wx == wy:  # a plain mix: say what would complete it
                for m in missing:
                    blocked.setdefault(m, []).append(f"the {what} (each objective's share, interaction)")
            continue
        both, only_x, only_y = xy.name, cells[x], cells[y]
        tag = f" ({xy.input_format})" if xy.input_format else ""
        game = f" ({_label(x)} x {_label(y)}{', ' + xy.input_format if xy.input_format else ''})"
        X, Y = _label(x), _label(y)
        share = ("{0}'s share of ({0} + {1}) - none: {0}'s effect averaged over {1} off and on, the Shapley value "
                 "of the 2x2; the two shares add up to ({0} + {1}) - none")
        out += [ContrastDef(f"{X}'s share{game}", {both: .5, only_y: -.5, only_x: .5, NONE: -.5}, "factorial", X,
                            meaning=share.format(X, Y)),
                ContrastDef(f"{Y}'s share{game}", {both: .5, only_x: -.5, only_y: .5, NONE: -.5}, "factorial", Y,
                            meaning=share.format(Y, X)),
                ContrastDef(f"{X} x {Y} interaction{tag}", {both: 1, only_x: -1, only_y: -1, NONE: 1}, "factorial",
                            f"{X} x {Y}", meaning=f"how far {X} and {Y} together differ from the sum of their "
                                                  "effects alone (0: they add up)")]
    return out


def _named(specs: dict[str, VariantSpec], blocked: dict) -> list[ContrastDef]:
    """The project brief's two named contributions and best_mix - full: fixed names, as the brief defined them."""
    wanted = [ContrastDef(name, {a: 1.0, b: -1.0}, "seed", credit, meaning=meaning)
              for name, a, b, credit, meaning in SEED_DEFINITIONS]
    if "best_mix" in specs:
        wanted.append(ContrastDef("best_mix - full", {"best_mix": 1.0, "full": -1.0}, "best_mix", "best_mix",
                                  meaning="the loss weights the search chose, minus BERT's MLM + NSP"))
    out = []
    for d in wanted:
        missing = [v for v in d.weights if v not in specs]
        for v in missing:
            blocked.setdefault(repr(v), []).append(d.name)
        if not missing:
            out.append(d)
    return out


def _dedupe(defs: list[ContrastDef]) -> list[ContrastDef]:
    first: dict[tuple, int] = {}
    out: list[ContrastDef] = []
    for d in defs:
        k = _key(d.weights)
        if k in first:
            i = first[k]
            out[i] = replace(out[i], also=out[i].also + (d.name,), notes=out[i].notes + d.notes)
        else:
            first[k] = len(out)
            out.append(d)
    return out


def _with_parts(defs: list[ContrastDef], specs: dict[str, VariantSpec], objectives) -> list[ContrastDef]:
    """Attach (A - M) + (M - B) to a two-variant contrast A - B whose input formats differ (and say so)."""
    by_key = {_key(d.weights): d.name for d in defs}
    out = []
    for d in defs:
        pair = [v for v, w in d.weights.items() if w != 0]
        if len(pair) == 2 and NONE not in pair and not d.parts:
            a, b = (pair if d.weights[pair[0]] > 0 else pair[::-1])
            sa, sb = specs[a], specs[b]
            if sa.input_format != sb.input_format and d.family != "format" and not any(
                    "input formats differ" in n for n in d.notes):
                d = replace(d, notes=d.notes + (f"input formats differ: {a} on {sa.input_format}, "
                                                f"{b} on {sb.input_format}",))
            bridge = next((m for m in specs.values() if m.name not in (a, b, NONE) and _same_mask(m, sa)
                           and m.on(objectives) == sb.on(objectives) and m.input_format == sa.input_format), None)
            if sa.input_format != sb.input_format and bridge is not None:
                parts = []
                for lo, hi in ((bridge.name, a), (b, bridge.name)):
                    plus, minus = by_key.get(_key({hi: 1, lo: -1})), by_key.get(_key({lo: 1, hi: -1}))
                    parts.append((1.0, plus) if plus else (-1.0, minus) if minus else None)
                if None not in parts:
                    d = replace(d, parts=tuple(parts))
        out.append(d)
    return out


def pair_level_objectives(specs: dict[str, VariantSpec], objectives: tuple[str, ...],
                          columns=()) -> frozenset[str]:
    """Objectives of a pair head: a ``pair_acc_<objective>`` column in runs, or never run on single inputs."""
    out = {o for o in objectives if f"pair_acc_{o}" in columns}
    for o in objectives:
        formats = {s.input_format for s in specs.values() if o in s.on(objectives)}
        if formats and "single" not in formats and "" not in formats:
            out.add(o)
    return frozenset(out)


def derive_contrasts(specs: dict[str, VariantSpec], objectives: tuple[str, ...],
                     pair_level: frozenset[str] = frozenset()) -> tuple[list[ContrastDef], list[str]]:
    """The contrasts computable from the measured variants, and one message per missing variant.

    ``pair_level``: objectives of a pair head (``pair_level_objectives``); X instead of Y swaps only
    objectives of the same kind."""
    blocked: dict[str, list[str]] = {}
    defs = ([ContrastDef(f"{v} - none", {v: 1.0, NONE: -1.0}, "vs_none",
                         meaning=f"what pretraining {v} ({_objectives_text(specs[v], objectives)}) adds over random "
                                 "weights, fine-tuned and probed the same way")
             for v in specs if v != NONE] if NONE in specs else [])
    if NONE not in specs:
        blocked["'none'"] = ["every variant - none"]
    defs += _named(specs, blocked)
    pretrained = [s for s in specs.values() if s.name != NONE]
    for a, b in itertools.permutations(pretrained, 2):
        if _same_mask(a, b):
            d = _pair_contrast(a, b, objectives, pair_level)
            if d is not None:
                defs.append(d)
    defs += _factorials(specs, objectives, blocked)
    defs = _with_parts(_dedupe(defs), specs, objectives)
    order = {f: i for i, f in enumerate(FAMILIES)}
    defs.sort(key=lambda d: order[d.family])  # stable: the rules' order within a family
    messages = [f"variant {v} was not measured: cannot compute {'; '.join(names)}" for v, names in blocked.items()]
    return defs, messages
