"""The collapse flag separates the pilot's collapse from random initialisation (relative to none)."""

import numpy as np
from analysis_fixtures import SEED_MEANS, write_export

from analysis.contributions import estimate_contributions
from analysis.export import load_export


def _estimate(root):
    return estimate_contributions(load_export(root), np.random.default_rng(0), n_boot=100)


def test_cosines_of_0995_on_every_encoder_none_included_flag_nothing(tmp_path):
    # the small CPU scale: a random 2-layer encoder's [CLS] cosine is above 0.99, so the raw diagnostic fires on all
    root = write_export(tmp_path / "e", SEED_MEANS, cosines={v: (0.995, 0.995) for v in SEED_MEANS})
    export = load_export(root)
    assert export.runs["collapsed"].all()  # runs.collapsed (absolute thresholds) fired on every run
    c = _estimate(root)
    assert not [f for f in c.flags if not f.task]
    assert not any("collapsed" in n for e in c.contrasts for n in e.notes)
    assert any("raw diagnostic runs.collapsed" in m and "without a collapse flag" in m for m in c.messages)


def test_the_pilots_collapse_cosine_1_and_one_label_fine_tuning_is_flagged_against_a_none_at_0995(tmp_path):
    means = {**SEED_MEANS, "nsp_only": 0.5}
    cos = {v: (0.995, 0.995) for v in means}
    root = write_export(tmp_path / "e", means, cosines=cos, collapsed=("nsp_only",))
    c = _estimate(root)
    flags = [f for f in c.flags if not f.task]
    assert [f.variant for f in flags] == ["nsp_only"]
    assert "cosine 1.0000 vs none's 0.9950" in flags[0].reason and "one label on 4/4" in flags[0].reason
    mlm = next(e for e in c.contrasts if e.task == "sst" and e.contrast.name == "MLM contribution (full - nsp_only)")
    assert any("collapsed" in n and "not credited to MLM" in n for n in mlm.notes)


def test_cosine_1_whose_fine_tuning_learned_more_than_one_label_is_not_flagged_and_one_label_alone_neither(tmp_path):
    cos = {v: (0.995, 0.995) for v in SEED_MEANS} | {"nsp_only": (1.0, 1.0)}
    c = _estimate(write_export(tmp_path / "a", SEED_MEANS, cosines=cos))  # nsp_only fine-tunes to 0.6
    assert not [f for f in c.flags if not f.task]
    c = _estimate(write_export(tmp_path / "b", {**SEED_MEANS, "nsp_only": 0.5}, majority=("nsp_only",),
                               cosines={v: (0.995, 0.995) for v in SEED_MEANS}))
    assert not [f for f in c.flags if not f.task]  # one label, but its vectors are no closer than none's
