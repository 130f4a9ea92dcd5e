"""timm's model API on `normbench_vit`, for every registered layer: the checks of timm's tests/test_models.py
(forward/backward, default cfg, reset_classifier, features_only, forward_intermediates, FX, TorchScript) plus
grad checkpointing, pooling, dynamic image size and loading a local checkpoint with `pretrained=True`."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
import timm
import torch
import torch.nn.functional as F
from timm.models._features_fx import get_notrace_functions, get_notrace_modules
from torch import nn
from torchvision.models.feature_extraction import create_feature_extractor, get_graph_node_names

import normbench
from normbench.contracts.recipe import CellConfig
from normbench.layers import get_spec
from normbench.model.vit import NormbenchViT
from tests.layers._cases import FAMILIES, SINGLE, data_kwargs

LAYERS = [*SINGLE, "learnable_scaler+layerscale", "layerscale+qk_norm"]
IMG, PATCH, DIM = 16, 4, 32
GRID = IMG // PATCH
TINY = dict(img_size=IMG, patch_size=PATCH, embed_dim=DIM, num_heads=2, depth=2)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def create(layer: str, seed: int = 0, **kwargs) -> NormbenchViT:
    kwargs = {**TINY, "num_classes": 5, **kwargs}
    torch.manual_seed(seed)
    return timm.create_model("normbench_vit", layer=layer,
                             **data_kwargs(layer, kwargs["img_size"], kwargs.get("in_chans", 3)), **kwargs)


def images(batch: int = 2, size: int = IMG, chans: int = 3) -> torch.Tensor:
    return torch.randn(batch, chans, size, size, generator=torch.Generator().manual_seed(123))


def randomize_(model: nn.Module) -> nn.Module:
    """Perturb every parameter: zero-init rules (ReZero's α, Fixup's zeroed layers) would hide wrong wiring."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


# --- forward, backward and the default cfg (timm: test_model_forward/backward/default_cfgs) -------------------------


@pytest.mark.parametrize("layer", LAYERS)
def test_backward_reaches_every_parameter(layer):
    model = randomize_(create(layer, num_classes=42)).train()
    out = model(images())
    assert out.shape == (2, 42) and not torch.isnan(out).any()
    out.mean().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, f"no gradient for {missing}"


@pytest.mark.parametrize("layer", LAYERS)
@torch.no_grad()
def test_reset_classifier_and_pooling_off(layer):
    model = randomize_(create(layer)).eval()
    x = images()
    tokens = model.forward_features(x)
    assert tokens.shape == (2, GRID * GRID + 1, DIM)
    assert model.get_classifier() is model.head and model.head.out_features == 5
    assert model.num_features == model.head_hidden_size == DIM

    model.reset_classifier(0)  # no head: pooled features
    out = model(x)
    assert out.shape == (2, model.num_features) and isinstance(model.get_classifier(), nn.Identity)
    torch.testing.assert_close(out, model.forward_head(tokens, pre_logits=True))
    model.reset_classifier(0, "")  # no head, no pooling: every token
    torch.testing.assert_close(model(x), tokens)
    model.reset_classifier(7, "avg")
    assert model.num_classes == 7 and model(x).shape == (2, 7)
    assert model.head.training is False  # the new head follows the model's mode, as timm's

    # the same through the constructor, as timm's test builds it
    bare = create(layer, num_classes=0, global_pool="").eval()
    assert bare(x).shape == (2, GRID * GRID + 1, DIM)


def test_default_cfg_is_truthful():
    model = create("layernorm", img_size=None, num_classes=None, depth=1)  # the cfg fills what is not given
    cfg = model.pretrained_cfg
    assert cfg["architecture"] == "normbench_vit"
    assert model.num_classes == cfg["num_classes"] and model.head.out_features == cfg["num_classes"]
    assert (model.in_chans, *model.patch_embed.img_size) == cfg["input_size"]
    state = model.state_dict()
    assert cfg["classifier"] + ".weight" in state and cfg["first_conv"] + ".weight" in state
    # fixed_input_size: the learned pos_embed has one grid, and another size is refused, as by timm's ViTs
    assert cfg["fixed_input_size"] is True
    small = create("layernorm", depth=1)
    with pytest.raises(AssertionError, match="doesn't match model"):
        small(images(size=IMG + PATCH))


@pytest.mark.parametrize("pool", ["token", "avg", "max", "avgmax", ""])
@torch.no_grad()
def test_global_pool_variants_pool_as_timm(pool):
    model = randomize_(create("dyt", global_pool=pool)).eval()
    x = images()
    tokens, patches = model.forward_features(x), model.forward_features(x)[:, 1:]
    expected = {"token": tokens[:, 0], "avg": patches.mean(1), "max": patches.amax(1),
                "avgmax": 0.5 * (patches.mean(1) + patches.amax(1)), "": tokens}[pool]
    # timm's placement: avg/max/avgmax normalize the pooled vector (fc_norm), token and none the tokens (norm)
    pooled_norm = pool in ("avg", "max", "avgmax")
    assert isinstance(model.fc_norm, nn.Identity) is not pooled_norm
    assert isinstance(model.norm, nn.Identity) is pooled_norm
    torch.testing.assert_close(model.forward_head(tokens, pre_logits=True), model.fc_norm(expected))
    assert model(x).shape == ((2, 5) if pool else (2, GRID * GRID + 1, 5))


def test_bad_pool_names_the_options():
    model = create("layernorm", depth=1)
    with pytest.raises(ValueError, match="global_pool must be one of .*'avg'"):
        model.reset_classifier(3, "mean")
    with pytest.raises(ValueError, match="needs class_token=True"):
        create("layernorm", depth=1, class_token=False, global_pool="avg").reset_classifier(3, "token")


# --- features (timm: test_model_forward_intermediates, test_model_forward_features) ---------------------------------


@pytest.mark.parametrize("layer", LAYERS)
@torch.no_grad()
def test_forward_intermediates(layer):
    model = randomize_(create(layer, depth=3)).eval()
    x = images()
    info = timm.models.FeatureInfo(model.feature_info, len(model.feature_info))  # as timm's test reads it
    assert info.channels() == [DIM] * 3 and info.reduction() == [PATCH] * 3
    final, inter = model.forward_intermediates(x)
    torch.testing.assert_close(final, model.forward_features(x))
    assert [t.shape for t in inter] == [(2, DIM, GRID, GRID)] * 3

    # indices: last n, a list, negative from the end; NLC keeps the patch tokens in order
    nlc = model.forward_intermediates(x, indices=[0, -1], output_fmt="NLC", intermediates_only=True)
    assert [t.shape for t in nlc] == [(2, GRID * GRID, DIM)] * 2
    torch.testing.assert_close(nlc[0], inter[0].flatten(2).transpose(1, 2))
    torch.testing.assert_close(nlc[1], inter[2].flatten(2).transpose(1, 2))
    last2 = model.forward_intermediates(x, indices=2, intermediates_only=True)
    torch.testing.assert_close(last2, inter[1:])

    # norm=True: the final norm applied to each; the last block's equals forward_features' patch tokens
    normed = model.forward_intermediates(x, indices=1, norm=True, output_fmt="NLC", intermediates_only=True)
    torch.testing.assert_close(normed[0], final[:, 1:])
    # stop_early gives the same values; prefix tokens come back as (patches, class token) pairs
    early = model.forward_intermediates(x, indices=[0], stop_early=True, intermediates_only=True)
    torch.testing.assert_close(early[0], inter[0])
    (patches, prefix), = model.forward_intermediates(x, indices=[1], return_prefix_tokens=True,
                                                     intermediates_only=True)
    assert prefix.shape == (2, 1, DIM) and patches.shape == (2, DIM, GRID, GRID)
    with pytest.raises(AssertionError, match="out of range"):
        model.forward_intermediates(x, indices=[3])


@pytest.mark.parametrize("layer", LAYERS)
@torch.no_grad()
def test_features_only(layer):
    features = create(layer, depth=3, features_only=True, out_indices=(0, 2)).eval()
    reference = create(layer, depth=3).eval()  # same seed, same weights before the getter prunes
    assert features.feature_info.channels() == [DIM, DIM]
    assert features.feature_info.reduction() == [PATCH, PATCH]
    assert "num_classes" not in features.pretrained_cfg  # timm's cfg for feature backbones
    x = images()
    out = features(x)
    assert [o.shape for o in out] == [(2, DIM, GRID, GRID)] * 2
    expected = reference.forward_intermediates(x, indices=[0, 2], intermediates_only=True)
    for o, e in zip(out, expected, strict=True):
        torch.testing.assert_close(o, e)


def test_features_only_default_indices_fit_a_shallow_model():
    assert len(create("layernorm", depth=2, features_only=True)(images())) == 2  # timm's default 3 > depth
    assert create("layernorm", depth=5, features_only=True).feature_info.module_name() == [
        "blocks.2", "blocks.3", "blocks.4"]


@pytest.mark.parametrize("layer", LAYERS)
@torch.no_grad()
def test_prune_intermediate_layers(layer):
    model = randomize_(create(layer, depth=3)).eval()
    x = images()
    before = model.forward_intermediates(x, indices=[0, 1], intermediates_only=True)
    assert model.prune_intermediate_layers([0, -2]) == [0, 1]
    assert len(model.blocks) == 2
    assert isinstance(model.head, nn.Identity) and model.num_classes == 0 and model.global_pool == ""
    after = model.forward_intermediates(x, indices=[0, 1], intermediates_only=True)
    for a, b in zip(after, before, strict=True):
        torch.testing.assert_close(a, b)
    model.prune_intermediate_layers(1, prune_norm=True)
    assert isinstance(model.norm, nn.Identity)


# --- gradient checkpointing ------------------------------------------------------------------------------------------


def _loss_and_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, dict]:
    model.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("layer", LAYERS)
def test_grad_checkpointing_gives_the_same_loss_and_grads(layer):
    model = randomize_(create(layer)).train()
    x, y = images(4), torch.tensor([0, 1, 2, 3])
    loss, grads = _loss_and_grads(model, x, y)

    calls = []
    model.blocks[0].register_forward_pre_hook(lambda *_: calls.append(1))  # recompute may stop before the end
    model.set_grad_checkpointing()
    assert model.grad_checkpointing
    ckpt_loss, ckpt_grads = _loss_and_grads(model, x, y)
    assert len(calls) == 2  # the block ran again in the backward pass: its activations were not kept
    torch.testing.assert_close(ckpt_loss, loss, rtol=0, atol=0)
    for name, grad in grads.items():
        torch.testing.assert_close(ckpt_grads[name], grad, rtol=1e-5, atol=1e-7, msg=name)


def test_grad_checkpointing_in_forward_intermediates_and_as_a_kwarg():
    model = randomize_(create("layerscale", grad_checkpointing=True))
    assert model.grad_checkpointing
    x = images().requires_grad_()
    final, inter = model.forward_intermediates(x)
    (final.sum() + sum(t.sum() for t in inter)).backward()
    grad = x.grad.clone()
    model.set_grad_checkpointing(False)
    x.grad = None
    final2, inter2 = model.forward_intermediates(x)
    torch.testing.assert_close(final2, final)
    (final2.sum() + sum(t.sum() for t in inter2)).backward()
    torch.testing.assert_close(x.grad, grad)


def test_grad_checkpointing_is_a_suite_key(write_suite):
    from normbench.contracts.suite import load_suite
    from normbench.train.loop import build_model

    suite = load_suite(write_suite(model={"embed_dim": 16, "num_heads": 2, "patch_size": 4,
                                          "grad_checkpointing": True}))
    cell = suite.cells()[0]
    assert cell.config.model.grad_checkpointing is True
    assert cell.config.flat()["model.grad_checkpointing"] is True
    data = SimpleNamespace(img_size=8, in_chans=1, num_classes=10)
    assert build_model(cell.config, data).grad_checkpointing is True
    assert build_model(CellConfig(), data).grad_checkpointing is False  # default off


# --- input size ------------------------------------------------------------------------------------------------------


@torch.no_grad()
def test_dynamic_img_size_resamples_pos_embed():
    fixed = randomize_(create("rmsnorm+layerscale")).eval()
    dynamic = create("rmsnorm+layerscale", dynamic_img_size=True).eval()
    dynamic.load_state_dict(fixed.state_dict())  # same keys and shapes
    x = images()
    torch.testing.assert_close(dynamic(x), fixed(x))  # the native size: pos_embed unchanged
    big = images(size=2 * IMG)
    assert dynamic(big).shape == (2, 5)
    _, inter = dynamic.forward_intermediates(big, indices=1)
    assert inter[0].shape == (2, DIM, 2 * GRID, 2 * GRID)
    assert dynamic._traits["fixed_input_size"] is False and fixed._traits["fixed_input_size"] is True


# --- pretrained=True from a local file (timm's train.py --pretrained-path) -------------------------------------------


@pytest.fixture
def checkpoint(tmp_path):
    """Save a trained-looking 3-channel, 10-class model of `layer`; returns (model, path)."""

    def save(layer: str) -> tuple[NormbenchViT, str]:
        source = randomize_(create(layer, seed=1, num_classes=10)).eval()
        path = tmp_path / f"{layer}.pth"
        torch.save(source.state_dict(), path)
        return source, str(path)

    return save


@pytest.mark.parametrize("layer", LAYERS)
@torch.no_grad()
def test_pretrained_local_file_loads_every_tensor(layer, checkpoint):
    source, path = checkpoint(layer)
    model = create(layer, num_classes=10, pretrained=True,
                   pretrained_cfg_overlay=dict(file=path, num_classes=10)).eval()
    for name, tensor in source.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], tensor, rtol=0, atol=0, msg=name)
    torch.testing.assert_close(model(images()), source(images()))


@pytest.mark.parametrize("layer", ["layernorm", "learnable_scaler+layerscale", "fixup"])
@torch.no_grad()
def test_pretrained_adapts_in_chans_and_num_classes_as_timm(layer, checkpoint):
    source, path = checkpoint(layer)
    src = source.state_dict()
    # grayscale input, 5 classes: timm sums the patch embedding over the RGB channels and drops the head
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = create(layer, seed=7, in_chans=1, num_classes=5, pretrained=True,
                       pretrained_cfg_overlay=dict(file=path, num_classes=10))
    state = model.state_dict()
    torch.testing.assert_close(state["patch_embed.proj.weight"], src["patch_embed.proj.weight"].sum(1, keepdim=True))
    assert state["head.weight"].shape == (5, DIM) and not torch.equal(state["head.weight"], src["head.weight"][:5])
    for name in src.keys() - {"patch_embed.proj.weight", "head.weight", "head.bias"}:
        torch.testing.assert_close(state[name], src[name], rtol=0, atol=0, msg=name)
    assert model(images(chans=1)).shape == (2, 5)

    # timm's train.py --pretrained-path sets num_classes=-1: the head is always retrained, even at 10 classes
    fresh_head = create(layer, seed=7, num_classes=10, pretrained=True,
                        pretrained_cfg_overlay=dict(file=path, num_classes=-1))
    assert not torch.equal(fresh_head.head.weight, src["head.weight"])
    torch.testing.assert_close(fresh_head.pos_embed, src["pos_embed"])


@pytest.mark.parametrize("layer", ["layernorm", *FAMILIES])
@torch.no_grad()
def test_every_heads_weights_are_the_cfgs_classifier_so_another_class_count_fine_tunes(layer, checkpoint):
    """timm's `create_model(..., pretrained=True, num_classes=5)` from 10-class weights drops each `classifier`
    name's weight and bias: the names must cover the whole head (nGPT's `head.logit_scale` too), each a weight."""
    source, path = checkpoint(layer)
    model = create(layer, num_classes=5, pretrained=True, pretrained_cfg_overlay=dict(file=path, num_classes=10))
    names = model.pretrained_cfg["classifier"]
    names = (names,) if isinstance(names, str) else names
    state, src = model.state_dict(), source.state_dict()
    head = {k for k in state if k.startswith("head.")}
    assert head == {f"{n}.{p}" for n in names for p in ("weight", "bias") if f"{n}.{p}" in state}
    assert all(f"{n}.weight" in state for n in names)  # timm's test_model_default_cfgs
    assert all(state[k].shape[0] == 5 for k in head)
    for name in src.keys() - head:
        torch.testing.assert_close(state[name], src[name], rtol=0, atol=0, msg=name)
    assert model(images()).shape == (2, 5)


@torch.no_grad()
def test_pretrained_to_another_img_size_resamples_pos_embed(checkpoint):
    source, path = checkpoint("layerscale")
    model = create("layerscale", img_size=2 * IMG, num_classes=10, pretrained=True,
                   pretrained_cfg_overlay=dict(file=path, num_classes=10, input_size=(3, IMG, IMG)))
    assert model.pos_embed.shape == (1, (2 * GRID) ** 2 + 1, DIM)
    torch.testing.assert_close(model.pos_embed[:, :1], source.pos_embed[:, :1])  # the class token's is kept
    assert model(images(size=2 * IMG)).shape == (2, 10)


def test_features_only_loads_a_local_file(checkpoint):
    source, path = checkpoint("rezero")
    features = create("rezero", features_only=True, out_indices=[1], pretrained=True,
                      pretrained_cfg_overlay=dict(file=path, num_classes=10)).eval()
    with torch.no_grad():
        expected = source.forward_intermediates(images(), indices=[1], intermediates_only=True)
        torch.testing.assert_close(features(images())[0], expected[0])


# --- FX and TorchScript (timm: test_model_forward_fx_torchscript, test_model_forward_torchscript) --------------------


def _fx_model(model: nn.Module) -> nn.Module:
    """timm's test helper: trace with timm's leaf modules and autowrapped functions, return the last node."""
    tracer_kwargs = dict(leaf_modules=get_notrace_modules(), autowrap_functions=get_notrace_functions(),
                         param_shapes_constant=True)
    train_nodes, eval_nodes = get_graph_node_names(model, tracer_kwargs=tracer_kwargs)
    return create_feature_extractor(model, train_return_nodes=[train_nodes[-1]],
                                    eval_return_nodes=[eval_nodes[-1]], tracer_kwargs=tracer_kwargs)


@pytest.mark.parametrize("layer", LAYERS)
@torch.no_grad()
def test_fx_then_torchscript(layer):
    model = randomize_(create(layer)).eval()
    x = images()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script's deprecation notice
        scripted_fx = torch.jit.script(_fx_model(model))
        scripted = torch.jit.script(model)
    expected = model(x)
    torch.testing.assert_close(next(iter(scripted_fx(x).values())), expected)
    torch.testing.assert_close(scripted(x), expected)


@pytest.mark.parametrize("name", normbench.list_layers())
@torch.no_grad()
def test_each_layer_module_traces_and_scripts_alone(name):
    """Traced as the root module, a layer's forward signature goes into the generated code verbatim."""
    spec = get_spec(name)
    if spec.kind == "norm":
        module = spec.cls(DIM)
    elif spec.kind == "gate":
        module = spec.cls(DIM, depth=2)
    elif spec.kind == "modifier":  # qk_norm's class is the norm q and k get
        module = spec.cls(DIM)
    else:
        module = spec.cls(DIM, 2, depth=2, norm_layer=normbench.get_layer("layernorm"), gate_layer=nn.Identity)
    randomize_(module).eval()
    x = torch.randn(2, 5, DIM)
    if spec.family is not None and spec.family.expand is not None:  # a family's block takes what its expand makes
        x = spec.family.expand(DIM, depth=2)(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(torch.fx.symbolic_trace(module))
    torch.testing.assert_close(scripted(x), module(x))
