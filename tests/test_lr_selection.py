"""The fine-tuning learning rate is chosen per (run, task) on dev, never on test, over fine-tuning seeds."""

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from trainables.presets import build_config
from trainables.finetune import run_finetuning
from trainables.finetune.selection import select_on_dev
from trainables.tasks import load_hub_task
from test_tasks import FIXTURES


def _evals(rows):
    return pd.DataFrame([dict(run_id=r, task=t, finetune_seed=s, mode="finetune", metric="accuracy", value=test,
                              is_primary=True, source_task=src, lr=lr, dev_value=dev)
                         for r, t, s, lr, dev, test, src in rows])


def test_the_rate_best_on_dev_wins_even_when_another_is_best_on_test():
    evals = _evals([("full-s0", "sst", 0, 1e-4, 0.70, 0.90, "sst"), ("full-s0", "sst", 0, 1e-3, 0.80, 0.60, "sst"),
                    ("none-s0", "sst", 0, 1e-4, 0.65, 0.50, "sst"), ("none-s0", "sst", 0, 1e-3, 0.55, 0.70, "sst")])
    preds = pd.DataFrame([dict(run_id=r, task="sst", finetune_seed=0, mode="finetune", example_id="a", prediction="x",
                               gold="x", lr=lr) for r in ("full-s0", "none-s0") for lr in (1e-4, 1e-3)])
    out, kept = select_on_dev(evals, preds)
    chosen = out[out.selected].set_index("run_id")["lr"]
    assert chosen["full-s0"] == 1e-3 and chosen["none-s0"] == 1e-4  # per run: pretrained and random differ
    assert set(zip(kept.run_id, kept.lr)) == {("full-s0", 1e-3), ("none-s0", 1e-4)}


def test_the_choice_averages_fine_tuning_seeds_and_is_shared_by_reported_splits():
    evals = _evals([("r", "mnli_m", s, lr, dev, 0.5, "mnli") for s, lr, dev in
                    ((0, 1e-4, 0.9), (1, 1e-4, 0.1), (0, 1e-3, 0.6), (1, 1e-3, 0.6))]
                   + [("r", "mnli_mm", s, lr, dev, 0.5, "mnli") for s, lr, dev in
                      ((0, 1e-4, 0.9), (1, 1e-4, 0.1), (0, 1e-3, 0.6), (1, 1e-3, 0.6))])
    out, _ = select_on_dev(evals, pd.DataFrame(columns=["run_id", "task", "finetune_seed", "mode", "lr"]))
    assert set(out[out.selected].lr) == {1e-3} and out.selected.sum() == 4  # mean 0.6 beats mean 0.5


def test_a_grid_fine_tunes_at_every_rate_and_exports_the_choice(tiny_checkpoint, tmp_path):
    from trainables.finetune import write_tables

    cfg = build_config("smoke", overrides=["finetune.lr_grid=1e-5,3e-3", "finetune.epochs=2", "run.device=cpu"])
    task = load_hub_task("mrpc", FIXTURES / "glue_mrpc")
    result = run_finetuning(tiny_checkpoint, [], [0, 1], cfg, datasets=[task])
    assert {e.lr for e in result.evals} == {1e-5, 3e-3} and all(np.isfinite(e.dev_value) for e in result.evals)
    write_tables(result, tmp_path)
    evals = pq.read_table(tmp_path / "evals.parquet").to_pandas()
    preds = pq.read_table(tmp_path / "predictions.parquet").to_pandas()
    prim = evals[evals.is_primary]
    best = prim.groupby("lr")["dev_value"].mean().idxmax()
    assert set(prim[prim.selected].lr) == {best} and set(preds.lr) == {best}
    assert len(preds) == 2 * len(task["test"])  # one rate's predictions per fine-tuning seed


def _fake_fit(scores):
    """``api._finetune_at`` stand-in: rate -> (test, dev) accuracy, so the grid's rates score differently and
    the rate best on dev is not the last one nor the best on test."""
    from trainables.finetune import api

    def fit(ck, data, seed, cfg, device, run_id, lr, writer=None):
        test, dev = scores[lr]
        part = api.FinetuneResult()
        part.extend(api._records(run_id, data.spec, seed, "finetune", data.spec.name, [{"id": "a"}], ["x"], ["x"],
                                 0.0, lr, {"accuracy": dev, "macro_f1": dev}, epoch=2.0))
        part.evals[:] = [e._replace(value=test) if e.metric == "accuracy" else e for e in part.evals]
        return part, {"accuracy": dev, "macro_f1": dev}
    return fit


def test_every_number_shown_for_a_grid_is_the_chosen_rates(tiny_checkpoint, tmp_path, monkeypatch, capsys):
    """The command's lines, the report callback and the trial's mean are the rate chosen on dev, with the rate
    beside it; another rate's number only under its own rate's name. The rate best on dev (1e-3) is neither
    the last of the grid nor the best on test, so reading any other rate's test score would show."""
    from trainables.finetune import api
    from trainables.finetune.__main__ import main
    from test_tasks import write_user_files

    scores = {3e-4: (0.60, 0.70), 1e-3: (0.55, 0.90), 3e-3: (0.80, 0.50)}
    monkeypatch.setattr(api, "_finetune_at", _fake_fit(scores))
    files = write_user_files(tmp_path / "in")
    reported = []
    cfg = build_config("smoke", overrides=["finetune.lr_grid=3e-4,1e-3,3e-3", "run.device=cpu"])
    from trainables.tasks import load_user_task
    task = load_user_task(files["single"], "single", "mine")
    result = run_finetuning(tiny_checkpoint, [], [0], cfg, datasets=[task], report=reported.append)
    (m,) = reported
    assert m["mine/accuracy"] == 0.55 and m["lr/mine"] == 1e-3 and m["dev/mine/accuracy"] == 0.90
    assert m["lr0.003/mine/accuracy"] == 0.80 and m["lr0.0003/mine/accuracy"] == 0.60
    assert [e.value for e in result.selected_evals() if e.is_primary] == [0.55]

    out = tmp_path / "out"
    rc = main(["--checkpoint", str(tiny_checkpoint), "--task-file", str(files["single"]), "--task-type", "single",
               "--task-name", "mine", "--preset", "smoke", "--set", "run.device=cpu",
               "--set", "finetune.lr_grid=3e-4,1e-3,3e-3", "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0
    ev = pq.read_table(out / "evals.parquet").to_pandas()
    row = ev[ev.selected & ev.is_primary].iloc[0]
    assert (row.lr, row.value, row.dev_value) == (1e-3, 0.55, 0.90)
    assert f"mine seed 0: chosen lr 0.001 of 0.0003, 0.001, 0.003, epoch 2: test accuracy=0.5500, dev 0.9000" in printed
    assert "lr 0.001 (best on this seed's dev of 0.0003, 0.001, 0.003), epoch 2, mine/accuracy=0.5500" in printed
    assert "mine/accuracy=0.8000" not in printed.replace("lr0.003/mine/accuracy=0.8000", "")


def test_a_seed_s_choice_and_the_export_s_break_a_tie_alike_whatever_the_grid_s_order(monkeypatch):
    """A tie on dev goes to the lower rate in the export (chosen_rates); a seed's own choice (finetune_one: the first
    rate best on dev) broke it toward whichever rate the grid listed first, so a grid written high-to-low made the
    progress line's number and the export's disagree. The grid is tried in ascending order."""
    from types import SimpleNamespace

    from trainables.finetune import api
    from trainables.finetune.selection import chosen_rates

    cfg = build_config("smoke", overrides=["finetune.lr_grid=3e-3,1e-3,3e-4"])
    assert cfg.finetune.rates == (3e-4, 1e-3, 3e-3)
    dev = {3e-3: 0.7, 1e-3: 0.7, 3e-4: 0.6}  # the two higher rates tie

    def at(ck, data, seed, cfg, device, run_id, lr, writer):
        rows = [api.EvalRecord(run_id, "t", seed, "finetune", "accuracy", 0.5, True, 10, 0.0, "t", "", lr, dev[lr])]
        return api.FinetuneResult(rows, []), {"accuracy": dev[lr]}

    monkeypatch.setattr(api, "_finetune_at", at)
    spec = SimpleNamespace(metric="accuracy", selection_metric="accuracy")
    fit = api.finetune_one(None, SimpleNamespace(spec=spec), 0, cfg, None, "r")
    exported = chosen_rates(pd.DataFrame([e._asdict() for e in fit.result.evals]))
    assert fit.lr == 1e-3 and exported["lr"].tolist() == [1e-3]


def _grid_fit(dev_of, metrics=("accuracy", "macro_f1")):
    """``api._finetune_at`` stand-in: each rate's dev metrics from ``dev_of(lr)`` ({metric: value}); the records
    carry them (and which metric selects) as the real one's do; the rates asked for are kept in ``fit.asked``."""
    from trainables.finetune import api

    def fit(ck, data, seed, cfg, device, run_id, lr, writer=None):
        fit.asked.append(lr)
        dev = dev_of(lr)
        rows = [api.EvalRecord(run_id, "t", seed, "finetune", m, 0.5, m == "accuracy", 10, 0.0, "t", "", lr, dev[m],
                               selects=m == data.spec.selection_metric) for m in metrics]
        return api.FinetuneResult(rows, []), dev
    fit.asked = []
    return fit


def _label_task():
    from types import SimpleNamespace

    from trainables.tasks import TaskSpec
    return SimpleNamespace(spec=TaskSpec(name="t", type="single", metrics=("accuracy", "macro_f1"), source="builtin"))


def test_the_rate_is_chosen_on_a_metric_a_constant_prediction_cannot_win(monkeypatch):
    """A fine-tuning that gives every dev example the majority label (share 0.56) out-scores, on accuracy, one that
    learned the task weakly (0.54 accuracy, both labels); on macro-F1 (0.36 against 0.54) it cannot. The rate is
    chosen on macro-F1, by the seed (finetune_one) and by the export (chosen_rates) alike; the records say so."""
    from trainables.finetune import api
    from trainables.finetune.selection import chosen_rates

    one_label = {"accuracy": 0.56, "macro_f1": 0.56 / 1.56}
    learned = {"accuracy": 0.54, "macro_f1": 0.54}
    fake = _grid_fit(lambda lr: one_label if lr == 3e-3 else learned if lr == 1e-3 else {"accuracy": .5, "macro_f1": .3})
    monkeypatch.setattr(api, "_finetune_at", fake)
    cfg = build_config("smoke", overrides=["finetune.lr_grid=3e-4,1e-3,3e-3"])
    data = _label_task()
    assert data.spec.selection_metric == "macro_f1"
    fit = api.finetune_one(None, data, 0, cfg, None, "r")
    evals = pd.DataFrame([e._asdict() for e in fit.result.evals])
    assert fit.lr == 1e-3 and chosen_rates(evals)["lr"].tolist() == [1e-3]
    assert set(evals[evals.selects].metric) == {"macro_f1"}
    # an export written before ``selects`` was recorded is chosen on the headline metric, as it was then
    assert chosen_rates(evals.drop(columns="selects"))["lr"].tolist() == [3e-3]


def test_every_label_task_is_chosen_on_macro_f1_and_scores_it():
    """Label tasks select on macro-F1, recorded even where the task's own metrics leave it out (MRPC reports F1 of
    its majority class, which predicting that class wins); tagging and QA keep their headline."""
    from trainables.finetune.inputs import score
    from trainables.tasks import HUB_TASKS, builtin_specs

    specs = {**builtin_specs(), **HUB_TASKS}
    assert {n: s.selection_metric for n, s in specs.items() if s.type in ("single", "pair")} == \
        {n: "macro_f1" for n, s in specs.items() if s.type in ("single", "pair")}
    assert specs["pos"].selection_metric == "token_accuracy" and specs["squad"].selection_metric == "squad_f1"
    mrpc = specs["mrpc"]
    golds = ["equivalent"] * 7 + ["not_equivalent"] * 3
    scored = score(mrpc, ["equivalent"] * 10, golds)
    assert scored["f1"] > 0.8 and scored["macro_f1"] < 0.5 and list(scored)[:2] == list(mrpc.metrics)


def test_the_grid_extends_past_an_edge_while_the_best_rate_sits_on_it(monkeypatch):
    """With extend_edges=2 and dev rising with the rate up to 0.01, the grid 3e-4..3e-3 goes on to 9e-3 (best) and
    2.7e-2 (worse), then stops; at the low edge the same downward; a best rate inside the grid adds nothing."""
    from trainables.finetune import api

    cfg = build_config("smoke", overrides=["finetune.lr_grid=3e-4,1e-3,3e-3", "finetune.extend_edges=2"])
    for peak, added, best in ((1e-2, [9e-3, 2.7e-2], 9e-3), (1e-4, [9e-5, 2.7e-5], 9e-5), (1e-3, [], 1e-3)):
        fake = _grid_fit(lambda lr: {m: 1 - abs(np.log(lr / peak)) / 10 for m in ("accuracy", "macro_f1")})
        monkeypatch.setattr(api, "_finetune_at", fake)
        fit = api.finetune_one(None, _label_task(), 0, cfg, None, "r")
        assert fake.asked == [3e-4, 1e-3, 3e-3] + added and fit.lr == best, (peak, fake.asked)
    # at most extend_edges per side, even when the dev score keeps rising
    fake = _grid_fit(lambda lr: {m: lr for m in ("accuracy", "macro_f1")})
    monkeypatch.setattr(api, "_finetune_at", fake)
    cfg1 = build_config("smoke", overrides=["finetune.lr_grid=3e-4,1e-3,3e-3", "finetune.extend_edges=1"])
    assert api.finetune_one(None, _label_task(), 0, cfg1, None, "r").lr == 9e-3 and len(fake.asked) == 4


def test_a_rate_only_some_fine_tuning_seeds_tried_does_not_compete():
    """Seed 0 extended the grid to 9e-3 and scored 0.9 there; seed 1 never tried it. Its mean would be one seed's
    value against two-seed means: the export compares only the rates both seeds tried."""
    from trainables.finetune.selection import chosen_rates

    rows = [("r", "t", s, lr, dev, 0.5, "t") for s, lr, dev in
            ((0, 1e-3, 0.6), (0, 3e-3, 0.7), (0, 9e-3, 0.9), (1, 1e-3, 0.6), (1, 3e-3, 0.5))]
    assert chosen_rates(_evals(rows))["lr"].tolist() == [1e-3]  # 0.6 against 0.6 at 3e-3: the lower rate


def test_extend_edges_is_refused_without_a_grid_to_step_from():
    import pytest

    from trainables.config import ConfigError

    with pytest.raises(ConfigError, match="finetune.extend_edges=1 needs a finetune.lr_grid of at least two rates"):
        build_config("smoke", overrides=["finetune.extend_edges=1"])
    with pytest.raises(ConfigError, match="finetune.extend_edges=-1 must be >= 0"):
        build_config("smoke", overrides=["finetune.lr_grid=1e-4,1e-3", "finetune.extend_edges=-1"])
