"""What the pretraining and fine-tuning loops share: the device, AdamW with a linear schedule, the precision
(``resolve_precision``: bf16 autocast on CUDA and on CPUs with native bf16) and its autocast.

``trial_device`` is the one decision of which device a Ray trial (or Ray Train worker) trains on: the GPU
Ray assigned to it, or the CPU when it was assigned none. Since Ray 2.5x a task with no GPU no longer has
``CUDA_VISIBLE_DEVICES`` emptied (``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO``, ray-project/ray#54868): it sees
every GPU of the node, and ``torch.cuda.is_available()`` says nothing about what the trial may use.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import logging
import os
import threading
from collections.abc import Sequence
from typing import NamedTuple

import torch
from transformers import get_linear_schedule_with_warmup
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

from trainables.config import ConfigError

log = logging.getLogger(__name__)


def resolve_device(name: str | torch.device) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; asking for CUDA where there is none is an error."""
    name = str(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device={name!r} but CUDA is not available here; allowed: auto, cpu")
    return torch.device(name)


def cuda_index(gpu_id: str | int, visible: str | None = None) -> int:
    """The torch index (``cuda:k``) of the physical GPU that Ray calls ``gpu_id`` in this process.

    Ray's ids are the node's GPUs in the namespace of the ``CUDA_VISIBLE_DEVICES`` the raylet started
    with. By default Ray sets this process's ``CUDA_VISIBLE_DEVICES`` to its assigned ids (Ray Train to all
    its workers' on the node), so the GPU is at the id's position in that list; with
    ``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1`` the variable is left as the node had it (the same
    rule), or unset, when the id is the index itself. ``ray.train.torch.get_device`` uses the same rule."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    gpu_id = str(gpu_id).strip()
    if visible is None:
        if not gpu_id.isdigit():
            raise ConfigError(f"Ray assigned GPU {gpu_id!r} and CUDA_VISIBLE_DEVICES is unset: the id is no index")
        return int(gpu_id)
    listed = [v.strip() for v in visible.split(",") if v.strip()]
    if gpu_id not in listed:
        raise ConfigError(f"Ray assigned GPU {gpu_id!r} but CUDA_VISIBLE_DEVICES={visible!r} does not list it")
    return listed.index(gpu_id)


def trial_device(assigned_gpu_ids: Sequence[str | int], requested: str = "auto") -> torch.device:
    """The device of a Ray trial or worker: the (first) GPU Ray assigned it, the CPU when none was.

    ``requested`` is ``run.device``: ``cpu`` is honoured; ``auto`` and ``cuda[:N]`` mean "the GPU Ray gave
    me" (an index chosen by hand would bypass Ray's scheduling). A trial holding GPUs where torch sees no
    CUDA (a CPU wheel, a driver mismatch) is an error, not a silent CPU run."""
    ids = [str(i) for i in assigned_gpu_ids]
    requested = str(requested)
    if requested == "cpu":
        return torch.device("cpu")
    if not ids:
        if requested.startswith("cuda"):
            raise ConfigError(f"run.device={requested!r} but Ray assigned this trial no GPU; request one with "
                              "--gpus-per-trial, or use run.device=auto|cpu")
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError(f"Ray assigned GPU(s) {','.join(ids)} but torch.cuda.is_available() is False here "
                          f"(torch {torch.__version__}, built for CUDA {torch.version.cuda or 'none: a CPU-only wheel'}"
                          "); install a CUDA build of torch that matches the driver, or run with --gpus-per-trial 0")
    index = cuda_index(ids[0])
    count = torch.cuda.device_count()
    if index >= count:
        raise ConfigError(f"Ray assigned GPU {ids[0]} (cuda:{index}) but torch sees {count} GPU(s) "
                          f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
    log.info("trial device cuda:%d (Ray GPU id(s) %s)", index, ",".join(ids))
    return torch.device(f"cuda:{index}")


def wsd_lambda(warmup_steps: int, total_steps: int, decay_steps: int):
    """Warmup-stable-decay (Hu et al. 2024, MiniCPM; Hägele et al. 2024): linear warmup, the peak rate held, then
    a linear decay to 0 over the last ``decay_steps``. Its first ``total_steps - decay_steps`` steps do not depend
    on ``total_steps``, so a run can branch off into the decay of any shorter run it passes (run.snapshots)."""
    start = total_steps - decay_steps

    def factor(i: int) -> float:
        if i < warmup_steps:
            return i / max(warmup_steps, 1)
        if i < start:
            return 1.0
        return max(total_steps - i, 0) / max(decay_steps, 1)
    return factor


def build_adamw(model: torch.nn.Module, *, lr: float, weight_decay: float, warmup_steps: int, total_steps: int,
                betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, decay_steps: int | None = None):
    """AdamW without weight decay on biases and LayerNorm; linear warmup then linear decay to 0 over the rest, or
    with ``decay_steps`` over the last that many (``wsd_lambda``)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "LayerNorm" in name else decay).append(p)
    fused = all(p.device.type in ("cpu", "cuda") for p in decay + no_decay)  # one kernel where torch has it
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=betas, eps=eps, fused=fused or None, foreach=None if fused else True)
    if decay_steps is not None:
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, wsd_lambda(warmup_steps, max(total_steps, 1), decay_steps))
    return opt, get_linear_schedule_with_warmup(opt, warmup_steps, max(total_steps, 1))


def use_deterministic_kernels(on: bool) -> None:
    """``run.deterministic``: deterministic algorithms only (an op without one raises instead of running),
    cuBLAS with a fixed workspace (it must be set before cuBLAS starts, hence the environment), no cuDNN
    autotuning. Process-wide, as torch's switch is."""
    if not on:
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # native bf16 matmul instructions (x86), as /proc/cpuinfo names them


class Precision(NamedTuple):
    """What ``run.precision`` means on one device: ``name`` is ``bf16`` (autocast) or ``fp32``; ``why`` says so."""

    name: str
    why: str


def cpu_bf16_flag(cpuinfo: str | None = None) -> str | None:
    """This CPU's native bf16 instruction set (``amx_bf16`` or ``avx512_bf16``), or None: without one a bf16
    matmul is emulated and slower than fp32. From /proc/cpuinfo's flags on Linux, elsewhere from torch's own
    probe (``torch.cpu._is_amx_tile_supported`` / ``_is_avx512_bf16_supported``); None if torch has no oneDNN."""
    if not torch.backends.mkldnn.is_available():
        return None
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            probes = (("amx_bf16", "_is_amx_tile_supported"), ("avx512_bf16", "_is_avx512_bf16_supported"))
            return next((flag for flag, probe in probes if getattr(torch.cpu, probe, lambda: False)()), None)
    flags = {w for line in cpuinfo.splitlines() if line.startswith("flags") for w in line.partition(":")[2].split()}
    return next((f for f in CPU_BF16_FLAGS if f in flags), None)


@functools.cache
def _cpu_bf16_flag() -> str | None:
    return cpu_bf16_flag()  # detected once per process


def resolve_precision(device: torch.device, precision: str) -> Precision:
    """``run.precision`` on ``device``: ``auto`` is bf16 autocast on CUDA and on a CPU with native bf16
    (``cpu_bf16_flag``), fp32 elsewhere; ``fp32`` and ``bf16`` force theirs."""
    if precision in ("fp32", "bf16"):
        return Precision(precision, f"run.precision={precision}")
    if precision != "auto":
        raise ConfigError(f"run.precision={precision!r} is not valid; allowed: auto, fp32, bf16")
    if device.type == "cuda":
        return Precision("bf16", "auto: CUDA")
    if device.type == "cpu":
        flag = _cpu_bf16_flag()
        return Precision("bf16", f"auto: the CPU has {flag}") if flag else \
            Precision("fp32", "auto: the CPU has no native bf16 (" + " or ".join(CPU_BF16_FLAGS) + ")")
    return Precision("fp32", f"auto: {device.type}")


ALLOCATORS = ("retain", "system")
# glibc's mallopt parameters (malloc.h) and the values of ``retain``: freed memory stays in the heap for the next
# step instead of going back to the kernel, up to 1 GiB above the heap's top; blocks below 32 MiB (glibc's
# largest allowed threshold) come from the heap, larger ones are still mapped on their own.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
RETAIN = {"mmap_threshold": (_M_MMAP_THRESHOLD, 32 << 20), "trim_threshold": (_M_TRIM_THRESHOLD, 1 << 30),
          "top_pad": (_M_TOP_PAD, 256 << 20)}
_allocator_lock = threading.Lock()
_allocator_set: "Allocator | None" = None  # what this process set (mallopt cannot be undone)


class Allocator(NamedTuple):
    """What ``run.allocator`` did in this process: ``name`` is ``retain`` or ``system``; ``why`` says so."""

    name: str
    why: str


@functools.cache
def _glibc():
    """The C library when it is glibc, else None (macOS, musl, Windows); looked up once per process (finding it
    runs ``ldconfig``)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018  (glibc's own symbol: another libc's mallopt may differ)
    except (OSError, AttributeError):
        return None
    return libc


def _mallopt():
    """glibc's ``mallopt``, or None where the C library is not glibc."""
    libc = _glibc()
    if libc is None:
        return None
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt


def set_allocator(choice: str) -> Allocator:
    """``run.allocator`` for this process, once: ``retain`` keeps the memory a training step frees for the next
    step (glibc ``mallopt``: ``RETAIN``), ``system`` leaves the C library's defaults.

    With glibc's defaults a step's large temporaries (the MLM logits of every masked position, the attention
    scores, the FFN's activations) are handed back to the kernel when freed and faulted in again, page by
    page, by the next step; at 2 threads those faults cost the loop time, at 1 they do not (docs/benchmarks.md,
    the allocator rule).
    Process-wide and permanent once set (mallopt cannot be undone): a later ``system`` is told so. Numerics do not change: the same step gives the same bits either way."""
    global _allocator_set
    if choice not in ALLOCATORS:
        raise ConfigError(f"run.allocator={choice!r} is not valid; allowed: {', '.join(ALLOCATORS)}")
    with _allocator_lock:
        if choice == "system" or _allocator_set is not None:
            return _in_force(choice)
        mallopt = _mallopt()
        if mallopt is None:
            _allocator_set = Allocator("system", "run.allocator=retain needs glibc's mallopt; this C library is "
                                                 "not glibc")
            return _allocator_set
        failed = [name for name, (param, value) in RETAIN.items() if mallopt(param, value) != 1]
        if failed:
            log.warning("mallopt refused %s; the allocator keeps glibc's defaults for them", ", ".join(failed))
        done = [f"{name}={RETAIN[name][1] >> 20} MiB" for name in RETAIN if name not in failed]
        _allocator_set = Allocator("retain" if done else "system",
                                   "glibc mallopt " + ", ".join(done) if done else "glibc refused mallopt")
        return _allocator_set


def release_free_memory() -> bool:
    """Collect unreachable objects, then hand the whole free pages of every malloc arena back to the kernel (glibc
    ``malloc_trim(0)``; a thread's arena keeps its top chunk, at most one 64 MiB heap). False where the C library
    is not glibc.

    Called between the trials a reused process runs (``sweeps.runner.run_phase``). Ray Tune runs each trial in a
    new thread, and in a Ray worker, with its many threads, that thread is served from another arena than the
    trial before it was (glibc gives a new thread a dead thread's arena only when no live thread shares it). Under
    ``retain`` a thread's arena never gives memory back by itself (``top_pad`` and ``trim_threshold`` exceed its
    64 MiB heaps), so each trial's peak stayed resident after it, free but held, and a long read phase grew until
    the node's memory monitor killed it. With one arena per process (``MALLOC_ARENA_MAX=1``) nothing accumulated;
    that, and memory in use staying flat, is what told it from a leak (docs/results.md). The next trial faults
    its working set in again."""
    libc = _glibc()
    if libc is None:
        return False
    gc.collect()  # a trial's reference cycles (modules, tracebacks) are freed only by the collector
    libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    libc.malloc_trim(0)
    return True


def current_allocator(choice: str) -> Allocator:
    """What this process's allocator is now, without setting it (run.json's record at a run's end: what
    ``set_allocator`` did at its start, or glibc's defaults if nothing set it)."""
    with _allocator_lock:
        return _in_force(choice)


def _in_force(choice: str) -> Allocator:
    """The allocator in force for a run asking for ``choice`` (under ``_allocator_lock``)."""
    if _allocator_set is not None and choice == "retain":
        return _allocator_set  # what set_allocator did (retain, or its fallback and why)
    if _allocator_set is not None and _allocator_set.name == "retain":
        return Allocator("retain", "run.allocator=system asked, but an earlier run of this process set retain "
                                   "(permanent)")
    return Allocator("system", "run.allocator=system: the C library's defaults" if choice == "system"
                     else "nothing set it in this process: the C library's defaults")


def autocast(device: torch.device, precision: str):
    """bf16 autocast where ``resolve_precision`` says bf16, a no-op (fp32) elsewhere. Under it the linear
    layers run in bf16 (attention too on CUDA; on a CPU it stays fp32: ``sdpa_fp32_on_cpu``), and the residual
    stream, the encoder's LayerNorms and the losses (cast to fp32 by the objectives) stay fp32; the weights, their gradients
    and the optimizer's state are fp32 throughout."""
    use_bf16 = resolve_precision(device, precision).name == "bf16"
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16)


def sdpa_fp32_on_cpu(module, query, key, value, attention_mask, **kwargs):
    """transformers' SDPA attention, in fp32 under a CPU's bf16 autocast (unchanged everywhere else).

    torch's CPU flash attention is slower in bf16 than in fp32 at BERT's short sequences (as fast at 512),
    and attention is a large part of a cpu-small bf16 step (docs/results.md, "Measured: bf16 beside fp32 on a
    CPU").
    In fp32 it is also the more exact. The casts are of (B, heads, T, d) activations, cheap beside the
    attention."""
    if query.device.type != "cpu" or not torch.is_autocast_enabled("cpu"):
        return _HF_SDPA(module, query, key, value, attention_mask, **kwargs)
    if attention_mask is not None and attention_mask.is_floating_point():
        attention_mask = attention_mask.float()
    with torch.autocast("cpu", enabled=False):
        return _HF_SDPA(module, query.float(), key.float(), value.float(), attention_mask, **kwargs)


_HF_SDPA = ALL_ATTENTION_FUNCTIONS["sdpa"]
if getattr(_HF_SDPA, "__name__", "") == sdpa_fp32_on_cpu.__name__:  # this module reloaded: keep the original
    _HF_SDPA = _HF_SDPA.__wrapped__
sdpa_fp32_on_cpu.__wrapped__ = _HF_SDPA
AttentionInterface.register("sdpa", sdpa_fp32_on_cpu)  # library-wide: every BERT here runs "sdpa"


def enable_tf32(device: torch.device, deterministic: bool = False) -> bool:
    """On CUDA, let fp32 matmuls and convolutions run on TF32 tensor cores (Ampere and later; 10-bit
    mantissa inputs, fp32 accumulation): what bf16 autocast leaves in fp32, e.g. a run at
    ``precision=fp32``, the optimizer's and the loss's matmuls. Elsewhere nothing changes. Returns
    whether TF32 is on.

    ``deterministic`` (a run that asks for bit-reproducible results, e.g. a ``run.deterministic``
    option) keeps full fp32 ("highest") instead. Set through ``torch.set_float32_matmul_precision`` and
    ``cudnn.allow_tf32``, the API that ``torch.compile``'s inductor reads back
    (``torch.get_float32_matmul_precision()`` when it autotunes): setting only the newer per-backend
    ``fp32_precision`` leaves torch in a "mix of the legacy and new APIs" state in which that getter and
    ``torch.backends.cuda.matmul.allow_tf32`` raise (torch 2.10-2.13), so a compiled run would fail."""
    if device.type != "cuda":
        return False
    torch.set_float32_matmul_precision("highest" if deterministic else "high")
    torch.backends.cudnn.allow_tf32 = not deterministic
    return not deterministic
