"""The typed configuration tree: model, objective, data, optimisation, fine-tuning and run.

Every section is a frozen dataclass validated in ``__post_init__`` with one-line errors that name the
bad value and what is allowed. ``to_dict`` / ``from_dict`` round-trip the tree through plain dicts
(Ray Tune's ``param_space``); ``trainables.overrides.apply_overrides`` takes dotted ``key=value``
strings from the command line and rejects unknown keys at once. Presets (``trainables.presets``) and
variants (``trainables.objectives``) are plain instances in registries.

    cfg = build_config("cpu-small", variant="mlm_only", overrides=["objective.mask_ratio=0.3"])
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field, fields, replace
from typing import Any


class ConfigError(ValueError):
    """A configuration value is invalid; the message is one line naming the value and what is allowed."""


def require(cond: bool, msg: str) -> None:
    """Raise ConfigError(msg) unless cond: the one-line error of every check."""
    if not cond:
        raise ConfigError(msg)


def choice(name: str, value: Any, allowed: tuple) -> None:
    """``name=value`` must be one of ``allowed``; the error lists them."""
    require(value in allowed, f"{name}={value!r} is not valid; allowed: {', '.join(map(str, allowed))}")


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the BERT encoder (``transformers.BertConfig`` fields under friendlier names)."""

    vocab_size: int = 8192
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 2
    intermediate_size: int = 512
    max_position: int = 128
    dropout: float = 0.1
    gradient_checkpointing: bool = False
    compile: bool = False
    # How the learned absolute position embeddings start. normal: BERT's N(0, 0.02), unrelated vectors whose
    # relative-offset structure must itself be learned; sinusoidal: Vaswani et al. (2017)'s table scaled to the
    # same per-dimension std, so neighbouring positions start alike. Still learned; checkpoints are unchanged.
    position_init: str = "normal"
    # The position table's starting std as a multiple of BERT's initializer range (0.02). Above 1 the positions
    # outweigh the tokens in the first LayerNorm at the start, likely why the MLM plateau ends sooner with
    # sinusoidal starting positions (docs/results.md, time to 15%).
    position_scale: float = 1.0

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size", "max_position"):
            require(getattr(self, name) >= 1, f"model.{name}={getattr(self, name)} must be a positive integer")
        require(self.vocab_size >= 128, f"model.vocab_size={self.vocab_size} must be >= 128")
        require(self.hidden_size % self.num_heads == 0,
                 f"model.hidden_size={self.hidden_size} must be divisible by model.num_heads={self.num_heads}")
        require(0.0 <= self.dropout < 1.0, f"model.dropout={self.dropout} must be in [0, 1)")
        choice("model.position_init", self.position_init, POSITION_INITS)
        require(self.position_scale > 0.0, f"model.position_scale={self.position_scale} must be > 0")


POSITION_INITS = ("normal", "sinusoidal")
EMBEDDING_PROBE = "probe-emb"  # the eval mode of the probe on the embedding layer's output (finetune.embedding_probe)
# The eval modes of the non-neural baselines (finetune.text_baselines) and their names in plain words: a task type's
# baseline is TaskType.baseline (trainables.finetune.baselines); QA has none.
TFIDF_BASELINE, TAG_BASELINE = "baseline-tfidf", "baseline-tag"
TEXT_BASELINES = {TFIDF_BASELINE: "TF-IDF logistic regression", TAG_BASELINE: "most frequent tag per word"}

# Names for weight sets that did not come from the registry (a searched mix, a domain-adapted model).
CUSTOM_VARIANTS = ("custom", "best_mix", "domain_adapt")
INPUT_FORMATS = ("single", "nsp_pairs", "sop_pairs", "full_sentences", "sentence_pairs")  # trainables.data.batches
PAIRS_OF_FORMAT = {"nsp_pairs": "nsp", "sop_pairs": "sop", "sentence_pairs": "nsp"}  # the pair construction each builds
MASKING = ("token", "whole_word")
DATA_ORDERS = ("per_seed", "fixed")
BUDGETS = ("steps", "tokens", "flops")


def registry():
    """The objective registry (imported on first use: the objectives import the model, which is heavy)."""
    from trainables import objectives

    return objectives


def _default_weights() -> dict[str, float]:
    return {"mlm": 1.0, "nsp": 1.0}


@dataclass(frozen=True)
class ObjectiveConfig:
    """Which losses are on (``weights``, keyed by registered objective), the MLM masking recipe and the
    input format. ``weights`` is normalised to every registered objective, in registry order."""

    variant: str = "full"
    weights: dict[str, float] = field(default_factory=_default_weights)
    input_format: str = "nsp_pairs"  # single (RoBERTa DOC-SENTENCES) | nsp_pairs | sop_pairs | full_sentences | sentence_pairs
    mask_ratio: float = 0.15
    masking: str = "token"  # token | whole_word (all pieces of a word together; the ratio counted in tokens)
    mask_token_frac: float = 0.8  # of masked positions: replaced by [MASK]
    random_token_frac: float = 0.1  # replaced by a random token; the rest are left unchanged
    static_masking: bool = False  # original BERT: one mask per example, fixed for all epochs
    # Which masks a seed draws: 0 is the seed's own; another value draws other masks on the same data, weights
    # and fine-tuning draws (the paired A/A control of analysis.calibrate). Held-out evaluation masks are fixed.
    mask_stream: int = 0
    eval_mask_ratio: float = 0.15  # fixed for every variant so held-out MLM metrics compare
    options: dict[str, Any] = field(default_factory=dict)  # objective settings, "<objective>.<option>"

    def __post_init__(self):
        reg = registry()
        unknown = sorted(set(self.weights) - set(reg.OBJECTIVES))
        require(not unknown, f"objective weights for {unknown} are not valid; registered objectives: "
                              f"{', '.join(reg.OBJECTIVES)}")
        object.__setattr__(self, "weights", {n: float(self.weights.get(n, 0.0)) for n in reg.OBJECTIVES})
        known = {f"{o.name}.{k}": v for o in reg.OBJECTIVES.values() for k, v in o.options.items()}
        bad = sorted(set(self.options) - set(known))
        require(not bad, f"objective option(s) {bad} are not valid; allowed: {', '.join(known) or 'none'}")
        object.__setattr__(self, "options", {k: type(v)(self.options.get(k, v)) for k, v in known.items()})
        for o in reg.OBJECTIVES.values():
            problem = o.check(o.options_of(self.options)) if o.check else None
            require(problem is None, f"objective.{o.name}: {problem}")
        choice("objective.variant", self.variant, tuple(reg.VARIANTS) + CUSTOM_VARIANTS)
        if self.input_format == "pair":  # the spelling before the pair construction was a factor of its own
            object.__setattr__(self, "input_format", f"{self.pair_task or 'nsp'}_pairs")
        choice("objective.input_format", self.input_format, INPUT_FORMATS)
        choice("objective.masking", self.masking, MASKING)
        require(not (self.static_masking and self.input_format == "full_sentences"),
                 "objective.static_masking=true keys each row's mask on its chunk; input_format='full_sentences' "
                 "packs several chunks per row (RoBERTa masks dynamically): use one of them")
        for name, w in self.weights.items():
            require(w >= 0.0 and w == w, f"objective.{name}_weight={w} must be >= 0")
        require(0.0 < self.mask_ratio < 1.0, f"objective.mask_ratio={self.mask_ratio} must be in (0, 1)")
        require(isinstance(self.mask_stream, int) and 0 <= self.mask_stream < 2 ** 31,
                 f"objective.mask_stream={self.mask_stream!r} must be an integer in [0, 2^31)")
        require(0.0 < self.eval_mask_ratio < 1.0,
                 f"objective.eval_mask_ratio={self.eval_mask_ratio} must be in (0, 1)")
        require(0.0 <= self.mask_token_frac <= 1.0 and 0.0 <= self.random_token_frac <= 1.0
                 and self.mask_token_frac + self.random_token_frac <= 1.0,
                 f"objective.mask_token_frac={self.mask_token_frac} + random_token_frac="
                 f"{self.random_token_frac} must each be in [0, 1] and sum to <= 1")
        for n in self.active:
            clash = [m for m in reg.OBJECTIVES[n].excludes if self.weights.get(m, 0) > 0]
            require(not clash, f"objective.{n}_weight and {clash[0]}_weight are both on, but {n} cannot train "
                                f"with {clash[0]}" if clash else "")
        pairs = {n: reg.OBJECTIVES[n].pairs for n in self.active if reg.OBJECTIVES[n].pairs}
        require(len(set(pairs.values())) <= 1,
                 f"objective weights {', '.join(f'{n}_weight={self.weights[n]}' for n in pairs)}: "
                 f"{' and '.join(pairs)} need differently built pairs and share one pair head; turn one of them off")
        for n, construction in pairs.items():
            require(PAIRS_OF_FORMAT.get(self.input_format) == construction,
                     f"objective.input_format={self.input_format!r} cannot train the {n.upper()} loss; "
                     f"use input_format='{construction}_pairs'")
        own_pass = [n for n in self.active if reg.OBJECTIVES[n].corrupt is not None]
        require(not (own_pass and self.input_format == "sentence_pairs"),
                 f"objective.input_format='sentence_pairs' packs pairs that attend to themselves only; "
                 f"{', '.join(own_pass)} runs its own encoder pass without that mask: use another input format")
        if self.variant == "none":
            require(self.total_weight == 0.0,
                     "objective.variant='none' means no pretraining; its weights must all be 0")
        else:
            require(self.total_weight > 0.0,
                     f"objective weights are all 0 for variant {self.variant!r}; only 'none' may have no loss")

    @property
    def active(self) -> tuple[str, ...]:
        """The objectives with a positive weight, in registry order."""
        return tuple(n for n, w in self.weights.items() if w > 0)

    @property
    def total_weight(self) -> float:
        return sum(self.weights.values())

    @property
    def pair_task(self) -> str | None:
        """The pair construction an active objective needs ('nsp' or 'sop'), which decides how pair
        inputs are built; None when no active objective needs one."""
        reg = registry()
        return next((reg.OBJECTIVES[n].pairs for n in self.active if reg.OBJECTIVES[n].pairs), None)


def data_seed(cfg: "ExperimentConfig") -> int:
    """The seed of chunking, pairs and batch order: the pretraining seed (MultiBERTs' design: seed k
    varies weights, masks and data, the same for every variant of seed k), or the fixed data.data_seed."""
    return cfg.run.seed if cfg.data.data_order == "per_seed" else cfg.data.data_seed


def objective_for_variant(name: str, **changes: Any) -> ObjectiveConfig:
    """The objective of a named variant, with optional field changes (e.g. mask_ratio)."""
    variants = registry().VARIANTS
    choice("variant", name, tuple(variants))
    v = variants[name]
    return ObjectiveConfig(variant=name, **{"weights": dict(v.weights), "input_format": v.input_format, **changes})


def switch_variant(objective: ObjectiveConfig, name: str, **changes: Any) -> ObjectiveConfig:
    """``objective`` switched to variant ``name``'s weights and input format; every other setting (mask ratio,
    masking strategy, 80/10/10 fractions, static masking, mask stream, objective options) kept."""
    kept = {f.name: getattr(objective, f.name) for f in fields(objective)
            if f.name not in ("variant", "weights", "input_format")}
    return objective_for_variant(name, **{**kept, **changes})


@dataclass(frozen=True)
class DataConfig:
    """Where the pretraining text comes from and how it becomes examples."""

    corpus: str = "builtin"  # builtin | synthetic | a local path (.txt/.jsonl/.parquet or a folder) | hub:NAME[:CONFIG]
    text_column: str = "text"
    hub_split: str = "train"
    max_documents: int = 0  # 0 = all; otherwise the first N documents (a cheap, deterministic subset)
    seq_len: int = 128
    heldout_fraction: float = 0.02  # documents held out for intrinsic evaluation
    short_seq_prob: float = 0.1  # BERT's: sometimes build shorter segments so fine-tuning lengths are seen
    tokenizer_dir: str = ""  # empty: train a WordPiece on a sample of the corpus at preparation
    # the evaluation tasks whose dev/test text is removed from the corpus at preparation (trainables.data.decontam):
    # finetune (the run's finetune.tasks) | none | task names/groups as finetune.tasks takes them
    decontaminate: str = "finetune"
    tokenizer_sample: int = 2_000_000  # sentences (the first ones, in source order) the WordPiece is trained on
    lowercase: bool = True
    hub_revision: str = ""  # hub:NAME at this revision (recorded in the fingerprint)
    cache_dir: str = ""  # empty: $BERT_OBJECTIVES_CACHE or ~/.cache/bert-objectives
    prepared_root: str = ""  # where prepared corpora live (local, file://, s3://, gs://); empty: <cache>/prepared
    prepared: str = ""  # a prepared folder to use as it is (checked against the corpus and tokenizer)
    data_order: str = "per_seed"  # per_seed: pretraining seed k also sets chunking, pairs and order; fixed: data_seed
    data_seed: int = 0  # the data order when data_order=fixed (the same for every pretraining seed)
    loader_workers: int = 0  # 0: batches built in a background thread; N: DataLoader worker processes
    # Most passes over the training tokens a run may make (trainables.presets.check_epochs): ~16 is where
    # repeated tokens have lost most of their value (Muennighoff et al. 2023, R*_D ~ 15); gpu-quick makes ~6
    # of the built-in corpus, bert-mini would make ~110 and must use a bigger corpus or raise this.
    allow_epochs: float = 16.0

    def __post_init__(self):
        require(bool(self.corpus), "data.corpus is empty; allowed: builtin, synthetic, a path, or hub:NAME")
        require(self.seq_len >= 16, f"data.seq_len={self.seq_len} must be >= 16")
        require(0.0 < self.heldout_fraction < 0.5, f"data.heldout_fraction={self.heldout_fraction} must be in (0, 0.5)")
        require(0.0 <= self.short_seq_prob < 1.0, f"data.short_seq_prob={self.short_seq_prob} must be in [0, 1)")
        require(self.max_documents >= 0, f"data.max_documents={self.max_documents} must be >= 0 (0 = all)")
        choice("data.data_order", self.data_order, DATA_ORDERS)
        require(bool(self.decontaminate.strip()), "data.decontaminate is empty; allowed: finetune, none, or task "
                                                  "names/groups (as finetune.tasks)")
        require(self.tokenizer_sample >= 1000, f"data.tokenizer_sample={self.tokenizer_sample} must be >= 1000")
        require(self.loader_workers >= 0, f"data.loader_workers={self.loader_workers} must be >= 0")
        require(self.allow_epochs > 0, f"data.allow_epochs={self.allow_epochs} must be > 0")


@dataclass(frozen=True)
class OptimConfig:
    """AdamW with linear warmup and decay; the budget in optimizer steps."""

    lr: float = 1e-3
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.98
    eps: float = 1e-6
    warmup_frac: float = 0.1
    batch_size: int = 32
    grad_accum: int = 1
    max_steps: int = 800
    budget: str = "steps"  # steps | tokens | flops: every variant stops at max_steps of full's tokens or FLOPs
    grad_clip: float = 1.0
    phase2_steps: int = 0  # BERT's second phase at a longer sequence length (counted in max_steps)
    phase2_seq_len: int = 512
    # linear: warmup, then a linear decay to 0 over the rest (BERT's). wsd: warmup, the peak rate held, then a
    # linear decay over the last decay_frac of the steps (warmup-stable-decay); its snapshots (run.snapshots) are
    # then decay branches, each a run that ends its schedule at its budget.
    schedule: str = "linear"
    decay_frac: float = 0.2  # wsd: the share of the steps in the final decay (Hägele et al. 2024: ~20%)

    def decay_steps(self, total: int) -> int | None:
        """wsd: the steps of the final decay of a run of ``total`` steps (None for linear)."""
        return total - round((1.0 - self.decay_frac) * total) if self.schedule == "wsd" else None

    def __post_init__(self):
        require(self.lr > 0, f"optim.lr={self.lr} must be > 0")
        choice("optim.schedule", self.schedule, ("linear", "wsd"))
        require(0.0 < self.decay_frac <= 1.0, f"optim.decay_frac={self.decay_frac} must be in (0, 1]")
        require(self.weight_decay >= 0, f"optim.weight_decay={self.weight_decay} must be >= 0")
        require(0.0 <= self.warmup_frac < 1.0, f"optim.warmup_frac={self.warmup_frac} must be in [0, 1)")
        require(self.batch_size >= 1, f"optim.batch_size={self.batch_size} must be >= 1")
        require(self.grad_accum >= 1, f"optim.grad_accum={self.grad_accum} must be >= 1")
        require(self.max_steps >= 0, f"optim.max_steps={self.max_steps} must be >= 0")
        require(0 <= self.phase2_steps <= self.max_steps,
                 f"optim.phase2_steps={self.phase2_steps} must be in [0, optim.max_steps={self.max_steps}]")
        require(self.grad_clip >= 0, f"optim.grad_clip={self.grad_clip} must be >= 0 (0 = off)")
        choice("optim.budget", self.budget, BUDGETS)


@dataclass(frozen=True)
class FinetuneConfig:
    """One fine-tuning recipe shared by every variant (and by ``none``); per task family."""

    epochs: float = 2.0  # the most epochs; with keep_best, fewer when dev stops improving
    lr: float = 2e-4
    lr_grid: str = ""  # comma-separated rates tried per (run, task): the one best on dev is reported; "" = lr only
    # With a grid: while a seed's rate best on dev is the highest (lowest) rate tried, try one more beyond it, the grid's
    # step at that edge further out, at most this many per side. A best rate at the grid's edge says the grid may hold
    # that encoder back (a random encoder and a pretrained one sit at opposite ends); extending on dev alone keeps one
    # rule for every variant. The export compares only rates every fine-tuning seed tried (finetune.selection).
    extend_edges: int = 0
    # Score dev after every epoch and keep the state best on dev (ties: the earlier), so that a variant that needs
    # more (or fewer) steps than another is not read at a point of the schedule that suits the other: one rule for
    # every variant, none included (early stopping on dev, as Devlin et al. 2019 select on dev).
    keep_best: bool = False
    patience: int = 0  # with keep_best: stop after this many epochs without a new best on dev (0 = every epoch)
    batch_size: int = 32
    warmup_frac: float = 0.1
    weight_decay: float = 0.01
    dropout: float = 0.1  # hidden and attention dropout while fine-tuning (BERT's), whatever pretraining used
    max_len: int = 128  # sequence classification and tagging
    qa_max_len: int = 384
    qa_doc_stride: int = 128
    qa_max_answer_len: int = 30
    max_train_examples: int = 0  # 0 = all; a low-resource subset otherwise (drawn with the seed)
    max_eval_examples: int = 0
    probe_max_train: int = 4000  # linear probe: examples used to fit the logistic regression
    # More label budgets for the probe, comma-separated (e.g. "100"): each is read as its own mode, probe@N, with a
    # classifier fitted on N of the probe_max_train examples (a subset of them), the rest unchanged: whether what an
    # objective puts in the encoder helps depends on how many labels the reader gets, so the report shows both.
    probe_budgets: str = ""
    # The probe's L2 strength, chosen on dev per encoder and budget as fine-tuning's rate is (the best dev score; ties:
    # the smaller C, the stronger penalty): one C for every encoder would favour the encoders it happens to suit.
    # Also probe the embedding layer's output (word, position and segment embeddings, before any transformer layer)
    # at the main budget, as mode probe-emb: the baseline of what word identity and frequency alone give, so an
    # objective's effect on the probe can be read against it (analysis: a family of its own, and "context" rows).
    embedding_probe: bool = False
    # Also score a non-neural baseline in each probe trial, fitted on the probe's own training subset (so each
    # variant's comparison stays paired) and reading the words the encoders read: classification a TF-IDF logistic
    # regression (its C chosen on dev from probe_c_grid, as the probe's), tagging the most frequent tag per word; QA
    # none. Modes baseline-tfidf and baseline-tag: what the words' surface alone gives, read against the probe in a
    # Holm family of their own.
    text_baselines: bool = False
    probe_c_grid: str = "1e-3,1e-2,1e-1,1,10,100"
    probe_max_iter: int = 1000  # lbfgs iterations; the export records those taken (evals.probe_iters)
    tasks: str = "offline"  # default suite: offline | glue | comma-separated names
    # sequence classification reads: pooler (BERT's; NSP trains it, so full - mlm_pairs includes it) | cls (a fresh
    # dense+tanh on [CLS], RoBERTa's head: the checkpoint's pooler weights unused)
    head: str = "pooler"
    # checkpoint | random: random ignores the checkpoint's encoder weights (a fresh BERT init drawn per (variant,
    # pretraining seed): trainables.finetune.heads.random_init_seed; the task head as with the checkpoint): the
    # instrument check's negative switch (sweeps/known_answer.py must then recover no planted effect)
    init: str = "checkpoint"

    @property
    def probe_modes(self) -> dict[str, int]:
        """The probe's modes and their label budgets: probe at probe_max_train, then probe@N per extra budget."""
        return {"probe": self.probe_max_train, **{f"probe@{n}": n for n in self._probe_budgets()},
                **({EMBEDDING_PROBE: self.probe_max_train} if self.embedding_probe else {})}

    def _probe_budgets(self) -> tuple[int, ...]:
        try:
            return tuple(int(x) for x in self.probe_budgets.split(",") if x.strip())
        except ValueError:
            return (-1,)

    @property
    def probe_cs(self) -> tuple[float, ...]:
        """The probe's C grid, ascending."""
        return tuple(sorted(float(x) for x in self.probe_c_grid.split(",") if x.strip()))

    @property
    def rates(self) -> tuple[float, ...]:
        """The learning rates fine-tuning tries, ascending: the grid, or the one rate. Ascending, so that a seed's
        choice (the first rate best on dev) breaks ties toward the lower rate, as the export's does
        (finetune.selection.chosen_rates); a grid written in another order would break them differently."""
        return tuple(sorted(float(x) for x in self.lr_grid.split(",") if x.strip())) or (self.lr,)

    @property
    def most_rates(self) -> int:
        """The most rates one (task, seed) is fine-tuned at: the grid, and ``extend_edges`` more where its best
        rate keeps to one edge (the other edge, never best, is not extended). What the plan prices."""
        return len(self.rates) + self.extend_edges

    def __post_init__(self):
        require(self.epochs > 0, f"finetune.epochs={self.epochs} must be > 0")
        require(self.patience >= 0, f"finetune.patience={self.patience} must be >= 0 (0 = no early stop)")
        require(self.lr > 0, f"finetune.lr={self.lr} must be > 0")
        try:
            grid = [float(x) for x in self.lr_grid.split(",") if x.strip()]
        except ValueError:
            grid = [-1.0]
        require(all(x > 0 for x in grid), f"finetune.lr_grid={self.lr_grid!r} must be comma-separated rates > 0")
        require(self.extend_edges >= 0, f"finetune.extend_edges={self.extend_edges} must be >= 0 (0 = the grid only)")
        require(not self.extend_edges or len(set(grid)) >= 2,
                f"finetune.extend_edges={self.extend_edges} needs a finetune.lr_grid of at least two rates, "
                f"got {self.lr_grid!r}: the step beyond an edge is the grid's own")
        require(self.batch_size >= 1, f"finetune.batch_size={self.batch_size} must be >= 1")
        extra = self._probe_budgets()
        require(all(n >= 2 for n in extra) and len(set(extra)) == len(extra)
                and (not self.probe_max_train or all(n < self.probe_max_train for n in extra)),
                f"finetune.probe_budgets={self.probe_budgets!r} must be distinct comma-separated counts >= 2, each "
                f"below finetune.probe_max_train={self.probe_max_train}")
        try:
            cs = [float(x) for x in self.probe_c_grid.split(",") if x.strip()]
        except ValueError:
            cs = [-1.0]
        require(bool(cs) and all(x > 0 for x in cs),
                f"finetune.probe_c_grid={self.probe_c_grid!r} must be comma-separated values of C > 0")
        require(self.probe_max_iter >= 1, f"finetune.probe_max_iter={self.probe_max_iter} must be >= 1")
        for name in ("embedding_probe", "text_baselines"):
            value = getattr(self, name)
            require(isinstance(value, bool), f"finetune.{name}={value!r} must be true or false")
        require(0.0 <= self.dropout < 1.0, f"finetune.dropout={self.dropout} must be in [0, 1)")
        require(0.0 <= self.warmup_frac < 1.0, f"finetune.warmup_frac={self.warmup_frac} must be in [0, 1)")
        require(self.max_len >= 8, f"finetune.max_len={self.max_len} must be >= 8")
        require(0 < self.qa_doc_stride < self.qa_max_len,
                 f"finetune.qa_doc_stride={self.qa_doc_stride} must be in (0, qa_max_len={self.qa_max_len})")
        require(self.head in ("pooler", "cls"), f"finetune.head={self.head!r} is not valid; allowed: pooler, cls")
        choice("finetune.init", self.init, ("checkpoint", "random"))
        require(self.max_train_examples >= 0 and self.max_eval_examples >= 0,
                 "finetune.max_train_examples / max_eval_examples must be >= 0 (0 = all)")


@dataclass(frozen=True)
class RunConfig:
    """Seeds, device, evaluation/checkpoint cadence and logging of one pretraining run."""

    seed: int = 0  # initial weights and masking; the pretraining seed of the ablation
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    precision: str = "auto"  # auto (bf16 autocast on CUDA and on a CPU with native bf16, else fp32) | fp32 | bf16
    threads: int = 0  # torch CPU threads; 0 = leave torch's default
    # retain (glibc keeps a step's freed memory for the next step instead of faulting it in again) | system
    allocator: str = "retain"
    log_every: int = 10
    eval_every: int = 0  # 0 = only at the end
    eval_batches: int = 8  # held-out batches for intrinsic metrics
    checkpoint_every: int = 0  # 0 = only at the end
    tensorboard: bool = True
    init_checkpoint: str = ""  # continue from this HF BERT checkpoint (dir or hub name) and its tokenizer
    # Deterministic kernels (torch.use_deterministic_algorithms, CUBLAS_WORKSPACE_CONFIG): bit-identical reruns
    # and resumes on CUDA too, at some speed. The CPU path is bit-identical without it.
    deterministic: bool = False
    # Keep the encoder at these shares of the run's planned steps, comma-separated in (0, 1) (e.g.
    # "0.0625,0.125,0.25,0.5"): <out>/snapshots/step-N, each a loadable checkpoint with its tokens and held-out
    # metrics, so an objective's effect can be read as a curve over pretraining tokens. A snapshot is the run's
    # state mid-schedule (its rate not yet decayed), not a run that ends at that budget. "" = none.
    snapshots: str = ""

    def snapshot_steps(self, planned_steps: int) -> tuple[int, ...]:
        """The steps at which ``snapshots`` keeps the encoder in a run of ``planned_steps`` (the end excluded:
        the run's own checkpoint is the last point)."""
        steps = {max(1, round(f * planned_steps)) for f in self.snapshot_fractions()}
        return tuple(sorted(s for s in steps if s < planned_steps))

    def snapshot_fractions(self) -> tuple[float, ...]:
        try:
            return tuple(float(x) for x in self.snapshots.split(",") if x.strip())
        except ValueError:
            return (float("nan"),)

    def __post_init__(self):
        fractions = self.snapshot_fractions()
        require(all(0 < f < 1 for f in fractions),
                 f"run.snapshots={self.snapshots!r} must be comma-separated shares of the run in (0, 1), "
                 "e.g. 0.0625,0.125,0.25,0.5 (or empty for none)")
        choice("run.precision", self.precision, ("auto", "fp32", "bf16"))
        choice("run.allocator", self.allocator, ("retain", "system"))
        require(self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda"),
                 f"run.device={self.device!r} is not valid; allowed: auto, cpu, cuda, cuda:N")
        for name in ("threads", "eval_every", "checkpoint_every"):
            require(getattr(self, name) >= 0, f"run.{name}={getattr(self, name)} must be >= 0")
        require(self.log_every >= 1, f"run.log_every={self.log_every} must be >= 1")
        require(self.eval_batches >= 1, f"run.eval_batches={self.eval_batches} must be >= 1")


@dataclass(frozen=True)
class ExperimentConfig:
    """The whole tree. ``preset`` records which named instance it started from."""

    preset: str = "cpu-small"
    model: ModelConfig = field(default_factory=ModelConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def __post_init__(self):
        longest = max(self.data.seq_len, self.optim.phase2_seq_len if self.optim.phase2_steps else 0)
        require(longest <= self.model.max_position,
                 f"data.seq_len={longest} exceeds model.max_position={self.model.max_position}; "
                 f"allowed: <= {self.model.max_position}")
        require(self.finetune.max_len <= self.model.max_position,
                 f"finetune.max_len={self.finetune.max_len} exceeds model.max_position={self.model.max_position}")
        # QA windows longer than the model are clipped to it rather than rejected: presets share one recipe.

    def replace(self, **sections: Any) -> "ExperimentConfig":
        return replace(self, **sections)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


SECTIONS: dict[str, type] = {
    "model": ModelConfig, "objective": ObjectiveConfig, "data": DataConfig,
    "optim": OptimConfig, "finetune": FinetuneConfig, "run": RunConfig,
}


def from_dict(d: dict[str, Any]) -> ExperimentConfig:
    """Inverse of ``ExperimentConfig.to_dict``; unknown keys are errors, missing keys take defaults."""
    unknown = set(d) - set(SECTIONS) - {"preset"}
    require(not unknown, f"unknown config section(s) {sorted(unknown)}; allowed: preset, {', '.join(SECTIONS)}")
    built: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        sub = d.get(name, {})
        if isinstance(sub, cls):
            built[name] = sub
            continue
        if name == "objective":
            sub = _weights_from_flat(sub)
        valid = {f.name for f in fields(cls)}
        bad = set(sub) - valid
        require(not bad, f"unknown key(s) {sorted(f'{name}.{k}' for k in bad)}; allowed: {', '.join(sorted(valid))}")
        built[name] = cls(**sub)
    return ExperimentConfig(preset=d.get("preset", "custom"), **built)


def _weights_from_flat(sub: dict[str, Any]) -> dict[str, Any]:
    """``<objective>_weight`` keys (the command line's and older run.json files' spelling) -> ``weights``."""
    flat = {k: v for k, v in sub.items() if k.endswith("_weight") and k[:-len("_weight")] in registry().OBJECTIVES}
    if not flat:
        return sub
    rest = {k: v for k, v in sub.items() if k not in flat}
    return {**rest, "weights": {**rest.get("weights", {}), **{k[:-len("_weight")]: v for k, v in flat.items()}}}
