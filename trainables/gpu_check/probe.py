"""The CUDA probe the check's gate runs in a process of its own (so the check itself never holds a CUDA
context): one matmul on the GPU, then one JSON line with the device, its memory, the driver and the
libraries. Exits non-zero, with the error on stderr, where the GPU cannot run this torch build."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys


def driver_version() -> str | None:
    """The NVIDIA driver (``nvidia-smi``), or None where the tool is absent."""
    path = shutil.which("nvidia-smi")
    if path is None:
        return None
    out = subprocess.run([path, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                         text=True, timeout=30)
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def main() -> int:
    import torch

    x = torch.randn(256, 256, device="cuda")
    torch.cuda.synchronize()
    checksum = float((x @ x).float().abs().mean())
    props = torch.cuda.get_device_properties(0)
    nccl = torch.cuda.nccl.version() if hasattr(torch.cuda, "nccl") else None
    print(json.dumps({"device": torch.cuda.get_device_name(0), "count": torch.cuda.device_count(),
                      "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
                      "memory_gib": props.total_memory / 2**30, "driver": driver_version(),
                      "cuda_runtime": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                      "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl,
                      "bf16": torch.cuda.is_bf16_supported(), "matmul_ok": checksum > 0}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
