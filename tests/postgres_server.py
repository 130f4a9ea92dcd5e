"""Pytest fixtures that start a throwaway PostgreSQL server on loopback.

Use from a conftest.py with ``pytest_plugins = ["tests.postgres_server"]`` (or import
both ``postgres_url`` and ``fresh_postgres_url``: the second depends on the first).

* ``postgres_url`` (session): URL of database ``normbench_test`` on a server started
  for this test session and stopped (data deleted) at its end.
* ``fresh_postgres_url`` (function): URL of a new, uniquely named database on that
  server, dropped after the test, so tests never see each other's Optuna studies.
* ``fresh_database(postgres_url)``: context manager behind ``fresh_postgres_url``, for
  a test that needs more than one database.

We start our own server rather than use a system one so the tests need no setup,
cannot touch real data, and run the same locally and in CI. Only the binaries are
needed: ``bash scripts/install-postgres.sh`` installs them.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest
from sqlalchemy.engine import make_url

INSTALL_HINT = (
    "PostgreSQL server binaries (initdb, pg_ctl) not found; install them with `bash scripts/install-postgres.sh`"
)
USER = "normbench"
DBNAME = "normbench_test"
START_TIMEOUT_S = 30


def _unavailable(reason: str) -> None:
    # CI sets NORMBENCH_REQUIRE_POSTGRES=1 so a missing server fails loudly instead of
    # silently skipping every storage test.
    if os.environ.get("NORMBENCH_REQUIRE_POSTGRES") == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def _find_binaries() -> tuple[str, str] | None:
    """(initdb, pg_ctl): Debian keeps them off PATH, so try its versioned dirs first."""

    def version(bindir: str) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", bindir.split("/")[-2]))

    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True):
        initdb, pg_ctl = os.path.join(bindir, "initdb"), os.path.join(bindir, "pg_ctl")
        if os.access(initdb, os.X_OK) and os.access(pg_ctl, os.X_OK):
            return initdb, pg_ctl
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    return (initdb, pg_ctl) if initdb and pg_ctl else None


def _free_port() -> int:
    # The kernel picks an unused port; there is a tiny window in which another process
    # could take it before the server binds, which is why the start loop in postgres_url retries.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _connect(port: int, password: str, dbname: str = "postgres"):
    return psycopg2.connect(host="127.0.0.1", port=port, user=USER, password=password, dbname=dbname, connect_timeout=5)


def _url(port: int, password: str, dbname: str) -> str:
    return f"postgresql+psycopg2://{USER}:{password}@127.0.0.1:{port}/{dbname}"


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    binaries = _find_binaries()
    if binaries is None:
        _unavailable(INSTALL_HINT)
    initdb, pg_ctl = binaries

    # PostgreSQL refuses to run as root, so as root we run it as the `postgres` system
    # user that the Debian package creates, and hand it the tmp dir.
    as_user: list[str] = []
    owner = None
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            _unavailable(f"running as root but there is no `postgres` system user to run the server as; {INSTALL_HINT}")
        as_user = ["runuser", "-u", "postgres", "--"]

    tmp = tempfile.mkdtemp(prefix="normbench-pg-")
    datadir, logfile = os.path.join(tmp, "data"), os.path.join(tmp, "server.log")
    password = secrets.token_hex(16)

    def run(*cmd: str) -> None:
        # cwd=tmp: the `postgres` user may not be allowed into the test's cwd.
        result = subprocess.run([*as_user, *cmd], cwd=tmp, capture_output=True, text=True)
        if result.returncode != 0:
            log = Path(logfile).read_text()[-3000:] if os.path.exists(logfile) else ""
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stdout}{result.stderr}{log}")

    started = False
    try:
        pwfile = os.path.join(tmp, "pwfile")
        with open(pwfile, "w") as f:
            f.write(password)
        if owner is not None:
            for path in (tmp, pwfile):
                os.chown(path, owner.pw_uid, owner.pw_gid)

        # Password auth over TCP (any local user could otherwise connect); trust only on
        # the private unix socket in tmp. --no-locale avoids depending on installed locales.
        auth = ["--auth-host=scram-sha-256", "--auth-local=trust", f"--pwfile={pwfile}"]
        run(initdb, "-D", datadir, "-U", USER, *auth, "--no-locale", "--encoding=UTF8")
        with open(os.path.join(datadir, "postgresql.conf"), "a") as f:
            f.write(
                "\nlisten_addresses = '127.0.0.1'\n"  # loopback only
                f"unix_socket_directories = '{tmp}'\n"  # never clash with a system server's socket
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"  # throwaway data: speed first
                "max_connections = 200\n"  # ~10 worker processes, each with a small SQLAlchemy pool
            )

        for attempt in range(3):  # retry only for the port race described in _free_port
            port = _free_port()
            try:
                run(pg_ctl, "start", "-w", "-t", str(START_TIMEOUT_S), "-D", datadir, "-l", logfile, "-o", f"-p {port}")
                started = True
                break
            except RuntimeError:
                if attempt == 2:
                    raise

        # pg_ctl -w already waited for startup; still confirm a real TCP login works.
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                conn = _connect(port, password)
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        conn.autocommit = True  # CREATE DATABASE cannot run inside a transaction
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {DBNAME}")
        conn.close()

        yield _url(port, password, DBNAME)
    finally:
        if started:
            subprocess.run([*as_user, pg_ctl, "stop", "-w", "-m", "fast", "-D", datadir], cwd=tmp, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def fresh_database(postgres_url: str) -> Iterator[str]:
    """Create a new, uniquely named database on the server of ``postgres_url``; yield its URL; drop it."""
    url = make_url(postgres_url)
    dbname = f"normbench_{uuid.uuid4().hex[:12]}"
    conn = _connect(url.port, url.password)
    conn.autocommit = True  # CREATE/DROP DATABASE cannot run inside a transaction
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {dbname}")
        yield url.set(database=dbname).render_as_string(hide_password=False)
        # Drop it to keep the tmp dir small over a long session; FORCE closes any
        # connections a test's SQLAlchemy pool or worker process left open.
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")
    finally:
        conn.close()


@pytest.fixture
def fresh_postgres_url(postgres_url: str) -> Iterator[str]:
    with fresh_database(postgres_url) as url:
        yield url
