"""Every layer builds on the meta device and materializes to the values a normal build gives (timm style:
`to_empty()`, then `reset_parameters()`), so a large model can be built without allocating its weights twice."""

from __future__ import annotations

import math

import pytest
import timm
import torch
from torch import nn

import normbench
from normbench.layers import get_spec
from tests.layers._cases import ALL_LAYERS, GATES, NORMS, TINY, data_kwargs

DIM = 32
_TAGS = ("_no_weight_decay", "_lr_scale", "_force_weight_decay")


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    """Every value a module holds: parameters (tied ones under each name) and buffers, persistent or not."""
    return {**dict(module.named_parameters(remove_duplicate=False)),
            **dict(module.named_buffers(remove_duplicate=False))}


def _tags(module: nn.Module) -> dict[str, tuple]:
    return {n: tuple(getattr(p, t, None) for t in _TAGS) for n, p in module.named_parameters(remove_duplicate=False)}


def _ties(module: nn.Module) -> list[list[str]]:
    names: dict[int, list[str]] = {}
    for n, p in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(n)
    return sorted(v for v in names.values() if len(v) > 1)


def _assert_same_values(got: nn.Module, want: nn.Module) -> None:
    got_state, want_state = _state(got), _state(want)
    assert got_state.keys() == want_state.keys()
    for name, value in want_state.items():
        assert got_state[name].device.type == "cpu", name
        assert torch.equal(got_state[name], value), f"{name} differs from a normal build"
    assert _tags(got) == _tags(want), "parameter tags (weight decay, lr scale) differ"
    assert _ties(got) == _ties(want), "tied parameters differ"


def _materialize(module: nn.Module, seed: int) -> nn.Module:
    module.to_empty(device="cpu")
    torch.manual_seed(seed)
    for m in module.modules():  # construction order, so random inits draw as in a normal build
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()
    return module


@pytest.mark.parametrize("name", NORMS)
def test_norm_built_on_meta_materializes_to_its_normal_values(name):
    cls = normbench.get_layer(name)
    meta = cls(DIM, device=torch.device("meta"))
    assert all(t.is_meta for t in _state(meta).values())
    torch.manual_seed(0)
    normal = cls(DIM)
    _assert_same_values(_materialize(meta, seed=0), normal)
    x = torch.randn(2, 5, DIM)
    torch.testing.assert_close(meta(x), normal(x), rtol=0, atol=0)


@pytest.mark.parametrize("init_values", [None, 0.3])
@pytest.mark.parametrize("depth", [12, 36])
@pytest.mark.parametrize("name", GATES)
def test_gate_built_on_meta_materializes_to_its_normal_values(name, depth, init_values):
    cls = normbench.get_layer(name)
    if name == "completep" and init_values is not None:
        init_values = 4.0  # its init_values is a base depth (1 or more): tests/layers/test_completep.py
    meta = cls(DIM, depth=depth, init_values=init_values, device=torch.device("meta"))
    assert all(t.is_meta for t in _state(meta).values())
    torch.manual_seed(0)
    normal = cls(DIM, depth=depth, init_values=init_values)
    _assert_same_values(_materialize(meta, seed=0), normal)


@pytest.mark.parametrize("name", NORMS + GATES)
def test_layer_fills_its_values_in_reset_parameters(name):
    # timm's contract: construction allocates, `reset_parameters` fills; a second call restores the init
    spec = get_spec(name)
    module = spec.cls(DIM) if spec.kind == "norm" else spec.cls(DIM, depth=12)
    torch.manual_seed(0)
    module.reset_parameters()
    want = {n: t.clone() for n, t in _state(module).items()}
    with torch.no_grad():
        for t in _state(module).values():
            t.fill_(math.nan)
    torch.manual_seed(0)
    module.reset_parameters()
    for n, t in _state(module).items():
        assert torch.equal(t, want[n]), n


def _meta_model(layer: str, **overrides) -> nn.Module:
    images = data_kwargs(layer)  # made on the CPU: they stay there, and init_weights() profiles them again
    with torch.device("meta"):
        return timm.create_model("normbench_vit", layer=layer, **{**TINY, **images, **overrides})


def _normal_model(layer: str) -> nn.Module:
    return timm.create_model("normbench_vit", layer=layer, **TINY, **data_kwargs(layer))


@pytest.mark.parametrize("layer", ALL_LAYERS)
def test_model_built_on_meta_materializes_to_the_normal_build(layer):
    model = _meta_model(layer)
    assert all(t.is_meta for t in _state(model).values())
    _materialize(model, seed=0)
    model.init_weights()  # the model's own reset: timm's ViT init, then the layer's init rule
    torch.manual_seed(0)
    normal = _normal_model(layer)
    assert model.state_dict().keys() == normal.state_dict().keys()
    _assert_same_values(model, normal)
    assert model.no_weight_decay() == normal.no_weight_decay()
    assert [type(m) for m in model.modules()] == [type(m) for m in normal.modules()]


@pytest.mark.parametrize("layer", ALL_LAYERS)
@torch.no_grad()
def test_model_init_weights_alone_fills_every_value_after_to_empty(layer):
    # whatever memory `to_empty` hands out, `init_weights` leaves no value unset (NaN stands for garbage)
    model = _meta_model(layer).to_empty(device="cpu")
    for t in _state(model).values():
        t.fill_(math.nan)
    model.init_weights()
    for name, t in _state(model).items():
        assert torch.isfinite(t).all(), f"{name} is not set by init_weights"
    assert _ties(model) == _ties(_normal_model(layer))
