"""Attention logits for a folder that trained without telemetry: each row's report cell at its val-selected lr trained
again with `train.telemetry_every` on, its records written beside the ledger (FOLDER/attention-logits.csv), where
`normbench compare` reads them for a folder whose own cells hold none (report/attention_logits.py).

    OMP_NUM_THREADS=1 nice -n 10 python scripts/attention_logits.py results/depth-sweep-digits-modern --seed 100 \
        --layers layernorm rmsnorm dyt derf derf_alpha03 layerscale layernorm+qk_norm peri_ln ngpt hc

Telemetry only observes: each re-run's test top-1 is set beside the ledger's cell of the same recipe, seed and lr
(`ledger test top-1`, `rerun test top-1`) and a difference is printed. The cell the ledger holds matches bit for bit
when it trained on this host and torch build; one trained elsewhere (the lent H200, or another CPU host:
docs/protocol.md, "Devices") differs as the device effect says, and the logits are then this host's. Rows already in
the file are skipped (a row whose selected lr has moved since is trained again): a stopped run resumes by row.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import pandas as pd

from normbench.contracts.selection import REPORTS, ROLE
from normbench.errors import NormbenchError
from normbench.report.attention_logits import QUANTITY, RERUNS
from normbench.report.folder import read_folder
from normbench.train.loop import train_cell

EVERY = 80  # steps between observations: the Muon suite's, so both optimizers are observed at the same steps


def selected_lr(selected: pd.DataFrame, folder: Path, layer: str, depth: int) -> float:
    """The lr `layer` selects at `depth` now; exit 2 naming the rows there are when the folder has no such row."""
    row = selected[(selected["layer"] == layer) & (selected["depth"] == depth)]
    if row.empty:
        print(f"attention_logits.py: {folder} has no row {layer} at depth {depth}; its rows: "
              f"{', '.join(sorted(set(selected['layer'])))}", file=sys.stderr)
        raise SystemExit(2)
    return float(row["lr"].iloc[0])


def rerun(folder: Path, layer: str, depth: int, lr: float, seed: int, every: int) -> pd.DataFrame:
    """The records of `layer`'s report cell `seed` at `lr`, trained again with telemetry every `every`."""
    read = read_folder(folder)
    cells = read.cells
    ledger_cell = cells[(cells["layer"] == layer) & (cells["depth"] == depth) & (cells["lr"] == lr)
                        & (cells["seed"] == seed) & (cells[ROLE] == REPORTS)]
    axes = {"depth": depth, "layer": layer, "lr": lr, "seed": seed}
    config = read.suite.cell(axes).config
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, telemetry_every=every))
    result = train_cell(config, device="cpu")
    before = float(ledger_cell["test_top1"].iloc[0]) if len(ledger_cell) else float("nan")
    device = str(ledger_cell["device"].iloc[0]) if len(ledger_cell) and "device" in ledger_cell else ""
    print(f"{layer}: lr {lr:g}, seed {seed}: test top-1 {result.test_top1:.4f} here, {before:.4f} in the ledger "
          f"({device or 'device unknown'})" + ("" if before == result.test_top1 else "  <- differs"), flush=True)
    records = pd.DataFrame(result.telemetry)
    keep = [c for c in ("step", "block", QUANTITY) if c in records]
    return records[keep].assign(layer=layer, depth=depth, lr=lr, seed=seed, every=every,
                                ledger_test_top1=before, rerun_test_top1=result.test_top1,
                                ledger_device=device, rerun_device=result.device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--layers", nargs="+", required=True)
    parser.add_argument("--depth", type=int, default=36)
    parser.add_argument("--seed", type=int, default=100, help="a report seed of the folder (default 100)")
    parser.add_argument("--every", type=int, default=EVERY)
    args = parser.parse_args()
    path = args.folder / RERUNS
    done = pd.read_csv(path) if path.is_file() else pd.DataFrame()
    try:
        selected = read_folder(args.folder).analysis.selected
    except NormbenchError as error:  # no folder, no suite.yaml, no ledger, no finished cells: say so, exit 2
        print(f"attention_logits.py: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    for layer in args.layers:
        lr = selected_lr(selected, args.folder, layer, args.depth)
        if not done.empty and ((done["layer"] == layer) & (done["depth"] == args.depth) & (done["lr"] == lr)
                               & (done["seed"] == args.seed)).any():
            print(f"{layer}: in {path} already (lr {lr:g})", flush=True)
            continue
        done = pd.concat([done, rerun(args.folder, layer, args.depth, lr, args.seed, args.every)], ignore_index=True)
        done.to_csv(path, index=False)  # after each row: a stopped run keeps what it trained
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
