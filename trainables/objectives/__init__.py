"""Pretraining objectives as a registry: each is one module declaring its data needs, head, loss and variants.

    OBJECTIVES        every registered objective by name: mlm (mlm.py), nsp and sop (pairs.py), ...
    VARIANTS          every named variant, gathered from the objectives (plus ``none``)
    total_loss(out, batch, weights, options) -> (weighted sum, each active loss and its parts)

The registry is filled from the modules of this package, in name order (each lists its objectives in
``REGISTER``), then from the plugin modules named in ``$BERT_OBJECTIVES_PLUGINS`` (comma-separated;
Ray workers inherit the variable). So a new objective is one new module. A variant is a named set of
weights and an input format, never a code path; the export's weight columns, the searched space and
the analysis contrasts all come from here.
"""

from __future__ import annotations

import importlib
import os
import pkgutil

import torch

from trainables.objectives.base import PAIR_CONSTRUCTIONS, Objective, Variant

PLUGINS_ENV = "BERT_OBJECTIVES_PLUGINS"
OBJECTIVES: dict[str, Objective] = {}
NONE = Variant({}, "nsp_pairs", "no pretraining: the seeded initial weights")
VARIANTS: dict[str, Variant] = {}


def _gather_variants() -> None:
    VARIANTS.clear()
    for o in OBJECTIVES.values():
        for name, v in o.variants.items():
            if name in VARIANTS:
                raise ValueError(f"variant {name!r} is declared by two objectives")
            VARIANTS[name] = v
    VARIANTS["none"] = NONE


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


def _register_module(module) -> None:
    for objective in getattr(module, "REGISTER", ()):
        if OBJECTIVES.get(objective.name) is not objective:
            register_objective(objective)


def load_plugins(names: str | None = None) -> None:
    """Import the plugin modules named in ``names`` (default: ``$BERT_OBJECTIVES_PLUGINS``) and register
    what they list in ``REGISTER``; importing one twice registers nothing twice."""
    for name in (names if names is not None else os.environ.get(PLUGINS_ENV, "")).split(","):
        if name.strip():
            try:
                module = importlib.import_module(name.strip())
            except ImportError as err:
                raise ValueError(f"${PLUGINS_ENV} names {name.strip()!r}, which cannot be imported: {err}") from None
            _register_module(module)


def _load_builtin() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name != "base":
            _register_module(importlib.import_module(f"{__name__}.{info.name}"))
    _gather_variants()


_load_builtin()
load_plugins()


def get_objective(name: str) -> Objective:
    if name not in OBJECTIVES:
        raise ValueError(f"objective {name!r} is not valid; allowed: {', '.join(OBJECTIVES)}")
    return OBJECTIVES[name]


def build_objective(name: str):
    """The loss function of a registered objective."""
    return get_objective(name).loss


def total_loss(out, batch, weights: dict[str, float], options: dict | None = None
               ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Weighted sum of the active objectives, and each active loss on its own (for logging); an
    objective whose loss has parts also logs them as ``<name>.<part>``."""
    parts: dict[str, torch.Tensor] = {}
    losses = {}
    for name, w in weights.items():
        if w > 0:
            objective = get_objective(name)
            value = objective.loss(out, batch, objective.options_of(options or {}))
            if isinstance(value, dict):
                parts.update({f"{name}.{k}": v for k, v in value.items()})
                value = sum(value.values())
            losses[name] = value
    total = sum(weights[name] * loss for name, loss in losses.items())
    return total, {**losses, **parts}


from trainables.objectives.mlm import mlm_loss  # noqa: E402  (re-exported)
from trainables.objectives.pairs import pair_loss  # noqa: E402

__all__ = ["NONE", "OBJECTIVES", "PAIR_CONSTRUCTIONS", "Objective", "VARIANTS", "Variant", "build_objective",
           "get_objective", "load_plugins", "mlm_loss", "pair_loss", "register_objective", "total_loss",
           "unregister_objective"]
