"""Loading a checkpoint for fine-tuning and the probe: ``finetune.init=random`` (the instrument check's negative
switch) draws a fresh encoder per (variant, pretraining seed), and a checkpoint missing an encoder weight, or
holding one the model does not have, fails to load in one line."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from trainables.finetune.heads import Checkpoint, build_head_model, load_encoder
from trainables.presets import build_config
from trainables.task_types import TaskError
from trainables.tasks import load_hub_task
from test_tasks import FIXTURES

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def spec():
    return load_hub_task("mrpc", FIXTURES / "glue_mrpc").spec


def _run(tiny_checkpoint, out, variant: str, seed: int, perturb: float = 0.0):
    """A copy of the tiny checkpoint as pretraining run (variant, seed) wrote it: run.json beside the weights,
    which ``perturb`` moves (another run's weights of the same architecture)."""
    shutil.copytree(tiny_checkpoint, out)
    cfg = build_config("smoke", variant, [f"run.seed={seed}"])
    (out / "run.json").write_text(json.dumps({"status": "completed", "config": cfg.to_dict()}))
    if perturb:
        weights = load_file(str(out / "model.safetensors"))
        gen = torch.Generator().manual_seed(seed)
        save_file({k: v + perturb * torch.randn(v.shape, generator=gen) for k, v in weights.items()},
                  str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def _encoder(model) -> dict[str, torch.Tensor]:
    return {k: v for k, v in model.bert.state_dict().items() if not k.startswith("pooler.")}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_random_init_draws_per_variant_and_pretraining_seed_and_ignores_the_weights(tiny_checkpoint, spec, tmp_path):
    runs = {(v, s): _run(tiny_checkpoint, tmp_path / f"{v}-{s}", v, s, perturb=0.05 * (1 + s))
            for v, s in (("mlm_only", 0), ("none", 0), ("mlm_only", 1))}
    twin = _run(tiny_checkpoint, tmp_path / "twin", "mlm_only", 0, perturb=0.3)  # mlm_only-0's run, other weights
    models = {k: build_head_model(p, spec, seed=3, init="random") for k, p in runs.items()}
    # the checkpoint's weights are not read: another checkpoint of the same (variant, seed) gives the same model
    assert _same(models["mlm_only", 0].state_dict(), build_head_model(twin, spec, seed=3, init="random").state_dict())
    # each (variant, pretraining seed) draws its own encoder: a contrast keeps its seed noise
    assert not _same(_encoder(models["mlm_only", 0]), _encoder(models["none", 0]))
    assert not _same(_encoder(models["mlm_only", 0]), _encoder(models["mlm_only", 1]))
    # the task head is the fine-tuning draw's, as with the checkpoint: shared by the variants of a draw
    read = build_head_model(runs["none", 0], spec, seed=3)
    assert torch.equal(models["mlm_only", 0].classifier.weight, models["none", 0].classifier.weight)
    assert torch.equal(read.classifier.weight, models["none", 0].classifier.weight)
    assert not torch.equal(read.bert.embeddings.word_embeddings.weight,
                           models["none", 0].bert.embeddings.word_embeddings.weight)
    # the probe's random encoder is fine-tuning's (embeddings and layers), drawn per (variant, seed) too
    probe = {k: load_encoder(Checkpoint.load(p), CPU, "random").state_dict() for k, p in runs.items()}
    assert _same(probe["mlm_only", 0], _encoder(models["mlm_only", 0]))
    assert not _same(probe["mlm_only", 0], probe["none", 0])


def test_the_random_init_seed_is_the_same_in_every_process(tiny_checkpoint, tmp_path):
    """A sha256 of the variant and the pretraining seed, not Python's per-process hash()."""
    from trainables.finetune.heads import random_init_seed

    path = _run(tiny_checkpoint, tmp_path / "r", "full", 2)
    code = "import sys; from pathlib import Path; from trainables.finetune.heads import random_init_seed; " \
           "print(random_init_seed(Path(sys.argv[1])))"
    seed = os.environ.get("PYTHONHASHSEED", "")
    other_hash = "2" if seed == "1" else "1"  # another process with another str hash than this one's
    seen = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": other_hash}).stdout.strip()
    assert seen == str(random_init_seed(path))
    other = _run(tiny_checkpoint, tmp_path / "m", "full", 2)
    cfg = json.loads((other / "run.json").read_text())
    cfg["config"]["objective"]["mask_ratio"] = 0.3  # the same name at another mask ratio is another variant
    (other / "run.json").write_text(json.dumps(cfg))
    assert random_init_seed(other) != random_init_seed(path)


def _edit(tiny_checkpoint, out, drop=(), add=()):
    """A copy of the tiny checkpoint with tensors removed from (or added to) model.safetensors."""
    shutil.copytree(tiny_checkpoint, out)
    weights = load_file(str(out / "model.safetensors"))
    for k in drop:
        del weights[k]
    for k in add:
        weights[k] = torch.zeros(4)
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def _one_line_error(fn, *must_name) -> str:
    with pytest.raises(TaskError) as err:
        fn()
    text = str(err.value)
    assert "\n" not in text and all(m in text for m in must_name), text
    return text


@pytest.mark.parametrize("init", ["checkpoint", "random"])
def test_a_truncated_checkpoint_fails_to_load_in_one_line(tiny_checkpoint, spec, tmp_path, init):
    key = "bert.encoder.layer.1.attention.self.query.weight"
    cut = _edit(tiny_checkpoint, tmp_path / "cut", drop=[key])
    text = _one_line_error(lambda: build_head_model(cut, spec, seed=0, init=init), str(cut), key, "missing 1")
    assert "unexpected 0" in text
    _one_line_error(lambda: load_encoder(Checkpoint.load(cut), CPU, init), str(cut), "encoder.layer.1.attention")
    extra = _edit(tiny_checkpoint, tmp_path / "extra", add=["bert.encoder.layer.7.output.dense.bias"])
    _one_line_error(lambda: build_head_model(extra, spec, seed=0, init=init), "unexpected 1", "layer.7")


def test_the_pooler_is_an_encoder_weight_only_where_the_head_reads_it(tiny_checkpoint, spec, tmp_path):
    """A checkpoint saved without a pooler (BertForMaskedLM) serves the probe, token-level heads and
    finetune.head=cls (which draws its own); finetune.head=pooler would read a random pooler: refused."""
    bare = _edit(tiny_checkpoint, tmp_path / "bare", drop=["bert.pooler.dense.weight", "bert.pooler.dense.bias"])
    build_head_model(bare, spec, seed=0, head="cls")
    load_encoder(Checkpoint.load(bare), CPU)
    ner = load_hub_task("conll2003_ner", FIXTURES / "conll2003").spec
    build_head_model(bare, ner, seed=0)
    _one_line_error(lambda: build_head_model(bare, spec, seed=0, head="pooler"), "bert.pooler.dense.weight")
    build_head_model(tiny_checkpoint, spec, seed=0)  # a complete checkpoint loads, the pretraining heads unread
