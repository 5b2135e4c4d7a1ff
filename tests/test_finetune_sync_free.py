"""Fine-tuning and the probe on an accelerator: no host sync per step, pinned batches, batched read-back,
the run's autocast, TF32 where allowed -- each checked on CPU.

The training step and the evaluation forward run on PyTorch's ``meta`` device, where tensors have shapes
but no values: anything that would wait on a GPU -- ``mask.all()`` inside transformers on a 2D
attention mask, ``.item()``, ``.cpu()`` -- raises there. The CUDA-only paths (pinned memory, TF32) are
exercised with spies in place of the CUDA calls.
"""

import math
from contextlib import nullcontext
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from trainables.finetune import api, loop, probe
from trainables.finetune.inputs import encode_split
from trainables.finetune.heads import Checkpoint, build_head_model, load_encoder
from trainables.finetune.loop import collate, predict_logits, train_model
from trainables.presets import build_config
from trainables.runtime import enable_tf32
from trainables.task_types import get_task_type
from trainables.tasks import load_hub_task, with_labels_from_train
from test_tasks import FIXTURES

META = torch.device("meta")
TASKS = {"pair": ("mrpc", "glue_mrpc"), "tagging": ("conll2003_ner", "conll2003"), "qa": ("squad", "squad")}


@pytest.fixture(scope="module")
def cfg():
    return build_config("smoke", overrides=["finetune.epochs=1", "finetune.batch_size=2", "finetune.qa_max_len=64",
                                            "finetune.qa_doc_stride=24", "run.device=cpu"])


@pytest.fixture(scope="module")
def ck(tiny_checkpoint):
    return Checkpoint.load(tiny_checkpoint)


def _task(kind: str):
    name, folder = TASKS[kind]
    return with_labels_from_train(load_hub_task(name, FIXTURES / folder))


def _encoded(data, ck, cfg, split: str, train: bool):
    return encode_split(data, list(data[split]), ck.tokenizer, cfg.finetune, ck.max_position, train)


def _padded_batches(enc, batch_size: int, rng) -> int:
    from trainables.batching import bucket_batches

    lengths = np.asarray(enc.lengths())
    return sum(len(set(lengths[idx])) > 1 for idx in bucket_batches(lengths, batch_size, rng))


@pytest.fixture
def no_autocast(monkeypatch):
    """torch.autocast refuses the meta device; the run's autocast is checked by its own test below."""
    monkeypatch.setattr(loop, "autocast", lambda device, precision: nullcontext())
    monkeypatch.setattr(probe, "autocast", lambda device, precision: nullcontext(), raising=False)


def _fake_to_host(calls: list):
    """``loop.to_host`` for meta tensors: zeros of the right shapes, and a count of the transfers."""
    def to_host(tensors):
        calls.append(len(tensors))
        return [np.zeros(tuple(t.shape), dtype=np.float32) for t in tensors]
    return to_host


@pytest.mark.parametrize("kind", list(TASKS))
def test_training_step_and_eval_forward_never_read_the_device(ck, cfg, kind, monkeypatch, no_autocast):
    data = _task(kind)
    model = build_head_model(ck.path, data.spec, 0, cfg.finetune.dropout).to(META)
    enc = _encoded(data, ck, cfg, "train", True)
    assert _padded_batches(enc, cfg.finetune.batch_size, np.random.default_rng(0)), "no padded batch to check"
    losses = []
    logger = SimpleNamespace(step=lambda step, loss: losses.append(loss), epoch=lambda epoch: None)
    steps = train_model(model, enc, cfg.finetune, np.random.default_rng(0), META, ck.tokenizer.pad_token_id,
                        cfg.run.precision, logger)
    assert steps == len(losses) >= 2 and all(loss.device == META for loss in losses)  # losses stayed on device
    transfers: list = []
    monkeypatch.setattr(loop, "to_host", _fake_to_host(transfers), raising=False)
    dev = _encoded(data, ck, cfg, "train", False)
    logits = predict_logits(model, dev, 2, META, ck.tokenizer.pad_token_id, cfg.run.precision)
    assert len(logits) == len(dev.inputs) and all(x is not None for x in logits)
    assert len(transfers) == math.ceil(math.ceil(len(dev.inputs) / 2) / loop.READBACK_BATCHES)  # per group


def test_probe_forward_never_reads_the_device(ck, cfg, monkeypatch, no_autocast):
    encoder = load_encoder(ck, torch.device("cpu")).to(META)
    transfers: list = []
    monkeypatch.setattr(loop, "to_host", _fake_to_host(transfers), raising=False)
    for kind in ("pair", "tagging"):
        data = _task(kind)
        enc = _encoded(data, ck, cfg, "train", False)
        feats = probe.probe_features(encoder, enc, get_task_type(data.spec.type), 2, META,
                                     ck.tokenizer.pad_token_id)
        assert len(feats) == len(enc.inputs) and all(f is not None for f in feats)
    assert len(transfers) == 2  # one per (small) evaluation, not one per batch


class HostReads:
    """Counts the tensor methods that read a value back to the host (on a GPU: a sync each)."""

    NAMES = ("cpu", "item", "tolist", "all")

    def __init__(self, monkeypatch):
        self.calls = {n: 0 for n in self.NAMES}
        for name in self.NAMES:
            monkeypatch.setattr(torch.Tensor, name, self._counted(name, getattr(torch.Tensor, name)))

    def _counted(self, name, real):
        def method(t, *args, **kwargs):
            self.calls[name] += 1
            return real(t, *args, **kwargs)
        return method

    @property
    def total(self) -> int:
        return sum(self.calls.values())


@pytest.mark.parametrize("kind", list(TASKS))
def test_evaluation_reads_back_once_per_group_of_batches(ck, cfg, kind, monkeypatch):
    data = _task(kind)
    model = build_head_model(ck.path, data.spec, 0, cfg.finetune.dropout)
    enc = _encoded(data, ck, cfg, "train", False)
    n_batches = len(enc.inputs)  # batches of one
    assert n_batches >= 4
    reads = HostReads(monkeypatch)
    predict_logits(model, enc, 1, torch.device("cpu"), ck.tokenizer.pad_token_id)
    assert reads.calls["cpu"] <= math.ceil(n_batches / loop.READBACK_BATCHES) < n_batches, reads.calls
    assert reads.total == reads.calls["cpu"], reads.calls  # nothing else is read back, no mask.all()


def test_probe_reads_back_once_per_group_of_batches(ck, cfg, monkeypatch):
    encoder = load_encoder(ck, torch.device("cpu"))
    data = _task("pair")
    enc = _encoded(data, ck, cfg, "train", False)
    assert len(enc.inputs) >= 4
    reads = HostReads(monkeypatch)
    probe.probe_features(encoder, enc, get_task_type("pair"), 2, torch.device("cpu"), ck.tokenizer.pad_token_id)
    assert reads.calls == {"cpu": 1, "item": 0, "tolist": 0, "all": 0}  # one transfer, not one per example


def test_read_back_groups_transfers_and_keeps_every_batch_intact(monkeypatch):
    calls = []
    real = loop.to_host
    monkeypatch.setattr(loop, "to_host", lambda ts: calls.append(len(ts)) or real(ts))
    batches = [(k, [torch.full((2, 3 + k), float(k)), torch.arange(k + 1.0)]) for k in range(5)]
    out = list(loop.read_back(iter(batches), every=2))
    assert calls == [4, 4, 2]  # 5 batches of 2 tensors in groups of 2 batches
    for (k, tensors), (key, arrays) in zip(batches, out):
        assert key == k and all(np.array_equal(a, t.numpy()) and a.dtype == np.float32
                                for a, t in zip(arrays, tensors))


def test_collate_pins_and_copies_without_blocking_on_cuda(monkeypatch):
    pinned, moved = [], []

    def pin_memory(t, *args, **kwargs):
        pinned.append(t)
        return t

    def to(t, *args, **kwargs):
        moved.append((t, args, kwargs))
        return t

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    monkeypatch.setattr(torch.Tensor, "to", to)
    feats = [{"input_ids": [2, 5, 3], "attention_mask": [1, 1, 1], "labels": [0, 1, -100]},
             {"input_ids": [2, 3], "attention_mask": [1, 1], "labels": [1, -100]}]
    batch = collate(feats, pad_id=0, device=torch.device("cuda"))
    assert len(pinned) == len(moved) == 3 and all(t.is_contiguous() for t in pinned)
    assert all(args == (torch.device("cuda"),) and kwargs == {"non_blocking": True} for _, args, kwargs in moved)
    assert batch["input_ids"].tolist() == [[2, 5, 3], [2, 3, 0]]
    pinned.clear()
    collate(feats, pad_id=0, device=torch.device("cpu"))
    assert not pinned  # a CPU run never pins (a CPU-only build cannot)


def test_fine_tuning_and_probe_run_under_the_runs_autocast(tiny_checkpoint, monkeypatch):
    entered = []
    real = loop.autocast

    def spy(device, precision):
        entered.append((device.type, precision))
        return real(device, precision)

    monkeypatch.setattr(loop, "autocast", spy)
    monkeypatch.setattr(probe, "autocast", spy)
    cfg = build_config("smoke", overrides=["run.device=cpu", "run.precision=bf16"])
    api.run_finetuning(tiny_checkpoint, [], [0], cfg, datasets=[_task("pair")])
    n_finetune = len(entered)
    probe.run_probe(tiny_checkpoint, [_task("pair")], cfg)
    assert n_finetune >= 2 and len(entered) > n_finetune  # training + evaluation, then the probe
    assert set(entered) == {("cpu", "bf16")}


TF32_PROBE = """
import json, sys, torch
from trainables.runtime import enable_tf32
on = enable_tf32(torch.device(sys.argv[1]), deterministic=sys.argv[2] == "1")
# what torch.compile's inductor reads when it autotunes, and the legacy flags: they raised after the
# per-backend fp32_precision alone ("a mix of the legacy and new APIs")
print(json.dumps([on, torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32,
                  torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.fp32_precision]))
"""


@pytest.mark.parametrize("device, deterministic, expected", [
    ("cpu", False, [False, "highest", False, True, "none"]),  # torch's defaults: nothing changed off CUDA
    ("cuda", False, [True, "high", True, True, "tf32"]),
    ("cuda:0", True, [False, "highest", False, False, "ieee"]),
])
def test_tf32_on_cuda_only_and_torch_can_read_its_flags_back(device, deterministic, expected):
    """TF32 flags are process-wide, so each case runs in a fresh interpreter (setting a CUDA device's
    flags needs no GPU)."""
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", TF32_PROBE, device, "1" if deterministic else "0"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == expected


def test_fine_tuning_and_probe_enable_tf32_for_their_device(tiny_checkpoint, monkeypatch):
    calls = []
    monkeypatch.setattr(api, "enable_tf32", lambda device, deterministic=False: calls.append((device, deterministic)))
    monkeypatch.setattr(probe, "enable_tf32", lambda device, deterministic=False: calls.append((device, deterministic)))
    api._device("cpu", build_config("smoke"))
    api._device(None, SimpleNamespace(run=SimpleNamespace(device="cpu", deterministic=True)))
    monkeypatch.setattr(probe, "load_encoder", lambda ck, device, *init: None)
    probe.run_probe(tiny_checkpoint, [], build_config("smoke", overrides=["run.device=cpu"]))
    assert calls == [(torch.device("cpu"), False), (torch.device("cpu"), True), (torch.device("cpu"), False)]
