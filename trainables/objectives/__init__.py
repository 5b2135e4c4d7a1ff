"""Pretraining objectives as a registry: each is one module declaring its data needs, head, loss and variants.

    OBJECTIVES        mlm (mlm.py), nsp and sop (pairs.py): name -> Objective
    VARIANTS          every named variant, gathered from the objectives (plus ``none``)
    total_loss(out, batch, weights) -> (weighted sum, each active loss)

A variant is a named set of weights and an input format, never a code path. The export's weight
columns, the searched space and the analysis contrasts come from here. A new objective is one module
and one ``register_objective`` call (shown by the toy-objective test).
"""

from __future__ import annotations

import torch

from trainables.objectives.base import PAIR_CONSTRUCTIONS, Objective, Variant
from trainables.objectives.mlm import MLM, mlm_loss
from trainables.objectives.pairs import NSP, SOP, pair_loss

OBJECTIVES: dict[str, Objective] = {o.name: o for o in (MLM, NSP, SOP)}
NONE = Variant({}, "pair", "no pretraining: the seeded initial weights")
VARIANTS: dict[str, Variant] = {}


def _gather_variants() -> None:
    VARIANTS.clear()
    for o in OBJECTIVES.values():
        for name, v in o.variants.items():
            if name in VARIANTS:
                raise ValueError(f"variant {name!r} is declared by two objectives")
            VARIANTS[name] = v
    VARIANTS["none"] = NONE


_gather_variants()


def register_objective(objective: Objective) -> Objective:
    """Add an objective (and its variants) to the registry; its name and variant names must be new."""
    if objective.name in OBJECTIVES:
        raise ValueError(f"objective {objective.name!r} is already registered")
    clash = sorted(set(objective.variants) & set(VARIANTS))
    if clash:
        raise ValueError(f"objective {objective.name!r} declares variants that exist already: {clash}")
    OBJECTIVES[objective.name] = objective
    _gather_variants()
    return objective


def unregister_objective(name: str) -> None:
    """Remove an objective and its variants (tests that register toy objectives clean up with it)."""
    OBJECTIVES.pop(name)
    _gather_variants()


def get_objective(name: str) -> Objective:
    if name not in OBJECTIVES:
        raise ValueError(f"objective {name!r} is not valid; allowed: {', '.join(OBJECTIVES)}")
    return OBJECTIVES[name]


def build_objective(name: str):
    """The loss function of a registered objective."""
    return get_objective(name).loss


def total_loss(out, batch, weights: dict[str, float]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Weighted sum of the active objectives, and each active loss on its own (for logging)."""
    parts = {name: get_objective(name).loss(out, batch) for name, w in weights.items() if w > 0}
    total = sum(weights[name] * loss for name, loss in parts.items())
    return total, parts


__all__ = ["NONE", "OBJECTIVES", "PAIR_CONSTRUCTIONS", "Objective", "VARIANTS", "Variant", "build_objective",
           "get_objective", "mlm_loss", "pair_loss", "register_objective", "total_loss", "unregister_objective"]
