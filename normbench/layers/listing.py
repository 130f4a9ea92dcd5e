"""`normbench layers`: the registry as a table that fits 100 columns: a row per layer (name, kind, the norm it brings,
its formula wrapped to the width left), and its source on the lines below, indented."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from normbench.layers.registry import LayerSpec

WIDTH = 100
HEADERS = ("name", "kind", "brings", "formula")
SOURCE = "    source: "
_GAP = "  "


def layer_table(specs: Sequence[LayerSpec], width: int = WIDTH) -> str:
    """The table's lines, none wider than `width` (unless a name alone is wider)."""
    rows = [(s.name, s.kind, s.partner or "") for s in specs]
    widths = [max([len(header), *(len(row[i]) for row in rows)]) for i, header in enumerate(HEADERS[:-1])]
    indent = sum(widths) + len(_GAP) * len(widths)
    text_width = max(30, width - indent)

    def line(cells: Sequence[str], text: str) -> str:
        return (_GAP.join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + _GAP + text).rstrip()

    lines = [line(HEADERS[:-1], HEADERS[-1]), line(["-" * w for w in widths], "-" * text_width)]
    for spec, row in zip(specs, rows, strict=True):
        formula = textwrap.wrap(spec.formula, text_width, break_on_hyphens=False) or [""]
        lines.append(line(row, formula[0]))
        lines += [" " * indent + t for t in formula[1:]]
        lines += textwrap.wrap(spec.source, width, initial_indent=SOURCE, subsequent_indent=" " * len(SOURCE),
                               break_on_hyphens=False)
    return "\n".join(lines)
