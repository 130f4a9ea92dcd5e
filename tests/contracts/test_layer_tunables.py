"""normbench.contracts.layer_tunables: a layer's own hyper-parameters in `tune.space` (`layer.<name>`), within its
source's range, reaching the layer they belong to and no other."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from normbench.contracts.layer_tunables import distance_text, space_for
from normbench.contracts.suite import parse_suite
from normbench.contracts.tuning import apply_sampled
from normbench.errors import SuiteError


def suite_with(space: dict, layers=("layernorm", "layerscale", "hc")):
    raw = {"name": "t", "dataset": {"name": "digits"},
           "matrix": {"depth": [2], "layer": list(layers), "seed": [0]},
           "tune": {"trials": 2, "space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}, **space}}}
    return parse_suite(raw, Path("t.yaml"))


def test_each_row_searches_the_tunables_its_layer_declares_at_its_sources_range():
    suite = suite_with({"layer.init_values": "source", "layer.expansion_rate": "source"})
    assert set(space_for(suite.tune.space, "layernorm")) == {"lr"}  # nothing of its own: the same trials, fewer keys
    assert space_for(suite.tune.space, "layerscale")["layer.init_values"] == {"low": 1e-6, "high": 0.1, "log": True}
    assert space_for(suite.tune.space, "layerscale+qk_norm")["layer.init_values"]["high"] == 0.1  # a combination too
    assert space_for(suite.tune.space, "hc")["layer.expansion_rate"] == {"choices": [1, 2, 4, 8]}


def test_a_sampled_tunable_reaches_its_target_and_leaves_the_recipe_dicts_whole():
    suite = suite_with({"layer.init_values": "source"})
    cell = suite.cell({"depth": 2, "layer": "layerscale", "seed": 0})
    config = apply_sampled(cell, {"lr": 3e-3, "layer.init_values": 1e-4})
    assert config.model.init_values == 1e-4 and config.train.lr == 3e-3
    raw = {"name": "t", "dataset": {"name": "digits"}, "model": {"block_kwargs": {"expansion_rate": 4}},
           "matrix": {"depth": [2], "layer": ["hc"], "seed": [0]},
           "tune": {"trials": 1, "space": {"layer.expansion_rate": {"choices": [2, 4]}}}}
    hc = parse_suite(raw, Path("t.yaml")).cell({"depth": 2, "layer": "hc", "seed": 0})
    assert apply_sampled(hc, {"layer.expansion_rate": 2}).model.block_kwargs == {"expansion_rate": 2}


def test_the_sampled_value_trains_in_the_model():
    import timm

    import normbench  # noqa: F401  (registers the template)

    suite = suite_with({"layer.init_values": "source"})
    config = apply_sampled(suite.cell({"depth": 2, "layer": "layerscale", "seed": 0}), {"layer.init_values": 1e-3})
    model = timm.create_model("normbench_vit", layer="layerscale", depth=2, embed_dim=16, num_heads=2, patch_size=4,
                              img_size=8, num_classes=3, init_values=config.model.init_values)
    assert float(model.blocks[0].ls1.gamma[0].detach()) == pytest.approx(1e-3)


@pytest.mark.parametrize(("space", "message"), [
    ({"layer.init_values": {"low": 1e-8, "high": 0.1, "log": True}}, "outside layerscale's source range"),
    ({"layer.init_values": {"low": 1e-6, "high": 1.0, "log": True}}, "outside layerscale's source range"),
    ({"layer.expansion_rate": {"choices": [2, 16]}}, "hc's source tried [1, 2, 4, 8]"),
    ({"layer.alpha_init": "source"}, "no layer of this suite declares a tunable `alpha_init`"),
    ({"layer.init_values": {"low": 0, "high": 0.1, "log": True}}, "log: true needs low > 0"),
])
def test_a_space_outside_a_sources_range_is_refused_in_one_line(space, message):
    with pytest.raises(SuiteError, match=re.escape(message)) as refused:
        suite_with(space)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(("value", "reference", "expected"), [
    (3.16e-3, 1e-3, "x3.16"), (1e-4, 1e-3, "/10"), (0.05, 0.05, "="), (0.0, 0.05, "-0.05"), ("a", "b", "b -> a"),
])
def test_how_far_a_tuned_value_moved_from_the_grids(value, reference, expected):
    assert distance_text(value, reference) == expected


@pytest.mark.parametrize(("layer", "value", "source_space"), [
    ("dyt", 0.9, {"low": 0.5, "high": 1.2, "log": False}), ("derf", 1.0, {"choices": [0.5, 1.0]})])
def test_dyt_and_derf_alpha_is_searched_in_its_sources_values_and_reaches_the_norms(layer, value, source_space):
    import timm

    import normbench  # noqa: F401  (registers the template)

    suite = suite_with({"layer.alpha_init": "source"}, layers=("layernorm", layer))
    assert space_for(suite.tune.space, layer)["layer.alpha_init"] == source_space
    assert "layer.alpha_init" not in space_for(suite.tune.space, "layernorm")
    config = apply_sampled(suite.cell({"depth": 2, "layer": layer, "seed": 0}), {"layer.alpha_init": value})
    assert config.model.norm_kwargs == {"alpha_init": value}
    model = timm.create_model("normbench_vit", layer=layer, depth=2, embed_dim=16, num_heads=2, patch_size=4,
                              img_size=8, num_classes=3, norm_kwargs=config.model.norm_kwargs)
    alphas = [float(m.alpha.detach()) for m in model.modules() if type(m).__name__ in ("DyT", "Derf")]
    assert len(alphas) == 2 * 2 + 1 and all(a == pytest.approx(value) for a in alphas)  # 2 per block + the final
    with pytest.raises(SuiteError, match=f"outside {layer}'s source range|{layer}'s source tried"):
        suite_with({"layer.alpha_init": {"low": 0.1, "high": 0.4} if layer == "dyt" else {"choices": [0.3]}},
                   layers=("layernorm", layer))
