"""`normbench`: thin on purpose. Parses, calls, and maps errors to exit codes (2: bad input, 3: unreachable server,
75: stopped at --time-limit with cells left, 143: interrupted, by Ctrl-C, SIGTERM or SIGHUP alike). Heavy imports
(torch, mlflow, optuna) happen inside the commands, so `--help` stays fast."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from normbench import settings, stopping
from normbench.contracts.names import OutputFolder
from normbench.errors import NormbenchError, Terminated


def _suite_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("suite", type=Path, help="suite YAML file, e.g. suites/smoke.yaml")
    p.add_argument("--out", type=Path, help="output folder (default: runs/<suite name>, not committed; "
                   "--out results/NAME publishes)")
    p.add_argument("--storage", help="ledger URL shared by many workers, e.g. postgresql://user:pw@host/db "
                                     "(default: a journal file in the output folder)")
    p.add_argument("--device", help="auto, cpu, cuda or cuda:N (default: the suite's, else auto)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override a suite key as if the file said it, e.g. --set train.epochs=2 --set "
                        "dataset.root=~/data (VALUE is YAML; repeatable; the output folder's suite.yaml records it)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.add_argument("--checkpoint-dir", type=Path, help="where cells keep their checkpoints (and kept weights): a "
                   "filesystem every worker shares, so a cell preempted on one machine resumes on another (default: "
                   "OUT/checkpoints; docs/faults.md)")
    p.add_argument("--fuse", type=_fuse_size, default="auto", metavar="K|auto", help="train up to K cells of a row "
                   "that differ only in lr, seed, epochs and warmup (a tune trial's weight decay, beta2 and "
                   "init-only layer tunables too) as one fused model (each keeps its own trial, "
                   "run and result; docs/speed.md); auto (default): on CUDA as this GPU's fuse bench measured "
                   "(else up to 16), 1 (unfused) on a CPU")
    p.add_argument("--time-limit", type=_duration, metavar="DURATION", help="start no cell that this host's pace "
                   "says would end later than DURATION from now (e.g. 2h30m, 90m, HH:MM:SS: a SLURM job's --time less "
                   "a margin for the leaderboard); the rest wait in the ledger, and the run exits 75 "
                   "(docs/faults.md)")
    p.add_argument("--select-only", action="store_true", help="train only the cells that choose (the matrix, its "
                   "bracketing rounds, tune's searches and confirmations), none that score the folder (report "
                   "seeds, the 2x check, claim rounds, tune's re-runs): a lent GPU helps a CPU folder choose while "
                   "the cells compared across folders stay on one device class (docs/protocol.md \"Devices\")")
    p.add_argument("--stop-by", type=float, help=argparse.SUPPRESS)  # a local worker's copy of its parent's limit


SELECT_ONLY_DRY_RUN = ("--select-only: of the cells above, a run with it trains the matrix, bracketing rounds, "
                      "searches and confirmations; report seeds, the 2x check, claim rounds and tune's re-runs wait "
                      "queued for a run without it")


def _duration(text: str) -> float:
    from normbench.sweep.time_limit import parse_duration

    try:
        return parse_duration(text)
    except NormbenchError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _time_limit(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The run's TimeLimit, from --time-limit counted from now (or a local worker's --stop-by); None without one."""
    from normbench.sweep.time_limit import TimeLimit

    if args.stop_by is not None:
        return TimeLimit(args.stop_by)
    return TimeLimit.after(args.time_limit) if args.time_limit is not None else None


def _fuse_size(text: str) -> int | str:
    if text == "auto" or (text.isdigit() and int(text) >= 1):
        return text if text == "auto" else int(text)
    raise argparse.ArgumentTypeError(f"{text!r}: give a group size of at least 1, or auto")


def _mlflow_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tracking-uri", help="the MLflow store to bring up to date (default: MLFLOW_TRACKING_URI, else "
                                          "OUT/mlflow.db)")
    p.add_argument("--storage", help="ledger URL, if the suite ran on a shared database")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="normbench", description="Which normalization layer lets a deep ViT "
                                     "train best, at what learning rate, how often does it blow up, at what cost?")
    parser.add_argument("--version", action="version", version=f"normbench {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="train every cell of a suite's matrix, log to MLflow, write the leaderboard")
    _suite_args(p)
    p.add_argument("--workers", type=int, help="local worker processes (default: one per GPU, 1 on CPU)")
    p.add_argument("--dry-run", action="store_true", help="list the cells and their status; train nothing")
    p.add_argument("--bracket", action="store_true", help="add lrs beyond the grid's edge where a row's best lr "
                   "sits there (as `bracket: true` in the suite)")
    p.add_argument("--retry-failed", action="store_true", help="give cells failed for good (each of their "
                   "NORMBENCH_MAX_ATTEMPTS attempts, default 3, killed its worker) another round of attempts")

    p = sub.add_parser("tune", help="equal Optuna budget per (layer, depth), then re-run the best over seeds",
                       description="An Optuna search per (layer, depth) of the suite's `tune.space`, each of "
                       "`tune.trials` trials, then each winner re-run on the matrix's seeds. Try it small first: "
                       "--dry-run lists the searches and their budget and trains nothing; --set tune.trials=1 runs "
                       "one trial per search.")
    _suite_args(p)
    p.add_argument("--workers", type=int, help="local worker processes (default: one per GPU, 1 on CPU)")
    p.add_argument("--dry-run", action="store_true", help="list the searches (one per layer and depth), their trials "
                   "finished of tune.trials, and the re-runs; train nothing")

    p = sub.add_parser("worker", help="join a suite's run or tune from this machine (use a shared --storage)")
    _suite_args(p)
    p.add_argument("--mode", choices=("run", "tune"), default="run", help="which of the suite's work to join")
    p.add_argument("--bracket", action="store_true", help="join a run started with --bracket")

    p = sub.add_parser("leaderboard", help="regenerate leaderboard.md, results.csv and plots from a ledger")
    p.add_argument("out", type=Path, help="a suite's output folder, e.g. results/smoke")
    p.add_argument("--storage", help="ledger URL, if the suite ran on a shared database")
    p.add_argument("--reference", type=Path, help="another suite's output folder: check whether its layer ranking "
                   "holds here (replaces the first of the suite's `reference:` folders)")

    p = sub.add_parser("compare", help="one grid's output folders at different budgets, widths or optimizers, or "
                       "grid against tuned, side by side: which conclusions hold and which change; or folders of one "
                       "recipe holding different rows (a later folder's new layers), every row ranked together")
    p.add_argument("outs", type=Path, nargs="+", metavar="out", help="output folders, e.g. results/A results/B")
    p.add_argument("--out", dest="write_to", type=Path, help="write the markdown here (default: print it)")

    p = sub.add_parser("ledger", help="repair a suite's ledger.journal")
    p.add_argument("action", choices=("repair",), help="repair: keep every record before the first damaged line")
    p.add_argument("out", type=Path, help="a suite's output folder (or its ledger.journal)")

    p = sub.add_parser("sync", help="bring MLflow up to date from a suite's ledger (MLflow is a view of it)")
    p.add_argument("out", type=Path, help="a suite's output folder, e.g. results/smoke")
    _mlflow_args(p)

    p = sub.add_parser("ui", help="sync, then start the MLflow UI on a suite's comparison, sorted by score")
    p.add_argument("out", type=Path, nargs="?", help="a suite's output folder, e.g. results/smoke (default: the one "
                   "under runs/ whose ledger changed last)")
    _mlflow_args(p)
    p.add_argument("--host", default="127.0.0.1", help="address the UI listens on (default: 127.0.0.1, this machine "
                   "only; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=int, default=5000, help="port the UI listens on (default: 5000)")
    p.add_argument("--no-browser", action="store_true", help="print the URL only (default: also open it when "
                                                             "there is a display)")

    p = sub.add_parser("layers", help="list the registry: name, kind, formula, source")
    p.add_argument("pattern", nargs="?", default="*", help="shell-style filter, e.g. 'learnable*'")

    p = sub.add_parser("bench", help="time each layer's op and the model's train step against timm; with a suite, "
                                     "each of its layers' train step at its shape against its baseline")
    p.add_argument("suite", type=Path, nargs="?", help="a suite YAML: time its layers' train steps on its data, "
                   "model and batch, written as cost-<device>-<torch>.csv/.md, which `normbench leaderboard` shows "
                   "when they lie in its folder; put it first: `normbench bench SUITE --layers A B`")
    p.add_argument("--layers", nargs="+", help="registry names (default: the six mission layers; a suite's own)")
    p.add_argument("--depth", type=int, nargs="+", default=None, help="model depths (default: 12; a suite's own)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats, the median reported (default: the "
                   "device's; 5 with a suite)")
    p.add_argument("--dim", type=int, nargs="+", default=[192], help="embed dims (default: 192)")
    p.add_argument("--batch-size", type=int, default=None, help="images per step (default: 256 GPU, 64 CPU)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (default: auto, a GPU when there is "
                   "one)")
    p.add_argument("--compile", choices=("auto", "on", "off"), default="auto", help="torch.compile the model's "
                   "forward in the timed train step (default: auto, on CUDA only; bench SUITE takes the suite's "
                   "train.compile, bench SUITE --fuse this flag)")
    p.add_argument("--fuse", type=int, nargs="+", metavar="K", help="with a suite: cells per hour of its rows' cells "
                   "trained one by one, by worker processes, and fused in groups of at most K (e.g. 1 8), compiled "
                   "(--compile on; auto: on CUDA) and side by side, written as fuse-<device>-<torch>.csv/.md")
    p.add_argument("--workers", type=int, nargs=2, metavar=("N", "W"), dest="bench_workers", help="with --fuse: N "
                   "worker processes unfused and W fused ones side by side (default: the cores and 2 on a CPU, 14 "
                   "and 4 on CUDA)")
    p.add_argument("--out", type=Path, default=None, help="folder for bench-<device>-<torch>.csv/.md (default: "
                   "runs/, not committed; --out results publishes, as scripts/bench.sh does); with a suite, for "
                   "cost-<device>-<torch>.csv/.md (default: runs/<suite name>, where `normbench run` writes)")

    p = sub.add_parser("probe", help="signal propagation at init: per-block stream RMS, gradient norm, token "
                                     "similarity")
    p.add_argument("suite", type=Path, nargs="?", help="a suite YAML: probe its layers x depths on its data (with "
                   "--depth/--dim/--heads: its rows at those shapes instead of its own)")
    p.add_argument("--layers", nargs="+", help="registry names (default: the six mission layers)")
    p.add_argument("--depth", type=int, nargs="+", default=None, help="model depths (default: 6 36; a suite's own)")
    p.add_argument("--dim", type=int, nargs="+", default=None, help="embed dims (default: 64; a suite's own)")
    p.add_argument("--heads", type=int, nargs="+", default=None, help="attention heads, one per --dim or one for all "
                   "(default: 4; a suite's own), e.g. --dim 64 192 384 768 --heads 4 3 6 12")
    p.add_argument("--batch-size", type=int, default=64, help="images in the probe batch (default: 64)")
    p.add_argument("--device", default="cpu", help="auto, cpu, cuda or cuda:N (default: cpu; the signal at init "
                   "does not depend on it)")
    p.add_argument("--out", type=Path, default=Path(OutputFolder.RUNS), help="folder for probe-<...>.md/.csv/.png "
                   "(default: runs/, not committed; --out results/NAME publishes)")
    p.add_argument("--weights", type=Path, help="probe this trained model instead (a weights.safetensors that "
                   "`train.keep_weights: final` kept), on the first validation batch of its own data set")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "workers", None) is not None and args.workers < 1:  # one line, as every bad input (not usage)
        print(f"normbench: error: --workers {args.workers}: must be 1 or more (leave it out for one per GPU, 1 on "
              "CPU)", file=sys.stderr)
        return 2
    previous = stopping.install()
    try:
        settings.check()  # every NORMBENCH_* value, before any folder or ledger exists
        _check_device_flag(args)
        code = COMMANDS[args.command](args)
        stopping.check()  # a SIGTERM or SIGHUP that came after the last safe point still stops with 143
        return code
    except NormbenchError as e:
        print(f"normbench: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM and SIGHUP as Terminated
        from normbench.sweep.launch import LOCAL_WORKER

        if not os.environ.get(LOCAL_WORKER):  # a worker of `run --workers`: its parent names the command to resume
            print(_stopped_message(args, e, sys.argv[1:] if argv is None else argv), file=sys.stderr)
        return stopping.INTERRUPTED
    except OSError as e:  # a disk fault mid-run (full, read-only, a folder in the way): what finished is kept
        named = e.filename or getattr(args, "out", None)  # a write with no file name (a full disk): the folder's
        where = f"{named}: " if named else ""
        print(f"normbench: error: {where}{e.strerror or e}; free space or fix the path, then run the same command "
              "to resume (finished cells are in the ledger)", file=sys.stderr)
        return 2
    finally:
        stopping.uninstall(previous)


def _check_device_flag(args: argparse.Namespace) -> None:
    """`--device` goes through the suite's `device:` check: one line, not torch's traceback."""
    if getattr(args, "device", None) is not None:
        from normbench.contracts.cell_checks import check_device

        check_device(args.device, "--device")


def _stopped_message(args: argparse.Namespace, stop: KeyboardInterrupt, argv: list[str]) -> str:
    """What was kept and the command that resumes."""
    how = f"stopped by {stop.signal}" if isinstance(stop, Terminated) else "interrupted"
    if args.command not in ("run", "tune", "worker"):
        return f"\nnormbench: {how}"
    where = _redacted(args.storage) if args.storage else args.out
    if where is None:
        try:
            where = _load(args)[1]
        except Exception:  # the suite file changed or vanished meanwhile: name the default's pattern
            where = "runs/<suite name>"
    return (f"\nnormbench: {how}; finished cells are saved in {where} and the cell in progress goes back to the "
            f"queue. Resume with the same command: normbench {' '.join(map(str, argv))}")


def _redacted(url: str) -> str:
    from normbench.store.ledger import redact

    return redact(url)


def _load(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from normbench.contracts.suite import load_suite

    overrides = getattr(args, "overrides", None) or []
    suite = load_suite(args.suite, overrides)
    for note in suite.notes:  # claims a narrowing --set left out, dropped: said, as the suite no longer holds them
        print(f"normbench: {note}", file=sys.stderr)
    if overrides:
        suite.path = _overridden_copy(args.suite, overrides)
    if getattr(args, "bracket", False):
        suite.enable_bracket()
    out = args.out or OutputFolder.default_path(suite.name)
    return suite, out


def _overridden_copy(path: Path, overrides: list[str]) -> Path:
    """The suite as `--set` leaves it, in a temporary file that lives as long as this process: the run saves it as
    the output folder's suite.yaml (the record of what ran), and its local workers load it instead of the file."""
    from normbench.contracts.suite_file import overridden_text
    from normbench.sweep.suite_snapshot import private_copy

    return private_copy(path.name, overridden_text(path, overrides).encode())


def cmd_run(args: argparse.Namespace) -> int:
    limit = _time_limit(args)  # counted from the command's start
    suite, out = _load(args)
    if args.dry_run:
        from normbench.sweep.dry_run import dry_run_report

        print(dry_run_report(suite, out, args.storage))
        if args.select_only:
            print(SELECT_ONLY_DRY_RUN)
        from normbench.sweep.fuse_plan import dry_run_groups

        if groups := dry_run_groups(suite, args.fuse, args.device):  # what --fuse would group, stage by stage
            print(groups)
        return 0
    from normbench.sweep.suite_run import run_suite

    if args.retry_failed:
        from normbench.sweep.run import retry_failed

        retried = retry_failed(suite, out, args.storage)
        if not args.quiet:
            print(f"normbench: retrying {len(retried)} cell(s) failed for good" if retried else
                  "normbench: no cell has failed for good; --retry-failed has nothing to add", file=sys.stderr)
    summary = run_suite(suite, out, mode="run", storage=args.storage, device=args.device, workers=args.workers,
                        quiet=args.quiet, checkpoint_dir=args.checkpoint_dir, fuse=args.fuse, time_limit=limit,
                        select_only=args.select_only)
    if summary.failed_for_good:  # the run ends without them (it would loop on them otherwise): say so, always
        print(f"normbench: {summary.failed_line()}", file=sys.stderr)
    return _run_exit(summary, args, out)


def cmd_tune(args: argparse.Namespace) -> int:
    limit = _time_limit(args)
    suite, out = _load(args)
    if args.dry_run:
        from normbench.sweep.tune_dry_run import tune_dry_run_report

        print(tune_dry_run_report(suite, out, args.storage))
        if args.select_only:
            print(SELECT_ONLY_DRY_RUN)
        from normbench.sweep.fuse_plan import dry_run_groups

        if groups := dry_run_groups(suite, args.fuse, args.device, tune=True):  # what --fuse would group
            print(groups)
        return 0
    from normbench.sweep.suite_run import run_suite

    summary = run_suite(suite, out, mode="tune", storage=args.storage, device=args.device, workers=args.workers,
                        quiet=args.quiet, checkpoint_dir=args.checkpoint_dir, fuse=args.fuse, time_limit=limit,
                        select_only=args.select_only)
    if summary.failed_for_good:  # as `run`: the search ends without them, and says so
        print(f"normbench: {summary.failed_line()}", file=sys.stderr)
    return _run_exit(summary, args, out)


def _run_exit(summary, args: argparse.Namespace, out: Path) -> int:  # type: ignore[no-untyped-def]
    """1 when a cell failed; else 75 (TIME_LIMITED), saying so, when cells wait past --time-limit; else 0."""
    from normbench.sweep.time_limit import TIME_LIMITED

    if summary.errors or summary.failed_for_good:
        return 1
    if not summary.time_limited:
        return 0
    print(f"normbench: {_time_limited_line(summary, args, out)}", file=sys.stderr)
    return TIME_LIMITED


def _time_limited_line(summary, args: argparse.Namespace, out: Path) -> str:  # type: ignore[no-untyped-def]
    where = _redacted(args.storage) if args.storage else out
    named = f" --out {args.out}" if args.out else ""
    left = f"`normbench run {args.suite}{named} --dry-run` lists what is left; " if args.command == "run" else ""
    return (f"stopped at the time limit: {summary.time_limited}. Every finished cell is in {where}; {left}the same "
            "command (with a new --time-limit) goes on")


def cmd_worker(args: argparse.Namespace) -> int:
    limit = _time_limit(args)
    suite, out = _load(args)
    from normbench.sweep.suite_run import join_suite
    from normbench.train.distributed import from_env, shutdown

    dist = from_env()  # launched by torchrun: one cell over all of this node's processes
    try:
        summary = join_suite(suite, out, mode=args.mode, storage=args.storage, device=args.device,
                             quiet=args.quiet, dist=dist, checkpoint_dir=args.checkpoint_dir, fuse=args.fuse,
                             time_limit=limit, select_only=args.select_only)
    finally:
        shutdown(dist)
    if summary.failed_for_good and not args.quiet:  # quiet: the workers of `run --workers`, whose parent says it
        print(f"normbench: {summary.failed_line()}", file=sys.stderr)
    if summary.errors:
        return 1
    from normbench.sweep.launch import LOCAL_WORKER
    from normbench.sweep.time_limit import TIME_LIMITED

    if not summary.time_limited or os.environ.get(LOCAL_WORKER):  # `run --workers`: its parent reaches the limit too
        return 0
    print(f"normbench: {_time_limited_line(summary, args, out)}", file=sys.stderr)
    return TIME_LIMITED


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from normbench.contracts.suite import load_suite
    from normbench.report.leaderboard import folder_files, write_leaderboard, written_line

    if not args.out.is_dir():
        raise NormbenchError(f"{args.out}: no such folder; pass a suite's output folder, e.g. results/smoke")
    suite_file = OutputFolder(args.out).suite
    suite = load_suite(suite_file) if suite_file.exists() else None
    before = folder_files(args.out)
    write_leaderboard(args.out, suite=suite, storage=args.storage, reference=args.reference)
    print(written_line(args.out, before))  # where it wrote: a published folder's files are rewritten in place
    try:  # MLflow's view of the ledger, its parent run holding the files just written
        print(_sync(args.out, args.storage, None).line(), file=sys.stderr)
    except NormbenchError as e:  # the leaderboard is written; MLflow can be synced later
        print(f"normbench: warning: {e}", file=sys.stderr)
    return 0


def _sync(out: Path, storage: str | None, tracking_uri: str | None):  # type: ignore[no-untyped-def]
    from normbench.tracking.sync import sync

    return sync(out, storage, tracking_uri)


def cmd_sync(args: argparse.Namespace) -> int:
    print(_sync(args.out, args.storage, args.tracking_uri).line())
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from normbench.report.folder import read_folder
    from normbench.report.regimes import compare_regimes

    text = "\n".join(compare_regimes([read_folder(out) for out in args.outs]))
    if args.write_to is None:
        print(text)
    else:
        args.write_to.write_text(text)
        print(args.write_to)
    return 0


def cmd_ledger(args: argparse.Namespace) -> int:
    from normbench.store.journal import repair

    path = args.out if args.out.suffix == ".journal" else OutputFolder(args.out).ledger
    if not path.is_file():
        raise NormbenchError(f"{path}: no such file; pass a suite's output folder (ledger {args.action} works on "
                             "journal files; a database ledger is repaired by its server)")
    kept, moved = repair(path)
    if moved:
        print(f"{path}: kept the first {kept} records; moved {moved} damaged or later lines to {path.name}.damaged. "
              "Run the suite again: cells whose records were moved run again.")
    else:
        print(f"{path}: all {kept} records are intact; nothing to repair")
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    from normbench.tracking.mlflow_store import tracking_uri
    from normbench.tracking.ui import check_port, prepare_experiment, run_ui, ui_url

    if args.out is None:  # the suite run last, said; else what to pass
        args.out = OutputFolder.newest()
        if args.out is None:
            raise NormbenchError(f"ui: no output folder given, and {OutputFolder.RUNS}/ holds none; pass one, e.g. "
                                 "`normbench ui results/smoke`, or run a suite first (`normbench run "
                                 "suites/smoke.yaml` writes runs/smoke)")
        print(f"normbench: ui of {args.out}, the output folder under {OutputFolder.RUNS}/ whose ledger changed last "
              "(pass a folder to open another)", file=sys.stderr)
    uri = tracking_uri(args.out, args.tracking_uri)
    if uri.startswith("sqlite:"):  # a busy port, before the sync's seconds
        check_port(args.host, args.port)
    if not uri.startswith("sqlite:"):
        print(_sync(args.out, args.storage, uri).line(), file=sys.stderr)  # every folder opens: its ledger is the truth
        experiment_id = prepare_experiment(uri, args.out)[0]
        print(f"The tracking server is the UI. The comparison: {uri.rstrip('/')}/#/experiments/"
              f"{experiment_id}/runs?{ui_url('h', 0, experiment_id).split('?', 1)[1]}")
        return 0
    has_display = sys.platform in ("darwin", "win32") or bool(os.environ.get("DISPLAY") or
                                                             os.environ.get("WAYLAND_DISPLAY"))
    # syncs too (or finds nothing to sync), while its server starts: tracking/ui.py
    return run_ui(uri, args.out, args.host, args.port, open_browser=has_display and not args.no_browser,
                  storage=args.storage)


def cmd_layers(args: argparse.Namespace) -> int:
    from normbench.layers import get_spec, list_layers
    from normbench.layers.listing import layer_table

    names = list_layers(args.pattern)
    if not names:
        print(f"normbench: no layer matches {args.pattern!r}; `normbench layers` lists them all", file=sys.stderr)
        return 1
    print(layer_table([get_spec(n) for n in names]))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    if args.suite is not None:
        from normbench.contracts.suite import load_suite
        from normbench.diagnostics.suite_cost import suite_cost

        if args.batch_size is not None or (args.compile != "auto" and not args.fuse) or args.dim != [192]:
            raise NormbenchError("bench SUITE: the batch, compile and width are the suite's; set them in the suite "
                                 "file, not with --batch-size, --compile or --dim")
        suite = load_suite(args.suite)
        out = args.out or OutputFolder.default_path(suite.name)
        if args.fuse:
            from normbench.diagnostics.fuse_bench import fuse_bench

            if min(args.fuse) < 1:
                raise NormbenchError(f"bench --fuse {' '.join(map(str, args.fuse))}: group sizes are 1 or more")
            if args.bench_workers and min(args.bench_workers) < 1:
                raise NormbenchError(f"bench --workers {' '.join(map(str, args.bench_workers))}: give 1 or more "
                                     "processes for each")
            workers, fused_workers = args.bench_workers or (None, None)
            print(fuse_bench(suite, out, sorted(set(args.fuse)), depths=args.depth, layers=args.layers,
                             device=args.device, repeats=args.repeats or 3, workers=workers,
                             fused_workers=fused_workers, compile=args.compile))
            return 0
        suite_cost(suite, out, depths=args.depth, layers=args.layers, device=args.device, repeats=args.repeats or 5)
        return 0
    from normbench.diagnostics.bench import run_bench

    run_bench(layers=args.layers, depths=args.depth or [12], dims=args.dim, batch_size=args.batch_size,
              device=args.device, compile_mode=args.compile, out_dir=args.out or Path("runs"), repeats=args.repeats)
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from normbench.diagnostics import MISSION_LAYERS
    from normbench.diagnostics.probe import grid, probe, probe_recipe, reshape, summarize, write_report
    from normbench.report.machine import machine_line

    if args.weights is not None:
        return _probe_weights(args)
    if args.suite is not None:
        suite, _ = _load(args)
        configs = {(c.config.model.layer, c.config.model.depth, c.config.model.embed_dim): c.config
                   for c in suite.cells()}  # one model per (layer, depth, dim); seeds and lrs do not change the init
        configs_list, name = list(configs.values()), suite.name
        if args.depth or args.dim or args.heads:  # the suite's rows at other shapes (a width sweep)
            configs_list = reshape(configs_list, args.depth, args.dim, args.heads)
            name += "".join(f"-{key}{'-'.join(map(str, values))}" for key, values in
                            (("depth", args.depth), ("dim", args.dim), ("heads", args.heads)) if values)
    else:
        layers, depths, dims = args.layers or list(MISSION_LAYERS), args.depth or [6, 36], args.dim or [64]
        configs_list = grid(layers, depths, dims, heads=args.heads)
        name = f"digits-dim{'-'.join(map(str, dims))}-depth{'-'.join(map(str, depths))}"
        name += f"-heads{'-'.join(map(str, args.heads))}" if args.heads else ""
    frame = probe(configs_list, batch_size=args.batch_size, device=args.device)
    print(summarize(frame).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    plugins = settings.current().layer_modules  # layers a plugin registered: the command needs them to rerun
    plugins_env = f"NORMBENCH_LAYER_MODULES={','.join(plugins)} " if plugins else ""
    header = [f"`{plugins_env}normbench probe {' '.join(sys.argv[2:])}`".strip(), "",
              f"- {probe_recipe(configs_list, args.batch_size)}", f"- {machine_line()}"]
    print(write_report(frame, args.out, name, header="\n".join(header)))
    return 0


def _probe_weights(args: argparse.Namespace) -> int:
    import re

    from normbench.diagnostics.probe import probe_weights, summarize, write_report
    from normbench.model.weights_file import read_metadata
    from normbench.report.machine import machine_line

    if args.suite is not None or args.layers:
        raise NormbenchError("probe --weights: probes the one model the file holds; drop the suite and --layers")
    if not args.weights.is_file():
        what = "a folder, not a file: name the weights.safetensors in it" if args.weights.is_dir() else "no such file"
        raise NormbenchError(f"probe --weights {args.weights}: {what}; keep_weights writes "
                             "CHECKPOINTS/<study>/<cell>/weights.safetensors")
    frame = probe_weights(args.weights, batch_size=args.batch_size, device=args.device)
    about = (read_metadata(args.weights) or {}).get("about", {})
    print(summarize(frame).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    header = [f"`normbench probe {' '.join(sys.argv[2:])}`".strip(), "",
              f"- weights: {args.weights} (cell {about.get('cell_id', '?')}, test top-1 {about.get('test_top1', '?')})",
              f"- {machine_line()}"]
    name = "weights-" + re.sub(r"[^A-Za-z0-9_-]+", "-", args.weights.parent.name or args.weights.stem).strip("-")
    print(write_report(frame, args.out, name, header="\n".join(header), trained=True))
    return 0


def _version() -> str:
    from normbench import __version__

    return __version__


COMMANDS = {"run": cmd_run, "tune": cmd_tune, "worker": cmd_worker, "leaderboard": cmd_leaderboard, "ui": cmd_ui,
            "layers": cmd_layers, "bench": cmd_bench, "probe": cmd_probe}
COMMANDS["ledger"] = cmd_ledger
COMMANDS["compare"] = cmd_compare
COMMANDS["sync"] = cmd_sync
