"""Peak dense bf16 tensor rates of GPUs, keyed on the exact name CUDA reports: the one table the bench's MFU
and the sweep planner's ``--hardware`` use; and the CUDA MPS control daemon (``mps_running``, ``start_mps``,
``stop_mps``), which the sweeps and the GPU check start where trials share a GPU.

    from trainables.hardware import peak_bf16_tflops, PLANNER_PEAK_BF16_TFLOPS
    peak_bf16_tflops(torch.cuda.get_device_name(dev))    # 989.0 on "NVIDIA H200"; None when unknown
    python -m trainables.bench --preset bert-base --peak-tflops 400    # a GPU not in the table

Names are matched exactly (after folding case and whitespace), never by substring: "NVIDIA L40S"
contains "L4" (a third of its rate) and "NVIDIA H100 PCIe" contains "H100" (the SXM part is 31% faster),
so a substring match would overstate MFU by up to 3x. An unknown name gives None: MFU is then reported as
unknown rather than guessed. Every figure is the vendor's dense number (the datasheets print the 2:4
structured-sparsity number first; dense is half of it), which is what a BERT step can use.
"""

from __future__ import annotations

import os
import shutil
import subprocess

# Dense bf16 tensor TFLOPS (sparse figure / 2), from NVIDIA's datasheets unless noted.
PEAK_BF16_TFLOPS: dict[str, float] = {
    # H100 datasheet: SXM 1,979 sparse; PCIe 1,513; NVL 1,671 per GPU
    "NVIDIA H100 80GB HBM3": 989.0,
    "NVIDIA H100 PCIe": 756.0,
    "NVIDIA H100 NVL": 835.0,
    # H200 datasheet: SXM 1,979 sparse (the H100 SXM's tensor cores, more and faster memory)
    "NVIDIA H200": 989.0,
    # A100 datasheet: 312 dense (624 sparse) for every form factor and memory size
    "NVIDIA A100-SXM4-80GB": 312.0,
    "NVIDIA A100-SXM4-40GB": 312.0,
    "NVIDIA A100-PCIE-40GB": 312.0,
    "NVIDIA A100 80GB PCIe": 312.0,
    # L4 datasheet: 242 sparse; L40S: 733 sparse (362.05 dense); L40: 362 sparse
    "NVIDIA L4": 121.0,
    "NVIDIA L40S": 362.0,
    "NVIDIA L40": 181.0,
    # A10 datasheet: 125 dense (250 sparse). The A10G is AWS's variant with fewer tensor FLOPs; NVIDIA publishes
    # no datasheet for it; 70 dense is the figure AWS/Baseten give (baseten.co/blog/nvidia-a10-vs-a10g-...).
    "NVIDIA A10": 125.0,
    "NVIDIA A10G": 70.0,
}

# sweeps/plan.py's --hardware short names -> the device each one means (its peak from the table above), in
# the order its error message lists them.
PLANNER_DEVICES: dict[str, str] = {
    "h200": "NVIDIA H200",
    "h100": "NVIDIA H100 80GB HBM3",
    "a100": "NVIDIA A100-SXM4-80GB",
    "l4": "NVIDIA L4",
    "a10g": "NVIDIA A10G",
}


def normalise(name: str) -> str:
    """Case and runs of whitespace folded: the only liberty taken with a device name."""
    return " ".join(name.split()).casefold()


_BY_NORMALISED = {normalise(k): v for k, v in PEAK_BF16_TFLOPS.items()}
PLANNER_PEAK_BF16_TFLOPS: dict[str, float] = {k: PEAK_BF16_TFLOPS[v] for k, v in PLANNER_DEVICES.items()}


def peak_bf16_tflops(device_name: str) -> float | None:
    """Dense bf16 peak of the device called exactly ``device_name`` (``torch.cuda.get_device_name``), or
    None when it is not in the table (then pass the peak yourself: ``--peak-tflops``)."""
    return _BY_NORMALISED.get(normalise(device_name))


MPS_CONTROL = "nvidia-cuda-mps-control"


def mps_pipe_dir(env: dict | None = None) -> str:
    """Where the MPS control daemon listens: ``$CUDA_MPS_PIPE_DIRECTORY``, by default /tmp/nvidia-mps."""
    return (env if env is not None else os.environ).get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")


def mps_running(env: dict | None = None) -> bool:
    """The MPS control daemon listens on ``<pipe dir>/control``."""
    return os.path.exists(os.path.join(mps_pipe_dir(env), "control"))


def start_mps(env: dict | None = None) -> str:
    """Start the control daemon (``nvidia-cuda-mps-control -d``) for processes started with ``env``; the
    one line that says what happened. Raises RuntimeError where the tool is missing or refuses to start."""
    path = shutil.which(MPS_CONTROL)
    if path is None:
        raise RuntimeError(f"{MPS_CONTROL} is not on PATH here (it comes with the NVIDIA driver's utilities)")
    if mps_running(env):
        return f"CUDA MPS already running ({mps_pipe_dir(env)})"
    done = subprocess.run([path, "-d"], env=env, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{MPS_CONTROL} -d exited {done.returncode}: {(done.stderr or done.stdout).strip()[-300:]}")
    return f"started the CUDA MPS control daemon ({mps_pipe_dir(env)}); stop it with: echo quit | {MPS_CONTROL}"


def stop_mps(env: dict | None = None) -> None:
    """``echo quit | nvidia-cuda-mps-control``: the daemon and its server exit once their clients have."""
    path = shutil.which(MPS_CONTROL)
    if path is not None and mps_running(env):
        subprocess.run([path], input="quit\n", env=env, capture_output=True, text=True, timeout=30)
