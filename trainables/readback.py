"""Device tensors read back to the host in one transfer: what every evaluation (intrinsic metrics, fine-tuning,
the probe) uses instead of an ``.item()``, ``int()`` or ``.cpu()`` per batch, each of which waits for the device
to finish everything queued before it. Below everything else in trainables (it imports only torch and numpy).
"""

from __future__ import annotations

import numpy as np
import torch


def to_host(tensors: list[torch.Tensor]) -> list[np.ndarray]:
    """Many device tensors read back in one transfer: flattened and concatenated (as float32) on the
    device, one ``.cpu()``, split and reshaped on the host (the shapes are host metadata)."""
    if not tensors:
        return []
    flat = torch.cat([t.detach().float().reshape(-1) for t in tensors]).cpu().numpy()  # (sum of numels,)
    parts = np.split(flat, np.cumsum([t.numel() for t in tensors])[:-1])
    return [part.reshape(tuple(t.shape)) for part, t in zip(parts, tensors)]
