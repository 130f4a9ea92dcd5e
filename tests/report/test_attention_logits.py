"""The comparison's attention-logit section (report/attention_logits.py), on hand-built telemetry: each row at its
val-selected lr, the largest logit over blocks at the last observed step and over training, mean over the scoring
cells; a folder without telemetry says so instead of showing zeros."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from normbench.report.attention_logits import RERUNS, logit_lines, logit_summary


def cell(layer: str, lr: float, seed: int, role: str, select: float, logits: dict[int, list[float]]) -> dict:
    """`logits`: step -> the attn_logit_max of each block at that step."""
    return {"cell_id": f"{layer},{lr},{seed},{role}", "layer": layer, "depth": 36, "lr": lr, "seed": seed,
            "select": select, "score": select, "status": "ok", "role": role,
            "telemetry": [{"step": step, "block": b, "attn_logit_max": v}
                          for step, values in logits.items() for b, v in enumerate(values)]}


SELECTED = pd.DataFrame({"layer": ["layernorm", "layernorm+qk_norm"], "depth": 36, "lr": 1e-3})


def read(name: str, cells: list[dict], selected: pd.DataFrame = SELECTED) -> SimpleNamespace:
    """A folder whose analysis selected `selected`'s lrs (as its tables score them)."""
    return SimpleNamespace(path=Path(name), cells=pd.DataFrame(cells),
                           analysis=SimpleNamespace(selected=selected, keys=["layer", "depth"]))


MUON = [
    cell("layernorm", 1e-3, 0, "select", 90.0, {0: [1.0, 2.0], 25: [3.0, 4.0]}),
    cell("layernorm", 1e-2, 0, "select", 95.0, {0: [99.0, 99.0]}),  # the lr not selected: never read
    cell("layernorm", 1e-2, 1, "select", 99.0, {0: [77.0, 77.0]}),  # the better val mean here; the analysis chose 1e-3
    cell("layernorm", 1e-3, 100, "report", 91.0, {0: [1.0, 2.0], 25: [30.0, 8.0], 50: [6.0, 10.0]}),
    cell("layernorm", 1e-3, 101, "report", 92.0, {0: [1.0, 2.0], 25: [5.0, 4.0], 50: [2.0, 6.0]}),
    cell("layernorm", 1e-3, 100, "budget", 93.0, {0: [500.0, 500.0]}),  # a 2x cell: never read
    cell("layernorm+qk_norm", 1e-3, 100, "select", 95.0, {0: [2.0, 2.0], 25: [2.5, 2.0]}),
]


def test_each_row_reads_its_scoring_cells_at_the_selected_lr():
    summary = logit_summary(read("muon", MUON)).set_index("layer")
    assert summary.loc["layernorm", "final"] == pytest.approx((10.0 + 6.0) / 2)  # max over blocks at step 50
    assert summary.loc["layernorm", "peak"] == pytest.approx((30.0 + 6.0) / 2)   # max over blocks and steps
    assert summary.loc["layernorm", "n"] == 2  # the report cells; selection, other-lr and 2x cells left out
    assert summary.loc["layernorm+qk_norm", "final"] == pytest.approx(2.5)  # no report cells yet: its selection cell


def test_a_folder_without_telemetry_shows_dashes_and_says_why():
    silent = read("adamw", [{**c, "telemetry": None} for c in MUON])
    text = "\n".join(logit_lines([silent, read("muon", MUON)], ["adamw", "muon"]))
    row = next(line for line in text.splitlines() if line.startswith("| 36 ") and "| layernorm " in line)
    assert [c.strip() for c in row.strip("|").split("|")][2:] == ["—", "—", "8", "18 (2 cells)"]
    assert "`adamw` recorded no attention telemetry" in text
    assert logit_lines([silent], ["adamw"]) == []  # nothing recorded anywhere: no section


def test_a_folder_without_telemetry_reads_its_reruns_at_the_lr_each_row_selects_now(tmp_path):
    pd.DataFrame([{"layer": "layernorm", "depth": 36, "lr": 1e-3, "seed": 100, "step": step, "block": b,
                   "attn_logit_max": v} for step, values in {0: [1.0, 2.0], 25: [7.0, 3.0]}.items()
                  for b, v in enumerate(values)]
                 + [{"layer": "ngpt", "depth": 36, "lr": 1e-2, "seed": 100, "step": 0, "block": 0,
                     "attn_logit_max": 50.0}]).to_csv(tmp_path / RERUNS, index=False)
    selected = pd.DataFrame({"layer": ["layernorm", "ngpt"], "depth": 36, "lr": [1e-3, 3e-3]})  # ngpt moved since
    adamw = SimpleNamespace(path=tmp_path, cells=pd.DataFrame([{**c, "telemetry": None} for c in MUON]),
                            analysis=SimpleNamespace(selected=selected, keys=["layer", "depth"]))
    summary = logit_summary(adamw)
    assert summary.attrs["source"] == RERUNS
    assert summary.set_index("layer").loc["layernorm", ["final", "peak", "n"]].tolist() == [7.0, 7.0, 1]
    assert "ngpt" not in set(summary["layer"])  # its re-run is at an lr it no longer selects
    text = "\n".join(logit_lines([adamw, read("muon", MUON)], ["adamw", "muon"]))
    assert "re-runs of report cells" in text and "recorded no attention telemetry" not in text


def test_reruns_of_one_layer_at_two_depths_stay_two_rows(tmp_path):
    pd.DataFrame([{"layer": "layernorm", "depth": depth, "lr": 1e-3, "seed": 100, "step": 0, "block": 0,
                   "attn_logit_max": value} for depth, value in ((12, 1.0), (36, 5.0))]).to_csv(tmp_path / RERUNS,
                                                                                              index=False)
    selected = pd.DataFrame({"layer": "layernorm", "depth": [12, 36], "lr": 1e-3})
    folder = SimpleNamespace(path=tmp_path, cells=pd.DataFrame([{**MUON[0], "telemetry": None}]),
                             analysis=SimpleNamespace(selected=selected, keys=["layer", "depth"]))
    summary = logit_summary(folder).set_index("depth")
    assert summary.loc[12, "final"] == 1.0 and summary.loc[36, "final"] == 5.0


def test_beside_reruns_the_other_folder_is_read_on_the_reruns_seeds(tmp_path):
    """The AdamW side is one re-run a row (seed 100); the Muon side was the mean over all its scoring cells (4 to 16
    seeds): now both read seed 100, the same cell under the two optimizers."""
    pd.DataFrame([{"layer": "layernorm", "depth": 36, "lr": 1e-3, "seed": 100, "step": 0, "block": 0,
                   "attn_logit_max": 7.0}]).to_csv(tmp_path / RERUNS, index=False)
    adamw = SimpleNamespace(path=tmp_path, cells=pd.DataFrame([{**c, "telemetry": None} for c in MUON]),
                            analysis=SimpleNamespace(selected=SELECTED, keys=["layer", "depth"]))
    text = "\n".join(logit_lines([adamw, read("muon", MUON)], ["adamw", "muon"]))
    row = next(line for line in text.splitlines() if line.startswith("| 36 ") and "| layernorm " in line)
    # Muon's seed-100 report cell alone: 10 at its last step (step 50), 30 at its peak; not the 2-seed means 8 and 18
    assert [c.strip() for c in row.strip("|").split("|")][2:] == ["7", "7 (1 cell)", "10", "30 (1 cell)"]
    assert "read the re-runs' seed (100)" in text
    alone = "\n".join(logit_lines([read("muon", MUON)], ["muon"]))  # no re-runs anywhere: every scoring cell
    assert "18 (2 cells)" in alone


def test_an_unfinished_folder_beside_reruns_says_it_has_not_reached_their_seeds(tmp_path):
    """Muon before its report stage: telemetry on its selection seeds only, none on the re-runs' seed 100. Its empty
    columns are said to wait for that seed, not blamed on a suite without telemetry."""
    pd.DataFrame([{"layer": "layernorm", "depth": 36, "lr": 1e-3, "seed": 100, "step": 0, "block": 0,
                   "attn_logit_max": 7.0}]).to_csv(tmp_path / RERUNS, index=False)
    adamw = SimpleNamespace(path=tmp_path, cells=pd.DataFrame([{**c, "telemetry": None} for c in MUON]),
                            analysis=SimpleNamespace(selected=SELECTED, keys=["layer", "depth"]))
    selecting = [c for c in MUON if c["role"] == "select" and c["seed"] < 100]
    text = "\n".join(logit_lines([adamw, read("muon", selecting)], ["adamw", "muon"]))
    assert "`muon` recorded attention telemetry, but on no cell of the seed compared (100) yet" in text
    assert "recorded no attention telemetry" not in text


def test_telemetry_on_none_of_the_cells_read_is_said_so_without_reruns():
    """Telemetry at an lr the analysis did not select, and no re-runs anywhere: not "recorded no telemetry"."""
    elsewhere = [c for c in MUON if c["lr"] == 1e-2]  # the lr not selected
    text = "\n".join(logit_lines([read("adamw", elsewhere), read("muon", MUON)], ["adamw", "muon"]))
    assert "`adamw` recorded attention telemetry, but on none of the cells this table reads" in text
