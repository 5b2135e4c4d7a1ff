"""Devlin et al. 2019, BERT, Table 5: ablation over the pre-training tasks (BERT-base, dev sets).

    python sweeps/reproduce.py bert-t5 --scale smoke

"BERT-base" (MLM + NSP) -> ``full``; "No NSP" (MLM alone) -> ``mlm_only``. The LTR rows need a
left-to-right LM, which is not an objective here. Numbers read in the paper's text (Table 5 as extracted
from the NAACL PDF: BERT-base 84.4 88.4 86.7 92.7 88.5; No NSP 83.9 84.9 86.5 92.6 87.9).
"""

from analysis.paper import PaperContrast
from sweeps.recipes.base import HUB_WIKI, QUICK, SMOKE, Citation, Recipe, RecipeVariant, Scale

_PAPER = {"MNLI-m": (84.4, 83.9), "QNLI": (88.4, 84.9), "MRPC": (86.7, 86.5), "SST-2": (92.7, 92.6),
          "SQuAD": (88.5, 87.9)}

RECIPE = Recipe(
    name="bert-t5",
    citation=Citation("Devlin, Chang, Lee, Toutanova", 2019,
                      "BERT: Pre-training of Deep Bidirectional Transformers for Language Understanding",
                      "Table 5", "8", "NAACL-HLT 2019"),
    variants=(RecipeVariant("full", "full", "BERT-base (MLM + NSP)"),
              RecipeVariant("mlm_only", "mlm_only", "No NSP")),
    scales={
        "smoke": SMOKE,
        "quick": QUICK,
        # BERT's recipe (Sec. 3.1, A.2): batch 256, 1M steps, 90% at length 128 then 10% at 512, Adam peak
        # 1e-4 with 10k warmup steps (1%). BooksCorpus is not on the hub: Wikipedia alone.
        "paper": Scale("bert-base", HUB_WIKI, "mnli,qnli,mrpc,sst2,squad", seeds=3, finetune_seeds=1,
                       overrides=("optim.max_steps=1000000", "optim.phase2_steps=100000",
                                  "optim.phase2_seq_len=512", "optim.batch_size=256", "optim.lr=1e-4",
                                  "optim.warmup_frac=0.01", "data.seq_len=128"),
                       note="bert-base, BERT's schedule; Wikipedia only (no BooksCorpus)"),
    },
    claims=tuple(PaperContrast("full", "mlm_only", task, a, b, verified=True,
                               metric="f1" if task == "SQuAD" else "acc") for task, (a, b) in _PAPER.items()),
    note="verified: all five pairs read in the paper's Table 5 text (page from memory); the paper ran one pretraining seed",
)
