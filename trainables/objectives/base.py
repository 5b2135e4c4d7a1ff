"""What an objective declares (``Objective``) and what a variant is (``Variant``).

An objective is one module in this package (found by name) or a plugin module named in
``$BERT_OBJECTIVES_PLUGINS``; the module lists its objectives in ``REGISTER``. Beyond its loss, an
objective may own modules (``build``), change the encoder's input before the forward pass
(``corrupt``: ELECTRA's generator) and read the encoder's output with its own head (``forward``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

PAIR_CONSTRUCTIONS = ("nsp", "sop")  # how pair inputs are built: B random half the time, or A/B swapped


@dataclass(frozen=True)
class Variant:
    """A named set of loss weights and the input format it trains on; never a code path."""

    weights: dict[str, float]
    input_format: str  # single | nsp_pairs | sop_pairs | full_sentences | sentence_pairs (trainables.data.batches)
    doc: str = ""


@dataclass(frozen=True)
class Objective:
    """One pretraining objective: what it needs from the data, the model output it reads, its loss.

    ``loss(out, batch, options)`` returns a scalar tensor, or a dict of weighted parts whose sum is the
    objective's loss (each part is logged as ``loss/<name>.<part>``).
    ``head``: the model output it reads: ``mlm`` (sparse MLM logits at the masked positions), ``pair``
    (the pair head on the pooled [CLS]) or ``own`` (its ``forward`` hook on the last hidden states).
    ``head_params``: prefixes of the HF parameters that head trains (frozen when no active objective
    reads it). ``pairs``: the pair construction it needs (``nsp`` / ``sop``), None if any input does.
    ``masked``: it needs MLM-masked inputs. ``excludes``: objectives it cannot train with.
    ``options``: its settings with defaults (``objective.<name>.<option>=value`` on the command line),
    checked by ``check``. ``build(bert, model_cfg, options) -> nn.Module``: modules it owns.
    ``corrupt(module, bert, batch, options) -> (batch for the encoder, aux)``: runs before the encoder.
    ``forward(module, out, batch, aux, options) -> aux``: runs after it. ``intrinsic`` measures it on
    held-out text for every variant (``metrics`` names what it returns). ``variants``: the named
    variants it introduces; ``search``: the range the search phase draws its weight from.
    """

    name: str
    doc: str
    loss: Callable
    head: str
    head_params: tuple[str, ...] = ()
    pairs: str | None = None
    masked: bool = False
    excludes: tuple[str, ...] = ()
    options: dict[str, float] = field(default_factory=dict)
    check: Callable[[dict[str, float]], str | None] | None = None
    build: Callable | None = None
    corrupt: Callable | None = None
    forward: Callable | None = None
    save: Callable | None = None  # save(module, bert, tokenizer, out_dir, options): extra checkpoints it writes
    intrinsic: Callable | None = None  # (PretrainModel, EvalSets, device) -> {metric: value}, on every variant
    flops: Callable | None = None  # (model_cfg, options, StepShape, vocab) -> forward FLOPs of its heads (flops.py)
    metrics: tuple[tuple[str, str], ...] = ()  # (name, meaning) of what ``intrinsic`` returns: export columns
    variants: dict[str, Variant] = field(default_factory=dict)
    search: tuple[float, float] = (0.0, 2.0)

    def options_of(self, options: dict[str, Any]) -> dict[str, Any]:
        """This objective's settings from ``ObjectiveConfig.options`` (keys ``<name>.<option>``)."""
        return {k: options.get(f"{self.name}.{k}", v) for k, v in self.options.items()}
