"""Local `--workers` processes know the layers their parent registered from Python, or the run is refused before
anything is created. Before, both workers exited 2 on "unknown layer" and the parent trained the cells itself."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from torch import nn

import normbench
from normbench.contracts.suite import load_suite
from normbench.errors import NormbenchError
from normbench.layers import plugins, registry
from normbench.store.ledger import Ledger
from normbench.sweep.launch import worker_command
from normbench.sweep.suite_run import run_suite

MODULE = '''
import torch
from torch import nn

import normbench


@normbench.register_layer("toy_rms_norm", kind="norm", formula="x / rms(x)", source="tests/sweep/test_launch.py")
class ToyRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6, device=None, dtype=None):
        super().__init__()
        self.eps = eps

    def reset_parameters(self):
        pass

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
'''


@pytest.fixture
def scratch_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.delenv(plugins.MODULES_ENV, raising=False)


def test_a_layer_defined_in_the_script_is_refused_before_anything_is_created(scratch_registry, write_suite,
                                                                             tmp_path):
    @normbench.register_layer("toy_script_norm", kind="norm", formula="f", source="s")
    class ScriptNorm(nn.LayerNorm):  # as in a script's body: no module registers it on import
        pass

    suite = load_suite(write_suite(matrix={"depth": [1], "layer": ["toy_script_norm"], "lr": [1e-3], "seed": [0]}))
    out = tmp_path / "out"
    with pytest.raises(NormbenchError, match=r"layer `toy_script_norm` is registered in .* cannot import, .*move "
                                             r"`.*ScriptNorm` and its @register_layer into a module .* workers=1"):
        run_suite(suite, out, workers=2, device="cpu", quiet=True)
    assert not out.exists(), "refused before the output folder, the ledger or MLflow existed"
    with pytest.raises(NormbenchError, match="toy_script_norm"):  # and wherever workers are launched from
        worker_command(suite, out, storage=None, device="cpu", mode="run")


def test_a_layer_registered_by_a_module_trains_in_worker_processes(scratch_registry, write_suite, tmp_path,
                                                                   monkeypatch):
    folder = tmp_path / "modules"
    folder.mkdir()
    (folder / "toy_layers.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, "toy_layers", raising=False)
    import toy_layers  # noqa: F401  (the script's `import my_layers`)

    suite = load_suite(write_suite(matrix={"depth": [1], "layer": ["toy_rms_norm"], "lr": [1e-3], "seed": [0]}))
    out = tmp_path / "out"
    summary = run_suite(suite, out, workers=2, device="cpu", quiet=True)
    assert summary.errors == 0, "a worker exited non-zero"
    [trial] = Ledger(None, out).study("run:tiny").get_trials(deepcopy=False)
    assert trial.user_attrs["result"]["status"] == "ok"
    assert trial.user_attrs["worker_pid"] != os.getpid(), "a worker trained it, not the parent after they failed"
    assert Path(out / "results.csv").is_file()
