"""One cell of training: learns digits well above chance, is deterministic on CPU, and records divergence."""

from __future__ import annotations

import pytest
import torch

from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.errors import SuiteError
from normbench.train.loop import train_cell


def cell(**train) -> CellConfig:
    return CellConfig(model=ModelConfig(layer="layerscale", depth=2, embed_dim=32, num_heads=2, patch_size=4),
                      train=TrainConfig(**{"epochs": 2, "batch_size": 128, "warmup_epochs": 0, **train}))


def test_layerscale_depth_12_learns_digits_above_80_percent():
    # takes ~14 s on an idle 2-core CPU (the closing note of the layers issue); no timing is asserted here
    config = CellConfig(model=ModelConfig(layer="layerscale", depth=12),
                        train=TrainConfig(epochs=14, batch_size=64, lr=3e-3))
    result = train_cell(config, device="cpu")
    assert result.status == "ok"
    assert result.best_val_top1 >= 80.0, result.history
    assert result.epochs_run == 14 and len(result.history) == 14
    assert {"train_loss", "val_top1", "lr", "grad_norm", "images_per_sec"} <= set(result.history[0])


def test_same_seed_same_history_on_cpu():
    a, b = train_cell(cell(seed=3), device="cpu"), train_cell(cell(seed=3), device="cpu")
    assert [h["train_loss"] for h in a.history] == [h["train_loss"] for h in b.history]
    c = train_cell(cell(seed=4), device="cpu")
    assert [h["train_loss"] for h in c.history] != [h["train_loss"] for h in a.history]


def test_a_result_names_the_device_and_torch_it_trained_with():
    result = train_cell(cell(epochs=1), device="cpu")
    assert result.device.startswith("CPU (") and result.device.endswith(" cores)")
    assert result.torch_version == torch.__version__
    assert {"device", "torch_version", "torch_threads"} <= set(result.summary())  # the ledger keeps them


def test_a_result_records_each_change_of_torch_threads_in_order(monkeypatch):
    # a CPU cell's numbers depend on its threads, which the CPU share may change between epochs (train/cpu_share.py)
    from normbench.train import loop

    before = torch.get_num_threads()
    real = loop.train_epoch
    plan = iter([2, 2, 1, 1])  # set after each of the 4 epochs: epochs start on 1, 2, 2, 1 threads

    def epoch_on_planned_threads(*args, **kwargs):
        trained = real(*args, **kwargs)
        torch.set_num_threads(next(plan))  # as the share does after an epoch
        return trained

    torch.set_num_threads(1)
    monkeypatch.setattr(loop, "train_epoch", epoch_on_planned_threads)
    try:
        result = train_cell(cell(epochs=4), device="cpu")
    finally:
        torch.set_num_threads(before)
    assert result.torch_threads == "1/2/1"


def test_huge_lr_ends_the_cell_as_diverged_instead_of_raising():
    result = train_cell(cell(lr=50.0, clip_grad=None, epochs=3), device="cpu")
    assert result.status == "diverged"
    assert result.epochs_run <= 3


@pytest.mark.parametrize("train", [{"optimizer": "lamb"}, {"grad_accum_steps": 2}, {"mixup": 0.2, "cutmix": 1.0},
                                   {"label_smoothing": 0.0, "clip_grad": None}])
def test_recipe_options_train(train):
    result = train_cell(cell(**train), device="cpu")
    assert result.status == "ok" and result.params > 0


def test_pruning_callback_stops_the_cell():
    result = train_cell(cell(epochs=5), device="cpu", on_epoch=lambda record: record["epoch"] >= 1)
    assert result.status == "pruned" and result.epochs_run == 2


def test_warmup_cosine_schedule():
    from normbench.train.schedule import warmup_cosine

    kw = {"total_steps": 100, "warmup_steps": 10, "lr": 1.0, "warmup_lr": 0.0, "min_lr": 0.1}
    assert warmup_cosine(0, **kw) == 0.0 and warmup_cosine(5, **kw) == 0.5 and warmup_cosine(10, **kw) == 1.0
    assert warmup_cosine(100, **kw) == pytest.approx(0.1) and warmup_cosine(55, **kw) == pytest.approx(0.55)
    assert torch.is_tensor(torch.tensor(warmup_cosine(3, **kw)))


def test_compile_and_bf16_cell_runs_on_cpu(one_torch_thread, monkeypatch):
    # the path CUDA takes (torch.compile through inductor's C++ backend, bf16 autocast), minus CUDA, so a break in it
    # fails CI; needs a C++ compiler, which scripts/setup-env.sh installs where it is missing
    from torch._dynamo.utils import counters

    autocasts, autocast = [], torch.autocast

    def spy(device_type, *args, **kwargs):
        autocasts.append((device_type, kwargs.get("dtype")))
        return autocast(device_type, *args, **kwargs)

    monkeypatch.setattr(torch, "autocast", spy)
    config = CellConfig(model=ModelConfig(layer="layerscale", depth=1, embed_dim=16, num_heads=2, patch_size=4),
                        train=TrainConfig(epochs=1, batch_size=256, warmup_epochs=0, compile="on", amp="bf16"))
    graphs = counters["stats"]["unique_graphs"]  # dynamo's counters live for the process: other tests compile too
    result = train_cell(config, device="cpu")
    assert result.status == "ok" and 0 < result.train_loss < 10
    assert counters["stats"]["unique_graphs"] > graphs  # dynamo traced this cell's model rather than running eagerly
    assert ("cpu", torch.bfloat16) in autocasts  # its steps ran under bf16 autocast (torch's own calls are not)


def test_grad_accumulation_never_carries_gradients_into_the_next_epoch(monkeypatch):
    # 1077 digits / 200 = 5 train batches per epoch, 2 per optimizer step: the 5th is a partial group. Each step
    # must sum exactly one full group of its own epoch's micro-batches: a leftover one whose gradient stayed in
    # .grad would be added to the next epoch's first step (and under DDP it ran under no_sync, never all-reduced).
    import normbench.train.loop as loop

    epoch, since_zero, steps = [0], [], []  # the epoch of each backward summed into .grad since it was last cleared
    create_optimizer = loop.build_optimizer

    def spy(*args, **kwargs):
        optimizer = create_optimizer(*args, **kwargs)
        watched = optimizer.param_groups[0]["params"][0]
        watched.register_post_accumulate_grad_hook(lambda p: since_zero.append(epoch[0]))  # once per backward
        optimizer.register_step_pre_hook(lambda opt, args, kwargs: steps.append(list(since_zero)))
        zero_grad = optimizer.zero_grad

        def zero_and_forget(*args, **kwargs):
            since_zero.clear()
            return zero_grad(*args, **kwargs)

        optimizer.zero_grad = zero_and_forget
        return optimizer

    monkeypatch.setattr(loop, "build_optimizer", spy)

    def next_epoch(record) -> None:
        epoch[0] = record["epoch"] + 1

    result = train_cell(cell(batch_size=200, grad_accum_steps=2, epochs=2), device="cpu", on_epoch=next_epoch)
    assert result.status == "ok" and result.train_size // 200 == 5
    assert steps == [[0, 0], [0, 0], [1, 1], [1, 1]]  # the 5th micro-batch of an epoch is not trained


def test_an_accumulation_group_longer_than_the_epoch_is_refused():
    with pytest.raises(SuiteError, match="grad_accum_steps"):  # 5 batches per epoch: no optimizer step would run
        train_cell(cell(batch_size=200, grad_accum_steps=6, epochs=1), device="cpu")
