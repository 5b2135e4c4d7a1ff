"""Input formats see the same content: what differs between single and pair rows, and that it is recorded.

Every variant of one seed reads the same chunks; ``single`` drops the middle [SEP] and holds the
document's next token in its place. With NSP's random segments as long as B, every format masks the same
positions per row; single rows are as long as pair rows but for chunks that end their document (one
token shorter), and every format reaches the last position. Runs record their real tokens and masked
positions per step (run.json, the export's runs table) so a report can state what differs.
"""

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from trainables.budget import step_counts
from trainables.data.batches import Position, layout, next_token, special_ids
from trainables.data.masking import mask_counts
from trainables.data.prepare import open_prepared
from trainables.data.samples import IGNORE, Samples
from trainables.presets import build_config
from trainables.pretrain import build_pretraining_data, run_pretraining

FORMATS = ("single", "nsp_pairs", "sop_pairs")


def _cfg(tmp_path, variant="full", *extra):
    return build_config("smoke", variant, ["data.corpus=synthetic", f"data.cache_dir={tmp_path / 'c'}",
                                           "run.tensorboard=false", *extra])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return open_prepared(_cfg(tmp_path_factory.mktemp("formats")))


@pytest.mark.parametrize("ratio", [0.15, 0.4])
def test_formats_have_the_same_masked_positions_and_the_same_length_but_at_a_documents_end(corpus, ratio):
    sp = special_ids(corpus.tokenizer)
    seq_len = 32
    samples = Samples(corpus, seq_len=seq_len, short_seq_prob=0.1, batch_size=8, data_seed=2, cache=False)
    longest = {f: 0 for f in FORMATS}
    for i in range(samples.batches_in_epoch(0)):
        idx, rows = samples.batch_chunks(0, i)
        laid = {f: layout(corpus, rows, f, sp, idx) for f in FORMATS}
        real = {f: b.attention_mask.sum(1) for f, b in laid.items()}
        masked = {f: mask_counts(b.input_ids, b.attention_mask, sp.first_regular, ratio, b.uncounted)
                  for f, b in laid.items()}
        assert np.array_equal(masked["single"], masked["nsp_pairs"]) and np.array_equal(masked["single"],
                                                                                          masked["sop_pairs"])
        # a chunk that ends its document has no next token: single's filler keeps its row as long
        assert np.array_equal(real["nsp_pairs"], real["single"]) and np.array_equal(real["sop_pairs"], real["single"])
        for f in FORMATS:
            longest[f] = max(longest[f], int(real[f].max()))
    assert longest == {f: seq_len for f in FORMATS}  # every format trains the last position's embedding


@pytest.mark.parametrize("variant", ["full", "mlm_only"])
def test_step_counts_are_the_real_batches_counts(tmp_path, variant):
    """``step_counts`` (from chunk lengths) against the laid-out, masked batches, phase 2 included."""
    cfg = _cfg(tmp_path, variant, "data.seq_len=32", "optim.max_steps=6", "optim.phase2_steps=2",
               "optim.phase2_seq_len=64")
    steps = build_pretraining_data(cfg).steps
    tokens = masked = 0
    p = Position(0, 0, 0, 0)
    for _ in range(6):
        b = steps.step(p)
        tokens += b.n_tokens
        masked += int((b.batch.mlm_labels != IGNORE).sum())
        p = steps.next(p)
    assert p.phase == 1
    assert step_counts(steps, 6) == pytest.approx((tokens / 6, masked / 6))


def test_single_lays_out_as_many_tokens_per_step_as_the_pair_formats(tmp_path):
    """single's rows are as long as the pair rows of the same chunks (B's next token, or the filler where a
    chunk ends its document, in the middle [SEP]'s place), and mask as many positions."""
    counts = {}
    for v in ("full", "mlm_only", "mlm_sop"):
        cfg = _cfg(tmp_path, v, "optim.max_steps=10")
        steps = build_pretraining_data(cfg).steps
        counts[v] = step_counts(steps, 10)
    samples = steps.phases[0]
    ends = sum(int((1 - next_token(samples.corpus, samples.batch_chunks(0, b)[1])).sum()) for b in range(10))
    assert 0 < ends < 10 * _cfg(tmp_path).optim.batch_size  # some rows hold the filler
    assert counts["full"].tokens_per_step == counts["mlm_sop"].tokens_per_step == counts["mlm_only"].tokens_per_step
    assert counts["full"].masked_per_step == counts["mlm_only"].masked_per_step == counts["mlm_sop"].masked_per_step


def test_run_json_records_the_real_tokens_per_step(tmp_path):
    out = tmp_path / "run"
    run_pretraining(_cfg(tmp_path, "mlm_only", "optim.max_steps=4"), out)
    run = json.loads((out / "run.json").read_text())
    assert run["tokens_per_step"] == pytest.approx(run["tokens_seen"] / run["steps"])


def test_run_json_records_the_masked_positions_per_step(tmp_path):
    out = tmp_path / "run"
    cfg = _cfg(tmp_path, "mlm_only", "optim.max_steps=4")
    run_pretraining(cfg, out)
    run = json.loads((out / "run.json").read_text())
    assert run["masked_per_step"] == pytest.approx(step_counts(build_pretraining_data(cfg).steps, 4).masked_per_step)


def test_the_export_records_tokens_and_masked_positions_per_step(tmp_path):
    from sweeps.export import run_row

    cfg = _cfg(tmp_path, "mlm_only")
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"steps": 8, "tokens_seen": 4000, "masked_per_step": 55.5,
                                              "precision": "bf16", "allocator": "system"}))
    result = SimpleNamespace(config={"cfg": cfg.to_dict(), "run_id": "mlm_only-s0", "variant": "mlm_only"},
                             metrics={"final": 1, "step": 8, "tokens_seen": 4000, "checkpoint_path": str(out)},
                             error=None, path=str(tmp_path / "trial"), checkpoint=None, filesystem=None)
    row = run_row(result, "measure")
    assert (row["tokens_per_step"], row["masked_per_step"]) == (500.0, 55.5)
    assert (row["precision"], row["allocator"]) == ("bf16", "system")  # what the run's step ran in, from run.json
    (out / "run.json").unlink()  # an older run: recorded as not known
    old = run_row(result, "measure")
    assert np.isnan(old["masked_per_step"]) and old["precision"] == old["allocator"] == ""


def test_the_report_states_each_formats_difference_in_one_sentence():
    from analysis.formats import input_format_notes, input_format_section

    cfg = json.dumps({"data": {"seq_len": 128}, "optim": {"phase2_steps": 0, "phase2_seq_len": 512}})
    runs = pd.DataFrame([{"run_id": f"{v}-s{s}", "phase": "measure", "status": "completed", "variant": v,
                          "input_format": f, "tokens_per_step": t, "masked_per_step": 12.0, "config_json": cfg}
                         for v, f, t in (("full", "nsp_pairs", 1000.0), ("mlm_only", "single", 968.0),
                                         ("none", "single", float("nan"))) for s in (0, 1)])
    notes = input_format_notes(runs)
    assert len(notes) == 2 and notes[0].startswith("Input format single (mlm_only)")
    assert "968.0 real tokens per step" in notes[0] and "(127)" in notes[0] and "mlm_pairs - mlm_only" in notes[0]
    assert notes[1].startswith("Input format nsp_pairs (full)") and "1000.0" in notes[1]
    assert input_format_section(runs[runs["variant"] != "mlm_only"]) == []  # one format: nothing to state
