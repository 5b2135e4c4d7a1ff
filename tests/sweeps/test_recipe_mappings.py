"""What each literature row trains, held fixed: the variant, input format, masking fractions, steps and betas of
every row of every recipe, built through sweeps/reproduce.py's own path (parse, configure, row configs), so that a
change to presets, variants or the recipes cannot move a paper's row unnoticed. The values are the papers' (each
recipe module cites where it reads them)."""

import pytest

from sweeps import reproduce
from sweeps.frame import Context
from sweeps.progress import Progress
from sweeps.recipes import RECIPES, RowSpec, row_spec
from trainables.presets import run_tokens
from trainables.tasks import resolve_tasks


def _rows(name: str, scale: str = "paper", *argv: str) -> dict:
    args = reproduce.parse(reproduce.SWEEP, [name, "--scale", scale, "--storage", "unused", "--extra-rows", *argv])
    cfg = reproduce.SWEEP.configure(args)
    ctx = Context(cfg, args, "unused", resolve_tasks(cfg.finetune.tasks), Progress(quiet=True))
    return {v.label: c for v, c in reproduce.rows_of(ctx)}, args


def _spec(variant, fmt, steps, *, ratio=0.15, mask=0.8, rand=0.1, masking="token", p2=0, T=128, T2=0, batch=256,
          lr=1e-4, warmup=10_000, betas=(0.9, 0.999), short=0.1):
    return RowSpec(variant, fmt, ratio, mask, rand, masking, steps, p2, T, T2, batch, lr, warmup, *betas, short)


BERT = dict(p2=100_000, T2=512)  # App. A.2: the last 10% of 1M steps at 512
ROBERTA = dict(T=512, betas=(0.9, 0.98), short=0.0)  # Sec. 3.1: full-length sequences only
ALBERT = dict(masking="whole_word", T=512, batch=4096, lr=1e-3, warmup=3125)
ELECTRA = dict(mask=0.85, rand=0.0, batch=128, lr=5e-4, short=0.05)  # the released code's masking and data builder
WETTIG = dict(batch=4096, lr=2e-3, warmup=1380, betas=(0.9, 0.98), short=0.0)
ALL_MASK = dict(mask=1.0, rand=0.0)  # --leave-unmasked-prob 0 --random-token-prob 0

PAPER_ROWS = {
    "bert-t5": {"full": _spec("full", "nsp_pairs", 1_000_000, **BERT),
                "mlm_pairs": _spec("mlm_pairs", "nsp_pairs", 1_000_000, **BERT),  # No NSP: the loss dropped, pairs kept
                "mlm_only": _spec("mlm_only", "single", 1_000_000, **BERT)},  # the extra row
    "roberta-t2": {"segment_pair": _spec("full", "nsp_pairs", 1_000_000, **ROBERTA),
                   "sentence_pair": _spec("sentence_pair", "sentence_pairs", 1_000_000, **ROBERTA),
                   "full_sentences": _spec("full_sentences", "full_sentences", 1_000_000, **ROBERTA),
                   "doc_sentences": _spec("mlm_only", "single", 1_000_000, **ROBERTA)},
    "albert-t5": {"mlm_pairs": _spec("mlm_pairs", "nsp_pairs", 125_000, **ALBERT),  # None: two segments
                  "full": _spec("full", "nsp_pairs", 125_000, **ALBERT),
                  "mlm_sop": _spec("mlm_sop", "sop_pairs", 125_000, **ALBERT)},
    "electra-t1": {"electra": _spec("electra", "single", 1_000_000, **ELECTRA),
                   "mlm_only": _spec("mlm_only", "single", 1_500_000, **ELECTRA)},  # BERT-Small: no NSP, 1.5M steps
    "wettig-mask": {"full_sentences@0.15": _spec("full_sentences", "full_sentences", 23_000, **WETTIG, **ALL_MASK),
                    "full_sentences@0.40": _spec("full_sentences", "full_sentences", 23_000, ratio=0.40, **WETTIG,
                                                 **ALL_MASK),
                    "full_sentences@0.15-801010": _spec("full_sentences", "full_sentences", 23_000, **WETTIG),
                    "full_sentences@0.40-801010": _spec("full_sentences", "full_sentences", 23_000, ratio=0.40,
                                                        **WETTIG)},
}


def test_every_recipe_is_pinned():
    assert set(PAPER_ROWS) == set(RECIPES)


@pytest.mark.parametrize("name", sorted(PAPER_ROWS))
def test_each_paper_row_trains_what_the_paper_trained(name):
    rows, _ = _rows(name)
    assert {label: row_spec(cfg) for label, cfg in rows.items()} == PAPER_ROWS[name]
    compute = RECIPES[name].compute
    for label, cfg in rows.items():  # the paper scale trains the paper's tokens per run
        assert run_tokens(cfg) == pytest.approx(compute.tokens[label], rel=1e-6), label


@pytest.mark.parametrize("name", sorted(PAPER_ROWS))
def test_paper_scale_fine_tunes_as_many_times_as_the_paper_and_cites_each_row(name):
    r = RECIPES[name]
    assert r.scales["paper"].finetune_seeds >= max(5, r.protocol.finetune_runs)
    assert all(v.source for v in r.variants) and r.protocol.text
    labels = {v.label for v in r.variants}
    assert all(c.plus in labels and c.minus in labels for c in r.claims)


def test_the_papers_settings_hold_at_every_scale():
    """The recipe's own settings (betas, short sequences, masking) are the paper's at smoke scale too; a row's share
    of the steps scales with the scale's, its warmup steps stay the scale's."""
    rows, args = _rows("electra-t1", "smoke")
    electra, bert = row_spec(rows["electra"]), row_spec(rows["mlm_only"])
    assert (bert.steps, electra.steps) == (8, 5) and electra.warmup_steps == bert.warmup_steps
    assert (electra.mask_token_frac, electra.random_token_frac, electra.beta2) == (0.85, 0.0, 0.999)
    assert row_spec(_rows("roberta-t2", "quick")[0]["segment_pair"]).short_seq_prob == 0.0
    assert row_spec(_rows("wettig-mask", "smoke")[0]["full_sentences@0.40"])[2:5] == (0.40, 1.0, 0.0)
    rows, _ = _rows("bert-t5", "paper", "--set", "optim.beta2=0.98")  # the user's --set still wins
    assert row_spec(rows["full"]).beta2 == 0.98


def test_extra_rows_and_their_claims_only_when_asked():
    args = reproduce.parse(reproduce.SWEEP, ["wettig-mask", "--scale", "smoke", "--storage", "unused"])
    cfg = reproduce.SWEEP.configure(args)
    ctx = Context(cfg, args, "unused", resolve_tasks(cfg.finetune.tasks), Progress(quiet=True))
    r = RECIPES["wettig-mask"]
    rows = tuple(v for v, _ in reproduce.rows_of(ctx))
    assert [v.label for v in rows] == ["full_sentences@0.15", "full_sentences@0.40"]
    assert {c.plus for c in r.claims_of(rows)} == {"full_sentences@0.40"} and len(r.claims_of(r.variants)) == 6
    by = {(c.plus, c.task): c for c in r.claims}
    assert (by[("full_sentences@0.40", "MNLI")].paper_diff, by[("full_sentences@0.40-801010", "MNLI")].paper_diff) == \
        pytest.approx((0.3, 0.6))  # all [MASK] 84.2 -> 84.5; 80/10/10 83.7 -> 84.3


def test_claims_name_the_papers_metrics():
    metric = {(r.name, c.task, c.metric) for r in RECIPES.values() for c in r.claims}
    assert ("bert-t5", "MRPC", "acc") in metric and ("bert-t5", "SQuAD", "f1") in metric  # Table 5: MRPC (Acc)
    assert {("albert-t5", "SQuAD1.1", "f1"), ("albert-t5", "SQuAD1.1", "em"), ("albert-t5", "Avg", "avg")} <= metric
    assert ("electra-t1", "GLUE", "avg") in metric
    glue = RECIPES["electra-t1"].claims[0]
    assert len(glue.covers) == 8 and "MRPC (acc)" in glue.covers  # the paper's score: 8 tasks, MRPC on accuracy
    assert {(i.variant, i.metric): i.paper for i in RECIPES["albert-t5"].intrinsic}[("mlm_sop", "NSP")] == 78.9
