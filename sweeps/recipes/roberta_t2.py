"""Liu et al. 2019, RoBERTa, Table 2: four input formats (BERT-base size, BookCorpus + Wikipedia, dev).

    python sweeps/reproduce.py --list      # listed; running it exits 2

SEGMENT-PAIR, SENTENCE-PAIR (with NSP), FULL-SENTENCES and DOC-SENTENCES (without) are input formats,
which this repository does not implement as such: listed with its numbers, not run (no stand-in variants).
Numbers read in the paper's Table 2 text (SQuAD 1.1/2.0 F1, MNLI-m, SST-2, RACE): verified=True.
"""

from analysis.paper import PaperContrast
from sweeps.recipes.base import Citation, Recipe, RecipeVariant

# (SQuAD 2.0 F1, MNLI-m, SST-2, RACE) per format (Table 2; SQuAD 1.1 F1: 90.4, 88.7, 90.4, 90.6)
_PAPER = {"SEGMENT-PAIR": (78.7, 84.0, 92.9, 64.2), "SENTENCE-PAIR": (76.2, 82.9, 92.1, 63.0),
          "FULL-SENTENCES": (79.1, 84.7, 92.5, 64.8), "DOC-SENTENCES": (79.7, 84.7, 92.7, 65.6)}
_TASKS = ("SQuAD2.0", "MNLI-m", "SST-2", "RACE")

RECIPE = Recipe(
    name="roberta-t2",
    citation=Citation("Liu, Ott, Goyal, Du, Joshi, Chen, Levy, Lewis, Zettlemoyer, Stoyanov", 2019,
                      "RoBERTa: A Robustly Optimized BERT Pretraining Approach", "Table 2", "5", "arXiv:1907.11692"),
    variants=tuple(RecipeVariant(f.lower(), "", f) for f in _PAPER),
    scales={},
    claims=tuple(PaperContrast("doc-sentences", "segment-pair", t, _PAPER["DOC-SENTENCES"][i],
                               _PAPER["SEGMENT-PAIR"][i], verified=True) for i, t in enumerate(_TASKS)),
    note="verified: numbers read in the paper's Table 2 text; page 5 from a secondary citation",
    not_runnable="roberta-t2: RoBERTa's input formats (SEGMENT-PAIR, SENTENCE-PAIR, FULL-SENTENCES, DOC-SENTENCES) "
                 "are not implemented as input formats yet",
)
