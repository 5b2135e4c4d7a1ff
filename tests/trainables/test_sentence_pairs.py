"""RoBERTa's SENTENCE-PAIR (input format sentence_pairs): pairs of single sentences, packed one chunk per row.

Properties: a packed pair is encoded exactly as if it were alone in its row (block-diagonal attention, positions
from 0, its own token types, its label read at its own [CLS]), and the test would fail if pairs saw each other;
a chunk's pairs are its sentences, in order, each token once; NSP's replacement has the replaced piece's length
(no length shortcut) and comes from another document; the objectives that run their own encoder pass refuse the
format; it pretrains with finite losses. The controls (same chunks per step, same content and masked positions
per row as the other formats) are in tests/data/test_format_controls.py.
"""

import numpy as np
import pytest
import torch

from trainables.config import ConfigError
from trainables.data.batches import Position, positions_from
from trainables.data.samples import IGNORE
from trainables.forward import forward_pretraining, key_padding_mask
from trainables.model import build_model
from trainables.presets import build_config
from trainables.pretrain import build_pretraining_data, run_pretraining


def _cfg(cache, *extra, variant="sentence_pair"):
    return build_config("smoke", variant, ["data.corpus=synthetic", "data.max_documents=24", f"data.cache_dir={cache}",
                                           "run.tensorboard=false", "data.seq_len=32", "optim.max_steps=4",
                                           "optim.phase2_steps=0", *extra])


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return build_pretraining_data(_cfg(tmp_path_factory.mktemp("sp")))


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_each_packed_pair_is_encoded_as_if_it_were_alone(data, attn):
    cfg = _cfg("/unused")
    bert = build_model(cfg.model, data.sp.vocab_size, data.sp.pad, seed=3).eval()
    bert.set_attn_implementation(attn)
    batch = data.steps.step(Position(0, 0, 0, 0)).batch
    assert batch.blocks is not None and not batch.unpadded
    with torch.no_grad():
        packed = forward_pretraining(bert, batch)
        leaky = bert.bert(input_ids=batch.input_ids, token_type_ids=batch.token_type_ids,
                          attention_mask=key_padding_mask(bert.config, batch.attention_mask),
                          position_ids=batch.position_ids).last_hidden_state
    checked = several = 0
    for r in range(len(batch.input_ids)):
        pairs = int(batch.blocks[r].max()) + 1
        several += pairs > 1
        for q in range(pairs):
            at = (batch.blocks[r] == q).nonzero().flatten()
            assert int(batch.pair_positions[r, q]) == int(at[0])  # the pair's label is read at its own [CLS]
            assert torch.equal(batch.position_ids[r, at], torch.arange(len(at)))
            with torch.no_grad():
                alone = bert.bert(input_ids=batch.input_ids[r, at][None], token_type_ids=batch.token_type_ids[r, at][None])
            assert torch.allclose(packed.hidden[r, at], alone.last_hidden_state[0], atol=1e-5), (r, q)
            logits = bert.cls.seq_relationship(alone.pooler_output)[0]
            assert torch.allclose(packed.pair_logits[r, q], logits, atol=1e-5), (r, q)
            if pairs > 1:  # the same pair, attending to its row's other pairs, is encoded differently
                assert not torch.allclose(leaky[r, at], alone.last_hidden_state[0], atol=1e-3)
            checked += 1
    assert several >= 2 and checked > len(batch.input_ids)


def test_a_chunks_pairs_are_its_sentences_in_order_each_token_once(data):
    corpus, samples = data.corpus, data.steps.phases[0]
    starts = set(np.asarray(corpus.sentences).tolist())
    chunks = samples.chunks(0)
    pairs, first = samples.sentence_pairs(0)
    assert np.all(np.diff(pairs["chunk"]) >= 0) and first[-1] == len(pairs)
    alone = 0
    for i, c in enumerate(chunks[:200]):
        row = pairs[first[i]:first[i + 1]]
        pieces = [(int(q[s0]), int(q[s1])) for q in row for s0, s1 in (("a0", "a1"), ("b0", "b1")) if q[s1] > q[s0]]
        tokens = [t for s0, s1 in pieces for t in range(s0, s1)]
        want = list(range(int(c["a0"]), int(c["a1"]))) + list(range(int(c["b0"]), int(c["b1"])))
        assert tokens == want, i  # every content token once, in the chunk's order
        for s0, s1 in pieces:  # a piece is cut at sentence starts and at A's and B's ends only
            assert not any(s0 < s < s1 for s in starts), (i, s0, s1)
            assert s0 in starts or s0 in (int(c["a0"]), int(c["b0"]))
        alone += int((row["nsp"] == IGNORE).sum())
        assert ((row["nsp"] == IGNORE) == (row["b1"] == row["b0"])).all()  # only an odd last piece stands alone
    assert alone > 0


def test_nsp_replaces_half_of_the_second_pieces_with_as_long_a_piece_of_another_document(data):
    corpus, samples = data.corpus, data.steps.phases[0]
    pairs, _ = samples.sentence_pairs(0)
    chunks = samples.chunks(0)
    paired = pairs[pairs["nsp"] != IGNORE]
    assert 0.4 < paired["nsp"].mean() < 0.6
    same = paired[paired["nsp"] == 0]
    assert np.array_equal(same["r0"], same["b0"]) and np.array_equal(same["r1"], same["b1"])
    neg = paired[paired["nsp"] == 1]
    assert np.array_equal(neg["r1"] - neg["r0"], neg["b1"] - neg["b0"])  # length says nothing about the label
    docs = np.searchsorted(np.asarray(corpus.documents),
                           np.searchsorted(np.asarray(corpus.sentences), neg["r0"], side="right") - 1, side="right") - 1
    assert (docs != chunks["doc"][neg["chunk"]]).all()


def test_positions_restart_per_pair_so_this_format_trains_short_positions_only(data):
    """By definition (RoBERTa): each input is one pair of sentences from position 0; stated in the report."""
    longest = 0
    for p in positions_from(data.steps, Position(0, 0, 0, 0), 4):
        b = data.steps.step(p).batch
        longest = max(longest, int(b.position_ids[b.attention_mask > 0].max()))
    assert longest < 32 - 1


def test_objectives_with_their_own_encoder_pass_refuse_packed_pairs(tmp_path):
    with pytest.raises(ConfigError, match="sentence_pairs") as err:
        _cfg(tmp_path, "objective.input_format=sentence_pairs", variant="electra")
    assert "rtd" in str(err.value) and str(err.value).count("\n") == 0
    with pytest.raises(ConfigError, match="SOP"):
        _cfg(tmp_path, "objective.input_format=sentence_pairs", variant="mlm_sop")
    assert _cfg(tmp_path, "objective.input_format=sentence_pairs", variant="mlm_only").objective.input_format == \
        "sentence_pairs"


def test_static_masking_keeps_a_chunks_packed_row_and_masks_in_every_epoch(tmp_path):
    """One row per chunk: static masks key on the chunk, as in the one-chunk-per-row formats."""
    steps = build_pretraining_data(_cfg(tmp_path, "objective.static_masking=true", "optim.max_steps=40")).steps
    samples = steps.phases[0]
    seen = {}
    for p in positions_from(steps, Position(0, 0, 0, 0), 40):
        idx, _ = samples.batch_chunks(p.epoch, p.batch)
        b = steps.step(p).batch
        for r, i in enumerate(idx.tolist()):
            row = (b.input_ids[r][b.attention_mask[r] > 0].tolist(), b.pair_labels[r].tolist())
            seen.setdefault(i, set()).add((p.epoch, repr(row)))
    again = [v for v in seen.values() if len({e for e, _ in v}) > 1]
    assert again and all(len({r for _, r in v}) == 1 for v in again)  # the same masked row in every epoch


def test_sentence_pair_pretrains_with_finite_losses_and_records_what_it_saw(tmp_path):
    import json

    result = run_pretraining(_cfg(tmp_path, "optim.max_steps=3"), tmp_path / "r")
    assert result.status == "completed" and result.steps == 3
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["tokens_per_step"] > 0 and run["masked_per_step"] > 0
