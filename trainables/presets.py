"""Named presets (plain instances of the config tree) and ``build_config``, the one way to get a config.

    build_config("cpu-small", variant="mlm_only", overrides=["objective.mask_ratio=0.3"])

    smoke       seconds, for tests: a 2-layer hidden-32 BERT, 8 steps
    cpu-small   the laptop default: hidden 128, 2 layers, vocabulary 8,192, sequence 128 (docs/presets.md)
    cpu-long    cpu-small's model pretrained 50x longer, mlm_only and none over six seeds, fine-tuned at the rate
                chosen on dev: over an hour
    gpu-quick   one H200-class GPU in a quarter hour: bert-mini width, several trials sharing the GPU
    known-answer   the instrument check on the planted language (sweeps/known_answer.py): its gate ~5 min on 2 cores
    bert-mini, bert-small, bert-base   the published BERT family sizes, for GPU clusters

A preset is sized to its data: ``check_epochs(cfg, train_tokens)`` refuses a run that would pass over its
corpus more than ``data.allow_epochs`` times (the bert-* presets on the built-in corpus: use a hub corpus).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from trainables.config import (ConfigError, DataConfig, ExperimentConfig, FinetuneConfig, ModelConfig, OptimConfig,
                               RunConfig, choice, switch_variant)

# A corpus big enough for the bert-* presets (~4 B tokens: bert-base's 3.3 B at 100k x 256 x 128 is < 1 epoch).
HUB_CORPUS = "hub:wikimedia/wikipedia:20231101.en"
from trainables.overrides import apply_overrides

# Where the longer presets keep their encoder (run.snapshots): log-spaced shares of the run, each probed, so every
# contrast is also a curve over pretraining tokens (analysis/curves.py). Off at smoke and cpu-small, whose runs
# are too short for a curve to mean anything.
SNAPSHOTS = "0.0625,0.125,0.25,0.5"


def _preset_smoke() -> ExperimentConfig:
    return ExperimentConfig(
        preset="smoke",
        model=ModelConfig(vocab_size=1024, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                          max_position=64),
        data=DataConfig(seq_len=64, max_documents=400, heldout_fraction=0.05),
        optim=OptimConfig(lr=1e-3, batch_size=8, max_steps=8, warmup_frac=0.25),
        finetune=FinetuneConfig(epochs=1, lr=5e-4, batch_size=16, max_len=64, qa_max_len=64, qa_doc_stride=32,
                                max_train_examples=200, max_eval_examples=100, probe_max_train=200,
                                probe_c_grid="0.1,1"),  # two Cs: still chosen on dev, a third of the fits
        run=RunConfig(log_every=2, eval_batches=2),
    )


def _preset_cpu_small() -> ExperimentConfig:
    # The laptop default, sized around what two cores can answer in 20 minutes (docs/presets.md): MLM's effect over
    # random weights, read by the probe at two label budgets and by fine-tuning at the rate and epoch chosen on dev.
    # hidden 128, 2 layers, vocab 8192, sequence 128, batch 32.
    return ExperimentConfig(
        preset="cpu-small",
        # No dropout while pretraining, as cramming (Geiping & Goldstein 2023) in its budgeted regime: under one epoch
        # it does not regularise, and it slows the step (dropout masks, and the math attention path instead of the
        # fused one: docs/presets.md). Fine-tuning keeps BERT's 0.1 (finetune.dropout).
        model=ModelConfig(vocab_size=8192, hidden_size=128, num_layers=2, num_heads=2, intermediate_size=512,
                          max_position=128, dropout=0.0),
        data=DataConfig(seq_len=128),
        # 1,200 steps (~4.5 M tokens, under one pass over the corpus), linear decay to zero so the end is annealed:
        # past the first points where cpu-long's curve calls MLM's effect (the POS probe, then the average probe
        # at 100 labels, both mid-schedule), in the pretraining time the main job can spend on four mlm_only runs
        # (docs/presets.md says how it was sized).
        optim=OptimConfig(lr=1e-3, batch_size=32, max_steps=1200),
        # ner and headline_match are left out: no variant, none included, learns them at this budget.
        # The fair protocol: the rate and the epoch chosen on dev per (run, task), as cpu-long; 500 labels per
        # task (the probe keeps 1,000) so that the fine-tuning of eight encoders fits (docs/presets.md).
        finetune=FinetuneConfig(epochs=6, lr=1e-3, lr_grid="3e-4,1e-3,3e-3", keep_best=True, patience=2,
                                batch_size=32, max_len=64, qa_max_len=128, qa_doc_stride=64,
                                max_train_examples=500, max_eval_examples=500, probe_max_train=1000,
                                probe_budgets="100", tasks="sentiment,topic,hedge,pos",
                                # the embedding layer probed too: how much of what the probe reads is word identity
                                # and frequency, not context (analysis: "what the layers add"); one more classifier
                                # per task from the same encoder pass
                                embedding_probe=True,
                                # and a floor that reads no encoder, fitted on the probe's labels (TF-IDF logistic
                                # regression, the most frequent tag per word): what the words' surface alone gives
                                text_baselines=True),
        # measurement runs evaluate (and checkpoint) at the end; search trials at each ASHA rung
        run=RunConfig(log_every=20, eval_every=0, eval_batches=8),
    )


def _preset_cpu_long() -> ExperimentConfig:
    # cpu-small's encoder trained long enough to leave the word-frequency stage, read fairly: on 2 cores the one
    # recipe that passes 15% held-out MLM accuracy is this model trained for ~20 M tokens or more
    # (docs/pretraining-recipes.md), and at 6,400 steps (~24 M) not every seed passes it (docs/presets.md), so
    # 8,000 (~30 M) leave a margin. Fine-tuning at the rate and epoch chosen on dev. The main job measures
    # mlm_only and none (sweeps.objective_weights.DEFAULTS).
    base = _preset_cpu_small()
    return base.replace(
        preset="cpu-long",
        optim=OptimConfig(lr=1e-3, batch_size=32, max_steps=8000),
        # the rate grid grows one step past an edge a run's best rate sits on: a random encoder and a trained one can
        # prefer rates outside it (the report names the edges each chose)
        finetune=FinetuneConfig(**{**base.finetune.__dict__, "max_train_examples": 1000, "extend_edges": 1}),
        # the encoder kept at 1/16, 1/8, 1/4 and 1/2 of the run (~1.9 to 15 M tokens) and probed: MLM's effect as a
        # curve over tokens (analysis/curves.py); keeping them changes nothing the run trains
        run=replace(base.run, snapshots=SNAPSHOTS),
    )


def _preset_gpu_quick() -> ExperimentConfig:
    # One H200-class GPU, a quarter hour for the whole main job, all phases: a bert-mini-wide, 4-layer
    # encoder, big batches in bf16, four trials sharing the GPU; the fine-tuning rate chosen on dev per
    # (run, task). Sized with the planner (python sweeps/objective_weights.py --preset gpu-quick --plan).
    return ExperimentConfig(
        preset="gpu-quick",
        model=ModelConfig(vocab_size=16384, hidden_size=256, num_layers=4, num_heads=4, intermediate_size=1024,
                          max_position=128),  # ~6 epochs of the built-in corpus: BERT's dropout stays
        data=DataConfig(seq_len=128, loader_workers=2),
        # lr 1e-3 at batch 128 is twice ELECTRA-Small's 5e-4 at the same batch (Clark et al. 2020, Table 6), kept
        # on purpose: this encoder is 4 layers deep, not 12 (a post-LN encoder's stable peak rate falls with
        # depth: Xiong et al. 2020), and 2,000 steps are a short, budgeted schedule, where cramming (Geiping &
        # Goldstein 2023) peaks at 1e-3 too. cpu-small (2 layers) trains at 1e-3 as well. On a GPU the choice can be
        # tested against ELECTRA-Small's rate: --set optim.lr=5e-4.
        optim=OptimConfig(lr=1e-3, batch_size=128, max_steps=2000, warmup_frac=0.06),
        # head="pooler": BERT's fine-tuning, so classification's full - mlm_pairs includes NSP's trained pooler;
        # --set finetune.head=cls (a fresh dense+tanh on [CLS], RoBERTa's) measures the NSP loss without it.
        finetune=FinetuneConfig(epochs=3, lr=3e-4, lr_grid="1e-4,3e-4,1e-3", batch_size=32, max_len=128,
                                qa_max_len=128, qa_doc_stride=64, max_train_examples=2000, max_eval_examples=1000,
                                probe_max_train=2000, head="pooler"),
        # the encoder kept at 1/16-1/2 of the run and probed (MLM's effect as a curve over tokens); --plan prices the
        # reads, mostly trial start-up
        run=RunConfig(log_every=100, eval_every=500, eval_batches=16, checkpoint_every=500, precision="bf16",
                      snapshots=SNAPSHOTS),
    )


def _bert_family(name: str, hidden: int, layers: int, heads: int, steps: int, batch: int, lr: float) -> ExperimentConfig:
    # The published BERT family sizes (L/H/A): mini 4/256/4 and small 4/512/8 from Turc et al. 2019 ("Well-Read
    # Students Learn Better", the 24 miniatures pretrained with BERT's own recipe), base 12/768/12 from Devlin
    # et al. 2019. The recipe is BERT's (batch 256 at sequence 128; Devlin's peak lr 1e-4 for base), with 6%
    # linear warmup (RoBERTa; Izsak et al. 2021) instead of 10k of 1M steps, as these runs are 20-100k steps.
    # The narrower models take higher peaks (5e-4 for 512 wide, 1e-3 for 256: ELECTRA-Small, 256 wide, trains
    # at 5e-4 at batch 128 with 12 layers; these have 4). Large-batch recipes for H100/H200 clusters are
    # batch 4096 at 1e-3 (Izsak et al. 2021, "How to Train BERT with an Academic Budget") or 5e-4 with 6%
    # warmup and 30% masking (MosaicBERT, Portes et al. 2023): --set optim.batch_size=4096 optim.lr=5e-4
    # optim.max_steps=... . Each needs billions of tokens: a hub corpus (check_epochs).
    return ExperimentConfig(
        preset=name,
        model=ModelConfig(vocab_size=30522, hidden_size=hidden, num_layers=layers, num_heads=heads,
                          intermediate_size=4 * hidden, max_position=512),
        optim=OptimConfig(lr=lr, batch_size=batch, max_steps=steps, warmup_frac=0.06),
        data=DataConfig(seq_len=128, loader_workers=4),
        # head="pooler" as BERT fine-tunes (classification's full - mlm_pairs then includes NSP's trained pooler);
        # --set finetune.head=cls for a fresh head on [CLS] that never reads the pooler (RoBERTa's).
        finetune=FinetuneConfig(epochs=3, lr=5e-5 if hidden >= 768 else 1e-4, batch_size=32, max_len=128,
                                lr_grid="2e-5,5e-5,1e-4" if hidden >= 768 else "5e-5,1e-4,3e-4", head="pooler"),
        run=RunConfig(log_every=50, eval_every=1000, eval_batches=20, checkpoint_every=1000, snapshots=SNAPSHOTS),
    )


def _preset_known_answer() -> ExperimentConfig:
    # The instrument check (sweeps/known_answer.py): the planted language of trainables.data.planted, sized so
    # that every checkable planted effect is large and certain in ~5 minutes on 2 cores (the gate's grid; README:
    # "The instrument check").
    # ~550 words: a 1,024-piece WordPiece holds each whole; sentences of 13 tokens, so 64 positions. Sequence
    # classification reads a fresh [CLS] head (head=cls): no pooler trained by NSP is credited to a contrast.
    return ExperimentConfig(
        preset="known-answer",
        model=ModelConfig(vocab_size=1024, hidden_size=64, num_layers=2, num_heads=2, intermediate_size=256,
                          max_position=64, dropout=0.0),
        data=DataConfig(corpus="planted", seq_len=64),
        optim=OptimConfig(lr=1e-3, batch_size=32, max_steps=1200, warmup_frac=0.1),
        finetune=FinetuneConfig(epochs=3, lr=3e-4, batch_size=32, max_len=64, qa_max_len=64, qa_doc_stride=32,
                                max_train_examples=1500, max_eval_examples=500, probe_max_train=2000,
                                tasks="planted", head="cls"),
        run=RunConfig(log_every=100, eval_every=0, eval_batches=8),
    )


PRESETS: dict[str, Any] = {
    "smoke": _preset_smoke,
    "cpu-small": _preset_cpu_small,
    "cpu-long": _preset_cpu_long,
    "gpu-quick": _preset_gpu_quick,
    "known-answer": _preset_known_answer,
    "bert-mini": lambda: _bert_family("bert-mini", 256, 4, 4, steps=20_000, batch=256, lr=1e-3),
    "bert-small": lambda: _bert_family("bert-small", 512, 4, 8, steps=50_000, batch=256, lr=5e-4),
    "bert-base": lambda: _bert_family("bert-base", 768, 12, 12, steps=100_000, batch=256, lr=1e-4),
}


def run_tokens(cfg: ExperimentConfig) -> int:
    """Tokens a full run of ``cfg`` trains on: every step at its full sequence length (an upper bound: short
    segments (data.short_seq_prob) and padding carry fewer real tokens), the second phase at its own."""
    o = cfg.optim
    if cfg.objective.variant == "none":
        return 0
    phase1 = (o.max_steps - o.phase2_steps) * o.batch_size * cfg.data.seq_len
    return phase1 + o.phase2_steps * o.batch_size * o.phase2_seq_len


def run_epochs(cfg: ExperimentConfig, train_tokens: float) -> float:
    """Passes over the corpus's training tokens: ~ max_steps x batch_size x seq_len / train_tokens."""
    return run_tokens(cfg) / max(float(train_tokens), 1.0)


def check_epochs(cfg: ExperimentConfig, train_tokens: float) -> None:
    """Refuse a run that would repeat its corpus more than ``data.allow_epochs`` times (one line, ConfigError):
    past ~16 passes repeated tokens teach little, and the comparison would measure memorisation."""
    epochs = run_epochs(cfg, train_tokens)
    if epochs <= cfg.data.allow_epochs:
        return
    o = cfg.optim
    raise ConfigError(f"preset {cfg.preset}: {o.max_steps} steps x {o.batch_size} x {cfg.data.seq_len} tokens are "
                      f"{epochs:.0f} epochs of corpus {cfg.data.corpus!r} ({train_tokens / 1e6:.1f} M training "
                      f"tokens), above data.allow_epochs={cfg.data.allow_epochs:g}; use a bigger corpus (e.g. "
                      f"--corpus {HUB_CORPUS}), fewer steps, or --set data.allow_epochs={math.ceil(epochs)}")


def build_config(preset: str = "cpu-small", variant: str | None = None,
                 overrides: list[str] | tuple[str, ...] | dict[str, Any] = ()) -> ExperimentConfig:
    """A preset, optionally switched to a named variant, with dotted overrides applied last."""
    choice("preset", preset, tuple(PRESETS))
    cfg = PRESETS[preset]()
    if variant is not None:  # the variant's weights and inputs; the preset's masking (mask ratio, ...) kept
        cfg = cfg.replace(objective=switch_variant(cfg.objective, variant))
    return apply_overrides(cfg, overrides) if overrides else cfg
