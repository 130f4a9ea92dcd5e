"""Small ledgers written directly (no training), for the tracking tests: a folder with a suite.yaml and a journal
whose `run:tiny` study holds finished cells with results and histories, as the worker records them."""

from __future__ import annotations

import shutil
from pathlib import Path

import optuna
import yaml
from optuna.trial import TrialState

from normbench.contracts.suite import cell_id
from normbench.store.ledger import Ledger
from normbench.tracking.run_record import TrialRun, axes_of, run_name, run_tags
from tests.conftest import TINY

REPO = Path(__file__).resolve().parents[2]
CONVERGED = REPO / "results" / "depth-sweep-digits-converged"
STEPS_PER_EPOCH = 4


def copy_converged(to: Path) -> Path:
    """The published converged folder's files (ledger, suite, leaderboard files), without any MLflow store."""
    to.mkdir(parents=True)
    for path in CONVERGED.iterdir():
        if path.is_file() and path.name != "mlflow.db":
            shutil.copy2(path, to / path.name)
    return to


def live_run(cell: str, params: dict, study: str = "run:tiny", trial: int = 0) -> TrialRun:
    """A claimed cell's run as the worker starts it (run_record.trial_run's shape), for tests that drive a Tracker
    without a ledger trial: `params` as logged, their axes as tags."""
    return TrialRun(cell, run_name(cell), run_tags(cell, axes_of(params), study, trial),
                    {k: str(v) for k, v in params.items()})


def history(epochs: int, diverged: bool = False) -> list[dict]:
    rows = [{"epoch": e, "train_loss": 2.0 - 0.1 * e, "val_top1": 20.0 + 10 * e, "lr": 1e-3, "grad_norm": 1.0,
             "images_per_sec": 100.0, "step": (e + 1) * STEPS_PER_EPOCH, "images": (e + 1) * 256}
            for e in range(epochs)]
    if diverged:
        rows[-1].update(val_top1=None, train_loss=None)
    return rows


def result(epochs: int, diverged: bool = False, device: str = "") -> dict:
    ok = not diverged
    return {"status": "diverged" if diverged else "ok", "best_val_top1": 40.0, "final_val_top1": 40.0,
            "val_top1": 40.0 if ok else None, "test_top1": 38.5 if ok else None, "best_val_epoch": 2,
            "train_size": 1077, "val_size": 360, "test_size": 360, "num_classes": 10, "train_loss": 1.8,
            "epochs_run": epochs, "images_per_sec": 100.0, "params": 1234, "seconds": 3.0, "telemetry": [],
            **({"device": device, "torch_version": "2.11.0+cu130", "torch_threads": "2/1"} if device else {})}


def write_ledger(out: Path, layers: tuple[str, ...] = ("layernorm", "layerscale"), epochs: int = 3,
                 diverged: tuple[str, ...] = (), kept: tuple[str, ...] = (), devices: dict[str, str] | None = None
                 ) -> list[str]:
    """`out` with suite.yaml (TINY) and a ledger of one finished cell per layer; returns the cell ids. The cells of
    the `kept` layers record kept weights (`run:tiny/<cell id>/weights.safetensors` under OUT/checkpoints)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "suite.yaml").write_text(yaml.safe_dump({**TINY, "matrix": {**TINY["matrix"], "layer": list(layers)}}))
    study = Ledger(None, out).study("run:tiny")
    study.set_user_attr("recipe", "r")
    ids = []
    for layer in layers:
        axes = {"depth": 1, "layer": layer, "lr": 1e-3, "seed": 0}
        gone = layer in diverged
        study.add_trial(optuna.trial.create_trial(
            state=TrialState.COMPLETE, value=40.0, user_attrs={
                "cell_id": cell_id(axes), "axes": axes, "result": result(epochs, gone, (devices or {}).get(layer, "")),
                "history": history(epochs, gone), "worker_host": "h",
                **({"weights": f"run:tiny/{cell_id(axes)}/weights.safetensors"} if layer in kept else {})},
            intermediate_values={(e + 1) * STEPS_PER_EPOCH: 20.0 + 10 * e for e in range(epochs)}))
        ids.append(cell_id(axes))
    return ids


def fail_trial(out: Path, layer: str = "rezero", epochs_reported: int = 2) -> int:
    """A FAIL trial of `run:tiny` that trained `epochs_reported` epochs (a worker killed mid-cell); its number."""
    study = Ledger(None, out).study("run:tiny")
    axes = {"depth": 1, "layer": layer, "lr": 1e-3, "seed": 0}
    study.add_trial(optuna.trial.create_trial(
        state=TrialState.FAIL, user_attrs={"cell_id": cell_id(axes), "axes": axes, "worker_pid": 1},
        intermediate_values={(e + 1) * STEPS_PER_EPOCH: 20.0 + 10 * e for e in range(epochs_reported)}))
    return study.get_trials(deepcopy=False)[-1].number
