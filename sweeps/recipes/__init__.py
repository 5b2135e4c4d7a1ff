"""The literature's ablation tables as data: one module per table, each a ``Recipe`` (citation, variants,
per-scale settings, the paper's reported numbers). ``sweeps/reproduce.py`` runs and plans them.

    from sweeps.recipes import RECIPES, SCALES
    RECIPES["bert-t5"].scales["smoke"].preset    # 'smoke'

Each recipe maps the paper's rows to registered variants with what each trains (``row_config``, ``row_spec``),
citing the section or table per row, and says next to each row what the tool cannot do as the paper did.

Scales: ``smoke`` (the smoke preset on the synthetic corpus, CPU, minutes), ``quick`` (gpu-quick on the
built-in corpus and built-in tasks, sized for about a quarter hour on one H200), ``paper`` (the paper's
model size, steps, batch and rate on a hub corpus and the hub GLUE/SQuAD tasks, for a cluster). Every
paper number carries ``verified``: True only where the number was read in the paper's own text or in the
authors' own repository (the recipe's note says which).
"""

from __future__ import annotations

from sweeps.recipes import albert_t5, bert_t5, electra_t1, roberta_t2, wettig_mask
from sweeps.recipes.base import (HUB_WIKI, QUICK, SCALES, SMOKE, Citation, PaperCompute, Protocol, Recipe,  # noqa: F401
                                 RecipeVariant, RowSpec, Scale, describe, row_config, row_spec)

RECIPES: dict[str, Recipe] = {r.name: r for r in (bert_t5.RECIPE, roberta_t2.RECIPE, albert_t5.RECIPE,
                                                  electra_t1.RECIPE, wettig_mask.RECIPE)}
