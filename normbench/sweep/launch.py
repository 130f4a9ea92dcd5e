"""Start local `normbench worker` processes (a cluster node's command; one per GPU, else sharing the cores) on one
suite's ledger, and stop them on Ctrl-C or SIGTERM. Watching what they finish is normbench/sweep/watch.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from normbench.contracts.suite import Suite
from normbench.errors import Terminated

LOCAL_WORKER = "NORMBENCH_LOCAL_WORKER"  # set for the workers of `run --workers`: their parent says how to resume


def default_workers(device: str) -> int:
    """One worker per visible GPU on a GPU machine; one on a CPU (which its threads already fill)."""
    if device.startswith("cuda") or device == "auto":
        import torch

        if torch.cuda.is_available() and ":" not in device:
            return torch.cuda.device_count()
    return 1


def visible_gpus(device: str) -> int:
    import torch

    return torch.cuda.device_count() if device in ("auto", "cuda") and torch.cuda.is_available() else 0


def worker_command(suite: Suite, out_dir: Path, *, storage: str | None, device: str, mode: str,
                   checkpoint_dir: Path | None = None, fuse: int | str = "auto",
                   stop_by: float | None = None, select_only: bool = False) -> list[str]:
    """The `normbench worker` command line. Refuses (NormbenchError, before any worker starts) a suite whose layer
    was registered where a worker cannot import it; worker_env hands the importable ones on."""
    from normbench.layers.plugins import worker_modules

    tuned = suite.tune.space.get("layer", {}).get("choices", []) if suite.tune else []
    worker_modules([*suite.layers(), *tuned])
    args = [sys.executable, "-m", "normbench", "worker", str(suite.path), "--out", str(out_dir),
            "--device", device, "--mode", mode, "--quiet", "--fuse", str(fuse),
            *(["--bracket"] if suite.bracket else []), *(["--select-only"] if select_only else [])]
    if checkpoint_dir is not None:
        args += ["--checkpoint-dir", str(checkpoint_dir)]
    if stop_by is not None:  # the parent's limit as a wall-clock time: a worker started later stops as it does
        args += ["--stop-by", repr(stop_by)]
    return [*args, "--storage", storage] if storage else args


def worker_env(index: int, workers: int, device: str, gpus: int) -> dict[str, str]:
    """Worker `index`'s environment: its own GPU, else its share of the cores; and the layers registered here."""
    from normbench.layers.plugins import worker_environ

    env = dict(os.environ)
    env.update(worker_environ(env))
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = str(index % gpus)
    elif device == "cpu" or not gpus:  # share the cores instead of oversubscribing them
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))
    return env


def start_workers(suite: Suite, out_dir: Path, *, storage: str | None, device: str, workers: int,
                  mode: str, checkpoint_dir: Path | None = None, fuse: int | str = "auto",
                  stop_by: float | None = None, select_only: bool = False) -> list[subprocess.Popen]:
    from normbench.sweep.worker_exits import WorkerProcess  # keeps the last stderr lines of a worker that dies

    gpus = visible_gpus(device)
    command = worker_command(suite, out_dir, storage=storage, device=device, mode=mode, checkpoint_dir=checkpoint_dir,
                             fuse=fuse, stop_by=stop_by, select_only=select_only)
    return [WorkerProcess(command, env={**worker_env(i, workers, device, gpus), LOCAL_WORKER: "1"})
            for i in range(workers)]


def stop_workers(procs: list[subprocess.Popen], stop: KeyboardInterrupt) -> None:
    """Ctrl-C reaches every worker (they give their cells back): wait for them a moment. SIGTERM (SLURM,
    Kubernetes) reaches only this process: pass it on at once; each worker gives its cell back on SIGTERM too (and on
    SIGHUP, a hang-up that reached the process group, which ends here the same way)."""
    deadline = time.monotonic() + (0.0 if isinstance(stop, Terminated) else 5.0)
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.terminate()
    for p in procs:
        p.wait()
