"""Samples (chunks, NSP negatives, SOP swaps, trimming) on a prepared corpus, and masking statistics."""

import numpy as np
import pytest
import torch

from trainables.presets import build_config
from trainables.data.batches import SpecialIds, layout, next_token
from trainables.data.masking import hash_uniform, mask_arrays
from trainables.data.prepare import open_prepared
from trainables.data.samples import IGNORE, Samples, chunk_lengths

SP = SpecialIds(pad=0, cls=2, sep=3, mask=4, vocab_size=2000, first_regular=5)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    cfg = build_config("smoke", "full", ["data.corpus=synthetic", "data.max_documents=120",
                                         f"data.cache_dir={tmp_path_factory.mktemp('c')}"])
    return open_prepared(cfg)


def _doc_span(corpus, doc):
    s0, s1 = corpus.documents[doc], corpus.documents[doc + 1]
    return int(corpus.sentences[s0]), int(corpus.sentences[s1])


def test_chunks_lie_in_their_document_in_order_and_fit_the_sequence(corpus):
    chunks = Samples(corpus, seq_len=32, short_seq_prob=0.2, batch_size=4, data_seed=0, cache=False).chunks(0)
    assert set(np.unique(chunks["doc"])) == set(corpus.train_docs)  # every training document is used
    for c in chunks:
        lo, hi = _doc_span(corpus, int(c["doc"]))
        assert lo <= c["a0"] <= c["a1"] <= c["b0"] <= c["b1"] <= hi
        assert (c["a1"] - c["a0"]) + (c["b1"] - c["b0"]) <= 32 - 3
    for doc in np.unique(chunks["doc"]):
        mine = chunks[chunks["doc"] == doc]
        assert np.all(mine["a0"][1:] >= mine["b1"][:-1])  # consecutive, never overlapping


def test_nsp_negatives_come_from_another_document_and_positives_follow_a(corpus):
    chunks = Samples(corpus, seq_len=32, short_seq_prob=0.1, batch_size=4, data_seed=3, cache=False).chunks(0)
    labelled = chunks[chunks["nsp"] != IGNORE]
    assert 0.4 < labelled["nsp"].mean() < 0.6
    for c in labelled:
        if c["nsp"] == 1:
            lo, hi = _doc_span(corpus, int(c["doc"]))
            assert not (lo <= c["r0"] < hi)  # another document
            assert 0 < c["r1"] - c["r0"] <= max(c["b1"] - c["b0"], 1)
        else:
            assert (c["r0"], c["r1"]) == (c["b0"], c["b1"]) and c["b0"] >= c["a1"]
    assert 0.4 < labelled["sop"].mean() < 0.6


def test_nsp_random_segments_have_the_length_of_b_so_length_carries_no_label(corpus):
    """B' is B's length (from a document with room for it): every nsp_pairs row is as long as its
    sop_pairs row, so row length cannot predict NSP and NSP batches are as often unpadded as SOP's."""
    samples = Samples(corpus, seq_len=32, short_seq_prob=0.1, batch_size=4, data_seed=5, cache=False)
    chunks = samples.chunks(0)
    neg = chunks[chunks["nsp"] == 1]
    assert len(neg) > 50
    assert np.array_equal(neg["r1"] - neg["r0"], neg["b1"] - neg["b0"])  # before: cut at the other document's end
    for c in neg:  # B' lies inside one other document
        s = int(np.searchsorted(np.asarray(corpus.sentences), c["r0"], side="right")) - 1
        doc = int(np.searchsorted(np.asarray(corpus.documents), s, side="right")) - 1
        lo, hi = _doc_span(corpus, doc)
        assert doc != c["doc"] and lo <= c["r0"] < c["r1"] <= hi
    sp = SpecialIds(0, 2, 3, 4, corpus.manifest["vocab_size"], 5)
    unpadded = {"nsp_pairs": 0, "sop_pairs": 0}
    for i in range(samples.batches_in_epoch(0)):
        idx, rows = samples.batch_chunks(0, i)
        nsp, sop = (layout(corpus, rows, f, sp, idx) for f in ("nsp_pairs", "sop_pairs"))
        assert np.array_equal(nsp.attention_mask.sum(1), sop.attention_mask.sum(1))
        for f, laid in (("nsp_pairs", nsp), ("sop_pairs", sop)):
            unpadded[f] += bool(laid.attention_mask.all())
    assert unpadded["nsp_pairs"] == unpadded["sop_pairs"]


def _head_tail(offsets, start, end):
    """Tokens from the last sentence start at or before ``start`` to it; from ``end`` to the next boundary."""
    before = offsets[np.searchsorted(offsets, start, side="right") - 1]
    return start - before, offsets[np.searchsorted(offsets, end, side="left")] - end


def test_nsp_random_segments_are_placed_as_b_relative_to_sentence_boundaries(corpus):
    """B' is cut at B's offsets into and before a run of whole sentences of another document (head, tail),
    so it starts at a sentence start exactly when B does and ends at a boundary exactly when B does; the same
    for sentence_pairs' second pieces. (Before, B' always started at a sentence start: head 0.)"""
    samples = Samples(corpus, seq_len=32, short_seq_prob=0.1, batch_size=4, data_seed=5, cache=False)
    offsets = np.asarray(corpus.sentences)
    chunks, (pairs, _) = samples.chunks(0), samples.sentence_pairs(0)
    for rows in (chunks, pairs):
        neg = rows[rows["nsp"] == 1]
        b, r = _head_tail(offsets, neg["b0"], neg["b1"]), _head_tail(offsets, neg["r0"], neg["r1"])
        assert np.array_equal(b[0], r[0]) and np.array_equal(b[1], r[1])  # this corpus has a run for every row
        assert np.array_equal(neg["r1"] - neg["r0"], neg["b1"] - neg["b0"])
        assert 0.2 < np.mean(b[0] > 0) < 0.8 and np.mean(b[1] > 0) > 0.1  # B opens or ends mid-sentence often
        sent = np.searchsorted(offsets, neg["r0"], side="right") - 1
        doc = np.searchsorted(np.asarray(corpus.documents), sent, side="right") - 1
        assert not np.any(doc == (neg["doc"] if "doc" in neg.dtype.names else chunks["doc"][neg["chunk"]]))


def test_formats_lay_out_the_same_chunk(corpus):
    samples = Samples(corpus, seq_len=32, short_seq_prob=0.1, batch_size=4, data_seed=1, cache=False)
    idx, rows = samples.batch_chunks(0, 0)
    sp = SpecialIds(0, 2, 3, 4, corpus.manifest["vocab_size"], 5)
    single, nsp, sop = (layout(corpus, rows, f, sp, idx) for f in ("single", "nsp_pairs", "sop_pairs"))
    words = lambda ids: sorted(int(t) for t in ids if t >= 5)  # noqa: E731
    more = next_token(corpus, rows)
    for i, c in enumerate(rows):
        # SOP only reorders; single drops the middle [SEP] and holds the document's next token in its place
        ours = words(single.input_ids[i])
        theirs = words(list(sop.input_ids[i]) + ([int(corpus.span(int(c["b1"]), int(c["b1"]) + 1)[0])] if more[i] else []))
        assert ours == theirs
        if c["nsp"] == 0:
            assert words(nsp.input_ids[i]) == words(sop.input_ids[i])
        assert (single.token_type_ids[i] == 0).all() and nsp.token_type_ids[i].max() == 1
    assert (single.pair_labels == IGNORE).all() and list(nsp.pair_labels) == list(rows["nsp"])


def test_batches_are_deterministic_bucketed_and_follow_the_seed(corpus):
    a = Samples(corpus, seq_len=32, short_seq_prob=0.3, batch_size=4, data_seed=7, cache=False)
    b = Samples(corpus, seq_len=32, short_seq_prob=0.3, batch_size=4, data_seed=7, cache=False)
    c = Samples(corpus, seq_len=32, short_seq_prob=0.3, batch_size=4, data_seed=8, cache=False)
    assert np.array_equal(a.order(1), b.order(1)) and not np.array_equal(a.order(0), a.order(1))
    assert not np.array_equal(a.order(0)[:5], c.order(0)[:5])
    lengths = chunk_lengths(a.chunks(0))
    spread = np.mean([np.ptp(lengths[batch]) for batch in a.order(0)])
    assert spread < 0.5 * np.mean([np.ptp(lengths[i:i + 4]) for i in range(0, len(lengths) - 4, 4)])


@pytest.fixture
def big_batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 2000, size=(400, 96))
    lengths = rng.integers(20, 97, size=400)
    attention = (np.arange(96)[None, :] < lengths[:, None]).astype(np.int64)
    ids = np.where(attention > 0, ids, 0)
    ids[:, 0], ids[np.arange(400), lengths - 1] = 2, 3
    return ids, attention


def test_masking_ratio_split_and_never_special_or_padding(big_batch):
    ids, attention = big_batch
    masked, positions, labels = mask_arrays(ids, attention, first_regular=5, vocab_size=2000, mask_id=4, ratio=0.15,
                                            seed=0, keys=np.arange(len(ids)))
    rows = np.arange(len(ids))[:, None]
    keep = labels != IGNORE
    chosen = np.zeros_like(ids, bool)
    chosen[np.broadcast_to(rows, positions.shape)[keep], positions[keep]] = True
    maskable = (ids >= 5) & (attention > 0)
    assert not (chosen & ~maskable).any()
    assert abs(chosen.sum() / maskable.sum() - 0.15) < 0.01
    to_mask = (masked == 4)[chosen].mean()
    unchanged = (masked == ids)[chosen].mean()
    assert abs(to_mask - 0.8) < 0.02 and abs(unchanged - 0.1) < 0.02 and abs(1 - to_mask - unchanged - 0.1) < 0.02
    assert np.array_equal(labels[keep], ids[np.broadcast_to(rows, positions.shape)[keep], positions[keep]])
    assert np.array_equal(masked[~chosen], ids[~chosen])


def test_whole_word_masking_masks_whole_words_within_the_token_budget(big_batch):
    ids, attention = big_batch
    continuation = np.zeros(2000, bool)
    continuation[1000:] = True  # ids >= 1000 are '##' pieces: they continue the word before them
    masked, positions, labels = mask_arrays(ids, attention, first_regular=5, vocab_size=2000, mask_id=4, ratio=0.15,
                                            seed=1, keys=np.arange(len(ids)), strategy="whole_word",
                                            continuation=continuation)
    chosen = np.zeros_like(ids, bool)
    keep = labels != IGNORE
    chosen[np.broadcast_to(np.arange(len(ids))[:, None], positions.shape)[keep], positions[keep]] = True
    maskable = (ids >= 5) & (attention > 0)
    k = np.maximum(np.round(maskable.sum(1) * 0.15), 1)
    assert (chosen.sum(1) <= k).all() and chosen.sum() > 0.8 * k.sum()
    starts = ~continuation[ids] & maskable
    for r in range(50):
        for t in range(1, ids.shape[1]):
            if maskable[r, t] and not starts[r, t]:  # a '##' piece is masked exactly when its word is
                assert chosen[r, t] == chosen[r, t - 1]


def test_masks_are_a_pure_function_of_the_key(big_batch):
    ids, attention = big_batch
    kw = dict(first_regular=5, vocab_size=2000, mask_id=4, ratio=0.3)
    a = mask_arrays(ids, attention, seed=1, keys=np.arange(400), **kw)
    b = mask_arrays(ids[::-1], attention[::-1], seed=1, keys=np.arange(400)[::-1], **kw)  # rows shuffled
    assert np.array_equal(a[0], b[0][::-1])
    sub = mask_arrays(ids[:, :80], attention[:, :80], seed=1, keys=np.arange(400), **kw)  # other padding width
    short = attention[:, 80:].sum(1) == 0
    assert np.array_equal(sub[0][short], a[0][short, :80])
    c = mask_arrays(ids, attention, seed=2, keys=np.arange(400), **kw)
    assert not np.array_equal(a[0], c[0])
    u = hash_uniform(0, np.arange(1000), np.arange(64), 0)
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01


def test_pair_label_is_ignored_without_pairs(corpus):
    samples = Samples(corpus, seq_len=32, short_seq_prob=0.0, batch_size=4, data_seed=0, cache=False)
    idx, rows = samples.batch_chunks(0, 0)
    laid = layout(corpus, rows, "single", SP, idx)
    assert torch.equal(torch.from_numpy(laid.pair_labels), torch.full((4,), IGNORE))


@pytest.mark.parametrize("fracs, expect", [((1.0, 0.0), (1.0, 0.0)), ((0.8, 0.1), (0.8, 0.1)), (None, (0.8, 0.1))])
def test_the_configs_masking_fractions_reach_the_training_batches(tmp_path, fracs, expect):
    """objective.mask_token_frac / random_token_frac through the config to the batches the loop trains on:
    Wettig et al.'s all-[MASK] (1.0 / 0.0) masks every chosen position; the default is BERT's 80/10/10."""
    from trainables.data.batches import Loader, Position
    from trainables.pretrain import build_pretraining_data

    over = ["data.corpus=synthetic", "data.max_documents=120", f"data.cache_dir={tmp_path}", "optim.batch_size=32"]
    if fracs:
        over += [f"objective.mask_token_frac={fracs[0]}", f"objective.random_token_frac={fracs[1]}"]
    cfg = build_config("smoke", "full_sentences", over)
    data = build_pretraining_data(cfg)
    shown, originals = [], []
    for _, step in Loader(data.steps, Position(0, 0, 0, 0), 6):
        b = step.batch
        keep = b.mlm_labels != IGNORE
        rows = torch.arange(len(b.input_ids))[:, None].expand_as(b.mlm_positions)
        shown.append(b.input_ids[rows[keep], b.mlm_positions[keep]])
        originals.append(b.mlm_labels[keep])
    shown, originals = torch.cat(shown), torch.cat(originals)
    mask_share = (shown == data.sp.mask).double().mean().item()
    kept = ((shown == originals) & (shown != data.sp.mask)).double().mean().item()
    assert len(shown) > 500
    assert abs(mask_share - expect[0]) < 0.04
    assert abs(1 - mask_share - kept - expect[1]) < 0.04  # replaced by another token (random)
    if expect[0] == 1.0:
        assert mask_share == 1.0 and kept == 0.0
