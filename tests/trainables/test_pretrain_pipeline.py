"""Data-pipeline caching, the hub code path on local files, phase 2 and gradient accumulation, and
that the pretraining CLI never imports Ray."""

import json
import subprocess
import sys

import pytest
import torch

from trainables.config import build_config
from trainables.data.sources import load_documents
from trainables.pretrain import build_pretraining_data, run_pretraining


def _cfg(tmp_path, *extra, variant="full"):
    return build_config("smoke", variant, ["data.corpus=synthetic", f"data.cache_dir={tmp_path / 'cache'}",
                                           "run.tensorboard=false", *extra])


def test_token_cache_is_reused_and_invalidated_by_any_change(tmp_path):
    first = build_pretraining_data(_cfg(tmp_path))
    files = sorted((tmp_path / "cache" / "tokens").glob("*.parquet"))
    assert len(files) == 1
    mtime = files[0].stat().st_mtime_ns
    again = build_pretraining_data(_cfg(tmp_path))
    assert again.corpus.key == first.corpus.key and files[0].stat().st_mtime_ns == mtime  # not rebuilt
    other_corpus = build_pretraining_data(_cfg(tmp_path, "data.max_documents=300"))
    other_vocab = build_pretraining_data(_cfg(tmp_path, "model.vocab_size=512"))
    other_split = build_pretraining_data(_cfg(tmp_path, "data.data_seed=1"))
    keys = {first.corpus.key, other_corpus.corpus.key, other_vocab.corpus.key, other_split.corpus.key}
    assert len(keys) == 4 and len(list((tmp_path / "cache" / "tokens").glob("*.parquet"))) == 4


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
    assert data.batchers[0].batch(0, 0).input_ids.shape[1] <= 32 < data.batchers[1].batch(0, 0).input_ids.shape[1]


def test_pretraining_cli_does_not_import_ray():
    code = "import sys, trainables.pretrain, trainables.finetune; sys.exit(int(any(m.split('.')[0] == 'ray' for m in sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
