"""Disk faults get a message naming the path, before training where it can be checked, and lose nothing."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from optuna.trial import TrialState

from normbench.cli import main
from tests.faults.helpers import assert_invariants, trials

CELLS = ["depth=1,layer=layernorm,lr=0.001,seed=0", "depth=1,layer=layerscale,lr=0.001,seed=0"]


def _mount_tmpfs(path, *options: str) -> bool:
    """A small tmpfs at `path` (root only, as in a container); False where mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    opts = ",".join(["size=4m", *options])
    return subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True).returncode == 0


def _umount(path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


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
    assert "leaderboard.md" in err and "Traceback" not in err and "resume" in err
    assert sorted(t.user_attrs["cell_id"] for t in trials(out, "tiny") if t.state == TrialState.COMPLETE) == CELLS
    monkeypatch.setattr(SuiteRun, "finish", real)
    (out / "leaderboard.md").rmdir()
    assert main(["run", str(write_suite()), "--out", str(out), "--quiet"]) == 0
    assert_invariants(out, "tiny", CELLS)


def test_a_read_only_output_folder_stops_before_training(write_suite, tmp_path, capsys, one_torch_thread):
    out = tmp_path / "ro"
    path = write_suite()
    if _mount_tmpfs(out):
        try:  # finished cells made elsewhere, copied in: no open file keeps the mount from turning read-only
            assert main(["run", str(path), "--out", str(tmp_path / "src"), "--quiet"]) == 0
            shutil.copytree(tmp_path / "src", out, dirs_exist_ok=True)
            subprocess.run(["mount", "-o", "remount,ro", str(out)], check=True)
            before = sorted(p.name for p in out.iterdir())
            assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2
            err = capsys.readouterr().err
            assert f"{out}: cannot write the output folder (Read-only file system)" in err
            assert "Traceback" not in err and sorted(p.name for p in out.iterdir()) == before
        finally:
            _umount(out)
    elif os.geteuid() != 0:
        out.mkdir()
        out.chmod(0o555)
        try:
            assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2
            err = capsys.readouterr().err
            assert f"{out}: cannot write the output folder" in err and "Traceback" not in err
        finally:
            out.chmod(0o755)
    else:
        pytest.skip("root without mount: neither a read-only mount nor permissions can make a folder read-only")


def test_a_full_disk_mid_run_exits_2_and_keeps_finished_cells(write_suite, tmp_path, capsys, one_torch_thread):
    out = tmp_path / "full"
    if not _mount_tmpfs(out):
        pytest.skip("needs a small tmpfs (root in a container) to fill a disk")
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
        code = main(["run", str(grown), "--out", str(out), "--quiet"])
        err = capsys.readouterr().err
        assert code in (2, 3) and "Traceback" not in err, err
        assert "No space left on device" in err or "disk" in err.lower() or "full" in err.lower(), err
        assert sorted(t.user_attrs["cell_id"] for t in trials(out, "tiny") if t.state == TrialState.COMPLETE)[:2] \
            == CELLS
        filler.unlink()
        assert main(["run", str(grown), "--out", str(out), "--quiet"]) == 0
        assert_invariants(out, "tiny", sorted(CELLS + [c.replace("depth=1", "depth=2") for c in CELLS]))
    finally:
        _umount(out)
