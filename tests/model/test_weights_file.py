"""`train.keep_weights: final`: the finished cell's weights as safetensors that timm loads back into the same model,
which gives the cell's test top-1 again; `normbench probe --weights` measures it."""

from __future__ import annotations

import pytest
import timm
import torch

from normbench.cli import main
from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.data import build_data
from normbench.model.weights_file import cell_config, read_metadata
from normbench.train.checkpoint import Keeper, recipe_of
from normbench.train.loop import train_cell


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("weights")
    config = CellConfig(model=ModelConfig(layer="layerscale", depth=2, embed_dim=16, num_heads=2, patch_size=4),
                        train=TrainConfig(epochs=2, batch_size=64, warmup_epochs=0, keep_weights="final"))
    keeper = Keeper(path=folder / "checkpoint.pt", recipe=recipe_of(config), interval_s=900.0,
                    weights=folder / "weights.safetensors", label="depth=2,layer=layerscale")
    result = train_cell(config, device="cpu", keeper=keeper)
    return folder / "weights.safetensors", config, result


def _test_top1(model: torch.nn.Module, config: CellConfig) -> float:
    data = build_data(config.data, batch_size=config.train.batch_size, device="cpu", seed=config.train.seed)
    model.eval()
    correct = total = 0
    with torch.inference_mode():
        for x, y in data.test:
            correct += int((model(x).argmax(dim=-1) == y).sum())
            total += len(y)
    return 100.0 * correct / total


def test_timm_loads_the_kept_weights_and_the_model_scores_the_cells_test_top1_again(kept):
    path, config, result = kept
    model = timm.create_model("normbench_vit", pretrained=True, pretrained_cfg_overlay=dict(file=str(path)),
                              layer="layerscale")
    assert _test_top1(model, config) == result.test_top1
    meta = read_metadata(path)
    assert meta["about"]["cell_id"] == "depth=2,layer=layerscale" and meta["about"]["test_top1"] == result.test_top1
    assert cell_config(path) == config


def test_asking_timm_for_another_model_than_the_file_holds_is_refused(kept):
    with pytest.raises(ValueError, match="depth=3 .the file's: 2."):
        timm.create_model("normbench_vit", pretrained=True, pretrained_cfg_overlay=dict(file=str(kept[0])), depth=3)


def test_probe_measures_the_trained_model(kept, tmp_path, capsys):
    assert main(["probe", "--weights", str(kept[0]), "--out", str(tmp_path), "--batch-size", "32"]) == 0
    report = next(tmp_path.glob("probe-weights-*.md")).read_text()
    assert "of the trained weights named above" in report and "test top-1" in report
    assert "layerscale" in capsys.readouterr().out
    assert main(["probe", "--weights", str(tmp_path / "none.safetensors")]) == 2


def test_timms_own_data_pipeline_from_the_files_cfg_scores_the_cells_test_top1(kept):
    """`resolve_data_config` + `create_transform` read the data set's channels, size, classes, mean and std from the
    file's pretrained_cfg (not ImageNet's 3-channel ones): the digits test images through them score the cell's."""
    from timm.data import create_transform, resolve_data_config

    from normbench.data.digits import DIGITS_MEAN, DIGITS_STD, load_digits_splits

    path, config, result = kept
    model = timm.create_model("normbench_vit", pretrained=True, pretrained_cfg_overlay=dict(file=str(path))).eval()
    cfg = resolve_data_config(model=model)
    assert (cfg["input_size"], cfg["mean"], cfg["std"]) == ((1, 8, 8), DIGITS_MEAN, DIGITS_STD)
    assert model.pretrained_cfg["num_classes"] == 10
    transform = create_transform(**cfg)
    splits = load_digits_splits()  # [0, 1] pixels, (N, 1, 8, 8), as a reader's own tensors would be
    with torch.inference_mode():
        x = torch.stack([transform(image) for image in splits.test_x])
        top1 = 100.0 * int((model(x).argmax(dim=-1) == splits.test_y).sum()) / len(splits.test_y)
    loader = build_data(config.data, batch_size=config.train.batch_size, device="cpu").test
    torch.testing.assert_close(x, torch.cat([batch for batch, _ in loader]))  # the cell's own test images
    assert top1 == pytest.approx(result.test_top1, abs=1e-9)
