"""Clark et al. 2020, ELECTRA, Table 1: ELECTRA-Small vs BERT-Small at equal pretraining compute (GLUE dev).

    python sweeps/reproduce.py electra-t1 --scale quick --plan --hardware h200

ELECTRA-Small -> ``electra``; BERT-Small -> ``full`` (MLM + NSP, as BERT); equal compute is
``optim.budget=flops`` (every variant stops at full's FLOPs at max_steps). The paper's small models:
BERT-Base's hyperparameters with length 128, batch 128, 256 wide, 128-wide token embeddings (Sec. 3.3);
ELECTRA 1M steps and BERT-Small 1.5M (the same training FLOPs, 1.4e18): full gets max_steps=1.5M here and
ELECTRA as many steps as full's FLOPs allow. GLUE score 79.9 vs 75.1 read in the paper's Table 1 text:
verified=True.
"""

from analysis.paper import PaperContrast
from sweeps.recipes.base import HUB_WIKI, QUICK, SMOKE, Citation, Recipe, RecipeVariant, Scale

_FLOPS = ("optim.budget=flops",)

RECIPE = Recipe(
    name="electra-t1",
    citation=Citation("Clark, Luong, Le, Manning", 2020,
                      "ELECTRA: Pre-training Text Encoders as Discriminators Rather Than Generators",
                      "Table 1", "6", "ICLR 2020"),
    variants=(RecipeVariant("electra", "electra", "ELECTRA-Small"), RecipeVariant("full", "full", "BERT-Small")),
    scales={
        "smoke": Scale(**{**SMOKE.__dict__, "overrides": _FLOPS}),
        "quick": Scale(**{**QUICK.__dict__, "overrides": _FLOPS}),
        "paper": Scale("bert-small", HUB_WIKI, "glue", seeds=3, finetune_seeds=1,
                       overrides=_FLOPS + ("model.hidden_size=256", "model.num_layers=12", "model.num_heads=4",
                                           "model.intermediate_size=1024", "optim.batch_size=128",
                                           "optim.max_steps=1500000", "optim.lr=5e-4", "optim.warmup_frac=0.0067",
                                           "data.seq_len=128"),
                       note="ELECTRA-Small's shape (no 128-wide factorised embedding), equal FLOPs; Wikipedia "
                            "only; GLUE here is 5 tasks (the paper's score averages 8)"),
    },
    claims=(PaperContrast("electra", "full", "GLUE", 79.9, 75.1, verified=True),),
    note="verified: 79.9 / 75.1 read in the paper's Table 1 text (Sec. 3.3: BERT-Small 1.5M steps); page unverified",
)
