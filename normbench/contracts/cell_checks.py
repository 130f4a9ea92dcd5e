"""Checks of one cell's recipe that need no training: every key in range, the layer known, the schedule, image,
batch and optimizer consistent with the data. normbench/contracts/suite.py runs them on every cell of a matrix, so a
suite that would train nonsense is refused before anything is created.
"""

from __future__ import annotations

import math
import re
from typing import Any

from normbench.contracts.recipe import KEEP_WEIGHTS, MUON_OPTIMIZERS, Cell
from normbench.data.config import DataConfig
from normbench.errors import NormbenchError, SuiteError, did_you_mean

# the bundled data sets' fixed train splits (normbench/data/digits.py, mnist5k.py): known without loading them;
# cifar and imagefolder are only known once read from disk, so their batch size is checked when they load
BUNDLED_TRAIN_SIZE = {"digits": 1077, "mnist5k": 3000}
NATIVE_IMG_SIZE = {"digits": 8, "mnist5k": 28, "cifar10": 32, "cifar100": 32}  # synthetic: synthetic_size


def check_device(value: Any, key: str) -> str:
    """A suite's `device:` or a command's `--device` (`key` names which), checked before torch sees it."""
    if not isinstance(value, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?|mps", value):
        raise SuiteError(f"{key}: expected auto, cpu, cuda or cuda:N, got {value!r}")
    return value


def check_dataset(dataset: DataConfig, where: str) -> None:
    from normbench.data import DATASETS

    if dataset.name not in DATASETS:
        hint = did_you_mean(dataset.name, DATASETS)
        raise SuiteError(f"{where}: dataset.name: unknown dataset `{dataset.name}`{hint}")


def check_cell(cell: Cell, where: str) -> None:
    from normbench.layers import resolve_layer

    m = cell.config.model
    try:
        plan = resolve_layer(m.layer)
    except NormbenchError as e:
        key = "matrix.layer" if "layer" in cell.axes else "model.layer"
        raise SuiteError(f"{where}: {key}: {e}") from None
    try:  # a block family's arguments (hc's expansion rate), or keys its block does not take
        plan.check_block_kwargs(m.block_kwargs)
    except NormbenchError as e:
        raise SuiteError(f"{where}: model.{e}{_in_cell(cell, 'layer', 'block_kwargs')}") from None
    if m.embed_dim % m.num_heads:
        key = _key(cell, "model.num_heads" if "num_heads" in cell.axes else "model.embed_dim")
        raise SuiteError(f"{where}: {key}: embed_dim {m.embed_dim} is not divisible by num_heads {m.num_heads} "
                         f"(cell {cell.cell_id})")
    positive = {"model.depth": m.depth, "model.embed_dim": m.embed_dim, "model.patch_size": m.patch_size,
                "model.img_size": 1 if m.img_size is None else m.img_size, "train.epochs": cell.config.train.epochs,
                "train.batch_size": cell.config.train.batch_size, "train.lr": cell.config.train.lr,
                "train.grad_accum_steps": cell.config.train.grad_accum_steps}
    for key, value in positive.items():
        if value <= 0:
            raise SuiteError(f"{where}: {_key(cell, key)}: must be positive, got {value!r}")
    t = cell.config.train
    not_negative = {"train.telemetry_every": t.telemetry_every, "train.attn_extra_loss": t.attn_extra_loss,
                    "train.attn_extra_loss_layers": t.attn_extra_loss_layers,
                    "train.train_feature_decay": t.train_feature_decay, "train.weight_decay": t.weight_decay,
                    "train.warmup_epochs": t.warmup_epochs}  # 0 turns each off
    for key, value in not_negative.items():
        if value < 0:
            raise SuiteError(f"{where}: {_key(cell, key)}: must be 0 (off) or more, got {value!r}")
    _check_checkpoints(cell, where)
    _check_schedule(cell, where)
    _check_image(cell, where)
    _check_batch(cell, where)
    _check_optimizer(cell, where)
    choices = {"model.drop_path_mode": (m.drop_path_mode, ("linear", "uniform")),
               "model.global_pool": (m.global_pool, ("token", "avg")),
               "train.amp": (cell.config.train.amp, ("auto", "bf16", "none")),
               "train.compile": (cell.config.train.compile, ("auto", "on", "off")),
               "train.keep_weights": (cell.config.train.keep_weights, KEEP_WEIGHTS)}
    for key, (value, options) in choices.items():
        if value not in options:
            raise SuiteError(f"{where}: {_key(cell, key)}: {value!r}{did_you_mean(value, options)}")


def _key(cell: Cell, key: str) -> str:
    """Where the user wrote `key` (`train.lr`): `matrix.lr` when it is a matrix axis, else the recipe's key."""
    name = key.split(".", 1)[1]
    return f"matrix.{name}" if name in cell.axes else key


def _in_cell(cell: Cell, *keys: str) -> str:
    """' (cell depth=2,...)' when one of `keys` is a matrix axis: the bad value is that cell's, not the recipe's."""
    return f" (cell {cell.cell_id})" if any(k in cell.axes for k in keys) else ""


def _check_checkpoints(cell: Cell, where: str) -> None:
    """train.checkpoint_minutes: 0 (off) or a positive, finite number of minutes (a fraction is fine)."""
    minutes = cell.config.train.checkpoint_minutes
    if not (minutes >= 0 and math.isfinite(minutes)):
        raise SuiteError(f"{where}: {_key(cell, 'train.checkpoint_minutes')}: expected 0 (no checkpoints) or a "
                         "positive number of minutes between checkpoints at epoch boundaries, e.g. 15 (the default), "
                         f"got {minutes!r}"
                         f"{_in_cell(cell, 'checkpoint_minutes')}")


def _check_schedule(cell: Cell, where: str) -> None:
    """The lr schedule reaches its peak, and its floors and the smoothing are in range."""
    t = cell.config.train
    if t.warmup_epochs >= t.epochs:
        raise SuiteError(f"{where}: {_key(cell, 'train.warmup_epochs')}: {t.warmup_epochs:g} is not below "
                         f"{_key(cell, 'train.epochs')} {t.epochs}"
                         f"{_in_cell(cell, 'warmup_epochs', 'epochs')}, so the lr would never reach its peak; "
                         "use fewer warmup epochs or more epochs")
    for key, value in {"train.min_lr": t.min_lr, "train.warmup_lr": t.warmup_lr}.items():
        if value < 0:
            raise SuiteError(f"{where}: {_key(cell, key)}: must be 0 or more, got {value!r}")
    if not 0 <= t.label_smoothing < 1:
        raise SuiteError(f"{where}: {_key(cell, 'train.label_smoothing')}: must lie in [0, 1) (0: off, 0.1 usual), "
                         f"got {t.label_smoothing!r}")


def _check_image(cell: Cell, where: str) -> None:
    """The patch side divides the image side (the data set's native size, or model.img_size)."""
    from normbench.data.build import IMAGEFOLDER_SIZE

    m, data = cell.config.model, cell.config.data
    native = {**NATIVE_IMG_SIZE, "synthetic": data.synthetic_size, "imagefolder": IMAGEFOLDER_SIZE}[data.name]
    size = m.img_size or native
    if size % m.patch_size:
        divisors = [d for d in range(1, size + 1) if size % d == 0]
        near = sorted({max(d for d in divisors if d <= m.patch_size),
                       min((d for d in divisors if d >= m.patch_size), default=size)})
        side = f"{_key(cell, 'model.img_size')} {size}" if m.img_size else f"the {size}x{size} images of {data.name}"
        raise SuiteError(f"{where}: {_key(cell, 'model.patch_size')}: {m.patch_size} does not divide {side}"
                         f"{_in_cell(cell, 'patch_size', 'img_size')}; use a divisor of {size}, e.g. "
                         f"{' or '.join(map(str, near))}")


def _check_batch(cell: Cell, where: str) -> None:
    """A batch fits in the train split, and an epoch holds at least one optimizer step (bundled and synthetic data:
    the sizes are known without loading anything)."""
    t, data = cell.config.train, cell.config.data
    n = data.train_size if data.name == "synthetic" else BUNDLED_TRAIN_SIZE.get(data.name)
    if n is None or n < 1:  # cifar, imagefolder: known once read; a bad synthetic size is the loader's message
        return
    if t.batch_size > n:
        raise SuiteError(f"{where}: {_key(cell, 'train.batch_size')}: {t.batch_size} is more than the {n} images of "
                         f"the {data.name} train split{_in_cell(cell, 'batch_size')}, so the batch would silently "
                         f"shrink to {n}; "
                         f"use at most {n}")
    batches = n // t.batch_size
    if batches < t.grad_accum_steps:
        raise SuiteError(f"{where}: {_key(cell, 'train.grad_accum_steps')}: {t.grad_accum_steps} batches per "
                         "optimizer step, but an "
                         f"epoch of {data.name} holds only {batches} batches of {t.batch_size}"
                         f"{_in_cell(cell, 'grad_accum_steps', 'batch_size')}: no step would ever run; use at most "
                         f"{batches} or a smaller batch_size")


def _check_optimizer(cell: Cell, where: str) -> None:
    """A name timm's create_optimizer_v2 knows (it reads `lookahead_adamw` as adamw with Lookahead)."""
    from timm.optim import list_optimizers  # timm is loaded by the layer check already

    name = cell.config.train.optimizer
    known = list_optimizers()
    if name.lower().split("_")[-1] not in known:
        hint = did_you_mean(name.lower(), known, otherwise=f"use one of timm's {len(known)}, e.g. adamw, lamb "
                                                         "or sgd: timm.optim.list_optimizers()")
        raise SuiteError(f"{where}: {_key(cell, 'train.optimizer')}: unknown optimizer {name!r}"
                         f"{_in_cell(cell, 'optimizer')}{hint}")
    _check_muon(cell, where)
    _check_adam_beta2(cell, where)


ADAM_FAMILY = ("adam", "lamb", "muon")  # optimizer names with an Adam second moment (`train.adam_beta2`)


def _check_adam_beta2(cell: Cell, where: str) -> None:
    """`train.adam_beta2` is the second-moment decay of an Adam-family optimizer (AdamW, LAMB, Muon's AdamW part),
    in (0, 1)."""
    t = cell.config.train
    if t.adam_beta2 is None:
        return
    if not any(family in t.optimizer.lower() for family in ADAM_FAMILY):
        raise SuiteError(f"{where}: {_key(cell, 'train.adam_beta2')}: {t.adam_beta2!r} is set, but "
                         f"{_key(cell, 'train.optimizer')} {t.optimizer!r} keeps no Adam second moment"
                         f"{_in_cell(cell, 'adam_beta2', 'optimizer')}; drop it or use an Adam-family optimizer")
    if not 0 < t.adam_beta2 < 1:
        raise SuiteError(f"{where}: {_key(cell, 'train.adam_beta2')}: must lie in (0, 1) (AdamW's default 0.999), "
                         f"got {t.adam_beta2!r}{_in_cell(cell, 'adam_beta2')}")


def _check_muon(cell: Cell, where: str) -> None:
    """Muon as train/muon.py builds it (muon, adamuon). timm's other Muon names would split the parameters by shape
    (the classifier onto Muon) and `nmuon`/`nadamuon` train the rest with NAdamW, so they are refused;
    `train.muon_momentum` is Muon's, in [0, 1)."""
    t = cell.config.train
    name = t.optimizer.lower()
    if "muon" in name and name not in MUON_OPTIMIZERS:
        raise SuiteError(f"{where}: {_key(cell, 'train.optimizer')}: {t.optimizer!r} is not one of normbench's "
                         f"Muon recipes{_in_cell(cell, 'optimizer')}: timm would route the parameters by shape (the "
                         "classifier onto Muon)" + (" and train the rest with NAdamW, not AdamW" if "nadam" in name or
                                                    name.endswith("nmuon") else "")
                         + f"; use {' or '.join(MUON_OPTIMIZERS)} (Nesterov momentum on the hidden matrices, AdamW "
                         "on the rest: docs/layers.md)")
    momentum = t.muon_momentum
    if momentum is None:
        return
    if name not in MUON_OPTIMIZERS:
        raise SuiteError(f"{where}: {_key(cell, 'train.muon_momentum')}: {momentum!r} is set, but "
                         f"{_key(cell, 'train.optimizer')} {t.optimizer!r} has no Muon part"
                         f"{_in_cell(cell, 'muon_momentum', 'optimizer')}; drop it or use optimizer: muon")
    if not 0 <= momentum < 1:
        raise SuiteError(f"{where}: {_key(cell, 'train.muon_momentum')}: must lie in [0, 1) (the reference's 0.95), "
                         f"got {momentum!r}{_in_cell(cell, 'muon_momentum')}")
