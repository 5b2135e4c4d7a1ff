"""What a recipe is (``Recipe``: a citation, the paper's rows mapped to variants, per-scale settings, the
paper's numbers, protocol and compute) and the shared per-scale defaults; the recipe modules of this
package import it, and ``sweeps.recipes`` gathers them (so the package imports its modules, never the
reverse).

A row is trained as ``row_config`` builds it: the registered variant, its objective changes (mask rate,
[MASK]/random fractions, masking strategy), its share of the scale's steps (the same warmup steps), on
the scale's config with the recipe's own settings (``Recipe.overrides``: the paper's betas, short
sequences...) applied at every scale. ``row_spec`` is what a row trains, the contract the recipe tests
hold (tests/sweeps/test_recipe_mappings.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple

from analysis.paper import PaperContrast, PaperIntrinsic

SCALES = ("smoke", "quick", "paper")


@dataclass(frozen=True)
class Citation:
    authors: str
    year: int
    title: str
    table: str  # e.g. "Table 5"
    page: str  # where the table is, in the version named in ``venue`` ("" when not checked)
    venue: str

    def format(self) -> str:
        page = f", p. {self.page}" if self.page else ""
        return f"{self.authors} ({self.year}), \"{self.title}\", {self.venue}, {self.table}{page}"


@dataclass(frozen=True)
class RecipeVariant:
    """One row of the paper's table as a registered variant (trainables.objectives.VARIANTS), with the
    objective changes it needs (mask_ratio, mask_token_frac, random_token_frac, masking). ``label`` names
    it in the export and the report; ``source`` is where the paper says what the row trained."""

    label: str
    variant: str
    paper_name: str
    objective: dict = field(default_factory=dict)
    source: str = ""
    step_share: float = 1.0  # this row's steps as a share of the scale's (ELECTRA's 1M of BERT-Small's 1.5M)
    differs: tuple[str, ...] = ()  # what this row cannot train as the paper did (shown next to it)
    extra: bool = False  # not run unless asked (--extra-rows): a row the paper has not, or an optional pair

    def __post_init__(self):
        if not 0.0 < self.step_share <= 1.0:
            raise ValueError(f"RecipeVariant.step_share={self.step_share} must be in (0, 1]")


@dataclass(frozen=True)
class Scale:
    preset: str
    corpus: str
    tasks: str
    seeds: int
    finetune_seeds: int
    overrides: tuple[str, ...] = ()  # dotted config overrides applied before the user's --set
    note: str = ""


@dataclass(frozen=True)
class Protocol:
    """How the paper scored each number: ``finetune_runs`` per score (0: not stated), the statistic over
    them, the split; ``text`` says it with where the paper says so."""

    finetune_runs: int
    statistic: str  # "median" | "not stated" | ...
    split: str
    text: str


@dataclass(frozen=True)
class PaperCompute:
    """The paper's own size and schedule: ``params`` N (the paper's count) and, per row label, the tokens T
    one pretraining run trained (steps x batch x length), for 6 N T beside the plan's count."""

    params: float
    tokens: dict[str, float]
    source: str
    reported_flops: dict[str, float] = field(default_factory=dict)  # training FLOPs the paper states, per row
    # the parameters a token's step computes with when it is not ``params`` (shared layers count at each use)
    compute_params: float = 0.0

    def six_nt(self, label: str, params: float = 0.0) -> float:
        return 6.0 * (params or self.params) * self.tokens.get(label, float("nan"))


@dataclass(frozen=True)
class Recipe:
    name: str
    citation: Citation
    variants: tuple[RecipeVariant, ...]
    scales: dict[str, Scale]
    claims: tuple[PaperContrast, ...]  # the paper's differences, on its dev sets
    note: str = ""  # how the numbers were checked
    not_runnable: str = ""  # non-empty: why this recipe cannot run yet (one line)
    overrides: tuple[str, ...] = ()  # the paper's settings at every scale (betas, short sequences), before the scale's
    differs: tuple[str, ...] = ()  # what every row does differently from the paper (shown beside the rows)
    protocol: Protocol | None = None
    compute: PaperCompute | None = None
    intrinsic: tuple[PaperIntrinsic, ...] = ()  # intrinsic metrics the paper reports per row

    def rows(self, extra: bool = False) -> tuple[RecipeVariant, ...]:
        """The rows a run trains: the paper's, and with ``extra`` the extra ones too."""
        return tuple(v for v in self.variants if extra or not v.extra)

    def claims_of(self, rows: tuple[RecipeVariant, ...]) -> tuple[PaperContrast, ...]:
        """The claims whose two rows are both in ``rows``."""
        labels = {v.label for v in rows}
        return tuple(c for c in self.claims if c.plus in labels and c.minus in labels)

    def scale_overrides(self, scale: str) -> list[str]:
        return list(self.overrides) + list(self.scales[scale].overrides)


def row_config(cfg, row: RecipeVariant):
    """The config ``row`` trains on top of the scale's ``cfg``: its variant and objective changes, and its
    share of the steps (phase 2 in proportion) with the same warmup steps as the scale's."""
    from sweeps.phases import variant_config

    out = variant_config(cfg, row.variant, **row.objective)
    if row.step_share == 1.0:
        return out
    o = out.optim
    steps = max(1, round(o.max_steps * row.step_share))
    warmup = min(o.warmup_frac * o.max_steps / steps, 0.99)
    return out.replace(optim=dataclasses.replace(o, max_steps=steps, warmup_frac=warmup,
                                                 phase2_steps=round(o.phase2_steps * row.step_share)))


class RowSpec(NamedTuple):
    """What a row trains: the fields a literature row must not change unnoticed."""

    variant: str
    input_format: str
    mask_ratio: float
    mask_token_frac: float
    random_token_frac: float
    masking: str
    steps: int
    phase2_steps: int
    seq_len: int
    phase2_seq_len: int
    batch_size: int
    lr: float
    warmup_steps: int
    beta1: float
    beta2: float
    short_seq_prob: float


def row_spec(cfg) -> RowSpec:
    o, opt = cfg.objective, cfg.optim
    return RowSpec(o.variant, o.input_format, o.mask_ratio, o.mask_token_frac, o.random_token_frac, o.masking,
                   opt.max_steps, opt.phase2_steps, cfg.data.seq_len, opt.phase2_seq_len if opt.phase2_steps else 0,
                   opt.batch_size, opt.lr, int(opt.warmup_frac * opt.max_steps), opt.beta1, opt.beta2,
                   cfg.data.short_seq_prob)


def describe(spec: RowSpec) -> str:
    """One line: what a row trains (variant, input, masking, schedule, optimizer)."""
    masks = f"{spec.mask_token_frac:.0%} [MASK] / {spec.random_token_frac:.0%} random"
    phase2 = f" ({spec.phase2_steps:,} at {spec.phase2_seq_len})" if spec.phase2_steps else ""
    return (f"{spec.variant} on {spec.input_format}; {spec.masking} masking {spec.mask_ratio:.0%}, {masks}; "
            f"{spec.steps:,} steps{phase2} x {spec.batch_size:,} x {spec.seq_len}; AdamW lr {spec.lr:g}, "
            f"betas {spec.beta1:g}/{spec.beta2:g}, warmup {spec.warmup_steps:,}; short sequences {spec.short_seq_prob:g}")


# Shared per-scale defaults. smoke: a minute or two on 2 CPU cores; 3 pretraining seeds, the fewest with a
# reliable interval (analysis.bootstrap MIN_RELIABLE_SEEDS). quick: gpu-quick with its own 5 seeds: 2-3 variants
# and no search plan well inside gpu-quick's quarter hour on one H200 (sweeps/reproduce.py NAME --scale quick --plan
# --hardware h200 prices a recipe).
SMOKE = Scale("smoke", "synthetic", "sentiment,topic", seeds=3, finetune_seeds=1,
              note="smoke preset (2 layers, 32 wide, 8 steps) on the synthetic corpus; built-in tasks: checks the "
                   "plumbing, not the science")
QUICK = Scale("gpu-quick", "builtin", "sentiment,topic,hedge,pos", seeds=5, finetune_seeds=1,
              note="gpu-quick (4 layers, 256 wide, 2,000 steps) on the built-in corpus; built-in tasks, not the "
                   "paper's: direction and size only")
HUB_WIKI = "hub:wikimedia/wikipedia:20231101.en"
