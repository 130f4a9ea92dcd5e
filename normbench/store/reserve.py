"""Room kept on the output folder's disk for stopping cleanly when it fills up mid-run.

A full disk stops a run (exit 2, naming the path), but stopping still writes a little (re-queueing the cell in
flight, closing its MLflow run): `keep(out)` writes RESERVE_BYTES to `OUT/.locks/reserve` (never published) as a
run starts; `free(out)`, where a write finds the disk full, deletes it so those last writes fit.
"""

from __future__ import annotations

import os
from pathlib import Path

from normbench.contracts.names import OutputFolder

RESERVE = f"{OutputFolder.LOCKS}/reserve"
RESERVE_BYTES = 1 << 20  # a ledger record is ~1 KB; closing an MLflow run writes a SQLite journal of a few pages


def keep(folder: Path) -> None:
    """Make sure `folder/.locks/reserve` holds RESERVE_BYTES (real bytes: a sparse file would free nothing)."""
    path = Path(folder) / RESERVE
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
    try:
        (Path(folder) / RESERVE).unlink()
    except OSError:
        return False
    return True
