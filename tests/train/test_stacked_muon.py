"""A fused group under `optimizer: muon` (train/stacked_muon.py): one batched Newton-Schulz for every member's hidden
matrices, each member training as it does alone (per-epoch losses within 1e-4 relative, train/fused.py's bound); a
member that stops leaves the others as a group without it; a member's checkpoint holds its own momentum only and
resumes, fused or alone, on its trajectory; adamuon is refused with its reason."""

from __future__ import annotations

import math

import pytest
import torch

from normbench.train import stacked_muon
from normbench.train.checkpoint import Keeper, read, recipe_of
from normbench.train.fused import train_group
from normbench.train.fusion_rules import FusionRefused
from normbench.train.loop import train_cell
from tests.train.test_fused import assert_close, cell, losses


def muon_cell(layer: str = "layernorm", lr: float = 1e-3, seed: int = 0, **train):
    return cell(layer, lr, seed, optimizer="muon", **train)


@pytest.mark.parametrize("layer", ["layernorm", "ngpt", "hc"])
def test_a_fused_muon_group_of_2_lrs_by_2_seeds_trains_each_member_as_alone(layer, one_torch_thread, monkeypatch):
    batches = []
    original = stacked_muon.zeropower_via_newtonschulz

    def counted(G, *args, **kwargs):
        batches.append(G.shape[0])
        return original(G, *args, **kwargs)

    monkeypatch.setattr(stacked_muon, "zeropower_via_newtonschulz", counted)
    cells = [muon_cell(layer, lr, seed) for lr in (1e-3, 1e-2) for seed in (0, 1)]
    fused = train_group(cells, "cpu")
    # one Newton-Schulz per matrix shape and step, over 4 members x 4 blocks: (C, C) takes proj and qkv's q, k and v
    # (4 matrices a block), fc1 and fc2 one each
    assert batches and set(batches) == {4 * 4 * 4, 4 * 4}, set(batches)
    for config, member in zip(cells, fused, strict=True):
        alone = train_cell(config, "cpu")
        assert member.result is not None and member.result.status == alone.status == "ok"
        assert_close(losses(alone), losses(member.result), 1e-4)


def test_a_diverged_member_leaves_the_others_as_a_group_without_it(one_torch_thread):
    clean = [muon_cell(lr=1e-3, seed=0), muon_cell(lr=1e-2, seed=1)]
    without = train_group(clean, "cpu")
    with_it = train_group([clean[0], muon_cell(lr=1e3, seed=2), clean[1]], "cpu")
    assert with_it[1].result.status == "diverged" and with_it[1].result.epochs_run < 3
    for a, b in ((without[0], with_it[0]), (without[1], with_it[2])):
        assert a.result.status == b.result.status == "ok"
        assert_close(losses(a.result), losses(b.result), 1e-5)
        assert abs(a.result.test_top1 - b.result.test_top1) < 1e-9


def test_a_fused_members_checkpoint_holds_its_own_momentum_and_resumes_fused_or_alone(tmp_path, one_torch_thread):
    cells = [muon_cell(lr=lr, seed=s, epochs=3) for lr in (1e-3, 1e-2) for s in (0, 1)]
    keepers = [Keeper(path=tmp_path / f"m{i}.pt", recipe=recipe_of(c), interval_s=1e-9) for i, c in enumerate(cells)]

    class Stop(Exception):
        pass

    def stop_after_epoch_1(record):
        if record["epoch"] == 1:
            raise Stop

    with pytest.raises(Stop):  # each keeper wrote after epoch 0; epoch 1's end stopped the group
        train_group(cells, "cpu", keepers=keepers, on_epoch=[stop_after_epoch_1] * 4)
    alone = tmp_path / "alone.pt"
    with pytest.raises(Stop):
        train_cell(cells[2], "cpu", keeper=Keeper(path=alone, recipe=recipe_of(cells[2]), interval_s=1e-9),
                   on_epoch=stop_after_epoch_1)
    # its own tensors, not the group's stacked momentum: the size of its cell's alone
    assert abs((tmp_path / "m2.pt").stat().st_size - alone.stat().st_size) < 0.05 * alone.stat().st_size
    states = [read(tmp_path / f"m{i}.pt", recipe_of(c)) for i, c in enumerate(cells)]
    assert all(s["progress"]["next_epoch"] == 1 for s in states)
    uninterrupted = [train_cell(c, "cpu") for c in cells]
    resumed_fused = train_group(cells, "cpu", resumes=states)
    for full, member in zip(uninterrupted, resumed_fused, strict=True):
        assert_close(losses(full), losses(member.result), 1e-4)
    resumed_alone = train_cell(cells[2], "cpu", resume=read(tmp_path / "m2.pt", recipe_of(cells[2])))
    assert_close(losses(uninterrupted[2]), losses(resumed_alone), 1e-4)


def test_adamuon_is_not_fused_and_says_why():
    with pytest.raises(FusionRefused, match="adamuon"):
        train_group([cell(optimizer="adamuon", seed=0), cell(optimizer="adamuon", seed=1)], "cpu")


def test_the_batched_step_is_each_members_own_step(one_torch_thread):
    """Two members stepped by StackedMuon, against each stepped alone by timm's Muon (train/muon.py): same weights
    to bfloat16's rounding of the update, and the members' momentum buffers are slices of one stacked tensor. The
    members differ in lr and weight decay, as a tune search's trials do."""
    from normbench.train.loop import build_fit
    from normbench.train.stacked import Stacked

    cells = [muon_cell(lr=lr, seed=0, weight_decay=decay) for lr, decay in ((1e-2, 0.0), (3e-2, 0.2))]
    fits = [build_fit(c, "cpu", None, None) for c in cells]
    twins = [build_fit(c, "cpu", None, None) for c in cells]
    start = [{n: p.detach().clone() for n, p in f.model.named_parameters()} for f in fits]
    stacked = Stacked([f.model for f in fits])
    muon = stacked_muon.StackedMuon(fits, stacked)
    gen = torch.Generator().manual_seed(0)
    # both members twice, member 1 alone (member 0 masked, as a member whose loss went non-finite mid-epoch), both
    for stepping in ([0, 1], [0, 1], [1], [0, 1]):
        for g in stacked.grads.values():
            g.copy_(torch.randn(g.shape, generator=gen))
        held = {n: (fits[0].optimizer.state[p]["momentum_buffer"].clone(), p.detach().clone())
                for n, p in fits[0].model.named_parameters() if n in muon.names}
        muon.step(stepping)
        if stepping == [1]:
            for n, (momentum, weight) in held.items():
                p = dict(fits[0].model.named_parameters())[n]
                assert torch.equal(fits[0].optimizer.state[p]["momentum_buffer"], momentum) and torch.equal(p, weight)
        for k in stepping:
            fit, twin = fits[k], twins[k]
            for name, p in twin.model.named_parameters():
                p.grad = stacked.grads[name][k].clone() if name in muon.names else None
            twin.optimizer.step()
            for name in muon.names:
                ours, alone = dict(fit.model.named_parameters())[name], dict(twin.model.named_parameters())[name]
                assert (ours - alone).norm() <= 1e-2 * (alone - start[k][name]).norm(), name
    first = muon.names[0]
    buffer = fits[1].optimizer.state[dict(fits[1].model.named_parameters())[first]]["momentum_buffer"]
    assert buffer.data_ptr() == muon.momentum[first][1].data_ptr() and math.isfinite(buffer.norm().item())
