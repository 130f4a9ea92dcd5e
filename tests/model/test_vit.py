"""The `normbench_vit` template: timm interchange, registration with timm, depth, stochastic depth, pooling."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import pytest
import timm
import torch
from timm.layers import DropPath
from timm.models.vision_transformer import VisionTransformer
from torch import nn

import normbench
from normbench.model.vit import NormbenchViT, drop_path_rates

TINY = dict(embed_dim=32, num_heads=2, patch_size=4, img_size=16, num_classes=5)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --- timm interchange -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("layer", "normbench_kwargs", "timm_kwargs"), [
    ("layernorm", {}, {}),
    ("layerscale", {"init_values": 1e-2}, {"init_values": 1e-2}),
    ("rmsnorm", {}, {"norm_layer": functools.partial(torch.nn.RMSNorm, eps=1e-6)}),
])
@torch.no_grad()
def test_timm_checkpoint_loads_strictly_and_gives_the_same_logits(layer, normbench_kwargs, timm_kwargs):
    arch = dict(img_size=32, patch_size=4, embed_dim=64, depth=3, num_heads=4, num_classes=10)
    torch.manual_seed(0)
    reference = VisionTransformer(**arch, **timm_kwargs).eval()
    torch.manual_seed(1)
    model = timm.create_model("normbench_vit", layer=layer, **arch, **normbench_kwargs).eval()
    assert model.state_dict().keys() == reference.state_dict().keys()
    model.load_state_dict(reference.state_dict(), strict=True)
    x = torch.randn(4, 3, 32, 32)
    assert (model(x) - reference(x)).abs().max().item() < 1e-6
    torch.testing.assert_close(model.forward_features(x), reference.forward_features(x), atol=1e-6, rtol=0)


@torch.no_grad()
def test_timm_checkpoint_loads_with_avg_pooling():
    arch = dict(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2, num_classes=5, global_pool="avg")
    reference = VisionTransformer(**arch).eval()
    model = timm.create_model("normbench_vit", **arch).eval()
    model.load_state_dict(reference.state_dict(), strict=True)
    x = torch.randn(2, 3, 16, 16)
    assert (model(x) - reference(x)).abs().max().item() < 1e-6


# --- registration with timm -----------------------------------------------------------------------------------------


def test_create_model_after_import_normbench():
    assert "normbench_vit" in timm.list_models("normbench*")
    model = timm.create_model("normbench_vit", layer="layerscale", depth=2, **TINY)
    assert isinstance(model, NormbenchViT)
    assert model.pretrained_cfg["architecture"] == "normbench_vit"
    assert model(torch.randn(2, 3, 16, 16)).shape == (2, 5)


def test_pretrained_without_a_file_names_the_fix():
    with pytest.raises(ValueError, match=r"no published pretrained weights.*pretrained_cfg_overlay=dict\(file="):
        timm.create_model("normbench_vit", pretrained=True, depth=1, **TINY)


_CREATE = ('m = timm.create_model("normbench_vit", layer="layerscale", depth=2, embed_dim=32, num_heads=2, '
           'img_size=16, patch_size=4)\nassert type(m).__name__ == "NormbenchViT"\n')
_FRESH_PROCESS_CHECKS = {
    "normbench first": "import normbench\nimport timm\n" + _CREATE,
    "timm first": "import timm\nimport normbench\n" + _CREATE,
    "light import": "import normbench, sys\nassert 'torch' not in sys.modules\nassert 'timm' not in sys.modules\n",
    # `importlib.util.find_spec` is the usual "is timm installed?" probe: it looks timm up without importing it
    "find_spec probe": "import importlib.util\nimport normbench\nassert importlib.util.find_spec('timm')\n"
                       "import timm\n" + _CREATE,
}


@pytest.fixture(scope="module")
def fresh_process_results() -> dict[str, tuple[int, str]]:
    """Each check in its own fresh interpreter; started together, since most of their time is importing torch."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = {name: subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, env=env)
             for name, code in _FRESH_PROCESS_CHECKS.items()}
    results = {}
    for name, proc in procs.items():
        output, _ = proc.communicate(timeout=180)
        results[name] = (proc.returncode, output)
    return results


@pytest.mark.parametrize("order", ["normbench first", "timm first"])
def test_create_model_in_a_fresh_process_in_either_import_order(order, fresh_process_results):
    returncode, output = fresh_process_results[order]
    assert returncode == 0, output


def test_import_normbench_does_not_import_torch(fresh_process_results):
    returncode, output = fresh_process_results["light import"]
    assert returncode == 0, output


def test_create_model_after_a_find_spec_probe(fresh_process_results):
    returncode, output = fresh_process_results["find_spec probe"]
    assert returncode == 0, output


# --- depth ----------------------------------------------------------------------------------------------------------


def test_the_issue_example_builds_with_cait_gammas():
    model = timm.create_model("normbench_vit", layer="layerscale", depth=36, embed_dim=192, num_heads=3,
                              patch_size=16, img_size=224, in_chans=3, num_classes=1000)
    assert len(model.blocks) == 36
    assert model.head.out_features == 1000
    for block in model.blocks:
        assert torch.equal(block.ls1.gamma, torch.full((192,), 1e-6))
        assert torch.equal(block.ls2.gamma, torch.full((192,), 1e-6))


@pytest.mark.parametrize("layer", ["layernorm", "layerscale"])
def test_depth_96_trains_a_step(layer):
    torch.manual_seed(0)
    model = timm.create_model("normbench_vit", layer=layer, depth=96, **TINY)
    out = model(torch.randn(2, 3, 16, 16))
    assert out.shape == (2, 5) and torch.isfinite(out).all()
    nn.functional.cross_entropy(out, torch.tensor([0, 1])).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


# --- stochastic depth and pooling -----------------------------------------------------------------------------------


def _block_rates(model: NormbenchViT) -> list[float]:
    rates = []
    for block in model.blocks:
        r1, r2 = (m.drop_prob if isinstance(m, DropPath) else 0.0 for m in (block.drop_path1, block.drop_path2))
        assert r1 == r2
        rates.append(r1)
    return rates


def test_drop_path_linear_ramps_from_zero_to_the_rate():
    model = timm.create_model("normbench_vit", depth=5, drop_path_rate=0.2, **TINY)
    assert _block_rates(model) == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2])
    assert isinstance(model.blocks[0].drop_path1, nn.Identity)
    for depth in (1, 2, 5):
        assert drop_path_rates(0.2, depth) == pytest.approx(torch.linspace(0, 0.2, depth).tolist())


def test_drop_path_uniform_is_equal_across_blocks():
    model = timm.create_model("normbench_vit", depth=4, drop_path_rate=0.1, drop_path_mode="uniform", **TINY)
    assert _block_rates(model) == [0.1] * 4
    assert drop_path_rates(0.1, 3, "uniform") == [0.1] * 3


def test_drop_path_zero_rate_adds_no_droppath():
    model = timm.create_model("normbench_vit", depth=3, **TINY)
    assert not any(isinstance(m, DropPath) for m in model.modules())


def test_drop_path_bad_mode():
    with pytest.raises(ValueError, match="drop_path_mode"):
        drop_path_rates(0.1, 4, "exponential")  # type: ignore[arg-type]


def test_drop_path_trains_stochastically_and_evaluates_deterministically():
    model = timm.create_model("normbench_vit", depth=4, drop_path_rate=0.5, drop_path_mode="uniform", **TINY)
    x = torch.randn(2, 3, 16, 16)
    torch.manual_seed(0)
    a = model.train()(x)
    b = model(x)
    assert not torch.equal(a, b)
    model.eval()
    assert torch.equal(model(x), model(x))


@torch.no_grad()
def test_global_pool_avg():
    model = timm.create_model("normbench_vit", depth=2, global_pool="avg", layer="rmsnorm", **TINY).eval()
    assert isinstance(model.norm, nn.Identity) and isinstance(model.fc_norm, normbench.get_layer("rmsnorm"))
    x = torch.randn(2, 3, 16, 16)
    out = model(x)
    assert out.shape == (2, 5) and torch.isfinite(out).all()
    tokens = model.forward_features(x)
    torch.testing.assert_close(out, model.head(model.fc_norm(tokens[:, 1:].mean(dim=1))))


@torch.no_grad()
def test_global_pool_avg_without_class_token():
    model = timm.create_model("normbench_vit", depth=2, global_pool="avg", class_token=False, **TINY).eval()
    assert model.cls_token is None
    assert model.forward_features(torch.randn(2, 3, 16, 16)).shape == (2, 16, 32)
    assert model(torch.randn(2, 3, 16, 16)).shape == (2, 5)


def test_pooling_errors():
    with pytest.raises(ValueError, match="global_pool must be one of"):
        timm.create_model("normbench_vit", depth=1, global_pool="map", **TINY)
    with pytest.raises(ValueError, match="class_token"):
        timm.create_model("normbench_vit", depth=1, class_token=False, **TINY)


def test_num_classes_zero_gives_features():
    model = timm.create_model("normbench_vit", depth=1, **{**TINY, "num_classes": 0})
    assert model(torch.randn(2, 3, 16, 16)).shape == (2, 32)
