"""Room kept on the output folder's disk for stopping cleanly when it fills up mid-run.

A full disk stops a run (exit 2, naming the path), but stopping still writes a little (re-queueing the cell in
flight, closing its MLflow run): `keep(out)` writes RESERVE_BYTES to `OUT/.locks/reserve` (never published) as a
run starts; `free(out)`, where a write finds the disk full, deletes it so those last writes fit. Other writers of the
folder (MLflow's logging thread, a checkpoint) may take that room before the cell is given back, so a second
reserve, `OUT/.locks/reserve.last`, is freed only by the give-back itself, just before its last try (`free_last`,
sweep/cell_end.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from normbench.contracts.names import OutputFolder

RESERVE = f"{OutputFolder.LOCKS}/reserve"
LAST = f"{OutputFolder.LOCKS}/reserve.last"  # the give-back's own: nothing else frees it
RESERVE_BYTES = 1 << 20  # a ledger record is ~1 KB; closing an MLflow run writes a SQLite journal of a few pages


def keep(folder: Path) -> None:
    """Make sure `folder/.locks/reserve` and `reserve.last` each hold RESERVE_BYTES (real bytes: a sparse file would
    free nothing)."""
    for name in (RESERVE, LAST):
        _keep(Path(folder) / name)


def _keep(path: Path) -> None:
    try:
        if path.stat().st_size == RESERVE_BYTES:
            return
    except FileNotFoundError:
        pass
    tmp = path.with_name(f"{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(b"\0" * RESERVE_BYTES)
        tmp.replace(path)
    except OSError:  # no room for it: the run goes on without (check_output_folder refused a full disk already)
        tmp.unlink(missing_ok=True)


def free(folder: Path) -> bool:
    """Delete the reserve; True if there was one to free."""
    return _free(Path(folder) / RESERVE)


def free_last(folder: Path) -> bool:
    """Delete the give-back's reserve; True if there was one to free."""
    return _free(Path(folder) / LAST)


def _free(path: Path) -> bool:
    try:
        path.unlink()
    except OSError:
        return False
    return True
