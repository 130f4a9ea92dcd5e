"""Folders of one regime that hold different rows, read as one table (`normbench compare MODERN FRONTIER`): a later
folder's new layers ranked beside an earlier folder's, under one recipe (dataset, model and train sections, the
budget included: `Suite.recipe_hash`) and one baseline; each folder keeps its own seeds and claims. Folders that
differ in width, optimizer, grid-vs-tuned or budget are compared as regimes instead (report/regimes.py).

A row both folders hold is shown once when one folder's scoring cells are the other's, seed for seed (adopted:
sweep/adopt.py copies the donor's records), as the folder with more of them holds it; else once per folder, each
labelled. Each row's reading against the baseline is its folder's own (paired over matched report seeds, Holm over
that folder's table, as its leaderboard reads it): the union ranks, it adds no test. While a folder is unfinished,
every row is ranked by its selection seeds' val mean at its selected lr (the seeds that chose it: optimistic,
labelled so) and no reading is shown. Pure: formats `FolderRead`s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from normbench.report.folder import FolderRead, folder_name
from normbench.report.stats import REPORTS, reading, versus_baseline
from normbench.report.style import lr_text
from normbench.report.tables import BASELINE_VERDICTS, markdown_table, p_text
from normbench.report.width import TEST, VAL, converged_word, finished, regime_rows, window_cell

DIGITS = 2  # as the leaderboards print their scores


def union_refusal(reads: Sequence[FolderRead]) -> str | None:
    """Why the folders' rows cannot be ranked as one table (None: they can): another recipe (dataset, model, train
    section: what `adopt_from` requires too), another baseline (each reading is against its folder's), a tuned
    folder (`compare` sets tuned against grid), or a row axis beyond the layer (rows would merge)."""
    if len({r.suite.recipe_hash() for r in reads}) > 1:
        return ("these folders train one budget at one width with one optimizer, but under different recipes (their "
                "dataset, model or train sections differ, e.g. the heads): nothing to rank together, and no single "
                "factor to compare across; compare folders that differ in one thing: epochs, embed_dim, the "
                "optimizer, or grid against tuned")
    if len({r.suite.baseline or "layernorm" for r in reads}) > 1:
        named = ", ".join(f"{folder_name(r, reads)}: {r.suite.baseline or 'layernorm'}" for r in reads)
        return f"these folders read their rows against different baselines ({named}); give their suites one baseline"
    if any(r.tuned for r in reads):
        return "a tuned folder is compared against a grid folder of its recipe, not ranked beside another tuned one"
    if any(r.analysis.row_keys != ["layer"] for r in reads):
        return ("a folder's rows vary more than the layer (another matrix axis): its rows would merge with the "
                "other folder's; compare folders whose rows are layers")
    return None


def scoring_cells(read: FolderRead, depth: int, layer: str, lr: float, role: str) -> dict[int, float]:
    """`{seed: score}` of a row's cells of `role` at its selected lr: its report cells once every folder finished,
    else its selection cells (what the table ranks by then)."""
    c = read.analysis.cells
    chosen = c[(c["depth"] == depth) & (c["layer"] == layer) & (c["lr"] == lr) & (c["role"] == role)]
    return {int(s): float(v) for s, v in zip(chosen["seed"], chosen["score"], strict=True)}


def contains(big: dict[int, float], small: dict[int, float]) -> bool:
    """Every seed of `small` scored exactly as in `big` (copied records, not a second training)."""
    return bool(small) and all(seed in big and big[seed] == score for seed, score in small.items())


def union_entries(reads: Sequence[FolderRead], depth: int, role: str) -> list[dict]:
    """One entry per row to show: its folder, its select_lr row, and the folders whose cells (of `role`) it stands
    for."""
    entries: list[dict] = []
    for read in reads:
        rows = read.analysis.selected[read.analysis.selected["depth"] == depth]
        for _, row in rows.iterrows():
            cells = scoring_cells(read, depth, row["layer"], row["lr"], role)
            twin = next((e for e in entries if e["layer"] == row["layer"]
                         and (contains(e["cells"], cells) or contains(cells, e["cells"]))), None)
            if twin is None:
                entries.append({"layer": row["layer"], "read": read, "row": row, "cells": cells,
                                "also": [], "apart": False})
                continue
            if len(cells) > len(twin["cells"]):  # the folder with more of the same cells shows the row
                twin["also"].append((twin["read"], len(twin["cells"])))
                twin |= {"read": read, "row": row, "cells": cells}
            else:
                twin["also"].append((read, len(cells)))
    for e in entries:  # a layer held twice with different cells: each shown under its folder's name
        e["apart"] = sum(x["layer"] == e["layer"] for x in entries) > 1
    return entries


def folder_text(entry: dict, reads: Sequence[FolderRead]) -> str:
    name = folder_name(entry["read"], reads)
    if not entry["also"]:
        return name
    same = ", ".join(f"{folder_name(r, reads)}: {n} of these {len(entry['cells'])} seeds" if n < len(entry["cells"])
                     else f"{folder_name(r, reads)}: the same cells" for r, n in entry["also"])
    return f"{name} ({same})"


def union_table(reads: Sequence[FolderRead], depth: int, baseline: str) -> tuple[pd.DataFrame, str]:
    """Every row of every folder at `depth`, ranked together; and the quantity ranked."""
    done = all(finished(r.analysis.selected) for r in reads)
    column = "mean" if done else "select_mean"
    entries = union_entries(reads, depth, REPORTS if done else "select")
    versus = {id(r): versus_baseline(r.analysis.cells, r.analysis.selected, r.analysis.keys, baseline)
              for r in reads}
    scores = pd.Series([e["row"][column] for e in entries], dtype=float)
    ranks = scores.rank(ascending=False, method="min", na_option="bottom")  # a row without a score ranks last
    best = scores.max()
    order = sorted(range(len(entries)), key=lambda i: (ranks[i], entries[i]["layer"]))
    table = []
    for i in order:
        e, row = entries[i], entries[i]["row"]
        score = scores[i]
        interval = (f" [{row['low']:.{DIGITS}f}, {row['high']:.{DIGITS}f}]"
                    if done and not (math.isnan(score) or math.isnan(row["low"]) or math.isnan(row["high"])) else "")
        text = "—" if math.isnan(score) else f"{score:.{DIGITS}f}"
        line = {"rank": str(int(ranks[i])),
                "layer": e["layer"] + (f" ({folder_name(e['read'], reads)})" if e["apart"] else ""),
                "folder": folder_text(e, reads),
                "score": (f"**{text}**" if score == best else text) + interval,
                "seeds": str(int(row["n"])) if done else "selection",
                "lr (val-selected)": lr_text(row["lr"]) + (" e" if row.get("edge") in ("low", "high") else ""),
                "lr window": window_cell(row, False),
                "converged": converged_word(row["converged"]),
                "devices": str(row.get("devices", "")) or "—"}
        v = versus[id(e["read"])]
        v = v[(v["depth"] == depth) & (v["layer"] == e["layer"])]
        if e["layer"] == baseline:
            line[f"vs {baseline} (its folder's reading, Holm p)"] = "baseline"
        elif not done or v.empty:
            line[f"vs {baseline} (its folder's reading, Holm p)"] = "—"
        else:
            m = v.iloc[0]
            word = reading(m["mean"], m["p_holm"], BASELINE_VERDICTS)
            difference = f"{m['mean']:+.{DIGITS}f} [{m['low']:.{DIGITS}f}, {m['high']:.{DIGITS}f}]"
            line[f"vs {baseline} (its folder's reading, Holm p)"] = f"{difference}: {word} ({p_text(m['p_holm'])})"
        table.append(line)
    return pd.DataFrame(table), TEST if done else VAL


def compare_rows(reads: Sequence[FolderRead], regenerate: str, claims: pd.DataFrame) -> list[str]:
    """The comparison as markdown lines; `regenerate`: the command that writes it; `claims`: each folder's claims
    (regimes.claims_rows by folder)."""
    baseline = reads[-1].suite.baseline or "layernorm"
    names = " + ".join(f"`{folder_name(r, reads)}`" for r in reads)
    lines = [f"# normbench: one regime, several folders: {names}", "",
             "Folders of one recipe (dataset, model and train sections alike: the same width, budget and "
             "optimizer), each holding its own rows under its own seeds and claims, ranked as one table. A row two"
             " folders hold is shown once where one folder's scoring cells are the other's seed for seed (adopted,"
             " not trained again), as the folder with more of them holds it; else once per folder. Each reading "
             "against the baseline is its row's folder's own, as its leaderboard states it: the union adds no "
             "test, and ranks across folders are "
             f"orderings, not comparisons. Regenerate with `{regenerate}`.", "",
             markdown_table(regime_rows(list(reads))), ""]
    depths = sorted(set.union(*(set(r.analysis.selected["depth"]) for r in reads)))
    for depth in depths:
        table, quantity = union_table(reads, depth, baseline)
        lines += [f"## depth {depth}: every row, ranked together ({quantity}; mean [95% t interval] once every "
                  "folder has finished; bold: the true maximum; e: its lr at an edge of the lrs tried)", "",
                  markdown_table(table), ""]
    if not claims.empty:
        lines += ["## claims in each folder (as each folder's leaderboard reads them)", "", markdown_table(claims), ""]
    return lines
