"""The edited-matrix rule: a ledger cell counts while the suite's matrix lists it (its row and seed, for the cells
bracketing and the report stage added); the others are neither trained nor scored."""

from __future__ import annotations

from pathlib import Path

from normbench.contracts.matrix_scope import MatrixScope
from normbench.contracts.suite import load_suite

MATRIX = {"depth": [1], "layer": ["layernorm", "layerscale"], "lr": [1.0e-3, 3.0e-3], "seed": [0, 1]}


def _scope(write_suite, **matrix) -> MatrixScope:
    path: Path = write_suite(matrix={**MATRIX, **matrix}, report_seeds=[100, 101], budget_check=True)
    return MatrixScope(load_suite(path))


def _axes(layer="layernorm", lr=1e-3, seed=0, **more):
    return {"depth": 1, "layer": layer, "lr": lr, "seed": seed, **more}


def test_a_matrix_cell_counts_while_the_matrix_lists_it_in_any_key_order(write_suite):
    scope = _scope(write_suite, lr=[1.0e-3])
    assert scope.holds("run:tiny", _axes())
    assert scope.holds("run:tiny", dict(reversed(list(_axes().items()))))  # ids sort the axes
    assert not scope.holds("run:tiny", _axes(lr=3e-3))  # the lr the edit dropped
    assert not scope.holds("run:tiny", _axes(layer="rmsnorm"))
    assert not scope.holds("run:tiny", {**_axes(), "embed_dim": 32})  # an axis the matrix no longer has


def test_a_cell_bracketing_added_stays_the_suites_own_while_its_row_and_seed_are_listed(write_suite):
    scope = _scope(write_suite)
    assert scope.holds("bracket:tiny:1", _axes(lr=1e-2))  # beyond the grid: bracketing's own lr
    assert scope.holds("bracket:tiny:2", _axes(lr=1e-4, seed=1))
    assert not scope.holds("bracket:tiny:1", _axes(layer="rmsnorm", lr=1e-2))  # its row left the matrix
    assert not _scope(write_suite, seed=[0]).holds("bracket:tiny:1", _axes(lr=1e-2, seed=1))  # its seed did


def test_a_report_stage_cell_counts_while_its_row_and_report_seed_are_listed(write_suite):
    scope = _scope(write_suite)
    assert scope.holds("report:tiny", _axes(lr=1e-2, seed=100))  # a bracketed lr chosen: still the row's
    assert not scope.holds("report:tiny", _axes(seed=7))  # not a report seed
    assert not scope.holds("report:tiny", _axes(layer="rmsnorm", seed=100))
    budget = _axes(seed=101, epochs=2, warmup_epochs=0)  # the convergence check stretches the recipe's epochs
    assert scope.holds("budget:tiny", budget)
    assert not _scope(write_suite, layer=["layerscale"]).holds("budget:tiny", budget)


def test_studies_outside_the_matrix_are_not_its_to_judge(write_suite):
    assert _scope(write_suite).holds("tuned:tiny", _axes(layer="rmsnorm"))
