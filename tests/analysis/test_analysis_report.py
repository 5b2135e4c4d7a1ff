"""The report: headline first, Holm beside raw p, honest words, the CSV, and plots that do not lie."""

import numpy as np
import pandas as pd
from analysis_fixtures import SEED_MEANS, write_export

from analysis.bootstrap import Interval
from analysis.export import load_export
from analysis.plots import forest_figure, search_figure
from analysis.report import build_report, format_table, main, verdict
from analysis.search import summarize_search


def test_report_command_writes_headline_md_csv_and_plots(seed_export, capsys):
    assert main([str(seed_export), "--boot", "100"]) == 0
    out = seed_export / "report"
    md = (out / "contributions.md").read_text()
    assert md.split("\n\n")[1].startswith("```\nRan ")  # the run summary right under the title
    first = md.split("\n\n")[2]  # then the headline
    assert "1.5 epochs" in first and "3 pretraining seeds" in first and "resolved" in first
    assert "| sst | accuracy | 0.500 | 0.800 [" in md and "Every variant minus none" in md
    assert "NSP contribution (full - mlm_only) +0.100" in md and "= NSP loss effect with MLM (full - mlm_pairs)" in md
    assert "1 stopped_early" in md and "2 failed" in md and "Epochs over the pretraining corpus" in md
    csv = pd.read_csv(out / "contributions.csv")
    row = csv[(csv.task == "sst") & (csv.name == "MLM contribution (full - nsp_only)")].iloc[0]
    assert abs(row.estimate - 0.2) < 1e-9 and row.lo > 0 and row.verdict.startswith("positive (Holm p=")
    assert row.p_holm >= row.p_value and row.mde > 0 and row.family_m == 27 and row.holm_family == "secondary"
    assert "## Power at the Holm level" in md and "| 20 seeds |" in md and "alpha 0.05/27" in md
    for png in ("contributions.png", "contributions_forest.png", "search_response.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    printed = capsys.readouterr().out
    assert printed.startswith("Ran ") and printed.index("This run pretrained") < printed.index("\ncontrast ")


def test_words_only_when_the_holm_adjusted_p_is_below_005():
    iv = Interval(0.05, 0.01, 0.09, 0.01, 0.02, 50.0, 3, True, 0.01, 0.09, 2e-4, 2e-4)
    assert verdict(iv, 0.03).startswith("positive")
    assert verdict(iv, 0.2).startswith("inconclusive after Holm")
    assert verdict(Interval(**{**iv.__dict__, "reliable": False, "n_seeds": 2}), 0.001).startswith("unreliable")


def test_worse_than_none_is_said_and_a_contrast_against_a_collapsed_variant_not_credited(tmp_path):
    means = {"full": 0.70, "mlm_only": 0.72, "mlm_pairs": 0.71, "nsp_only": 0.5, "none": 0.74}  # collapsed: 0.5
    r = build_report(write_export(tmp_path / "e", means, collapsed=("nsp_only",), n_examples=400,
                                  jitter=(-0.005, 0, 0.005)), n_boot=100)
    md = r.to_markdown()
    # nsp_only's fine-tunings predict one label: they did not learn, and no estimate uses them
    assert "12 fine-tuning(s) did not learn" in md and "nsp_only on sst: worse than none" not in md
    assert "full on sst: worse than none: full - none -0.040" in md and "negative (Holm p=" in md
    assert "not credited to MLM" in md and "nsp_only: collapsed (seed 0: token cosine 1.0000 vs none's 0.5000" in md
    table = format_table(r)
    cells = [ln for ln in table.splitlines() if ln.startswith("MLM contribution (full - nsp_only)")]
    assert cells and "!" in cells[0] and "nsp_only!" not in table  # flags mark cells, not names


def test_an_underpowered_run_says_so_and_what_would_resolve_it(tmp_path):
    means = {"full": 0.62, "mlm_only": 0.61, "mlm_pairs": 0.615, "nsp_only": 0.6, "none": 0.6}
    r = build_report(write_export(tmp_path / "e", means, n_examples=200, variant_jitter={"full": (0.05, -0.05, 0.0)}),
                     n_boot=100)
    head = format_table(r).split("\n\n")[1]  # the headline, under the summary
    assert "minimal detectable effect" in head and ("pretraining seeds" in head or "test examples" in head)


def test_a_task_not_learned_is_marked_in_the_tables(tmp_path):
    r = build_report(write_export(tmp_path / "e", SEED_MEANS, tasks=("sst", "ner"),
                                  task_means={"ner": {v: 0.5 for v in SEED_MEANS}}), n_boot=50)
    assert "ner (not learned at this budget)" in r.to_markdown()
    assert "not learned at this budget" in format_table(r) and "1 task was not learned" in format_table(r)


def test_two_seed_export_prints_no_confident_interval_and_plots_points_not_whiskers(tmp_path):
    r = build_report(write_export(tmp_path / "e", SEED_MEANS, seeds=(0, 1), jitter=(-0.02, 0.02)), n_boot=50)
    md = r.to_markdown()
    assert "no reliable interval: 2 seeds" in md and "unreliable: 2 pretraining seeds" in md
    assert "positive (" not in md
    fig = forest_figure(r.contributions)
    ax = fig.axes[0]
    whiskers = [ln for ln in ax.get_lines() if ln.get_transform() == ax.transData and len(ln.get_xdata()) == 2
                and ln.get_ydata()[0] == ln.get_ydata()[1]]
    assert not whiskers and any(ln.get_marker() == "x" for ln in ax.get_lines())
    assert any("unreliable (2 seeds)" in t.get_text() for t in fig.legends[0].get_texts())


def test_search_axes_say_too_few_trials_instead_of_nan(tmp_path):
    trials = [(0.5, 0.2, 0.15, 0.6, "completed", 100), (1.5, 0.8, 0.3, 0.7, "completed", 100)]
    s = summarize_search(load_export(write_export(tmp_path / "e", {"full": 0.8, "none": 0.5}, search=trials)).runs)
    labels = [ax.get_xlabel() for ax in search_figure(s).axes]
    assert labels and all("too few completed trials" in lab and "nan" not in lab for lab in labels)
    assert np.isnan(s.spearman.get("mlm_weight", np.nan))


def test_bad_export_dir_is_one_line_error(tmp_path, capsys):
    assert main([str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_budget_kind_is_stated_and_unequal_compute_gets_gains_per_unit(tmp_path):
    import pandas as pd

    root = write_export(tmp_path / "e", SEED_MEANS)
    runs = pd.read_parquet(root / "runs.parquet")
    runs["budget"] = "steps"
    runs["train_flops"] = runs["variant"].map({"full": 1e15, "mlm_only": 1e15, "mlm_pairs": 1e15, "nsp_only": 1e15,
                                               "none": 0.0}).astype(float)
    runs.to_parquet(root / "runs.parquet")
    equal = build_report(root, n_boot=200).to_markdown()
    assert "at equal steps" in equal and "Gains per unit of compute" not in equal
    runs.loc[runs.variant == "mlm_only", "train_flops"] = 2e15
    runs.to_parquet(root / "runs.parquet")
    unequal = build_report(root, n_boot=200).to_markdown()
    assert "mlm_only 2.00x full's training FLOPs" in unequal and "## Gains per unit of compute" in unequal


def test_the_terminal_prints_the_headline_and_one_compact_contrast_by_task_table(seed_export):
    r = build_report(seed_export, n_boot=100)
    c = r.contributions
    text = format_table(r)
    lines = text.splitlines()
    names = list(dict.fromkeys(e.contrast.name for e in c.contrasts))
    summary, head = (block.splitlines() for block in text.split("\n\n")[:2])
    assert summary[0].startswith("Ran ") and len(summary) <= 12
    assert len(lines) <= len(summary) + 1 + len(head) + 1 + len(names) + 4  # summary, headline, table, a footer
    assert max(len(ln) for ln in lines) <= 160
    header = next(ln for ln in lines if ln.startswith("contrast "))
    assert all(t in header for t in ("sst", "topic", "average (finetune)"))
    row = next(ln for ln in lines if ln.startswith("MLM contribution (full - nsp_only)"))
    assert "+0.200 [" in row and "]*" in row  # resolved: marked
    assert "contributions.md" in lines[-1] and "chance" not in text.split("\n\n", 1)[1]  # variant table: the .md


def test_the_terminal_says_none_resolves_when_nothing_does(tmp_path):
    flat = {v: 0.6 for v in ("full", "mlm_only", "mlm_pairs", "nsp_only", "none")}
    r = build_report(write_export(tmp_path / "e", flat, n_examples=200), n_boot=100)
    text = format_table(r)
    m = len(r.contributions.contrasts)
    assert f"None of the {m} contrasts resolves" in text and "The other" not in text
    assert "*" not in text.split("\ncontrast ", 1)[1].split("\n\n")[0]


def test_the_headline_says_first_when_the_encoders_never_left_the_word_frequency_stage(seed_export):
    """Held-out MLM accuracy below 15% is said right after the budget, with the preset that trains longer; an
    export whose encoders passed it gets no such sentence."""
    import pandas as pd

    from analysis.contributions import estimate_contributions
    from analysis.export import load_export
    from analysis.headline import headline

    def first_lines(acc):
        runs = pd.read_parquet(seed_export / "runs.parquet")
        runs.assign(mlm_acc=acc).to_parquet(seed_export / "runs.parquet")
        c = estimate_contributions(load_export(seed_export), np.random.default_rng(0), n_boot=100)
        return headline(c)

    assert not any("word frequencies" in s for s in first_lines(np.where(
        pd.read_parquet(seed_export / "runs.parquet")["variant"] == "mlm_only", 0.2, 0.05)))  # one past it: readable
    low = first_lines(0.05)
    assert "learned little beyond word frequencies" in low[1] and "full 5.0%" in low[1] and "none" not in \
        low[1].split("(")[1].split(";")[0] and "--preset cpu-long" in low[1]
    assert not any("word frequencies" in s for s in first_lines(0.31))


def test_a_detectable_effect_beyond_the_metrics_range_is_said_in_words(tmp_path):
    """Seeds that disagree wildly give an MDE above 1: no number beyond [0, 1] is printed as a detectable effect."""
    import re

    means = {"full": 0.6, "mlm_only": 0.6, "mlm_pairs": 0.6, "nsp_only": 0.6, "none": 0.6}
    root = write_export(tmp_path / "e", means, n_examples=40,
                        variant_jitter={"mlm_only": (-0.35, 0.0, 0.35), "full": (0.35, -0.35, 0.0),
                                        "mlm_pairs": (0.0, 0.35, -0.35), "nsp_only": (0.3, -0.3, 0.0)})
    r = build_report(root, n_boot=100)
    text = format_table(r) + r.to_markdown()
    assert any(e.power is not None and e.power.mde >= 1 for e in r.contributions.contrasts)
    assert "beyond a [0, 1] metric's range" in text or "no difference a metric can show" in text
    for number in re.findall(r"(?:must be about|MDE now[^\n]*\n[^\n]*\| )(\d+\.\d+)", text):
        assert float(number) < 1.0


def test_the_report_command_reads_the_instrument_check_beside_a_main_job_export(tmp_path, capsys):
    """`python -m analysis.report RUN/export` on a main job's export finds RUN/instrument_check's verdicts, so the
    summary's Check line says PASS or FAIL as the run itself printed."""
    import json

    root = write_export(tmp_path / "run" / "export", SEED_MEANS)
    assert main([str(root), "--boot", "50"]) == 0
    assert "Check    no instrument check with this run" in capsys.readouterr().out
    verdicts = tmp_path / "run" / "instrument_check" / "report"
    verdicts.mkdir(parents=True)
    (verdicts / "known_answer.json").write_text(json.dumps({"passed": False, "effects": [], "null": {"called": 1}}))
    assert main([str(root), "--boot", "50"]) == 0
    assert "Check    FAIL: no planted effect recovered on a planted language; 1 false call on its null task" in capsys.readouterr().out


def test_the_headline_gives_the_checks_verdict_once_per_contrast_and_counts_each_sign(seed_export):
    """The check vouches for a contrast, not a task row: a contrast quoted on several rows carries its verdict
    at its first quote only; the primary sentence counts resolved cells by sign."""
    from analysis.headline import headline, resolved
    from analysis.known_answer import PLANTED_EFFECTS

    c = build_report(seed_export, n_boot=100).contributions
    check = {"passed": True, "null": {"called": 0},
             "effects": [{"name": e.name, "task": e.task, "weights": dict(e.weights), "verdict": "recovered"}
                         for e in PLANTED_EFFECTS[:2]]}
    text = " ".join(headline(c, check))
    quoted = [n for n in {e.contrast.name for e in c.contrasts} if f"{n} on " in text]
    assert max(text.count(f"{n} on ") for n in quoted) > 1  # a contrast quoted twice, so the test can fail
    assert text.count("(instrument check") + text.count("(no planted control") == len(quoted)
    prim = [e for e in c.contrasts if e.holm_family == "primary"]
    pos = sum(resolved(e) and e.interval.estimate > 0 for e in prim)
    neg = sum(resolved(e) and e.interval.estimate < 0 for e in prim)
    assert f"{pos} resolved positive, {neg} negative" in text


def test_at_the_word_frequency_stage_the_headline_does_not_advise_more_seeds(tmp_path):
    """More seeds cannot resolve anything while the encoders hold word frequencies: the headline's 'largest open
    difference ... would take ~N seeds' is left out there (the summary's Next names the longer preset instead)."""
    from analysis.contributions import estimate_contributions
    from analysis.export import load_export
    from analysis.headline import headline

    means = {"full": 0.62, "mlm_only": 0.61, "mlm_pairs": 0.615, "nsp_only": 0.6, "none": 0.6}
    root = write_export(tmp_path / "e", means, n_examples=200, variant_jitter={"full": (0.05, -0.05, 0.0)})

    def sentences(acc):
        runs = pd.read_parquet(root / "runs.parquet")
        runs.assign(mlm_acc=acc).to_parquet(root / "runs.parquet")
        return headline(estimate_contributions(load_export(root), np.random.default_rng(0), n_boot=100))

    assert any("largest open difference" in s for s in sentences(0.31))
    assert not any("largest open difference" in s for s in sentences(0.05))


def test_the_non_neural_baselines_scores_sit_beside_chance_in_plain_words(tmp_path):
    """A probe export with a TF-IDF baseline: the scores table gains a "non-neural baseline" column (its mean score
    and name on the probe rows), and a section reads each variant's probe against it; without one, neither."""
    from analysis_fixtures import with_modes

    probe = write_export(tmp_path / "probe", {"mlm_only": 0.8, "none": 0.6})
    tfidf = write_export(tmp_path / "tfidf", {"mlm_only": 0.7, "none": 0.7})
    md = build_report(with_modes(tmp_path / "on", {"probe": probe, "baseline-tfidf": tfidf}), n_boot=100).to_markdown()
    assert "| task | metric | chance | non-neural baseline | mlm_only | none |" in md
    assert "| sst (probe) | accuracy | 0.500 | 0.700 (TF-IDF logistic regression) | 0.800 [" in md
    assert "## What the probe adds over a non-neural baseline" in md
    assert "| mlm_only | sst (probe) | TF-IDF logistic regression | +0.100 [" in md
    plain = build_report(with_modes(tmp_path / "off", {"probe": probe}), n_boot=100).to_markdown()
    assert "non-neural baseline" not in plain
