"""What every fault test checks afterwards, and how it starts, stops and signals normbench processes."""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pandas as pd
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from normbench.store.ledger import Ledger
from tests.conftest import REPO

# Short heartbeats so a lost or stalled worker is noticed in seconds, not a minute.
FAST_HEARTBEAT = {"NORMBENCH_HEARTBEAT_INTERVAL": "1", "NORMBENCH_HEARTBEAT_GRACE": "6"}


# mount(2) flags (linux/mount.h) and umount2's MNT_DETACH: a tmpfs is mounted through the system call, so a machine
# without the `mount` binary (a slim container) runs the tests that need one all the same
_MS_RDONLY, _MS_REMOUNT, _MNT_DETACH = 1, 32, 2


def _libc_call(name: str, *args) -> str | None:
    libc = ctypes.CDLL(None, use_errno=True)
    encoded = [a.encode() if isinstance(a, str) else a for a in args]
    if getattr(libc, name)(*encoded) == 0:
        return None
    code = ctypes.get_errno()
    return f"{name}(2) failed: {errno.errorcode.get(code, code)} ({os.strerror(code)})"


def mount_tmpfs(path: Path, size: str) -> str | None:
    """Mount a tmpfs of `size` (e.g. "4m") at `path`, made if missing. Returns None once mounted, else why it could
    not be (for a skip reason: -ra prints it), e.g. not root, or a container without CAP_SYS_ADMIN."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return f"mounting a tmpfs needs root; this test runs as uid {os.geteuid()} (CI runs it as root)"
    why = _libc_call("mount", "tmpfs", str(path), "tmpfs", ctypes.c_ulong(0), f"size={size}")
    return None if why is None else f"{why} mounting a tmpfs at {path} as root (a container without CAP_SYS_ADMIN?)"


def remount_read_only(path: Path, size: str) -> None:
    why = _libc_call("mount", "tmpfs", str(path), "tmpfs", ctypes.c_ulong(_MS_REMOUNT | _MS_RDONLY), f"size={size}")
    assert why is None, why


def unmount(path: Path) -> None:
    """Detach the mount at `path` (lazily, as `umount -l`: a file still open in it does not keep it)."""
    _libc_call("umount2", str(path), ctypes.c_int(_MNT_DETACH))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def as_from_a_terminal() -> None:
    """A Popen `preexec_fn`: SIGINT and SIGHUP back to their defaults. A test run started in the background (`cmd &`,
    nohup) hands its children SIGINT (and, under nohup, SIGHUP) ignored, and Python then keeps them ignored, so a
    Ctrl-C or hang-up a test sends would be lost."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def normbench(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`python -m normbench ARGS` with one thread (tiny models; a busy 2-core machine), stderr captured, and SIGINT
    as a terminal's job has it."""
    return subprocess.Popen([sys.executable, "-m", "normbench", *map(str, args)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, preexec_fn=as_from_a_terminal)


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    """Wait for `proc`; returns (exit code, stderr) after checking stderr has no Python traceback."""
    _, err = proc.communicate(timeout=timeout)
    assert "Traceback" not in err, err
    return proc.returncode, err


def trials(out: Path, suite: str, storage: str | None = None) -> list:
    return Ledger(storage, out).study(f"run:{suite}").get_trials(deepcopy=False)


def wait_for(predicate, timeout: float = 120, step: float = 0.2, what: str = "the condition",
             alive: subprocess.Popen | None = None) -> None:
    """Poll `predicate` until true; fails after `timeout` s, or at once (with its exit code and stderr) when the
    process `alive` it waits on has ended first (it finished or died before the moment the test needs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:  # the ledger or study does not exist yet
            pass
        if alive is not None and alive.poll() is not None:
            raise AssertionError(f"the process ended (exit {alive.returncode}) before {what}: "
                                 f"{alive.stderr.read() if alive.stderr else ''}")
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}")


def stop_when(proc: subprocess.Popen, predicate, timeout: float = 120, step: float = 0.05,
              what: str = "the condition") -> None:
    """Freeze `proc` (SIGSTOP) the moment `predicate` holds, checked again once it is frozen: what the test saw stays
    so (a cell in flight stays in flight) for as long as the test needs, however fast the process would have moved
    on, so a cell need not be long to be caught mid-way. The caller thaws it (SIGCONT) or kills it. Fails after
    `timeout` s, or at once when the process ends first."""
    deadline = time.monotonic() + timeout
    while True:
        wait_for(predicate, timeout=deadline - time.monotonic(), step=step, what=what, alive=proc)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            if predicate():
                return
        except Exception:  # read mid-write: look again
            pass
        os.kill(proc.pid, signal.SIGCONT)  # it moved on between the look and the stop


def running(out: Path, suite: str, storage: str | None = None) -> bool:
    return any(t.state == TrialState.RUNNING for t in trials(out, suite, storage))


def assert_invariants(out: Path, suite: str, cells: list[str], *, storage: str | None = None,
                      tracking_uri: str | None = None, tracked: list[str] | None = None) -> None:
    """Every cell exactly once COMPLETE in the ledger, once in results.csv, once FINISHED with status ok in MLflow;
    no trial and no run left RUNNING; no finished run claims `status=ok` without being FINISHED. `tracked` (default:
    `cells`) are the cells the MLflow store must hold (a store deleted mid-run took the earlier cells' runs)."""
    tracked = cells if tracked is None else tracked
    ts = trials(out, suite, storage)
    complete = Counter(t.user_attrs["cell_id"] for t in ts if t.state == TrialState.COMPLETE)
    assert complete == Counter(cells), complete
    assert not [t for t in ts if t.state == TrialState.RUNNING]
    csv = pd.read_csv(out / "results.csv")
    assert Counter(csv["cell_id"]) == Counter(cells), csv["cell_id"].tolist()
    client = MlflowClient(tracking_uri or f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name(suite)
    runs = [r for r in client.search_runs([exp.experiment_id], max_results=1000) if r.data.tags.get("kind") !=
            "leaderboard"]
    ok = Counter(r.data.tags.get("cell_id") for r in runs if r.info.status == "FINISHED")
    assert ok == Counter(tracked), ok
    assert all(r.data.tags.get("status") == "ok" for r in runs if r.info.status == "FINISHED")
    assert not [r for r in runs if r.info.status == "RUNNING"]
    assert not [r for r in runs if r.info.status != "FINISHED" and r.data.tags.get("status") == "ok"]
    finished = {(r.data.tags["study"], int(r.data.tags["trial"])) for r in runs if r.info.status == "FINISHED"}
    assert {(f"run:{suite}", t.number) for t in ts if t.state == TrialState.COMPLETE  # each run is its trial's
            and t.user_attrs["cell_id"] in tracked} == finished
