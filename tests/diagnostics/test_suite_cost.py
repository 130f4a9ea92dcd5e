"""`normbench bench SUITE`: each layer's train step at the suite's own shape against its baseline. Timings are not
asserted (they are the machine's); what is built, what is divided by what, and what is written are."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from normbench.contracts.suite import load_suite
from normbench.diagnostics import suite_cost as cost_module
from normbench.diagnostics.suite_cost import cost_configs, suite_cost, versus_baseline
from normbench.errors import NormbenchError
from tests.contracts.test_suite import run_cli


def test_each_layer_is_timed_on_the_suites_data_and_model_and_divided_by_the_baseline(write_suite, tmp_path,
                                                                                      monkeypatch, one_torch_thread):
    built = []
    real = cost_module.measure

    def spy(configs, dev, warmup, repeats, steps):
        built.extend(configs)
        return real(configs, dev, warmup, repeats, steps)

    monkeypatch.setattr(cost_module, "measure", spy)
    suite = load_suite(write_suite(matrix={"depth": [1, 2], "layer": ["rezero", "admin", "layernorm"],
                                           "lr": [1e-3], "seed": [0]}))
    frame = suite_cost(suite, tmp_path, device="cpu", repeats=1)
    assert sorted(built) == sorted((d, x) for d in (1, 2) for x in ("rezero", "admin", "layernorm"))
    csv = pd.read_csv(next(tmp_path.glob("cost-cpu-*.csv")))
    assert len(csv) == 6 and set(csv["baseline"]) == {"layernorm"} and set(csv["suite"]) == {"tiny"}
    # the suite's shape, not the CIFAR-shaped bench's: digits 8x8, width 16, 2 heads, patch 4, batch 256
    assert (csv[["dim", "heads", "patch", "img_size", "batch"]] == [16, 2, 4, 8, 256]).all().all()
    for _depth, group in csv.groupby("depth"):
        base = group[group["layer"] == "layernorm"].iloc[0]
        assert base["step_vs_baseline"] == 1.0 and base["mem_vs_baseline"] == 1.0
        for _, row in group.iterrows():
            assert math.isclose(row["step_vs_baseline"], row["step_ms"] / base["step_ms"])
            assert math.isclose(row["mem_vs_baseline"], row["memory_mib"] / base["memory_mib"])
            assert row["memory"] == "train-step estimate" and row["memory_mib"] > 0
    assert (csv["params"] == frame["params"]).all()
    # admin profiled its init on the training images: building it without them would have raised
    assert "| admin " in next(tmp_path.glob("cost-cpu-*.md")).read_text()


def test_the_baseline_is_timed_even_when_the_layers_asked_leave_it_out(write_suite):
    suite = load_suite(write_suite(matrix={"depth": [1], "layer": ["layernorm", "rezero"], "lr": [1e-3],
                                           "seed": [0]}))
    assert list(cost_configs(suite, None, ["rezero"])) == [(1, "layernorm"), (1, "rezero")]


def test_the_ratio_divides_by_the_baseline_of_the_same_depth():
    frame = pd.DataFrame({"layer": ["layernorm", "x", "layernorm", "x"], "depth": [1, 1, 2, 2],
                          "step_ms": [10.0, 30.0, 20.0, 30.0], "memory_mib": [1.0, 2.0, 4.0, 2.0]})
    out = versus_baseline(frame, "layernorm")
    assert list(out["step_vs_baseline"]) == [1.0, 3.0, 1.0, 1.5]
    assert list(out["mem_vs_baseline"]) == [1.0, 2.0, 1.0, 0.5]


def test_a_suite_whose_matrix_varies_the_cost_is_refused(write_suite):
    suite = load_suite(write_suite(matrix={"depth": [1], "layer": ["layernorm"], "mlp_ratio": [2.0, 4.0],
                                           "lr": [1e-3], "seed": [0]}))
    with pytest.raises(NormbenchError, match="also varies mlp_ratio"):
        cost_configs(suite, None, None)


def test_without_out_the_cost_lands_where_run_writes_the_suite(write_suite, capsys, tmp_path, monkeypatch,
                                                                 one_torch_thread):
    suite = write_suite(matrix={"depth": [1], "layer": ["layernorm"], "lr": [1e-3], "seed": [0]})
    monkeypatch.chdir(tmp_path)
    code, _ = run_cli(capsys, "bench", str(suite), "--repeats", "1")
    assert code == 0 and len(list((tmp_path / "runs" / "tiny").glob("cost-cpu-*.csv"))) == 1


def test_compiled_models_timed_side_by_side_get_room_for_every_one():
    import torch

    from normbench.diagnostics.bench import StepSetup, compile_room

    limit = torch._dynamo.config.recompile_limit
    with compile_room(StepSetup(dev=torch.device("cpu"), batch=1, amp=False, compile=True), 19):
        assert torch._dynamo.config.recompile_limit == 38  # the default 8 would leave 11 of 19 models eager
    assert torch._dynamo.config.recompile_limit == limit
    with compile_room(StepSetup(dev=torch.device("cpu"), batch=1, amp=False, compile=False), 19):
        assert torch._dynamo.config.recompile_limit == limit


@pytest.mark.parametrize("args, expected", [
    (["--depth", "7"], "the suite has no depth 7; it trains depths [1]"),
    (["--layers", "dyt"], "the suite has no dyt"),
    (["--dim", "64"], "the batch, compile and width are the suite's"),
])
def test_a_depth_or_layer_the_suite_lacks_is_one_line_and_exit_2(write_suite, capsys, tmp_path, args, expected):
    code, err = run_cli(capsys, "bench", str(write_suite()), "--out", str(tmp_path / "out"), *args)
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_cost_configs_refuse_what_the_suite_lacks(write_suite):
    with pytest.raises(NormbenchError, match="no depth 3"):
        cost_configs(load_suite(write_suite()), [3], None)


@pytest.mark.parametrize("optimizer", ["muon", "adamw"])
def test_each_step_is_timed_with_the_optimizer_its_suite_trains_with(write_suite, tmp_path, monkeypatch,
                                                                     one_torch_thread, optimizer):
    """A Muon suite's cost table was timed with AdamW's step, missing its Newton-Schulz (~3x AdamW's step at depth
    36 on this CPU, before it was batched): the bench builds the optimizer as training does (train/optimizer.py)."""
    from normbench.diagnostics import bench as bench_module
    from normbench.train.muon import BlockwiseMuon

    used = []
    real = bench_module.make_train_step

    def spy(model, setup, batch=None, optimizer=None):
        used.append(optimizer)
        return real(model, setup, batch, optimizer)

    monkeypatch.setattr(cost_module, "make_train_step", spy)
    suite = load_suite(write_suite(matrix={"depth": [1], "layer": ["layernorm", "rezero"], "lr": [1e-3], "seed": [0]},
                                   train={"epochs": 2, "batch_size": 64, "optimizer": optimizer}))
    suite_cost(suite, tmp_path, device="cpu", repeats=1)
    assert len(used) == 2
    assert all(isinstance(o, BlockwiseMuon) == (optimizer == "muon") and o is not None for o in used)
