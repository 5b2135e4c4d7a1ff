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
