"""A cell's checkpoint: resumed at an epoch's end or inside an epoch (a SIGTERM between optimizer steps), the cell
ends bit for bit where the uninterrupted one ends on CPU; a torn, foreign or old file is refused; writes are atomic."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch

from normbench import stopping
from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.errors import Terminated
from normbench.train import checkpoint
from normbench.train.checkpoint import CheckpointUnusable, Keeper, read, recipe_of
from normbench.train.loop import train_cell

TIMING = ("seconds", "images_per_sec")


def cell(**train) -> CellConfig:
    # every source of state at once: drop-path and mixup/cutmix draws, accumulation, telemetry samples, aux losses
    return CellConfig(model=ModelConfig(layer="layerscale", depth=2, embed_dim=16, num_heads=2, patch_size=4,
                                        drop_path_rate=0.1),
                      train=TrainConfig(**{"epochs": 4, "batch_size": 64, "warmup_epochs": 0, "mixup": 0.2,
                                           "cutmix": 1.0, "grad_accum_steps": 2, "telemetry_every": 5,
                                           "train_feature_decay": 0.1, **train}))


def untimed(result) -> tuple:
    summary = {k: v for k, v in result.summary().items() if k not in TIMING}
    history = [{k: v for k, v in h.items() if k not in TIMING} for h in result.history]
    return summary, history, result.telemetry


class Stop(Exception):
    pass


@pytest.fixture(scope="module")
def uninterrupted():
    torch.set_num_threads(1)
    return untimed(train_cell(cell(), device="cpu"))


def test_resumed_at_an_epoch_end_the_cell_ends_as_the_uninterrupted_one(tmp_path, uninterrupted, one_torch_thread):
    config, saved = cell(), []
    keeper = Keeper(path=tmp_path / "c.pt", recipe=recipe_of(config), interval_s=1e-9, saved=saved.append)

    def stop_after_epoch_1(record):
        if record["epoch"] == 1:
            raise Stop

    with pytest.raises(Stop):
        train_cell(config, device="cpu", on_epoch=stop_after_epoch_1, keeper=keeper)
    assert [s["epoch"] for s in saved] == [1]  # written after epoch 0's end; epoch 1's end stopped first
    state = read(tmp_path / "c.pt", recipe_of(config))
    assert checkpoint.where(state) == "epoch 1"
    resumed = train_cell(config, device="cpu", resume=state)
    assert untimed(resumed) == uninterrupted
    assert resumed.seconds >= state["progress"]["seconds_before"]  # the earlier attempt's time counts


def test_sigterm_between_optimizer_steps_checkpoints_the_epoch_so_far(tmp_path, uninterrupted, one_torch_thread):
    config, saved = cell(), []
    keeper = Keeper(path=tmp_path / "c.pt", recipe=recipe_of(config), interval_s=3600.0, saved=saved.append)
    sigterm_in_epoch_1(config, keeper)
    # 16 micro-batches an epoch (8 steps of 2); signalled in epoch 1's micro-batch 4, whose step ends after 5
    assert saved == [{**saved[0], "epoch": 1, "batch": 6, "step": 11}], saved
    state = read(tmp_path / "c.pt", recipe_of(config))
    assert checkpoint.where(state) == "epoch 1, batch 6"
    assert untimed(train_cell(config, device="cpu", resume=state)) == uninterrupted


def test_a_truncated_foreign_or_old_checkpoint_is_refused_with_its_reason(tmp_path, monkeypatch, one_torch_thread):
    config = cell(epochs=2)
    path = tmp_path / "c.pt"
    keeper = Keeper(path=path, recipe=recipe_of(config), interval_s=1e-9)
    train_cell(config, device="cpu", keeper=keeper)
    assert read(path, recipe_of(config))["progress"]["next_epoch"] == 1
    with pytest.raises(CheckpointUnusable, match="another recipe"):
        read(path, recipe_of(cell(epochs=2, lr=2e-3)))
    monkeypatch.setattr("normbench.__version__", "0.0.1")
    with pytest.raises(CheckpointUnusable, match="normbench 0.1.0, this is 0.0.1"):
        read(path, recipe_of(config))
    monkeypatch.undo()
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointUnusable, match="unreadable"):
        read(path, recipe_of(config))
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    with pytest.raises(CheckpointUnusable, match="unreadable"):
        read(tmp_path / "junk.pt", recipe_of(config))


def test_a_write_cut_short_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch):
    path = tmp_path / "c.pt"
    checkpoint.write(path, {"format": 1, "n": 1})

    def torn(state, f):
        f.write(b"half a checkpoint")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", torn)
    with pytest.raises(OSError):
        checkpoint.write(path, {"format": 1, "n": 2})
    monkeypatch.undo()
    assert torch.load(path, weights_only=True) == {"format": 1, "n": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]  # no temporary file left


def test_checkpoint_minutes_0_writes_none_not_even_on_sigterm(tmp_path, one_torch_thread):
    config = cell(epochs=2, checkpoint_minutes=0)
    keeper = Keeper(path=tmp_path / "c.pt", recipe=recipe_of(config), interval_s=0.0)
    previous = stopping.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(Terminated):
            train_cell(config, device="cpu", keeper=keeper)
    finally:
        stopping.uninstall(previous)
    assert not (tmp_path / "c.pt").exists()


def test_the_recipe_fingerprint_ignores_how_a_cell_is_kept():
    assert recipe_of(cell(checkpoint_minutes=1, keep_weights="final")) == recipe_of(cell())
    assert recipe_of(cell(lr=2e-3)) != recipe_of(cell())


def test_a_key_added_later_leaves_the_fingerprints_of_checkpoints_written_before_it():
    # `train.muon_momentum` came after checkpoints were written: at its default (None) every fingerprint is the one
    # computed before it existed (these two were, so a cell in progress resumes from its file), set it is another
    assert recipe_of(CellConfig()) == "821ff33e82ff"
    deep_lamb = CellConfig(model=ModelConfig(depth=36), train=TrainConfig(optimizer="lamb"))
    assert recipe_of(deep_lamb) == "ba2df4d3149d"
    assert recipe_of(cell(optimizer="muon", muon_momentum=0.9)) != recipe_of(cell(optimizer="muon"))


def test_a_muon_cell_stopped_between_optimizer_steps_resumes_on_its_trajectory(tmp_path, one_torch_thread):
    """Muon's momentum is in the checkpoint: stopped by SIGTERM in epoch 1 and resumed, a Muon cell (every source of
    state at once, as `cell`) ends bit for bit where the uninterrupted one ends; so does one resumed at an epoch's
    end."""
    config = cell(optimizer="muon")
    uninterrupted = untimed(train_cell(config, device="cpu"))
    saved: list = []
    keeper = Keeper(path=tmp_path / "c.pt", recipe=recipe_of(config), interval_s=3600.0, saved=saved.append)
    sigterm_in_epoch_1(config, keeper)
    state = read(tmp_path / "c.pt", recipe_of(config))
    assert checkpoint.where(state) == "epoch 1, batch 6"
    assert any("momentum_buffer" in s for s in state["optimizer"]["state"].values())  # Muon's, in the file
    assert untimed(train_cell(config, device="cpu", resume=state)) == uninterrupted

    def stop_after_epoch_1(record):
        if record["epoch"] == 1:
            raise Stop

    keeper = Keeper(path=tmp_path / "e.pt", recipe=recipe_of(config), interval_s=1e-9)
    with pytest.raises(Stop):
        train_cell(config, device="cpu", on_epoch=stop_after_epoch_1, keeper=keeper)
    resumed = train_cell(config, device="cpu", resume=read(tmp_path / "e.pt", recipe_of(config)))
    assert untimed(resumed) == uninterrupted


DDP_SCRIPT = """
import json, sys
from pathlib import Path
from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.train.checkpoint import Keeper, read, recipe_of
from normbench.train.distributed import broadcast, from_env, shutdown
from normbench.train.loop import CellAbandoned, train_cell

class Stop(Exception):
    pass

def stop_at_epoch_1(record):  # rank 0 only: a stop it sends to rank 1 before raising
    if record["epoch"] == 1:
        raise Stop

dist, out = from_env(), Path(sys.argv[1])
cell = CellConfig(model=ModelConfig(layer="layerscale", depth=2, embed_dim=32, num_heads=2, patch_size=4),
                  train=TrainConfig(epochs=3, batch_size=64, warmup_epochs=0, lr=3e-3))
full = train_cell(cell, device="cpu", dist=dist)
keeper = Keeper(path=out / "c.pt", recipe=recipe_of(cell), interval_s=1e-9) if dist.is_main else None
try:
    train_cell(cell, device="cpu", dist=dist, keeper=keeper, on_epoch=stop_at_epoch_1)
except (Stop, CellAbandoned) as e:
    ended = type(e).__name__
broadcast(None, dist)  # rank 0 wrote the file before it stopped: every rank reads it now
resumed = train_cell(cell, device="cpu", dist=dist, resume=read(out / "c.pt", recipe_of(cell)))
timeless = lambda r: [{k: v for k, v in h.items() if k != "images_per_sec"} for h in r.history]
json.dump({"ended": ended, "same": timeless(full) == timeless(resumed), "history": full.history},
          open(out / f"rank{dist.rank}.json", "w"))
shutdown(dist)
"""


def test_under_torchrun_rank_0_writes_every_rank_resumes_and_one_process_can_go_on(tmp_path, one_torch_thread):
    from pathlib import Path

    from tests.train.test_ddp import assert_follows, torchrun

    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    done = torchrun(str(script), str(tmp_path), cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["ended"] for r in ranks] == ["Stop", "CellAbandoned"]
    assert ranks[0]["same"] and ranks[1]["same"]  # both ranks resumed from rank 0's file, bit for bit
    config = CellConfig(model=ModelConfig(layer="layerscale", depth=2, embed_dim=32, num_heads=2, patch_size=4),
                        train=TrainConfig(epochs=3, batch_size=64, warmup_epochs=0, lr=3e-3))
    state = read(tmp_path / "c.pt", recipe_of(config))
    assert state["world"] == 2 and checkpoint.where(state) == "epoch 1"
    # one process goes on from the two processes' checkpoint: the same global batches and schedule
    alone = train_cell(config, device="cpu", resume=state)
    assert_follows(alone.history, ranks[0]["history"])


def sigterm_in_epoch_1(config, keeper: Keeper) -> None:
    """Train `config` until a SIGTERM at its 21st training forward (epoch 1, micro-batch 4), which stops it with
    Terminated after `keeper` wrote the epoch so far."""
    calls = []
    previous = stopping.install()
    try:
        model_forward = torch.nn.Module.__call__

        def signal_in_epoch_1(module, *args, **kwargs):
            if module.__class__.__name__ == "NormbenchViT" and module.training:
                calls.append(1)
                if len(calls) == 21:
                    os.kill(os.getpid(), signal.SIGTERM)
            return model_forward(module, *args, **kwargs)

        torch.nn.Module.__call__ = signal_in_epoch_1  # type: ignore[method-assign]
        try:
            with pytest.raises(Terminated):
                train_cell(config, device="cpu", keeper=keeper)
        finally:
            torch.nn.Module.__call__ = model_forward  # type: ignore[method-assign]
    finally:
        stopping.uninstall(previous)
