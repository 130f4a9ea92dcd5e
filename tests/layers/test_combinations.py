"""Bad `layer` strings get one line naming the fix and exit 2: a modifier alone or twice, a combination that makes
no sense for an entry (a gate after an output norm; two init rules writing the same weights)."""

from __future__ import annotations

import pytest

from normbench import cli
from normbench.errors import NormbenchError
from normbench.layers import LayerError, resolve_layer


@pytest.mark.parametrize(("layer", "says"), [
    ("qk_norm", "cannot stand alone; combine it with one, e.g. `layernorm+qk_norm`"),
    ("layernorm+qk_norm+qk_norm", "names the modifier `qk_norm` twice"),
    ("qk_norm+layerscale+qk_norm", "names the modifier `qk_norm` twice"),
    ("peri_ln+layerscale", "`peri_ln` takes no gate (`layerscale`)"),
    ("res_post_norm+rezero", "`res_post_norm` takes no gate (`rezero`)"),
    ("scaled_init+fixup", "init rules each set the block's weights"),
    ("depth_mup+deepnorm", "init rules each set the block's weights"),
    ("layernorm+rmsnorm+qk_norm", "names two norms"),
    ("hybridnorm+qk_norm", "`hybridnorm` takes no modifier (`qk_norm`)"),
    ("gated_attn+gated_attn", "names the modifier `gated_attn` twice"),
    ("completep+depth_mup", "names two gates"),
])
def test_bad_combination_raises_one_line(layer, says):
    with pytest.raises(LayerError) as excinfo:
        resolve_layer(layer)
    message = str(excinfo.value)
    assert says in message and "\n" not in message
    assert isinstance(excinfo.value, NormbenchError) and excinfo.value.exit_code == 2


@pytest.mark.parametrize("layer", ["layernorm+qk_norm", "qk_norm+rmsnorm", "layerscale+qk_norm", "dyt+qk_norm",
                                   "res_post_norm+qk_norm", "admin+qk_norm", "normformer+layerscale",
                                   "mix_ln+layerscale", "lns+rmsnorm", "scaled_init+layerscale", "derf+depth_mup",
                                   "seednorm+layerscale", "gpas+gated_attn", "hc+gated_attn", "seednorm+completep",
                                   "frac_connections+qk_norm", "hybridnorm_star+gated_attn"])
def test_sensible_combinations_resolve(layer):
    resolve_layer(layer)


@pytest.mark.parametrize("layer", ["qk_norm", "peri_ln+layerscale"])
def test_a_suite_naming_a_bad_combination_exits_2(write_suite, capsys, layer):
    path = write_suite(matrix={"depth": [1], "layer": [layer], "lr": [1e-3], "seed": [0]})
    assert cli.main(["run", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "matrix.layer" in err and err.count("\n") == 1 and "Traceback" not in err
