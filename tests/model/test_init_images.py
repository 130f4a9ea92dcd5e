"""The training images a data-dependent init (Admin) sees: the split's first 64, the same on every seed and rank,
passed by the training loop only to layers that need them."""

from __future__ import annotations

import pytest
import torch

from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.data import build_data
from normbench.data.config import DataConfig
from normbench.layers import get_spec
from normbench.model.init_images import INIT_IMAGES, first_train_images, init_images_for
from normbench.train.loop import build_model, train_cell

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _digits(seed: int = 0, shard: tuple[int, int] = (0, 1)):
    return build_data(DataConfig(name="digits"), batch_size=64, device="cpu", seed=seed, shard=shard)


def test_the_first_64_training_images_in_stored_order_whatever_the_seed_or_rank():
    data = _digits(seed=0)
    images = first_train_images(data)
    assert images.shape == (INIT_IMAGES, 1, 8, 8)
    torch.testing.assert_close(images, data.train.normalize(data.train.images[:INIT_IMAGES]), rtol=0, atol=0)
    assert torch.equal(images, first_train_images(_digits(seed=1))), "the same batch on every seed"
    assert torch.equal(images, first_train_images(_digits(seed=0, shard=(1, 2)))), "and on every rank"


def test_only_layers_with_a_data_init_get_images():
    data = _digits()
    assert init_images_for("layernorm", data) is None and init_images_for("layerscale+qk_norm", data) is None
    assert torch.equal(init_images_for("admin", data), first_train_images(data))
    assert f"first {INIT_IMAGES} training images" in get_spec("admin").source, "the listing says what it profiles"


def _cell(layer: str, seed: int) -> CellConfig:
    return CellConfig(model=ModelConfig(layer=layer, depth=2, embed_dim=16, num_heads=2, patch_size=4),
                      train=TrainConfig(epochs=1, batch_size=128, warmup_epochs=0, seed=seed, telemetry_every=0))


def test_the_loop_builds_admin_with_the_profiled_batch():
    data = _digits()
    torch.manual_seed(0)
    model = build_model(_cell("admin", 0), data)
    assert torch.equal(model.init_images, first_train_images(data))
    assert not torch.equal(model.blocks[1].omega1, torch.ones(16)), "ω was profiled"
    assert train_cell(_cell("admin", 0), device="cpu").status == "ok"
