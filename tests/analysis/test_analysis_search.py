"""Search-phase response and Optuna parameter importance."""

from analysis_fixtures import search_trials, write_export

from analysis.export import load_export
from analysis.search import summarize_search


def test_response_uses_full_budget_completed_trials_only(tmp_path):
    trials = search_trials() + [(1.0, 0.5, 0.2, 0.2, "completed", 50)]  # completed but short budget
    runs = load_export(write_export(tmp_path / "e", {"full": 0.8, "none": 0.5}, search=trials)).runs
    s = summarize_search(runs)
    assert len(s.trials) == 16
    assert s.excluded == {"status stopped_early": 1, "completed with fewer steps than the full budget": 1}
    assert s.params == ("mlm_weight", "nsp_weight", "mask_ratio")
    assert s.spearman["mlm_weight"] > 0.5 and s.spearman["mask_ratio"] < -0.2
    for ev in ("fanova", "ped_anova"):
        imp = s.importance[ev]
        assert max(imp, key=imp.get) == "mlm_weight", imp


def test_no_search_runs_gives_none(tmp_path):
    runs = load_export(write_export(tmp_path / "e", {"full": 0.8, "none": 0.5})).runs
    assert summarize_search(runs) is None


def test_a_search_shorter_than_the_measured_runs_is_called_a_demonstration(tmp_path):
    """--search-steps below the measured runs' steps: the report says the search is a demonstration, not a finding;
    trials as long as the measured runs get no such line."""
    short = [(mw, nw, mr, sc, st, 40) for mw, nw, mr, sc, st, _ in search_trials()]
    runs = load_export(write_export(tmp_path / "a", {"full": 0.8, "none": 0.5}, search=short)).runs
    assert any(m.startswith("a demonstration of the search at this budget: its trials trained at most 40 steps, "
                            "the measured runs 100") for m in summarize_search(runs).messages)
    runs = load_export(write_export(tmp_path / "b", {"full": 0.8, "none": 0.5}, search=search_trials())).runs
    assert not any("demonstration" in m for m in summarize_search(runs).messages)
