"""RoBERTa's input formats under the controls: every format of one seed reads the same chunks per step.

The rule (``trainables.data.batches``), per step of B chunks with C content tokens: single, sop_pairs and
full_sentences hold exactly the same (document, offset) multiset of content tokens; nsp_pairs the same A
tokens and as many B (or B') tokens; real tokens per step are C + 2B (single), C + 3B (the pairs) and
C + (B - 1) + 2B (full_sentences: a [SEP] between consecutive chunks). Checked step by step, through the
corpus offset of every laid-out position (``layout_sources``), itself checked against the ids.
"""

from collections import Counter

import numpy as np
import pytest
import torch

from trainables.budget import plan_budget, step_counts
from trainables.config import ConfigError
from trainables.data.batches import (INPUT_FORMATS, Position, StepData, layout, layout_sources, positions_from)
from trainables.data.samples import IGNORE
from trainables.presets import build_config
from trainables.pretrain import build_pretraining_data, run_pretraining

FORMAT_VARIANTS = {"single": "mlm_only", "nsp_pairs": "full", "sop_pairs": "mlm_sop", "full_sentences": "full_sentences"}
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
            laid = layout(data.corpus, chunks, fmt, data.sp, idx, seq_len=samples.seq_len)
            src = layout_sources(data.corpus, chunks, fmt, samples.seq_len, data.sp)
            rows.append((p, idx, chunks, laid, src, steps.step(p), samples.seq_len))
        out[fmt] = (data, rows)
    return out


def _content(src):
    return Counter(src[src >= 0].tolist())


def test_the_sources_are_the_laid_out_tokens(walks):
    for fmt, (data, rows) in walks.items():
        tokens = np.asarray(data.corpus.span(0, int(data.corpus.sentences[-1])))
        for *_, laid, src, _, _ in rows:
            assert src.shape == laid.input_ids.shape, fmt
            real = src >= 0
            assert np.array_equal(laid.input_ids[real], tokens[src[real]]), fmt
            assert (laid.input_ids[~real] < data.sp.first_regular).all(), fmt  # specials and padding only


def test_every_format_reads_the_same_chunks_and_content_at_every_step(walks):
    ref = walks["single"][1]
    assert {p.phase for p, *_ in ref} == {0, 1} and len({(p.phase, p.epoch) for p, *_ in ref}) >= 3
    for fmt, (_, rows) in walks.items():
        assert len(rows) == len(ref)
        for (p, idx, chunks, _, src, *_), (q, ridx, rchunks, _, rsrc, *_) in zip(rows, ref):
            assert p == q and np.array_equal(idx, ridx) and np.array_equal(chunks["doc"], rchunks["doc"]), fmt
            if fmt == "nsp_pairs":  # A the same; B' (label 1) as long as B, from another document
                a = Counter(t for c in chunks for t in range(int(c["a0"]), int(c["a1"])))
                assert a <= _content(src) and sum(_content(src).values()) == sum(_content(rsrc).values())
                replaced = chunks["nsp"] == 1
                assert np.array_equal(chunks["r1"][replaced] - chunks["r0"][replaced],
                                      chunks["b1"][replaced] - chunks["b0"][replaced])
            else:
                assert _content(src) == _content(rsrc), f"{fmt} reads other tokens than single at step {p.step}"


def test_each_format_adds_exactly_its_specials_per_step(walks):
    extra = {"single": 0, "nsp_pairs": 1, "sop_pairs": 1, "full_sentences": -1}  # per row, beyond single's 2B
    for fmt, (_, rows) in walks.items():
        for (p, idx, *_, step, _), (*_, ref_step, _) in zip(rows, walks["single"][1]):
            B = len(idx)
            want = ref_step.n_tokens + (B - 1 if fmt == "full_sentences" else extra[fmt] * B)
            assert step.n_tokens == want, (fmt, p)


def test_full_sentences_rows_are_full_and_cross_documents(walks):
    data, rows = walks["full_sentences"]
    crossing = 0
    for p, idx, chunks, laid, src, step, seq_len in rows:
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
    # document's end, BERT's short_seq_prob) shift the stream: 75 of 210 rows here, none in single
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
    for (p, *_, step, _), (shape, t) in zip([r for r in rows if r[0].phase == 0], planned):
        assert (tuple(step.shape), step.n_tokens) == (tuple(shape), t)


def test_full_sentences_masks_do_not_depend_on_the_worker_count(walks):
    data, rows = walks["full_sentences"]
    for p, *_, step, _ in rows[:5]:
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
