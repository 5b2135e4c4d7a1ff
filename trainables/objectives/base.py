"""What an objective declares (``Objective``) and what a variant is (``Variant``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

PAIR_CONSTRUCTIONS = ("nsp", "sop")  # how pair inputs are built: B random half the time, or A/B swapped


@dataclass(frozen=True)
class Variant:
    """A named set of loss weights and the input format it trains on; never a code path."""

    weights: dict[str, float]
    input_format: str  # single | pair
    doc: str = ""


@dataclass(frozen=True)
class Objective:
    """One pretraining objective: what it needs from the data, the model output it reads, its loss.

    ``pairs``: the pair construction it needs (``nsp`` or ``sop``), or None when any input will do;
    ``masked``: it needs MLM-masked inputs; ``head``: the model output it reads (``mlm``: sparse MLM
    logits at the masked positions, ``pair``: the pair head on the pooled [CLS]); ``head_params``:
    prefixes of the parameters that head trains (frozen when no active objective reads the head, so
    distributed training needs no unused-parameter search); ``variants``: the named variants this
    objective introduces; ``search``: the range the search phase draws its weight from.
    """

    name: str
    doc: str
    loss: Callable  # (outputs, batch) -> scalar tensor
    head: str
    head_params: tuple[str, ...] = ()
    pairs: str | None = None
    masked: bool = False
    variants: dict[str, Variant] = field(default_factory=dict)
    search: tuple[float, float] = (0.0, 2.0)
