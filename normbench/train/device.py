"""The device a suite, a cell or a bench asks for ("auto", "cpu", "cuda", "cuda:N"), checked before any work."""

from __future__ import annotations

import os
import platform

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


def device_name(device: str | torch.device | None = None) -> str:
    """The GPU's name for a CUDA device, else `CPU (<processor>, <kernels>, <N> cores)`; `device` (a torch.device or
    its name) defaults to the current GPU when there is one. A cell's result records it: where it trained, for its
    cost, and which host: two CPU hosts run other kernels and round otherwise (docs/protocol.md, "Devices")."""
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu") if device is None else torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return f"CPU ({platform.processor() or platform.machine()}, {cpu_kernels()}, {os.cpu_count()} cores)"


def cpu_kernels() -> str:
    """The vector instructions torch's CPU kernels use here (AVX512, AVX2, ...) and, where Linux says, the CPU's
    cpuid family and model (`AVX512 6/207`): what picks a matmul's kernel, and so how its sums round."""
    capability = torch.backends.cpu.get_cpu_capability()
    try:
        with open("/proc/cpuinfo") as info:
            first = info.read().split("\n\n", 1)[0]  # the first processor's block
    except OSError:
        return capability
    fields = {key.strip(): value.strip() for key, value in (line.split(":", 1) for line in first.splitlines()
                                                            if ":" in line)}
    family, model = fields.get("cpu family"), fields.get("model")
    return f"{capability} {family}/{model}" if family and model else capability
