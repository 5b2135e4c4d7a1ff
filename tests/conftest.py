"""Shared test fixtures: offline environment and a tiny stock-HF BERT checkpoint.

``tiny_checkpoint`` is a directory in the format every checkpoint has (``BertForPreTraining``
safetensors + config.json + tokenizer files): a WordPiece trained on a few fixture sentences and a
2-layer, hidden-32 BERT, untrained. Any test that needs "a checkpoint" can use it.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import pytest  # noqa: E402

TINY_TEXT = [
    "The cat sat on the mat and the dog slept by the door.",
    "Paris is the capital of France and lies on the river Seine.",
    "The company reported higher profits in the third quarter of the year.",
    "A great film with a moving story and fine acting from the whole cast.",
    "The match ended in a draw after the striker missed a late penalty.",
    "Scientists found that the new drug reduced symptoms in most patients.",
    "John Smith moved to London to work for a small bank in the city.",
    "The weather was cold and wet, so the game was put off until Sunday.",
    "Is it true that the Eiffel Tower was built for the world fair in 1889?",
    "Researchers may have found a possible link, but the evidence is weak.",
]


def build_tiny_checkpoint(out_dir, vocab_size: int = 300, hidden: int = 32, max_position: int = 128):
    """Write a tiny untrained BertForPreTraining + WordPiece tokenizer to ``out_dir``; return the path."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertForPreTraining, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(TINY_TEXT * 3, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", sep_token="[SEP]", cls_token="[CLS]",
                                   pad_token="[PAD]", mask_token="[MASK]", model_max_length=max_position,
                                   model_input_names=["input_ids", "token_type_ids", "attention_mask"])
    config = BertConfig(vocab_size=len(fast), hidden_size=hidden, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=2 * hidden, max_position_embeddings=max_position)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = BertForPreTraining(config)
    model.save_pretrained(out_dir)
    fast.save_pretrained(out_dir)
    return out_dir


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny_checkpoint"))


def pytest_collection_modifyitems(config, items):
    """The files that hold slow tests first, each file's tests in their order. The suite runs on two xdist
    workers a file at a time, handed out in this order (pyproject's addopts: ``--no-loadscope-reorder``;
    docs/contributing.md): the slow files (the minutes-long Ray ones among them) are handed out first, in path
    order, and the many short files fill in beside them, instead of xdist's own order (the files with the most
    tests first), which leaves the few-test Ray files to the end of the queue."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: files stay whole and in order
