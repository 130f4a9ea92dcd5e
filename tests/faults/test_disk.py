"""Disk faults get a message naming the path, before training where it can be checked, and lose nothing."""

from __future__ import annotations

import os
import shutil

import pytest
from optuna.trial import TrialState

from normbench.cli import main
from tests.faults.helpers import assert_invariants, mount_tmpfs, remount_read_only, trials, unmount

CELLS = ["depth=1,layer=layernorm,lr=0.001,seed=0", "depth=1,layer=layerscale,lr=0.001,seed=0"]
TMPFS = "32m"  # room for a tiny suite's output folder and its grown rerun (figures, MLflow), quick to fill


def test_a_folder_where_leaderboard_md_goes_stops_before_training(write_suite, tmp_path, capsys):
    out = tmp_path / "out"
    (out / "leaderboard.md").mkdir(parents=True)
    assert main(["run", str(write_suite()), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{out / 'leaderboard.md'}: is a folder" in err and "Traceback" not in err
    assert not (out / "ledger.journal").exists()  # nothing trained, nothing written


def test_a_path_in_the_way_mid_run_keeps_every_finished_cell(write_suite, tmp_path, capsys, one_torch_thread,
                                                             monkeypatch):
    """leaderboard.md turns into a folder while the cells train: exit 2 naming it; the cells are in the ledger and
    the next run (once it is moved away) only writes the leaderboard."""
    from normbench.sweep.suite_run import SuiteRun

    out = tmp_path / "out"
    real = SuiteRun.finish

    def in_the_way(*args, **kwargs):
        (out / "leaderboard.md").mkdir()
        return real(*args, **kwargs)

    monkeypatch.setattr(SuiteRun, "finish", in_the_way)
    assert main(["run", str(write_suite()), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    # the path in the way, what is wrong with it, and what to do
    assert f"{out / 'leaderboard.md'}: Is a directory; free space or fix the path, then run the same command to " \
        "resume" in err, err
    assert sorted(t.user_attrs["cell_id"] for t in trials(out, "tiny") if t.state == TrialState.COMPLETE) == CELLS
    monkeypatch.setattr(SuiteRun, "finish", real)
    (out / "leaderboard.md").rmdir()
    assert main(["run", str(write_suite()), "--out", str(out), "--quiet"]) == 0
    assert_invariants(out, "tiny", CELLS)


def test_a_read_only_output_folder_stops_before_training(write_suite, tmp_path, capsys, one_torch_thread):
    out = tmp_path / "ro"
    path = write_suite()
    no_mount = mount_tmpfs(out, TMPFS)
    if no_mount is None:
        try:  # finished cells made elsewhere, copied in: no open file keeps the mount from turning read-only
            assert main(["run", str(path), "--out", str(tmp_path / "src"), "--quiet"]) == 0
            shutil.copytree(tmp_path / "src", out, dirs_exist_ok=True)
            remount_read_only(out, TMPFS)
            before = sorted(p.name for p in out.iterdir())
            assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2
            err = capsys.readouterr().err
            assert f"{out}: cannot write the output folder (Read-only file system)" in err
            assert "Traceback" not in err and sorted(p.name for p in out.iterdir()) == before
        finally:
            unmount(out)
    elif os.geteuid() != 0:
        out.chmod(0o555)
        try:
            assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2
            err = capsys.readouterr().err
            assert f"{out}: cannot write the output folder" in err and "Traceback" not in err
        finally:
            out.chmod(0o755)
    else:
        pytest.skip(f"root without mount ({no_mount}): neither a read-only mount nor permissions can make a folder "
                    "read-only")


def test_a_full_disk_mid_run_exits_2_and_keeps_finished_cells(write_suite, tmp_path, capsys, one_torch_thread):
    """Mid-run of a growing suite: its first cells are finished when the disk fills, then the grown suite is run.
    The run stops before training, saying what to do; the cells stay, and once there is room the run goes on.
    (A disk that fills mid-cell: tests/faults/test_full_disk.py.)"""
    out = tmp_path / "full"
    no_mount = mount_tmpfs(out, TMPFS)
    if no_mount is not None:
        pytest.skip(f"a full disk needs a small tmpfs at the output folder: {no_mount}")
    try:
        path = write_suite()
        assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
        filler = out / "filler"
        with open(filler, "wb") as f:  # fill every remaining byte
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        grown = write_suite(matrix={"depth": [1, 2], "layer": ["layernorm", "layerscale"], "lr": [1e-3],
                                    "seed": [0]})
        capsys.readouterr()
        code = main(["run", str(grown), "--out", str(out), "--quiet"])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err, err
        # the path, the cause, and what the user can do about it
        assert (f"{out}: cannot write the output folder (No space left on device); make it writable, free space, or "
                "pass another --out. Nothing was trained.") in err, err
        assert sorted(t.user_attrs["cell_id"] for t in trials(out, "tiny") if t.state == TrialState.COMPLETE) == CELLS
        assert TrialState.RUNNING not in [t.state for t in trials(out, "tiny")]
        filler.unlink()
        assert main(["run", str(grown), "--out", str(out), "--quiet"]) == 0
        assert_invariants(out, "tiny", sorted(CELLS + [c.replace("depth=1", "depth=2") for c in CELLS]))
    finally:
        unmount(out)
