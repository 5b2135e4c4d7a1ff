"""Before/after estimates of domain-adaptive pretraining on fixture exports with known values."""

import numpy as np
import pandas as pd
import pytest
from analysis_fixtures import _run_row

from analysis.domain import estimate_domain_shift, format_domain_table
from analysis.export import load_export

N = 200


def _rows(run_id, task, fs, acc):
    k = int(round(acc * N))
    gold = np.array(["a", "b"] * (N // 2))
    pred = np.where(np.arange(N) < k, gold, np.where(gold == "a", "b", "a"))
    ev = dict(run_id=run_id, task=task, finetune_seed=fs, mode="finetune", metric="accuracy", value=k / N,
              is_primary=True, n_examples=N, wall_time_s=1.0)
    preds = [dict(run_id=run_id, task=task, finetune_seed=fs, mode="finetune", example_id=f"{task}-{j}",
                  prediction=str(p), gold=str(g)) for j, (p, g) in enumerate(zip(pred, gold))]
    return ev, preds


def write_domain_export(root, before=0.6, after=0.7, seeds=(0, 1, 2), finetune_seeds=2, before_finetunes=None,
                        tasks=("sst", "topic"), with_before=True):
    """'before' scores ``before`` +- 0.02 across its fine-tunings, 'domain_adapt' ``after`` +- 0.03 across seeds."""
    before_finetunes = len(seeds) * finetune_seeds if before_finetunes is None else before_finetunes
    runs, evals, preds = [], [], []
    jitter = np.linspace(-1, 1, max(before_finetunes, 2))[:before_finetunes] if before_finetunes > 1 else [0.0]
    if with_before:
        runs.append({**_run_row("before-s0", "before", 0, weights=(1, 0, 0), steps=0), "mlm_acc": 0.05})
        for fs in range(before_finetunes):
            for task in tasks:
                ev, pr = _rows("before-s0", task, fs, before + 0.02 * jitter[fs])
                evals.append(ev)
                preds += pr
    for i, seed in enumerate(seeds):
        rid = f"domain_adapt-s{seed}"
        runs.append({**_run_row(rid, "domain_adapt", seed, weights=(1, 0, 0)), "mlm_acc": 0.3 + 0.1 * i})
        for fs in range(finetune_seeds):
            for task in tasks:
                ev, pr = _rows(rid, task, fs, after + 0.03 * (i - (len(seeds) - 1) / 2))
                evals.append(ev)
                preds += pr
    root.mkdir(parents=True)
    for name, rows in (("runs", runs), ("evals", evals), ("predictions", preds)):
        pd.DataFrame(rows).to_parquet(root / f"{name}.parquet")
    return root


def _shift(root, n_boot=200):
    return estimate_domain_shift(load_export(root), np.random.default_rng(0), n_boot=n_boot)


def test_known_values_give_the_known_gain_with_an_interval_excluding_zero(tmp_path):
    s = _shift(write_domain_export(tmp_path / "e"))
    assert [t.task for t in s.tasks] == ["sst", "topic", "average (finetune)"]
    for t in s.tasks:
        assert t.before.estimate == pytest.approx(0.6, abs=1e-9)
        assert t.after.estimate == pytest.approx(0.7, abs=1e-9)
        assert t.gain.estimate == pytest.approx(0.1, abs=1e-9)
        assert t.gain.reliable and t.gain.lo > 0 and t.gain.hi > t.gain.lo
        assert t.before.lo < 0.6 < t.before.hi  # before's fine-tuning noise is resampled
    assert s.before_finetunes == 6 and s.pretrain_seeds == (0, 1, 2) and s.messages == ()
    assert s.intrinsic["mlm_acc"] == pytest.approx((0.05, 0.4))


def test_no_difference_gives_an_interval_including_zero(tmp_path):
    s = _shift(write_domain_export(tmp_path / "e", before=0.7, after=0.7))
    for t in s.tasks:
        assert t.gain.estimate == pytest.approx(0.0, abs=1e-9) and t.gain.lo < 0 < t.gain.hi


def test_few_before_finetunings_are_shared_and_said_so(tmp_path):
    s = _shift(write_domain_export(tmp_path / "e", before_finetunes=1))
    assert s.tasks[0].gain.estimate == pytest.approx(0.1, abs=1e-9)
    assert s.before_finetunes == 1
    assert any("not resampled" in m for m in s.messages)


def test_missing_before_run_gives_a_message_and_no_rows(tmp_path):
    s = _shift(write_domain_export(tmp_path / "e", with_before=False))
    assert s.tasks == () and any("'before'" in m for m in s.messages)
    assert "'before'" in format_domain_table(s)


def test_table_and_frame_show_before_after_and_gain(tmp_path):
    s = _shift(write_domain_export(tmp_path / "e"))
    text = format_domain_table(s)
    header, first = text.splitlines()[:2]
    assert "before" in header and "after" in header and "gain" in header
    assert first.startswith("sst") and "+0.100" in first and "positive" in first
    assert "held-out MLM accuracy on the corpus: before 0.05, after 0.4" in text
    frame = s.to_frame()
    assert len(frame) == 3 * 3 and set(frame["quantity"]) == {"before", "after", "after - before"}
