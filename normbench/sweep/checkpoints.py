"""Where a cell's checkpoints and kept weights live, how its trial records them, and whether a claimed cell resumes.

A checkpoint is a cache that saves work (the ledger stays the truth): `<study>/<cell id>/checkpoint.pt`, plus
`weights.safetensors` when the recipe keeps weights, under OUT/checkpoints or `--checkpoint-dir` (shared by every
worker). The trial's user attr `checkpoint` records each write (`file` relative to that folder, which another machine
may mount elsewhere); a re-queued trial carries it (store/ledger.py `requeue`). An unusable one (truncated, another
recipe or normbench version) becomes `checkpoint.pt.set-aside` with one warning and the cell starts over."""

from __future__ import annotations

import hashlib
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from normbench.contracts.names import CHECKPOINT_ATTR, WEIGHTS_ATTR, OutputFolder
from normbench.contracts.recipe import CellConfig
from normbench.store.claim import Claim
from normbench.store.ledger import worker_host
from normbench.sweep.progress import duration
from normbench.train.checkpoint import CheckpointUnusable, Keeper, read, recipe_of, where

CHECKPOINT_FILE = "checkpoint.pt"
WEIGHTS_FILE = "weights.safetensors"
SET_ASIDE = ".set-aside"


def _part(name: str) -> str:
    """A study name or cell id as one path component: readable, no separators, bounded (long tune labels)."""
    safe = re.sub(r"[^A-Za-z0-9._=,+-]", "_", name)
    if len(safe) > 120:
        safe = f"{safe[:100]}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"
    return safe


@dataclass(frozen=True)
class CheckpointFolder:
    """The folder a suite's workers keep checkpoints in."""

    root: Path

    @classmethod
    def of(cls, out_dir: Path, checkpoint_dir: Path | None) -> CheckpointFolder:
        return cls(Path(checkpoint_dir) if checkpoint_dir is not None else OutputFolder(out_dir).checkpoints)

    def cell(self, study: str, cell_id: str) -> Path:
        return self.root / _part(study) / _part(cell_id)

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()


@dataclass
class CellCheckpoints:
    """One claimed cell's checkpoint file, kept-weights file and ledger record."""

    folder: CheckpointFolder
    study: str
    cell_id: str
    config: CellConfig
    resumed_from: Path | None = None  # the file `resume` continued from (the trial's record may name another)

    @property
    def path(self) -> Path:
        return self.folder.cell(self.study, self.cell_id) / CHECKPOINT_FILE

    @property
    def weights(self) -> Path:
        return self.folder.cell(self.study, self.cell_id) / WEIGHTS_FILE

    def resume(self, trial: optuna.Trial, world: int) -> dict[str, Any] | None:
        """The checkpoint this cell goes on from (said in one line), or None (none, or set aside with a warning)."""
        record = trial.user_attrs.get(CHECKPOINT_ATTR) or {}
        path = self.folder.root / record["file"] if record.get("file") else self.path
        if not path.is_file():
            path = self.path  # the record names a file this machine does not have: look where it would be
        if not path.is_file() or self.config.train.checkpoint_minutes <= 0:
            return None
        try:
            state = read(path, recipe_of(self.config))
        except (CheckpointUnusable, OSError) as e:
            aside = path.with_name(path.name + SET_ASIDE)
            try:
                path.replace(aside)
            except OSError:
                aside = path
            print(f"normbench: warning: cell {self.cell_id}: its checkpoint {path} is {e}; set aside as {aside.name}, "
                  "the cell starts over", file=sys.stderr, flush=True)
            return None
        self.resumed_from = path
        saved = state["progress"]["seconds_before"]
        ago = time.time() - float(state["written"])
        was = int(state.get("world", 1))
        processes = "" if was == world else (
            f"; written under {was} process(es), resumed under {world}: the same global batches and schedule go on "
            f"(bit-for-bit equality with an uninterrupted run needs the same process count)")
        print(f"normbench: cell {self.cell_id} resumes from its checkpoint at {where(state)} (written "
              f"{duration(ago)} ago): {duration(saved)} of training saved{processes}", file=sys.stderr, flush=True)
        return state

    def keeper(self, claim: Claim) -> Keeper:
        """Writes this cell's checkpoints (none once another worker holds it) and records each on its trial, best
        effort: the file is the cache, the record only finds it faster and tells a person where it is."""
        tc = self.config.train

        def saved(info: dict[str, Any]) -> None:
            try:
                record = {"file": self.folder.relative(self.path), **info, "host": worker_host()}
                claim.set_attr(CHECKPOINT_ATTR, record)
            except Exception:  # the ledger is away or the claim lost: the next epoch's call notices either
                pass

        return Keeper(path=self.path, recipe=recipe_of(self.config), interval_s=60.0 * tc.checkpoint_minutes,
                      saved=saved, may_write=claim.held,
                      weights=self.weights if tc.keep_weights == "final" else None,
                      label=self.cell_id)

    def before_finish(self, claim: Claim) -> Path | None:
        """Before the ledger's finish: clear the checkpoint record, record the kept weights' file (returned, if any)."""
        weights = self.weights if self.config.train.keep_weights == "final" and self.weights.is_file() else None
        try:
            if claim.trial.user_attrs.get(CHECKPOINT_ATTR):
                claim.set_attr(CHECKPOINT_ATTR, None)
            if weights is not None:
                claim.set_attr(WEIGHTS_ATTR, self.folder.relative(weights))
        except Exception:  # best effort: the ledger's finish just after says whether the claim still holds
            pass
        return weights

    def clean(self) -> None:
        """The cell is finished: its checkpoints go (the kept weights stay); an empty folder goes too."""
        folder = self.path.parent
        for path in (self.path, self.path.with_name(self.path.name + SET_ASIDE), *folder.glob(f".{CHECKPOINT_FILE}.*"),
                     *([self.resumed_from] if self.resumed_from else [])):
            path.unlink(missing_ok=True)
        try:
            folder.rmdir()
            folder.parent.rmdir()
        except OSError:  # not empty (kept weights, another cell), or gone
            pass

