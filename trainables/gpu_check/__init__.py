"""The first GPU run's check: every GPU figure the project owes, in one ~8-minute command and one JSON file.

    python -m trainables.data fetch --to carry --compact         # here: the built-in data, one ~33 MiB archive
    python -m trainables.gpu_check --from carry --budget-s 480   # on the GPU box (no network, no Ray needed)
    python -m trainables.gpu_check --dry-run                     # every part on the CPU at smoke size
    python -m trainables.gpu_check --usable                      # one line: can this node run the CUDA wheel?

Parts, each in its own process with its own timeout (a part that fails or times out keeps what it wrote and
the next one runs), in this order, sized for one H200 (docs/gpu.md):

smoke      (~90 s)  every input format and ELECTRA in bf16, 30 steps each, the step under
                    ``torch.cuda.set_sync_debug_mode("error")``; checkpoint + resume; the probe and one
                    fine-tuning task; every loss finite                                  (``smoke.py``)
bench      (~2 min) the bert-base step at B=256, T=128, bf16 on random tokens over the full vocabulary:
                    ms/step, MFU, ratio to stock ``BertForPreTraining``, peak memory, the SDPA kernel used on
                    unpadded and padded batches, eager and ``model.compile``          (``stepbench.py``)
calibrate  (~2.5 min) gpu-quick trials as plain processes: one alone, then 4 at once without and with CUDA
                    MPS: steps/s, host vs device time per step, fine-tuning steps/s, model-load time; the
                    planner's constants re-derived from them                          (``calibrate.py``)
ddp        (~1 min) two gloo ranks with CUDA tensors on the one GPU: gradient all-reduces under ``no_sync``,
                    a NaN on one rank stops both, a token budget stops both at one step     (``ddp.py``)

The JSON (``--out``, default runs/gpu_check/gpu_check.json) is rewritten after every part and mirrored to
``--storage`` (a folder, s3://, gs:// or file://); it records every package version, the device and driver,
each part's status, seconds and figures, and a summary. ``check.py`` runs the parts; ``parts.py`` is the
entry each part's process runs.
"""
