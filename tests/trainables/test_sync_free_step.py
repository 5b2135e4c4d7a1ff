"""Between two log steps the training step never reads a tensor back to the host.

The step runs on PyTorch's ``meta`` device, where tensors have shapes but no values: anything that
would wait on a GPU -- ``.item()``, ``float()``/``bool()`` of a tensor, a boolean index with a
data-dependent size, a NaN check -- raises there. The real loop's pieces run unchanged: the loader's
batches, the model, every objective's loss, gradient clipping, AdamW and the schedule.
"""

from contextlib import nullcontext

import pytest
import torch

from trainables.presets import build_config
from trainables.data.batches import Loader, Position
from trainables.pretrain import initial_model, pretrain_model, build_optimizer, build_pretraining_data, train_step


@pytest.mark.parametrize("variant, extra", [("full", ()), ("mlm_only", ()), ("nsp_only", ()), ("mlm_sop", ()), ("electra", ()),
                                            ("full", ("optim.grad_accum=2",))])
def test_no_host_sync_between_log_steps(tmp_path, variant, extra):
    cfg = build_config("smoke", variant, ["data.corpus=synthetic", f"data.cache_dir={tmp_path}",
                                          "run.tensorboard=false", *extra])
    data = build_pretraining_data(cfg)
    meta = torch.device("meta")
    model = pretrain_model(cfg, initial_model(cfg, data)).to(meta)
    opt, sched = build_optimizer(model, cfg)
    meter: dict = {}
    padded = 0
    for _, batch in Loader(data.steps, Position(0, 0, 0, 0), cfg.optim.max_steps, accum=cfg.optim.grad_accum):
        padded += not batch.batch.unpadded
        train_step(model, opt, sched, cfg, batch, meter, meta, nullcontext)
    assert padded, "no padded batch: the attention-mask path was not exercised"
    assert all(v.device == meta for v in meter.values())  # the losses stayed on the device
    with pytest.raises(RuntimeError, match="meta"):
        float(meter["loss/total"])  # and reading one back is exactly what the meta device refuses


@pytest.mark.parametrize("variant", ["full", "electra"])
def test_intrinsic_evaluation_reads_back_once_per_metric_not_per_batch(tmp_path, monkeypatch, variant):
    """Every intrinsic metric (MLM, the pair head, ELECTRA's detection, the collapse diagnostic) keeps its sums
    and vectors on the device and reads them back in one transfer: on the meta device a per-batch ``int()``,
    ``.cpu()`` or boolean index raises, and the transfers do not grow with the evaluation batches."""
    import numpy as np

    import trainables.intrinsic as intrinsic
    from trainables.objectives import mlm, pairs, rtd

    transfers = []

    def fake_to_host(tensors):  # the one read-back, on meta: zeros of the right shapes
        transfers.append(len(tensors))
        return [np.zeros(tuple(t.shape), np.float32) for t in tensors]
    for module in (intrinsic, mlm, pairs, rtd):
        monkeypatch.setattr(module, "to_host", fake_to_host)
    cfg = build_config("smoke", variant, ["data.corpus=synthetic", f"data.cache_dir={tmp_path}",
                                          "run.tensorboard=false", "run.eval_batches=4"])
    data = build_pretraining_data(cfg)
    assert len(data.eval_sets.masked["single"]) == 4
    model = pretrain_model(cfg, initial_model(cfg, data)).to(torch.device("meta"))
    metrics = intrinsic.evaluate_intrinsic(model, data.eval_sets, torch.device("meta"))
    assert {"mlm_acc", "mlm_acc_single", "pair_acc_nsp", "pair_acc_sop", "token_cosine"} <= set(metrics)
    assert len(transfers) == 6 if variant == "electra" else 5  # mlm x 2 formats, nsp, sop, (rtd,) collapse


def test_intrinsic_metrics_read_back_once_equal_the_per_batch_sums(tmp_path):
    """The device-side sums give the numbers the per-batch read-backs gave (a reference computed here)."""
    import torch.nn.functional as F

    from trainables.data.samples import IGNORE
    from trainables.intrinsic import evaluate_intrinsic
    from trainables.model import forward_pretraining

    cfg = build_config("smoke", "full", ["data.corpus=synthetic", f"data.cache_dir={tmp_path}",
                                         "run.tensorboard=false", "run.eval_batches=3"])
    data = build_pretraining_data(cfg)
    model = pretrain_model(cfg, initial_model(cfg, data)).eval()
    got = evaluate_intrinsic(model, data.eval_sets, torch.device("cpu"))
    nll = right = count = 0
    with torch.no_grad():
        for b in data.eval_sets.masked["nsp_pairs"]:
            logits = forward_pretraining(model.bert, b, need_pair=False).mlm_logits.float()
            labels = b.mlm_labels.reshape(-1)
            keep = labels != IGNORE
            nll += float(F.cross_entropy(logits[keep], labels[keep], reduction="sum"))
            right += int((logits[keep].argmax(-1) == labels[keep]).sum())
            count += int(keep.sum())
    import math

    assert got["mlm_acc"] == pytest.approx(right / count)
    assert got["mlm_ppl"] == pytest.approx(math.exp(nll / count), rel=1e-5)
