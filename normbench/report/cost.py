"""The leaderboard's cost section: each `cost-*.csv` in the output folder (written by `normbench bench SUITE --out
OUT`, normbench/diagnostics/suite_cost.py), one table per file, its numbers rounded once from the file's.

The throughput table beside it is the cells' own wall clock, which other work on the machine slows; these tables
time every layer's train step in turn on one machine, so their ratios to the baseline are the cost to quote.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from normbench.report.tables import markdown_table

COST_GLOB = "cost-*.csv"  # what normbench/diagnostics/suite_cost.py writes


NEEDED = ("layer", "depth", "step_ms", "step_vs_baseline", "memory_mib", "memory", "mem_vs_baseline", "params",
          "batch", "baseline", "device", "torch")


def cost_sections(out_dir: Path, suite: str | None = None) -> list[str]:
    """A section per cost file in `out_dir` measured for `suite` (none: no lines), rows by depth, then cheapest
    first. A file of another suite, or one this normbench cannot read, is named and skipped, never shown as this
    suite's cost."""
    lines: list[str] = []
    for path in sorted(Path(out_dir).glob(COST_GLOB)):
        frame = pd.read_csv(path)
        missing = [c for c in NEEDED if c not in frame]
        other = sorted(set(frame["suite"].astype(str)) - {suite}) if suite and "suite" in frame else []
        if missing or other:
            why = f"lacks {', '.join(missing)}" if missing else f"was measured for suite {', '.join(other)}"
            lines += [f"- {path.name} {why}: not shown; `normbench bench SUITE --out {Path(out_dir)}` measures this "
                      "suite's cost again", ""]
            continue
        if frame.empty:
            continue
        first = frame.iloc[0]
        baseline = str(first["baseline"])
        lines += [f"## cost per train step at this suite's shape ({first['device']}, torch {first['torch']}, batch "
                  f"{first['batch']}: [{path.stem}.md]({path.stem}.md))", "",
                  f"Every layer's train step timed in turn on one machine (`normbench bench SUITE --out OUT`), so the "
                  f"ratios to {baseline} hold where the throughput's wall clock does not. Memory: "
                  f"{first['memory']}.", "", markdown_table(cost_table(frame, baseline)), ""]
    return lines


def cost_table(frame: pd.DataFrame, baseline: str) -> pd.DataFrame:
    rows = frame.sort_values(["depth", "step_vs_baseline"], kind="stable")
    return pd.DataFrame({
        "layer": rows["layer"], "depth": rows["depth"].astype(str), "step (ms)": rows["step_ms"].map("{:.1f}".format),
        f"step vs {baseline}": rows["step_vs_baseline"].map("{:.2f}x".format),
        "memory (MiB)": rows["memory_mib"].map("{:.1f}".format),
        f"memory vs {baseline}": rows["mem_vs_baseline"].map("{:.2f}x".format),
        "params (M)": (rows["params"] / 1e6).map("{:.3f}".format)})
