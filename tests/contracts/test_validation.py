"""A suite that would train nonsense is refused when it loads: exit 2, one line, and no output folder, ledger or
MLflow store is created."""

from __future__ import annotations

import pytest
import yaml

from normbench.contracts.cell_checks import BUNDLED_TRAIN_SIZE, NATIVE_IMG_SIZE
from normbench.contracts.suite import load_suite
from normbench.contracts.suite_file import SuiteLoader
from normbench.data import DataConfig, build_data
from tests.contracts.test_suite import run_cli

TRAIN = {"epochs": 1, "batch_size": 256, "warmup_epochs": 0}  # TINY's


@pytest.mark.parametrize("overrides, expected", [
    ({"matrix": {}}, ["matrix: needs at least one axis", "layer: [layernorm]"]),
    # digits was the silent default: a suite says which data it trains on
    ({"dataset": None}, ["dataset.name: missing; name the data the suite trains on, e.g. dataset: {name: digits}",
                         "one of digits, mnist5k, synthetic, cifar10, cifar100, imagefolder"]),
    ({"dataset": {"root": "~/data"}}, ["dataset.name: missing"]),
    ({"epochs": 2}, ["unknown key `epochs` (`epochs` is a train key: write it under `train:`, e.g. train: "
                     "{epochs: 2})"]),
    ({"matrix": None}, ["matrix: needs at least one axis"]),
    ({"train": {**TRAIN, "warmup_epochs": 1}}, ["train.warmup_epochs: 1 is not below train.epochs 1", "peak"]),
    ({"train": {"batch_size": 256, "warmup_epochs": 2},  # epochs is an axis: checked in every cell
      "matrix": {"depth": [1], "layer": ["layernorm"], "epochs": [3, 2]}},
     ["train.warmup_epochs: 2 is not below matrix.epochs 2", "(cell depth=1,epochs=2,layer=layernorm)"]),
    ({"train": {**TRAIN, "warmup_epochs": -1}}, ["train.warmup_epochs: must be 0 (off) or more", "-1"]),
    ({"train": {**TRAIN, "batch_size": 2000}}, ["train.batch_size: 2000", "1077 images of the digits train split",
                                                "use at most 1077"]),
    ({"dataset": {"name": "mnist5k"}, "model": {"embed_dim": 16, "num_heads": 2, "patch_size": 4},
      "train": {**TRAIN, "batch_size": 4096}}, ["train.batch_size: 4096", "3000 images of the mnist5k"]),
    ({"dataset": {"name": "synthetic", "train_size": 100, "synthetic_size": 8}, "train": TRAIN},
     ["train.batch_size: 256", "100 images of the synthetic"]),
    ({"train": {**TRAIN, "grad_accum_steps": 8}}, ["train.grad_accum_steps: 8", "only 4 batches of 256",
                                                   "no step would ever run"]),
    ({"model": {"embed_dim": 16, "num_heads": 2, "patch_size": 3}},
     ["model.patch_size: 3 does not divide the 8x8 images of digits", "e.g. 2 or 4"]),
    ({"dataset": {"name": "mnist5k"}, "model": {"embed_dim": 16, "num_heads": 2, "patch_size": 4}},
     []),  # 4 divides 28: accepted (checked below: this case must load)
    ({"dataset": {"name": "mnist5k"}, "model": {"embed_dim": 16, "num_heads": 2, "patch_size": 8}},
     ["model.patch_size: 8 does not divide the 28x28 images of mnist5k", "e.g. 7 or 14"]),
    ({"dataset": {"name": "cifar10", "root": "/nowhere"}, "model": {"embed_dim": 16, "num_heads": 2, "patch_size": 5}},
     ["model.patch_size: 5 does not divide the 32x32 images of cifar10"]),
    ({"model": {"embed_dim": 16, "num_heads": 2, "patch_size": 4, "img_size": 10}},
     ["model.patch_size: 4 does not divide model.img_size 10", "e.g. 2 or 5"]),
    ({"train": {**TRAIN, "optimizer": "adamx"}}, ["train.optimizer: unknown optimizer 'adamx'",
                                                  "did you mean `adamax`?"]),
    ({"train": {**TRAIN, "optimizer": "sgdd"}}, ["train.optimizer", "did you mean `sgd`?"]),
    ({"train": {**TRAIN, "optimizer": "shampoo9000"}}, ["train.optimizer", "timm.optim.list_optimizers()"]),
    ({"train": {**TRAIN, "weight_decay": -0.05}}, ["train.weight_decay: must be 0 (off) or more", "-0.05"]),
    ({"train": {**TRAIN, "min_lr": -1e-6}}, ["train.min_lr: must be 0 or more"]),
    ({"train": {**TRAIN, "warmup_lr": -1e-6}}, ["train.warmup_lr: must be 0 or more"]),
    ({"train": {**TRAIN, "label_smoothing": 1.0}}, ["train.label_smoothing: must lie in [0, 1)", "1.0"]),
    ({"train": {**TRAIN, "label_smoothing": -0.1}}, ["train.label_smoothing"]),
    ({"device": "tpu"}, ["device: expected auto, cpu, cuda or cuda:N, got 'tpu'"]),
    ({"train": {**TRAIN, "checkpoint_minutes": -5}}, ["train.checkpoint_minutes: expected 0 (no checkpoints) or a "
                                                      "positive number of minutes", "e.g. 15", "-5"]),
    ({"train": {**TRAIN, "checkpoint_minutes": "often"}}, ["train.checkpoint_minutes: expected float", "'often'"]),
    ({"train": {**TRAIN, "keep_weights": "best"}}, ["train.keep_weights: 'best'", "final"]),
    ({"train": {**TRAIN, "checkpoint_minutes": 0.5, "keep_weights": "final"}}, []),
])
def test_nonsense_is_refused_before_any_output_exists(write_suite, capsys, tmp_path, overrides, expected):
    path, out = write_suite(**overrides), tmp_path / "out"
    if not expected:
        assert load_suite(path).cells()
        return
    code, err = run_cli(capsys, "run", str(path), "--out", str(out), "--device", "cpu")
    assert code == 2 and str(path) in err and "Traceback" not in err
    for fragment in expected:
        assert fragment in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()  # no folder, ledger or mlflow.db


def test_shipped_optimizer_names_and_lookahead_are_accepted(write_suite):
    for name in ("adamw", "lamb", "SGD", "lookahead_adamw"):
        assert load_suite(write_suite(train={**TRAIN, "optimizer": name})).cells()


@pytest.mark.parametrize("text, line, first", [
    ("name: tiny\nname: other\ndataset: {name: digits}\nmatrix: {layer: [layernorm]}\n", 2, 1),
    ("name: tiny\ndataset: {name: digits}\ntrain:\n  epochs: 3\n  lr: 1.0e-3\n  epochs: 4\n"
     "matrix: {layer: [layernorm]}\n", 6, 4),
    ("name: tiny\ndataset: {name: digits}\nmatrix: {layer: [layernorm], depth: [1], layer: [rezero]}\n", 3, 3),
])
def test_a_key_given_twice_is_refused_naming_it_and_its_lines(tmp_path, capsys, text, line, first):
    path, out = tmp_path / "dup.yaml", tmp_path / "out"
    path.write_text(text)
    code, err = run_cli(capsys, "run", str(path), "--out", str(out))
    key = {1: "name", 4: "epochs", 3: "layer"}[first]
    assert code == 2 and f"{path}: line {line}: `{key}` is given twice (first on line {first})" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_merge_keys_are_no_repeat():
    data = yaml.load("a: &base {k: 1, j: 2}\nb: {<<: *base, k: 3}\n", Loader=SuiteLoader)
    assert data["b"] == {"k": 3, "j": 2}


def test_exponent_floats_without_a_dot_are_floats(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text("name: e\ndataset: {name: digits}\ntrain: {weight_decay: 5e-2, min_lr: 1E-6, warmup_lr: 0}\n"
                    "matrix: {layer: [layernorm], lr: [3e-3, 3E-4, 1.5e3, +2e-1, 1.0e-3]}\n")
    suite = load_suite(path)
    assert suite.matrix["lr"] == [3e-3, 3e-4, 1.5e3, 0.2, 1e-3]
    assert suite.train["weight_decay"] == 0.05 and suite.train["min_lr"] == 1e-6
    assert yaml.load("[1e3, 1_000, '1e3', 0x10, 1.0]", Loader=SuiteLoader) == [1000.0, 1000, "1e3", 16, 1.0]
    assert yaml.safe_load("lr: 3e-3") == {"lr": "3e-3"}  # PyYAML's own loader is unchanged


def test_the_known_sizes_are_the_datas():
    """BUNDLED_TRAIN_SIZE and NATIVE_IMG_SIZE spare loading the data at suite load; they must not drift from it."""
    for name, train_size in BUNDLED_TRAIN_SIZE.items():
        bundle = build_data(DataConfig(name=name), batch_size=1, device="cpu")
        assert bundle.sizes()["train_size"] == train_size and bundle.img_size == NATIVE_IMG_SIZE[name]


@pytest.mark.parametrize("overrides, expected", [
    # the typo also leaves the baseline (and a claim's layer) out: the typo is named, not the name it left out
    ({"baseline": "layernorm", "matrix": {"depth": [1], "layer": ["layernrom", "layerscale"], "lr": [1e-3]}},
     "matrix.layer: unknown layer `layernrom` (did you mean `layernorm`?); `normbench layers` lists them all"),
    ({"claims": [{"layer": "layerscale", "beats": "layernorm", "depth": 1}],
      "matrix": {"depth": [1], "layer": ["layernrom", "layerscale"], "lr": [1e-3]}},
     "matrix.layer: unknown layer `layernrom` (did you mean `layernorm`?); `normbench layers` lists them all"),
    # a bad value of an axis is named where it was written: the matrix, not the recipe key it overrides
    ({"matrix": {"depth": [1], "layer": ["layernorm"], "lr": [1e-3, -2]}}, "matrix.lr: must be positive, got -2"),
    ({"matrix": {"depth": [1], "layer": ["layernorm"], "lr": [1e-3], "weight_decay": [0.05, -1]}},
     "matrix.weight_decay: must be 0 (off) or more, got -1"),
    ({"train": {"epochs": 1, "warmup_epochs": 0}, "matrix": {"depth": [1], "layer": ["layernorm"],
                                                             "batch_size": [64, 5000]}},
     "matrix.batch_size: 5000 is more than the 1077 images of the digits train split (cell batch_size=5000,depth=1,"
     "layer=layernorm), so the batch would silently shrink to 1077; use at most 1077"),
    ({"model": {"embed_dim": 16, "num_heads": 2},
      "matrix": {"depth": [1], "layer": ["layernorm"], "patch_size": [2, 3]}},
     "matrix.patch_size: 3 does not divide the 8x8 images of digits (cell depth=1,layer=layernorm,patch_size=3); use "
     "a divisor of 8, e.g. 2 or 4"),
    ({"model": {"embed_dim": 16, "num_heads": 2, "patch_size": 4}, "matrix": {"layer": ["layernorm"],
                                                                              "img_size": [8, 10]}},
     "model.patch_size: 4 does not divide matrix.img_size 10 (cell img_size=10,layer=layernorm); use a divisor of 10, "
     "e.g. 2 or 5"),
    ({"model": {"embed_dim": 16, "patch_size": 4}, "matrix": {"layer": ["layernorm"], "num_heads": [2, 3]}},
     "matrix.num_heads: embed_dim 16 is not divisible by num_heads 3 (cell layer=layernorm,num_heads=3)"),
    ({"train": {"epochs": 1, "batch_size": 256}, "matrix": {"layer": ["layernorm"], "warmup_epochs": [0, 1]}},
     "matrix.warmup_epochs: 1 is not below train.epochs 1 (cell layer=layernorm,warmup_epochs=1), so the lr would "
     "never reach its peak; use fewer warmup epochs or more epochs"),
    ({"matrix": {"layer": ["layernorm"], "grad_accum_steps": [1, 8]}},
     "matrix.grad_accum_steps: 8 batches per optimizer step, but an epoch of digits holds only 4 batches of 256 "
     "(cell grad_accum_steps=8,layer=layernorm): no step would ever run; use at most 4 or a smaller batch_size"),
    ({"matrix": {"layer": ["layernorm"], "optimizer": ["adamw", "adamx"]}},
     "matrix.optimizer: unknown optimizer 'adamx' (cell layer=layernorm,optimizer=adamx) (did you mean `adamax`?)"),
    ({"matrix": {"layer": ["layernorm"], "label_smoothing": [0.1, 1.0]}},
     "matrix.label_smoothing: must lie in [0, 1) (0: off, 0.1 usual), got 1.0"),
    ({"matrix": {"layer": ["layernorm"], "min_lr": [0.0, -1e-6]}}, "matrix.min_lr: must be 0 or more, got -1e-06"),
    ({"matrix": {"layer": ["layernorm"], "checkpoint_minutes": [15.0, -1.0]}},
     "matrix.checkpoint_minutes: expected 0 (no checkpoints) or a positive number of minutes between checkpoints at "
     "epoch boundaries, e.g. 15 (the default), got -1.0 (cell checkpoint_minutes=-1,layer=layernorm)"),
])
def test_a_mistake_is_named_at_the_key_the_user_wrote(write_suite, capsys, tmp_path, overrides, expected):
    path, out = write_suite(**overrides), tmp_path / "out"
    code, err = run_cli(capsys, "run", str(path), "--out", str(out))
    assert code == 2 and err.strip() == f"normbench: error: {path}: {expected}"  # one line
    assert not out.exists()
