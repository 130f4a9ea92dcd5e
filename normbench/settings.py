"""Every `NORMBENCH_*` environment variable, read and checked in one place.

`Settings.from_environ` parses them all; `check()` runs at the start of every command, before any folder or ledger is
made, so a bad value is one line naming the variable, the value and what is accepted (exit 2), never a traceback
after the output folder exists. The modules that use a setting read it through `current()`, which parses the same
way (cheap), so a test or a worker that changes the environment sees the change.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normbench.errors import NormbenchError


class SettingsError(NormbenchError):
    """A NORMBENCH_* variable with a value normbench cannot use."""


def _seconds(zero_ok: bool) -> Callable[[str, str], float]:
    def parse(name: str, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and (value >= 0 if zero_ok else value > 0)):
            raise ValueError(f"expected seconds, {'0 or more' if zero_ok else 'more than 0'}")
        return value
    return parse


def _whole(minimum: int) -> Callable[[str, str], int]:
    def parse(name: str, text: str) -> int:
        if not text.strip().isdigit() or int(text) < minimum:
            raise ValueError(f"expected a whole number, {minimum} or more")
        return int(text)
    return parse


def _switch(name: str, text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError("expected 0 (off) or 1 (on)")
    return text == "1"


def _host(name: str, text: str) -> str:
    # the host is written into every claim and matched against it later: a newline or tab (a stray `$(hostname)`
    # line, a pasted value) would make a name no other process spells the same way
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ValueError("expected one line with no control characters (a newline, a tab)")
    return text


def _modules(name: str, text: str) -> tuple[str, ...]:
    return tuple(m.strip() for m in text.split(",") if m.strip())


# name -> (field, parser, default, what it means): the one table of every setting
SPEC: dict[str, tuple[str, Callable[[str, str], Any], Any, str]] = {
    "NORMBENCH_HOST": ("host", _host, None, "this machine's name in the ledger (containers sharing a hostname)"),
    "NORMBENCH_HEARTBEAT_INTERVAL": ("heartbeat_interval", _whole(1), 10,
                                     "seconds between a worker's heartbeats on a shared ledger"),
    "NORMBENCH_HEARTBEAT_GRACE": ("heartbeat_grace", _whole(1), 60,
                                  "seconds of silence after which a worker is taken for lost"),
    "NORMBENCH_RETRY_SECONDS": ("retry_seconds", _seconds(zero_ok=True), 300.0,
                                "how long an unreachable ledger or server is waited for; 0 waits not at all"),
    "NORMBENCH_POLL_SECONDS": ("poll_seconds", _seconds(zero_ok=False), 2.0,
                               "how often an idle worker polls the ledger"),
    "NORMBENCH_MAX_ATTEMPTS": ("max_attempts", _whole(1), 3,
                               "attempts a cell may lose its worker before it is failed for good"),
    "NORMBENCH_JOURNAL_LOCK_GRACE": ("journal_lock_grace", _seconds(zero_ok=False), 30.0,
                                     "seconds a journal lock may stay unchanged before it is taken over"),
    "NORMBENCH_FASTPATH": ("fastpath", _switch, True, "the fused training fast path"),
    "NORMBENCH_CACHE": ("cache", lambda name, text: Path(text), None, "where computed data ceilings are cached"),
    "NORMBENCH_LAYER_MODULES": ("layer_modules", _modules, (), "modules that register layers when imported"),
}


@dataclass(frozen=True)
class Settings:
    host: str
    heartbeat_interval: int
    heartbeat_grace: int
    retry_seconds: float
    poll_seconds: float
    max_attempts: int
    journal_lock_grace: float
    fastpath: bool
    cache: Path
    layer_modules: tuple[str, ...]

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        """Parse every NORMBENCH_* variable of `environ`; an empty value means the default. Raises SettingsError
        for the first bad one."""
        values: dict[str, Any] = {}
        for name, (field, parse, default, meaning) in SPEC.items():
            text = environ.get(name, "").strip()
            if not text:
                values[field] = default
                continue
            try:
                values[field] = parse(name, text)
            except ValueError as e:
                shown = f" {default:g}" if isinstance(default, (int, float)) and not isinstance(default, bool) else ""
                raise SettingsError(f"{name}={text!r}: {e} ({meaning}); unset it for the default{shown}") from None
        values["host"] = values["host"] or socket.gethostname()
        values["cache"] = values["cache"] or Path.home() / ".cache" / "normbench"
        return cls(**values)


def current() -> Settings:
    """The settings as the environment says now (checked: a bad value raises SettingsError)."""
    return Settings.from_environ(os.environ)


def check() -> Settings:
    """Run at a command's start, before anything is created: the values parse, and a cache folder the user set
    can be created (its nearest existing folder is a writable folder), checked here and not when it is first
    written, after the suite has trained."""
    values = current()
    if os.environ.get("NORMBENCH_CACHE", "").strip():
        why = _cannot_hold_files(values.cache)
        if why:
            raise SettingsError(f"NORMBENCH_CACHE={os.environ['NORMBENCH_CACHE'].strip()!r}: {why} "
                                f"({SPEC['NORMBENCH_CACHE'][3]}); point it at a folder you can write, or unset it "
                                "for ~/.cache/normbench")
    return values


def _cannot_hold_files(folder: Path) -> str | None:
    """Why `folder` cannot be created and written (without creating anything), or None."""
    for existing in (folder, *folder.parents):
        if existing.exists():
            if not existing.is_dir():
                return f"{existing} is a file, not a folder"
            if not os.access(existing, os.W_OK | os.X_OK):
                return f"{existing} is not writable"
            return None
    return None
