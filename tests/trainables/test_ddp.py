"""DDP on 2 gloo processes: what would hang, diverge or waste communication on the first multi-GPU run.
The ranks run in ``trainables.gpu_check.ddp``'s harness, the one the GPU check runs on CUDA tensors.

* at a token budget every rank counts the global batch, so all stop at the same step (each counting its
  own rows x world, ranks stopped apart and the next collective waited for the 30-minute timeout);
* a NaN first seen on one rank at a log step stops every rank there (the losses are all-reduced);
* under gradient accumulation only the last micro-batch all-reduces gradients (``no_sync``);
* each rank draws its own dropout noise;
* what a step moves to the device is contiguous and comes from pinned memory (a spy on the copy).
"""

from pathlib import Path

import numpy as np
import pytest
import torch

from trainables.data.batches import Loader, Position
from trainables.data.masking import MaskedBatch
from trainables.gpu_check.ddp import TOKEN_BUDGET, ddp_config, run_jobs
from trainables.pretrain import build_pretraining_data


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


# warmup-stable-decay with a long decay, so that a snapshot's branch trains several steps (tests/trainables/test_snapshots.py)
WSD = ("optim.schedule=wsd", "optim.decay_frac=0.4", "optim.warmup_frac=0.1", "model.dropout=0.1", "run.log_every=5")
PACKED = ("optim.budget=tokens", "optim.batch_size=16", "optim.max_steps=9", "optim.grad_accum=2", "run.log_every=3")


@pytest.fixture(scope="module")
def ranks(cache, tmp_path_factory):
    """Every two-rank job of these tests, in the GPU check's DDP harness (trainables.gpu_check.ddp) on the CPU,
    the two gloo processes started once for all of them. The NaN job runs first: its instruments must be gone
    before the next job, or every later job stops at its second step and its test fails."""
    root = tmp_path_factory.mktemp("ranks")
    jobs = {"nan": (ddp_config(cache, "optim.max_steps=8", "run.log_every=2"), "nan"),
            "token_budget": (ddp_config(cache, *TOKEN_BUDGET), ""),
            "packed": (ddp_config(cache, *PACKED, variant="sentence_pair"), ""),
            **{f"no_sync{accum}": (ddp_config(cache, "optim.max_steps=3", "optim.batch_size=8",
                                              f"optim.grad_accum={accum}"), "no_sync") for accum in (1, 2)},
            "dropout": (ddp_config(cache, "optim.max_steps=2"), "dropout"),
            **{name: (ddp_config(cache, *WSD, *extra), "") for name, extra in
               (("wsd_branch", ("optim.max_steps=20", "run.snapshots=0.5")), ("wsd_plain", ("optim.max_steps=20",)),
                ("wsd_short", ("optim.max_steps=10", "optim.warmup_frac=0.2")))}}
    records = run_jobs([(cfg, root / name, mode) for name, (cfg, mode) in jobs.items()], "cpu")
    return dict(zip(jobs, records))


def test_at_a_token_budget_every_rank_stops_at_the_same_step(cache, ranks, tmp_path):
    r0, r1 = ranks["token_budget"]
    assert r0["steps"] == r1["steps"] and r0["tokens"] == r1["tokens"] and r0["flops"] == r1["flops"]
    from trainables.pretrain import run_pretraining

    single = run_pretraining(ddp_config(cache, *TOKEN_BUDGET[:3]), tmp_path / "single", device="cpu")
    assert (single.steps, single.tokens_seen) == (r0["steps"], r0["tokens"])  # global counts, as on one worker


def test_packed_sentence_pairs_train_on_two_ranks_with_accumulation_as_on_one(cache, ranks, tmp_path):
    """sentence_pairs' extra tensors (blocks, position ids, each pair's [CLS] and label) split by rank and
    micro-batch with the rows they belong to: two gloo ranks at accumulation 2 spend the one-worker run's budget."""
    r0, r1 = ranks["packed"]
    assert r0["steps"] == r1["steps"] and r0["tokens"] == r1["tokens"] and "nan" not in r0
    from trainables.pretrain import run_pretraining

    single = run_pretraining(ddp_config(cache, *PACKED, variant="sentence_pair"), tmp_path / "single", device="cpu")
    assert (single.steps, single.tokens_seen) == (r0["steps"], r0["tokens"])


def test_a_nan_on_one_rank_stops_every_rank_at_that_log_step(ranks):
    r0, r1 = ranks["nan"]
    assert "by step 2" in r0.get("nan", "") and "by step 2" in r1.get("nan", "")


def test_gradient_accumulation_all_reduces_only_the_last_micro_batch(ranks):
    per_step = {accum: ranks[f"no_sync{accum}"][0]["allreduce_per_step"] for accum in (1, 2)}
    assert len(per_step[1]) == 3 and per_step[1][0] > 0
    assert per_step[2] == per_step[1]  # one all-reduce of each bucket per optimizer step, not per micro-batch


def test_each_rank_draws_its_own_dropout_noise(ranks):
    r0, r1 = ranks["dropout"]
    assert r0["dropout"] != r1["dropout"]


def test_batches_reach_the_device_contiguous_and_pinned(cache, monkeypatch):
    """On CUDA the loader pins each rank's rows and a step copies contiguous micro-batch views of them
    (a strided slice made the non-blocking copy a synchronous pageable one). A CPU build cannot pin, so
    pinning is recorded by a stand-in and the copy is spied on."""
    pinned_ids: set = set()

    def fake_pin(self):
        for t in self[:6]:
            pinned_ids.add(t.untyped_storage().data_ptr())
        return self
    monkeypatch.setattr(MaskedBatch, "pin_memory", fake_pin)
    moved = []

    def spy_to(self, device, non_blocking=True):
        moved.append([(t.is_contiguous(), t.untyped_storage().data_ptr() in pinned_ids, non_blocking) for t in self[:6]])
        return self
    monkeypatch.setattr(MaskedBatch, "to", spy_to)
    from contextlib import nullcontext

    import trainables.pretrain as pretrain

    cfg = ddp_config(cache, "optim.batch_size=8", "optim.grad_accum=2", "optim.max_steps=3")
    data = build_pretraining_data(cfg)
    model = pretrain.pretrain_model(cfg, pretrain.initial_model(cfg, data))
    opt, sched = pretrain.build_optimizer(model, cfg)
    for rank in (0, 1):  # rank 1 of 2: its rows are every other row of the global batch
        for _, batch in Loader(data.steps, Position(0, 0, 0, 0), 3, pin=True, rank=rank, world=2, accum=2):
            assert batch.rows.tolist() == [rank, rank + 4, rank + 2, rank + 6]  # micro-batches 0 and 1, each a block
            pretrain.train_step(model, opt, sched, cfg, batch, {}, torch.device("cpu"), nullcontext)
    assert len(moved) == 2 * 3 * 2
    assert all(c and p and nb for step in moved for c, p, nb in step)


def test_with_loader_workers_the_dataloader_pins_not_the_training_thread(cache, monkeypatch):
    """With DataLoader worker processes (gpu-quick, bert-*) batches are pinned by the DataLoader's pin thread
    (pin_memory=True); pinning each batch after it arrived was a host copy in the training thread per step."""
    import threading

    pinned_in, built = [], []
    monkeypatch.setattr(MaskedBatch, "pin_memory", lambda self: pinned_in.append(threading.current_thread()) or self)
    real = torch.utils.data.DataLoader

    class Spy(real):
        def __init__(self, *args, **kwargs):
            built.append(kwargs.get("pin_memory", False))
            super().__init__(*args, **kwargs)
    monkeypatch.setattr(torch.utils.data, "DataLoader", Spy)
    data = build_pretraining_data(ddp_config(cache, "optim.batch_size=8"))
    got = list(Loader(data.steps, Position(0, 0, 0, 0), 3, workers=1, pin=True))
    assert len(got) == 3 and built == [True]
    assert threading.main_thread() not in pinned_in


def test_a_ranks_rows_get_the_masks_of_the_global_batch(cache):
    data = build_pretraining_data(ddp_config(cache, "optim.batch_size=8"))
    p = Position(0, 0, 0, 0)
    whole = data.steps.step(p)
    for rank in (0, 1):
        part = data.steps.step(p, rank, 2, 2)
        T = part.batch.input_ids.shape[1]
        assert np.array_equal(part.batch.input_ids.numpy(), whole.batch.input_ids[part.rows][:, :T].numpy())
        assert (part.n_tokens, part.shape) == (whole.n_tokens, whole.shape)  # the global cost on every rank


def test_a_snapshot_branch_on_two_ranks_is_the_short_run_and_leaves_the_long_one_as_it_was(ranks, tmp_path):
    """Under DDP (2 gloo ranks) the decay branch of a snapshot trains with both ranks, so neither waits on a
    collective the other never joins; rank 0 keeps it, and it is bit for bit the 10-step WSD run on two ranks; the
    20-step run ends with the weights it has without the branch (the weights, the optimizer and every rank's
    generators put back)."""
    from safetensors.torch import load_file

    from trainables.checkpoint import snapshots_of

    def weights(path):
        return load_file(Path(path) / "model.safetensors")

    def equal(a, b):
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    (b0, b1), (p0, _), (s0, _) = ranks["wsd_branch"], ranks["wsd_plain"], ranks["wsd_short"]
    assert b0["steps"] == b1["steps"] == p0["steps"] == 20 and "nan" not in b0 and "nan" not in b1
    root = Path(b0["out"])
    (snap,) = snapshots_of(root / "rank0")
    assert (snap["steps"], snap["branched_at"]) == (10, 6) and not snapshots_of(root / "rank1")
    assert equal(weights(snap["path"]), weights(Path(s0["out"]) / "rank0"))
    assert snap["tokens_seen"] == s0["tokens"]
    assert equal(weights(root / "rank0"), weights(Path(p0["out"]) / "rank0"))
