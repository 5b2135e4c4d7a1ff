"""Contribution estimates on fixture exports with known values."""

import numpy as np
import pandas as pd
import pytest
from analysis_fixtures import OBJECTIVES, SEED_MEANS, write_export

from analysis.contributions import estimate_contributions
from analysis.export import ExportError, load_export


def _estimate(root, n_boot=100):
    return estimate_contributions(load_export(root), np.random.default_rng(0), n_boot=n_boot)


def _contrast(c, task, name):
    return next(e for e in c.contrasts if e.task == task and e.contrast.name == name)


def _names(c, task="sst"):
    return {e.contrast.name for e in c.contrasts if e.task == task}


def test_known_values_give_the_known_estimates(seed_export):
    c = _estimate(seed_export)
    assert c.variants == ("full", "mlm_only", "mlm_pairs", "nsp_only", "none")
    assert c.tasks == ("sst", "topic", "average (finetune)")
    for t in c.tasks:
        for v, m in SEED_MEANS.items():
            assert c.means[(t, v)].estimate == pytest.approx(m, abs=1e-12)
        mlm = _contrast(c, t, "MLM contribution (full - nsp_only)").interval
        assert mlm.estimate == pytest.approx(0.2) and mlm.reliable and mlm.lo > 0
        nsp = _contrast(c, t, "NSP contribution (full - mlm_only)")
        loss = _contrast(c, t, "NSP loss effect with MLM (full - mlm_pairs)").interval.estimate
        fmt = _contrast(c, t, "input-format effect (mlm_pairs - mlm_only)").interval.estimate
        assert (loss, fmt) == pytest.approx((0.05, 0.05)) and nsp.interval.estimate == pytest.approx(loss + fmt)
        assert [n for _, n in nsp.contrast.parts] == ["NSP loss effect with MLM (full - mlm_pairs)",
                                                      "input-format effect (mlm_pairs - mlm_only)"]
        shap = [_contrast(c, t, f"{o}'s share (MLM x NSP, nsp_pairs)").interval.estimate
                for o in ("MLM", "NSP")]
        assert shap == pytest.approx([0.225, 0.075])  # inputs held fixed: mlm_pairs, not mlm_only
        assert sum(shap) == pytest.approx(_contrast(c, t, "full - none").interval.estimate)
        inter = _contrast(c, t, "MLM x NSP interaction (nsp_pairs)").interval
        assert inter.estimate == pytest.approx(0.8 - 0.75 - 0.6 + 0.5)
    assert c.flags == [] and c.messages == [] and c.not_learned == ()
    assert c.budget.epochs == pytest.approx(1.5) and c.budget.pretrain_seeds == 3 and c.budget.finetune_seeds == 2


def test_holm_adjusted_p_values_sit_beside_the_raw_ones(seed_export):
    c = _estimate(seed_export)
    for t in c.tasks:
        es = [e for e in c.contrasts if e.task == t]
        raw, adj = np.array([e.interval.p_value for e in es]), np.array([e.p_adjusted for e in es])
        assert np.all(adj >= raw - 1e-15) and np.all(adj <= 1)
        assert adj[np.argmin(raw)] == pytest.approx(min(1.0, len(es) * raw.min()))  # the smallest: times m


def test_failed_and_stopped_runs_are_excluded_and_counted(seed_export):
    c = _estimate(seed_export)
    assert c.excluded == {"failed": 2, "stopped_early": 1}
    assert c.pretrain_seeds == (0, 1, 2)  # seeds 3 and 4 only had failed/stopped runs


@pytest.mark.parametrize("drop, blocked, kept", [
    ("nsp_only", ["MLM contribution (full - nsp_only)", "MLM x NSP factorial"],
     "NSP loss effect with MLM (full - mlm_pairs)"),
    ("mlm_pairs", ["MLM x NSP factorial"], "NSP contribution (full - mlm_only)"),
])
def test_missing_variant_gives_one_message_naming_what_cannot_be_computed(tmp_path, drop, blocked, kept):
    c = _estimate(write_export(tmp_path / "e", {k: v for k, v in SEED_MEANS.items() if k != drop}))
    assert len(c.messages) == 1
    assert f"{drop!r}" in c.messages[0] and all(b in c.messages[0] for b in blocked)
    assert kept in _names(c) and not any(drop in n for n in _names(c))


def test_contrasts_are_derived_from_weights_and_input_formats(tmp_path):
    means = {**SEED_MEANS, "sop_only": 0.62, "mlm_sop": 0.82, "electra": 0.74, "electra_nsp": 0.77}
    c = _estimate(write_export(tmp_path / "e", means))
    expected = {"RTD instead of MLM (electra - mlm_only)": 0.04, "RTD instead of MLM (electra - mlm_pairs)": -0.01,
                "RTD instead of MLM (electra_nsp - full)": -0.03, "SOP instead of NSP (mlm_sop - full)": 0.02,
                "SOP instead of NSP (sop_only - nsp_only)": 0.02, "MLM loss effect with SOP (mlm_sop - sop_only)": 0.2,
                "RTD loss effect with NSP (electra_nsp - nsp_only)": 0.17}
    for name, value in expected.items():
        assert _contrast(c, "sst", name).interval.estimate == pytest.approx(value), name
    assert "input formats differ: mlm_sop on sop_pairs, full on nsp_pairs" in _contrast(
        c, "sst", "SOP instead of NSP (mlm_sop - full)").contrast.notes
    assert not _contrast(c, "sst", "RTD instead of MLM (electra - mlm_only)").contrast.notes  # both single
    assert not any("instead of MLM (nsp_only" in n or "NSP instead" in n for n in _names(c))  # kinds differ
    assert any("factorial on sop_pairs" in m for m in c.messages)  # mlm alone on sop_pairs never ran


def test_a_new_objective_needs_no_analysis_change(tmp_path):
    variants = {"xyz_only": ({"xyz": 1}, "single"), "mlm_xyz": ({"mlm": 1, "xyz": 1}, "single")}
    c = _estimate(write_export(tmp_path / "e", {"mlm_only": 0.7, "xyz_only": 0.66, "mlm_xyz": 0.75, "none": 0.5},
                               objectives=OBJECTIVES + ("xyz",), variants=variants))
    assert _contrast(c, "sst", "XYZ instead of MLM (xyz_only - mlm_only)").interval.estimate == pytest.approx(-0.04)
    assert _contrast(c, "sst", "XYZ loss effect with MLM (mlm_xyz - mlm_only)").interval.estimate == pytest.approx(0.05)
    inter = _contrast(c, "sst", "MLM x XYZ interaction (single)").interval
    assert inter.estimate == pytest.approx(0.75 - 0.7 - 0.66 + 0.5)


def test_schema_1_pair_format_is_read_as_nsp_or_sop_pairs(tmp_path):
    means = {**SEED_MEANS, "mlm_sop": 0.82}
    c = _estimate(write_export(tmp_path / "e", means, objectives=("mlm", "nsp", "sop"), legacy_format=True))
    assert c.specs["mlm_sop"].input_format == "sop_pairs" and c.specs["full"].input_format == "nsp_pairs"
    assert "NSP loss effect with MLM (full - mlm_pairs)" in _names(c)


def test_collapse_is_flagged_with_its_reason_and_worse_than_none_needs_an_interval_below_zero(tmp_path):
    # the pilot's pattern: nsp_only collapsed (cosines 1.000, fine-tuning at one class: accuracy 0.5);
    # full beats nsp_only only because nsp_only is damaged
    means = {"full": 0.70, "mlm_only": 0.73, "mlm_pairs": 0.72, "nsp_only": 0.5, "none": 0.74}
    c = _estimate(write_export(tmp_path / "e", means, collapsed=("nsp_only",), n_examples=400,
                               variant_jitter={"mlm_only": (0.03, -0.03, 0.0)}))
    collapse = next(f for f in c.flags if f.variant == "nsp_only" and f.task == "")
    assert "[CLS] cosine 1.0000 vs none's 0.5000" in collapse.reason and "seed 0" in collapse.reason
    assert "fine-tuning predicts one label on 4/4" in collapse.reason
    worse = {f.variant for f in c.flags if f.task == "sst"}
    assert worse == {"full", "mlm_pairs"}  # mlm_only is 0.01 below none, but its interval includes 0
    # nsp_only's fine-tunings predict one label: they did not learn, so no estimate credits anything to them
    assert c.did_not_learn == 12 and any("nsp_only on sst (6 of 6), nsp_only on topic (6 of 6)" in m for m in c.messages)
    mlm = _contrast(c, "sst", "MLM contribution (full - nsp_only)")
    assert mlm.interval.n_seeds == 0 and not np.isfinite(mlm.interval.estimate) and not np.isfinite(mlm.p_adjusted)
    assert "contrast against nsp_only (collapsed): not credited to MLM" in mlm.notes


def test_a_task_no_variant_learned_shows_no_contrast_but_stays_in_the_average(tmp_path):
    """Whether a task was learned is decided per export; an average over the learned tasks changed its meaning
    between seed blocks (three tasks in one, four in the other). The average is over every task the design
    measured, in every export alike."""
    at_chance = {v: 0.5 for v in SEED_MEANS}
    c = _estimate(write_export(tmp_path / "e", SEED_MEANS, tasks=("sst", "topic", "ner"),
                               task_means={"ner": at_chance}))
    assert c.not_learned == ("ner",) and c.baselines["ner"] == pytest.approx(0.5)
    assert not any(e.task == "ner" for e in c.contrasts) and ("ner", "full") in c.means
    assert c.means[("average (finetune)", "full")].estimate == pytest.approx((0.8 + 0.8 + 0.5) / 3)
    assert any("'ner' was not learned at this budget" in m and "stays in the averages" in m for m in c.messages)
    learned = _estimate(write_export(tmp_path / "f", SEED_MEANS, tasks=("sst", "topic", "ner")))
    assert learned.not_learned == () and {t for t in learned.tasks} == {t for t in c.tasks}  # the same rows


def _with_dev_shares(root, shares):
    """``root``'s evals with evals.dev_majority_share set per run_id (others 0.5)."""
    path = root / "evals.parquet"
    ev = pd.read_parquet(path)
    ev["dev_majority_share"] = ev["run_id"].map(shares).fillna(0.5).where(ev["mode"] == "finetune")
    ev.to_parquet(path)
    return root


def test_one_label_fine_tunings_are_decided_on_dev_and_the_intention_to_treat_estimate_sits_beside(tmp_path):
    """The one-label exclusion read the test predictions, the values the contrasts use. Decided on dev: mlm_only's
    test predictions are one label (majority) while its dev predictions were not, so it stays in; none's seed-0
    fine-tunings predicted one label on dev, so they leave, and the intention-to-treat cells count them."""
    means = {"mlm_only": 0.8, "none": 0.6}
    root = write_export(tmp_path / "e", means, majority=("mlm_only",), n_examples=200)
    assert _estimate(root).did_not_learn == 12  # no dev shares recorded: the test predictions decide, as before
    c = _estimate(_with_dev_shares(root, {"none-s0": 0.97}))
    assert c.did_not_learn == 4 and any("95% of dev examples" in m for m in c.messages)
    itt = {e.task: e for e in c.itt}
    assert set(itt) == {"sst", "topic", "average (finetune)"}
    main = _contrast(c, "sst", "mlm_only - none")
    assert itt["sst"].interval.n_seeds == 3 and main.interval.n_seeds == 2  # seed 0 counted only in the ITT
    assert _estimate(_with_dev_shares(root, {})).itt == []  # nothing left out: no second estimate


def test_tasks_sharing_a_source_task_count_once_in_the_average(tmp_path):
    tasks = ("sst", "mnli_m", "mnli_mm")
    per_task = {"mnli_m": {"full": 0.7}, "mnli_mm": {"full": 0.7}, "sst": {"full": 0.9}}
    c = _estimate(write_export(tmp_path / "e", SEED_MEANS, tasks=tasks, task_means=per_task,
                               sources={"mnli_m": "mnli", "mnli_mm": "mnli"}))
    assert c.means[("average (finetune)", "full")].estimate == pytest.approx((0.9 + 0.7) / 2)


def test_f1_counts_the_recorded_positive_label(tmp_path):
    root = write_export(tmp_path / "e", SEED_MEANS)
    preds = pd.read_parquet(root / "predictions.parquet")
    j = preds["example_id"].str.rsplit("-", n=1).str[-1].astype(int)
    # every 'a' predicted 'a', and every other 'b' too (75% 'a': a fine-tuning that learned something)
    preds.assign(prediction=np.where((preds["gold"] == "a") | (j % 4 == 1), "a", "b")).to_parquet(
        root / "predictions.parquet")
    evals = pd.read_parquet(root / "evals.parquet")
    for positive, f1 in (("a", 2 * (2 / 3) / (1 + 2 / 3)), ("b", 2 * 0.5 / 1.5)):
        evals.assign(metric=evals["metric"].replace("accuracy", "f1"), positive_label=positive).to_parquet(
            root / "evals.parquet")
        c = _estimate(root, n_boot=20)
        assert c.means[("sst", "full")].estimate == pytest.approx(f1), positive


def test_best_mix_contrast_when_present(tmp_path):
    c = _estimate(write_export(tmp_path / "e", {**SEED_MEANS, "best_mix": 0.9}))
    assert _contrast(c, "sst", "best_mix - full").interval.estimate == pytest.approx(0.1)


def test_without_predictions_falls_back_to_eval_values(tmp_path):
    c = _estimate(write_export(tmp_path / "e", SEED_MEANS, with_predictions=False))
    assert _contrast(c, "sst", "full - none").interval.estimate == pytest.approx(0.3)
    assert any("baselines" in m and "not checked" in m for m in c.messages)


def test_two_seeds_are_reported_unreliable(tmp_path):
    c = _estimate(write_export(tmp_path / "e", SEED_MEANS, seeds=(0, 1), jitter=(-0.02, 0.02)))
    assert not _contrast(c, "sst", "full - none").interval.reliable


def test_schema_violation_is_one_line(tmp_path):
    root = write_export(tmp_path / "e", SEED_MEANS)
    pd.read_parquet(root / "runs.parquet").drop(columns=["collapsed"]).to_parquet(root / "runs.parquet")
    with pytest.raises(ExportError, match=r"runs.parquet lacks columns \['collapsed'\]"):
        load_export(root)


def test_whether_a_task_was_learned_is_decided_on_dev_not_test(tmp_path):
    at_chance = {v: 0.5 for v in SEED_MEANS}
    # test above chance, dev at chance: not learned (the test scores must not decide which tasks count)
    c = _estimate(write_export(tmp_path / "a", SEED_MEANS, tasks=("sst", "topic", "ner"),
                               dev_means={"sst": SEED_MEANS, "topic": SEED_MEANS, "ner": at_chance}))
    assert c.not_learned == ("ner",) and not any(e.task == "ner" for e in c.contrasts)
    assert any("'ner' was not learned at this budget" in m and "on dev" in m for m in c.messages)
    # test at chance, dev above: learned, its contrasts computed
    c = _estimate(write_export(tmp_path / "b", SEED_MEANS, tasks=("sst", "topic", "ner"),
                               task_means={"ner": at_chance}, dev_means={"sst": SEED_MEANS, "topic": SEED_MEANS,
                                                                       "ner": SEED_MEANS}))
    assert c.not_learned == () and any(e.task == "ner" for e in c.contrasts)


def test_an_export_without_dev_values_decides_on_test_and_says_so(tmp_path):
    c = _estimate(write_export(tmp_path / "e", SEED_MEANS, tasks=("sst", "ner"), with_dev=False,
                               task_means={"ner": {v: 0.5 for v in SEED_MEANS}}))
    assert c.not_learned == ("ner",) and any("no dev values" in m for m in c.messages)


def test_each_probe_budget_is_a_row_of_its_own_named_with_its_labels(seed_export):
    """Rows of mode probe@N (finetune.probe_budgets) are read as their own task rows and average, named in plain
    words, beside the fine-tuned ones."""
    for name in ("evals", "predictions"):
        path = seed_export / f"{name}.parquet"
        df = pd.read_parquet(path)
        pd.concat([df, df.assign(mode="probe@100")]).to_parquet(path)
    c = _estimate(seed_export)
    assert c.tasks == ("sst", "sst (probe, 100 labels)", "topic", "topic (probe, 100 labels)", "average (finetune)",
                       "average (probe, 100 labels)")
    assert _contrast(c, "topic (probe, 100 labels)", "full - none").interval.estimate == pytest.approx(0.3)


def test_the_embeddings_probe_is_a_baseline_family_and_the_layers_gain_is_read_against_it(tmp_path):
    """Known truth: the probe reads mlm_only 0.20 above none, its embeddings probe 0.05 above. The embeddings
    probe's cells form a family of their own (the primary family's size is unchanged), and "what the layers add"
    is mlm_only's probe minus its own embeddings probe, +0.15, resampled together; none's is 0 exactly."""
    import pandas as pd

    from analysis.export import load_export

    encoder = write_export(tmp_path / "a", {"mlm_only": 0.8, "none": 0.6})
    embeddings = write_export(tmp_path / "b", {"mlm_only": 0.65, "none": 0.6})
    both = tmp_path / "both"
    both.mkdir()
    (encoder / "runs.parquet").rename(both / "runs.parquet")
    for name in ("evals", "predictions"):
        parts = [pd.read_parquet(d / f"{name}.parquet").assign(mode=m)
                 for d, m in ((encoder, "probe"), (embeddings, "probe-emb"))]
        pd.concat(parts).to_parquet(both / f"{name}.parquet")
    c = estimate_contributions(load_export(both), np.random.default_rng(0), n_boot=300)
    fam = {(e.task, e.contrast.name): e.holm_family for e in c.contrasts}
    assert fam[("sst (probe)", "mlm_only - none")] == "primary"
    assert fam[("sst (embeddings probe)", "mlm_only - none")] == "baseline"
    primary = [e for e in c.contrasts if e.holm_family == "primary"]
    assert len(primary) == 3  # sst, topic, the average: the baseline's rows did not join it
    ctx = {(e.task, e.contrast.name): e for e in c.context}
    gain = ctx[("sst (probe)", "mlm_only - its embeddings")]
    assert abs(gain.interval.estimate - 0.15) < 1e-9 and gain.interval.lo > 0 and gain.p_adjusted < 0.05
    flat = ctx[("topic (probe)", "none - its embeddings")]
    assert flat.interval.estimate == 0.0 and np.isnan(flat.p_adjusted) and gain.holm_family == "context"


def test_a_non_neural_baseline_is_no_reading_its_family_is_its_own_and_the_primary_family_is_unchanged(tmp_path):
    """Known truth: the probe reads mlm_only at 0.80 and none at 0.60; a TF-IDF baseline fitted on the same labels
    scores 0.70 for both (it reads no encoder, so a seed's variants share it). Its rows are no task row with
    contrasts; its score is shown per probe row; each variant's probe minus it (+0.10, -0.10) is a Holm family of its
    own; and the primary family is the same cells with the same Holm p as without the baseline."""
    from analysis_fixtures import with_modes

    probe = write_export(tmp_path / "probe", {"mlm_only": 0.8, "none": 0.6})
    tfidf = write_export(tmp_path / "tfidf", {"mlm_only": 0.7, "none": 0.7})
    alone = with_modes(tmp_path / "alone", {"probe": probe})
    both = with_modes(tmp_path / "both", {"probe": probe, "baseline-tfidf": tfidf})
    off = estimate_contributions(load_export(alone), np.random.default_rng(0), n_boot=300)
    on = estimate_contributions(load_export(both), np.random.default_rng(0), n_boot=300)

    assert on.tasks == off.tasks == ("sst (probe)", "topic (probe)", "average (probe)")
    assert not any("baseline" in e.task for e in on.contrasts)

    def primary(c):
        return [(e.task, e.contrast.name, e.p_adjusted) for e in c.contrasts if e.holm_family == "primary"]

    assert primary(on) == primary(off) and len(primary(on)) == 3
    assert off.text_baselines == {} and off.over_baselines == []
    assert on.text_baselines == {t: ("TF-IDF logistic regression", pytest.approx(0.7)) for t in on.tasks[:2]}
    over = {(e.task, e.contrast.name): e for e in on.over_baselines}
    assert set(over) == {(t, f"{v} - TF-IDF logistic regression") for t in on.tasks[:2] for v in ("mlm_only", "none")}
    assert {e.holm_family for e in on.over_baselines} == {"text_baseline"}
    gain = over[("sst (probe)", "mlm_only - TF-IDF logistic regression")]
    loss = over[("topic (probe)", "none - TF-IDF logistic regression")]
    assert gain.interval.estimate == pytest.approx(0.1) and gain.interval.lo > 0 and gain.p_adjusted < 0.05
    assert loss.interval.estimate == pytest.approx(-0.1) and loss.interval.hi < 0
