"""The stacked AdamW (train/stacked_adamw.py) is each member's torch AdamW, step for step: per-member lr, epochs and
warmup on the device schedule, per-group lr_scale, warmup flag and weight decay; a masked member's rows stay as they
were; a member's state exported in torch's per-parameter layout resumes a torch AdamW where the stack stood."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from normbench.contracts.recipe import TrainConfig
from normbench.train.optim_groups import param_groups
from normbench.train.schedule import warmup_cosine
from normbench.train.stacked import Stacked
from normbench.train.stacked_adamw import StackedAdamW, device_lrs, refusal

STEPS_PER_EPOCH = 4


def model() -> nn.Module:
    """Three param groups: decayed matrices, undecayed biases, and a tagged scalar (lr x 0.1, no warmup)."""
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))
    net.register_parameter("gain", nn.Parameter(torch.ones(2)))
    net.gain._lr_scale = 0.1
    net.gain._no_warmup = True
    return net


def member(seed: int, lr: float, epochs: int, warmup: float, decay: float = 0.1,
           beta2: float = 0.999) -> SimpleNamespace:
    """What StackedAdamW reads of a fit (train/loop.py `Fit`): model, torch AdamW over param_groups, recipe."""
    torch.manual_seed(seed)
    net = model()
    tc = TrainConfig(lr=lr, epochs=epochs, warmup_epochs=warmup, weight_decay=decay, warmup_lr=1e-5, min_lr=1e-4)
    opt = torch.optim.AdamW(param_groups(net, lr, tc.weight_decay), lr=lr, weight_decay=tc.weight_decay,
                            betas=(0.9, beta2))
    return SimpleNamespace(model=net, optimizer=opt, tc=tc, steps_per_epoch=STEPS_PER_EPOCH, step=0)


def scheduled(fit: SimpleNamespace) -> None:
    """train_epoch's rule: each group's lr at the member's step, times its lr_scale."""
    tc = fit.tc
    for group in fit.optimizer.param_groups:
        lr = warmup_cosine(fit.step, total_steps=STEPS_PER_EPOCH * tc.epochs,
                           warmup_steps=round(tc.warmup_epochs * STEPS_PER_EPOCH) * group.get("warmup", True),
                           lr=tc.lr, warmup_lr=tc.warmup_lr, min_lr=tc.min_lr)
        group["lr"] = lr * group.get("lr_scale", 1.0)


def group_and_references(recipes):  # noqa: ANN001, ANN201 - a list of (seed, lr, epochs, warmup[, decay, beta2])
    fits = [member(*r) for r in recipes]
    references = [copy.deepcopy(f) for f in fits]  # stepped by torch's own AdamW
    stacked = Stacked([f.model for f in fits])
    return fits, references, stacked, StackedAdamW(fits, stacked)


@pytest.mark.parametrize("recipes", [
    [(0, 1e-2, 3, 1.0), (1, 3e-3, 6, 2.0), (2, 3e-2, 3, 0.5)],  # a row's: lrs, epochs and warmups differ
    [(0, 1e-2, 3, 1.0, 0.0, 0.95), (1, 3e-3, 3, 2.0, 0.2, 0.999), (2, 3e-2, 3, 0.5, 0.05, 0.98)],  # a search's trials
])
def test_each_members_rows_follow_its_own_torch_adamw_step_for_step(recipes):
    fits, references, stacked, adamw = group_and_references(recipes)
    assert (adamw.hyper()[1] is None) == (len({r[5:] for r in recipes}) > 1)  # per-member beta2 only where they differ
    gen = torch.Generator().manual_seed(7)
    alive = torch.ones(3, dtype=torch.bool)
    for _ in range(STEPS_PER_EPOCH * 4):  # through warmup, the cosine, and past the shortest member's end
        grads = torch.randn(stacked.flat.shape, generator=gen)
        stacked.flat_grad.copy_(grads)
        adamw.step(alive)
        for k, ref in enumerate(references):
            for name, p in ref.model.named_parameters():
                a, b = stacked.spans[name]
                p.grad = grads[k, a:b].view_as(p).clone()
            scheduled(ref)
            ref.optimizer.step()
            ref.step += 1
        for k, ref in enumerate(references):
            for name, p in ref.model.named_parameters():
                torch.testing.assert_close(dict(fits[k].model.named_parameters())[name], p, rtol=1e-5, atol=1e-7)


def test_the_device_schedule_is_warmup_cosine_for_every_group_and_step():
    fits, _, _, adamw = group_and_references([(0, 1e-2, 3, 1.0), (1, 3e-3, 5, 2.5)])
    t = adamw.tensors()
    for step in range(STEPS_PER_EPOCH * 5 + 2):
        t["steps"].fill_(step)
        lrs = device_lrs(t)
        for k, fit in enumerate(fits):
            for g, group in enumerate(fit.optimizer.param_groups):
                fit.step = step
                scheduled(fit)
                assert lrs[k, g].item() == pytest.approx(group["lr"], rel=1e-12, abs=1e-15)


def test_a_masked_member_keeps_its_rows_bit_for_bit_and_the_others_step():
    fits, _, stacked, adamw = group_and_references([(0, 1e-2, 3, 1.0), (1, 1e-2, 3, 1.0)])
    stacked.flat_grad.normal_()
    adamw.step(torch.ones(2, dtype=torch.bool))
    before = [t.clone() for t in (stacked.flat, adamw.exp_avg, adamw.exp_avg_sq, adamw.steps)]
    stacked.flat_grad.fill_(float("nan"))  # member 1's loss went non-finite: its gradients too
    stacked.flat_grad[0].normal_()
    adamw.step(torch.tensor([True, False]))
    for now, then in zip((stacked.flat, adamw.exp_avg, adamw.exp_avg_sq, adamw.steps), before, strict=True):
        assert torch.equal(now[1], then[1])
        assert not torch.equal(now[0], then[0])


def test_an_exported_member_has_torchs_layout_and_resumes_a_torch_adamw_where_the_stack_stood():
    fits, references, stacked, adamw = group_and_references([(0, 1e-2, 3, 1.0), (1, 3e-3, 3, 1.0)])
    for _ in range(5):
        stacked.flat_grad.normal_()
        for ref, k in zip(references, range(2), strict=True):
            for name, p in ref.model.named_parameters():
                a, b = stacked.spans[name]
                p.grad = stacked.flat_grad[k, a:b].view_as(p).clone()
            scheduled(ref)
            ref.optimizer.step()
            ref.step += 1
        adamw.step(torch.ones(2, dtype=torch.bool))
        for f in fits:
            f.step += 1
    adamw.export(1)
    mine, theirs = fits[1].optimizer.state_dict(), references[1].optimizer.state_dict()
    assert mine["state"].keys() == theirs["state"].keys()
    for key, state in theirs["state"].items():
        assert state.keys() == mine["state"][key].keys()
        for name, value in state.items():
            assert (value.shape, value.dtype, value.device) == (mine["state"][key][name].shape,
                                                                mine["state"][key][name].dtype,
                                                                mine["state"][key][name].device)
            torch.testing.assert_close(mine["state"][key][name], value, rtol=1e-5, atol=1e-8)
            # cloned: a view of the stacked moments would save the whole (K, P) storage
            assert value.untyped_storage().nbytes() == mine["state"][key][name].untyped_storage().nbytes()
    for g_mine, g_theirs in zip(mine["param_groups"], theirs["param_groups"], strict=True):
        assert g_mine["lr"] == pytest.approx(g_theirs["lr"], rel=1e-12)
    # a fresh StackedAdamW over member 1 alone reads the exported state back: the next step is torch's
    again = Stacked([fits[1].model])
    resumed = StackedAdamW([fits[1]], again)
    assert not fits[1].optimizer.state  # released: the stacked state is the one that trains
    again.flat_grad.normal_()
    ref = references[1]
    for name, p in ref.model.named_parameters():
        a, b = again.spans[name]
        p.grad = again.flat_grad[0, a:b].view_as(p).clone()
    scheduled(ref)
    ref.optimizer.step()
    resumed.step(torch.ones(1, dtype=torch.bool))
    for name, p in ref.model.named_parameters():
        torch.testing.assert_close(dict(fits[1].model.named_parameters())[name], p, rtol=1e-5, atol=1e-7)


def test_optimizers_it_does_not_cover_are_named():
    fits = [member(0, 1e-3, 3, 1.0), member(1, 1e-3, 3, 1.0)]
    assert refusal(fits) is None
    fits[1].optimizer = torch.optim.SGD(fits[1].model.parameters(), lr=1e-3)
    assert "SGD is not torch's AdamW" in refusal(fits)
    fits[1] = member(1, 1e-3, 3, 1.0)
    fits[1].optimizer.param_groups[0]["amsgrad"] = True
    assert "amsgrad" in refusal(fits)
    fits[1] = member(1, 1e-3, 3, 1.0, decay=0.2, beta2=0.95)  # a tune trial's: stepped per member
    assert refusal(fits) is None
    fits[1].optimizer.param_groups[0]["eps"] = 1e-6
    assert "differ beyond the lr, weight decay and beta2" in refusal(fits)
