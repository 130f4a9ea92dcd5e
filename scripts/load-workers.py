#!/usr/bin/env python
"""The load normbench's workers put on PostgreSQL and on the MLflow server, against the number of workers K.

Starts a throwaway PostgreSQL (the ledger, and MLflow's backend store) and an `mlflow server` on loopback, then
for each K runs K simulated workers: threads spread over up to --procs processes, each thread with its own Ledger
(its own connection pool, as a separate machine would have) and Tracker, running normbench's real worker loop
(sweep/worker.py: reconcile orphans, claim, heartbeat, log epochs, finish) on no-op cells of --cell-seconds.
Two phases per K, each measured over --seconds once every worker is up:
  busy  the queue never runs dry: every worker claims, logs and finishes cells;
  idle  one cell in flight and the other workers polling, as at the tail of a sweep.
Reported per phase: transactions and statements per second on the ledger database (pg_stat_database,
pg_stat_statements), HTTP requests per second to the MLflow server (its access log; searches apart), p50/p99 of
the claims that got a cell, and the ledger database's connections (pg_stat_activity, the most seen).

    nice -n 5 .venv/bin/python scripts/load-workers.py --workers 1,8,32,64 --seconds 25

Stops every server it started. Figures from a small machine measure normbench and the servers sharing its cores:
say how many cores next to them.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import math
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
USER = "normbench"
STUDY = "run:load"
ACCESS = re.compile(r'"(?:GET|POST|PATCH|PUT|DELETE) (/\S+?)(?:\?\S*)? HTTP/1\.[01]" \d{3}')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------------ the servers


class Servers:
    """PostgreSQL (with pg_stat_statements) and `mlflow server` on loopback, in a temporary folder."""

    def __init__(self, mlflow_workers: int) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="normbench-load-"))
        self.password = secrets.token_hex(12)
        self.pg_port, self.mlflow_port = free_port(), free_port()
        self.mlflow_workers = mlflow_workers
        self.mlflow: subprocess.Popen | None = None
        self.pg_ctl: list[str] = []
        self.access_log = self.tmp / "mlflow-server.log"

    def url(self, db: str) -> str:
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.pg_port}/{db}"

    def __enter__(self) -> Servers:
        try:
            self._start_postgres()
            self.sql("CREATE DATABASE mlflow", autocommit=True)
            self._start_mlflow()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        if self.mlflow is not None:
            os.killpg(self.mlflow.pid, signal.SIGTERM)
            try:
                self.mlflow.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.mlflow.pid, signal.SIGKILL)
                self.mlflow.wait()
        if self.pg_ctl:
            subprocess.run([*self.pg_ctl, "stop", "-w", "-m", "fast", "-D", str(self.tmp / "data")], cwd=self.tmp,
                           capture_output=True)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _start_postgres(self) -> None:
        bindirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(re.sub(r"\D", "", d) or 0))
        bindir = next((d for d in reversed(bindirs) if os.access(f"{d}/pg_ctl", os.X_OK)), None)
        initdb, pg_ctl = (f"{bindir}/initdb", f"{bindir}/pg_ctl") if bindir else (shutil.which("initdb"),
                                                                                 shutil.which("pg_ctl"))
        if not initdb or not pg_ctl:
            sys.exit("load-workers: PostgreSQL binaries not found; install them: bash scripts/install-postgres.sh")
        as_user: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            owner = pwd.getpwnam("postgres")
            os.chown(self.tmp, owner.pw_uid, owner.pw_gid)
            as_user = ["runuser", "-u", "postgres", "--"]
        pwfile = self.tmp / "pwfile"
        pwfile.write_text(self.password)
        if as_user:
            os.chown(pwfile, owner.pw_uid, owner.pw_gid)
        subprocess.run([*as_user, initdb, "-D", str(self.tmp / "data"), "-U", USER, "--auth-host=scram-sha-256",
                        "--auth-local=trust", f"--pwfile={pwfile}", "--no-locale", "--encoding=UTF8"],
                       cwd=self.tmp, check=True, capture_output=True)
        with open(self.tmp / "data" / "postgresql.conf", "a") as conf:
            conf.write(f"\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.tmp}'\n"
                       "fsync = off\nsynchronous_commit = off\nmax_connections = 500\n"
                       "shared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.track_utility = on\n")
        self.pg_ctl = [*as_user, pg_ctl]
        subprocess.run([*self.pg_ctl, "start", "-w", "-D", str(self.tmp / "data"), "-l", str(self.tmp / "pg.log"),
                        "-o", f"-p {self.pg_port}"], cwd=self.tmp, check=True, capture_output=True)
        self.sql("CREATE EXTENSION pg_stat_statements")

    def _start_mlflow(self) -> None:
        log = open(self.access_log, "w")  # uvicorn's access log: one line per request
        self.mlflow = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.mlflow_port),
             "--workers", str(self.mlflow_workers), "--backend-store-uri",
             self.url("mlflow").replace("postgresql://", "postgresql+psycopg2://"),
             "--artifacts-destination", str(self.tmp / "artifacts")],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.mlflow_port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if self.mlflow.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"load-workers: mlflow server did not start; see {self.access_log}:\n"
                         + self.access_log.read_text()[-2000:])
            time.sleep(0.5)

    def sql(self, query: str, db: str = "postgres", autocommit: bool = False) -> list[tuple]:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.pg_port, user=USER, password=self.password, dbname=db)
        conn.autocommit = autocommit or query.lstrip().upper().startswith(("CREATE DATABASE", "DROP DATABASE"))
        try:
            with conn.cursor() as cur:
                cur.execute(query)
                rows = cur.fetchall() if cur.description else []
            if not conn.autocommit:
                conn.commit()
            return rows
        finally:
            conn.close()

    def requests(self) -> Counter:
        """MLflow server requests so far, by path."""
        return Counter(m.group(1) for m in ACCESS.finditer(self.access_log.read_text(errors="replace")))


# ------------------------------------------------------------------------------------------------ one phase


def counters(servers: Servers, db: str) -> tuple[int, int]:
    """(transactions, statements) run on database `db` since the last reset, from pg_stat_statements (updated as
    each statement ends; pg_stat_database's counters lag by up to 10 s). A transaction is a BEGIN: psycopg2 opens
    every one with it."""
    [(xacts, calls)] = servers.sql(
        "SELECT coalesce(sum(calls) FILTER (WHERE upper(query) = 'BEGIN'), 0), coalesce(sum(calls), 0) "
        f"FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = '{db}'")
    return int(xacts), int(calls)


def queue(url: str, out: Path, cells: int, idle: bool) -> contextlib.AbstractContextManager:
    """Queue `cells` no-op cells (busy), or one cell claimed and kept alive by this process (idle)."""
    from normbench.store.ledger import Ledger

    ledger = Ledger(url, out / "driver")
    study = ledger.study(STUDY)
    ledger.enqueue(study, {f"cell={i}": {"cell": i} for i in range(1 if idle else cells)})
    if not idle:
        return contextlib.nullcontext()
    return ledger.claim(study).heartbeat()


def run_phase(servers: Servers, k: int, phase: str, args: argparse.Namespace) -> dict:
    db = f"ledger_{k}_{phase}"
    servers.sql(f"CREATE DATABASE {db}")
    url, out = servers.url(db), servers.tmp / db
    out.mkdir(parents=True, exist_ok=True)  # a database ledger makes no folder of its own; the go file lives here
    procs = min(k, args.procs)
    threads = [k // procs + (i < k % procs) for i in range(procs)]
    cells = math.ceil(k * ((args.seconds + args.warmup) / args.cell_seconds + 2) * 1.5)
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{servers.mlflow_port}",
           "MLFLOW_DISABLE_TELEMETRY": "true", "NORMBENCH_HEARTBEAT_INTERVAL": str(args.heartbeat),
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    go = out / "go"
    children = []
    with queue(url, out, cells, idle=phase == "idle"):
        for i, n in enumerate(threads):
            children.append(subprocess.Popen(
                [sys.executable, __file__, "--child", "--threads", str(n), "--storage", url,
                 "--out", str(out / f"p{i}"), "--experiment", f"load-{k}-{phase}", "--go", str(go),
                 "--cell-seconds", str(args.cell_seconds), "--epochs", str(args.epochs),
                 "--stats", str(out / f"p{i}.json")],
                env=env, stdout=subprocess.PIPE, text=True))
        for child in children:  # each says "ready" once all its workers have their ledger and tracker open
            if child.stdout.readline().strip() != "ready":
                raise SystemExit(f"load-workers: a simulated worker process failed to start (K={k}, {phase})")
        go.touch()
        time.sleep(args.warmup)
        servers.sql("SELECT pg_stat_statements_reset()")
        xacts0, calls0 = counters(servers, db)
        http0, started = servers.requests(), time.time()
        most = 0
        while time.time() - started < args.seconds:
            [(conns,)] = servers.sql(f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}'")
            most = max(most, int(conns))
            time.sleep(1.0)
        elapsed = time.time() - started
        xacts1, calls1 = counters(servers, db)
        http = servers.requests() - http0
        for child in children:
            child.send_signal(signal.SIGUSR1)  # write the claims' timings and exit
        for child in children:
            child.wait(timeout=60)
    claims = sorted(d for i in range(procs) for t, d in json.loads((out / f"p{i}.json").read_text())
                    if started <= t <= started + elapsed)
    servers.sql(f"DROP DATABASE {db} WITH (FORCE)")
    searches = sum(n for path, n in http.items() if path.endswith("/runs/search"))
    return {"K": k, "phase": phase, "pg_xacts_per_s": (xacts1 - xacts0) / elapsed,
            "pg_statements_per_s": (calls1 - calls0) / elapsed, "mlflow_requests_per_s": sum(http.values()) / elapsed,
            "mlflow_searches_per_s": searches / elapsed, "claims": len(claims),
            "claim_p50_ms": 1000 * percentile(claims, 50), "claim_p99_ms": 1000 * percentile(claims, 99),
            "connections_max": most, "mlflow_by_path": dict(http.most_common())}


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, max(0, math.ceil(q / 100 * len(values)) - 1))]


# ------------------------------------------------------------------------------------------------ a worker process


def child(args: argparse.Namespace) -> None:
    """`args.threads` workers in this process, each in normbench's worker loop with a no-op `train_cell`."""
    import warnings

    warnings.simplefilter("ignore")  # Optuna's "experimental" notes, once per worker
    from normbench.contracts.results import CellResult
    from normbench.store.ledger import Ledger
    from normbench.sweep import worker
    from normbench.sweep.plan import Job, Plan
    from normbench.sweep.progress import Progress
    from normbench.tracking.run_record import trial_run
    from normbench.tracking.tracker import Tracker

    timings: list[tuple[float, float]] = []  # (when, seconds) of each claim that got a cell
    claim = Ledger.claim

    def timed_claim(self, study, wanted=None):
        started = time.perf_counter()
        trial = claim(self, study, wanted)
        if trial is not None:
            timings.append((time.time(), time.perf_counter() - started))
        return trial

    def no_op_cell(config, device, on_epoch=None, dist=None, **_):  # resume, keeper: none here
        history = []
        for epoch in range(args.epochs):
            time.sleep(args.cell_seconds / args.epochs)
            record = {"epoch": epoch, "train_loss": 1.0 / (epoch + 1), "val_top1": 10.0 + epoch, "lr": 1e-3,
                      "grad_norm": 1.0, "images_per_sec": 1000.0, "step": epoch + 1, "images": 64 * (epoch + 1)}
            history.append(record)
            on_epoch(record)
        return CellResult(status="ok", best_val_top1=history[-1]["val_top1"], final_val_top1=history[-1]["val_top1"],
                          val_top1=history[-1]["val_top1"], test_top1=10.0, best_val_epoch=args.epochs - 1,
                          train_size=64, val_size=64, test_size=64, num_classes=10, train_loss=0.5,
                          epochs_run=args.epochs, images_per_sec=1000.0, params=1, seconds=args.cell_seconds,
                          history=history)

    Ledger.claim = timed_claim
    worker.train_cell = no_op_cell
    config = SimpleNamespace(train=SimpleNamespace(epochs=args.epochs))

    def cell_for(claim):  # its MLflow run as the worker starts it (sweep/cells.py cell_run), without a suite file
        return claim.trial.user_attrs["cell_id"], trial_run(STUDY, claim.frozen(), None), config

    ready = threading.Barrier(args.threads + 1)

    def one_worker(i: int) -> None:
        try:
            simulated_worker(i)
        except BaseException:  # said, and the barrier broken: the parent sees this child end instead of hanging
            import traceback

            traceback.print_exc()
            ready.abort()
            os._exit(1)

    def simulated_worker(i: int) -> None:
        out = Path(args.out) / f"w{i}"
        ledger, tracker = Ledger(args.storage, out), Tracker(out, args.experiment)
        job = Job(study=ledger.study(STUDY), cell_for=cell_for)
        ready.wait()
        while not os.path.exists(args.go):
            time.sleep(0.05)
        plan = Plan(jobs=lambda: [job], queue_next=lambda: None)  # one study, no stage after it
        worker.work(plan, ledger, tracker, "cpu", Progress(total=1, quiet=True), "load")

    def dump(*_: object) -> None:
        Path(args.stats).write_text(json.dumps(list(timings)))
        os._exit(0)

    signal.signal(signal.SIGUSR1, dump)
    for i in range(args.threads):
        threading.Thread(target=one_worker, args=(i,), daemon=True).start()
    ready.wait()
    print("ready", flush=True)
    while True:
        time.sleep(3600)


# ------------------------------------------------------------------------------------------------ main


def table(rows: list[dict]) -> str:
    lines = ["| K | phase | ledger DB xacts/s | ledger DB statements/s | MLflow requests/s (searches/s) | "
             "claim p50 / p99 ms | ledger DB connections |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['K']} | {r['phase']} | {r['pg_xacts_per_s']:.0f} | {r['pg_statements_per_s']:.0f} | "
              f"{r['mlflow_requests_per_s']:.1f} ({r['mlflow_searches_per_s']:.1f}) | "
              f"{r['claim_p50_ms']:.0f} / {r['claim_p99_ms']:.0f} | {r['connections_max']} |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,8,32,64", help="the values of K, comma-separated")
    parser.add_argument("--seconds", type=float, default=25.0, help="measured seconds per K and phase")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds between the start and the measurement")
    parser.add_argument("--cell-seconds", type=float, default=5.0, help="a no-op cell's duration")
    parser.add_argument("--epochs", type=int, default=5, help="epochs (log_epoch calls) per cell")
    parser.add_argument("--heartbeat", type=int, default=10, help="NORMBENCH_HEARTBEAT_INTERVAL of the workers")
    parser.add_argument("--procs", type=int, default=8, help="processes the K workers are spread over (threads)")
    parser.add_argument("--phases", default="busy,idle")
    parser.add_argument("--mlflow-workers", type=int, default=2, help="`mlflow server --workers`")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name in ("threads", "storage", "out", "experiment", "go", "stats"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.threads = int(args.threads)
        child(args)
        return
    os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
    sys.path.insert(0, str(REPO))
    rows = []
    with Servers(args.mlflow_workers) as servers:
        for k in (int(v) for v in args.workers.split(",")):
            for phase in args.phases.split(","):
                rows.append(run_phase(servers, k, phase, args))
                print(json.dumps({key: v for key, v in rows[-1].items() if key != "mlflow_by_path"}), flush=True)
    print(f"\n{os.cpu_count()} cores; cells of {args.cell_seconds:g} s ({args.epochs} epochs), heartbeat every "
          f"{args.heartbeat} s, {args.seconds:g} s measured per row\n")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
