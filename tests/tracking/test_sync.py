"""`normbench sync`: MLflow rebuilt from the ledger. The published converged folder synced into a fresh store: one
finished run per results.csv row with its score (and one failed run per attempt that trained or crashed first) and a
point per epoch at step = optimizer steps; a second sync adds nothing; deleting the store and syncing rebuilds it;
`normbench ui` opens the folder. A run logged live and cut short is completed in place, never duplicated. The pandas
example in docs/usage.md gives the leaderboard's scores."""

from __future__ import annotations

import io
import math
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from optuna.trial import TrialState

from normbench.cli import main
from normbench.store.journal import ledger_identity
from normbench.store.ledger import Ledger
from normbench.tracking.sync import sync
from normbench.tracking.tracker import Tracker
from tests.tracking.ledgers import (
    REPO,
    STEPS_PER_EPOCH,
    copy_converged,
    fail_trial,
    history,
    live_run,
    write_ledger,
)

SUITE = "depth-sweep-digits-converged"


def cells(out: Path, experiment: str) -> dict[str, object]:
    """cell_id -> the run of the suite's experiment that is not a failed attempt (the parent `leaderboard` run left
    out); one such run per cell asserted (a cell's other runs are attempts that failed before it)."""
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id], max_results=50_000)
    latest = [r for r in runs if r.data.tags.get("kind") != "leaderboard" and r.info.status != "FAILED"]
    found = {r.data.tags["cell_id"]: r for r in latest}
    assert len(found) == len(latest), "a cell has two runs that are not failed attempts"
    return found


def attempts(out: Path) -> int:
    """The ledger's attempts that get a run: every finished trial, and every failed one that trained an epoch or
    recorded its crash (not a duplicate claim or a cell failed for good: the ledger's bookkeeping)."""
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(out / "ledger.journal")))
    count = 0
    for summary in optuna.get_all_study_summaries(storage):
        for t in optuna.load_study(study_name=summary.study_name, storage=storage).trials:
            count += t.state == TrialState.COMPLETE or (t.state == TrialState.FAIL and bool(
                t.intermediate_values or "error" in t.user_attrs))
    return count


@pytest.fixture(scope="module")
def converged(tmp_path_factory) -> Path:
    """A copy of the converged folder at <tmp>/results/<name> (README's example path), synced once."""
    out = copy_converged(tmp_path_factory.mktemp("published") / "results" / SUITE)
    summary = sync(out)
    assert (summary.added, summary.completed, summary.present) == (attempts(out), 0, 0), summary.line()
    return out


def test_every_cell_of_the_converged_folder_is_a_run_with_its_score_and_its_epochs(converged):
    csv = pd.read_csv(converged / "results.csv")
    runs = cells(converged, SUITE)
    assert sorted(runs) == sorted(csv["cell_id"])
    client = MlflowClient(f"sqlite:///{converged / 'mlflow.db'}")
    for row in csv.itertuples():
        run = runs[row.cell_id]
        assert run.info.status == "FINISHED" and run.data.tags["role"] == row.role
        # the leaderboard's score, unrounded: a mean in MLflow is the leaderboard's
        assert run.data.metrics["test_top1"] == pytest.approx(row.score, abs=1e-6)
        assert run.data.metrics["val_top1_final"] == pytest.approx(row.select, abs=1e-6)
        if row.status == "ok":
            assert run.data.metrics["test_top1"] == pytest.approx(row.test_top1, abs=1e-6)
        curve = client.get_metric_history(run.info.run_id, "val_top1")
        assert len(curve) == row.epochs_run  # a point per epoch
        assert max(m.step for m in curve) == row.epochs_run * row.steps_per_epoch  # at step = optimizer steps
    assert {r.data.params["lr"] for r in runs.values()} >= {"0.001", "0.00316"}
    # the recipe's epochs, from suite.yaml; the convergence check's cells carry theirs as an axis (2x)
    epochs = {(r.data.tags["role"], r.data.params.get("train.epochs", r.data.params.get("epochs")))
              for r in runs.values()}
    assert epochs == {("select", "40"), ("report", "40"), ("budget", "80")}


def test_the_smoke_folder_synced_by_the_cli_keeps_every_score_at_full_precision(tmp_path, capsys):
    """`normbench sync` of a published folder: each run's test_top1 and val_top1_final are results.csv's, unrounded
    (a mean computed in MLflow is the leaderboard's); no progress bar when stderr is no terminal."""
    out = tmp_path / "results" / "smoke"
    out.mkdir(parents=True)
    for name in ("ledger.journal", "suite.yaml", "results.csv"):
        shutil.copy2(REPO / "results" / "smoke" / name, out / name)
    assert main(["sync", str(out)]) == 0
    assert "it/s" not in capsys.readouterr().err
    csv = pd.read_csv(out / "results.csv")
    runs = cells(out, "smoke")
    assert sorted(runs) == sorted(csv["cell_id"])
    for row in csv.itertuples():
        metrics = runs[row.cell_id].data.metrics
        assert abs(metrics["test_top1"] - row.test_top1) < 1e-6 and abs(metrics["val_top1_final"] - row.select) < 1e-6
    assert any(round(v, 2) != v for v in csv["test_top1"])  # the folder has scores that rounding would change


def test_a_second_sync_adds_nothing(converged):
    before = cells(converged, SUITE)
    summary = sync(converged)
    assert (summary.added, summary.completed, summary.present, summary.replaced) == (0, 0, attempts(converged), 0)
    after = cells(converged, SUITE)
    assert {c: r.info.run_id for c, r in after.items()} == {c: r.info.run_id for c, r in before.items()}


def test_deleting_the_store_and_syncing_rebuilds_it(converged, capsys):
    (converged / "mlflow.db").unlink()
    shutil.rmtree(converged / "mlartifacts")
    assert main(["sync", str(converged)]) == 0
    line = capsys.readouterr().out.strip()
    assert "\n" not in line and f"{attempts(converged)} runs added, 0 completed, 0 already there" in line, line
    assert len(cells(converged, SUITE)) == len(pd.read_csv(converged / "results.csv"))
    client = MlflowClient(f"sqlite:///{converged / 'mlflow.db'}")
    parent = client.search_runs([client.get_experiment_by_name(SUITE).experiment_id], "tags.kind = 'leaderboard'")
    names = {Path(a.path).name for a in client.list_artifacts(parent[0].info.run_id)}
    assert {"leaderboard.md", "results.csv", "history.csv", "accuracy_vs_step.png"} <= names


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_normbench_ui_opens_the_published_folder_within_30_s(converged):
    port = _free_port()
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "normbench", "ui", str(converged), "--no-browser", "--port",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        answered = None
        while answered is None and time.monotonic() - started < 30 and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    answered = r.status
            except OSError:
                time.sleep(0.3)
        assert answered == 200, f"no answer within 30 s (exit code {proc.poll()})"
    finally:
        proc.terminate()  # SIGTERM: it stops its server as Ctrl-C does
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_run_logged_live_and_cut_short_is_completed_not_duplicated(tmp_path):
    out = tmp_path / "out"
    ids = write_ledger(out)
    identity = ledger_identity(Ledger(None, out).journal)
    tracker = Tracker(out, "tiny", parent_tags={"recipe": "r", "ledger": identity})  # as sweep/suite_run.py
    live = tracker.start(live_run(ids[0], {"depth": 1, "layer": "layernorm", "lr": 1e-3, "seed": 0, "role": "select"}))
    tracker.log_epoch(live, history(3)[0])  # then MLflow went away: no more epochs, no summary, never closed
    tracker.finish()
    [before] = cells(out, "tiny").values()
    assert before.info.status == "RUNNING"

    summary = sync(out)
    assert (summary.added, summary.completed, summary.present) == (1, 1, 0), summary.line()
    runs = cells(out, "tiny")
    assert sorted(runs) == sorted(ids)
    run = runs[ids[0]]
    assert run.info.run_id == before.info.run_id and run.info.status == "FINISHED"
    assert run.data.tags["ledger_state"] == "COMPLETE" and run.data.metrics["test_top1"] == 38.5
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "val_top1")]
    assert sorted(steps) == [STEPS_PER_EPOCH * e for e in (1, 2, 3)]  # the live epoch kept, not logged twice
    again = sync(out)
    assert (again.added, again.completed, again.present) == (0, 0, 2)


def test_a_cells_kept_weights_become_its_runs_artifact_once(tmp_path):
    out = tmp_path / "out"
    ids = write_ledger(out, kept=("layerscale",))
    weights = out / "checkpoints" / "run:tiny" / ids[1] / "weights.safetensors"
    weights.parent.mkdir(parents=True)
    weights.write_bytes(b"trained")
    sync(out)
    sync(out)  # a second sync attaches nothing twice
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    runs = cells(out, "tiny")
    assert [a.path for a in client.list_artifacts(runs[ids[1]].info.run_id)] == ["weights.safetensors"]
    assert not client.list_artifacts(runs[ids[0]].info.run_id)  # a cell that kept none


def test_a_trial_that_failed_mid_cell_gets_a_failed_run_with_its_epochs(tmp_path):
    out = tmp_path / "out"
    write_ledger(out, layers=("layernorm",))
    number = fail_trial(out, epochs_reported=2)
    sync(out)
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id], f"tags.trial = '{number}'")
    [run] = runs
    assert run.info.status == "FAILED" and run.data.tags["status"] == "failed"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val_top1")] == [4, 8]
    assert "test_top1" not in run.data.metrics


def test_a_diverged_cell_scores_0_and_keeps_a_point_per_epoch(tmp_path):
    out = tmp_path / "out"
    ids = write_ledger(out, layers=("layernorm", "rezero"), diverged=("rezero",))
    sync(out)
    run = cells(out, "tiny")[ids[1]]
    assert run.data.metrics["test_top1"] == 0.0 and run.data.metrics["val_top1_final"] == 0.0
    assert run.data.metrics["diverged"] == 1.0
    curve = MlflowClient(f"sqlite:///{out / 'mlflow.db'}").get_metric_history(run.info.run_id, "val_top1")
    assert len(curve) == 3 and math.isnan(curve[-1].value)


def test_a_run_is_tagged_with_the_device_torch_and_threads_its_cell_trained_on(tmp_path):
    # the ledger keeps them (a GPU cell synced on a CPU machine still says H200); a cell before 2026-11-26 has none
    out = tmp_path / "out"
    ids = write_ledger(out, layers=("layernorm", "rezero"), devices={"layernorm": "NVIDIA H200"})
    sync(out)
    runs = cells(out, "tiny")
    assert runs[ids[0]].data.tags["device"] == "NVIDIA H200"
    assert runs[ids[0]].data.tags["torch_version"] == "2.11.0+cu130"
    assert runs[ids[0]].data.tags["torch_threads"] == "2/1"  # a CPU cell's numbers depend on them
    assert "device" not in runs[ids[1]].data.tags and "torch_threads" not in runs[ids[1]].data.tags


def test_a_run_of_an_older_layout_is_replaced(tmp_path):
    """Runs logged by a normbench from before sync (epochs at step = epoch) are deleted and rebuilt."""
    out = tmp_path / "out"
    ids = write_ledger(out, layers=("layernorm",))
    sync(out)
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    [old] = cells(out, "tiny").values()
    client.delete_tag(old.info.run_id, "layout")
    summary = sync(out)
    assert (summary.added, summary.replaced) == (1, 1)
    assert cells(out, "tiny")[ids[0]].info.run_id != old.info.run_id


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["sync", str(tmp_path)]) == 2  # no ledger
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no ledger here" in err and "Traceback" not in err
    assert not (tmp_path / "ledger.journal").exists() and not (tmp_path / "mlflow.db").exists()
    assert main(["ui", str(tmp_path), "--port", str(_free_port()), "--no-browser"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no ledger here" in err

    out = tmp_path / "out"
    write_ledger(out, layers=("layernorm",))
    unreachable = f"http://127.0.0.1:{_free_port()}"
    for command in ("sync", "ui"):
        assert main([command, str(out), "--tracking-uri", unreachable]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and unreachable in err and "Traceback" not in err, err


def usage_pandas_example() -> str:
    """docs/usage.md's one ```python block that reads MLflow with pandas (README links to it)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "usage.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    [block] = [b for b in blocks if "mlflow.search_runs" in b]
    return block


def test_the_usage_docs_pandas_example_gives_the_leaderboards_scores(converged):
    """Run exactly the docs' block where it runs (the repository root: results/<name>/mlflow.db), here the synced
    copy's parent, then compare its `board` with results.csv's report rows."""
    code = usage_pandas_example() + "\nprint('BOARD', board.reset_index().to_json(orient='records'))\n"
    done = subprocess.run([sys.executable, "-c", code], cwd=converged.parents[1], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    assert done.returncode == 0, done.stderr
    board = pd.read_json(io.StringIO(done.stdout.split("BOARD ", 1)[1]), orient="records")
    csv = pd.read_csv(converged / "results.csv")
    report = csv[csv["role"] == "report"].groupby(["depth", "layer"]).agg(score=("score", "mean"), lr=("lr", "first"))
    assert len(board) == len(report) == csv.groupby(["depth", "layer"]).ngroups
    for row in board.to_dict("records"):
        expected = report.loc[(int(row["params.depth"]), row["params.layer"])]
        assert row["score"] == pytest.approx(expected["score"], abs=1e-6)  # each cell's score kept unrounded
        assert float(row["lr"]) == pytest.approx(expected["lr"]) and row["seeds"] == 4
    assert list(board["score"]) == sorted(board["score"], reverse=True)


def test_a_healthy_run_logs_every_cell_live_and_its_own_sync_finds_them_complete(write_suite, tmp_path, capsys,
                                                                                one_torch_thread):
    """Live logging is the fresh view during a run; when MLflow took every write, the sync at the run's end has
    nothing to add or complete (the worker's tracker calls: start, epochs, summary, close after the ledger)."""
    out = tmp_path / "out"
    assert main(["run", str(write_suite(train={"epochs": 3, "batch_size": 256, "warmup_epochs": 0})), "--out",
                 str(out)]) == 0
    err = capsys.readouterr().err
    assert "0 runs added, 0 completed, 2 already there" in err, err
    for run in cells(out, "tiny").values():
        assert run.info.status == "FINISHED" and run.data.tags["ledger_state"] == "COMPLETE"
        assert {"torch_version", "device"} <= set(run.data.tags)  # what only the live run knows


def test_a_run_made_twice_by_racing_syncs_is_kept_once(tmp_path):
    out = tmp_path / "out"
    ids = write_ledger(out, layers=("layernorm",))
    sync(out)
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    [complete] = cells(out, "tiny").values()
    twin_tags = {k: v for k, v in complete.data.tags.items() if k != "ledger_state"}  # another sync's, cut short
    twin = client.create_run(complete.info.experiment_id, tags=twin_tags).info.run_id
    summary = sync(out)
    assert (summary.replaced, summary.present, summary.added) == (1, 1, 0)
    assert cells(out, "tiny")[ids[0]].info.run_id == complete.info.run_id  # the complete one kept
    assert client.get_run(twin).info.lifecycle_stage == "deleted"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_sync_shows_tqdms_bar_on_a_terminal_only(monkeypatch):
    from normbench.tracking.sync import progress_bar

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert list(progress_bar([1, 2, 3], "smoke")) == [1, 2, 3]
    assert "MLflow sync smoke:" in terminal.getvalue() and "0/3" in terminal.getvalue()  # then cleared
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    assert list(progress_bar([1, 2, 3], "smoke")) == [1, 2, 3] and piped.getvalue() == ""
