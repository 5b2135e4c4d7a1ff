"""The instrument check end to end (slow; still run by .ci/run): a reduced known-answer sweep recovers the
planted MLM effect, and does not once fine-tuning ignores the checkpoint. The first test to fail if the
pretrained weights stop reaching fine-tuning."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REDUCED = ["--variants", "mlm_only,none", "--tasks", "planted_lexical", "--modes", "probe", "--seeds", "3", "--quiet",
           "--set", "optim.max_steps=500"]  # the lexical effect is large by 500 steps; the full check runs 1,200


def _known_answer(tmp_path, name, *extra) -> str:
    cmd = [sys.executable, str(ROOT / "sweeps" / "known_answer.py"), *REDUCED, "--storage", str(tmp_path),
           "--name", name, *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = (tmp_path / name / "report" / "known_answer.md").read_text()
    assert table in done.stdout or table.splitlines()[0] in done.stdout  # printed first, and written
    return next(line for line in table.splitlines() if line.startswith("| MLM learns word classes"))


@pytest.mark.slow
def test_the_planted_mlm_effect_is_recovered_and_not_without_the_checkpoint(tmp_path):
    assert _known_answer(tmp_path, "check").endswith("| **recovered** |")
    # fine-tuning told to ignore the checkpoint: every variant of a seed fine-tunes the same random encoder
    row = _known_answer(tmp_path, "random", "--set", "finetune.init=random")
    assert row.endswith("| not recovered |")
