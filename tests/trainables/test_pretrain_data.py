"""Pair building (NSP negatives, SOP swaps, shared chunks) and masking statistics."""

import numpy as np
import pytest
import torch

from trainables.data.examples import (IGNORE, Batcher, SpecialIds, build_chunks, collate, make_examples)
from trainables.data.masking import mask_batch, step_generator

SP = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=2000, first_regular=5)


def _docs(n_docs=30, seed=0):
    """Documents whose token ids encode (document, position): doc d uses ids 100*d+10 .. in order."""
    rng = np.random.default_rng(seed)
    docs = []
    for d in range(n_docs):
        stream = np.arange(10 + 1000 * d, 10 + 1000 * d + 400, dtype=np.int32)
        cuts = np.sort(rng.choice(np.arange(5, 395), size=int(rng.integers(3, 12)), replace=False))
        docs.append(np.split(stream, cuts))
    return docs


def _doc_of(tokens):
    return set(((np.asarray(tokens) - 10) // 1000).tolist())


def test_nsp_negatives_come_from_another_document_and_positives_are_consecutive():
    docs = _docs()
    chunks = build_chunks(docs, 64, 0.1, np.random.default_rng(0))
    examples = make_examples(chunks, docs, "nsp", SP, np.random.default_rng(1))
    labels = [e.pair_label for e in examples]
    assert 0.4 < np.mean(labels) < 0.6
    for c, e in zip(chunks, examples):
        a, b = e.ids[1:e.len_a - 1], e.ids[e.len_a:-1]
        assert _doc_of(a) == {c.doc}
        if e.pair_label == 1:
            assert c.doc not in _doc_of(b)
        else:
            assert _doc_of(b) == {c.doc} and b[0] > a[-1]  # B follows A (truncation may trim their edges)
            assert np.all(np.diff(a) == 1) and np.all(np.diff(b) == 1)


def test_sop_swaps_half_and_keeps_both_segments_from_one_document():
    docs = _docs()
    chunks = build_chunks(docs, 64, 0.0, np.random.default_rng(0))
    examples = make_examples(chunks, docs, "sop", SP, np.random.default_rng(1))
    assert 0.4 < np.mean([e.pair_label for e in examples]) < 0.6
    for c, e in zip(chunks, examples):
        a, b = e.ids[1:e.len_a - 1], e.ids[e.len_a:-1]
        assert _doc_of(a) == _doc_of(b) == {c.doc}
        assert (a[0] > b[-1]) == (e.pair_label == 1)


def test_variants_share_chunks_so_the_text_is_the_same():
    docs = _docs()
    single = Batcher(docs, "single", SP, seq_len=64, short_seq_prob=0.1, batch_size=4, data_seed=3)
    nsp = Batcher(docs, "nsp", SP, seq_len=64, short_seq_prob=0.1, batch_size=4, data_seed=3)
    sop = Batcher(docs, "sop", SP, seq_len=64, short_seq_prob=0.1, batch_size=4, data_seed=3)
    for b in (single, nsp, sop):
        b.batch(0, 0)
    for s, n, o in zip(single._examples, nsp._examples, sop._examples):
        words = lambda ids: sorted(int(t) for t in ids if t >= 5)  # noqa: E731
        assert words(o.ids) == words(s.ids)  # SOP only reorders; single drops the middle [SEP]
        if n.pair_label == 0:
            assert words(n.ids) == words(s.ids)


def test_batches_are_deterministic_and_bucketed():
    docs = _docs()
    b1 = Batcher(docs, "nsp", SP, seq_len=64, short_seq_prob=0.3, batch_size=4, data_seed=7)
    b2 = Batcher(docs, "nsp", SP, seq_len=64, short_seq_prob=0.3, batch_size=4, data_seed=7)
    for i in (0, 3, 5):
        assert torch.equal(b1.batch(1, i).input_ids, b2.batch(1, i).input_ids)
    assert not torch.equal(b1.batch(0, 0).input_ids, b1.batch(1, 0).input_ids)
    assert b1.padding_fraction(0) < 0.1


@pytest.fixture
def big_batch():
    rng = np.random.default_rng(0)
    docs = [[rng.integers(5, 2000, size=int(rng.integers(5, 30))).astype(np.int32) for _ in range(8)] for _ in range(200)]
    chunks = build_chunks(docs, 128, 0.2, np.random.default_rng(0))
    examples = make_examples(chunks, docs, "nsp", SP, np.random.default_rng(0))
    return collate(examples, list(range(len(examples))), SP.pad)


def test_masking_ratio_split_and_never_special_or_padding(big_batch):
    m = mask_batch(big_batch, SP, ratio=0.15, generator=step_generator(0, 0))
    maskable = (big_batch.input_ids >= SP.first_regular) & (big_batch.attention_mask > 0)
    assert not (m.mlm_mask & ~maskable).any()
    ratio = m.mlm_mask.sum() / maskable.sum()
    assert abs(float(ratio) - 0.15) < 0.01
    changed_to_mask = (m.input_ids == SP.mask)[m.mlm_mask].float().mean()
    unchanged = (m.input_ids == big_batch.input_ids)[m.mlm_mask].float().mean()
    random = 1 - changed_to_mask - unchanged
    assert abs(float(changed_to_mask) - 0.8) < 0.02
    assert abs(float(unchanged) - 0.1) < 0.02 and abs(float(random) - 0.1) < 0.02
    assert torch.equal(m.mlm_labels, big_batch.input_ids[m.mlm_mask])
    assert torch.equal(m.input_ids[~m.mlm_mask], big_batch.input_ids[~m.mlm_mask])


def test_masking_is_a_function_of_the_generator_and_static_keys_on_the_example(big_batch):
    a = mask_batch(big_batch, SP, ratio=0.3, generator=step_generator(1, 5))
    b = mask_batch(big_batch, SP, ratio=0.3, generator=step_generator(1, 5))
    c = mask_batch(big_batch, SP, ratio=0.3, generator=step_generator(1, 6))
    assert torch.equal(a.input_ids, b.input_ids) and not torch.equal(a.input_ids, c.input_ids)
    s1 = mask_batch(big_batch, SP, ratio=0.3, static_seed=1)
    rows = torch.tensor([3, 1])
    sub = type(big_batch)(*(t[rows] for t in big_batch))
    s2 = mask_batch(sub, SP, ratio=0.3, static_seed=1)
    assert torch.equal(s1.mlm_mask[rows], s2.mlm_mask)  # same example, same mask, whatever the batch


def test_pair_label_is_ignored_without_pairs():
    docs = _docs(3)
    chunks = build_chunks(docs, 64, 0.0, np.random.default_rng(0))
    assert all(e.pair_label == IGNORE for e in make_examples(chunks, docs, "single", SP, np.random.default_rng(0)))
