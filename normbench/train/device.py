"""The device a suite, a cell or a bench asks for ("auto", "cpu", "cuda", "cuda:N"), checked before any work."""

from __future__ import annotations

import torch

from normbench.errors import NormbenchError


def resolve_device(device: str | torch.device) -> torch.device:
    """"auto" is CUDA when a GPU is visible, else CPU. A CUDA device that is not there is an error naming the fix,
    raised up front rather than by every cell in turn."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if dev.index is not None and dev.index >= count or count == 0:
            raise NormbenchError(f"device {device}: this machine sees {count} CUDA device(s); use --device cpu or "
                                 "--device auto, or check CUDA_VISIBLE_DEVICES and the driver (nvidia-smi)")
    return dev
