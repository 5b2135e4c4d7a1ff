"""Devlin et al. 2019, BERT, Table 5: ablation over the pre-training tasks (BERT-base, dev sets).

    python sweeps/reproduce.py bert-t5 --scale smoke
    python sweeps/reproduce.py bert-t5 --scale paper --plan --hardware h100

Rows (Sec. 5.1, "Effect of Pre-training Tasks", Table 5, p. 8): "BERT-base" (MLM + NSP) -> ``full``; "No NSP"
-> ``mlm_pairs``: Sec. 5.1 trains it "using the MLM but without the NSP task", keeping "the training data,
fine-tuning scheme and hyperparameters identical to BERT-base", and RoBERTa (Sec. 4.2) reads it as having
"only removed the loss term while still retaining the SEGMENT-PAIR input format": ``mlm_pairs`` is MLM on
exactly ``full``'s pairs (same random negatives), so ``full - mlm_pairs`` is the NSP loss alone. The extra
row ``mlm_only`` (MLM on single segments, --extra-rows) is not the paper's: with ``mlm_pairs`` it
separates the input format (``mlm_pairs - mlm_only``), the confound RoBERTa names. The LTR rows need a
left-to-right LM, which is not an objective here.

Schedule (Sec. 3.1, App. A.2, p. 13): batch 256, 1M steps, 90% at length 128 then 10% at 512, Adam lr 1e-4,
beta1 0.9, beta2 0.999, L2 weight decay 0.01, 10k warmup steps, dropout 0.1; BERT's data keeps short
sequences 10% of the time and masks 80/10/10 (Sec. 3.1, App. A.1). Fine-tuning (App. A.3): batch 32,
3 epochs, the best of 5e-5, 3e-5, 2e-5 on dev. Numbers read in the paper's Table 5 text (BERT-base 84.4
88.4 86.7 92.7 88.5; No NSP 83.9 84.9 86.5 92.6 87.9; MNLI-m, QNLI, MRPC, SST-2 accuracy, SQuAD 1.1 F1):
verified=True, page 8 from the extracted text's page marks.
"""

from analysis.paper import PaperContrast
from sweeps.recipes.base import (HUB_WIKI, QUICK, SMOKE, Citation, PaperCompute, Protocol, Recipe, RecipeVariant,
                                 Scale)

_TOKENS = 9e5 * 256 * 128 + 1e5 * 256 * 512  # one pretraining run's tokens (App. A.2)
_PAPER = {"MNLI-m": (84.4, 83.9), "QNLI": (88.4, 84.9), "MRPC": (86.7, 86.5), "SST-2": (92.7, 92.6),
          "SQuAD": (88.5, 87.9)}  # Table 5 header: MNLI-m, QNLI, MRPC, SST-2 (Acc); SQuAD (F1)

RECIPE = Recipe(
    name="bert-t5",
    citation=Citation("Devlin, Chang, Lee, Toutanova", 2019,
                      "BERT: Pre-training of Deep Bidirectional Transformers for Language Understanding",
                      "Table 5", "8", "NAACL-HLT 2019"),
    variants=(RecipeVariant("full", "full", "BERT-base (MLM + NSP)", source="Sec. 5.1, Table 5; Sec. 3.1, App. A.2"),
              RecipeVariant("mlm_pairs", "mlm_pairs", "No NSP",
                            source="Sec. 5.1 (MLM without the NSP task, data identical); RoBERTa Sec. 4.2: the "
                                   "SEGMENT-PAIR input retained"),
              RecipeVariant("mlm_only", "mlm_only", "extra, not a paper row: No NSP on single segments",
                            source="not in the paper: mlm_pairs - mlm_only is the input format (RoBERTa Sec. 4.2's "
                                   "confound)", extra=True)),
    overrides=("optim.beta1=0.9", "optim.beta2=0.999", "optim.eps=1e-6", "optim.weight_decay=0.01",
               "data.short_seq_prob=0.1"),
    scales={
        "smoke": SMOKE,
        "quick": QUICK,
        "paper": Scale("bert-base", HUB_WIKI, "mnli,qnli,mrpc,sst2,squad", seeds=3, finetune_seeds=5,
                       overrides=("optim.max_steps=1000000", "optim.phase2_steps=100000",
                                  "optim.phase2_seq_len=512", "optim.batch_size=256", "optim.lr=1e-4",
                                  "optim.warmup_frac=0.01", "data.seq_len=128", "finetune.lr_grid=2e-5,3e-5,5e-5",
                                  "finetune.epochs=3", "finetune.batch_size=32"),
                       note="bert-base (110M), BERT's schedule: 1M steps of 256, the last 100k at 512; fine-tuning "
                            "as App. A.3 (3 epochs, batch 32, the best of 2e-5/3e-5/5e-5 on dev); 5 fine-tuning "
                            "seeds (the paper does not say how many runs a score is)"),
    },
    claims=tuple(PaperContrast("full", "mlm_pairs", task, a, b, verified=True,
                               metric="f1" if task == "SQuAD" else "acc") for task, (a, b) in _PAPER.items()),
    differs=("Wikipedia only (BooksCorpus is not on the hub)",
             "a WordPiece trained here on the corpus (BERT's own 30k vocabulary is not used)"),
    protocol=Protocol(0, "not stated", "dev",
                      "Table 5: dev sets, one BERT-base pretraining per row; how many fine-tuning runs a score is "
                      "is not stated (Sec. 4.1 reports the best of several restarts on dev, for BERT-large only)"),
    compute=PaperCompute(110e6, {"full": _TOKENS, "mlm_pairs": _TOKENS, "mlm_only": _TOKENS},
                         "BERT-base 110M parameters (Sec. 3); 1M steps of 256 sequences, 90% at 128 and 10% at 512 "
                         "(App. A.2)"),
    note="verified: all five pairs read in the paper's Table 5 text (MRPC is accuracy there, SQuAD 1.1 F1)",
)
