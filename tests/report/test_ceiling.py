"""normbench.report.ceiling: simple models on the ViT cells' split, chosen on val, scored on test; computed once per
output folder and config, read back exactly; the leaderboard's one line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from normbench.contracts.names import OutputFolder
from normbench.data.config import DataConfig
from normbench.report import ceiling
from normbench.report.ceiling import (
    COLUMNS,
    LOGISTIC,
    MLP,
    ceiling_line,
    compute_ceiling,
    fingerprint,
    read_or_compute_ceiling,
)


def tiny_synthetic(**overrides) -> DataConfig:
    """A synthetic set small enough that both models fit in well under a second."""
    sizes = {"num_classes": 3, "synthetic_size": 8, "synthetic_channels": 1, "train_size": 120, "val_size": 60,
             "test_size": 60}
    return DataConfig(name="synthetic", **{**sizes, **overrides})


def refuse_training(*args, **kwargs):
    raise AssertionError("trained although a matching ceiling.csv exists")


@pytest.fixture(scope="module")
def digits() -> pd.DataFrame:
    return compute_ceiling(DataConfig(name="digits")).set_index("model")


def test_digits_ceiling_is_far_above_chance_and_plausible(digits):
    assert list(digits.index) == [LOGISTIC, MLP] and (digits["dataset"] == "digits").all()
    assert 90 < digits.loc[LOGISTIC, "test_top1"] <= 100 and 90 < digits.loc[MLP, "test_top1"] <= 100  # chance 10
    assert digits.loc[LOGISTIC, "chosen"].startswith("C=") and digits.loc[MLP, "chosen"].startswith("alpha=")
    # top-1 on 360 images: a whole number of images, in percent at full precision (not pre-rounded)
    assert all(abs(v * 3.6 - round(v * 3.6)) < 1e-9 for v in digits[["val_top1", "test_top1"]].to_numpy().ravel())


def test_the_same_config_gives_the_same_numbers():
    first, second = compute_ceiling(tiny_synthetic()), compute_ceiling(tiny_synthetic())
    pd.testing.assert_frame_equal(first, second, check_exact=True)


def test_a_second_call_reads_the_cache_exactly_without_training(tmp_path: Path, monkeypatch):
    folder = OutputFolder(tmp_path / "suite")
    first = read_or_compute_ceiling(folder, tiny_synthetic())
    assert folder.ceiling.is_file() and list(first.columns) == COLUMNS
    assert (first["fingerprint"] == fingerprint(tiny_synthetic())).all()
    written = folder.ceiling.read_bytes()
    monkeypatch.setattr(ceiling, "compute_ceiling", refuse_training)
    second = read_or_compute_ceiling(folder, tiny_synthetic())
    pd.testing.assert_frame_equal(second, first, check_exact=True)  # full precision both ways
    assert ceiling_line(second, tiny_synthetic()) == ceiling_line(first, tiny_synthetic())
    assert folder.ceiling.read_bytes() == written


def test_a_changed_dataset_config_recomputes(tmp_path: Path, monkeypatch):
    folder = OutputFolder(tmp_path)
    read_or_compute_ceiling(folder, tiny_synthetic())
    calls = []
    monkeypatch.setattr(ceiling, "compute_ceiling", lambda data: calls.append(data) or compute_ceiling(data))
    other = tiny_synthetic(train_size=90)
    frame = read_or_compute_ceiling(folder, other)
    assert calls == [other] and (frame["fingerprint"] == fingerprint(other)).all()
    assert fingerprint(other) != fingerprint(tiny_synthetic())
    assert (pd.read_csv(folder.ceiling)["fingerprint"] == fingerprint(other)).all()  # the stale file was replaced


def test_an_unreadable_cache_is_recomputed(tmp_path: Path):
    folder = OutputFolder(tmp_path)
    folder.ceiling.write_text("")
    frame = read_or_compute_ceiling(folder, tiny_synthetic())
    assert frame is not None and list(pd.read_csv(folder.ceiling).columns) == COLUMNS


def test_a_dataset_outside_the_bundled_ones_gets_no_ceiling_and_the_line_says_so(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(ceiling, "compute_ceiling", refuse_training)
    folder = OutputFolder(tmp_path)
    assert read_or_compute_ceiling(folder, DataConfig(name="cifar10", root=str(tmp_path))) is None
    assert not folder.ceiling.exists()
    assert ceiling_line(None, DataConfig(name="cifar10", root=str(tmp_path))) == \
        "data ceiling: not computed for dataset cifar10 (only for digits, mnist5k, synthetic)"


def test_synthetic_data_of_cifar_shape_is_too_large_and_the_line_says_so(tmp_path: Path, monkeypatch):
    # 8,192 x 32 x 32 x 3 (suites/gpu-first-contact.yaml): minutes of MLP fits at the end of a GPU suite
    monkeypatch.setattr(ceiling, "compute_ceiling", refuse_training)
    folder = OutputFolder(tmp_path)
    cifar_shaped = tiny_synthetic(train_size=8192, synthetic_size=32, synthetic_channels=3)
    assert read_or_compute_ceiling(folder, cifar_shaped) is None and not folder.ceiling.exists()
    assert ceiling_line(None, cifar_shaped) == ("data ceiling: not computed (8,192 train images x 3,072 values = "
                                                "25,165,824, over the 4,000,000 that train in seconds)")
    assert ceiling.why_no_ceiling(tiny_synthetic(train_size=4096, synthetic_size=16)) is None  # 3.1M: computed


def test_without_scikit_learn_the_leaderboard_goes_on(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("NORMBENCH_CACHE", str(tmp_path / "empty-cache"))  # no copy to fall back on
    def no_sklearn(data):
        raise ModuleNotFoundError("No module named 'sklearn'", name="sklearn")

    monkeypatch.setattr(ceiling, "compute_ceiling", no_sklearn)
    folder = OutputFolder(tmp_path)
    assert read_or_compute_ceiling(folder, DataConfig(name="digits")) is None and not folder.ceiling.exists()
    assert "scikit-learn is not installed" in ceiling_line(None, DataConfig(name="digits"))


def test_the_line_rounds_each_number_once():
    frame = pd.DataFrame([
        {"dataset": "digits", "model": LOGISTIC, "chosen": "C=1", "val_top1": 95.0, "test_top1": 96.666666,
         "fingerprint": "x"},
        {"dataset": "digits", "model": MLP, "chosen": "alpha=0.001", "val_top1": 97.0, "test_top1": 97.2249,
         "fingerprint": "x"},  # 97.2249 -> 97.22, not 97.225 -> 97.23
    ])
    assert ceiling_line(frame, DataConfig(name="digits")) == (
        "data ceiling (simple models on the same train/val/test split, chosen on val, test top-1): "
        "logistic regression 96.67% (C=1), MLP (1x128) 97.22% (alpha=0.001)")


def test_a_new_output_folder_reads_the_machine_cache_without_training(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("NORMBENCH_CACHE", str(tmp_path / "cache"))
    data = tiny_synthetic(train_size=90)
    first = read_or_compute_ceiling(OutputFolder(tmp_path / "a"), data)
    assert ceiling.machine_cache(data).is_file()
    monkeypatch.setattr(ceiling, "compute_ceiling", refuse_training)
    second = read_or_compute_ceiling(OutputFolder(tmp_path / "b"), data)
    pd.testing.assert_frame_equal(second, first, check_exact=True)
    assert (tmp_path / "b" / "ceiling.csv").read_bytes() == (tmp_path / "a" / "ceiling.csv").read_bytes()
