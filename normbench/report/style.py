"""One look for every figure and table of a report: a layer keeps its colour, marker and place in every figure of a
suite (and its colour and marker across suites), and an lr prints with 3 significant digits everywhere.

Pure: no matplotlib import, so tables.py and header.py use the text helpers for free.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

# The built-in layers (normbench.layers' registry), most compared first: they get the ten tab10 colours, so a
# layer looks the same in every suite. A test keeps this list equal to the registry.
CANONICAL = ("layernorm", "rmsnorm", "layerscale", "rezero", "fixup", "dyt", "deepnorm", "post_ln", "tfixup",
             "skipinit", "learnable_scaler", "learnable_scaler_ones", "rezero_per_branch", "fixup_official",
             "fixup_bias", "none", "qk_norm", "res_post_norm", "res_post_norm_olmo2", "derf", "peri_ln", "lns",
             "mix_ln", "admin", "depth_mup", "scaled_init", "normformer", "hc", "hc_dynamic", "mhc", "ngpt",
             "peri_ln_out_gamma", "normformer_out_gamma", "derf_alpha03", "seednorm", "hybridnorm", "hybridnorm_star",
             "gated_attn", "gpas", "value_residual", "frac_connections", "attn_res", "completep")
TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
         "#17becf")
# one per CANONICAL layer; after the first 16, tab20b's and tab20c's shades that EXTRA_COLOURS does not use
COLOURS = (*TAB10, "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#000000",
           "#6b6ecf", "#b5cf6b", "#e7ba52", "#d6616b", "#ce6dbd", "#3182bd", "#e6550d", "#31a354", "#756bb1",
           "#636363", "#9c9ede", "#fd8d3c", "#fdae6b", "#6baed6", "#9e9ac8", "#9ecae1", "#74c476", "#969696",
           "#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666", "#e31a1c")  # Dark2
# Combinations (`a+b`) and plugins: a stable hash picks from these (tab20's light shades and tab20b)
EXTRA_COLOURS = ("#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d",
                 "#9edae5", "#5254a3", "#8ca252", "#bd9e39", "#ad494a", "#a55194")
MARKERS = ("o", "s", "D", "^", "v", "<", ">", "p", "P", "*", "h", "d")  # no x: it marks a diverged cell
DIVERGED_MARKER = "x"
DIVERGED_COLOUR = "0.25"
DIVERGED_LABEL = "diverged (x; the number counts seeds)"

# 200 dpi: print quality for a paper (each PNG has an SVG twin too); a 4-inch panel is 800 px, its text sharp
DPI = 200
PANEL = (4.0, 3.0)  # inches per panel of a grid
LEGEND_FONT = 8


def _stable_index(name: str, size: int) -> int:
    return zlib.crc32(name.encode()) % size  # not hash(): Python salts it per process


def layer_colour(layer: str) -> str:
    """The layer's colour: its place in CANONICAL, else a stable hash of its name (the same in every suite)."""
    if layer in CANONICAL:
        return COLOURS[CANONICAL.index(layer)]
    return EXTRA_COLOURS[_stable_index(layer, len(EXTRA_COLOURS))]


def layer_marker(layer: str) -> str:
    """The layer's marker (told apart in greyscale print too), chosen like its colour."""
    index = CANONICAL.index(layer) if layer in CANONICAL else _stable_index(layer, len(MARKERS))
    return MARKERS[index % len(MARKERS)]


def layer_order(layers: Iterable[str], suite_order: Sequence[str] | None = None) -> list[str]:
    """The layers present, in the suite's order (its `layer` axis) when known, the others after them sorted."""
    present = set(layers)
    known = [layer for layer in dict.fromkeys(suite_order or ()) if layer in present]
    return [*known, *sorted(present - set(known))]


def lr_text(lr: float) -> str:
    """An lr with 3 significant digits: 0.0031623 -> '0.00316', 3.1623e-4 -> '0.000316', 1e-3 -> '0.001'."""
    return f"{lr:.3g}"


def ratio_text(ratio: float) -> str:
    """A ratio rounded to 3 significant digits, trailing zeros dropped, never in exponent form: 9.999 -> '10'."""
    return f"{float(f'{ratio:.3g}'):.12g}"


def window_text(low: float, high: float) -> str:
    """The lr window as 'low–high (xN)', N its span between the lrs as printed (so the text adds up: 0.000316 to
    0.00316 reads x10); a single lr reads '0.003 (x1)'."""
    if low == high:
        return f"{lr_text(low)} (x1)"
    shown_low, shown_high = float(lr_text(low)), float(lr_text(high))
    return f"{lr_text(low)}–{lr_text(high)} (x{ratio_text(shown_high / shown_low)})"


def grid(panels: int, max_cols: int = 3) -> tuple[int, int]:
    """(rows, cols) of a grid of `panels`: two columns up to four panels (2 x 2 reads best), else `max_cols`."""
    cols = 1 if panels <= 1 else 2 if panels <= 4 else max_cols
    return -(-max(1, panels) // cols), cols
