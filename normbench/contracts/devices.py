"""Device classes: cells trained on a GPU and on a CPU are not interchangeable samples of one recipe.

The same cell (recipe, axes, seed) trained on the lent H200 and on this CPU differs like two seeds do or more (float
sums in another order, CUDA matmuls in TF32; results/device-effect-digits.md measures it), so the paired comparisons
pair only cells of one class, the convergence check reads 1x and 2x cells of one class, and a row whose cells mix
classes says so (docs/protocol.md, "Devices")."""

from __future__ import annotations

from typing import Any

CPU, GPU, UNKNOWN = "CPU", "GPU", "unknown"


def device_class(device: Any) -> str:
    """CPU for a result trained on a CPU ("CPU (x86_64, 2 cores)"), GPU for any accelerator ("NVIDIA H200", "cuda",
    "mps"), unknown for a result that predates device names."""
    if not isinstance(device, str) or not device.strip():
        return UNKNOWN
    return CPU if device.strip().lower().startswith("cpu") else GPU


def comparable(a: Any, b: Any) -> bool:
    """May two cells' results be paired? Unless both name a class and the classes differ: a result older than
    device names (unknown) pairs with either, as nothing says it trained elsewhere."""
    first, second = device_class(a), device_class(b)
    return UNKNOWN in (first, second) or first == second


def known_classes(devices: Any) -> set[str]:
    """The device classes a column of device names shows, unknown left out."""
    return {c for c in map(device_class, devices) if c != UNKNOWN}


def pair_class(a: Any, b: Any) -> str:
    """The class of two comparable cells: the one either names (unknown only when neither does)."""
    first, second = device_class(a), device_class(b)
    return first if first != UNKNOWN else second
