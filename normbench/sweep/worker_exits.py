"""How a local worker died, as the parent of `normbench run --workers K` sees it, kept with the cell's attempts.

An OOM kill, segfault or `os._exit` leaves no traceback or ledger entry: only the parent sees the exit code and the
last stderr lines. Stderr goes to an unlinked temporary file, not a pipe (a worker must outlive a parent killed with
-9, not die of a broken pipe); a thread forwards it and keeps the tail. A worker that died holding a cell gets its
exit noted (store/attempts.py `note_worker_exit`) and a replacement, so retries never run in the parent, which must
live to name the cells failed for good; one replacement per lost attempt, so NORMBENCH_MAX_ATTEMPTS bounds them."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from normbench.store.attempts import note_worker_exit
from normbench.store.ledger import UNFINISHED, Ledger, worker_host

STDERR_LINES = 20  # kept per worker: enough for a CUDA or OOM message, short enough for the ledger
LINE_CHARS = 500
PUMP_SECONDS = 0.5
GRACEFUL = (130, 143)  # Ctrl-C, SIGTERM or SIGHUP: the worker gave its cell back


class WorkerProcess(subprocess.Popen):
    """A `normbench worker` whose stderr the parent forwards and keeps the last lines of."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.env = env
        self._log = tempfile.TemporaryFile()  # unlinked: nothing is left behind, whoever dies first
        super().__init__(command, env=env, stderr=self._log)
        self.tail: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._pump = threading.Thread(target=self._forward, daemon=True)
        self._pump.start()

    def _forward(self) -> None:
        done, pos, partial = False, 0, b""
        while not done:
            done = self.poll() is not None  # read once more after the exit: the last lines matter most
            while chunk := os.pread(self._log.fileno(), 1 << 16, pos):
                pos += len(chunk)
                text = chunk.decode(errors="replace")
                sys.stderr.write(text)
                sys.stderr.flush()
                *lines, last = (partial + chunk).split(b"\n")
                partial = last
                self.tail.extend(line.decode(errors="replace")[-LINE_CHARS:] for line in lines if line.strip())
            if not done:
                time.sleep(PUMP_SECONDS)
        if partial.strip():
            self.tail.append(partial.decode(errors="replace")[-LINE_CHARS:])
        self._log.close()

    def wait(self, timeout: float | None = None) -> int:
        code = super().wait(timeout)
        self._pump.join(timeout=5)  # its last lines reach the parent's stderr before the parent goes on
        return code

    def seen(self) -> dict[str, Any]:
        """How it ended, for the ledger: exit (words), exit_code, stderr (its last lines) and node."""
        code = self.wait()
        return {"exit": exit_words(code), "exit_code": code, "stderr": "\n".join(self.tail), "node": worker_host()}

    def respawn(self) -> WorkerProcess:
        return WorkerProcess(list(self.args), self.env)  # type: ignore[arg-type]


def exit_words(code: int) -> str:
    """'killed by SIGKILL (signal 9)', 'exit code 137 (128 + SIGKILL: ...)' or 'exit code 1'."""
    if code < 0:
        return f"killed by {_signal_name(-code)} (signal {-code})"
    if code > 128 and _signal_name(code - 128) != str(code - 128):
        return f"exit code {code} (128 + {_signal_name(code - 128)}: killed by it, or exited with that code)"
    return f"exit code {code}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def died(proc: subprocess.Popen) -> bool:
    """Killed (a signal, or 128 + one as a shell or os._exit reports it), not ended on its own or stopped by us."""
    code = proc.returncode
    return code is not None and (code < 0 or code > 128) and code not in GRACEFUL


def after_exit(proc: WorkerProcess, ledger: Ledger, study_names: list[str],
               peers_alive: bool = False) -> WorkerProcess | None:
    """If it died holding a cell: note how on that study and, while cells remain or a peer still works (it may queue
    the next stage: the dead worker's cell, failed for good, may have been the last of this one), return a started
    replacement (one with nothing to do exits at once)."""
    if not died(proc):
        return None
    present = set(ledger.study_names())
    studies = [ledger.study(name) for name in study_names if name in present]
    host = worker_host()
    held = next((s for s in studies for t in ledger.trials(s)
                 if t.user_attrs.get("worker_pid") == proc.pid and t.user_attrs.get("worker_host") == host), None)
    if held is None:  # died before claiming: nothing of a cell's to note, and no reason to think another would live
        return None
    ledger.call(note_worker_exit, held, host, proc.pid, proc.seen())
    if not peers_alive and not any(ledger.trials(s, UNFINISHED) for s in studies):
        return None
    return proc.respawn()

