"""normbench.report.analysis: per-row facts the tables read beside the scores."""

from __future__ import annotations

import pandas as pd

from normbench.contracts.selection import add_scores
from normbench.report.analysis import row_devices
from normbench.report.stats import select_lr, selected_cells
from tests.report.test_stats import cell

CPU, GPU = "CPU (x86_64, 2 cores)", "NVIDIA H200"


def test_a_row_whose_cells_mix_devices_says_which_chose_and_which_score():
    rows = [{**cell("a", lr, seed, 70.0, 70.0), "role": "select", "device": GPU if seed < 2 else CPU}
            for lr in (1e-3, 3e-3) for seed in range(4)]
    rows += [{**cell("a", 1e-3, seed, 70.0, 70.0), "role": "report", "device": CPU} for seed in (100, 101)]
    rows += [{**cell("b", 1e-3, seed, 70.0, 70.0), "role": "select", "device": CPU} for seed in range(4)]
    cells = add_scores(pd.DataFrame(rows))
    keys = ["layer", "depth"]
    devices = row_devices(cells, selected_cells(cells, select_lr(cells, keys), keys), keys).set_index("layer")
    assert devices.loc["a", "devices"] == "selection 4 CPU + 4 GPU; score CPU"
    assert devices.loc["b", "devices"] == "selection CPU; score CPU"
    one_device = cells.assign(device=CPU)
    assert row_devices(one_device, selected_cells(one_device, select_lr(one_device, keys), keys), keys) is None
