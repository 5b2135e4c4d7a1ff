"""The controls of the ablation, as properties over every variant: only the loss differs.

* every variant of one pretraining seed sees the same (document, chunk) in the same batch at every step;
* mlm_pairs trains on exactly full's inputs (pairs, random negatives, token types, masks);
* the pretraining seed varies the data order too (unless data.data_order=fixed);
* a global batch gets the same masks on 1 worker and on 2 (gloo), and under gradient accumulation;
* static masking gives byte-identical inputs in every epoch.
"""

import json
import os

import pytest
import torch

from trainables.presets import build_config
from trainables.data.batches import Position, positions_from
from trainables.objectives import VARIANTS
from trainables.pretrain import build_pretraining_data

STEPS = 40  # more than one epoch of the small corpus below


def _cfg(tmp, variant, *extra):
    return build_config("smoke", variant, ["data.corpus=synthetic", "data.max_documents=80",
                                           f"data.cache_dir={tmp}", "run.tensorboard=false", *extra])


def _walk(data, steps=STEPS):
    """(position, batch) of the first ``steps`` training positions."""
    return [(p, data.steps.batch(p)) for p in positions_from(data.steps, Position(0, 0, 0, 0), steps)]


def _identities(data, steps=STEPS):
    out = []
    for p in positions_from(data.steps, Position(0, 0, 0, 0), steps):
        idx, rows = data.steps.phases[p.phase].batch_chunks(p.epoch, p.batch)
        out.append((p.epoch, tuple(idx.tolist()), tuple(rows["doc"].tolist())))
    return out


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def test_every_variant_of_a_seed_sees_the_same_chunks_in_the_same_batches(cache):
    per_variant = {v: _identities(build_pretraining_data(_cfg(cache, v, "run.seed=3"))) for v in VARIANTS}
    reference = per_variant["full"]
    assert len({e for e, _, _ in reference}) >= 2  # the walk crosses an epoch boundary
    for v, ids in per_variant.items():
        assert ids == reference, f"{v} sees other chunks than full"


def test_mlm_pairs_trains_on_exactly_the_inputs_of_full(cache):
    full, pairs = (_walk(build_pretraining_data(_cfg(cache, v, "run.seed=2"))) for v in ("full", "mlm_pairs"))
    for (_, a), (_, b) in zip(full, pairs):
        for name in ("input_ids", "token_type_ids", "attention_mask", "mlm_positions", "mlm_labels", "pair_labels"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
    single = _walk(build_pretraining_data(_cfg(cache, "mlm_only", "run.seed=2")))
    assert all((b.token_type_ids == 0).all() for _, b in single)  # the seed's mlm_only: one segment


def test_the_pretraining_seed_sets_the_data_order_unless_it_is_fixed(cache):
    s0, s1 = (_identities(build_pretraining_data(_cfg(cache, "full", f"run.seed={s}")), 10) for s in (0, 1))
    assert s0 != s1
    f0, f1 = (_identities(build_pretraining_data(_cfg(cache, "full", f"run.seed={s}", "data.data_order=fixed")), 10)
              for s in (0, 1))
    assert f0 == f1


def test_static_masking_gives_byte_identical_inputs_every_epoch(cache):
    def inputs_by_chunk(*extra):
        data = build_pretraining_data(_cfg(cache, "full", *extra))
        seen: dict[int, dict[int, bytes]] = {}
        for p, batch in _walk(data):
            idx, _ = data.steps.phases[0].batch_chunks(p.epoch, p.batch)
            for row, chunk in enumerate(idx.tolist()):
                seen.setdefault(chunk, {})[p.epoch] = batch.input_ids[row][batch.attention_mask[row] > 0].numpy().tobytes()
        return [v for v in seen.values() if len(v) >= 2]

    static = inputs_by_chunk("objective.static_masking=true")
    assert static and all(len(set(by_epoch.values())) == 1 for by_epoch in static)
    dynamic = inputs_by_chunk()
    assert sum(len(set(by_epoch.values())) > 1 for by_epoch in dynamic) > 0.9 * len(dynamic)


def test_gradient_accumulation_splits_the_same_masked_global_batch(cache, monkeypatch):
    seen = {}

    def record(name):
        import trainables.pretrain as pretrain

        real = pretrain.train_step

        def spy(module, opt, sched, cfg, batch, *args, **kw):
            ids = torch.empty_like(batch.batch.input_ids)
            ids[torch.from_numpy(batch.rows)] = batch.batch.input_ids  # back in global row order
            seen.setdefault(name, []).append(ids)
            return real(module, opt, sched, cfg, batch, *args, **kw)
        monkeypatch.setattr(pretrain, "train_step", spy)
        return pretrain

    for name, extra in (("one", ()), ("accum", ("optim.grad_accum=2",))):
        pretrain = record(name)
        pretrain.run_pretraining(_cfg(cache, "full", "optim.max_steps=4", *extra), cache / f"run-{name}")
    assert len(seen["accum"]) == 4 and all(torch.equal(a, b) for a, b in zip(seen["one"], seen["accum"]))


def _worker(rank: int, world: int, init: str, cfg_json: str, out: str):
    import torch.distributed as dist

    import trainables.pretrain as pretrain
    from trainables.config import from_dict

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    torch.set_num_threads(1)
    real, mine = pretrain.train_step, []

    def spy(module, opt, sched, cfg, batch, *args):
        assert batch.rows.tolist() == list(range(rank, cfg.optim.batch_size, world))
        mine.append(batch.batch.input_ids.tolist())  # what this rank trains on
        return real(module, opt, sched, cfg, batch, *args)
    pretrain.train_step = spy
    pretrain.run_pretraining(from_dict(json.loads(cfg_json)), f"{out}/rank{rank}", device="cpu")
    with open(f"{out}/rows{rank}.json", "w") as f:
        json.dump(mine, f)
    dist.destroy_process_group()


def test_the_same_global_batch_gets_the_same_masks_on_one_worker_and_on_two(cache, tmp_path):
    cfg = _cfg(cache, "full", "optim.max_steps=4", "optim.batch_size=8")
    build_pretraining_data(cfg)  # prepared once, before the workers start
    for world in (1, 2):
        out = tmp_path / f"w{world}"
        out.mkdir()
        init = f"file://{tmp_path}/rendezvous{world}"
        torch.multiprocessing.spawn(_worker, args=(world, init, cfg.to_json(), str(out)), nprocs=world, join=True)
    one = json.loads((tmp_path / "w1" / "rows0.json").read_text())
    two = [json.loads((tmp_path / "w2" / f"rows{r}.json").read_text()) for r in (0, 1)]
    assert len(one) == 4
    for step, rows in enumerate(one):
        width = len(two[0][step][0])
        assert [r[:width] for r in rows[0::2]] == two[0][step] and [r[:width] for r in rows[1::2]] == two[1][step]


def test_runs_record_the_data_seed_and_order(cache, tmp_path):
    from trainables.pretrain import run_pretraining

    run_pretraining(_cfg(cache, "mlm_only", "run.seed=5", "optim.max_steps=2"), tmp_path / "r")
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["data_seed"] == 5 and run["config"]["data"]["data_order"] == "per_seed"
    assert run["tokenizer_sha256"] and os.path.exists(tmp_path / "r" / "tokenizer.json")
