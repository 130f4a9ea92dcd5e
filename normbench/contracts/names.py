"""Every name a suite leaves behind, written once: its studies in the ledger and the files of its output folder.

A suite's cells live in one ledger as Optuna studies: `run:<suite>` (the matrix), `bracket:<suite>:<round>` (lr
bracketing rounds, 1, 2, ...), `report:<suite>` (each row's chosen lr on the suite's fresh `report_seeds`),
`budget:<suite>` (the same on two report seeds at twice the epochs: the convergence check), `claims:<suite>` (the
claim rounds: more report seeds for the rows of a claim still open, contracts/claim_rounds.py),
`tune:<suite>:<point>` (one search per matrix point without seed and tuned keys), `confirm:<suite>` (each
search's best trials again on a second search seed, `tune.confirm_top`) and `tuned:<suite>` (the best configurations
re-run over the report seeds, else the matrix's). The output folder holds the ledger journal, the MLflow store and the
leaderboard files named below.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUN, BRACKET, REPORT, BUDGET, CLAIMS = "run", "bracket", "report", "budget", "claims"
TUNE, CONFIRM, TUNED = "tune", "confirm", "tuned"
# the studies whose cells score a folder (and are compared across folders); the others choose what they train
SCORING = (REPORT, BUDGET, CLAIMS, TUNED)


@dataclass(frozen=True)
class StudyNames:
    """The study names of one suite."""

    suite: str

    @property
    def run(self) -> str:
        return f"{RUN}:{self.suite}"

    def bracket(self, round_: int) -> str:
        return f"{BRACKET}:{self.suite}:{round_}"

    def bracket_round(self, name: str) -> int | None:
        """The round of a bracketing study of this suite, else None."""
        prefix = f"{BRACKET}:{self.suite}:"
        tail = name[len(prefix):] if name.startswith(prefix) else ""
        return int(tail) if tail.isdigit() else None

    def bracket_rounds(self, names: Iterable[str]) -> list[str]:
        """This suite's bracketing studies among `names`, in round order."""
        rounds = {n: r for n in names if (r := self.bracket_round(n)) is not None}
        return sorted(rounds, key=rounds.__getitem__)

    @property
    def report(self) -> str:
        return f"{REPORT}:{self.suite}"

    @property
    def budget(self) -> str:
        return f"{BUDGET}:{self.suite}"

    @property
    def claims(self) -> str:
        return f"{CLAIMS}:{self.suite}"

    def tune(self, point_id: str) -> str:
        return f"{TUNE}:{self.suite}:{point_id}"

    def tune_point(self, name: str) -> str | None:
        """The matrix point (`depth=12,layer=x`) a search study of this suite tunes, else None."""
        prefix = f"{TUNE}:{self.suite}:"
        return name[len(prefix):] if name.startswith(prefix) else None

    @property
    def confirm(self) -> str:
        """The tune's best trials of each search, trained again on a second search seed (`tune.confirm_top`)."""
        return f"{CONFIRM}:{self.suite}"

    @property
    def tuned(self) -> str:
        return f"{TUNED}:{self.suite}"


def study_kind(name: str) -> str:
    """The kind a study name starts with (`run`, `bracket`, `report`, `budget`, `claims`, `tune`, `tuned`), '' for
    none."""
    return name.split(":", 1)[0] if ":" in name else ""


def study_suite(name: str) -> str | None:
    """The suite a study name belongs to (`<kind>:<suite>[:...]`), None for a name of another shape."""
    parts = name.split(":")
    return parts[1] if len(parts) > 1 else None


def suites_in(study_names: Iterable[str]) -> list[str]:
    """The suites that have a run study among `study_names`, sorted."""
    return sorted({n.split(":", 1)[1] for n in study_names if n.startswith(f"{RUN}:")})


WEIGHTS_ATTR = "weights"  # a trial's user attr: its kept final weights' file, relative to the checkpoint folder
ADOPTED_ATTR = "adopted_from"  # a trial's user attr: the folder, study and trial it was copied from (sweep/adopt.py)
CHECKPOINT_ATTR = "checkpoint"  # a trial's user attr: its cell's last checkpoint (file, epoch, batch, step, ...)


@dataclass(frozen=True)
class OutputFolder:
    """A suite's output folder and the path of everything normbench writes there. By default `runs/<suite>`
    (`default_path`), which git ignores: only an explicit `--out results/NAME` publishes."""

    path: Path

    RUNS = "runs"  # the default folders' parent, relative to where normbench runs; .gitignore lists /runs/

    LEDGER = "ledger.journal"
    MLFLOW_DB = "mlflow.db"
    MLFLOW_ARTIFACTS = "mlartifacts"
    LOCKS = ".locks"
    CHECKPOINTS = "checkpoints"  # <study>/<cell id>/checkpoint.pt (and kept weights): sweep/checkpoints.py
    SUITE = "suite.yaml"
    LEADERBOARD = "leaderboard.md"
    RESULTS = "results.csv"
    HISTORY = "history.csv"  # every cell's epochs: a clean clone redraws every curve and learning-speed number
    CEILING = "ceiling.csv"  # simple models on the same splits (report/ceiling.py): computed once, then read
    TRANSFER = "transfer.csv"
    TRANSFER_RANKINGS = "transfer_rankings.csv"
    ACCURACY_VS_DEPTH = "accuracy_vs_depth.png"
    ACCURACY_VS_LR = "accuracy_vs_lr.png"
    ACCURACY_VS_STEP = "accuracy_vs_step.png"
    LR_SENSITIVITY = "lr_sensitivity.png"
    LR_VS_DEPTH = "lr_vs_depth.png"
    FIGURES = (ACCURACY_VS_DEPTH, ACCURACY_VS_LR, ACCURACY_VS_STEP, LR_SENSITIVITY, LR_VS_DEPTH)
    # the files a run writes (every figure has an .svg twin); a folder in the way of one is refused before training
    WRITTEN = (LEADERBOARD, RESULTS, HISTORY, SUITE, MLFLOW_DB, LEDGER, CEILING, TRANSFER, TRANSFER_RANKINGS,
               *FIGURES, *(name.replace(".png", ".svg") for name in FIGURES))
    WRITTEN_PATTERNS = ("telemetry_*.png", "telemetry_*.svg")  # one figure per telemetry quantity recorded

    @classmethod
    def default_path(cls, suite_name: str) -> Path:
        """Where `run`, `tune`, `worker` and `bench SUITE` write without --out: `runs/<suite>`, never `results/`."""
        return Path(cls.RUNS) / suite_name

    @classmethod
    def newest(cls, parent: Path | None = None) -> Path | None:
        """The output folder under `parent` (default runs/) whose ledger changed last, None if it holds none: the
        folder `normbench ui` opens when given none, the suite run last."""
        ledgers = [p for p in Path(parent or cls.RUNS).glob(f"*/{cls.LEDGER}") if p.is_file()]
        return max(ledgers, key=lambda p: p.stat().st_mtime).parent if ledgers else None

    @classmethod
    def writes(cls, name: str) -> bool:
        """Whether normbench writes a file of that name at the top of an output folder."""
        return name in cls.WRITTEN or any(fnmatch.fnmatchcase(name, p) for p in cls.WRITTEN_PATTERNS)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    ledger = property(lambda self: self.path / self.LEDGER)
    mlflow_db = property(lambda self: self.path / self.MLFLOW_DB)
    mlflow_artifacts = property(lambda self: self.path / self.MLFLOW_ARTIFACTS)
    locks = property(lambda self: self.path / self.LOCKS)
    checkpoints = property(lambda self: self.path / self.CHECKPOINTS)
    suite = property(lambda self: self.path / self.SUITE)
    leaderboard = property(lambda self: self.path / self.LEADERBOARD)
    results = property(lambda self: self.path / self.RESULTS)
    history = property(lambda self: self.path / self.HISTORY)
    ceiling = property(lambda self: self.path / self.CEILING)

    def saved_suite(self) -> dict[str, Any]:
        """OUT/suite.yaml's YAML ({} when there is none): its name and sections, unvalidated, for `normbench ui`,
        `sync` and the refusal of another suite's folder. Read by the one suite reader (contracts/suite_file.py), so
        a file there that is not UTF-8, not YAML or not a mapping is the same one line (SuiteError, exit 2) as when
        `leaderboard` loads it."""
        from normbench.contracts.suite_file import read_suite_mapping

        return read_suite_mapping(self.suite) if self.suite.exists() else {}

    @staticmethod
    def telemetry_figure(quantity: str) -> str:
        return f"telemetry_{quantity}.png"
