"""The literature's ablation tables as data: one module per table, each a ``Recipe`` (citation, variants,
per-scale settings, the paper's reported numbers). ``sweeps/reproduce.py`` runs and plans them.

    from sweeps.recipes import RECIPES, SCALES
    RECIPES["bert-t5"].scales["smoke"].preset    # 'smoke'

Scales: ``smoke`` (the smoke preset on the synthetic corpus, CPU, minutes), ``quick`` (gpu-quick on the
built-in corpus and built-in tasks, sized for about a quarter hour on one H200), ``paper`` (the paper's
model size, steps, batch and rate on a hub corpus and the hub GLUE/SQuAD tasks, for a cluster). Every
paper number carries ``verified``: True only where the number was read in the paper's own text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from analysis.paper import PaperContrast

SCALES = ("smoke", "quick", "paper")


@dataclass(frozen=True)
class Citation:
    authors: str
    year: int
    title: str
    table: str  # e.g. "Table 5"
    page: str  # where the table is, in the version named in ``venue``
    venue: str

    def format(self) -> str:
        return f"{self.authors} ({self.year}), \"{self.title}\", {self.venue}, {self.table}, p. {self.page}"


@dataclass(frozen=True)
class RecipeVariant:
    """One row of the paper's table as a registered variant (trainables.objectives.VARIANTS), with the
    objective changes it needs (e.g. mask_ratio). ``label`` names it in the export and the report."""

    label: str
    variant: str
    paper_name: str
    objective: dict = field(default_factory=dict)


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
class Recipe:
    name: str
    citation: Citation
    variants: tuple[RecipeVariant, ...]
    scales: dict[str, Scale]
    claims: tuple[PaperContrast, ...]  # the paper's differences, on its dev sets
    note: str = ""  # what differs from the paper, how the numbers were checked
    not_runnable: str = ""  # non-empty: why this recipe cannot run yet (one line)


# Shared per-scale defaults. smoke: a minute or two on 2 CPU cores; 3 pretraining seeds, the fewest with a
# reliable interval (analysis.bootstrap MIN_RELIABLE_SEEDS). quick: gpu-quick with its own 5 seeds: 2-3 variants
# and no search plan at ~2 minutes on one H200 (sweeps/reproduce.py NAME --scale quick --plan --hardware h200).
SMOKE = Scale("smoke", "synthetic", "sentiment,topic", seeds=3, finetune_seeds=1,
              note="smoke preset (2 layers, 32 wide, 8 steps) on the synthetic corpus; built-in tasks")
QUICK = Scale("gpu-quick", "builtin", "sentiment,topic,hedge,pos", seeds=5, finetune_seeds=1,
              note="gpu-quick (4 layers, 256 wide, 2,000 steps) on the built-in corpus; built-in tasks")
HUB_WIKI = "hub:wikimedia/wikipedia:20231101.en"


def _registry():
    from sweeps.recipes import albert_t5, bert_t5, electra_t1, roberta_t2, wettig_mask

    return {r.name: r for r in (bert_t5.RECIPE, roberta_t2.RECIPE, albert_t5.RECIPE, electra_t1.RECIPE,
                                wettig_mask.RECIPE)}


RECIPES: dict[str, Recipe] = _registry()
