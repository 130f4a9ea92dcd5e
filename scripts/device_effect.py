"""How large is the device effect? The same cells (same recipe, axes and seed: the same cell id) trained on two
devices, paired cell by cell, beside the seed-to-seed spread of the same rows.

    python scripts/device_effect.py results/depth-sweep-digits-modern results/device-effect-digits \
        --out results/device-effect-digits.md

Reads each folder's finished cells from its ledger (report/folder.py), keeps the cell ids both hold on different
device classes (contracts/devices.py), and writes: per cell, each device's val and test top-1 and their difference;
the mean difference with its 95% t interval and paired p (is there a systematic shift?), the mean absolute
difference, and the sd of the differences against what a change of seed gives a difference of two cells: √2 times
the sd across seeds of the same (layer, lr) on one device (is a device change more than a change of seed?).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from normbench.contracts.devices import device_class
from normbench.report.folder import read_folder
from normbench.report.stats import paired_p, t_interval
from normbench.report.tables import markdown_table

METRICS = ("val_top1", "test_top1")


def paired_cells(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """The cells both frames finished on different device classes, one row per cell with each side's metrics."""
    keep = ["cell_id", "layer", "lr", "seed", "device", *METRICS]
    both = a[keep].merge(b[keep], on=["cell_id", "layer", "lr", "seed"], suffixes=("_a", "_b"))
    other = both["device_a"].map(device_class) != both["device_b"].map(device_class)
    return both[other].sort_values(["layer", "lr", "seed"]).reset_index(drop=True)


def seed_spread(cells: pd.DataFrame, metric: str) -> float:
    """The pooled sd across seeds within each (layer, lr) of one device's selection cells."""
    groups = [g[metric].dropna() for _, g in cells.groupby(["layer", "lr", "device"]) if g[metric].notna().sum() > 1]
    dof = sum(len(g) - 1 for g in groups)
    return math.sqrt(sum(((g - g.mean()) ** 2).sum() for g in groups) / dof) if dof else math.nan


def summary(pairs: pd.DataFrame, spread: dict[str, float]) -> pd.DataFrame:
    rows = []
    for metric in METRICS:
        diff = (pairs[f"{metric}_b"] - pairs[f"{metric}_a"]).to_numpy()
        mean, low, high = t_interval(diff)
        rows.append({"metric": metric, "cells": len(diff), "mean difference (b - a)": f"{mean:+.2f}",
                     "95% CI": f"[{low:.2f}, {high:.2f}]", "paired p": f"{paired_p(diff):.3f}",
                     "mean |difference|": f"{abs(diff).mean():.2f}",
                     # the typical cell, apart from the few where one device's run fell to chance and the other's not
                     "median |difference|": f"{pd.Series(abs(diff)).median():.2f}",
                     "largest |difference|": f"{abs(diff).max():.2f}",
                     "sd of differences": f"{diff.std(ddof=1):.2f}",
                     "seed-to-seed sd (same row and lr, one device)": f"{spread[metric]:.2f}",
                     # two cells that differ by a seed differ by sd sqrt(2) sigma: what a device change that acts
                     # like a fresh seed would give the differences
                     "sd of a difference of two seeds (√2 × that)": f"{math.sqrt(2) * spread[metric]:.2f}"})
    return pd.DataFrame(rows)


def as_text(frame: pd.DataFrame) -> pd.DataFrame:
    """The per-cell table as printed: an lr as `:g` (0.00316, not 0.0), accuracies and differences to 2 decimals."""
    return frame.apply(lambda col: col.map(lambda v: f"{v:g}") if col.name == "lr" else
                       col.map(lambda v: f"{v:.2f}") if pd.api.types.is_float_dtype(col) else col)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="an output folder (e.g. the modern folder, whose cells a GPU trained)")
    parser.add_argument("b", type=Path, help="an output folder with the same cells trained on another device")
    parser.add_argument("--out", type=Path, help="write the markdown here (default: print it)")
    args = parser.parse_args(argv)
    a, b = read_folder(args.a).cells, read_folder(args.b).cells
    pairs = paired_cells(a, b)
    if pairs.empty:
        raise SystemExit(f"device_effect.py: {args.a} and {args.b} share no cell trained on two device classes")
    selection = pd.concat([a[a["role"] == "select"], b[b["role"] == "select"]])
    spread = {m: seed_spread(selection, m) for m in METRICS}
    table = pairs.assign(**{f"{m} difference": pairs[f"{m}_b"] - pairs[f"{m}_a"] for m in METRICS})
    shown = table.rename(columns={"device_a": f"device ({args.a.name})", "device_b": f"device ({args.b.name})"})
    text = "\n".join([
        f"# The device effect: {len(pairs)} cells trained on two devices", "",
        f"`python scripts/device_effect.py {args.a} {args.b}`: a = `{args.a}`, b = `{args.b}`; each cell has the "
        "same recipe, axes and seed on both (its cell id); val and test top-1 (%) at the final epoch.", "",
        markdown_table(summary(pairs, spread)), "",
        markdown_table(as_text(shown.drop(columns=["cell_id"]))), ""])
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
