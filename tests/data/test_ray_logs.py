"""Logs a person can read: a preparation on Ray Data with stdout not a terminal (a log file, CI) keeps the
project's own lines and not Ray Data's periodic progress blocks; on a terminal Ray Data's bars stay."""

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from trainables.data.prepare import _quiet_ray_data
from trainables.data.sources import synthetic_documents
from trainables.data.tokenizer import train_wordpiece

RAY_DATA_BLOCK = ("Running Dataset", "Total Progress", "Active & requested resources", "Execution plan of Dataset")


def _context():
    return SimpleNamespace(enable_progress_bars=True, print_on_execution_start=True)


def test_progress_is_quieted_only_off_a_terminal_and_restored_after():
    ctx = _context()
    with _quiet_ray_data(ctx, interactive=True):
        assert ctx.enable_progress_bars and ctx.print_on_execution_start
    with _quiet_ray_data(ctx, interactive=False):
        assert not ctx.enable_progress_bars and not ctx.print_on_execution_start
    assert ctx.enable_progress_bars and ctx.print_on_execution_start  # the process's other datasets keep theirs
    with pytest.raises(KeyError), _quiet_ray_data(ctx, interactive=False):
        raise KeyError("a failed preparation")
    assert ctx.enable_progress_bars and ctx.print_on_execution_start


@pytest.mark.slow
def test_a_ray_preparation_logged_to_a_file_has_no_progress_blocks(tmp_path):
    corpus, tok = tmp_path / "corpus", tmp_path / "tok"
    corpus.mkdir()
    docs = synthetic_documents(120, seed=3)
    for f in range(4):
        (corpus / f"part{f}.txt").write_text("\n\n".join(" ".join(d.sentences) for d in docs[f * 30:(f + 1) * 30]))
    train_wordpiece(synthetic_documents(300), 1024).save_pretrained(str(tok))
    log = tmp_path / "prepare.log"
    cmd = [sys.executable, "-m", "trainables.data", "prepare", "--preset", "smoke", "--engine", "ray",
           "--corpus", str(corpus), "--set", f"data.tokenizer_dir={tok}", "--set", "model.vocab_size=1024",
           "--cache-dir", str(tmp_path / "cache"), "--storage", str(tmp_path / "runs")]
    with open(log, "w") as out:  # stdout and stderr into one file, as `cmd > log 2>&1`
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, "RAY_DATA_NON_TTY_PROGRESS_LOG_INTERVAL": "1"}, timeout=600).returncode
    text = log.read_text()
    assert rc == 0, text
    assert "on ray with the cluster" in text and "prepared " in text and "120 documents" in text, text
    assert not [m for m in RAY_DATA_BLOCK if m in text], text
