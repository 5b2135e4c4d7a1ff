"""RoBERTa's input formats under the controls: every format of one seed reads the same chunks per step.

The rule (``trainables.data.batches``), per step of B chunks with C content tokens: sop_pairs and
full_sentences hold exactly the same (document, offset) multiset of content tokens, single those and each
chunk's next token in its document (a chunk that ends its document gets an attended, never-masked filler
instead); nsp_pairs the same A tokens and as many B (or B') tokens; real tokens per step are C + 3B (the
pairs and single, whose rows are as long as the pair rows of the same chunks) and C + (B - 1) + 2B
(full_sentences: a [SEP] between consecutive chunks); the one-chunk-per-row formats mask the same number
of positions in every row; every format puts a real token at the last position. Checked step by step,
through the corpus offset of every laid-out position (``layout_sources``), itself checked against the ids.
"""

from collections import Counter

import numpy as np
import pytest
import torch

from trainables.budget import plan_budget, step_counts
from trainables.config import ConfigError
from trainables.data.batches import (INPUT_FORMATS, Position, StepData, layout, layout_sources, next_token,
                                     positions_from)
from trainables.data.samples import IGNORE
from trainables.presets import build_config
from trainables.pretrain import build_pretraining_data, run_pretraining

FORMAT_VARIANTS = {"single": "mlm_only", "nsp_pairs": "full", "sop_pairs": "mlm_sop", "full_sentences": "full_sentences",
                   "sentence_pairs": "sentence_pair"}
STEPS = 30  # more than one epoch of the small corpus, and phase 2


def _cfg(cache, variant, *extra):
    return build_config("smoke", variant, ["data.corpus=synthetic", "data.max_documents=24", f"data.cache_dir={cache}",
                                           "run.tensorboard=false", "data.seq_len=32", f"optim.max_steps={STEPS}",
                                           "optim.phase2_steps=6", "optim.phase2_seq_len=64", "run.seed=4", *extra])


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("formats")


@pytest.fixture(scope="module")
def walks(cache):
    """Per format: (position, chunk rows, laid-out batch, sources, StepBatch) of the first STEPS steps."""
    out = {}
    for fmt, variant in FORMAT_VARIANTS.items():
        data = build_pretraining_data(_cfg(cache, variant))
        steps = data.steps
        assert steps.fmt == fmt
        rows = []
        for p in positions_from(steps, Position(0, 0, 0, 0), STEPS):
            samples = steps.phases[p.phase]
            idx, chunks = samples.batch_chunks(p.epoch, p.batch)
            pairs = samples.batch_pairs(p.epoch, idx) if fmt == "sentence_pairs" else None
            laid = layout(data.corpus, chunks, fmt, data.sp, idx, seq_len=samples.seq_len, pairs=pairs)
            src = layout_sources(data.corpus, chunks, fmt, samples.seq_len, data.sp, pairs=pairs)
            rows.append((p, idx, chunks, laid, src, steps.step(p), samples.seq_len, pairs))
        out[fmt] = (data, rows)
    return out


def _content(src):
    return Counter(src[src >= 0].tolist())


def test_the_sources_are_the_laid_out_tokens(walks):
    for fmt, (data, rows) in walks.items():
        tokens = np.asarray(data.corpus.span(0, int(data.corpus.sentences[-1])))
        for *_, laid, src, _, _, _ in rows:
            assert src.shape == laid.input_ids.shape, fmt
            real = src >= 0
            assert np.array_equal(laid.input_ids[real], tokens[src[real]]), fmt
            assert (laid.input_ids[~real] < data.sp.first_regular).all(), fmt  # specials and padding only


def _next_tokens(corpus, chunks):
    return Counter(int(c["b1"]) for c, m in zip(chunks, next_token(corpus, chunks)) if m)


def test_every_format_reads_the_same_chunks_and_content_at_every_step(walks):
    ref = walks["sop_pairs"][1]
    corpus = walks["single"][0].corpus
    assert {p.phase for p, *_ in ref} == {0, 1} and len({(p.phase, p.epoch) for p, *_ in ref}) >= 3
    for fmt, (_, rows) in walks.items():
        assert len(rows) == len(ref)
        for (p, idx, chunks, _, src, *_, pairs), (q, ridx, rchunks, _, rsrc, *_) in zip(rows, ref):
            assert p == q and np.array_equal(idx, ridx) and np.array_equal(chunks["doc"], rchunks["doc"]), fmt
            if fmt == "sentence_pairs":  # every pair's first piece and every kept second piece are the chunk's
                kept = Counter(t for row in pairs for q in row for s0, s1 in
                               ((q["a0"], q["a1"]), *([(q["b0"], q["b1"])] if q["nsp"] != 1 else []))
                               for t in range(int(s0), int(s1)))
                assert kept <= _content(rsrc) and kept <= _content(src), p
                assert sum(_content(src).values()) == sum(_content(rsrc).values()), p  # B' as long as what it replaces
                for row in pairs:
                    for q in row[row["nsp"] == 1]:
                        assert q["r1"] - q["r0"] == q["b1"] - q["b0"] and not (q["a0"] <= q["r0"] < q["b1"])
            elif fmt == "nsp_pairs":  # A the same; B' (label 1) as long as B, from another document
                a = Counter(t for c in chunks for t in range(int(c["a0"]), int(c["a1"])))
                assert a <= _content(src) and sum(_content(src).values()) == sum(_content(rsrc).values())
                replaced = chunks["nsp"] == 1
                assert np.array_equal(chunks["r1"][replaced] - chunks["r0"][replaced],
                                      chunks["b1"][replaced] - chunks["b0"][replaced])
            elif fmt == "single":  # the same, and each chunk's next token (the token right after its B)
                assert _content(src) == _content(rsrc) + _next_tokens(corpus, chunks), f"single at step {p.step}"
            else:
                assert _content(src) == _content(rsrc), f"{fmt} reads other tokens than sop_pairs at step {p.step}"
    added = sum(sum(_next_tokens(corpus, r[2]).values()) for r in walks["single"][1])
    assert added > 0.5 * sum(len(r[1]) for r in walks["single"][1])  # most chunks have a next token


def test_each_format_adds_exactly_its_specials_per_step(walks):
    for fmt, (_, rows) in walks.items():
        for p, idx, chunks, *_, step, _, pairs in rows:
            B, C = len(idx), int(((chunks["a1"] - chunks["a0"]) + (chunks["b1"] - chunks["b0"])).sum())
            want = {"full_sentences": C + (B - 1) + 2 * B}  # single: C + 3B as the pairs (its filler counts)
            if fmt == "sentence_pairs":  # [CLS] s [SEP] s' [SEP] per pair, [CLS] s [SEP] for an odd last piece
                want[fmt] = C + sum(3 * int((r["nsp"] != IGNORE).sum()) + 2 * int((r["nsp"] == IGNORE).sum()) for r in pairs)
            assert step.n_tokens == want.get(fmt, C + 3 * B), (fmt, p)


def test_single_fills_a_document_end_with_an_attended_separator_never_masked(walks):
    """Where a chunk ends its document there is no next token for B+: an attended [SEP] takes its place, so the
    row is as long as its pair rows; it is a special token, so masking never picks it."""
    data, rows = walks["single"]
    ends = 0
    for p, idx, chunks, laid, src, step, *_ in rows:
        n = laid.attention_mask.sum(1)
        for i in np.flatnonzero(next_token(data.corpus, chunks) == 0):
            ends += 1
            assert list(laid.input_ids[i, n[i] - 2:n[i]]) == [data.sp.sep] * 2 and src[i, n[i] - 2] == -1, (p, i)
            labels, positions = step.batch.mlm_labels[i], step.batch.mlm_positions[i]
            assert int(n[i] - 2) not in positions[labels != IGNORE].tolist(), (p, i)
    assert ends > 0


def test_single_is_unpadded_exactly_where_the_pair_formats_are(walks):
    """Every single row is as long as its nsp_pairs row, so single's batches take the unpadded (fused attention)
    path on the same steps as nsp_pairs': a chunk that ended its document used to leave its row one token short,
    and most single batches were padded (3 of 30 unpadded at batch 128 against nsp_pairs' 25)."""
    unpadded = {f: [bool(r[5].batch.unpadded) for r in walks[f][1]] for f in ("single", "nsp_pairs", "sop_pairs")}
    assert sum(unpadded["nsp_pairs"]) > 0
    assert unpadded["single"] == unpadded["nsp_pairs"] == unpadded["sop_pairs"]


def test_every_format_trains_the_last_position(walks):
    """A format whose rows never reach seq_len - 1 leaves that position's embedding untrained, and fine-tuning
    at the full length reads it: every format reaches it, in phase 1 and in phase 2. sentence_pairs is the
    exception by definition (RoBERTa's SENTENCE-PAIR: each input one pair of sentences, positions from 0),
    tested in tests/trainables/test_sentence_pairs.py and stated in the report."""
    def full_rows(fmt, phase):
        laid = [r for r in walks[fmt][1] if r[0].phase == phase]
        longest = max(int(r[3].attention_mask.sum(1).max()) for r in laid)
        assert longest == laid[0][6], (fmt, phase, longest)
        return sum(int((r[3].attention_mask.sum(1) == r[6]).sum()) for r in laid)

    for phase in (0, 1):
        pairs = full_rows("nsp_pairs", phase)
        for fmt in set(walks) - {"sentence_pairs"}:
            assert full_rows(fmt, phase) >= 0.75 * pairs > 0, (fmt, phase)
        assert full_rows("single", phase) == pairs  # a full chunk that ends its document too: the filler


def test_the_one_chunk_per_row_formats_mask_as_many_positions_in_every_row(walks):
    """Equal MLM supervision: row by row, single (which holds one token more) masks as many positions as the
    pair formats of the same chunk, and the budget counts it so."""
    ref = walks["sop_pairs"][1]
    for fmt in ("single", "nsp_pairs", "sentence_pairs"):
        for (p, *_, step, _, _), (*_, ref_step, _, _) in zip(walks[fmt][1], ref):
            got = (step.batch.mlm_labels != IGNORE).sum(1)
            want = (ref_step.batch.mlm_labels != IGNORE).sum(1)
            assert torch.equal(got, want), (fmt, p)
        data = walks[fmt][0]
        tokens = sum(r[5].n_tokens for r in walks[fmt][1]) / STEPS
        masked = sum(int((r[5].batch.mlm_labels != IGNORE).sum()) for r in walks[fmt][1]) / STEPS
        assert step_counts(data.steps, STEPS) == pytest.approx((tokens, masked)), fmt
        from trainables.budget import _shapes
        from trainables.config import objective_for_variant

        planned = _shapes(data.steps.phases[0], objective_for_variant(FORMAT_VARIANTS[fmt]), fmt, 8)
        for (p, *_, step, _, _), (shape, t) in zip([r for r in walks[fmt][1] if r[0].phase == 0], planned):
            assert (tuple(step.shape), step.n_tokens) == (tuple(shape), t), (fmt, p)


def test_full_sentences_rows_are_full_and_cross_documents(walks):
    data, rows = walks["full_sentences"]
    crossing = 0
    for p, idx, chunks, laid, src, step, seq_len, _ in rows:
        lengths = laid.attention_mask.sum(1)
        used = (lengths > 2).sum()
        assert (lengths[:used - 1] == seq_len).all()  # every row of the stream but its last is full
        assert (lengths[used:] == 2).all() and (laid.input_ids[used:, :2] == [data.sp.cls, data.sp.sep]).all()
        assert (laid.input_ids[:, 0] == data.sp.cls).all() and (laid.token_type_ids == 0).all()
        assert (laid.pair_labels == IGNORE).all()
        inner = laid.input_ids[:, 1:-1][laid.attention_mask[:, 2:] > 0]  # between each row's [CLS] and last [SEP]
        assert (inner == data.sp.sep).sum() == len(idx) - 1  # one separator between consecutive chunks
        s0, s1 = data.corpus.doc_sentences(chunks["doc"])
        start, end = np.asarray(data.corpus.sentences[s0]), np.asarray(data.corpus.sentences[s1])
        for r in range(used):
            offsets = src[r][src[r] >= 0]
            docs = {int(d) for d, a, b in zip(chunks["doc"], start, end) if ((offsets >= a) & (offsets < b)).any()}
            crossing += len(docs) > 1
    # a full chunk (seq_len - 3 tokens) and its [SEP] fill a row exactly, so rows cross where shorter chunks (a
    # document's end, BERT's short_seq_prob) shift the stream: 75 of 210 rows here, none in the other formats
    assert crossing > 0.25 * sum((r[3].attention_mask.sum(1) > 2).sum() for r in rows)
    assert max(int(r[3].attention_mask.sum(1).max()) for r in rows) == 64  # phase 2's last position too


def test_the_budget_counts_full_sentences_as_laid_out(walks, cache):
    data, rows = walks["full_sentences"]
    tokens = sum(r[5].n_tokens for r in rows) / STEPS
    masked = sum(int((r[5].batch.mlm_labels != IGNORE).sum()) for r in rows) / STEPS
    assert step_counts(data.steps, STEPS) == pytest.approx((tokens, masked))
    for kind in ("tokens", "flops"):
        cfg = _cfg(cache, "full_sentences", f"optim.budget={kind}")
        budget = plan_budget(cfg, build_pretraining_data(cfg).steps, data.sp.vocab_size)
        assert budget.kind == kind and budget.planned_steps >= 1
    # each step's recorded shape is what the planner expects from chunk lengths
    from trainables.budget import _shapes
    from trainables.config import objective_for_variant

    planned = _shapes(data.steps.phases[0], objective_for_variant("full_sentences"), "full_sentences", 8)
    for (p, *_, step, _, _), (shape, t) in zip([r for r in rows if r[0].phase == 0], planned):
        assert (tuple(step.shape), step.n_tokens) == (tuple(shape), t)


@pytest.mark.parametrize("fmt", ["full_sentences", "sentence_pairs"])
def test_packed_formats_masks_do_not_depend_on_the_worker_count(walks, fmt):
    data, rows = walks[fmt]
    for p, *_, step, _, _ in rows[:5]:
        for world in (2, 4):
            for rank in range(world):
                part = data.steps.step(p, rank, world, accum=2)
                ids = step.batch.input_ids[torch.from_numpy(part.rows)]
                width = part.batch.input_ids.shape[1]
                assert torch.equal(part.batch.input_ids, ids[:, :width]) and part.n_tokens == step.n_tokens


def test_a_bad_format_name_is_one_line_naming_it_and_the_allowed(walks, cache):
    data, rows = walks["single"]
    _, idx, chunks, *_ = rows[0]
    with pytest.raises(ValueError) as err:
        layout(data.corpus, chunks, "doc_sentence", data.sp, idx)
    assert str(err.value).count("\n") == 0 and "'doc_sentence'" in str(err.value)
    assert all(f in str(err.value) for f in INPUT_FORMATS)
    with pytest.raises(ConfigError, match="full_sentences") as err:
        _cfg(cache, "mlm_only", "objective.input_format=fullsentences")
    assert "'fullsentences'" in str(err.value) and str(err.value).count("\n") == 0
    with pytest.raises(ValueError, match="needs seq_len"):
        layout(data.corpus, chunks, "full_sentences", data.sp, idx)


def test_static_masking_is_refused_for_packed_rows(cache):
    with pytest.raises(ConfigError, match="static_masking"):
        _cfg(cache, "full_sentences", "objective.static_masking=true")
    data = build_pretraining_data(_cfg(cache, "mlm_only", "objective.static_masking=true"))
    with pytest.raises(ValueError, match="static masking"):
        StepData(data.corpus, data.steps.phases, "full_sentences", data.sp, seed=0, masking=data.steps.masking)


def test_the_new_variant_is_registered_but_no_default_grid_changes():
    from sweeps import phases, variants
    from trainables.objectives import VARIANTS

    assert VARIANTS["full_sentences"].weights == {"mlm": 1.0} and VARIANTS["full_sentences"].input_format == "full_sentences"
    assert phases.MEASURE_VARIANTS == ("full", "mlm_only", "mlm_pairs", "nsp_only", "none")
    parser = __import__("argparse").ArgumentParser()
    variants._extra_args(parser)
    assert parser.get_default("variants") == "full,mlm_only,nsp_only,sop_only,mlm_sop,none"


def test_full_sentences_pretrains_with_finite_losses(cache, tmp_path):
    result = run_pretraining(_cfg(cache, "full_sentences", "optim.max_steps=3", "optim.phase2_steps=0"), tmp_path / "r")
    assert result.status == "completed" and result.steps == 3
