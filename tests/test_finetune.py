"""Heads, batching, span decoding, the probe, records and the CLI, on a tiny checkpoint and fixtures."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from trainables.presets import build_config
from trainables.batching import bucket_batches
from trainables.finetune import FinetuneResult, collate, run_finetuning, run_probe
from trainables.finetune.__main__ import main
from trainables.task_types import tagging
from trainables.task_types.qa import best_span, decode_qa, encode_qa
from trainables.metrics import METRIC_RANGES, compute_metric
from trainables.tasks import load_hub_task
from test_tasks import FIXTURES, write_user_files

EVAL_COLUMNS = ["run_id", "task", "finetune_seed", "mode", "metric", "value", "is_primary", "n_examples", "wall_time_s",
                "source_task", "positive_label", "lr", "dev_value", "selected", "head", "epoch", "dev_majority_share",
                "probe_c", "probe_iters", "selects"]
PRED_COLUMNS = ["run_id", "task", "finetune_seed", "mode", "example_id", "prediction", "gold", "lr"]


@pytest.fixture(scope="module")
def cfg():
    return build_config("smoke", overrides=["finetune.epochs=2", "finetune.qa_max_len=64", "finetune.qa_doc_stride=24",
                                            "run.device=cpu"])


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(tiny_checkpoint))


def test_bucket_batches_cover_each_index_once_and_follow_the_seed():
    lengths = list(np.random.default_rng(0).integers(3, 100, size=103))
    batches = bucket_batches(lengths, 8, np.random.default_rng(5), window=4)
    assert sorted(np.concatenate(batches).tolist()) == list(range(103))
    again = bucket_batches(lengths, 8, np.random.default_rng(5), window=4)
    assert all((a == b).all() for a, b in zip(batches, again))
    other = bucket_batches(lengths, 8, np.random.default_rng(6), window=4)
    assert any(len(a) != len(b) or (a != b).any() for a, b in zip(batches, other))
    # within a bucket, batches hold similar lengths: the mean in-batch spread is far below random batching
    spread = np.mean([np.ptp([lengths[i] for i in b]) for b in batches])
    random_spread = np.mean([np.ptp(lengths[i:i + 8]) for i in range(0, 96, 8)])
    assert spread < 0.6 * random_spread
    evaluation = bucket_batches(lengths, 8, None)
    flat = [lengths[i] for i in np.concatenate(evaluation)]
    assert flat == sorted(lengths)


def test_collate_pads_dynamically_and_ignores_label_padding():
    import torch
    feats = [{"input_ids": [2, 5, 3], "token_type_ids": [0, 0, 0], "attention_mask": [1, 1, 1], "labels": [-100, 1, -100]},
             {"input_ids": [2, 3], "token_type_ids": [0, 0], "attention_mask": [1, 1], "labels": [-100, -100]}]
    batch = collate(feats, pad_id=0, device=torch.device("cpu"))
    assert batch["input_ids"].tolist() == [[2, 5, 3], [2, 3, 0]]
    assert batch["labels"].tolist()[1] == [-100, -100, -100] and batch["attention_mask"].tolist()[1] == [1, 1, 0]


def test_tagging_labels_only_the_first_subword(tokenizer):
    rows = [{"id": "0", "tokens": ["Elmsfordian", "went", "home"], "tags": ["B-PER", "O", "O"]}]
    enc = tagging.encode(rows, tokenizer, {"O": 0, "B-PER": 1}, build_config("smoke").finetune, 32, True)
    word_ids, labels = enc.meta[0], enc.inputs[0]["labels"]
    assert word_ids.count(0) > 1  # the rare word is split into several sub-words
    assert [lab for lab, w in zip(labels, word_ids) if w == 0] == [1] + [-100] * (word_ids.count(0) - 1)
    assert labels[0] == -100 and labels[-1] == -100  # [CLS], [SEP]
    assert [lab for lab in labels if lab != -100] == [1, 0, 0]


def test_qa_long_context_needs_the_document_stride_and_maps_back(tokenizer):
    data = load_hub_task("squad", FIXTURES / "squad")
    row = data["test"][0]  # the long Elmsford context; answer '1871' near its end
    enc = encode_qa([row], tokenizer, max_len=40, stride=16, train=True)
    assert len(enc.inputs) > 3 and set(enc.example_of) == {0}
    with_answer = [f for f in enc.inputs if f["start_positions"] > 0]
    assert with_answer and with_answer[0] is not enc.inputs[0]  # not in the first window
    # a model whose logits peak on the labelled span decodes the exact answer text from the context
    logits = []
    for f in enc.inputs:
        start, end = np.zeros(len(f["input_ids"])), np.zeros(len(f["input_ids"]))
        if f["start_positions"] > 0:
            start[f["start_positions"]], end[f["end_positions"]] = 5.0, 5.0
        logits.append((start, end))
    assert decode_qa([row], enc, logits, max_answer_len=30) == ["1871"]


def test_best_span_respects_max_answer_length_and_context():
    offsets = [None, (0, 3), (4, 8), (9, 12), None]
    start, end = np.array([9.0, 1, 0.5, 0, 0]), np.array([9.0, 0, 0, 3, 0])  # [CLS] (0) is never an answer
    assert best_span(start, end, offsets, max_answer_len=3)[1:] == (1, 3)  # 1 + 3
    assert best_span(start, end, offsets, max_answer_len=2)[1:] == (2, 3)  # 1..3 is too long; 0.5 + 3
    assert best_span(np.zeros(5), np.zeros(5), [None] * 5, 30) is None


def _check_tables(result: FinetuneResult):
    evals, preds = result.to_tables()
    assert evals.column_names == EVAL_COLUMNS and preds.column_names == PRED_COLUMNS
    assert str(evals.schema.field("finetune_seed").type) == "int64" and str(evals.schema.field("is_primary").type) == "bool"
    ev, pr = evals.to_pandas(), preds.to_pandas()
    for _, r in ev.iterrows():
        lo, hi = METRIC_RANGES[r.metric]
        assert lo <= r.value <= hi
    for (task, seed, mode), group in pr.groupby(["task", "finetune_seed", "mode"]):
        rows = ev[(ev.task == task) & (ev.finetune_seed == seed) & (ev["mode"] == mode)]
        assert rows.is_primary.sum() == 1 and (rows.n_examples == len(group)).all()
        for _, r in rows.iterrows():  # the stored predictions recompute every metric
            kwargs = {"positive": "equivalent"} if task == "mrpc" and r.metric == "f1" else {}
            assert compute_metric(r.metric, list(group.prediction), list(group.gold), **kwargs) == pytest.approx(r.value)
    return ev, pr


def test_every_head_fine_tunes_and_records_recompute(tiny_checkpoint, cfg):
    tasks = [load_hub_task("mrpc", FIXTURES / "glue_mrpc"), load_hub_task("mnli", FIXTURES / "glue_mnli"),
             load_hub_task("conll2003_ner", FIXTURES / "conll2003"), load_hub_task("squad", FIXTURES / "squad")]
    reports = []
    result = run_finetuning(tiny_checkpoint, [], [0, 1], cfg, run_id="r1", datasets=tasks, report=reports.append)
    ev, pr = _check_tables(result)
    assert set(ev.task) == {"mrpc", "mnli_m", "mnli_mm", "conll2003_ner", "squad"}
    assert set(ev[ev.task == "mrpc"].metric) == {"f1", "accuracy", "macro_f1"} and set(ev.finetune_seed) == {0, 1}
    assert (ev.run_id == "r1").all() and (ev["mode"] == "finetune").all()
    assert len(reports) == 8 and reports[-1]["done"] == reports[-1]["total"] == 8
    assert "dev/mrpc/f1" in reports[0] and "mnli_mm/accuracy" in reports[2]
    qa = pr[pr.task == "squad"]
    assert all(isinstance(json.loads(p), str) for p in qa.prediction) and len(qa) == 2 * 2
    ner = pr[pr.task == "conll2003_ner"]
    assert all(len(json.loads(p)) == len(json.loads(g)) for p, g in zip(ner.prediction, ner.gold))


def test_same_seed_same_predictions(tiny_checkpoint, cfg):
    task = [load_hub_task("mrpc", FIXTURES / "glue_mrpc")]
    a = run_finetuning(tiny_checkpoint, [], [3], cfg, datasets=task).to_tables()[1].column("prediction").to_pylist()
    b = run_finetuning(tiny_checkpoint, [], [3], cfg, datasets=task).to_tables()[1].column("prediction").to_pylist()
    assert a == b


def test_a_fine_tuning_after_another_seeds_in_the_same_process_trains_the_same(tiny_checkpoint, cfg, tmp_path):
    """What the sweeps' reused trial processes (Tune's reuse_actors) rest on: every training loss of seed 3 is
    the same after seed 4's fine-tuning and a changed global generator as before (and seed 4's differ, so the
    losses do follow the seed: the tiny model predicts one label whatever the seed)."""
    import torch

    task = [load_hub_task("mrpc", FIXTURES / "glue_mrpc")]
    losses = []
    for seed, name in ((3, "first"), (4, "other"), (3, "again")):
        run_finetuning(tiny_checkpoint, [], [seed], cfg, datasets=task, tensorboard_dir=str(tmp_path / name))
        torch.manual_seed(12345)
        losses.append(_scalars(tmp_path / name)[f"mrpc/lr{cfg.finetune.rates[0]:g}/train_loss"])
    first, other, again = losses
    assert first == again and first != other


def test_user_task_files_in_each_schema_run(tiny_checkpoint, cfg, tmp_path):
    files = write_user_files(tmp_path)
    result = run_finetuning(tiny_checkpoint, [], [0], cfg, task_files=[(str(p), k) for k, p in files.items()])
    ev, _ = _check_tables(result)
    assert set(ev.task) == {"reviews", "pairs", "tags", "qa"}


def test_probe_scores_on_dev_and_writes_probe_records(tiny_checkpoint, cfg):
    tasks = [load_hub_task("mrpc", FIXTURES / "glue_mrpc"), load_hub_task("conll2003_pos", FIXTURES / "conll2003")]
    scores = run_probe(tiny_checkpoint, tasks, cfg, seed=0)
    assert set(scores) == {"mrpc", "conll2003_pos"} and all(0.0 <= v <= 1.0 for v in scores.values())
    result = run_finetuning(tiny_checkpoint, [], [0], cfg, mode="probe", datasets=tasks)
    ev, _ = _check_tables(result)
    assert (ev["mode"] == "probe").all()


def test_probe_records_carry_their_dev_score_and_the_learned_gate_reads_it(tiny_checkpoint, cfg):
    """Every probe record has the probe's dev value beside its test value (the classifier fitted once), so
    analysis decides whether the probe learned a task on dev, as for fine-tuning; before, probe records had
    no dev value and the gate fell back to the test scores the contrasts use."""
    import pandas as pd

    from analysis.baseline import dev_seed_values

    tasks = [load_hub_task("mrpc", FIXTURES / "glue_mrpc"), load_hub_task("conll2003_pos", FIXTURES / "conll2003")]
    on_dev = run_probe(tiny_checkpoint, tasks, cfg, seed=0, split="dev")
    reports = []
    result = run_finetuning(tiny_checkpoint, [], [0], cfg, mode="probe", datasets=tasks, report=reports.append)
    ev, _ = _check_tables(result)
    assert np.isfinite(ev["dev_value"]).all()
    for task in ("mrpc", "conll2003_pos"):
        primary = ev[(ev.task == task) & ev.is_primary]
        assert primary.dev_value.tolist() == pytest.approx([on_dev[task]])
        assert any(f"dev/{task}/{primary.metric.iloc[0]}" in r for r in reports)
        runs = pd.DataFrame({"run_id": [primary.run_id.iloc[0]], "variant": ["full"], "pretrain_seed": [0]})
        assert dev_seed_values(ev, runs, task, "probe", primary.metric.iloc[0])["full"].tolist() == \
            pytest.approx([on_dev[task]])


def test_the_probe_chooses_its_c_on_dev_per_encoder_and_records_it():
    """One C for every encoder favours the encoders it suits. An encoder that carries its label in the difference of
    two features under a large shared nuisance needs a weak penalty (a strong one shrinks towards each feature's own
    correlation with the label and keeps the nuisance); one whose label is a single wide-margin direction scores the
    same at every C, and the tie keeps the smallest. fit_on_dev keeps, for each, the C whose dev score is best and
    says whether its solver converged."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from trainables.finetune.probe import fit_on_dev

    rng = np.random.default_rng(0)
    cs = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)

    def make(c):
        return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=1000))

    def wide_margin(n):
        y = rng.integers(0, 2, n)
        return np.c_[(2 * y - 1) * 5 + rng.normal(0, 1, n), rng.normal(0, 1, (n, 3))], y

    def nuisance(n):
        y = rng.integers(0, 2, n)
        z = rng.normal(0, 3, n)
        return np.c_[(2 * y - 1) * 0.5 + rng.normal(0, 0.3, n) + z, z, rng.normal(0, 1, (n, 3))], y

    fits, scores = {}, {}
    for name, draw in {"wide_margin": wide_margin, "nuisance": nuisance}.items():
        (x, y), (xd, yd) = draw(1000), draw(2000)
        clf, fit = fit_on_dev(make, x, y, lambda m: m.score(xd, yd), cs)
        by_c = {c: make(c).fit(x, y).score(xd, yd) for c in cs}  # each C fitted from zero
        best = max(by_c.values())
        # each C warm-started from the previous one: the same optimum to the solver's tolerance, so the same choice
        # up to a dev score within 0.002 of the best (one example in 2,000 either way)
        assert by_c[fit.c] >= best - 0.002 and fit.converged and 0 < fit.iters < 1000
        assert abs(clf.score(xd, yd) - best) <= 0.002
        fits[name], scores[name] = fit.c, by_c
    assert fits["wide_margin"] == cs[0] and fits["nuisance"] >= 1.0
    assert scores["nuisance"][1e-2] < scores["nuisance"][fits["nuisance"]] - 0.2  # a strong penalty costs it


def test_probe_records_carry_the_c_chosen_on_dev(tiny_checkpoint, cfg):
    from trainables.config import ConfigError

    tasks = [load_hub_task("mrpc", FIXTURES / "glue_mrpc"), load_hub_task("conll2003_pos", FIXTURES / "conll2003")]
    ev, _ = _check_tables(run_finetuning(tiny_checkpoint, [], [0], cfg, mode="probe", datasets=tasks))
    assert ev["probe_c"].isin(cfg.finetune.probe_cs).all() and (ev["probe_iters"] >= 1).all()
    ft, _ = _check_tables(run_finetuning(tiny_checkpoint, [], [0], cfg, datasets=tasks[:1]))
    assert ft["probe_c"].isna().all() and ft["probe_iters"].isna().all()
    with pytest.raises(ConfigError, match="probe_c_grid='0,1'"):
        build_config("smoke", overrides=["finetune.probe_c_grid=0,1"])


def test_the_probe_reads_each_label_budget_as_its_own_mode_and_leaves_the_main_one_unchanged(tiny_checkpoint, cfg,
                                                                                            tmp_path, monkeypatch):
    """finetune.probe_budgets adds probe@N rows, a classifier fitted on N of the probe's train examples: the main
    probe's predictions are bit for bit those of a run without the extra budget, the small budget's are its own,
    and the report's metrics name each budget."""
    import pandas as pd
    from sklearn.pipeline import Pipeline

    from trainables.config import ConfigError

    rng = np.random.default_rng(0)
    words = ["red", "blue", "cat", "dog", "sat", "ran", "the", "a", "big", "small"]
    path = tmp_path / "noise.csv"
    pd.DataFrame({"text": [" ".join(rng.choice(words, 6)) for _ in range(300)],
                  "label": [str(x) for x in rng.integers(0, 2, 300)]}).to_csv(path, index=False)
    files = [(str(path), "single")]
    plain = run_finetuning(tiny_checkpoint, [], [0], cfg, mode="probe", task_files=files)
    fitted, fit = [], Pipeline.fit
    monkeypatch.setattr(Pipeline, "fit", lambda self, x, y: (fitted.append(len(x)), fit(self, x, y))[1])
    both_cfg = cfg.replace(finetune=cfg.finetune.__class__(**{**cfg.finetune.__dict__, "probe_budgets": "12"}))
    reports = []
    both = run_finetuning(tiny_checkpoint, [], [0], both_cfg, mode="probe", task_files=files, report=reports.append)
    grid = len(cfg.finetune.probe_cs)  # each budget fits one classifier per C and keeps the one best on dev
    assert fitted == [cfg.finetune.probe_max_train] * grid + [12] * grid
    ev, pred = _check_tables(both)
    assert set(ev["mode"]) == {"probe", "probe@12"}
    _, plain_pred = _check_tables(plain)
    main_pred = pred[pred["mode"] == "probe"].reset_index(drop=True)
    assert main_pred.equals(plain_pred.reset_index(drop=True))
    small = pred[pred["mode"] == "probe@12"].reset_index(drop=True)
    assert len(small) == len(main_pred) and (small["prediction"] != main_pred["prediction"]).any()
    assert any(k.startswith("probe@12/noise/") for k in reports[0]) and any(k.startswith("noise/") for k in reports[0])
    with pytest.raises(ConfigError, match="probe_budgets='200'"):
        build_config("smoke", overrides=["finetune.probe_budgets=200"])
    with pytest.raises(ConfigError, match="probe_budgets='x'"):
        build_config("smoke", overrides=["finetune.probe_budgets=x"])


def test_the_embedding_probe_reads_the_embedding_layer_and_leaves_the_main_probe_unchanged(tiny_checkpoint, cfg):
    """finetune.embedding_probe adds mode probe-emb: a probe of the embedding layer's output, which is what the
    encoder's output would be with no transformer layer at all; the main probe's predictions stay bit for bit."""
    import torch

    from trainables.finetune.heads import Checkpoint, load_encoder
    from trainables.finetune.inputs import encode_split
    from trainables.finetune.probe import probe_layer_features
    from trainables.task_types import get_task_type

    tasks = [load_hub_task("conll2003_pos", FIXTURES / "conll2003")]
    plain = _check_tables(run_finetuning(tiny_checkpoint, [], [0], cfg, mode="probe", datasets=tasks))
    emb_cfg = cfg.replace(finetune=cfg.finetune.__class__(**{**cfg.finetune.__dict__, "embedding_probe": True}))
    ev, pred = _check_tables(run_finetuning(tiny_checkpoint, [], [0], emb_cfg, mode="probe", datasets=tasks))
    assert set(ev["mode"]) == {"probe", "probe-emb"} and ev["probe_c"].notna().all()
    main_pred = pred[pred["mode"] == "probe"].reset_index(drop=True)
    assert main_pred.equals(plain[1].reset_index(drop=True))

    ck = Checkpoint.load(tiny_checkpoint)
    data = tasks[0]
    enc = encode_split(data, data["dev"][:8], ck.tokenizer, cfg.finetune, ck.max_position, False)
    encoder = load_encoder(ck, torch.device("cpu"))
    both = probe_layer_features(encoder, enc, get_task_type(data.spec.type), 4, torch.device("cpu"),
                                ck.tokenizer.pad_token_id, "fp32", ("last", "embeddings"))
    encoder.encoder.layer = torch.nn.ModuleList([])  # no transformer layer: the output is the embedding layer's
    bare = probe_layer_features(encoder, enc, get_task_type(data.spec.type), 4, torch.device("cpu"),
                                ck.tokenizer.pad_token_id, "fp32")
    def flat(feats):  # a tagging example's features are one vector per word
        return np.concatenate([np.ravel(np.asarray(w, dtype=float)) for f in feats for w in f])

    assert np.allclose(flat(both["embeddings"]), flat(bare["last"]), atol=1e-6)
    assert not np.allclose(flat(both["embeddings"]), flat(both["last"]), atol=1e-3)


def test_none_checkpoint_fine_tunes_end_to_end(tmp_path, capsys):
    """``--checkpoint none`` is resolved by the command line (the untrained baseline), not by the library."""
    out = tmp_path / "out"
    rc = main(["--checkpoint", "none", "--preset", "smoke", "--set", "data.corpus=synthetic", "--set",
               f"data.cache_dir={tmp_path}", "--set", "run.device=cpu", "--task-data", f"mrpc={FIXTURES / 'glue_mrpc'}",
               "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    ev = pq.read_table(out / "evals.parquet").to_pandas()
    assert (ev.run_id == "none").all() and set(ev.task) == {"mrpc"}


def test_cli_writes_both_tables_for_a_task_file(tiny_checkpoint, tmp_path, capsys):
    files = write_user_files(tmp_path / "in")
    out = tmp_path / "out"
    rc = main(["--checkpoint", str(tiny_checkpoint), "--task-file", str(files["pair"]), "--task-type", "pair",
               "--task-name", "mine", "--seeds", "2", "--preset", "smoke", "--set", "run.device=cpu", "--out", str(out)])
    assert rc == 0
    evals = pq.read_table(out / "evals.parquet").to_pandas()
    assert set(evals.task) == {"mine"} and set(evals.finetune_seed) == {0, 1}
    assert len(pq.read_table(out / "predictions.parquet")) == 2 * 2  # 2 test rows x 2 seeds
    assert not list(out.glob(".*tmp"))


def test_cli_list_tasks_json(capsys):
    assert main(["--list-tasks", "--json"]) == 0
    entries = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    names = {e["name"] for e in entries}
    assert {"mnli", "qnli", "mrpc", "sst2", "cola", "conll2003_ner", "conll2003_pos", "squad"} <= names
    assert all({"name", "type", "metric", "source"} <= set(e) for e in entries)


def test_cli_bad_task_file_is_one_line_error(tiny_checkpoint, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("text\nhello\n")
    rc = main(["--checkpoint", str(tiny_checkpoint), "--task-file", str(bad), "--task-type", "single",
               "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "missing column" in err and str(bad) in err and "\n" not in err


def test_cli_runs_a_benchmark_from_local_hub_schema_files(tiny_checkpoint, tmp_path):
    out = tmp_path / "out"
    rc = main(["--checkpoint", str(tiny_checkpoint), "--task-data", f"cola={FIXTURES / 'glue_mrpc'}", "--seeds", "1",
               "--preset", "smoke", "--out", str(out)])
    assert rc == 2  # MRPC columns are not CoLA's: the mapping fails loudly, not silently
    rc = main(["--checkpoint", str(tiny_checkpoint), "--task-data", f"mnli={FIXTURES / 'glue_mnli'}", "--seeds", "1",
               "--preset", "smoke", "--set", "run.device=cpu", "--out", str(out)])
    assert rc == 0 and set(pq.read_table(out / "evals.parquet").column("task").to_pylist()) == {"mnli_m", "mnli_mm"}


def _scalars(logdir) -> dict[str, list]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_fine_tuning_logs_loss_dev_and_test_to_tensorboard_without_changing_what_is_trained(tiny_checkpoint, cfg,
                                                                                         tmp_path):
    task = [load_hub_task("mrpc", FIXTURES / "glue_mrpc")]
    plain = run_finetuning(tiny_checkpoint, [], [3], cfg, datasets=task).to_tables()[1]
    logged = run_finetuning(tiny_checkpoint, [], [3], cfg, datasets=task, tensorboard_dir=str(tmp_path / "tb"))
    assert logged.to_tables()[1].column("prediction").to_pylist() == plain.column("prediction").to_pylist()
    assert len(list((tmp_path / "tb").glob("events.out.tfevents.*"))) == 1  # one stream for the whole run
    tags = _scalars(tmp_path / "tb")
    lr = f"lr{cfg.finetune.rates[0]:g}"
    assert len(tags[f"mrpc/{lr}/train_loss"]) >= 1
    assert [s for s, _ in tags[f"mrpc/{lr}/dev_f1"]] == [100 * (e + 1) for e in range(cfg.finetune.epochs)]
    test_f1 = {e.metric: e.value for e in logged.evals}["f1"]
    assert tags[f"mrpc/{lr}/test_f1"] == [(0, pytest.approx(test_f1))]


def test_fine_tuning_dropout_replaces_the_pretraining_dropout(tiny_checkpoint):
    from trainables.finetune.heads import build_head_model

    spec = load_hub_task("mrpc", FIXTURES / "glue_mrpc").spec
    model = build_head_model(tiny_checkpoint, spec, 0, dropout=0.3)
    assert model.config.hidden_dropout_prob == model.config.attention_probs_dropout_prob == 0.3
    assert sum(isinstance(m, __import__("torch").nn.Dropout) and m.p == 0.3 for m in model.modules()) >= 2


def test_keep_best_scores_the_state_of_the_epoch_best_on_dev(tiny_checkpoint, tmp_path):
    """With finetune.keep_best the record's dev score is the best of the dev curve the run logged after each
    epoch (the first best on ties), its epoch is that epoch, and dev was scored on the kept state, not the last."""
    cfg = build_config("smoke", overrides=["finetune.epochs=5", "finetune.lr=3e-3", "finetune.keep_best=true",
                                           "run.device=cpu"])
    task = [load_hub_task("mrpc", FIXTURES / "glue_mrpc")]
    result = run_finetuning(tiny_checkpoint, [], [0], cfg, datasets=task, tensorboard_dir=str(tmp_path / "tb"))
    curve = _scalars(tmp_path / "tb")[f"mrpc/lr{cfg.finetune.lr:g}/dev_f1"]
    assert [s for s, _ in curve] == [100, 200, 300, 400, 500]
    best = max(v for _, v in curve)
    first = next(s for s, v in curve if v == best) / 100
    rec = next(e for e in result.evals if e.metric == "f1")
    assert rec.dev_value == pytest.approx(best) and rec.epoch == first


def test_best_on_dev_keeps_the_best_weights_and_stops_after_patience():
    import torch

    from trainables.finetune.api import BestOnDev

    model = torch.nn.Linear(2, 1)
    keeper = BestOnDev(model, "acc", patience=2)
    stops = []
    for epoch, (acc, w) in enumerate([(0.5, 1.0), (0.7, 2.0), (0.7, 3.0), (float("nan"), 4.0), (0.6, 5.0)], 1):
        with torch.no_grad():
            model.weight.fill_(w)
        stops.append(keeper.update(float(epoch), f"dev{epoch}", {"acc": acc}))
    assert stops == [False, False, False, True, True]  # the tie at epoch 3 is no new best; NaN never is
    keeper.restore()
    assert keeper.epoch == 2.0 and keeper.dev == "dev2" and model.weight.eq(2.0).all()
    assert not BestOnDev(model, "acc", patience=0).update(1.0, None, {"acc": 0.1})
