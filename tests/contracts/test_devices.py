"""normbench.contracts.devices: which cells count as trained on the same kind of device."""

from __future__ import annotations

import math

import pytest

from normbench.contracts.devices import device_class


@pytest.mark.parametrize(("device", "expected"), [
    ("CPU (x86_64, 2 cores)", "CPU"), ("cpu", "CPU"), ("NVIDIA H200", "GPU"), ("NVIDIA H100 80GB HBM3", "GPU"),
    ("cuda:0", "GPU"), ("mps", "GPU"), (None, "unknown"), (math.nan, "unknown"), ("", "unknown"),
])
def test_device_class(device, expected):
    assert device_class(device) == expected


def test_a_result_older_than_device_names_pairs_with_either_class():
    from normbench.contracts.devices import comparable

    assert comparable("CPU (x86_64, 2 cores)", None) and comparable(None, "NVIDIA H200")
    assert comparable("cpu", "CPU (x86_64, 2 cores)") and not comparable("cpu", "NVIDIA H200")
