"""Block families as a kind of the registry: `normbench layers` lists them, a plugin adds one the same way and it
trains from a suite, and what a family cannot take is refused in one line with exit 2 (an expansion rate below 1, a
norm or gate it replaces, a second block class, weights from another residual stream)."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest
import timm
import torch
from safetensors.torch import save_file

from normbench.cli import main
from normbench.layers import LayerError, get_spec, plugins, registry, resolve_layer
from normbench.model.vit import NormbenchViT
from tests.conftest import REPO

FAMILIES = ("hc", "hc_dynamic", "mhc", "ngpt", "value_residual", "frac_connections", "attn_res")

PLUGIN_FAMILY = '''
import torch
from torch import nn

import normbench
from normbench.layers import Family, PreNormBlock

STEPS = []  # the after-step hook's calls, for the test


class TwoCopies(nn.Module):
    def __init__(self, dim, *, depth, **block_kwargs):
        super().__init__()

    def forward(self, x):  # (B, N, C) -> (B, N, 2, C)
        return torch.stack([x, x], dim=-2)


class MeanOfStreams(nn.Module):
    def __init__(self, dim, *, depth, **block_kwargs):
        super().__init__()

    def forward(self, h):  # (B, N, 2, C) -> (B, N, C)
        return h.mean(dim=-2)


def count_steps(model):
    STEPS.append(len(model.blocks))


@normbench.register_layer("toy_two_streams", kind="family", partner="layernorm",
                          family=Family(expand=TwoCopies, merge=MeanOfStreams, after_step=count_steps),
                          formula="two streams, each x + F(norm(mean))", source="tests/layers/test_families.py")
class TwoStreamBlock(PreNormBlock):
    def forward(self, h):
        h = h + self.drop_path1(self.ls1(self.attn(self.norm1(h.mean(dim=-2))))).unsqueeze(-2)
        h = h + self.drop_path2(self.ls2(self.mlp(self.norm2(h.mean(dim=-2))))).unsqueeze(-2)
        return h
'''


@pytest.fixture
def plugin_family(tmp_path, monkeypatch):
    """A plugin module on PYTHONPATH, named in NORMBENCH_LAYER_MODULES, loaded into a scratch registry."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "toy_family_plugin.py").write_text(PLUGIN_FAMILY)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(plugins, "_failed", {})
    monkeypatch.setattr(plugins, "_loaded", False)
    monkeypatch.setattr(plugins, "entry_points", lambda *, group: [])
    monkeypatch.setenv(plugins.MODULES_ENV, "toy_family_plugin")
    yield
    sys.modules.pop("toy_family_plugin", None)


def test_normbench_layers_lists_the_families_with_formula_and_source(capsys):
    assert main(["layers"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:] if line and not line.startswith(" ")}
    for name in FAMILIES:
        spec = get_spec(name)
        assert rows[name][1] == "family"
        assert spec.formula and spec.source and spec.family is not None
    assert "Zhu et al. 2025" in out and "2512.24880" in out and "Loshchilov et al. 2025" in out
    assert "2410.17897" in out and "2503.14125" in out and "2603.15031" in out


def test_a_plugin_family_registers_and_trains_from_a_suite(plugin_family, write_suite, tmp_path, one_torch_thread):
    assert get_spec("toy_two_streams").kind == "family"  # the lookup loads the plugin
    path = write_suite(matrix={"depth": [2], "layer": ["layernorm", "toy_two_streams"], "lr": [1.0e-3], "seed": [0]})
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out)]) == 0
    frame = pd.read_csv(out / "results.csv")
    row = frame[frame["layer"] == "toy_two_streams"]
    assert len(row) == 1 and row["status"].item() == "ok" and row["val_top1"].item() > 0
    steps = sys.modules["toy_family_plugin"].STEPS
    assert steps and set(steps) == {2}, "the loop called the family's after-step hook with the model"


# --- bad input: one line, exit 2 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("layer, message", [
    ("hc+post_ln", "`hc` and `post_ln` each bring their own block"),
    ("mhc+deepnorm", "`mhc` and `deepnorm` each bring their own block"),
    ("hc+mhc", "names two families (`hc` and `mhc`)"),
    ("ngpt+layernorm", "`ngpt` takes no norm (`layernorm`)"),
    ("ngpt+layerscale", "`ngpt` takes no gate (`layerscale`)"),
    ("ngpt+qk_norm", "`ngpt` takes no modifier (`qk_norm`)"),
    ("value_residual+hc", "names two families (`value_residual` and `hc`)"),
    ("attn_res+gpas", "`attn_res` and `gpas` each bring their own block"),
    ("frac_connections+hybridnorm", "`frac_connections` and `hybridnorm` each bring their own block"),
])
def test_a_family_with_what_it_replaces_is_refused_by_the_cli_in_one_line(layer, message, write_suite, tmp_path,
                                                                           capsys):
    path = write_suite(matrix={"depth": [1], "layer": [layer], "lr": [1.0e-3], "seed": [0]})
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "out").exists(), "refused before anything is created"


@pytest.mark.parametrize("rate", [0, -1])
def test_an_expansion_rate_below_1_is_refused_by_the_cli_in_one_line(rate, write_suite, tmp_path, capsys):
    model = {"embed_dim": 16, "num_heads": 2, "patch_size": 4, "block_kwargs": {"expansion_rate": rate}}
    path = write_suite(model=model, matrix={"depth": [1], "layer": ["hc"], "lr": [1.0e-3], "seed": [0]})
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.block_kwargs.expansion_rate" in err, err


def test_block_kwargs_a_block_does_not_take_are_refused_in_one_line():
    with pytest.raises(LayerError, match="`expansion_rate` is not an argument of `layernorm`'s block"):
        resolve_layer("layernorm").check_block_kwargs({"expansion_rate": 2})
    resolve_layer("mix_ln").check_block_kwargs({"post_ln_ratio": 0.5})  # a placement's own argument is fine


@pytest.mark.parametrize("layer", ["hc", "ngpt"])
def test_a_family_refuses_weights_from_another_residual_stream_in_one_line(layer, tmp_path):
    # the checkpoint path a family cannot take: a plain ViT's weights (timm's, or normbench's layernorm model's)
    tiny = dict(depth=2, embed_dim=32, num_heads=2, patch_size=4, img_size=16, num_classes=5)
    file = tmp_path / "layernorm.safetensors"
    save_file(NormbenchViT(layer="layernorm", **tiny).state_dict(), str(file))
    with pytest.raises(LayerError, match=f"they are not a `{layer}` model's") as excinfo:
        timm.create_model("normbench_vit", pretrained=True, pretrained_cfg_overlay=dict(file=str(file)), layer=layer,
                          **tiny)
    assert "\n" not in str(excinfo.value)
    own = tmp_path / f"{layer}.safetensors"  # its own weights load, and give its logits
    torch.manual_seed(3)
    model = NormbenchViT(layer=layer, **tiny)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(own))
    loaded = timm.create_model("normbench_vit", pretrained=True, layer=layer, **tiny,
                               pretrained_cfg_overlay=dict(file=str(own), num_classes=5))  # else timm drops the head
    x = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(loaded(x), model(x))


DDP_SCRIPT = """
import json, sys
import torch
from normbench.data.config import DataConfig
from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.train.distributed import from_env, shutdown
from normbench.train.loop import build_fit, train_epoch
from normbench.layers.ngpt import ngpt_normalize

dist = from_env()
out = {}
for layer in ("hc_dynamic", "mhc", "ngpt"):
    cell = CellConfig(model=ModelConfig(layer=layer, depth=2, embed_dim=16, num_heads=2, patch_size=4),
                      train=TrainConfig(epochs=1, batch_size=32, warmup_epochs=0, lr=3e-3, compile="off", amp="none",
                                        telemetry_every=0),
                      data=DataConfig(name="synthetic", num_classes=5, synthetic_size=16, train_size=96, val_size=32,
                                      test_size=32))
    torch.manual_seed(0)
    fit = build_fit(cell, "cpu", None, dist)
    trained = train_epoch(fit, 0)
    flat = torch.cat([p.detach().flatten() for p in fit.model.parameters()])
    off_sphere = 0.0
    if layer == "ngpt":
        before = flat.clone()
        ngpt_normalize(fit.model)  # already on the sphere: renormalising changes nothing
        off_sphere = (torch.cat([p.detach().flatten() for p in fit.model.parameters()]) - before).abs().max().item()
    out[layer] = {"steps": trained.optimizer_steps, "weights": flat.tolist(), "off_sphere": off_sphere}
json.dump(out, open(sys.argv[1] + f"/rank{dist.rank}.json", "w"))
shutdown(dist)
"""


def test_every_family_takes_ddp_and_its_ranks_keep_identical_weights(tmp_path):
    """DDP is a path every family takes: the gradients are all-reduced as any model's, and nGPT's after-step
    renormalisation runs on each rank's identical weights, so the ranks stay identical (and on the sphere)."""
    from tests.train.test_ddp import torchrun

    script = tmp_path / "rank.py"
    script.write_text(DDP_SCRIPT)
    done = torchrun(str(script), str(tmp_path), cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for layer in ("hc_dynamic", "mhc", "ngpt"):
        assert ranks[0][layer]["steps"] == ranks[1][layer]["steps"] == 3  # 96 images, 32 a step, 16 per rank
        assert ranks[0][layer]["weights"] == ranks[1][layer]["weights"], f"{layer}: the ranks drifted apart"
    assert ranks[0]["ngpt"]["off_sphere"] < 1e-6


FRONTIER = ["seednorm", "hybridnorm_star", "gated_attn", "gpas", "completep", "value_residual", "frac_connections",
            "attn_res"]


@pytest.mark.parametrize("layer", FRONTIER)
def test_the_2025_2026_entries_resume_from_a_checkpoint_on_their_trajectory(layer, tmp_path, one_torch_thread):
    """A cell's checkpoint after epoch 1 resumes to the same losses as the cell trained without a stop (the families'
    carried values and sources are rebuilt by each forward: only parameters and optimizer state are kept)."""
    from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
    from normbench.train.checkpoint import Keeper, read, recipe_of
    from normbench.train.loop import train_cell

    cell = CellConfig(model=ModelConfig(layer=layer, depth=3, embed_dim=32, num_heads=2, patch_size=4),
                      train=TrainConfig(epochs=2, batch_size=256, lr=1e-3, warmup_epochs=1, telemetry_every=0))
    path = tmp_path / "cell.pt"
    whole = train_cell(cell, "cpu", keeper=Keeper(path=path, recipe=recipe_of(cell), interval_s=1e-9))
    resumed = train_cell(cell, "cpu", resume=read(path, recipe_of(cell)))
    assert [h["train_loss"] for h in resumed.history] == pytest.approx([h["train_loss"] for h in whole.history],
                                                                       rel=1e-5)
