"""One line naming the machine and the versions a result came from: every committed report carries it (the
leaderboard, `normbench probe`, and `normbench bench`, which adds its own fields after it)."""

from __future__ import annotations

import datetime
import os
import platform
from typing import Any


def versions() -> dict[str, str]:
    """{"normbench": ..., "torch": ..., "timm": ...}: the versions a result came from."""
    import timm
    import torch

    import normbench

    return {"normbench": normbench.__version__, "torch": torch.__version__, "timm": timm.__version__}


def device_name(device: Any = None) -> str:
    """train/device.py's `device_name`, imported late: this module is read without torch."""
    from normbench.train.device import device_name as name

    return name(device)


def load_note() -> str:
    """`, load average <1 min> at start`, or "" where the OS keeps none: timings on a CPU hinge on idle cores."""
    return f", load average {os.getloadavg()[0]:.1f} at start" if hasattr(os, "getloadavg") else ""


def machine_line(device: Any = None) -> str:
    """`machine: <host>, <GPU name or CPU and cores>; normbench, torch and timm versions; written <time>`.

    Args:
        device: the device the result ran on (default: the GPU if there is one, else the CPU).
    """
    named = ", ".join(f"{name} {version}" for name, version in versions().items())
    return (f"machine: {platform.node()}, {device_name(device)}; {named}; "
            f"written {datetime.datetime.now():%Y-%m-%d %H:%M}")
