"""The layer registry (lookup, filtering, errors, plugins, CLI) and `resolve_layer`'s composition rules."""

from __future__ import annotations

import fnmatch
import types

import pytest
import torch
from torch import nn

import normbench
from normbench import cli
from normbench.errors import NormbenchError, UnknownLayerError
from normbench.layers import (
    FixupBias,
    LayerScale,
    PostNormBlock,
    PreNormBlock,
    get_spec,
    plugins,
    registry,
    resolve_layer,
)
from normbench.layers.fixup import fixup_init
from tests.layers._cases import ALL_LAYERS, FAMILIES, GATES, MODIFIERS, NORMS, PLACEMENTS, tiny_vit


@pytest.fixture
def scratch_registry(monkeypatch):
    """A copy of the registry for tests that register layers; the real one is restored afterwards."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    return registry._REGISTRY


# --- lookup and filtering -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", normbench.list_layers())
def test_get_layer_returns_the_registered_class(name):
    spec = get_spec(name)
    assert normbench.get_layer(name) is spec.cls
    assert spec.name == name
    assert isinstance(spec.cls, type) and issubclass(spec.cls, nn.Module)
    assert spec.kind in ("norm", "gate", "placement", "modifier", "family")
    assert spec.formula.strip() and spec.source.strip()
    assert "+" not in name
    if spec.partner is not None:
        assert get_spec(spec.partner).kind == "norm", "a partner fills the norm slots"


def test_builtin_families_are_registered():
    for name in ("layernorm", "rmsnorm", "dyt", "learnable_scaler", "none", "layerscale", "rezero", "skipinit",
                 "fixup", "tfixup", "post_ln", "deepnorm", "qk_norm", "res_post_norm", "res_post_norm_olmo2", "derf",
                 "peri_ln", "lns", "mix_ln", "admin", "depth_mup", "scaled_init", "normformer", "seednorm",
                 "hybridnorm", "hybridnorm_star", "gated_attn", "gpas", "value_residual", "frac_connections",
                 "attn_res", "completep"):
        assert name in normbench.list_layers()


@pytest.mark.parametrize("pattern", ["*", "learnable*", "*norm", "?ezero", "layer*", "nothing-matches-*"])
def test_list_layers_filters_by_wildcard(pattern):
    names = normbench.list_layers(pattern)
    assert names == sorted(names)
    assert names == [n for n in normbench.list_layers() if fnmatch.fnmatchcase(n, pattern)]


def test_list_layers_wildcard_examples():
    assert normbench.list_layers("learnable*") == ["learnable_scaler", "learnable_scaler_ones"]
    assert "rezero" in normbench.list_layers("?ezero")
    assert normbench.list_layers("nothing-matches-*") == []


@pytest.mark.parametrize("kind", ["norm", "gate", "placement", "modifier", "family"])
def test_list_layers_filters_by_kind(kind):
    names = normbench.list_layers(kind=kind)
    assert names
    assert all(get_spec(n).kind == kind for n in names)
    assert set(names) == {n for n in normbench.list_layers() if get_spec(n).kind == kind}


def test_kinds_partition_the_registry():
    assert sorted(NORMS + GATES + PLACEMENTS + MODIFIERS + FAMILIES) == normbench.list_layers()
    assert normbench.list_layers("layer*", kind="gate") == ["layerscale"]


# --- errors ---------------------------------------------------------------------------------------------------------


def test_unknown_layer_suggests_the_closest_name():
    with pytest.raises(UnknownLayerError) as excinfo:
        normbench.get_layer("layernrom")
    assert isinstance(excinfo.value, KeyError)
    assert isinstance(excinfo.value, NormbenchError)
    assert "did you mean `layernorm`" in str(excinfo.value)


def test_unknown_layer_is_a_keyerror_everywhere():
    with pytest.raises(KeyError, match="unknown layer `nosuchthing`"):
        get_spec("nosuchthing")
    with pytest.raises(KeyError, match="did you mean `layerscale`"):
        resolve_layer("rmsnorm+layerscal")


def test_reregistering_a_name_warns_and_replaces():
    original = normbench.get_layer("layernorm")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
        with pytest.warns(UserWarning, match="overwriting layer 'layernorm'"):
            @normbench.register_layer("layernorm", kind="norm", formula="f", source="s")
            class Replacement(nn.LayerNorm):
                pass
        assert normbench.get_layer("layernorm") is Replacement
    assert normbench.get_layer("layernorm") is original


@pytest.mark.parametrize("name", ["a+b", "layernorm+", "+x"])
def test_names_with_plus_are_rejected(name, scratch_registry):
    with pytest.raises(ValueError, match=r"\+"):
        normbench.register_layer(name, kind="norm", formula="f", source="s")
    assert name not in normbench.list_layers()


def test_unknown_kind_is_rejected(scratch_registry):
    with pytest.raises(ValueError, match="kind"):
        normbench.register_layer("x", kind="activation", formula="f", source="s")  # type: ignore[arg-type]


# --- plugins --------------------------------------------------------------------------------------------------------


class _ToyNorm(nn.LayerNorm):
    def __init__(self, dim, eps=1e-6, device=None, dtype=None):
        super().__init__(dim, eps=eps, device=device, dtype=dtype)


def _register_toy() -> None:
    normbench.register_layer("toy_plugin_norm", kind="norm", formula="toy", source="a plugin")(_ToyNorm)


class _FakeEntryPoint:
    """What `importlib.metadata.entry_points(group=...)` yields: `name` and `value` name it, `load()` loads it."""

    name, value = "toy", "toy_pkg.layers"
    group = plugins.ENTRY_POINT_GROUP

    def __init__(self, target: str) -> None:
        self.target = target

    def load(self):
        if self.target == "function":  # `toy = "toy_pkg:register"`: the registry calls it
            return _register_toy
        _register_toy()  # `toy = "toy_pkg.layers"`: importing the module registers
        return types.ModuleType("toy_pkg.layers")


@pytest.mark.parametrize("target", ["function", "module"])
def test_entry_point_plugin_adds_a_layer_for_as_long_as_it_is_installed(target):
    groups = []

    def fake_entry_points(*, group):
        groups.append(group)
        return [_FakeEntryPoint(target)]

    with pytest.MonkeyPatch.context() as mp:  # the plugin installed, in a scratch registry (as `scratch_registry`)
        mp.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
        mp.setattr(plugins, "entry_points", fake_entry_points)
        mp.setattr(plugins, "_loaded", False)
        assert "toy_plugin_norm" in normbench.list_layers()
        assert groups == ["normbench.layers"]
        assert normbench.get_layer("toy_plugin_norm") is _ToyNorm
        assert get_spec("toy_plugin_norm").source == "a plugin"
        normbench.list_layers()
        assert groups == ["normbench.layers"], "plugins load once"
        # a plugin layer is a first-class layer: it builds, combines, and trains like a built-in one
        model = tiny_vit("toy_plugin_norm+layerscale", depth=1)
        assert isinstance(model.blocks[0].norm1, _ToyNorm) and isinstance(model.blocks[0].ls1, LayerScale)
        assert model(torch.randn(2, 3, 16, 16)).shape == (2, 5)
    # uninstalled: the layer is gone, and the installed plugins (loaded again if they were not) do not bring it back
    assert "toy_plugin_norm" not in normbench.list_layers()
    with pytest.raises(UnknownLayerError):
        normbench.get_layer("toy_plugin_norm")


# --- CLI ------------------------------------------------------------------------------------------------------------


def _listed(out: str) -> dict[str, str]:
    """`normbench layers` output -> {name: its row and the indented lines below it, whitespace collapsed}."""
    blocks: dict[str, list[str]] = {}
    for line in out.splitlines()[2:]:
        if line.startswith(" "):
            blocks[next(reversed(blocks))].append(line)
        else:
            blocks[line.split()[0]] = [line]
    return {name: " ".join(" ".join(lines).split()) for name, lines in blocks.items()}


def test_cli_layers_prints_every_name_with_kind_formula_and_source_within_100_columns(capsys):
    assert cli.main(["layers"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100  # was 319
    listed = _listed(out)
    assert list(listed) == normbench.list_layers()
    for name, text in listed.items():
        spec = get_spec(name)
        assert text.split()[:2] == [name, spec.kind]
        assert " ".join(spec.formula.split()) in text and f"source: {' '.join(spec.source.split())}" in text
        assert "seed 00" not in spec.source, "a source names a paper or code, not a task"


def test_cli_layers_filters_by_pattern(capsys):
    assert cli.main(["layers", "learnable*"]) == 0
    assert list(_listed(capsys.readouterr().out)) == ["learnable_scaler", "learnable_scaler_ones"]


def test_cli_layers_says_when_no_layer_matches(capsys):
    assert cli.main(["layers", "nothing-*"]) == 1
    assert capsys.readouterr().err == "normbench: no layer matches 'nothing-*'; `normbench layers` lists them all\n"


# --- composition ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NORMS)
def test_a_norm_alone_fills_the_norm_slots_of_a_prenorm_block(name):
    plan = resolve_layer(name)
    assert plan.norm is get_spec(name)
    assert plan.gate is None and plan.placement is None
    assert plan.block_cls is PreNormBlock


@pytest.mark.parametrize("name", GATES + PLACEMENTS)
def test_a_gate_or_placement_alone_brings_its_partner_norm(name):
    spec = get_spec(name)
    plan = resolve_layer(name)
    assert plan.norm.name == (spec.partner or "layernorm")
    assert (plan.gate if spec.kind == "gate" else plan.placement) is spec
    if spec.kind == "placement":
        assert plan.block_cls is spec.cls


@pytest.mark.parametrize("name", ALL_LAYERS)
def test_plan_collects_every_init_rule(name):
    plan = resolve_layer(name)
    specs = [s for s in (plan.norm, plan.gate, plan.placement, *plan.modifiers, plan.family) if s is not None]
    assert plan.init_rules == [s.init_rule for s in specs if s.init_rule is not None]


def test_partner_rules():
    assert resolve_layer("layerscale").norm.name == "layernorm"
    assert resolve_layer("rezero").norm.name == "none"
    assert resolve_layer("skipinit").norm.name == "none"
    fixup = resolve_layer("fixup")
    assert fixup.norm.name == "fixup_bias"
    assert fixup.init_rules == [fixup_init]
    post = resolve_layer("post_ln")
    assert post.block_cls is PostNormBlock
    assert post.norm.name == "layernorm"


def test_a_named_norm_overrides_the_partner():
    plan = resolve_layer("learnable_scaler+layerscale")
    assert plan.norm.name == "learnable_scaler"
    assert plan.gate.name == "layerscale"
    assert plan.name == "learnable_scaler+layerscale"
    assert resolve_layer("layerscale+learnable_scaler").norm.name == "learnable_scaler", "order does not matter"
    assert resolve_layer("dyt+rezero").norm.name == "dyt"
    post = resolve_layer("post_ln+layerscale")
    assert (post.norm.name, post.gate.name, post.block_cls) == ("layernorm", "layerscale", PostNormBlock)
    assert resolve_layer(" rmsnorm + layerscale ").norm.name == "rmsnorm", "spaces around '+' are allowed"


@pytest.mark.parametrize("combo", ["layernorm+rmsnorm", "layerscale+rezero", "post_ln+deepnorm",
                                   "dyt+layerscale+learnable_scaler"])
def test_two_of_a_kind_in_one_combination_is_an_error(combo):
    with pytest.raises(NormbenchError, match="names two"):
        resolve_layer(combo)


# --- init rules set values; the model builds every module --------------------------------------------------------


def _structure(model: nn.Module) -> tuple[list, list]:
    modules = [(n, type(m)) for n, m in model.named_modules()]
    params = [(n, id(p)) for n, p in model.named_parameters(remove_duplicate=False)]
    return modules, params


WITH_INIT_RULES = [name for name in ALL_LAYERS if resolve_layer(name).init_rules]


def test_the_layers_whose_papers_give_an_init_rule_have_one():
    assert {"deepnorm", "fixup", "fixup_official", "tfixup"} <= set(WITH_INIT_RULES)  # the test below runs on them


@pytest.mark.parametrize("name", WITH_INIT_RULES)
def test_init_rules_change_values_not_the_architecture(name, monkeypatch):
    plan = resolve_layer(name)
    with monkeypatch.context() as mp:
        mp.setattr(type(plan), "init_rules", property(lambda self: []))
        model = tiny_vit(name)
    before, values = _structure(model), {n: t.clone() for n, t in model.state_dict().items()}
    for rule in plan.init_rules:
        rule(model)
    assert _structure(model) == before, "an init rule added, removed or re-tied a module or parameter"
    changed = [n for n, t in model.state_dict().items() if not torch.equal(t, values[n])]
    assert changed, "the init rule set no value"


def test_fixup_declares_the_shift_before_fc2_and_the_block_builds_it():
    for name in ("fixup", "fixup_official"):
        assert get_spec(name).mlp_norm is FixupBias
        assert resolve_layer(f"layernorm+{name}").mlp_norm_layer is FixupBias
    assert resolve_layer("layerscale").mlp_norm_layer is None
    block = PreNormBlock(16, 2, depth=2, norm_layer=nn.LayerNorm, gate_layer=lambda dim: nn.Identity(),
                         mlp_norm_layer=FixupBias)
    assert isinstance(block.mlp.norm, FixupBias)


def test_fixup_init_refuses_a_model_without_its_shift_instead_of_adding_one():
    model = tiny_vit("layernorm")
    with pytest.raises(NormbenchError, match="mlp_norm=FixupBias"):
        fixup_init(model)
    assert isinstance(model.blocks[0].mlp.norm, nn.Identity)


def test_two_different_mlp_norms_in_one_combination_is_an_error(scratch_registry):
    normbench.register_layer("toy_mlp_norm", kind="norm", formula="f", source="s", mlp_norm=nn.LayerNorm)(_ToyNorm)
    with pytest.raises(NormbenchError, match="at most one"):
        resolve_layer("toy_mlp_norm+fixup")
    assert resolve_layer("toy_mlp_norm+layerscale").mlp_norm_layer is nn.LayerNorm
