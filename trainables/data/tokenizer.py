"""WordPiece tokenizers: trained on a sample of the corpus at preparation, or loaded from a directory.

The tokenizer is a ``transformers.BertTokenizerFast`` built from a ``tokenizers`` object (transformers
5 silently ignores ``vocab_file=``), with a post-processor that adds ``[CLS]``/``[SEP]`` and
``token_type_ids``, so that stock ``AutoTokenizer`` / ``pipeline`` code loads it from a checkpoint.

Training is bit-reproducible across processes and machines. ``tokenizers`` alone is not: it numbers
the continuation characters (``##x``) in hash-map order and breaks merge ties on those numbers
(huggingface/tokenizers#1794), so in another process many pieces get other ids (the built-in corpus) or
other pieces are learned (a corpus with many ties), and with them every shard, initial embedding row and
score change. ``train_wordpiece_on`` fixes those numbers before the merges and
renumbers the result in a canonical order (``canonical_vocab``); WordPiece's greedy longest match reads
the vocabulary as a set, so the order changes no segmentation. ``TOKENIZER_VERSION`` is part of the prepared folder's fingerprint, so a folder prepared with the old
ids is never silently reused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable, Sequence

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import BertTokenizerFast, PreTrainedTokenizerFast

from trainables.data.text import CorpusError, Document

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
TOKENIZER_VERSION = 2  # 2: continuation pieces numbered before the merges, ids in canonical order; 1: hash-map order


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The project's cache: explicit dir, else $BERT_OBJECTIVES_CACHE, else ~/.cache/bert-objectives."""
    root = cache_dir or os.environ.get("BERT_OBJECTIVES_CACHE") or Path.home() / ".cache" / "bert-objectives"
    return Path(root).expanduser()


def _wrap(tok: Tokenizer, lowercase: bool) -> PreTrainedTokenizerFast:
    return BertTokenizerFast(tokenizer_object=tok, do_lower_case=lowercase, unk_token="[UNK]", sep_token="[SEP]",
                             pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]",
                             model_input_names=["input_ids", "token_type_ids", "attention_mask"])


def _bert_tokenizer(vocab: dict[str, int] | None, lowercase: bool) -> Tokenizer:
    """BERT's WordPiece pipeline (normalizer, pre-tokenizer, decoder) around ``vocab`` (None: untrained)."""
    model = models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##") if vocab else \
        models.WordPiece(unk_token="[UNK]")
    tok = Tokenizer(model)
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def _train_pass(sentences: Iterable[str], vocab_size: int, lowercase: bool, first: Sequence[str]) -> dict[str, int]:
    tok = _bert_tokenizer(None, lowercase)
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(first), min_frequency=2,
                                        show_progress=False)
    tok.train_from_iterator(sentences, trainer=trainer)
    return tok.get_vocab(with_added_tokens=False)


def train_wordpiece_on(sentences: Iterable[str] | Callable[[], Iterable[str]], vocab_size: int,
                       lowercase: bool = True) -> PreTrainedTokenizerFast:
    """Train a BERT-style WordPiece on sentences (an iterable, or a function giving them anew: they are read
    twice), the same pieces and ids in every process.

    ``tokenizers`` numbers the continuation characters (``##x``) in hash-map order, and its merges break
    count ties on those numbers, so on its own it can learn other pieces in another process. The first
    pass finds the continuation characters (every one gets a piece); the second trains with them listed
    right after the special tokens, in code-point order, so every id the merges compare is fixed. The
    result is renumbered by ``canonical_vocab``."""
    again = sentences if callable(sentences) else (lambda items=list(sentences): items)
    first = _train_pass(again(), vocab_size, lowercase, SPECIAL_TOKENS)
    continuations = sorted(t for t in first if t.startswith("##") and len(t) == 3)
    vocab = _train_pass(again(), vocab_size, lowercase, [*SPECIAL_TOKENS, *continuations])
    tok = _bert_tokenizer(canonical_vocab(vocab), lowercase)
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    return _wrap(tok, lowercase)


def canonical_vocab(vocab: dict[str, int]) -> dict[str, int]:
    """The same pieces numbered in an order that depends on nothing but the pieces: the special tokens in
    ``SPECIAL_TOKENS``' order (ids 0-4, as the trainer gives them), then word-initial pieces, then ``##``
    continuations, each sorted by code point."""
    rest = sorted((t for t in vocab if t not in SPECIAL_TOKENS), key=lambda t: (t.startswith("##"), t))
    return {t: i for i, t in enumerate([t for t in SPECIAL_TOKENS if t in vocab] + rest)}


def train_wordpiece(docs: list[Document], vocab_size: int, lowercase: bool = True) -> PreTrainedTokenizerFast:
    """Train a BERT-style WordPiece on the documents' sentences."""
    return train_wordpiece_on((s for d in docs for s in d.sentences), vocab_size, lowercase)


def load_tokenizer(path: str | os.PathLike) -> PreTrainedTokenizerFast:
    """Load a tokenizer directory (ours or any BERT WordPiece saved by transformers)."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise CorpusError(f"tokenizer directory {str(p)!r} does not exist")
    if not (p / "tokenizer.json").exists():
        raise CorpusError(f"tokenizer directory {str(p)!r} has no tokenizer.json; it needs the files written by "
                          "tokenizer.save_pretrained (tokenizer.json, tokenizer_config.json)")
    tok = PreTrainedTokenizerFast.from_pretrained(str(p))
    missing = [t for t in SPECIAL_TOKENS if tok.convert_tokens_to_ids(t) in (None, tok.unk_token_id) and t != "[UNK]"]
    if missing:
        raise CorpusError(f"tokenizer {str(p)!r} lacks the special tokens {missing}; a BERT WordPiece vocabulary is needed")
    return _wrap(tok.backend_tokenizer, lowercase=bool(getattr(tok, "do_lower_case", True)))
