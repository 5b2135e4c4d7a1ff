"""The fused MLM cross-entropy tried and not kept (docs/results.md, "A fused MLM cross-entropy, tried and not
kept"), side by side with ``F.cross_entropy`` inside the real cpu-small training step: bf16 and fp32, alternating
rounds in one process, each side with its own model from the same initial weights, call counters showing which
loss each timed side ran, and a check that the two losses agree (value, gradient) on bf16 logits.

    python docs/experiments/fused_mlm_loss.py 2 5     # 2 threads, 5 rounds
    python docs/experiments/fused_mlm_loss.py 1 5     # 1 thread (a Ray trial's)
"""
import sys, statistics, torch, torch.nn.functional as F
from trainables.bench import build_sides, _time
from trainables.data.batches import Position, positions_from
from trainables.data.samples import IGNORE
from trainables.objectives import get_objective
from trainables.presets import build_config
from trainables.pretrain import build_pretraining_data, resolve_device
from trainables.runtime import set_allocator


class VocabCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, labels, rows):
        keep = labels != IGNORE
        safe = labels.clamp_min(0)
        lse = torch.cat([torch.logsumexp(logits[s:s + rows].float(), dim=-1) for s in range(0, len(logits), rows)])
        picked = logits.gather(1, safe[:, None]).squeeze(1).float()
        count = keep.sum()
        ctx.save_for_backward(logits, lse, safe, keep, count)
        ctx.rows = rows
        return ((lse - picked) * keep).sum() / count

    @staticmethod
    def backward(ctx, grad):
        logits, lse, safe, keep, count = ctx.saved_tensors
        scale = (grad / count) * keep
        out = torch.empty_like(logits)
        for s in range(0, len(logits), ctx.rows):
            e = s + ctx.rows
            p = (logits[s:e].float() - lse[s:e, None]).exp_()
            p.scatter_add_(1, safe[s:e, None], -keep[s:e, None].float())
            out[s:e] = p.mul_(scale[s:e, None])
        return out, None, None


calls = {"old": 0, "new": 0}
def old(out, batch, options=None):
    calls["old"] += 1
    return F.cross_entropy(out.mlm_logits.float(), batch.mlm_labels.reshape(-1), ignore_index=IGNORE)
def new(out, batch, options=None):
    calls["new"] += 1
    return VocabCE.apply(out.mlm_logits, batch.mlm_labels.reshape(-1), 32)

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
torch.set_num_threads(threads)
mlm = get_objective("mlm")
cfg = build_config("cpu-small", "full", [])
set_allocator(cfg.run.allocator)
dev = resolve_device("cpu")
data = build_pretraining_data(cfg)
batches = [data.steps.step(p) for p in positions_from(data.steps, Position(0, 0, 0, 0), 20)]
# the two losses agree on real logits (bf16 under autocast), value and gradient
x = (3 * torch.randn(608, 8192)).to(torch.bfloat16).requires_grad_()
lab = batches[0].batch.mlm_labels.reshape(-1)[:608].clone()
lab = torch.where(lab == IGNORE, lab, lab % 8192)
a = F.cross_entropy(x.float(), lab, ignore_index=IGNORE); ga, = torch.autograd.grad(a, x)
b = VocabCE.apply(x, lab, 32); gb, = torch.autograd.grad(b, x)
print("loss diff", float((a - b).abs()), "grad max diff", float((ga.float() - gb.float()).abs().max()), "grad max", float(ga.float().abs().max()))
sides = {(prec, name): build_sides(cfg, data, batches, dev, prec).ours for prec in ("bf16", "fp32") for name in ("old", "new")}
res = {}
for r in range(rounds):
    for (prec, name), step in sides.items():
        object.__setattr__(mlm, "loss", old if name == "old" else new)
        before = dict(calls)
        tps, _ = _time(step, batches, dev)
        assert calls[name] > before[name] and calls["new" if name == "old" else "old"] == before["new" if name == "old" else "old"]
        res.setdefault((prec, name), []).append(tps)
object.__setattr__(mlm, "loss", old)
print("calls", calls)
for prec in ("bf16", "fp32"):
    print(prec, "fused/cross_entropy best %.3f median %.3f" % (max(res[(prec, 'new')]) / max(res[(prec, 'old')]),
          statistics.median(res[(prec, 'new')]) / statistics.median(res[(prec, 'old')])),
          {k: [round(v) for v in vals] for k, vals in res.items() if k[0] == prec})
