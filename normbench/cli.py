"""`normbench`: thin on purpose. Parses, calls, and maps errors to exit codes (2: bad input, 3: unreachable server,
130: interrupted). Heavy imports (torch, mlflow, optuna) happen inside the commands, so `--help` stays fast."""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from normbench.errors import NormbenchError


def _suite_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("suite", type=Path, help="suite YAML file, e.g. suites/smoke.yaml")
    p.add_argument("--out", type=Path, help="output folder (default: results/<suite name>)")
    p.add_argument("--storage", help="ledger URL shared by many workers, e.g. postgresql://user:pw@host/db "
                                     "(default: a journal file in the output folder)")
    p.add_argument("--device", help="auto, cpu, cuda or cuda:N (default: the suite's, else auto)")
    p.add_argument("--quiet", action="store_true", help="no progress display")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="normbench", description="Which normalization layer lets a deep ViT "
                                     "train best, at what learning rate, how often does it blow up, at what cost?")
    parser.add_argument("--version", action="version", version=f"normbench {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="train every cell of a suite's matrix, log to MLflow, write the leaderboard")
    _suite_args(p)
    p.add_argument("--workers", type=int, help="local worker processes (default: one per GPU, 1 on CPU)")
    p.add_argument("--dry-run", action="store_true", help="list the cells and their status; train nothing")

    p = sub.add_parser("tune", help="equal Optuna budget per (layer, depth), then re-run the best over seeds")
    _suite_args(p)
    p.add_argument("--workers", type=int, help="local worker processes (default: one per GPU, 1 on CPU)")

    p = sub.add_parser("worker", help="join a suite's run or tune from this machine (use a shared --storage)")
    _suite_args(p)
    p.add_argument("--mode", choices=("run", "tune"), default="run", help="which of the suite's work to join")

    p = sub.add_parser("leaderboard", help="regenerate leaderboard.md, results.csv and plots from a ledger")
    p.add_argument("out", type=Path, help="a suite's output folder, e.g. results/smoke")
    p.add_argument("--storage", help="ledger URL, if the suite ran on a shared database")

    p = sub.add_parser("ledger", help="check or repair a suite's ledger.journal")
    p.add_argument("action", choices=("repair",), help="repair: keep every record before the first damaged line")
    p.add_argument("out", type=Path, help="a suite's output folder (or its ledger.journal)")

    p = sub.add_parser("ui", help="start the MLflow UI on a suite's runs")
    p.add_argument("out", type=Path, nargs="?", default=Path("results"), help="a suite's output folder")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5000)

    p = sub.add_parser("layers", help="list the registry: name, kind, formula, source")
    p.add_argument("pattern", nargs="?", default="*", help="shell-style filter, e.g. 'learnable*'")

    p = sub.add_parser("bench", help="time each layer's op and the model's train step against timm")
    p.add_argument("--layers", nargs="+", help="registry names (default: the six mission layers)")
    p.add_argument("--depth", type=int, nargs="+", default=[12], help="model depths (default: 12)")
    p.add_argument("--dim", type=int, nargs="+", default=[192], help="embed dims (default: 192)")
    p.add_argument("--batch-size", type=int, default=None, help="images per step (default: 256 GPU, 64 CPU)")
    p.add_argument("--device", default="auto")
    p.add_argument("--compile", choices=("auto", "on", "off"), default="auto")
    p.add_argument("--out", type=Path, default=Path("results"), help="folder for bench-<device>-<torch>.csv/.md")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    previous = _stop_on_sigterm()
    try:
        return COMMANDS[args.command](args)
    except NormbenchError as e:
        print(f"normbench: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("\nnormbench: interrupted; finished cells are saved, run the same command to resume", file=sys.stderr)
        return 130
    except OSError as e:  # a disk fault mid-run (full, read-only, a folder in the way): what finished is kept
        where = f"{e.filename}: " if e.filename else ""
        print(f"normbench: error: {where}{e.strerror or e}; free space or fix the path, then run the same command "
              "to resume (finished cells are in the ledger)", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _stop_on_sigterm() -> Any:
    """SIGTERM (what SLURM and Kubernetes send) stops like Ctrl-C: the cell in flight is released (its trial queued
    again, its MLflow run KILLED) and the interrupted message says how to resume. Returns the previous handler."""

    def terminate(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one release, even if SIGTERM comes again meanwhile
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, terminate)
    except ValueError:  # not the main thread (an embedding program): leave signals alone
        return None


def _load(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from normbench.suite import load_suite

    suite = load_suite(args.suite)
    out = args.out or Path("results") / suite.name
    return suite, out


def _save_suite_copy(suite, out: Path) -> None:  # type: ignore[no-untyped-def]
    out.mkdir(parents=True, exist_ok=True)
    if suite.path.resolve() != (out / "suite.yaml").resolve():
        shutil.copyfile(suite.path, out / "suite.yaml")  # `normbench leaderboard DIR` reads it back


def cmd_run(args: argparse.Namespace) -> int:
    suite, out = _load(args)
    if args.dry_run:
        return _dry_run(suite, out, args.storage)
    from normbench.runner import run_suite

    summary = run_suite(suite, out, storage=args.storage, device=args.device, workers=args.workers, quiet=args.quiet)
    return 1 if summary.errors else 0


def _dry_run(suite, out: Path, storage: str | None) -> int:  # type: ignore[no-untyped-def]
    from tabulate import tabulate

    done: dict[str, str] = {}
    if storage or (out / "ledger.journal").exists():
        from normbench.leaderboard import cells_frame
        from normbench.ledger import Ledger

        frame = cells_frame(Ledger(storage, out), f"run:{suite.name}")
        done = dict(zip(frame.get("cell_id", []), frame.get("status", []), strict=False))
    rows = [[c.cell_id, done.get(c.cell_id, "to run")] for c in suite.cells()]
    print(tabulate(rows, headers=["cell", "status"], tablefmt="simple"))
    print(f"{len(rows)} cells, {len(done)} finished; output folder {out}")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    suite, out = _load(args)
    from normbench.tune import tune_suite

    _save_suite_copy(suite, out)
    summary = tune_suite(suite, out, storage=args.storage, device=args.device, workers=args.workers, quiet=args.quiet)
    return 1 if summary.errors else 0


def cmd_worker(args: argparse.Namespace) -> int:
    suite, out = _load(args)
    from normbench.distributed import from_env, shutdown

    dist = from_env()  # launched by torchrun: one cell over all of this node's processes
    try:
        return _worker(args, suite, out, dist)
    finally:
        shutdown(dist)


def _worker(args: argparse.Namespace, suite, out: Path, dist) -> int:  # type: ignore[no-untyped-def]
    from normbench.progress import Progress
    from normbench.runner import preflight
    from normbench.worker import follow, work

    device = preflight(suite, args.device)
    if dist is not None and not dist.is_main:
        follow(device, dist)
        return 0
    if args.mode == "tune":
        from normbench.tune import tune_context

        ledger, tracker, jobs = tune_context(suite, out, args.storage)
    else:
        from normbench.ledger import Ledger
        from normbench.runner import open_run_study, run_job
        from normbench.tracking import Tracker

        ledger, tracker = Ledger(args.storage, out), Tracker(out, suite.name)
        study = open_run_study(ledger, suite)
        ledger.enqueue(study, {c.cell_id: c.axes for c in suite.cells()})

        def jobs():  # type: ignore[no-untyped-def]
            return [run_job(suite, study)]

    progress = Progress(total=len(suite.cells()), quiet=args.quiet)
    summary = work(jobs, ledger, tracker, device, progress, suite.name, dist=dist)
    if summary.bookkeeping():
        progress.note(summary.bookkeeping())
    return 1 if summary.errors else 0


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from normbench.leaderboard import write_leaderboard
    from normbench.suite import load_suite

    if not args.out.is_dir():
        raise NormbenchError(f"{args.out}: no such folder; pass a suite's output folder, e.g. results/smoke")
    suite_file = args.out / "suite.yaml"
    suite = load_suite(suite_file) if suite_file.exists() else None
    path = write_leaderboard(args.out, suite=suite, storage=args.storage)
    print(path)
    return 0


def cmd_ledger(args: argparse.Namespace) -> int:
    from normbench.journal import repair

    path = args.out if args.out.suffix == ".journal" else args.out / "ledger.journal"
    if not path.is_file():
        raise NormbenchError(f"{path}: no such file; pass a suite's output folder (ledger repair works on journal "
                             "files; a database ledger is repaired by its server)")
    kept, moved = repair(path)
    if moved:
        print(f"{path}: kept the first {kept} records; moved {moved} damaged or later lines to {path.name}.damaged. "
              "Run the suite again: cells whose records were moved run again.")
    else:
        print(f"{path}: all {kept} records are intact; nothing to repair")
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    from normbench.tracking import tracking_uri

    uri = tracking_uri(args.out)
    if uri.startswith("sqlite:") and not (args.out / "mlflow.db").exists():
        raise NormbenchError(f"{args.out}: no mlflow.db here; run a suite first (`normbench run suites/smoke.yaml`) "
                             "or pass its output folder")
    if not uri.startswith("sqlite:"):
        print(f"MLFLOW_TRACKING_URI is set: open {uri} in a browser (its server is the UI)")
        return 0
    print(f"MLflow UI for {args.out} at http://{args.host}:{args.port} (Ctrl-C stops it)", flush=True)
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", args.host,
           "--port", str(args.port)]
    return subprocess.call(cmd)


def cmd_layers(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from normbench.layers import get_spec, list_layers

    rows = [[s.name, s.kind, s.partner or "", s.formula, s.source]
            for s in map(get_spec, list_layers(args.pattern))]
    print(tabulate(rows, headers=["name", "kind", "brings", "formula", "source"], tablefmt="simple"))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from normbench.bench import run_bench

    run_bench(layers=args.layers, depths=args.depth, dims=args.dim, batch_size=args.batch_size,
              device=args.device, compile_mode=args.compile, out_dir=args.out)
    return 0


def _version() -> str:
    from normbench import __version__

    return __version__


COMMANDS = {"run": cmd_run, "tune": cmd_tune, "worker": cmd_worker, "leaderboard": cmd_leaderboard, "ui": cmd_ui,
            "layers": cmd_layers, "bench": cmd_bench}
COMMANDS["ledger"] = cmd_ledger
