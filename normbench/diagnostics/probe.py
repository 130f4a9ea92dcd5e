"""Signal propagation at initialization, no training: why a layer trains well or not, before it trains.

For each model, one batch forward and backward; forward hooks on every block (the block's forward is unchanged):

    rms_in, rms_out  the residual stream's root mean square entering and leaving the block (all tokens, channels)
    growth           rms_out / rms_in: 1 for a block that starts as the identity (ReZero, Fixup); > 1 where each
                     branch adds to the stream (pre-LN: the stream grows with depth, so deep branches matter less)
    grad_norm        the L2 norm of the loss gradient over the block's parameters (cross-entropy on the batch labels)
    token_cos        mean cosine similarity between distinct tokens of an image at the block's output, averaged over
                     the batch: towards 1 the tokens collapse to one direction (rank collapse)

A block family's stream (normbench/layers/registry.py `Family`) is measured as the training telemetry measures it:
with n streams (B, N, n, C) the RMS is taken over all of them (n equal copies of x read as RMS(x)), and token_cos
on the streams merged as the model merges them before its final norm (their sum: the direction the head reads).

`probe_model` is a pure function (model + batch -> DataFrame); `probe` loops over layers x depths x dims;
`summarize` reduces a probe to one row per model; `write_report` writes results/probe-<...>.md, .csv and .png.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from normbench.contracts.recipe import CellConfig, ModelConfig
from normbench.errors import NormbenchError

COLUMNS = ["block", "rms_in", "rms_out", "growth", "grad_norm", "token_cos"]


def _rms(x: torch.Tensor) -> float:
    return x.float().pow(2).mean().sqrt().item()


def token_cosine(x: torch.Tensor) -> float:
    """Mean cosine similarity between the distinct tokens of each sample, averaged over samples.

    Args:
        x: tokens (B, N, C), N >= 2.
    """
    unit = F.normalize(x.float(), dim=-1)
    sim = unit @ unit.transpose(1, 2)  # (B, N, N)
    n = x.shape[1]
    off_diagonal = sim.sum(dim=(1, 2)) - sim.diagonal(dim1=1, dim2=2).sum(dim=1)
    return (off_diagonal / (n * (n - 1))).mean().item()


def probe_model(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> pd.DataFrame:
    """Per-block stream RMS, growth, gradient norm and token similarity of `model` at its current weights.

    Args:
        model: a NormbenchViT-shaped model (`model.blocks`); left with no gradients and in eval mode.
        x: images (B, C_in, H, W).
        y: labels (B,).
    Returns:
        one row per block, columns `COLUMNS`.
    """
    model.eval()  # dropout and drop-path off: the probe measures the init, not the noise
    model.zero_grad(set_to_none=True)
    seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def hook(index: int):  # type: ignore[no-untyped-def]
        def record(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            seen[index] = (inputs[0].detach(), output.detach())
        return record

    handles = [block.register_forward_hook(hook(i)) for i, block in enumerate(model.blocks)]  # type: ignore[attr-defined]
    try:
        F.cross_entropy(model(x), y).backward()
    finally:
        for handle in handles:
            handle.remove()
    rows = []
    merge = getattr(model, "merge", nn.Identity())  # a family's streams -> (B, N, C); the identity otherwise
    for i, block in enumerate(model.blocks):  # type: ignore[attr-defined]
        h_in, h_out = seen[i]
        grads = [p.grad.float().pow(2).sum() for p in block.parameters() if p.grad is not None]
        rms_in, rms_out = _rms(h_in), _rms(h_out)
        rows.append({"block": i, "rms_in": rms_in, "rms_out": rms_out,
                     "growth": rms_out / rms_in if rms_in > 0 else float("nan"),
                     "grad_norm": torch.stack(grads).sum().sqrt().item() if grads else 0.0,
                     "token_cos": token_cosine(merge(h_out))})
    model.zero_grad(set_to_none=True)
    return pd.DataFrame(rows, columns=COLUMNS)


def probe(configs: Sequence[CellConfig], *, batch_size: int = 64, device: str = "cpu", seed: int = 0) -> pd.DataFrame:
    """Probe each cell's model at init on one validation batch of its data set.

    Args:
        configs: the cells to probe (their model and data sections are used; train.seed is replaced by `seed`).
        batch_size: images in the probe batch (default 64).
        device: where to run (default cpu).
        seed: model init seed (default 0).
    Returns:
        the rows of `probe_model` for every cell, with columns layer, depth, dim, heads first.
    """
    from normbench.data import build_data
    from normbench.train.loop import build_model

    frames, batches = [], {}
    for cell in configs:
        key = (repr(cell.data), cell.model.img_size)
        if key not in batches:  # one data set per suite: load it once
            data = build_data(cell.data, batch_size=batch_size, device=device, seed=seed, img_size=cell.model.img_size)
            batches[key] = (data, next(iter(data.val)))
        data, (x, y) = batches[key]
        torch.manual_seed(seed)
        model = build_model(replace(cell, train=replace(cell.train, seed=seed)), data).to(device)
        frame = probe_model(model, x, y)
        frame.insert(0, "heads", cell.model.num_heads)
        frame.insert(0, "dim", cell.model.embed_dim)
        frame.insert(0, "depth", cell.model.depth)
        frame.insert(0, "layer", cell.model.layer)
        frames.append(frame)
        del model  # a depth-36 width-768 model holds ~1 GB with its gradients: one at a time
    return pd.concat(frames, ignore_index=True)


def probe_weights(path: Path, *, batch_size: int = 64, device: str = "cpu") -> pd.DataFrame:
    """Probe a trained model, kept by `train.keep_weights: final` (model/weights_file.py), as `probe` probes one at
    init: the same batch (the first validation batch of its data set), the same rows."""
    from safetensors.torch import load_file

    from normbench.data import build_data
    from normbench.model.weights_file import cell_config
    from normbench.train.loop import build_model

    try:
        cell = cell_config(path)
    except (OSError, ValueError) as e:
        raise NormbenchError(f"probe --weights {path}: {e}") from None
    data = build_data(cell.data, batch_size=batch_size, device=device, seed=0, img_size=cell.model.img_size)
    x, y = next(iter(data.val))
    model = build_model(cell, data)
    try:
        tensors = load_file(str(path))
    except Exception as e:  # truncated or damaged after its header: safetensors' own error, or an OSError
        raise NormbenchError(f"probe --weights {path}: cannot read its tensors ({' '.join(str(e).split())}); the "
                             "file is damaged: copy it again, or train the cell again with keep_weights") from None
    model.load_state_dict(tensors)
    frame = probe_model(model.to(device), x, y)
    frame.insert(0, "heads", cell.model.num_heads)
    frame.insert(0, "dim", cell.model.embed_dim)
    frame.insert(0, "depth", cell.model.depth)
    frame.insert(0, "layer", cell.model.layer)
    return frame


def grid(layers: Sequence[str], depths: Sequence[int], dims: Sequence[int], base: ModelConfig | None = None,
         data=None, heads: Sequence[int] | None = None) -> list[CellConfig]:  # type: ignore[no-untyped-def]
    """CellConfigs for layers x depths x dims on top of `base` (default: ModelConfig's digits defaults); `heads`: one
    head count per dim, or one for all (default: base's)."""
    base = base or ModelConfig()
    if min(depths) < 1:
        raise NormbenchError(f"probe: --depth {min(depths)} has no block to probe; use depths of 1 or more")
    head_of = _heads_per_dim(dims, heads, base.num_heads)
    cells = []
    for dim in dims:
        for depth in depths:
            for layer in layers:
                model = replace(base, layer=layer, depth=depth, embed_dim=dim, num_heads=head_of[dim])
                cells.append(CellConfig(model=model) if data is None else CellConfig(model=model, data=data))
    return cells


def reshape(configs: Sequence[CellConfig], depths: Sequence[int] | None = None, dims: Sequence[int] | None = None,
            heads: Sequence[int] | None = None) -> list[CellConfig]:
    """Each config at each of `depths` x `dims` (None keeps its own), with `heads` per dim as in `grid`: a suite's
    rows probed at widths it does not train. Configs that come out the same are probed once."""
    if depths is not None and min(depths) < 1:
        raise NormbenchError(f"probe: --depth {min(depths)} has no block to probe; use depths of 1 or more")
    out: dict[tuple, CellConfig] = {}
    for dim_given in (dims or [None]):
        for depth_given in (depths or [None]):
            for cell in configs:
                dim = dim_given or cell.model.embed_dim
                num_heads = _heads_per_dim(dims or [dim], heads, cell.model.num_heads)[dim]
                model = replace(cell.model, depth=depth_given or cell.model.depth, embed_dim=dim, num_heads=num_heads)
                out.setdefault((model.layer, model.depth, model.embed_dim, model.num_heads), replace(cell, model=model))
    return list(out.values())


def _heads_per_dim(dims: Sequence[int], heads: Sequence[int] | None, default: int) -> dict[int, int]:
    """dim -> head count: `heads` one per dim (in order) or one for all; None: `default` for every dim."""
    if heads is not None and len(heads) not in (1, len(dims)):
        raise NormbenchError(f"probe: --heads takes one count per --dim ({len(dims)}) or one for all, not "
                             f"{len(heads)}; e.g. --dim 64 768 --heads 4 12")
    counts = list(heads) * len(dims) if heads is not None and len(heads) == 1 else list(heads or [default] * len(dims))
    for dim, count in zip(dims, counts, strict=True):
        if count < 1 or dim < 1 or dim % count:
            raise NormbenchError(f"probe: --dim {dim} does not split into {count} heads; use a positive multiple of "
                                 f"{count}, e.g. {max(1, dim // max(count, 1)) * max(count, 1)}")
    return dict(zip(dims, counts, strict=True))


def probe_recipe(configs: Sequence[CellConfig], batch_size: int, seed: int = 0) -> str:
    """What the probed models share, for the report's header: data, patch, heads, batch and init seed."""
    first = configs[0].model
    shapes = sorted({(c.model.embed_dim, c.model.num_heads) for c in configs})
    dims = "/".join(str(dim) for dim, _ in shapes)
    heads = f"{first.num_heads} heads, dim {dims}" if len({h for _, h in shapes}) == 1 else (
        f"dim {dims} with {'/'.join(str(h) for _, h in shapes)} heads (head dim "
        f"{'/'.join(str(d // h) for d, h in shapes)})")
    size = f"{first.img_size} px" if first.img_size else "native size"
    return (f"recipe: {configs[0].data.name} (one validation batch of {batch_size} images, {size}), patch "
            f"{first.patch_size}, {heads}, init seed {seed}; every layer's own init rule")


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (layer, depth, dim, heads): the stream RMS entering the first block and leaving the last, their
    ratio, the largest per-block growth, the first and last blocks' gradient norms, and the last block's token
    cosine."""
    def one(g: pd.DataFrame) -> pd.Series:
        g = g.sort_values("block")
        first, last = g.iloc[0], g.iloc[-1]
        return pd.Series({
            "rms_embed": first["rms_in"], "rms_last": last["rms_out"],
            "stream_growth": last["rms_out"] / first["rms_in"] if first["rms_in"] > 0 else float("nan"),
            "max_block_growth": g["growth"].max(),
            "grad_first": first["grad_norm"], "grad_last": last["grad_norm"],
            "token_cos_last": last["token_cos"],
        })
    keys = [k for k in ("layer", "depth", "dim", "heads") if k in frame.columns]
    out = frame.groupby(keys, sort=False)[[c for c in frame.columns if c not in keys]].apply(one)
    return out.reset_index()


def write_report(frame: pd.DataFrame, out_dir: Path, name: str, header: str = "", trained: bool = False) -> Path:
    """results/probe-<name>.md (summary table), .csv (every block) and .png (per-block curves at the deepest depth).

    Returns:
        the markdown file's path.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"probe-{name}"
    frame.to_csv(stem.with_suffix(".csv"), index=False)
    table = summarize(frame)
    _plot(frame, stem.with_suffix(".png"), "trained" if trained else "at init")
    when = "of the trained weights named above" if trained else "at initialization (no training)"
    lines = [f"# normbench probe: {name}", "", header, "",
             f"Signal propagation {when}, one batch forward and backward. "
             "`stream_growth`: RMS of the residual stream leaving the last block over RMS entering the first; "
             "`max_block_growth`: the largest per-block ratio; `grad_first`/`grad_last`: gradient norm of the first "
             "and last block's parameters (cross-entropy); `token_cos_last`: mean cosine between distinct tokens at "
             "the last block (1 = rank collapse). Every block: "
             f"`{stem.with_suffix('.csv').name}`; curves: `{stem.with_suffix('.png').name}`.", "",
             table.to_markdown(index=False, floatfmt=".4g"), ""]
    path = stem.with_suffix(".md")
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def _plot(frame: pd.DataFrame, path: Path, when: str = "at init") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    deepest = frame[frame["depth"] == frame["depth"].max()]
    if deepest["dim"].nunique() > 1:
        _plot_widths(summarize(deepest), path, when, plt)
        return
    dim = deepest["dim"].max()
    deepest = deepest[deepest["dim"] == dim]
    first_rms = deepest[deepest["block"] == 0].set_index("layer")["rms_in"]
    deepest = deepest.assign(stream=deepest["rms_out"] / deepest["layer"].map(first_rms))
    panels = [("stream", "stream RMS after the block / entering block 0", False),
              ("grad_norm", "gradient norm of the block (0 drawn at 1e-12)", True),
              ("token_cos", "token cosine after the block", False)]
    fig, axes = plt.subplots(1, len(panels), figsize=(15, 4.2))
    for ax, (column, title, log) in zip(axes, panels, strict=True):
        for layer, g in deepest.groupby("layer", sort=False):
            values = g[column].clip(lower=1e-12) if log else g[column]
            ax.plot(g["block"], values, marker=".", label=layer)
        ax.set_title(title)
        ax.set_xlabel("block")
        if log:
            ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{when}: depth {int(deepest['depth'].max())}, dim {int(dim)}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_widths(table: pd.DataFrame, path: Path, when: str, plt) -> None:  # type: ignore[no-untyped-def]
    """Several widths at the deepest depth: each layer's summary against the width, the regime a width sets."""
    from normbench.report.style import LEGEND_FONT, layer_colour, layer_marker

    panels = [("stream_growth", "stream growth (RMS last / embedding)", True),
              ("token_cos_last", "token cosine after the last block", False),
              ("grad_first", "gradient norm of block 0 (0 drawn at 1e-12)", True)]
    fig, axes = plt.subplots(1, len(panels), figsize=(16, 4.6))
    for ax, (column, title, log) in zip(axes, panels, strict=True):
        for layer, g in table.groupby("layer", sort=False):
            g = g.sort_values("dim")
            values = g[column].clip(lower=1e-12) if log else g[column]
            ax.plot(g["dim"], values, marker=layer_marker(layer), color=layer_colour(layer), label=layer)
        ax.set_title(title)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(table["dim"].unique()), [str(d) for d in sorted(table["dim"].unique())])
        ax.set_xlabel("width (embed dim)")
        if log:
            ax.set_yscale("log")
    axes[-1].legend(fontsize=LEGEND_FONT, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.suptitle(f"{when}: depth {int(table['depth'].max())}, one model per layer and width")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
