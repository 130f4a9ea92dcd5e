"""Publish a sweep that finished in results/in-progress/: its ledger, suite and measured cost into results/<name>/,
its leaderboard regenerated there from them, and the in-progress folder and its queue line removed.

    python scripts/publish_in_progress.py depth-sweep-digits-modern [--unfinished]

Refuses (exit 2, nothing moved) while the sweep has cells left: queued, or about to be queued by the next bracketing
round, the report stage or a claim round (read by running the sweep's own next-stage rule on a copy of its ledger).
`--unfinished` publishes it as it stands. A folder already at results/<name> is replaced: its MLflow store (a view of
the old ledger) goes, the next `normbench leaderboard` or `ui` syncs a new one. What stays by hand: the folder's line
in results/README.md, tests/report/test_published_folders.py's PUBLISHED, the comparisons (`normbench compare`),
`python scripts/readme_results.py`, and what README.md and docs/results.md say the folder found.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from normbench.cli import main as normbench
from normbench.contracts.names import OutputFolder
from normbench.contracts.suite import Suite, load_suite
from normbench.store.ledger import Ledger
from normbench.sweep.run import cells_left, open_run_study, queue_next_stage

INPUTS = ("ledger.journal", "suite.yaml", "ceiling.csv")  # and cost-*: what `normbench leaderboard` reads
STALE = ("mlflow.db", "mlartifacts")  # the old ledger's MLflow view


def pending(suite: Suite, folder: Path) -> dict:
    """`{cell_id: axes}` the sweep still has to train, its next stage queued on a throwaway copy of the ledger."""
    with tempfile.TemporaryDirectory(prefix="normbench-publish-") as tmp:
        shutil.copy2(OutputFolder(folder).ledger, Path(tmp) / OutputFolder.LEDGER)
        ledger = Ledger(None, Path(tmp))
        queue_next_stage(suite, open_run_study(ledger, suite), ledger)
        return cells_left(suite, ledger)


def drop_queue_line(queue: Path, folder: Path) -> bool:
    """Remove the line that resumes `folder` from the queue file; whether there was one.

    The new queue is a new file renamed over the old: scripts/resume-in-progress.sh, possibly running, reads the queue
    through an open descriptor line by line, and a rewrite in place would shift the lines under its offset (it would
    skip or cut the line after the one it is on); renamed, it reads the old file to its end."""
    if not queue.is_file():
        return False
    lines = queue.read_text().splitlines(keepends=True)
    kept = [line for line in lines if line.split()[1:2] != [str(folder)]]
    fresh = queue.with_name(queue.name + ".new")
    fresh.write_text("".join(kept))
    fresh.replace(queue)
    return len(kept) < len(lines)


def publish(name: str, results: Path, *, unfinished: bool = False) -> int:
    source, target = results / "in-progress" / name, results / name
    if not OutputFolder(source).ledger.is_file() or not (source / "suite.yaml").is_file():
        print(f"publish_in_progress.py: {source} holds no ledger.journal and suite.yaml: nothing in progress by that "
              f"name (see {results / 'in-progress' / 'queue.txt'})", file=sys.stderr)
        return 2
    suite = load_suite(source / "suite.yaml")
    if (left := pending(suite, source)) and not unfinished:
        print(f"publish_in_progress.py: {name} has {len(left)} cell(s) left to train (e.g. {next(iter(left))}); "
              "resume it (scripts/resume-in-progress.sh) or pass --unfinished to publish it as it stands. Nothing "
              "was moved.", file=sys.stderr)
        return 2
    target.mkdir(parents=True, exist_ok=True)
    for stale in (*STALE, OutputFolder.LEDGER):
        path = target / stale
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    for path in [*(source / f for f in INPUTS), *source.glob("cost-*")]:
        if path.is_file():
            shutil.copy2(path, target / path.name)
    if normbench(["leaderboard", str(target)]) != 0:
        print(f"publish_in_progress.py: `normbench leaderboard {target}` failed; {source} is left in place",
              file=sys.stderr)
        return 1
    shutil.rmtree(source)
    dropped = drop_queue_line(results / "in-progress" / "queue.txt", source)
    print(f"published {target} ({'unfinished: ' + str(len(left)) + ' cells left' if left else 'finished'}); removed "
          f"{source}{' and its queue line' if dropped else ''}. By hand: results/README.md, PUBLISHED in "
          "tests/report/test_published_folders.py, `normbench compare`, `python scripts/readme_results.py`, and the "
          "prose of README.md and docs/results.md.")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="the folder's name under results/in-progress/, e.g. depth-sweep-digits-modern")
    parser.add_argument("--unfinished", action="store_true", help="publish even with cells left to train")
    parser.add_argument("--results", type=Path, default=Path("results"), help="the results folder (default: results)")
    args = parser.parse_args(argv)
    return publish(args.name, args.results, unfinished=args.unfinished)


if __name__ == "__main__":
    sys.exit(main())
