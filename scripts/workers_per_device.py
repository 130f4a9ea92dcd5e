"""Cells per hour against the number of worker processes sharing one device.

Small cells (digits, CIFAR at dim 192) leave a GPU, or a multi-core CPU, partly idle; several workers on one device
can raise throughput until they contend for it. This runs a suite once per worker count, each into a fresh output
folder, and prints cells/hour, so that the default (`normbench.sweep.launch.default_workers`) is picked from a number.

    python scripts/workers_per_device.py suites/smoke.yaml --workers 1 2          # CPU
    python scripts/workers_per_device.py suites/depth36.yaml --device cuda --workers 1 2 4

On a GPU machine `--workers K` runs K workers round-robin over the visible GPUs, so on one GPU it is K per GPU.
Writes results/workers-per-device-<suite>-<device>.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_once(suite: Path, workers: int, device: str, out: Path) -> float:
    """Wall seconds of `normbench run SUITE --workers N` into `out`."""
    cmd = [sys.executable, "-m", "normbench", "run", str(suite), "--out", str(out), "--device", device,
           "--workers", str(workers), "--quiet"]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    env.pop("MLFLOW_TRACKING_URI", None)  # each trial logs into its own throwaway folder
    started = time.perf_counter()
    subprocess.run(cmd, check=True, env=env)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", type=Path)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=REPO / "results")
    args = parser.parse_args()
    if min(args.workers) < 1:
        parser.error(f"--workers: every count must be at least 1, got {args.workers}")

    from normbench.contracts.suite import load_suite
    from normbench.errors import NormbenchError

    try:
        cells = len(load_suite(args.suite).cells())
    except NormbenchError as e:
        print(f"workers_per_device: error: {e}", file=sys.stderr)
        return e.exit_code
    rows = []
    for workers in args.workers:
        with tempfile.TemporaryDirectory() as tmp:
            seconds = run_once(args.suite, workers, args.device, Path(tmp) / "out")
        rows.append((workers, seconds, cells / seconds * 3600))
        print(f"{workers} worker(s): {cells} cells in {seconds:.1f} s = {rows[-1][2]:.0f} cells/h", flush=True)

    base = rows[0][2]
    lines = [f"# Workers per device: {args.suite.name}, {cells} cells, device {args.device}", "",
             f"Machine: {platform.platform()}, {os.cpu_count()} CPUs. "
             f"Command: `python scripts/workers_per_device.py {args.suite} --device {args.device} "
             f"--workers {' '.join(map(str, args.workers))}`", "",
             "| workers | wall s | cells/h | vs first |", "|--:|--:|--:|--:|"]
    lines += [f"| {w} | {s:.1f} | {c:.0f} | {c / base:.2f}x |" for w, s, c in rows]
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"workers-per-device-{args.suite.stem}-{args.device.replace(':', '')}.md"
    path.write_text("\n".join(lines) + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
