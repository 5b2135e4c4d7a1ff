"""Fine-tuning and linear probing of a checkpoint on downstream tasks, over fine-tuning seeds.

    python -m trainables.finetune --checkpoint DIR|none --tasks offline --seeds 3 --preset cpu-small --out OUT
    python -m trainables.finetune --checkpoint DIR --tasks sst2,mrpc --seeds 1 --probe --out OUT
    python -m trainables.finetune --checkpoint DIR --task-file my.csv --task-type pair --seeds 1 --out OUT
    python -m trainables.finetune --list-tasks --json

Heads are the stock ``transformers`` classes that each task type names (``trainables.task_types``),
loaded from the checkpoint with ``from_pretrained`` (the pretraining heads are dropped; the new head is
initialised from the fine-tuning seed).

Protocol: one recipe (``cfg.finetune``) for every variant, ``none`` included; AdamW with linear warmup
and decay; dynamic padding with length bucketing; the training subset (``max_train_examples``) is drawn
with the fine-tuning seed, the evaluation subset (``max_eval_examples``) with a fixed seed so every run
scores the same examples. No model selection: the final model is evaluated on dev (reported through
``report``) and on test (the records), so nothing is ever chosen on test.

Outputs are typed records whose ``to_tables()`` match the export schema (``trainables.schema``:
evals.parquet, predictions.parquet). ``run_probe`` is the cheap, objective-neutral signal the sweeps rank trials by:
frozen encoder, mean-pooled last hidden states (first sub-word states for tagging), logistic
regression, scored on dev.

    api.py       run_finetuning, finetune_one, FinetuneResult, write_tables
    heads.py     Checkpoint, build_head_model, load_encoder
    inputs.py    encode_split (rows -> model inputs), score (predictions -> metrics)
    loop.py      train_model, predict_logits, collate, model_batch (prepared mask), read_back (batched .cpu())
    probe.py     run_probe, probe_one, probe_splits (one fit, several splits: the records' test and dev),
                 probe_budget_splits (the same at each label budget: modes probe and probe@N)
    baselines.py the probe trial's non-neural baselines (finetune.text_baselines): TF-IDF logistic regression,
                 the most frequent tag per word
    __main__.py  the command line
"""

from trainables.finetune.api import MODES, FinetuneResult, finetune_one, run_finetuning, write_tables  # noqa: F401
from trainables.finetune.heads import Checkpoint, build_head_model, load_encoder  # noqa: F401
from trainables.finetune.inputs import encode_split, score  # noqa: F401
from trainables.finetune.loop import collate, predict_logits, train_model  # noqa: F401
from trainables.finetune.probe import probe_one, probe_splits, run_probe  # noqa: F401
