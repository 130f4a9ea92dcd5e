"""A trained cell's weights as one safetensors file that timm loads: `train.keep_weights: final`.

The file holds the model's state dict and, in its metadata, everything needed to build the same model again: the
`timm.create_model` arguments (layer, depth, width, heads, patch, image size, channels, classes, ...), the cell's
full recipe, and its id and test/val top-1. So

    timm.create_model("normbench_vit", pretrained=True, pretrained_cfg_overlay=dict(file=PATH))

builds the trained model (`build_normbench_vit` fills the arguments you leave out from the file; the ones you give,
`layer=...` included, must agree with it), with the data set's channels, input size, classes, mean, std and eval
resize in its `pretrained_cfg`, so `timm.data.create_transform(**resolve_data_config(model=model))` evaluates images
as the cell did; `normbench probe --weights PATH` measures it as the probe measures a model at init. A layer whose
init needs training images (Admin) is built with `init_images` as usual.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from normbench.contracts.recipe import CellConfig

KWARGS_KEY = "normbench.create_model"  # metadata: json of timm.create_model's keyword arguments
CELL_KEY = "normbench.cell"            # metadata: json of the cell's CellConfig
ABOUT_KEY = "normbench.about"          # metadata: json of what the writer says (cell id, test/val top-1, version)
DATA_KEY = "normbench.data_cfg"        # metadata: json of the data as timm's pretrained_cfg says it (mean, std, ...)


def create_kwargs(config: CellConfig, *, img_size: int, in_chans: int, num_classes: int) -> dict[str, Any]:
    """The NormbenchViT arguments of `config`'s model on data of this shape (as train/loop.py builds it)."""
    model = asdict(config.model)
    model.pop("img_size")
    return {**model, "img_size": img_size, "in_chans": in_chans, "num_classes": num_classes}


def write_weights(model: Any, path: Path, config: CellConfig, *, img_size: int, in_chans: int, num_classes: int,
                  about: dict[str, Any], data_cfg: dict[str, Any] | None = None) -> None:
    """Write `model`'s weights to `path` atomically (temp file, fsync, rename), with the metadata above; `data_cfg`
    (data/bundle.py `timm_data_cfg`): the data set's channels, size, classes, mean, std and eval resize."""
    import os

    from safetensors.torch import save_file

    # copies: a module shared by two slots (one gate as ls1 and ls2) appears under both names, which safetensors
    # refuses as shared memory; each name gets its own tensor and loads back into the same module
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
    metadata = {KWARGS_KEY: json.dumps(create_kwargs(config, img_size=img_size, in_chans=in_chans,
                                                     num_classes=num_classes)),
                CELL_KEY: json.dumps(asdict(config)),
                ABOUT_KEY: json.dumps(about, default=str), **({DATA_KEY: json.dumps(data_cfg)} if data_cfg else {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        save_file(tensors, str(tmp), metadata=metadata)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_metadata(path: str | Path) -> dict[str, Any] | None:
    """{"kwargs", "cell", "about"} of a kept-weights file, or None for a file without normbench's metadata."""
    if not str(path).endswith(".safetensors"):
        return None
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        if KWARGS_KEY not in meta:
            return None
        return {"kwargs": json.loads(meta[KWARGS_KEY]), "cell": json.loads(meta.get(CELL_KEY, "{}")),
                "about": json.loads(meta.get(ABOUT_KEY, "{}")), "data_cfg": json.loads(meta.get(DATA_KEY, "{}"))}
    except OSError:
        raise
    except Exception as e:  # safetensors' own error for bytes that are no safetensors file; bad JSON in it
        raise ValueError(f"{path}: not a readable safetensors file ({' '.join(str(e).split())})") from None


def cell_config(path: str | Path) -> CellConfig:
    """The recipe a kept-weights file was trained with."""
    from normbench.contracts.recipe import ModelConfig, TrainConfig
    from normbench.data.config import DataConfig

    meta = read_metadata(path)
    if meta is None:
        raise ValueError(f"{path}: not a normbench weights file (no {KWARGS_KEY} metadata); keep_weights writes them")
    cell = meta["cell"]
    return CellConfig(model=ModelConfig(**cell["model"]), train=TrainConfig(**cell["train"]),
                      data=DataConfig(**cell["data"]))


def with_file_defaults(kwargs: dict[str, Any]) -> dict[str, Any]:
    """timm.create_model's `kwargs` for normbench_vit, completed from a kept-weights file named by
    `pretrained_cfg_overlay=dict(file=...)`: the model arguments not given, and the classes and channels timm
    compares the checkpoint with (else it drops the trained head as another task's). Any other kwargs: unchanged."""
    overlay = kwargs.get("pretrained_cfg_overlay") or {}
    file = overlay.get("file")
    meta = read_metadata(file) if file and Path(file).is_file() else None
    if meta is None:
        return kwargs
    saved = meta["kwargs"]
    for key, value in saved.items():
        kwargs.setdefault(key, value)
    differ = {k: (kwargs[k], v) for k, v in saved.items() if k in ("layer", "depth", "embed_dim", "num_heads",
                                                                   "patch_size") and kwargs[k] != v}
    if differ:
        named = ", ".join(f"{k}={given!r} (the file's: {saved!r})" for k, (given, saved) in differ.items())
        raise ValueError(f"{file}: holds another model than asked for: {named}; leave them out to build the file's")
    channels = saved["in_chans"]
    size = saved["img_size"]
    data = {k: tuple(v) if isinstance(v, list) else v for k, v in meta["data_cfg"].items()}  # JSON lists: tuples
    kwargs["pretrained_cfg_overlay"] = {**data, "num_classes": saved["num_classes"],
                                        "input_size": (channels, size, size), **overlay}
    return kwargs
