"""The pretraining core without Ray: losses against references, checkpoints, resume, every variant, bad input."""

import json

import pytest
import torch
from transformers import AutoModel, AutoModelForMaskedLM

from trainables.presets import build_config
from trainables.data.batches import Position
from trainables.data.samples import IGNORE
from trainables.model import build_model, forward_pretraining
from trainables.objectives import VARIANTS, mlm_loss, pair_loss, total_loss
from trainables.pretrain import build_pretraining_data, run_pretraining
from trainables.pretrain import main as _cli


def _cfg(tmp_path, variant="full", *extra):
    return build_config("smoke", variant, ["data.corpus=synthetic", f"data.cache_dir={tmp_path / 'cache'}",
                                           "run.tensorboard=false", *extra])


@pytest.fixture(scope="module")
def smoke_data(tmp_path_factory):
    cfg = _cfg(tmp_path_factory.mktemp("d"))
    return cfg, build_pretraining_data(cfg)


def _dense_labels(batch):
    """The (B, T) MLM labels stock BertForPreTraining takes, from our (B, P) positions."""
    labels = torch.full_like(batch.input_ids, IGNORE)
    keep = batch.mlm_labels != IGNORE
    rows = torch.arange(len(labels))[:, None].expand_as(batch.mlm_positions)
    labels[rows[keep], batch.mlm_positions[keep]] = batch.mlm_labels[keep]
    return labels


def test_losses_match_stock_bert_for_pretraining_with_full_logits(smoke_data):
    cfg, data = smoke_data
    model = build_model(cfg.model, data.sp.vocab_size, data.sp.pad, seed=0).eval()
    batch = data.steps.batch(Position(0, 0, 0, 0))
    out = forward_pretraining(model, batch)
    labels = _dense_labels(batch)
    ref = model(input_ids=batch.input_ids, token_type_ids=batch.token_type_ids, attention_mask=batch.attention_mask,
                labels=labels, next_sentence_label=batch.pair_labels)
    ours = mlm_loss(out, batch) + pair_loss(out, batch)
    torch.testing.assert_close(ours, ref.loss, rtol=1e-5, atol=1e-5)
    keep = (batch.mlm_labels != IGNORE).reshape(-1)
    torch.testing.assert_close(out.mlm_logits[keep], ref.prediction_logits[labels != IGNORE], rtol=1e-5, atol=1e-5)


def test_total_loss_is_the_weighted_sum(smoke_data):
    cfg, data = smoke_data
    model = build_model(cfg.model, data.sp.vocab_size, data.sp.pad, seed=0).eval()
    batch = data.steps.batch(Position(1, 0, 0, 1))
    out = forward_pretraining(model, batch)
    total, parts = total_loss(out, batch, {"mlm": 0.7, "nsp": 2.5, "sop": 0.0})
    assert set(parts) == {"mlm", "nsp"}
    torch.testing.assert_close(total, 0.7 * mlm_loss(out, batch) + 2.5 * pair_loss(out, batch))


def test_same_seed_same_initial_weights_for_every_variant(smoke_data):
    cfg, data = smoke_data
    a = build_model(cfg.model, data.sp.vocab_size, data.sp.pad, seed=3).state_dict()
    b = build_model(cfg.model, data.sp.vocab_size, data.sp.pad, seed=3).state_dict()
    c = build_model(cfg.model, data.sp.vocab_size, data.sp.pad, seed=4).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["bert.embeddings.word_embeddings.weight"], c["bert.embeddings.word_embeddings.weight"])


def test_sinusoidal_positions_change_only_the_position_table_and_keep_neighbours_alike(smoke_data, tmp_path):
    """model.position_init=sinusoidal starts the learned position table as Vaswani et al.'s at BERT's std, every
    other initial weight bit for bit the normal init's (so variants still share them), and the checkpoint still
    loads with the Auto classes."""
    from dataclasses import replace

    from trainables.model import sinusoidal_positions

    cfg, data = smoke_data
    plain = build_model(cfg.model, data.sp.vocab_size, data.sp.pad, seed=3).state_dict()
    sin = build_model(replace(cfg.model, position_init="sinusoidal"), data.sp.vocab_size, data.sp.pad, seed=3)
    table = "bert.embeddings.position_embeddings.weight"
    assert all(torch.equal(v, plain[k]) for k, v in sin.state_dict().items() if k != table)
    pos = sin.state_dict()[table]
    assert torch.equal(pos, sinusoidal_positions(*pos.shape, std=0.02)) and abs(pos.std().item() - 0.02) < 1e-6
    unit = pos / pos.norm(dim=1, keepdim=True)
    near, far = (unit[10] @ unit[11]).item(), (unit[10] @ unit[40]).item()
    rand = plain[table] / plain[table].norm(dim=1, keepdim=True)
    assert near > 0.9 and near > far and abs((rand[10] @ rand[11]).item()) < 0.5  # random rows are unrelated
    run_cfg = _cfg(tmp_path, "mlm_only", "model.position_init=sinusoidal")
    run_pretraining(run_cfg, tmp_path / "run")
    assert AutoModelForMaskedLM.from_pretrained(tmp_path / "run") is not None
    with pytest.raises(Exception, match="position_init='learned' is not valid; allowed: normal, sinusoidal"):
        _cfg(tmp_path, "mlm_only", "model.position_init=learned")


@pytest.mark.parametrize("init", ["normal", "sinusoidal"])
def test_position_scale_multiplies_the_position_tables_start_and_nothing_else(smoke_data, tmp_path, init):
    """model.position_scale=3 starts the position table at three times its std (the same table, scaled), every
    other initial weight bit for bit the unscaled run's."""
    from dataclasses import replace

    cfg, data = smoke_data
    base = build_model(replace(cfg.model, position_init=init), data.sp.vocab_size, data.sp.pad, seed=3).state_dict()
    scaled = build_model(replace(cfg.model, position_init=init, position_scale=3.0), data.sp.vocab_size,
                         data.sp.pad, seed=3).state_dict()
    table = "bert.embeddings.position_embeddings.weight"
    assert all(torch.equal(v, base[k]) for k, v in scaled.items() if k != table)
    torch.testing.assert_close(scaled[table], 3.0 * base[table])
    assert abs(scaled[table].std().item() / base[table].std().item() - 3.0) < 1e-4
    with pytest.raises(Exception, match=r"model.position_scale=0.0 must be > 0"):
        _cfg(tmp_path, "mlm_only", "model.position_scale=0")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_runs_and_writes_a_loadable_checkpoint(tmp_path, variant):
    cfg = _cfg(tmp_path, variant)
    result = run_pretraining(cfg, tmp_path / "run")
    run = json.loads((tmp_path / "run" / "run.json").read_text(), parse_constant=_not_json)  # strict JSON: no NaN
    assert all(run["intrinsic"][k] is None for k, v in result.metrics.items() if v != v)  # NaN (rtd_* without
    # ELECTRA) is null
    assert run["status"] == "completed" and run["steps"] == (0 if variant == "none" else cfg.optim.max_steps)
    assert 0.0 <= result.metrics["mlm_acc"] <= 1.0 and 0.0 <= result.metrics["pair_acc_nsp"] <= 1.0
    assert (tmp_path / "run" / "model.safetensors").exists() and not (tmp_path / "run" / "resume").exists()
    from transformers import pipeline

    fill = pipeline("fill-mask", model=str(tmp_path / "run"))
    assert len(fill("the man [MASK] the time")) == 5


def test_checkpoint_round_trip_through_auto_classes(tmp_path):
    cfg = _cfg(tmp_path, "full")
    run_pretraining(cfg, tmp_path / "run")
    data = build_pretraining_data(cfg)
    batch = data.steps.batch(Position(0, 0, 0, 0))
    from transformers import BertForPreTraining

    ours = BertForPreTraining.from_pretrained(tmp_path / "run").eval()
    mlm = AutoModelForMaskedLM.from_pretrained(tmp_path / "run").eval()
    enc = AutoModel.from_pretrained(tmp_path / "run").eval()
    with torch.no_grad():
        out = forward_pretraining(ours, batch)
        kw = dict(input_ids=batch.input_ids, attention_mask=batch.attention_mask, token_type_ids=batch.token_type_ids)
        keep = batch.mlm_labels != IGNORE
        torch.testing.assert_close(mlm(**kw).logits[_dense_labels(batch) != IGNORE], out.mlm_logits[keep.reshape(-1)])
        torch.testing.assert_close(enc(**kw).last_hidden_state, out.hidden)


class _Interrupt(Exception):
    pass


def test_resume_equals_uninterrupted_training(tmp_path):
    cfg = _cfg(tmp_path, "full", "optim.max_steps=6", "run.checkpoint_every=3", "run.log_every=1")
    run_pretraining(cfg, tmp_path / "straight")

    def stop_after_checkpoint(metrics, checkpoint_dir=None):
        if checkpoint_dir:
            raise _Interrupt

    with pytest.raises(_Interrupt):
        run_pretraining(cfg, tmp_path / "resumed", stop_after_checkpoint)
    assert (tmp_path / "resumed" / "resume" / "trainer_state.pt").exists()
    steps_seen = []
    run_pretraining(cfg, tmp_path / "resumed", lambda m, checkpoint_dir=None: steps_seen.append(m.get("step")))
    assert min(steps_seen) == 4  # continued after the checkpoint, did not start over
    from safetensors.torch import load_file

    a, b = load_file(tmp_path / "straight" / "model.safetensors"), load_file(tmp_path / "resumed" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_run_after_other_runs_in_the_same_process_trains_the_same_bits(tmp_path):
    """What the sweeps' reused trial processes (Tune's reuse_actors) rest on: a run sets every process-wide
    thing it depends on itself, so a run made after another variant's and seed's run in the same process
    trains exactly what it trains first (weights bit for bit, the same held-out metrics)."""
    from safetensors.torch import load_file

    cfg = _cfg(tmp_path, "mlm_only", "optim.max_steps=4", "model.dropout=0.1")
    first = run_pretraining(cfg, tmp_path / "first")
    run_pretraining(_cfg(tmp_path, "full", "optim.max_steps=4", "run.seed=1", "model.dropout=0.1"), tmp_path / "other")
    torch.manual_seed(12345)  # and whatever the other run left in the global generator is changed again
    again = run_pretraining(cfg, tmp_path / "again")
    a, b = load_file(tmp_path / "first" / "model.safetensors"), load_file(tmp_path / "again" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert {k: repr(v) for k, v in again.metrics.items()} == {k: repr(v) for k, v in first.metrics.items()}


def test_run_json_tokens_per_s_is_wall_clock_with_the_loaders_waits(tmp_path, monkeypatch):
    """A loader that keeps the step waiting (1.5 s per batch) shows in run.json's throughput: it was timed
    from each batch's arrival, so the waits, where an input-bound GPU run loses its time, were left out."""
    import time

    import trainables.pretrain as pretrain

    class SlowLoader(pretrain.Loader):
        def __iter__(self):
            for item in super().__iter__():
                time.sleep(1.5)
                yield item
    monkeypatch.setattr(pretrain, "Loader", SlowLoader)
    run_pretraining(_cfg(tmp_path, "full", "optim.max_steps=3"), tmp_path / "r")
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["wall_time_s"] >= 3 * 1.5
    assert run["tokens_per_s"] == pytest.approx(run["tokens_seen"] / run["wall_time_s"])


def test_second_call_on_a_finished_run_does_nothing(tmp_path):
    cfg = _cfg(tmp_path, "mlm_only")
    first = run_pretraining(cfg, tmp_path / "r")
    calls = []
    again = run_pretraining(cfg, tmp_path / "r", lambda m, checkpoint_dir=None: calls.append(m))
    assert again.steps == first.steps and calls == []
    assert {k: repr(v) for k, v in again.metrics.items()} == {k: repr(v) for k, v in first.metrics.items()}  # NaN
    # stored as null in run.json comes back as NaN


def _not_json(token: str):
    raise AssertionError(f"run.json holds {token}, which is not JSON")


def test_cli_rejects_bad_mask_ratio_in_one_line(tmp_path, capsys):
    rc = _cli(["--preset", "smoke", "--variant", "full", "--set", "objective.mask_ratio=1.5", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and "mask_ratio" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("content, expect", [
    (b"", "no documents"),
    (b"\xff\xfe bad bytes \x80\n\nmore text here.", "not UTF-8"),
    (b"Only one sentence.\n\nAnother single one.\n\nA third.\n\nA fourth.", "pair"),
])
def test_bad_corpora_get_one_line_errors(tmp_path, capsys, content, expect):
    path = tmp_path / "corpus.txt"
    path.write_bytes(content)
    rc = _cli(["--preset", "smoke", "--variant", "full", "--corpus", str(path), "--set",
               f"data.cache_dir={tmp_path / 'c'}", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and expect in err and len(err.splitlines()) == 1, err


def test_missing_path_and_bad_tokenizer_dir(tmp_path, capsys):
    assert _cli(["--preset", "smoke", "--corpus", str(tmp_path / "nope.txt"), "--out", str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "tok").mkdir()
    assert _cli(["--preset", "smoke", "--corpus", "synthetic", "--set", f"data.tokenizer_dir={tmp_path / 'tok'}",
                 "--out", str(tmp_path / "o")]) == 2
    assert "tokenizer.json" in capsys.readouterr().err
