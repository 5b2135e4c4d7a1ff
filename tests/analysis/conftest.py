"""Pytest fixtures of the analysis tests (helpers live in analysis_fixtures.py)."""

import pytest
from analysis_fixtures import SEED_MEANS, search_trials, write_export


@pytest.fixture
def seed_export(tmp_path):
    return write_export(tmp_path / "export", SEED_MEANS, search=search_trials(),
                        extra_runs=[("full", 3, "failed"), ("mlm_only", 3, "stopped_early"),
                                    ("none", 4, "failed")])
