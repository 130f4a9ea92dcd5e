"""A fused group trains each member as that cell trains alone (train/fused.py): every registry entry and block
family, per-epoch train losses within 1e-4 relative over 3 epochs, through the stacked AdamW (train/stacked_adamw.py)
and, for another optimizer, each member's own; members of one row that differ in epochs and warmup (the convergence
check's 2x cells) each end at their own last epoch; per-block telemetry per member, as alone; each member's seconds
its share of the group's; a member that diverges, is pruned or loses its claim stops alone and leaves the others'
numbers bit for bit as a group without it; a member's checkpoint is an unfused cell's, optimizer state included; a
tune search's trials (weight decay, beta2, an init-only layer tunable apart) fuse, a tunable that builds other modules
does not."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import pytest
import torch

from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.errors import ClaimLostError
from normbench.train.fused import train_group
from normbench.train.fusion_rules import FusionRefused
from normbench.train.loop import train_cell
from tests.layers._cases import ALL_LAYERS


def cell(layer: str = "layernorm", lr: float = 1e-3, seed: int = 0, epochs: int = 3, **train) -> CellConfig:
    """Depth 4, width 16 on digits: 4 optimizer steps an epoch (batch 256), no telemetry unless asked."""
    train = {"warmup_epochs": 1, "telemetry_every": 0, **train}
    return CellConfig(model=ModelConfig(layer=layer, depth=4, embed_dim=16, num_heads=2, patch_size=4),
                      train=TrainConfig(epochs=epochs, batch_size=256, lr=lr, seed=seed, **train))


def losses(result) -> list[float]:
    return [h["train_loss"] for h in result.history]


def assert_close(a: list[float], b: list[float], rel: float) -> None:
    assert len(a) == len(b), (a, b)
    for x, y in zip(a, b, strict=True):
        assert math.isfinite(x) and abs(x - y) <= rel * abs(x), (a, b)


@pytest.mark.parametrize("layer", ALL_LAYERS)
def test_a_fused_group_of_2_lrs_by_2_seeds_trains_each_member_as_alone(layer):
    cells = [cell(layer, lr, seed) for lr in (1e-3, 3e-3) for seed in (0, 1)]
    fused = train_group(cells, "cpu")
    for config, member in zip(cells, fused, strict=True):
        alone = train_cell(config, "cpu")
        assert member.result is not None and member.result.status == alone.status == "ok"
        assert_close(losses(alone), losses(member.result), 1e-4)
        # 1e-3: a post-norm stack's spike (grad norm 8.3 at lr 3e-3) magnifies vmap's batched-matmul rounding to
        # 1.4e-4, with each member's own torch AdamW as much as with the stacked one; the losses agree to 1e-7
        assert_close([h["grad_norm"] for h in alone.history], [h["grad_norm"] for h in member.result.history], 1e-3)
        assert [h["lr"] for h in alone.history] == [h["lr"] for h in member.result.history]  # the schedule's, as alone
        assert member.result.fused_group == 4 and member.result.epochs_run == 3


def test_a_fused_group_under_bf16_autocast_trains_each_member_as_alone_to_bf16s_rounding():
    """The CUDA recipe's autocast through vmap, proven on the CPU: measured 1.2e-5 to 1.2e-4 relative."""
    cells = [cell("layernorm", lr, seed, amp="bf16") for lr in (1e-3, 3e-3) for seed in (0, 1)]
    for config, member in zip(cells, train_group(cells, "cpu"), strict=True):
        assert_close(losses(train_cell(config, "cpu")), losses(member.result), 1e-3)


def test_a_member_at_lr_10_diverges_alone_and_the_others_equal_a_group_without_it():
    clean = [cell(lr=1e-3, seed=0), cell(lr=3e-3, seed=1)]
    without = train_group(clean, "cpu")
    with_it = train_group([clean[0], cell(lr=10.0, seed=2), clean[1]], "cpu")
    assert with_it[1].result.status == "diverged" and with_it[1].result.epochs_run < 3
    assert math.isnan(with_it[1].result.test_top1)
    for a, b in ((without[0], with_it[0]), (without[1], with_it[2])):
        assert a.result.status == b.result.status == "ok"
        assert losses(a.result) == losses(b.result)  # bit for bit: no arithmetic crosses members
        assert a.result.test_top1 == b.result.test_top1


def test_a_member_pruned_or_losing_its_claim_stops_alone():
    cells = [cell(lr=1e-3, seed=0), cell(lr=1e-3, seed=1), cell(lr=3e-3, seed=0)]

    def prune_at_first(record):
        return True

    def lose_at_second(record):
        if record["epoch"] == 1:
            raise ClaimLostError("trial 7 was taken over")
        return False

    out = train_group(cells, "cpu", on_epoch=[prune_at_first, lose_at_second, None])
    assert out[0].result.status == "pruned" and out[0].result.epochs_run == 1
    assert out[1].result is None and "taken over" in str(out[1].lost)
    assert out[2].result.status == "ok" and out[2].result.epochs_run == 3
    alone = train_cell(cells[2], "cpu")
    assert_close(losses(alone), losses(out[2].result), 1e-4)


def test_a_member_that_stops_early_is_handed_over_then_timed_to_its_own_end():
    """Its caller records it at once (a later crash of the group cannot lose it), and its seconds are its own."""
    cells = [cell(lr=1e-3, seed=0, epochs=6), cell(lr=1e-3, seed=1, epochs=6)]
    ended: list[tuple[int, int]] = []  # (member, epochs the other member had finished when it was handed over)
    epochs_of_other = [0]

    def count(record):
        epochs_of_other[0] += 1
        return False

    def end_of(i):
        return lambda outcome: ended.append((i, epochs_of_other[0], outcome))

    out = train_group(cells, "cpu", on_epoch=[lambda record: True, count], on_end=[end_of(0), end_of(1)])
    assert [(i, seen) for i, seen, _ in ended] == [(0, 1)]  # the pruned one, after epoch 1; the other never
    assert ended[0][2] is out[0] and out[0].result.status == "pruned"
    assert out[0].result.seconds < out[1].result.seconds / 3  # 1 of 6 epochs, not the group's whole time


def test_the_group_decides_its_checkpoints_once_so_its_members_stand_at_one_point(tmp_path):
    from normbench.train.checkpoint import Keeper, recipe_of

    cells = [cell(lr=1e-3, seed=s, epochs=3) for s in range(2)]
    due_now = Keeper(path=tmp_path / "m0.pt", recipe=recipe_of(cells[0]), interval_s=1e-9)
    not_yet = Keeper(path=tmp_path / "m1.pt", recipe=recipe_of(cells[1]), interval_s=3600.0)
    train_group(cells, "cpu", keepers=[due_now, not_yet])
    assert due_now.writes == not_yet.writes == 2  # after epochs 1 and 2, both: the one due takes the other along


def test_out_of_memory_on_the_first_step_is_not_taken_for_a_missing_vmap_rule(monkeypatch):
    from normbench.train import fused_step

    def oom(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(fused_step, "functional_call", oom)  # every member's forward, as the step runs it
    with pytest.raises(torch.cuda.OutOfMemoryError):
        train_group([cell(seed=0), cell(seed=1)], "cpu")


@pytest.mark.parametrize(("change", "reason"), [
    ({"model": ModelConfig(layer="layernorm", depth=5, embed_dim=16, num_heads=2, patch_size=4)}, "model.depth"),
    ({"train": TrainConfig(epochs=3, batch_size=256, telemetry_every=0, attn_extra_loss=0.03)}, "auxiliary losses"),
    ({"train": TrainConfig(epochs=3, batch_size=256, telemetry_every=0, mixup=0.8)}, "mixup"),
    ({"train": TrainConfig(epochs=3, batch_size=256, telemetry_every=0, grad_accum_steps=2)}, "accumulation"),
])
def test_what_cannot_be_fused_is_refused_with_its_reason_before_training(change, reason):
    other = cell(seed=1)
    other = CellConfig(**{"model": other.model, "train": other.train, "data": other.data, **change})
    cells = [cell(), other] if "model" in change else [other, other]
    with pytest.raises(FusionRefused, match=reason):
        train_group(cells, "cpu")


@pytest.mark.parametrize(("layer", "inits"), [
    ("layerscale", [{"init_values": 1e-6}, {"init_values": 0.1}]),          # CaiT's ε range (layer.init_values)
    ("dyt", [{"norm_kwargs": {"alpha_init": 0.5}}, {"norm_kwargs": {"alpha_init": 1.2}}]),  # DyT's α0 range
])
def test_a_tune_searchs_trials_differing_in_decay_beta2_and_an_init_only_tunable_fuse_and_train_each_as_alone(
        layer, inits):
    trials = [(1e-3, 0.0, 0.95), (3e-3, 0.2, 0.999)]  # lr, weight decay, beta2: two draws of the tuned suite's space
    cells = []
    for (lr, decay, beta2), init in zip(trials, inits, strict=True):
        base = cell(layer, lr, 0, weight_decay=decay, adam_beta2=beta2)
        cells.append(replace(base, model=replace(base.model, **init)))
    fused = train_group(cells, "cpu")
    for config, member in zip(cells, fused, strict=True):
        alone = train_cell(config, "cpu")
        assert member.result is not None and member.result.fused_group == 2
        assert_close(losses(alone), losses(member.result), 1e-4)


def test_a_tunable_that_builds_other_modules_is_refused():
    """Hyper-connections' expansion rate sets how many residual streams the blocks carry: not one model."""
    cells = [replace(c, model=replace(c.model, block_kwargs={"expansion_rate": n}))
             for c, n in ((cell("hc", seed=0), 2), (cell("hc", seed=1), 4))]
    with pytest.raises(FusionRefused, match="model.block_kwargs"):
        train_group(cells, "cpu")


def test_the_stacked_clip_is_clip_grad_norm_per_member():
    from torch import nn

    from normbench.train.stacked import Stacked

    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)) for _ in range(3)]
    reference = [nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)) for _ in range(3)]
    for r, m in zip(reference, models, strict=True):
        r.load_state_dict(m.state_dict())
    stacked = Stacked(models)
    for k, m in enumerate(models):
        assert m[0].weight.data_ptr() == stacked.params["0.weight"][k].data_ptr()  # its slice, not a copy
    x = torch.randn(3, 5, 3)
    for g in stacked.grads.values():
        g.copy_(torch.randn_like(g) * 3)
    for k, r in enumerate(reference):
        for name, p in r.named_parameters():
            p.grad = stacked.grads[name][k].clone()
    norms = stacked.clip_([1.0, 100.0, math.inf])
    for k, r in enumerate(reference):
        expected = nn.utils.clip_grad_norm_(list(r.parameters()), [1.0, 100.0, math.inf][k])
        assert torch.allclose(norms[k], expected)
        for name, p in r.named_parameters():
            assert torch.allclose(dict(models[k].named_parameters())[name].grad, p.grad, atol=1e-7)
    assert x.shape[0] == 3


def test_members_whose_checkpoints_stand_apart_are_split_off_and_the_largest_common_point_fuses():
    from normbench.train.fusion_rules import same_point

    def at(step, epoch):
        return {"step": step, "epoch": None, "progress": {"next_epoch": epoch}}

    # a kill between the members' checkpoint writes: three at epoch 2, one still at epoch 1
    assert same_point([at(8, 2), at(8, 2), at(4, 1), at(8, 2)]) == [0, 1, 3]
    assert same_point([None, None]) == [0, 1]
    assert len(same_point([at(8, 2), None])) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA; scripts/gpu-first-contact.sh runs it")
@pytest.mark.parametrize("layer", ["layernorm", "layerscale", "ngpt", "hc"])
def test_a_fused_group_on_cuda_trains_each_member_as_alone(layer):
    cells = [cell(layer, lr, seed, amp="none", compile="off") for lr in (1e-3, 3e-3) for seed in (0, 1)]
    fused = train_group(cells, "cuda")
    for config, member in zip(cells, fused, strict=True):
        alone = train_cell(config, "cuda")
        assert_close(losses(alone), losses(member.result), 1e-3)  # TF32 matmuls on CUDA: a looser bound


def test_a_members_checkpoint_holds_its_own_tensors_only_and_resumes_it_alone(tmp_path):
    from normbench.train.checkpoint import Keeper, read, recipe_of

    cells = [cell(lr=1e-3, seed=s, epochs=2) for s in range(4)]
    keepers = [Keeper(path=tmp_path / f"m{i}.pt", recipe=recipe_of(c), interval_s=1e-9) for i, c in enumerate(cells)]
    train_group(cells, "cpu", keepers=keepers)  # each keeper writes after epoch 1 (the last epoch writes none)
    alone = tmp_path / "alone.pt"
    train_cell(cells[2], "cpu", keeper=Keeper(path=alone, recipe=recipe_of(cells[2]), interval_s=1e-9))
    # the member's file is the size of its cell's alone: its own tensors, not the group's stacked storage
    assert abs((tmp_path / "m2.pt").stat().st_size - alone.stat().st_size) < 0.05 * alone.stat().st_size
    # its optimizer's state in torch's per-parameter layout, as its cell's alone, to float rounding
    mine = torch.load(tmp_path / "m2.pt", weights_only=True)["optimizer"]
    theirs = torch.load(alone, weights_only=True)["optimizer"]
    assert mine["state"].keys() == theirs["state"].keys() and len(mine["param_groups"]) == len(theirs["param_groups"])
    for key, state in theirs["state"].items():
        assert state.keys() == mine["state"][key].keys() == {"step", "exp_avg", "exp_avg_sq"}
        for name, value in state.items():
            torch.testing.assert_close(mine["state"][key][name], value, rtol=1e-3, atol=1e-6)
    resumed = train_cell(cells[2], "cpu", resume=read(tmp_path / "m2.pt", recipe_of(cells[2])))
    assert_close(losses(train_cell(cells[2], "cpu")), losses(resumed), 1e-4)  # resumed unfused, to the same end


def test_members_of_a_row_with_their_own_epochs_and_warmup_each_end_at_their_own_last_epoch_as_alone():
    """The convergence check's 2x cells (epochs and warmup stretched) fuse with their row's report cells."""
    cells = [cell(seed=1, epochs=4, warmup_epochs=2), cell(seed=0, epochs=2), cell(lr=3e-3, seed=2, epochs=2)]
    ended: list[int] = []
    out = train_group(cells, "cpu", on_end=[lambda outcome, i=i: ended.append(i) for i in range(3)])
    assert ended == [1, 2]  # after epoch 2, handed over then; the 4-epoch member trained on and ended with the group
    for config, member in zip(cells, out, strict=True):
        alone = train_cell(config, "cpu")
        assert member.result.status == "ok" and member.result.epochs_run == config.train.epochs
        assert_close(losses(alone), losses(member.result), 1e-4)
        assert [h["lr"] for h in alone.history] == [h["lr"] for h in member.result.history]
        assert member.result.test_top1 == alone.test_top1


def test_each_member_records_its_share_of_the_groups_seconds():
    cells = [cell(seed=s, epochs=2) for s in range(4)]
    started = time.perf_counter()
    out = train_group(cells, "cpu")
    wall = time.perf_counter() - started
    seconds = [m.result.seconds for m in out]
    assert sum(seconds) == pytest.approx(wall, rel=0.05)  # the group's wall time, split among its members
    assert max(seconds) < 0.3 * wall


@pytest.mark.parametrize("layer", ["layernorm", "ngpt", "mhc"])
def test_per_block_telemetry_is_recorded_per_member_as_each_cell_records_it_alone(layer):
    cells = [cell(layer, lr=lr, seed=seed, epochs=2, telemetry_every=3) for lr, seed in ((1e-3, 0), (3e-3, 1))]
    for config, member in zip(cells, train_group(cells, "cpu"), strict=True):
        alone = train_cell(config, "cpu").telemetry
        fused = member.result.telemetry
        assert alone and [(r["step"], r["block"]) for r in fused] == [(r["step"], r["block"]) for r in alone]
        for a, f in zip(alone, fused, strict=True):
            for quantity, value in a.items():
                if value is None:
                    assert f[quantity] is None, (quantity, f)
                else:  # 4 significant digits kept (train/telemetry.py)
                    assert f[quantity] == pytest.approx(value, rel=2e-3, abs=1e-6), (quantity, a, f)


def test_an_optimizer_the_stacked_adamw_does_not_cover_steps_each_member_as_alone():
    cells = [cell(lr=1e-2, seed=s, optimizer="sgd") for s in range(2)]
    for config, member in zip(cells, train_group(cells, "cpu"), strict=True):
        assert_close(losses(train_cell(config, "cpu")), losses(member.result), 1e-4)
