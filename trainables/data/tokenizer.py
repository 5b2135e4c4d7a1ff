"""WordPiece tokenizers: trained on a sample of the corpus at preparation, or loaded from a directory.

The tokenizer is a ``transformers.BertTokenizerFast`` built from a ``tokenizers`` object (transformers
5 silently ignores ``vocab_file=``), with a post-processor that adds ``[CLS]``/``[SEP]`` and
``token_type_ids``, so that stock ``AutoTokenizer`` / ``pipeline`` code loads it from a checkpoint.

Training is not bit-reproducible across processes (``tokenizers`` assigns the ids of continuation
pieces in hash-map order and breaks ties on them: huggingface/tokenizers#1794), so a corpus is
tokenized once, at preparation, and every trial reads the tokenizer written beside its shards; its
checksum is in the prepared manifest and in every run's record.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import BertTokenizerFast, PreTrainedTokenizerFast

from trainables.data.text import CorpusError, Document

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The project's cache: explicit dir, else $BERT_OBJECTIVES_CACHE, else ~/.cache/bert-objectives."""
    root = cache_dir or os.environ.get("BERT_OBJECTIVES_CACHE") or Path.home() / ".cache" / "bert-objectives"
    return Path(root).expanduser()


def _wrap(tok: Tokenizer, lowercase: bool) -> PreTrainedTokenizerFast:
    return BertTokenizerFast(tokenizer_object=tok, do_lower_case=lowercase, unk_token="[UNK]", sep_token="[SEP]",
                             pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]",
                             model_input_names=["input_ids", "token_type_ids", "attention_mask"])


def train_wordpiece_on(sentences: Iterable[str], vocab_size: int, lowercase: bool = True) -> PreTrainedTokenizerFast:
    """Train a BERT-style WordPiece on an iterable of sentences."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                        min_frequency=2, show_progress=False)
    tok.train_from_iterator(sentences, trainer=trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    return _wrap(tok, lowercase)


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
