"""Interaction claims across two folders (report/interactions.py), on hand-built cells: a gap that grows is
supported, one that shrinks contradicted, an equal one "no effect found" within a margin and underpowered without
one; seeds pair across folders by number and only on one device class."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from normbench.contracts.interactions import Interaction
from normbench.report.interactions import interaction_frame, interaction_lines

SEEDS = [100, 101, 102, 103, 104, 105]
NOISE = [0.3, -0.2, 0.1, -0.4, 0.2, 0.0]  # per seed, the same in both folders' rmsnorm: pairing removes it


def read(name: str, gaps: dict[str, float], interactions: list[Interaction] = (), margin: float | None = None,
         devices: dict[int, str] | None = None, seeds: list[int] = SEEDS, wobble: float = 0.5) -> SimpleNamespace:
    """A folder whose rows score 80 + the per-seed noise (rmsnorm) and rmsnorm minus the row's gap (+ a
    seed-dependent `wobble`, which differs between folders so the differences of gaps have spread), each at lr
    1e-3, on report seeds."""
    devices = devices or {}
    cells = []
    for i, seed in enumerate(seeds):
        device = devices.get(seed, "CPU (x86_64, 2 cores)")
        cells.append({"layer": "rmsnorm", "score": 80.0 + NOISE[i]})
        cells += [{"layer": layer, "score": 80.0 + NOISE[i] - gap + wobble * (i % 3 - 1)} for layer, gap in gaps.items()]
        for cell in cells[-(1 + len(gaps)):]:
            cell.update(depth=36, lr=1e-3, seed=seed, role="report", device=device)
    layers = ["rmsnorm", *gaps]
    selected = pd.DataFrame({"layer": layers, "depth": 36, "lr": 1e-3})
    return SimpleNamespace(path=Path(name), analysis=SimpleNamespace(cells=pd.DataFrame(cells), selected=selected,
                                                                     keys=["layer", "depth"]),
                           suite=SimpleNamespace(interactions=list(interactions),
                                                 sequential=SimpleNamespace(margin=margin)))


GROWS = Interaction("derf", "rmsnorm", 36)
CONTROL = Interaction("dyt", "rmsnorm", 36, margin=3.0)


def test_a_gap_that_grows_is_supported_and_an_equal_one_reads_no_effect_within_its_margin():
    muon = read("muon", {"derf": 10.0, "dyt": 1.0}, [GROWS, CONTROL])
    adamw = read("adamw", {"derf": 2.0, "dyt": 1.0}, wobble=-0.3)
    frame = interaction_frame(muon, adamw, "muon", "adamw").set_index("claim")
    grows = frame.loc[GROWS.text("muon", "adamw")]
    assert grows["mean"] == pytest.approx(8.0) and grows["n"] == 6  # (10 - 2): each seed's noise cancels
    assert grows["verdict"] == "supported"
    assert grows["gap here"][0] == pytest.approx(10.0) and grows["gap there"][0] == pytest.approx(2.0)
    control = frame.loc[CONTROL.text("muon", "adamw")]
    assert control["mean"] == pytest.approx(0.0, abs=1e-9)
    assert control["verdict"] == "no effect found"  # differences of 0 +- 0.8: inside +-3
    assert grows["p_holm"] >= grows["p"]


def test_a_gap_that_shrinks_is_contradicted_and_without_a_margin_an_equal_gap_is_underpowered():
    spec = Interaction("dyt", "rmsnorm", 36)
    muon = read("muon", {"derf": 1.0, "dyt": 1.0}, [GROWS, spec])
    adamw = read("adamw", {"derf": 9.0, "dyt": 1.0}, wobble=-0.3)
    frame = interaction_frame(muon, adamw, "muon", "adamw").set_index("claim")
    assert frame.loc[GROWS.text("muon", "adamw"), "verdict"] == "contradicted"
    assert frame.loc[spec.text("muon", "adamw"), "verdict"] == "underpowered"  # no margin: equivalence untested
    # the suite's sequential.margin stands in for an interaction's own
    frame = interaction_frame(read("muon", {"derf": 1.0, "dyt": 1.0}, [spec], margin=3.0), adamw, "muon", "adamw")
    assert frame.iloc[0]["verdict"] == "no effect found"


def test_seeds_pair_by_number_and_on_one_device_class_only():
    gpu = {100: "NVIDIA H200", 101: "NVIDIA H200"}
    muon = read("muon", {"derf": 10.0}, [GROWS], devices=gpu)  # seeds 100-101 trained on the GPU here
    adamw = read("adamw", {"derf": 2.0}, seeds=[101, 102, 103, 104, 105, 106])  # 100 missing, 106 extra
    row = interaction_frame(muon, adamw, "muon", "adamw").iloc[0]
    assert row["seeds"] == [102, 103, 104, 105]  # 101 is GPU here and CPU there; 100 and 106 have no partner
    assert row["n"] == 4 and row["cross_device"] == 1


def test_the_section_names_both_sides_and_is_absent_when_no_suite_declares_one():
    muon = read("muon", {"derf": 10.0}, [GROWS])
    adamw = read("adamw", {"derf": 2.0}, wobble=-0.3)
    lines = interaction_lines([adamw, muon], ["adamw", "muon"])
    text = "\n".join(lines)
    assert "gaps larger under muon than under adamw" in text and "| supported" in text
    assert "derf's gap to rmsnorm (rmsnorm minus derf) is larger under muon than under adamw" in text
    assert interaction_lines([adamw, read("other", {"derf": 2.0})], ["a", "b"]) == []
    missing = interaction_lines([read("adamw", {"dyt": 1.0}), muon], ["adamw", "muon"])  # derf never ran there
    assert "no report seeds of both rows in adamw" in "\n".join(missing)
