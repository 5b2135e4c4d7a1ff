"""The GPU check: every GPU figure the project relies on, from one command on one GPU, into one JSON file.

    python -m trainables.data fetch                     # on the GPU box, once: the built-in data (needs PyPI)
    python -m trainables.gpu_check                      # the check (no Ray, Optuna or network needed)
    python -m trainables.data fetch --to DIR --compact  # for a GPU box without network: the data as one archive,
    python -m trainables.gpu_check --from DIR           # made where PyPI is reachable and installed by the check
    python -m trainables.gpu_check --dry-run            # every part on the CPU at smoke size
    python -m trainables.gpu_check --usable             # one line: can this node run the CUDA wheel?

Parts, each in its own process with its own timeout (a part that fails or times out keeps what it wrote and
the next one runs), in this order. ``--budget-s`` is the whole check's time; each part gets a share of it in
proportion to its nominal seconds on one H200 (``check.PARTS``), so a slower GPU wants a larger budget
(docs/gpu.md):

smoke      every input format and ELECTRA in bf16, 30 steps each, the step under
           ``torch.cuda.set_sync_debug_mode("error")``; checkpoint + resume; the probe and one
           fine-tuning task; every loss finite                                           (``smoke.py``)
bench      the bert-base step at B=256, T=128, bf16 on random tokens over the full vocabulary:
           ms/step, MFU, ratio to stock ``BertForPreTraining``, peak memory, the SDPA kernel used on
           unpadded and padded batches, eager and ``model.compile``                   (``stepbench.py``)
calibrate  gpu-quick trials as plain processes: one alone, then 4 at once without and with CUDA
           MPS: steps/s, host vs device time per step, fine-tuning steps/s, model-load time; the
           planner's constants re-derived from them                                   (``calibrate.py``)
ddp        two gloo ranks with CUDA tensors on one GPU: gradient all-reduces under ``no_sync``,
           a NaN on one rank stops both, a token budget stops both at one step              (``ddp.py``)

The JSON (``--out``, default runs/gpu_check/gpu_check.json) is rewritten after every part and mirrored to
``--storage`` (a folder, s3://, gs:// or file://); it records every package version, the device and driver,
each part's status, seconds and figures, and a summary. ``check.py`` runs the parts; ``parts.py`` is the
entry each part's process runs.
"""
