"""sweeps/domain_adapt.py: CLI checks and configs (fast), and the sweep end to end on Ray (slow)."""

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from sweeps import domain_adapt
from trainables.config import ConfigError
from trainables.presets import build_config

REPO = Path(__file__).resolve().parents[2]


def write_corpus(path: Path, n_docs: int = 40) -> Path:
    """Blank-line separated documents of 3-6 sentences in a small 'clinical' register."""
    rng = random.Random(0)
    subj = ["The patient", "The doctor", "A nurse", "The clinic", "The trial", "Our team", "The surgeon"]
    verb = ["reported", "observed", "treated", "measured", "reviewed", "described", "recorded"]
    obj = ["a mild fever", "the blood pressure", "an allergic reaction", "the heart rate", "a small fracture"]
    tail = ["after the surgery", "during the visit", "in the morning", "before the scan", "at the follow-up"]
    docs = [" ".join(f"{rng.choice(subj)} {rng.choice(verb)} {rng.choice(obj)} {rng.choice(tail)}."
                     for _ in range(rng.randint(3, 6))) for _ in range(n_docs)]
    path.write_text("\n\n".join(docs) + "\n")
    return path


@pytest.fixture(scope="module")
def smoke_checkpoint(tmp_path_factory):
    """A smoke-preset checkpoint of ours (with run.json), pretrained 8 steps on the synthetic corpus."""
    from trainables.pretrain import run_pretraining

    out = tmp_path_factory.mktemp("base") / "ckpt"
    run_pretraining(build_config("smoke", "full", ["data.corpus=synthetic", "run.tensorboard=false"]), out,
                    device="cpu")
    return out


def test_checkpoint_and_corpus_are_required_with_one_line(tmp_path, capsys):
    assert domain_adapt.main(["--corpus", "x.txt", "--storage", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --checkpoint is required") and len(err.splitlines()) == 1
    assert domain_adapt.main(["--checkpoint", str(tmp_path), "--storage", str(tmp_path)]) == 2
    assert "--corpus is required" in capsys.readouterr().err
    assert domain_adapt.main(["--checkpoint", str(tmp_path / "nope" / "x"), "--corpus", "x.txt"]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_adapted_config_is_mlm_only_from_the_checkpoint_at_a_tenth_of_the_lr(smoke_checkpoint):
    args, ckpt = domain_adapt.parse_args(["--checkpoint", str(smoke_checkpoint), "--corpus", "synthetic"])
    assert args.preset == "smoke" and ckpt == str(smoke_checkpoint.resolve())  # the preset from its run.json
    cfg = build_config("smoke")
    adapted = domain_adapt.adapt_config(cfg, ckpt, domain_adapt.checkpoint_model(ckpt),
                                        domain_adapt.default_lr(cfg, args), args.steps)
    o = adapted.objective
    assert (o.variant, o.active, o.input_format) == ("domain_adapt", ("mlm",), "single")
    assert adapted.optim.lr == pytest.approx(cfg.optim.lr / 10) and adapted.optim.max_steps == cfg.optim.max_steps
    assert adapted.run.init_checkpoint == ckpt and adapted.model.hidden_size == 32
    before = domain_adapt.before_config(adapted)
    assert before.optim.max_steps == 0 and before.objective == adapted.objective
    explicit, _ = domain_adapt.parse_args(["--checkpoint", ckpt, "--corpus", "synthetic", "--set", "optim.lr=3e-4"])
    assert domain_adapt.default_lr(build_config("smoke", overrides=["optim.lr=3e-4"]), explicit) == 3e-4
    with pytest.raises(ConfigError, match="--steps=0"):
        domain_adapt.adapt_config(cfg, ckpt, adapted.model, 1e-4, 0)


def test_base_checkpoint_gets_seeds_x_finetune_seeds_finetunings():
    ids = ("before-s0", "domain_adapt-s0", "domain_adapt-s1")
    measured = [{"run_id": r, "cfg": {}, "checkpoint": r} for r in ids]
    args = argparse.Namespace(finetune_seeds=2, seeds=2, cpus_per_trial=1, gpus_per_trial=0, max_concurrent=0)
    specs = domain_adapt.finetune_phase(measured, ["sentiment"], args).param_space["spec"]["grid_search"]
    seeds = {}
    for s in specs:
        seeds.setdefault(s["run_id"], []).append(s["finetune_seed"])
    assert seeds == {"domain_adapt-s0": [0, 1], "domain_adapt-s1": [0, 1], "before-s0": [0, 1, 2, 3]}


@pytest.mark.slow
def test_domain_adapt_sweep_end_to_end(smoke_checkpoint, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt")
    cmd = [sys.executable, str(REPO / "sweeps" / "domain_adapt.py"), "--checkpoint", str(smoke_checkpoint),
           "--corpus", str(corpus), "--tasks", "sentiment", "--seeds", "1", "--finetune-seeds", "1",
           "--storage", str(tmp_path / "runs"), "--name", "x"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "(preset smoke)" in out and "lr 0.0001" in out
    export = tmp_path / "runs" / "x" / "export"
    runs = pd.read_parquet(export / "runs.parquet").set_index("variant")
    assert sorted(runs.index) == ["before", "domain_adapt"] and set(runs["status"]) == {"completed"}
    assert runs.loc["before", "steps"] == 0 and runs.loc["domain_adapt", "steps"] == 8
    cfg = json.loads(runs.loc["domain_adapt", "config_json"])
    assert cfg["run"]["init_checkpoint"] == str(smoke_checkpoint.resolve()) and cfg["data"]["corpus"] == str(corpus.resolve())
    evals = pd.read_parquet(export / "evals.parquet")
    primary = evals[evals["is_primary"] & (evals["task"] == "sentiment")]
    assert set(primary["run_id"]) == set(runs["run_id"])
    _same_weights(Path(runs.loc["before", "checkpoint"]), smoke_checkpoint)  # 'before' is the base model
    header = next(line for line in out.splitlines() if line.startswith("task"))
    assert "before" in header and "after" in header and "gain (after - before)" in header
    assert any(line.startswith("sentiment  ") and "accuracy" in line for line in out.splitlines())
    assert "held-out MLM accuracy on the corpus: before" in out
    assert (tmp_path / "runs" / "x" / "report" / "domain_adapt.csv").exists()


def _same_weights(a: Path, b: Path) -> None:
    from safetensors.torch import load_file

    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert set(wa) == set(wb) and all(bool((wa[k] == wb[k]).all()) for k in wa)
