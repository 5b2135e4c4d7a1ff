"""The three one-chunk-per-row input formats lay out and mask byte-identical batches across changes to the batch code.

The hashes below were computed at commit 3ddcbdb (before RoBERTa's formats were added), single's and the
evaluation sets' again when single began to hold each chunk's next token (issue 21, item 4: every format
trains the last position; nsp_pairs and sop_pairs kept their hashes through that change), and single's (its
batches and its evaluation set) once more when single's rows that end their document got an attended filler
(issue 29: every single row as long as its pair rows). The evaluation sets are hashed per format since then;
nsp_pairs' and sop_pairs' were computed on the commit before that change and held through it. nsp_pairs'
(its batches and its evaluation set) again when NSP's B' began to be placed as B is relative to sentence
boundaries (issue 28, item 7; single and sop_pairs kept theirs): every tensor of
the first steps' masked global batches (phase 1 and BERT's phase 2), one rank's share under 2 workers
with accumulation, the step's cost (real tokens, shape), the planned budgets and per-step counts, and
the held-out evaluation sets, on the synthetic corpus with a fixed-order vocabulary. A change that moves any number of the main job or the known-answer run
changes one of them. Recompute (``python tests/data/test_batches_regression.py``) only for an intended
change of the data, and say so in the commit.
"""

import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest

from trainables.budget import plan_budget, step_counts
from trainables.data.batches import Position, positions_from
from trainables.intrinsic import build_eval_sets
from trainables.presets import build_config
from trainables.pretrain import build_pretraining_data

FORMAT_VARIANTS = {"nsp_pairs": "full", "single": "mlm_only", "sop_pairs": "mlm_sop"}
EXPECTED = {
    "nsp_pairs": "7b9a4a1c106c61b8",
    "single": "9caeb138f1eeee08",
    "sop_pairs": "99c56c0496786e81",
    "eval_nsp_pairs": "cf0c0850c0cb3c7a",
    "eval_single": "e907ef395203be2c",
    "eval_sop_pairs": "3203163762fd1020",
}


def fixed_tokenizer(cache) -> str:
    """A WordPiece whose vocabulary is every word of the synthetic corpus, sorted (specials first): a trained
    WordPiece's vocabulary differs from one training to the next (ties), which would move every id."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    from trainables.data.sources import synthetic_documents
    from trainables.data.tokenizer import SPECIAL_TOKENS, _wrap

    out = Path(cache) / "fixed_tokenizer"
    if not (out / "tokenizer.json").exists():
        pre, norm = pre_tokenizers.BertPreTokenizer(), normalizers.BertNormalizer(lowercase=True)
        words = sorted({w for d in synthetic_documents() for s in d.sentences
                        for w, _ in pre.pre_tokenize_str(norm.normalize_str(s))})
        vocab = {w: i for i, w in enumerate(list(SPECIAL_TOKENS) + words + [f"filler{i}" for i in range(300)])}
        tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
        tok.normalizer, tok.pre_tokenizer, tok.decoder = norm, pre, decoders.WordPiece(prefix="##")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
        _wrap(tok, True).save_pretrained(str(out))
    return str(out)


def _cfg(cache, variant, *extra):
    return build_config("smoke", variant, ["data.corpus=synthetic", "data.max_documents=80", f"data.cache_dir={cache}",
                                           f"data.tokenizer_dir={fixed_tokenizer(cache)}", "run.tensorboard=false", "data.seq_len=32", "optim.max_steps=6",
                                           "optim.phase2_steps=2", "optim.phase2_seq_len=64", "run.seed=1", *extra])


def _update(h, step):
    for t in step.batch[:6]:
        h.update(np.ascontiguousarray(t.numpy()).tobytes())
    h.update(repr((bool(step.batch.unpadded), step.rows.tolist(), step.n_tokens, tuple(step.shape))).encode())


def format_digest(cache, fmt: str) -> str:
    h = hashlib.sha256()
    variant = FORMAT_VARIANTS[fmt]
    data = build_pretraining_data(_cfg(cache, variant))
    steps = data.steps
    for p in positions_from(steps, Position(0, 0, 0, 0), 6):
        _update(h, steps.step(p))
        _update(h, steps.step(p, rank=1, world=2, accum=2))
    h.update(repr(tuple(step_counts(steps, 6))).encode())
    for budget in ("tokens", "flops"):
        cfg = _cfg(cache, variant, f"optim.budget={budget}")
        h.update(repr(tuple(plan_budget(cfg, build_pretraining_data(cfg).steps, data.sp.vocab_size))).encode())
    return h.hexdigest()[:16]


def eval_digest(cache, fmt: str) -> str:
    data = build_pretraining_data(_cfg(cache, "full"))
    sets = build_eval_sets(data.corpus, data.sp, seq_len=32, batch_size=8, n_batches=2, eval_mask_ratio=0.15)
    h = hashlib.sha256()
    for kind in (sets.masked, sets.plain):
        for b in kind[fmt]:
            for t in b[:6]:
                h.update(np.ascontiguousarray(t.numpy()).tobytes())
    return h.hexdigest()[:16]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("regression")


@pytest.mark.parametrize("fmt", list(FORMAT_VARIANTS))
def test_the_original_formats_batches_are_unchanged(cache, fmt):
    assert format_digest(cache, fmt) == EXPECTED[fmt]


@pytest.mark.parametrize("fmt", list(FORMAT_VARIANTS))
def test_the_evaluation_sets_are_unchanged(cache, fmt):
    assert eval_digest(cache, fmt) == EXPECTED[f"eval_{fmt}"]


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for f in FORMAT_VARIANTS:
            print(f, format_digest(tmp, f))
        for f in FORMAT_VARIANTS:
            print(f"eval_{f}", eval_digest(tmp, f))
    sys.exit(0)
