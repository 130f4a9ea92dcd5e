"""The fast path changes speed only: the same losses as the plain path, and each choice where it was measured."""

from __future__ import annotations

import pytest
import torch
from timm.layers import Attention
from timm.loss import LabelSmoothingCrossEntropy

from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.model.vit import NormbenchViT
from normbench.train import fastpath
from normbench.train.loop import train_cell


def digits_cell() -> CellConfig:
    # patch 2 on the 8x8 digits: 17 tokens, the sequence length of the depth-sweep suites (explicit attention)
    return CellConfig(model=ModelConfig(layer="layerscale", depth=2, embed_dim=32, num_heads=2, patch_size=2),
                      train=TrainConfig(epochs=2, batch_size=128, warmup_epochs=0, lr=1e-3, label_smoothing=0.1))


def test_fast_and_plain_paths_give_the_same_losses(monkeypatch, one_torch_thread):
    fast = train_cell(digits_cell(), device="cpu")
    monkeypatch.setenv(fastpath.ENV_SWITCH, "0")
    plain = train_cell(digits_cell(), device="cpu")
    fast_losses = [h["train_loss"] for h in fast.history]
    plain_losses = [h["train_loss"] for h in plain.history]
    # 22 optimizer steps through fused vs per-tensor AdamW and explicit vs flash attention: float rounding only
    assert fast_losses == pytest.approx(plain_losses, rel=1e-4, abs=1e-5)
    assert fast_losses[-1] < fast_losses[0]  # it trained, so the comparison covers real updates
    assert abs(fast.best_val_top1 - plain.best_val_top1) <= 1.0  # at most a few of the 360 images flip


def test_loss_equals_timms_label_smoothing_cross_entropy():
    logits, target = torch.randn(64, 10, dtype=torch.float64), torch.randint(0, 10, (64,))
    ours = fastpath.loss_function(0.1)(logits, target)
    assert ours.item() == pytest.approx(LabelSmoothingCrossEntropy(0.1)(logits, target).item(), rel=1e-12)
    assert fastpath.loss_function(0.0)(logits, target).item() == pytest.approx(
        torch.nn.functional.cross_entropy(logits, target).item(), rel=1e-12)


def test_plain_switch_restores_timms_loss(monkeypatch):
    monkeypatch.setenv(fastpath.ENV_SWITCH, "0")
    assert isinstance(fastpath.loss_function(0.1), LabelSmoothingCrossEntropy)


def test_fused_adamw_on_cpu_where_torch_has_it(monkeypatch):
    assert fastpath.fused_adamw_supported("cpu")  # torch >= 2.4 has a CPU kernel; the project pins a newer torch
    cpu = torch.device("cpu")
    assert fastpath.optimizer_kwargs("adamw", cpu) == {"fused": True}
    assert fastpath.optimizer_kwargs("lamb", cpu) == {}
    monkeypatch.setenv(fastpath.ENV_SWITCH, "0")
    assert fastpath.optimizer_kwargs("adamw", cpu) == {}


def test_create_optimizer_v2_passes_fused_through():
    from timm.optim import create_optimizer_v2

    model = torch.nn.Linear(4, 4)
    opt = create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05, **fastpath.optimizer_kwargs("adamw",
                                                                                                      torch.device("cpu")))
    assert isinstance(opt, torch.optim.AdamW) and all(g["fused"] for g in opt.param_groups)


def vit(img_size: int) -> NormbenchViT:
    return NormbenchViT(img_size=img_size, patch_size=2, in_chans=1, num_classes=10, embed_dim=16, depth=2,
                        num_heads=2)


def attention_flags(model: torch.nn.Module) -> set[bool]:
    return {m.fused_attn for m in model.modules() if isinstance(m, Attention)}


@pytest.mark.parametrize(("img_size", "fused"), [(8, False), (16, True)])  # 17 and 65 tokens
def test_attention_path_by_sequence_length_on_cpu(img_size, fused):
    model = vit(img_size)
    assert fastpath.set_attention_path(model, torch.device("cpu")) is fused
    assert attention_flags(model) == {fused}


def test_attention_paths_agree_and_cuda_keeps_the_fused_kernel(monkeypatch):
    model = vit(8).eval()
    x = torch.randn(4, 1, 8, 8)
    fastpath.set_attention_path(model, torch.device("cpu"))
    explicit = model(x)
    assert fastpath.set_attention_path(model, torch.device("cuda")) is True  # only reads the device's type
    torch.testing.assert_close(model(x), explicit, rtol=1e-5, atol=1e-6)
    monkeypatch.setenv(fastpath.ENV_SWITCH, "0")
    assert fastpath.set_attention_path(model, torch.device("cpu")) is True


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA; scripts/gpu-first-contact.sh runs it on a GPU")
def test_cuda_cell_compiles_in_bf16_with_fused_adamw():
    assert fastpath.fused_adamw_supported("cuda")
    cell = digits_cell()
    cell.train.epochs = 1  # compile "auto" and amp "auto" are on for CUDA
    result = train_cell(cell, device="cuda")
    assert result.status == "ok" and 0 < result.train_loss < 10
