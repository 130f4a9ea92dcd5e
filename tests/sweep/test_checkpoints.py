"""Where a cell's checkpoints live and how a claimed cell decides to resume: the record on its trial finds the file
wherever another machine mounts the folder, a checkpoint of another process count resumes and says so, a finished
cell's checkpoints go and its kept weights stay."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.sweep.checkpoints import CHECKPOINT_ATTR, CellCheckpoints, CheckpointFolder
from normbench.train.checkpoint import Keeper, recipe_of
from normbench.train.loop import train_cell

CELL_ID = "depth=1,layer=layerscale,lr=0.001,seed=0"
CONFIG = CellConfig(model=ModelConfig(layer="layerscale", depth=1, embed_dim=16, num_heads=2, patch_size=4),
                    train=TrainConfig(epochs=2, batch_size=256, warmup_epochs=0, checkpoint_minutes=0.001))


def _kept(root) -> CellCheckpoints:
    return CellCheckpoints(CheckpointFolder(root), "tune:tiny:depth=1,layer=x", CELL_ID, CONFIG)


def _write(path, world: int = 1) -> None:
    """The checkpoint a 2-epoch cell leaves after its first epoch (the last epoch writes none)."""
    torch.set_num_threads(1)
    train_cell(CONFIG, device="cpu", keeper=Keeper(path=path, recipe=recipe_of(CONFIG), interval_s=1e-9))
    if world != 1:
        state = torch.load(path, weights_only=True)
        state["world"] = world
        torch.save(state, path)


def test_the_layout_is_one_readable_folder_per_study_and_cell(tmp_path):
    kept = _kept(tmp_path)
    assert kept.path == tmp_path / "tune_tiny_depth=1,layer=x" / CELL_ID / "checkpoint.pt"
    assert CheckpointFolder.of(tmp_path / "out", None).root == tmp_path / "out" / "checkpoints"
    assert CheckpointFolder.of(tmp_path / "out", tmp_path / "shared").root == tmp_path / "shared"
    long = CheckpointFolder(tmp_path).cell("run:x", "a=" + "b" * 300)
    assert len(long.name) <= 120


def test_the_trials_record_finds_the_file_and_another_process_count_resumes_with_a_note(tmp_path, capsys):
    kept = _kept(tmp_path)
    elsewhere = tmp_path / "moved" / "checkpoint.pt"  # e.g. a tune label that changed with the trial's number
    elsewhere.parent.mkdir()
    _write(elsewhere, world=2)
    trial = SimpleNamespace(user_attrs={CHECKPOINT_ATTR: {"file": "moved/checkpoint.pt"}})
    state = kept.resume(trial, world=1)
    assert state is not None and state["progress"]["next_epoch"] == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"normbench: cell {CELL_ID} resumes from its checkpoint at epoch 1 (written ")
    assert "written under 2 process(es), resumed under 1" in line and len(line.splitlines()) == 1
    assert kept.resume(SimpleNamespace(user_attrs={}), world=1) is None  # no record, nothing at its own path
    kept.clean()  # finished: the file it resumed from goes too
    assert not elsewhere.exists()


def test_a_finished_cell_leaves_its_weights_and_no_checkpoint(tmp_path):
    kept = _kept(tmp_path)
    _write(kept.path)
    kept.weights.write_bytes(b"weights")
    kept.path.with_name("checkpoint.pt.set-aside").write_bytes(b"old")
    kept.clean()
    assert [p.name for p in kept.path.parent.iterdir()] == ["weights.safetensors"]
    kept.weights.unlink()
    kept.clean()
    assert not kept.path.parent.exists()  # an empty folder goes too
