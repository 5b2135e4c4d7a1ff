"""Liu et al. 2019, RoBERTa, Table 2: the input format, with and without NSP (BERT-base size, dev sets).

    python sweeps/reproduce.py roberta-t2 --scale smoke
    python sweeps/reproduce.py roberta-t2 --scale paper --plan --hardware h100 --mfu 0.4

Section 4.2's formats (read in the paper's text as quoted in a Q&A thread on the section, and in a talk's
slides; see ``SOURCES``): SEGMENT-PAIR+NSP is BERT's input (a pair of segments, each possibly several
sentences, NSP) -> ``full`` on ``nsp_pairs`` (label ``segment_pair``). FULL-SENTENCES packs full sentences
sampled contiguously, crossing document boundaries with an extra separator between documents, no NSP ->
``full_sentences`` on ``full_sentences`` (the step's chunks packed into full rows, a [SEP] between
consecutive chunks). DOC-SENTENCES does not cross document boundaries and, its inputs near a
document's end being shorter, raises the batch size dynamically to keep the tokens per step of
FULL-SENTENCES, no NSP -> ``mlm_only`` on ``single`` (label ``doc_sentences``: one chunk per row, A B and the
document's next token). SENTENCE-PAIR+NSP takes pairs of natural sentences, contiguous in one document or
from two, with a larger batch to keep SEGMENT-PAIR's tokens per step -> ``sentence_pair`` on
``sentence_pairs`` (label ``sentence_pair``): each chunk's sentences paired in order, packed in the chunk's
row, each pair attending to itself only with positions from 0, NSP's negative a piece of another document
as long as the piece it replaces.

What differs from the paper: every format here reads the same chunks per step (the ablation's control),
so DOC-SENTENCES' dynamic batch is not needed (its content tokens per step are FULL-SENTENCES' and the
chunks' next tokens), nor SENTENCE-PAIR's larger batch (packing keeps the same content tokens per step);
rows of full_sentences are cut at the row length, not at a sentence end; a SENTENCE-PAIR piece is a
sentence of the chunk, or a part of one where BERT's chunking cut it.
Numbers read in the paper's Table 2 text (SQuAD 1.1/2.0 F1, MNLI-m, SST-2, RACE): verified=True. The paper
scale's schedule (BERT-base, 1M steps of 256 sequences of 512 tokens) is from memory of Table 2's caption
and Section 3.1 (full-length sequences only).
"""

from analysis.paper import PaperContrast
from sweeps.recipes.base import HUB_WIKI, QUICK, SMOKE, Citation, Recipe, RecipeVariant, Scale

SOURCES = ("https://datascience.stackexchange.com/questions/76872/next-sentence-prediction-in-roberta "
           "(Section 4.2's FULL-SENTENCES and DOC-SENTENCES paragraphs, quoted)",
           "https://speakerdeck.com/himkt/roberta-paper-reading (the four formats; SENTENCE-PAIR and "
           "DOC-SENTENCES increase the batch size)")

# (SQuAD 1.1 F1, SQuAD 2.0 F1, MNLI-m, SST-2, RACE) per format (Table 2)
_PAPER = {"SEGMENT-PAIR": (90.4, 78.7, 84.0, 92.9, 64.2), "SENTENCE-PAIR": (88.7, 76.2, 82.9, 92.1, 63.0),
          "FULL-SENTENCES": (90.4, 79.1, 84.7, 92.5, 64.8), "DOC-SENTENCES": (90.6, 79.7, 84.7, 92.7, 65.6)}
_TASKS = ("SQuAD1.1", "SQuAD2.0", "MNLI-m", "SST-2", "RACE")
_LABELS = {"SEGMENT-PAIR": "segment_pair", "SENTENCE-PAIR": "sentence_pair", "FULL-SENTENCES": "full_sentences",
           "DOC-SENTENCES": "doc_sentences"}
_CONTRASTS = (("SENTENCE-PAIR", "SEGMENT-PAIR"), ("FULL-SENTENCES", "SEGMENT-PAIR"), ("DOC-SENTENCES", "SEGMENT-PAIR"),
              ("DOC-SENTENCES", "FULL-SENTENCES"))


def _claims():
    return tuple(PaperContrast(_LABELS[a], _LABELS[b], task, _PAPER[a][i], _PAPER[b][i], verified=True,
                               metric="f1" if task.startswith("SQuAD") else "acc")
                 for a, b in _CONTRASTS for i, task in enumerate(_TASKS) if task in ("SQuAD1.1", "MNLI-m", "SST-2"))


RECIPE = Recipe(
    name="roberta-t2",
    citation=Citation("Liu, Ott, Goyal, Du, Joshi, Chen, Levy, Lewis, Zettlemoyer, Stoyanov", 2019,
                      "RoBERTa: A Robustly Optimized BERT Pretraining Approach", "Table 2", "5", "arXiv:1907.11692"),
    variants=(RecipeVariant("segment_pair", "full", "SEGMENT-PAIR+NSP"),
              RecipeVariant("sentence_pair", "sentence_pair", "SENTENCE-PAIR+NSP"),
              RecipeVariant("full_sentences", "full_sentences", "FULL-SENTENCES"),
              RecipeVariant("doc_sentences", "mlm_only", "DOC-SENTENCES")),
    scales={
        "smoke": SMOKE,
        "quick": QUICK,
        # RoBERTa Sec. 4: BERT-base, 1M steps of 256 sequences; Sec. 3.1: full-length (512) sequences only; Adam at
        # BERT's 1e-4 with 1% warmup. BookCorpus is not on the hub: Wikipedia alone.
        "paper": Scale("bert-base", HUB_WIKI, "squad,mnli,sst2", seeds=3, finetune_seeds=1,
                       overrides=("optim.max_steps=1000000", "optim.batch_size=256", "data.seq_len=512",
                                  "optim.lr=1e-4", "optim.warmup_frac=0.01"),
                       note="bert-base, 1M steps of 256 x 512; Wikipedia only (no BookCorpus); SQuAD 2.0 and "
                            "RACE not available"),
    },
    claims=_claims(),
    note="verified: numbers read in the paper's Table 2 text; page 5 from a secondary citation; SENTENCE-PAIR+NSP "
         "packs a chunk's sentence pairs in its row (block-diagonal attention) instead of RoBERTa's larger batch",
)
