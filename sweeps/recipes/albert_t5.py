"""Lan et al. 2020, ALBERT, Table 5: the inter-sentence loss, none / NSP / SOP (ALBERT-base, dev sets).

    python sweeps/reproduce.py albert-t5 --scale paper --plan --hardware h100 --mfu 0.4

"None" (MLM alone) -> ``mlm_only``; "NSP" -> ``full``; "SOP" -> ``mlm_sop``. ALBERT-base's factorised
embeddings and shared layers are not implemented: the paper scale uses a bert-base encoder with ALBERT's
schedule (batch 4096, 125k steps, length 512, rate 0.00176; LAMB there, AdamW here). Numbers read in the
paper's text (Table 5: None 88.6/81.5 78.1/75.3 81.5 89.9 61.7 79.0; NSP 88.4/81.5 77.2/74.6 81.6 91.1 62.3
79.2; SOP 89.3/82.3 80.0/77.1 82.0 90.3 64.0 80.1; SQuAD columns F1/EM): verified=True.
"""

from analysis.paper import PaperContrast
from sweeps.recipes.base import HUB_WIKI, QUICK, SMOKE, Citation, Recipe, RecipeVariant, Scale

# (None, NSP, SOP): SQuAD1.1 F1, MNLI, SST-2 and the five-task average (SQuAD1.1, SQuAD2.0, MNLI, SST-2, RACE)
_PAPER = {"SQuAD1.1": (88.6, 88.4, 89.3), "MNLI": (81.5, 81.6, 82.0), "SST-2": (89.9, 91.1, 90.3),
          "Avg": (79.0, 79.2, 80.1)}


def _claims():
    out = []
    for task, (none, nsp, sop) in _PAPER.items():
        metric = "f1" if task.startswith("SQuAD") else "acc"
        out += [PaperContrast(a, b, task, x, y, verified=True, metric=metric)
                for a, b, x, y in (("full", "mlm_only", nsp, none), ("mlm_sop", "mlm_only", sop, none),
                                   ("mlm_sop", "full", sop, nsp))]
    return tuple(out)


RECIPE = Recipe(
    name="albert-t5",
    citation=Citation("Lan, Chen, Goodman, Gimpel, Sharma, Soricut", 2020,
                      "ALBERT: A Lite BERT for Self-supervised Learning of Language Representations",
                      "Table 5", "8", "ICLR 2020"),
    variants=(RecipeVariant("mlm_only", "mlm_only", "None"), RecipeVariant("full", "full", "NSP"),
              RecipeVariant("mlm_sop", "mlm_sop", "SOP")),
    scales={
        "smoke": SMOKE,
        "quick": QUICK,
        "paper": Scale("bert-base", HUB_WIKI, "mnli,sst2,squad", seeds=3, finetune_seeds=1,
                       overrides=("optim.max_steps=125000", "optim.batch_size=4096", "optim.lr=0.00176",
                                  "data.seq_len=512", "optim.warmup_frac=0.025"),
                       note="bert-base encoder (no factorised embeddings, no sharing), ALBERT's schedule; "
                            "Wikipedia only; RACE and SQuAD 2.0 not available: the average differs"),
    },
    claims=_claims(),
    note="verified: every number read in the paper's Table 5 text (the issue's averages 79.0/79.2/80.1 agree)",
)
