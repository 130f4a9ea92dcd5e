"""Interaction claims across two folders (report/interactions.py), on hand-built cells: a gap that grows is
supported, one that shrinks contradicted, an equal one "no effect found" within a margin and underpowered without
one; seeds pair across folders by number, on report cells only and on one device class; Holm runs over the
comparison's whole family."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from normbench.contracts.interactions import Interaction
from normbench.report.interactions import NO_PAIRS, interaction_frame, interaction_lines
from normbench.report.stats import ALPHA, detectable_effect

SEEDS = [100, 101, 102, 103, 104, 105]
SHARED = [9.0, -7.0, 4.0, -11.0, 6.0, -1.0]  # per seed, the same in both folders' gaps: only pairing by seed removes it
CPU = "CPU (x86_64, 2 cores)"


def read(name: str, gaps: dict[str, float], interactions: list[Interaction] = (), margin: float | None = None,
         devices: dict[tuple[str, int], str] | None = None, seeds: list[int] = SEEDS, wobble: float = 0.5,
         role: str = "report") -> SimpleNamespace:
    """A folder at depth 36 whose rmsnorm scores 80 on every seed and each other row rmsnorm minus its gap, plus the
    seed's SHARED offset and a folder-specific `wobble` (so the differences of gaps have spread), at lr 1e-3.
    `devices`: (layer, seed) -> device name (default: this CPU)."""
    devices = devices or {}
    cells = [{"layer": "rmsnorm", "seed": seed, "score": 80.0} for seed in seeds]
    cells += [{"layer": layer, "seed": seed, "score": 80.0 - gap - SHARED[i] - wobble * (i % 3 - 1)}
              for layer, gap in gaps.items() for i, seed in enumerate(seeds)]
    for cell in cells:
        cell.update(depth=36, lr=1e-3, role=role, device=devices.get((cell["layer"], cell["seed"]), CPU))
    selected = pd.DataFrame({"layer": ["rmsnorm", *gaps], "depth": 36, "lr": 1e-3})
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
    # 10 - 2, each seed's shared offset cancelling: paired by seed number, the spread is the wobbles' alone (0.8)
    assert grows["mean"] == pytest.approx(8.0) and grows["n"] == 6 and grows["sd"] < 1.0
    assert grows["verdict"] == "supported"
    assert grows["gap here"] == pytest.approx(10.0) and grows["gap there"] == pytest.approx(2.0)
    control = frame.loc[CONTROL.text("muon", "adamw")]
    assert control["mean"] == pytest.approx(0.0, abs=1e-9)
    assert control["verdict"] == "no effect found"  # differences of 0 +- 0.8: inside +-3


def test_holm_runs_over_the_family_and_each_detectable_effect_is_stated_at_its_own_holm_level():
    weak = Interaction("dyt", "rmsnorm", 36)
    muon = read("muon", {"derf": 10.0, "dyt": 1.5}, [GROWS, weak])
    adamw = read("adamw", {"derf": 2.0, "dyt": 1.0}, wobble=-0.3)
    frame = interaction_frame(muon, adamw, "muon", "adamw").sort_values("p")
    small, large = frame["p"].tolist()
    assert frame["p_holm"].tolist() == pytest.approx([min(1.0, 2 * small), max(min(1.0, 2 * small), large)])
    assert frame["level"].tolist() == pytest.approx([ALPHA / 2, ALPHA])
    for row in frame.itertuples():
        assert row.detectable == pytest.approx(detectable_effect(row.n, row.sd, row.level))
    # a third folder joins the family: every p of the comparison is adjusted together
    lines = interaction_lines([adamw, muon, read("muon2", {"derf": 10.0, "dyt": 1.5}, [GROWS, weak])],
                              ["adamw", "muon", "muon2"])
    table = [line for line in "\n".join(lines).splitlines() if line.startswith("| ")][1:]
    assert len(table) == 2 * 2 * 2  # two declaring folders, each against both others, two interactions each


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


def test_seeds_pair_by_number_on_one_device_class_and_each_left_out_seed_counts_once():
    # seed 100: both rows on the GPU here, on the CPU there; seed 102: mixed within both folders; 105: mixed here,
    # and absent there (no partner either way: not counted as left out for its devices)
    here_devices = {("derf", 100): "NVIDIA H200", ("rmsnorm", 100): "NVIDIA H200", ("derf", 102): "NVIDIA H200",
                    ("derf", 105): "NVIDIA H200"}
    muon = read("muon", {"derf": 10.0}, [GROWS], devices=here_devices)
    adamw = read("adamw", {"derf": 2.0}, seeds=[100, 101, 102, 103, 104, 106], wobble=-0.3,
                 devices={("rmsnorm", 102): "NVIDIA H200"})  # 105 missing here, 106 extra
    row = interaction_frame(muon, adamw, "muon", "adamw").iloc[0]
    assert row["seeds"] == [101, 103, 104]  # 105 and 106 have no partner; 100 and 102 differ in device
    assert row["n"] == 3 and row["cross_device"] == 2


def test_selection_cells_never_stand_in_for_report_seeds():
    muon = read("muon", {"derf": 10.0}, [GROWS], role="select")  # chose the lr: not a test of it
    adamw = read("adamw", {"derf": 2.0}, wobble=-0.3, role="select")
    row = interaction_frame(muon, adamw, "muon", "adamw").iloc[0]
    assert row["n"] == 0 and row["verdict"] == NO_PAIRS and row["missing"] == ["muon", "adamw"]
    one = interaction_frame(read("muon", {"derf": 10.0}, [GROWS], seeds=[100]), adamw, "muon", "adamw").iloc[0]
    assert one["verdict"] == NO_PAIRS  # one seed: nothing is tested, and no interval is printed


def test_the_section_names_both_sides_and_is_absent_when_no_suite_declares_one():
    muon = read("muon", {"derf": 10.0}, [GROWS])
    adamw = read("adamw", {"derf": 2.0}, wobble=-0.3)
    text = "\n".join(interaction_lines([adamw, muon], ["adamw", "muon"]))
    assert "| supported" in text
    assert "derf's gap to rmsnorm (rmsnorm minus derf) is larger under muon than under adamw" in text
    assert interaction_lines([adamw, read("other", {"derf": 2.0})], ["a", "b"]) == []
    missing = "\n".join(interaction_lines([read("adamw", {"dyt": 1.0}), muon], ["adamw", "muon"]))
    assert "no report seeds of both rows in adamw" in missing and NO_PAIRS in missing


def test_a_folder_with_another_row_key_reads_each_of_its_groups():
    def two_warmups(folder: SimpleNamespace) -> SimpleNamespace:
        a = folder.analysis
        cells = pd.concat([a.cells.assign(warmup_epochs=w) for w in (2, 5)], ignore_index=True)
        selected = pd.concat([a.selected.assign(warmup_epochs=w) for w in (2, 5)], ignore_index=True)
        folder.analysis = SimpleNamespace(cells=cells, selected=selected, keys=["layer", "warmup_epochs", "depth"])
        return folder

    muon = two_warmups(read("muon", {"derf": 10.0}, [GROWS]))
    frame = interaction_frame(muon, two_warmups(read("adamw", {"derf": 2.0}, wobble=-0.3)), "muon", "adamw")
    assert [c.rsplit("(", 1)[-1] for c in frame["claim"]] == ["warmup_epochs 2)", "warmup_epochs 5)"]
    assert frame["n"].tolist() == [6, 6] and set(frame["verdict"]) == {"supported"}
