"""Data-pipeline caching, the hub code path on local files, phase 2 and gradient accumulation, and
that the pretraining CLI never imports Ray."""

import json
import subprocess
import sys

import pytest
import torch

from trainables.presets import build_config
from trainables.data.sources import load_documents
from trainables.pretrain import build_pretraining_data, run_pretraining


def _cfg(tmp_path, *extra, variant="full"):
    return build_config("smoke", variant, ["data.corpus=synthetic", f"data.cache_dir={tmp_path / 'cache'}",
                                           "run.tensorboard=false", *extra])


def test_prepared_data_is_reused_and_a_new_fingerprint_for_any_change(tmp_path):
    first = build_pretraining_data(_cfg(tmp_path))
    manifest = first.corpus.path / "manifest.json"
    mtime = manifest.stat().st_mtime_ns
    again = build_pretraining_data(_cfg(tmp_path))
    assert again.fingerprint == first.fingerprint and manifest.stat().st_mtime_ns == mtime  # not prepared again
    others = [build_pretraining_data(_cfg(tmp_path, o)).fingerprint
              for o in ("data.max_documents=300", "model.vocab_size=512", "data.heldout_fraction=0.1")]
    assert len({first.fingerprint, *others}) == 4
    assert len(list((tmp_path / "cache" / "prepared").glob("*/manifest.json"))) == 4
    # the data order is a property of the samples, not of the preparation: a new seed reuses the shards
    assert build_pretraining_data(_cfg(tmp_path, "run.seed=4")).fingerprint == first.fingerprint


def test_hub_code_path_runs_on_a_local_dataset_folder(tmp_path):
    folder = tmp_path / "my_dataset"
    folder.mkdir()
    rows = [{"text": f"Document {i} starts here. It has a second sentence. And a third one too."} for i in range(12)]
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    docs = load_documents(f"hub:{folder}")
    assert len(docs) == 12 and len(docs[0].sentences) == 3


def test_local_jsonl_and_parquet_sources(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = ["First one. Second one.", "Another doc. With two."]
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps({"body": t}) for t in texts))
    pq.write_table(pa.table({"body": texts}), tmp_path / "c.parquet")
    assert len(load_documents(str(tmp_path / "c.jsonl"), text_column="body")) == 2
    assert len(load_documents(str(tmp_path / "c.parquet"), text_column="body")) == 2
    with pytest.raises(ValueError, match="no 'text' column"):
        load_documents(str(tmp_path / "c.parquet"))


def test_phase_two_and_gradient_accumulation(tmp_path):
    cfg = _cfg(tmp_path, "optim.max_steps=6", "optim.phase2_steps=2", "optim.phase2_seq_len=64",
               "data.seq_len=32", "optim.grad_accum=2", "run.log_every=1")
    steps = []
    result = run_pretraining(cfg, tmp_path / "run", lambda m, checkpoint_dir=None: steps.append(m))
    assert result.steps == 6
    lengths = [m for m in steps if "loss/total" in m]
    assert all(torch.isfinite(torch.tensor(m["loss/total"])) for m in lengths)
    data = build_pretraining_data(cfg)
    from trainables.data.batches import Position

    short, long = data.steps.batch(Position(0, 0, 0, 0)), data.steps.batch(Position(4, 1, 0, 0))
    assert short.input_ids.shape[1] <= 32 < long.input_ids.shape[1]


def test_pretraining_cli_does_not_import_ray():
    code = "import sys, trainables.pretrain, trainables.finetune; sys.exit(int(any(m.split('.')[0] == 'ray' for m in sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
