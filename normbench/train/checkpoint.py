"""A cell's checkpoint: everything the rest of the cell depends on, written whole or not at all, read back or refused.

A checkpoint holds the model, the optimizer (the lr schedule is a pure function of the step counter, so the counter is
its state), every RNG state (torch CPU and the device's, NumPy's, Python's, and the data pass's generator when an
epoch was cut short), the step and epoch counters, the history and telemetry so far, and the counters of the epoch
in progress. There is no AMP loss scaler to keep (bf16 autocast needs none), and the auxiliary losses keep nothing
between optimizer steps (their terms are popped with every micro-batch). On CPU a cell resumed from its checkpoint
ends bit for bit where the uninterrupted cell ends.

`write` is atomic: a temporary file beside the target, fsync, rename over the previous checkpoint, fsync of the
folder; the previous one stays whole until the new one is. `read` refuses (CheckpointUnusable, with the reason in
a few words) a file that is truncated or unreadable, of another format or normbench version, or of another recipe.
Knows nothing of the ledger: the worker (sweep/checkpoints.py) decides where checkpoints live and records them.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from normbench.contracts.recipe import CellConfig
from normbench.train.cell_state import CellProgress, EpochSoFar

Fit = Any  # train/loop.py's Fit (not imported: the loop imports this module)

FORMAT = 1  # bumped when the layout below changes: an older file is set aside, never misread


class CheckpointUnusable(Exception):
    """A checkpoint that must not be resumed from; the message says why in a few words."""


# recipe keys added after checkpoints were first written, at their default: left out of the fingerprint, so that a
# checkpoint written before a key existed (which trained under its default) still resumes
LATER_DEFAULTS = {"train.muon_momentum": None, "train.adam_beta2": None}


def recipe_of(config: CellConfig) -> str:
    """Fingerprint of one cell's recipe (model, train and data; not RUN_KEYS): a checkpoint of another is refused."""
    recipe = {k: v for k, v in config.flat().items() if k not in LATER_DEFAULTS or v != LATER_DEFAULTS[k]}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _version() -> str:
    from normbench import __version__

    return __version__


# ------------------------------------------------------------------------------------------------ capture / restore

def _rng_states(dev: torch.device) -> dict[str, Any]:
    np_state = np.random.get_state()
    return {"torch": torch.get_rng_state(),
            "device": torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None,
            "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
            "python": [random.getstate()[0], list(random.getstate()[1]), random.getstate()[2]]}


def _set_rng_states(states: dict[str, Any], dev: torch.device) -> None:
    torch.set_rng_state(states["torch"])
    if dev.type == "cuda" and states["device"] is not None:
        torch.cuda.set_rng_state(states["device"], dev)
    name, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))


def capture(fit: Fit, recipe: str, so_far: EpochSoFar | None = None) -> dict[str, Any]:
    """The state of `fit` between two optimizer steps: at an epoch's end (`so_far` None) or inside one."""
    fit.telemetry.collect()  # the queued steps to the host: a checkpoint is a sync point anyway
    progress = fit.progress
    epoch = asdict(so_far) if so_far is not None else None
    if epoch is not None:
        epoch["loss_sum"], epoch["grad_norm_sum"] = so_far.loss_sum.cpu(), so_far.grad_norm_sum.cpu()  # type: ignore[union-attr]
    return {
        "format": FORMAT, "normbench": _version(), "torch": str(torch.__version__), "recipe": recipe,
        "written": time.time(), "world": progress.world,
        # cloned: a fused member's tensors are views of the group's stacked ones (train/stacked.py), and torch.save
        # would write each view's whole storage, every member's
        "model": {k: v.detach().clone() for k, v in fit.model.state_dict().items()},
        "optimizer": _own_storage(fit.optimizer.state_dict()), "step": fit.step,
        "rng": _rng_states(fit.dev),
        "progress": {**asdict(progress), "history": [dict(h) for h in progress.history],
                     "seconds_before": progress.seconds_before + fit.attempt_seconds()},
        "telemetry": fit.telemetry.samples(),
        "epoch": epoch,
    }


def _own_storage(optimizer: dict[str, Any]) -> dict[str, Any]:
    """The optimizer's state with each view cloned: a fused member's Muon momentum is its slice of the group's stacked
    buffer (train/stacked_muon.py), and torch.save would write the whole buffer, every member's."""
    state = {p: {k: v.clone() if isinstance(v, torch.Tensor) and v._base is not None else v for k, v in s.items()}
             for p, s in optimizer["state"].items()}
    return {**optimizer, "state": state}


def restore(fit: Fit, state: dict[str, Any]) -> EpochSoFar | None:
    """Put a checkpoint's state into a freshly built `fit` (same recipe); returns the epoch cut short, if any."""
    fit.model.load_state_dict(state["model"])
    fit.optimizer.load_state_dict(state["optimizer"])
    fit.step = int(state["step"])
    world = fit.progress.world
    fit.progress = CellProgress(**state["progress"])
    fit.progress.world = world
    fit.telemetry.load_samples(state["telemetry"])
    _set_rng_states(state["rng"], fit.dev)
    epoch = state["epoch"]
    if epoch is None:
        return None
    so_far = EpochSoFar(**epoch)
    so_far.loss_sum, so_far.grad_norm_sum = so_far.loss_sum.to(fit.dev), so_far.grad_norm_sum.to(fit.dev)
    return so_far


def where(state: dict[str, Any]) -> str:
    """'epoch 3' or 'epoch 3, batch 5': where a checkpoint's cell goes on."""
    epoch = state["epoch"]
    if epoch is None:
        return f"epoch {state['progress']['next_epoch']}"
    return f"epoch {epoch['epoch']}, batch {epoch['micro']}"


# ---------------------------------------------------------------------------------------------------- the file

def write(path: Path, state: dict[str, Any]) -> int:
    """Write `state` to `path` atomically; returns its size in bytes. The previous file stays until this one is
    whole: a kill at any moment leaves one or the other, never a torn file under `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            try:
                torch.save(state, f)
            except RuntimeError as e:  # torch's zip writer reports a refused write so ("unexpected pos ...")
                raise _refused(tmp, e) from None
            f.flush()
            os.fsync(f.fileno())
        size = tmp.stat().st_size
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_folder(path.parent)
    return size


def _refused(tmp: Path, error: RuntimeError) -> OSError:
    """torch.save's RuntimeError for a write the disk refused, as the OSError it is (a full disk: ENOSPC), so the
    keeper warns and the cell trains on instead of failing."""
    full = os.statvfs(tmp.parent).f_bavail == 0
    code = errno.ENOSPC if full else errno.EIO
    return OSError(code, f"{os.strerror(code)}; torch.save: {' '.join(str(error).split())}"[:300], str(tmp))


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform or filesystem without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read(path: Path, recipe: str) -> dict[str, Any]:
    """The checkpoint at `path` if it can be resumed under `recipe`; raises CheckpointUnusable saying why not."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as e:  # truncated, not a checkpoint, unreadable: torch says it many ways
        raise CheckpointUnusable(f"unreadable ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})"
                                 ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointUnusable(f"format {found}, this normbench reads {FORMAT}")
    if state.get("normbench") != _version():
        raise CheckpointUnusable(f"written by normbench {state.get('normbench')}, this is {_version()}")
    if state.get("recipe") != recipe:
        raise CheckpointUnusable(f"written under another recipe ({state.get('recipe')}, this cell's is {recipe})")
    return state


# ---------------------------------------------------------------------------------------------------- the keeper

@dataclass
class Keeper:
    """Writes one cell's checkpoints: at an epoch's end once `interval_s` has passed since the last one (or since
    the attempt started), and when asked to stop (SIGTERM); none at all when `interval_s` is 0. `saved` is told of
    each write (the worker records it on the cell's trial); `may_write` is asked first (False once another worker
    took the cell over). With `weights`, the finished cell's weights are kept there (model/weights_file.py)."""

    path: Path
    recipe: str
    interval_s: float
    saved: Callable[[dict[str, Any]], None] | None = None
    may_write: Callable[[], bool] = lambda: True
    weights: Path | None = None
    label: str = ""  # the cell's id, for the kept weights' metadata
    last: float = field(default_factory=time.monotonic)
    writes: int = 0
    write_seconds: float = 0.0  # spent writing, for the cost line
    _warned: bool = False

    def due(self) -> bool:
        return self.interval_s > 0 and time.monotonic() - self.last >= self.interval_s

    def save(self, fit: Fit, so_far: EpochSoFar | None = None) -> bool:
        """Write the checkpoint of `fit` now; False (after one warning line per cell) if it could not be written."""
        if self.interval_s <= 0 or not self.may_write():
            return False
        started = time.perf_counter()
        try:
            state = capture(fit, self.recipe, so_far)
            size = write(self.path, state)
        except OSError as e:  # a full or read-only disk: the cell goes on, it only loses the chance to resume
            if not self._warned:
                self._warned = True
                print(f"normbench: warning: could not write the checkpoint {self.path} ({e.strerror or e}); the cell "
                      "trains on, but a stop now would train it again from its last checkpoint", file=sys.stderr,
                      flush=True)
            with contextlib.suppress(OSError):
                self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp").unlink(missing_ok=True)
            return False
        self.last = time.monotonic()
        self.writes += 1
        self.write_seconds += time.perf_counter() - started
        if self.saved is not None:
            self.saved({"epoch": fit.progress.next_epoch if so_far is None else so_far.epoch,
                        "batch": 0 if so_far is None else so_far.micro, "step": fit.step, "recipe": self.recipe,
                        "bytes": size, "written": state["written"]})
        return True

    def keep_weights(self, fit: Fit, config: CellConfig, result: dict[str, Any]) -> Path | None:
        """The finished cell's weights as safetensors at `weights` (when asked), with the recipe and `result`
        (test and val top-1) in the file's metadata; None when not asked or not written (one warning line)."""
        if self.weights is None or not self.may_write():
            return None
        from normbench.model.weights_file import write_weights

        try:
            write_weights(fit.model, self.weights, config, img_size=fit.data.img_size, in_chans=fit.data.in_chans,
                          num_classes=fit.data.num_classes, data_cfg=fit.data.timm_data_cfg(),
                          about={"cell_id": self.label, **result, "normbench": _version()})
        except OSError as e:
            print(f"normbench: warning: could not keep the weights in {self.weights} ({e.strerror or e})",
                  file=sys.stderr, flush=True)
            return None
        return self.weights
