"""What a recipe is (``Recipe``: a citation, the variants, per-scale settings, the paper's numbers) and the
shared per-scale defaults; the recipe modules of this package import it, and ``sweeps.recipes`` gathers
them (so the package imports its modules, never the reverse)."""

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
