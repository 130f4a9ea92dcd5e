"""examples/plugin keeps the plugin contract the README states: its layers register with their metadata, follow the
norm and gate signatures, and its suite trains end to end through the CLI, found by the entry point its
pyproject.toml declares."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

import normbench
from normbench.layers import plugins, registry
from tests.conftest import REPO
from tests.layers._cases import NUM_CLASSES, images, tiny_vit

PLUGIN = REPO / "examples" / "plugin"


@pytest.fixture
def example(monkeypatch):
    """The example's layers registered in a scratch registry, gone afterwards."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.syspath_prepend(str(PLUGIN))
    for name in [m for m in sys.modules if m.startswith("normbench_example")]:
        monkeypatch.delitem(sys.modules, name)
    import normbench_example  # noqa: F401  (registers on import)

    yield
    for name in [m for m in sys.modules if m.startswith("normbench_example")]:
        sys.modules.pop(name)


def test_the_layers_register_with_kind_formula_source_and_partner(example):
    norm, gate = normbench.layers.get_spec("scalenorm"), normbench.layers.get_spec("tanh_gate")
    assert (norm.kind, gate.kind, gate.partner) == ("norm", "gate", "layernorm")
    assert all(s.formula and s.source for s in (norm, gate))
    assert normbench.list_layers("*_gate", kind="gate") == ["tanh_gate"]


def test_scalenorm_keeps_the_sources_constants_and_timms_norm_contract(example):
    cls = normbench.get_layer("scalenorm")
    norm = cls(16)
    assert norm.eps == 1e-5 and norm.g.item() == pytest.approx(math.sqrt(16))
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(torch.linalg.vector_norm(norm(x), dim=-1), torch.full((2, 5), 4.0))  # ‖y‖ = g
    meta = cls(16, eps=1e-3, device="meta", dtype=torch.float64)  # a model built on meta, then materialized
    meta.to_empty(device="cpu").reset_parameters()
    assert meta.g.dtype == torch.float64 and meta.g.item() == 4.0 and meta.eps == 1e-3


def test_tanh_gate_starts_closed_and_takes_the_gate_signature(example):
    cls = normbench.get_layer("tanh_gate")
    gate = cls(16, depth=12)
    assert gate.alpha.item() == 0.0 and not gate(torch.randn(2, 5, 16)).any()
    assert cls(16, depth=12, init_values=0.5).alpha.item() == 0.5  # the suite's model.init_values wins
    plan = normbench.resolve_layer("scalenorm+tanh_gate")
    assert (plan.norm.name, plan.gate.name) == ("scalenorm", "tanh_gate")


def test_a_model_with_both_trains_every_parameter(example):
    model = tiny_vit("scalenorm+tanh_gate")
    x, y = images(batch=4), torch.arange(4) % NUM_CLASSES
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):  # the closed gates open after a step
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    assert {n for n in model.no_weight_decay() if n.endswith((".g", ".alpha"))}, "slot parameters are not decayed"


def test_the_example_suite_runs_end_to_end_through_the_cli_found_by_its_entry_point(tmp_path):
    """As after `pip install -e examples/plugin`: the package on the path with the entry point its pyproject.toml
    declares (written as installed metadata here, so the test environment stays as it is)."""
    pyproject = (PLUGIN / "pyproject.toml").read_text()  # (tomllib is 3.11+; the section is two lines)
    section = pyproject.split(f'[project.entry-points."{plugins.ENTRY_POINT_GROUP}"]', 1)[1].split("\n[", 1)[0]
    declared = re.findall(r'^([\w-]+) = "([\w.:]+)"$', section, flags=re.MULTILINE)
    assert declared == [("example", "normbench_example")]
    info = tmp_path / "site" / "normbench_example-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: normbench-example\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[{plugins.ENTRY_POINT_GROUP}]\n" +
                                           "".join(f"{k} = {v}\n" for k, v in declared))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(info.parent), str(PLUGIN)])}
    env.pop(plugins.MODULES_ENV, None)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "normbench", "run", "examples/plugin/suite.yaml", "--out", str(out),
                           "--quiet"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    cells = pd.read_csv(out / "results.csv")
    assert sorted(cells["layer"]) == ["layernorm", "scalenorm", "scalenorm+tanh_gate", "tanh_gate"]
    assert (cells["status"] == "ok").all()
    board = (out / "leaderboard.md").read_text()
    assert all(f"| {layer} " in board for layer in ("scalenorm", "tanh_gate", "scalenorm+tanh_gate"))
