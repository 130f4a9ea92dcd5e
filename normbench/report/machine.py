"""One line naming the machine and the versions a result came from: every committed report carries it."""

from __future__ import annotations

import datetime
import os
import platform


def machine_line() -> str:
    """`machine: <host>, <GPU name or CPU and cores>; normbench, torch and timm versions; written <time>`."""
    import timm
    import torch

    import normbench

    cpu = f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else cpu
    return (f"machine: {platform.node()}, {device}; normbench {normbench.__version__}, torch {torch.__version__}, "
            f"timm {timm.__version__}; written {datetime.datetime.now():%Y-%m-%d %H:%M}")
