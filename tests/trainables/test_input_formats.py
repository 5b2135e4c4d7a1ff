"""Input formats see the same content: what differs between single and pair rows, and that it is recorded.

Every variant of one seed reads the same chunks; ``single`` drops the middle [SEP]. With NSP's random
segments as long as B, every format has the same content tokens and masked positions per row; single
rows are exactly one token shorter and never reach the last position. Runs record their real tokens
and masked positions per step (run.json, the export's runs table) so a report can state the difference.
"""

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from trainables.budget import step_counts
from trainables.data.batches import Position, layout, special_ids
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
def test_formats_have_the_same_masked_positions_and_one_token_apart_per_row(corpus, ratio):
    sp = special_ids(corpus.tokenizer)
    seq_len = 32
    samples = Samples(corpus, seq_len=seq_len, short_seq_prob=0.1, batch_size=8, data_seed=2, cache=False)
    longest = {f: 0 for f in FORMATS}
    for i in range(samples.batches_in_epoch(0)):
        idx, rows = samples.batch_chunks(0, i)
        laid = {f: layout(corpus, rows, f, sp, idx) for f in FORMATS}
        real = {f: b.attention_mask.sum(1) for f, b in laid.items()}
        masked = {f: mask_counts(b.input_ids, b.attention_mask, sp.first_regular, ratio) for f, b in laid.items()}
        assert np.array_equal(masked["single"], masked["nsp_pairs"]) and np.array_equal(masked["single"],
                                                                                          masked["sop_pairs"])
        assert np.array_equal(real["nsp_pairs"], real["single"] + 1) and np.array_equal(real["sop_pairs"],
                                                                                       real["single"] + 1)
        for f in FORMATS:
            longest[f] = max(longest[f], int(real[f].max()))
    # the pair formats reach the last position; single rows never do (its embedding is not trained there)
    assert longest["nsp_pairs"] == longest["sop_pairs"] == seq_len and longest["single"] == seq_len - 1


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


def test_single_sees_one_token_fewer_per_row_and_the_same_masked_positions(tmp_path):
    counts = {}
    for v in ("full", "mlm_only", "mlm_sop"):
        cfg = _cfg(tmp_path, v, "optim.max_steps=10")
        counts[v] = step_counts(build_pretraining_data(cfg).steps, 10)
    B = _cfg(tmp_path).optim.batch_size
    assert counts["full"].tokens_per_step == counts["mlm_sop"].tokens_per_step == counts["mlm_only"].tokens_per_step + B
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
    (out / "run.json").write_text(json.dumps({"steps": 8, "tokens_seen": 4000, "masked_per_step": 55.5}))
    result = SimpleNamespace(config={"cfg": cfg.to_dict(), "run_id": "mlm_only-s0", "variant": "mlm_only"},
                             metrics={"final": 1, "step": 8, "tokens_seen": 4000, "checkpoint_path": str(out)},
                             error=None, path=str(tmp_path / "trial"), checkpoint=None, filesystem=None)
    row = run_row(result, "measure")
    assert (row["tokens_per_step"], row["masked_per_step"]) == (500.0, 55.5)
    (out / "run.json").unlink()  # an older run: recorded as not known
    assert np.isnan(run_row(result, "measure")["masked_per_step"])


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
