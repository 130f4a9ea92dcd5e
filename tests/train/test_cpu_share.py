"""normbench.train.cpu_share: the workers training on one CPU split its cores; a dead worker stops counting at once;
OMP_NUM_THREADS wins. Other processes are real processes (a lock held in another process is what `live` reads)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from normbench.train import cpu_share
from normbench.train.cpu_share import CpuShare
from tests.conftest import TINY

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from normbench.train.cpu_share import CpuShare
    share = CpuShare(Path(sys.argv[1]))
    print("signed", flush=True)
    time.sleep(120)
""")


def hold(folder: Path) -> subprocess.Popen:
    """Another process signed into `folder` (killed by the test)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "signed"
    return proc


@pytest.fixture
def restore_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_two_live_workers_split_the_cores_and_a_dead_one_stops_counting(tmp_path, monkeypatch, restore_threads):
    monkeypatch.setattr(cpu_share, "cores", lambda: 4)
    torch.set_num_threads(1)  # what the caller had: given back at close
    mine = CpuShare(tmp_path)
    assert mine.live() == 1 and mine.apply() == 4 and torch.get_num_threads() == 4
    other = hold(tmp_path)
    try:
        assert mine.live() == 2 and mine.apply() == 2 and torch.get_num_threads() == 2
    finally:
        other.kill()
        other.wait()
    assert mine.live() == 1 and mine.apply() == 4  # killed -9: its lock went with it
    assert [p.name for p in tmp_path.iterdir()] == [mine.path.name]  # its file was swept
    mine.close()
    assert not any(tmp_path.iterdir()) and torch.get_num_threads() == 1


def test_more_workers_than_cores_get_one_thread_each(tmp_path, monkeypatch, restore_threads):
    monkeypatch.setattr(cpu_share, "cores", lambda: 2)
    mine, others = CpuShare(tmp_path), [hold(tmp_path) for _ in range(2)]
    try:
        assert mine.live() == 3 and mine.apply() == 1
    finally:
        for p in others:
            p.kill()
            p.wait()
        mine.close()


def test_omp_num_threads_wins(tmp_path, monkeypatch, restore_threads):
    monkeypatch.setattr(cpu_share, "cores", lambda: 4)
    torch.set_num_threads(3)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    share = CpuShare(tmp_path)
    assert share.apply() == 3 and torch.get_num_threads() == 3
    share.close()


def test_a_cpu_run_signs_in_while_it_trains_and_out_when_it_ends(write_suite, tmp_path, monkeypatch):
    # the worker loop takes a share before each cell: seen from inside the cell, its own file is there
    from normbench.sweep import worker

    monkeypatch.setattr(cpu_share, "FOLDER", tmp_path / "signers")
    seen = []
    real = worker.run_cell

    def spy(*args, **kwargs):
        seen.append(sorted(p.name for p in (tmp_path / "signers").iterdir()))
        return real(*args, **kwargs)

    monkeypatch.setattr(worker, "run_cell", spy)
    from normbench.cli import main

    suite = write_suite(matrix={"depth": [1], "layer": ["layernorm"], "lr": [1e-3], "seed": [0]})
    assert main(["run", str(suite), "--out", str(tmp_path / "out"), "--device", "cpu", "--quiet"]) == 0
    assert seen and all(names == [str(os.getpid())] for names in seen)
    assert not any((tmp_path / "signers").iterdir())  # signed out at the end


def test_a_folder_that_cannot_be_written_means_no_share_not_a_crash(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the folder should be: mkdir fails as on a read-only /tmp
    assert CpuShare.sign_in(blocker / "signers") is None


def test_a_run_started_mid_cell_halves_the_threads_at_the_next_epoch(write_suite, tmp_path, monkeypatch,
                                                                    restore_threads):
    # measured before: a run that signed in while another was mid-cell left that one on every core for its whole
    # 80-epoch cell (12 epochs in 10 minutes); the share is now taken again after each epoch
    from normbench.cli import main
    from normbench.sweep import worker

    folder = tmp_path / "signers"
    monkeypatch.setattr(cpu_share, "FOLDER", folder)
    monkeypatch.setattr(cpu_share, "cores", lambda: 2)
    threads_after_epoch, others = [], []
    real_train_cell = worker.train_cell

    def train_cell(config, *, on_epoch, **kwargs):
        def watched(record):
            stop = on_epoch(record)
            threads_after_epoch.append(torch.get_num_threads())
            if not others:  # a second run arrives after the first epoch
                others.append(hold(folder))
            return stop
        return real_train_cell(config, on_epoch=watched, **kwargs)

    monkeypatch.setattr(worker, "train_cell", train_cell)
    suite = write_suite(matrix={"depth": [1], "layer": ["layernorm"], "lr": [1e-3], "seed": [0]},
                        train={**TINY["train"], "epochs": 3})
    try:
        assert main(["run", str(suite), "--out", str(tmp_path / "out"), "--device", "cpu", "--quiet"]) == 0
    finally:
        for p in others:
            p.kill()
            p.wait()
    assert threads_after_epoch == [2, 1, 1]
