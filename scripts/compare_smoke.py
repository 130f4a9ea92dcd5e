"""Compare a fresh smoke run with the committed one, cell by cell: `python scripts/compare_smoke.py NEW COMMITTED`.

Prints one line: whether every committed cell ran and got the same val and test top-1 (to 0.01 point). Exits 1 when
a folder has no results.csv or the new run lacks a committed cell; a numeric difference alone exits 0, as another
CPU or torch build rounds differently (the committed leaderboard names the machine and versions that made it).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

METRICS = ("val_top1", "test_top1")
TOLERANCE = 0.01  # points


def compare(new: Path, committed: Path) -> tuple[int, str]:
    frames = {}
    for folder in (new, committed):
        csv = folder / "results.csv"
        if not csv.is_file():
            return 1, f"compare_smoke: {csv}: not found; run `bash scripts/run-smoke.sh` (it writes {new}/)"
        frames[folder] = pd.read_csv(csv).set_index("cell_id")
    fresh, kept = frames[new], frames[committed]
    missing = sorted(set(kept.index) - set(fresh.index))
    if missing:
        return 1, (f"compare_smoke: {new} lacks {len(missing)} of the {len(kept)} cells in {committed} (e.g. "
                   f"{missing[0]}); run the same command again to finish them")
    a, b = fresh.loc[kept.index, list(METRICS)], kept[list(METRICS)]
    delta = (a - b).abs()
    same = (delta <= TOLERANCE) | (a.isna() & b.isna())  # a diverged cell has no val or test top-1 in either
    differ = same[~same.all(axis=1)]
    if differ.empty:
        return 0, (f"{new} matches the committed {committed}: all {len(kept)} cells, same val and test top-1 "
                   f"(within {TOLERANCE} point)")
    head = (f"{new} differs from the committed {committed} in {len(differ)} of {len(kept)} cells (largest "
            f"|difference|: {delta.max().max():.2f} points of val or test top-1)")
    if "torch_threads" in fresh and "torch_threads" in kept:
        mine, theirs = (_threads(f.loc[differ.index, "torch_threads"]) for f in (fresh, kept))
        if mine != theirs:  # CPU float sums depend on the thread count (train/cpu_share.py shares the cores)
            return 0, (f"{head}; they trained on {mine} torch thread(s) where the committed cells used {theirs}: "
                       f"`OMP_NUM_THREADS={theirs}` into an empty folder repeats them")
    return 0, (f"{head}; expected on another CPU or torch build: {committed}/leaderboard.md names the machine and "
               "versions that made it")


def _threads(values: pd.Series) -> str:
    """The distinct thread counts of cells' `torch_threads` ("2", "2/1"), e.g. "1" or "1, 2"."""
    counts = {t for value in values.dropna().astype(str) for t in value.split("/") if t}
    return ", ".join(sorted(counts, key=int)) or "unrecorded"


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python scripts/compare_smoke.py NEW_FOLDER COMMITTED_FOLDER")
    code, line = compare(Path(sys.argv[1]), Path(sys.argv[2]))
    print(line, file=sys.stderr if code else sys.stdout)
    sys.exit(code)
