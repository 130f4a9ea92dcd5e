"""Copy the published results into docs/results.md's tables and README.md's headline table:
`python scripts/readme_results.py`.

docs/results.md holds every table between its `<!-- results:begin -->` and `<!-- results:end -->` markers; README.md
holds one, the largest budget's final accuracy at its deepest depth, between `<!-- headline:begin -->` and
`<!-- headline:end -->`; docs/results.md's `<!-- modern:begin -->` block holds the modern sweep's deepest table with
each layer's measured cost beside it, and its claims (`<!-- frontier:begin -->` the same for the 2025-2026 entries,
`<!-- muon:begin -->` for the rows trained under Muon),
and README.md's `<!-- modern-headline:begin -->` block a shorter cut of the modern table (a pointer to the sweep while
it trains, in each). All are cut from the
published folders' own files (each leaderboard.md, and the regimes comparison `normbench compare` writes), cell for
cell as those files print them: every number is rounded once, where the file rounded it from full precision, and the
rows keep the files' order (by the full-precision score, so rank 1 is the true maximum). Nothing is computed here.
`--check` exits 1 when either file differs from what the published files say (tests/test_readme_results.py runs it),
so neither can drift from a regenerated folder. The prose around the markers is written by hand from these tables.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from normbench.report.header import OPTIMIZER_NAMES

REPO = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
HEADLINE_BEGIN, HEADLINE_END = "<!-- headline:begin -->", "<!-- headline:end -->"
RESULTS_DOC = "docs/results.md"  # every table, relative to the checkout
README = "README.md"  # the headline table
# the published folders, the largest budget first: it is the answer a reader wants. Each is named by its own
# budget ("40 epochs"), never by what it was meant to reach: its regime line says how many rows converged.
REGIMES = ["depth-sweep-digits-converged", "depth-sweep-digits-early"]
COMPARISON = "depth-sweep-digits-regimes.md"
# today's recipes and the residual-stream families at depth 36: its own block in docs/results.md, accuracy beside cost
MODERN = "depth-sweep-digits-modern"
MODERN_BEGIN, MODERN_END = "<!-- modern:begin -->", "<!-- modern:end -->"
MODERN_KEPT = ["rank", "layer", "test top-1 (%)", "95% CI", "n", "lr (val-selected)", "lr window",
               "lr sensitivity (points)", "failed", "converged"]
MODERN_HEADLINE_BEGIN, MODERN_HEADLINE_END = "<!-- modern-headline:begin -->", "<!-- modern-headline:end -->"
# the 2025-2026 entries at depth 36 (issue 64): a block like the modern one, between its own markers
FRONTIER = "depth-sweep-digits-frontier"
FRONTIER_BEGIN, FRONTIER_END = "<!-- frontier:begin -->", "<!-- frontier:end -->"
MUON = "depth-sweep-digits-muon"
MUON_BEGIN, MUON_END = "<!-- muon:begin -->", "<!-- muon:end -->"
MODERN_HEADLINE_KEPT = ["rank", "layer", "test top-1 (%)", "95% CI", "lr (val-selected)", "lr window", "failed"]
# the leaderboard's final-accuracy columns the docs keep (the rest stay in the leaderboard)
KEPT = ["rank", "layer", "test top-1 (%)", "95% CI", "n", "lr (val-selected)", "edge", "converged", "failed"]
SENSITIVITY = "lr sensitivity (points)"


def regenerate(source: Path) -> str:
    """The command that rewrites a published file, for the messages that say it is missing or stale."""
    if source.name == COMPARISON:
        return (f"`normbench compare results/{REGIMES[1]} results/{REGIMES[0]} --out results/{COMPARISON}`, "
                "then `python scripts/readme_results.py`")
    return f"`normbench leaderboard results/{source.parent.name}`, then `python scripts/readme_results.py`"


def sections(markdown: str) -> dict[str, list[str]]:
    """{'## heading': its lines} for a leaderboard or comparison file; '' holds the lines before the first."""
    out: dict[str, list[str]] = {"": []}
    current = ""
    for line in markdown.splitlines():
        if line.startswith("## "):
            current = line
            out[current] = []
        else:
            out[current].append(line)
    return out


def read(source: Path) -> dict[str, list[str]]:
    """The sections of a published file, or a message naming the command that writes it."""
    if not source.is_file():
        raise SystemExit(f"readme_results: {source} not found; write it with `normbench leaderboard` (a run folder) "
                         "or `normbench compare` (the regimes file)")
    return sections(source.read_text())


def section(parts: dict[str, list[str]], prefix: str, source: Path) -> tuple[str, list[str]]:
    """The one section whose heading starts with `prefix` (its heading and lines)."""
    found = [(h, lines) for h, lines in parts.items() if h.startswith(prefix)]
    if len(found) != 1:
        raise SystemExit(f"readme_results: {source}: expected one section `{prefix}...`, found {len(found)}; "
                         "regenerate it with `normbench leaderboard` / `normbench compare`")
    return found[0]


def parse_table(lines: list[str]) -> tuple[list[str], list[list[str]]]:
    """The first pipe table in `lines`: (header, rows), cells stripped."""
    rows = [line for line in lines if line.startswith("|")]
    cells = [[c.strip() for c in row.strip().strip("|").split("|")] for row in rows]
    if not cells:
        return [], []
    return cells[0], cells[2:]


def column(header: list[str], name: str, source: Path | None) -> int:
    """The index of column `name`, or a message naming the column and the command that writes it."""
    if name in header:
        return header.index(name)
    where = f"{source}: " if source else ""
    how = regenerate(source) if source else "`normbench leaderboard` / `normbench compare`"
    raise SystemExit(f"readme_results: {where}a table lacks the column `{name}` (it has: {', '.join(header)}); "
                     f"regenerate it with {how}, or update KEPT in scripts/readme_results.py if the column was "
                     "renamed")


def render(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def header_item(parts: dict[str, list[str]], key: str, source: Path) -> str:
    """The text of a leaderboard header line `- key: text` (or `- key (how): text`, the how kept)."""
    for line in parts[""]:
        if line.startswith((f"- {key}: ", f"- {key} (")):
            return line[len(f"- {key}"):].lstrip(": ")
    raise SystemExit(f"readme_results: {source}: no `- {key}:` line in its header; regenerate it with "
                     f"{regenerate(source)}")


def accuracy_table(lines: list[str], source: Path | None = None) -> list[str]:
    header, rows = parse_table(lines)
    keep = [column(header, name, source) for name in KEPT]
    score = column(header, "test top-1 (%)", source)
    for row in rows:  # rows come sorted by the full-precision score: rank 1 holds the true maximum
        row[score] = f"**{row[score]}**" if row is rows[0] else row[score]
    return render(KEPT, [[row[i] for i in keep] for row in rows])


def regime_of(parts: dict[str, list[str]], source: Path) -> tuple[str, str, str]:
    """The leaderboard's `- regime:` line in its three clauses: the optimizer ('AdamW'), the budget ('40 epochs = ...
    per cell') and the rest ('n of m rows converged (how it is judged): verdict')."""
    regime = header_item(parts, "regime", source)
    train = dict(item.split("=", 1) for item in header_item(parts, "train", source).split(", ") if "=" in item)
    optimizer = OPTIMIZER_NAMES.get(train.get("optimizer", "").lower(), train.get("optimizer", ""))
    if not regime.startswith(f"{optimizer}, "):
        raise SystemExit(f"readme_results: {source}: its `- regime:` line does not begin with the optimizer "
                         f"({optimizer}); regenerate it with {regenerate(source)}")
    steps, _, rest = regime[len(optimizer) + 2:].partition("; ")
    return optimizer, steps, rest


def width(parts: dict[str, list[str]], source: Path) -> str:
    """The model's width as the leaderboard's `- model:` line gives it: 'width 64 (4 heads, patch 2)'."""
    model = dict(item.split("=", 1) for item in header_item(parts, "model", source).split(", ") if "=" in item)
    lacking = [k for k in ("embed_dim", "num_heads", "patch_size") if k not in model]
    if lacking:
        raise SystemExit(f"readme_results: {source}: its `- model:` line lacks {', '.join(lacking)}; regenerate it "
                         f"with {regenerate(source)}")
    return f"width {model['embed_dim']} ({model['num_heads']} heads, patch {model['patch_size']})"


def converged_here(lines: list[str], source: Path) -> str:
    """How many rows of one final-accuracy table its `converged` column calls converged: 'n of m rows here'."""
    header, rows = parse_table(lines)
    verdicts = [row[column(header, "converged", source)] for row in rows]
    return f"{sum(v.startswith('yes') for v in verdicts)} of {len(verdicts)} rows here"


def depths(parts: dict[str, list[str]]) -> list[str]:
    return [m.group(1) for h in parts if (m := re.match(r"## depth (\d+): final accuracy", h))]


def budget(parts: dict[str, list[str]], source: Path) -> str:
    """The folder's budget as its regime line opens: '40 epochs = 640 optimizer steps (...) per cell'."""
    return header_item(parts, "regime", source).split(";")[0]


def regime_block(root: Path, name: str) -> list[str]:
    source = root / "results" / name / "leaderboard.md"
    parts = read(source)
    rel = f"results/{name}"
    out = [f"### {budget(parts, source)}", "",
           f"`{rel}/` ({header_item(parts, 'suite', source).split(' — ', 1)[-1]}). Regime: {width(parts, source)}, "
           f"{regime_of(parts, source)[0]}; {regime_of(parts, source)[2]}. "
           f"Seeds: {header_item(parts, 'seeds', source)}.",
           ""]
    for depth in depths(parts):
        _, lines = section(parts, f"## depth {depth}: final accuracy", source)
        out += [f"Depth {depth}, final accuracy (test top-1 %, the report seeds' mean and 95% t interval):", "",
                *accuracy_table(lines, source), ""]
        heading, lines = section(parts, f"## depth {depth}: learning speed", source)
        header, rows = parse_table(lines)
        out += [f"Depth {depth}, learning speed ({heading.split('(', 1)[1].rstrip(')')}):", "",
                *render(header, rows), ""]
    return out


def sensitivity_block(root: Path) -> list[str]:
    """Each row's lr sensitivity, one column per regime and depth, in the converged deepest table's order."""
    columns: list[tuple[str, dict[str, str], str]] = []
    for name in REGIMES:
        source = root / "results" / name / "leaderboard.md"
        parts = read(source)
        title = budget(parts, source).split(" = ")[0]
        for depth in depths(parts):
            header, rows = parse_table(section(parts, f"## depth {depth}: final accuracy", source)[1])
            layer, value = column(header, "layer", source), column(header, SENSITIVITY, source)
            columns.append((f"{title}, depth {depth}", {row[layer]: row[value] for row in rows}, name))
    largest = [values for _, values, name in columns if name == REGIMES[0]][::-1]
    if not largest:
        source = root / "results" / REGIMES[0] / "leaderboard.md"
        raise SystemExit(f"readme_results: {source}: no `## depth N: final accuracy` section; regenerate it with "
                         f"{regenerate(source)}")
    order = sorted(largest[0], key=lambda layer: [float(values[layer]) for values in largest])
    return render(["layer", *(title for title, _, _ in columns)],
                  [[layer, *(values.get(layer, "—") for _, values, _ in columns)] for layer in order])


def comparison_block(root: Path) -> list[str]:
    source = root / "results" / COMPARISON
    parts = read(source)
    out: list[str] = []
    for prefix, title in (("## does the ranking hold across budgets?", "Does the ranking hold across budgets?"),
                          ("## against layernorm in each regime", "Against LayerNorm in each regime"),
                          ("## claims in each regime", "The claims in each regime")):
        heading, lines = section(parts, prefix, source)
        header, rows = parse_table(lines)
        out += [f"{title} ({heading[len(prefix):].strip(' ()')}):", "", *render(header, rows), ""]
    scores: list[str] = []
    for heading, lines in parts.items():
        if heading.startswith("## depth") and "final accuracy in each regime" in heading:
            header, rows = parse_table(lines)
            title = heading[3:].capitalize().replace(")", "; bold: the column's true maximum)")
            scores += [f"{title}:", "", *render(header, rows), ""]
    return scores + out


def ceiling_line(root: Path) -> str:
    source = root / "results" / REGIMES[0] / "leaderboard.md"
    return f"Data ceiling {header_item(read(source), 'data ceiling', source)}."


def block(root: Path) -> str:
    """docs/results.md's tables: both regimes, side by side, lr sensitivity, the data ceiling."""
    lines = [BEGIN, "", "## The tables", ""]
    for name in REGIMES:
        lines += regime_block(root, name)
    lines += ["### Both regimes side by side", "", f"`results/{COMPARISON}` (`normbench compare "
              f"results/{REGIMES[1]} results/{REGIMES[0]} --out results/{COMPARISON}`).", "",
              *comparison_block(root),
              "lr sensitivity (points lost, on average over the lrs every row tried, by not being at the row's best "
              "lr; lowest first at the largest budget's largest depth, ties by the next depth down):", "",
              *sensitivity_block(root), "", ceiling_line(root), "",
              END]
    return "\n".join(lines)


def headline(root: Path) -> str:
    """README.md's one table: the largest budget's final accuracy at its deepest depth, with its regime and seeds."""
    name = REGIMES[0]
    source = root / "results" / name / "leaderboard.md"
    parts = read(source)
    found = depths(parts)
    if not found:
        raise SystemExit(f"readme_results: {source}: no `## depth N: final accuracy` section; regenerate it with "
                         f"{regenerate(source)}")
    deepest = max(found, key=int)
    _, lines = section(parts, f"## depth {deepest}: final accuracy", source)
    # 'AdamW, 40 epochs = ... per cell; 12 of 12 rows converged (how it is judged): verdict' -> its first clauses
    optimizer, steps, rest = regime_of(parts, source)
    converged = rest.split(" (", 1)[0]
    seeds = header_item(parts, "seeds", source).split("; lrs tried", 1)[0]
    rel = f"results/{name}/leaderboard.md"
    return "\n".join([
        HEADLINE_BEGIN, "",
        f"Depth {deepest}, {width(parts, source)}, {optimizer}, final accuracy (test top-1 %, mean and 95% t "
        "interval) after "
        f"{steps}; {converged_here(lines, source)} converged ({converged.replace(' rows converged', '')} across "
        "depths). "
        f"Seeds: {seeds}: the selection seeds chose each row's lr on val, the report seeds give the score. "
        f"Copied from [`{rel}`]({rel}); the other depths, the early-training regime, learning speed, the paired "
        f"comparisons and how to read every column: [docs/results.md]({RESULTS_DOC}).", "",
        *accuracy_table(lines, source), "",
        HEADLINE_END])


def modern_table(parts: dict[str, list[str]], source: Path, kept: list[str],
                 ratios: tuple[str, ...] = ("step vs ", "memory vs ")) -> tuple[str, list[str], list[list[str]]]:
    """The modern folder's deepest final-accuracy table: (its depth, the `kept` columns, then each cost file's
    `ratios` columns by layer at that depth, and its rows, the top score in bold)."""
    deepest = max(depths(parts), key=int, default=None)
    if deepest is None:
        raise SystemExit(f"readme_results: {source}: no `## depth N: final accuracy` section; regenerate it with "
                         f"{regenerate(source)}")
    header, rows = parse_table(section(parts, f"## depth {deepest}: final accuracy", source)[1])
    keep = [column(header, name, source) for name in kept]
    score = column(header, "test top-1 (%)", source)
    table = [[f"**{row[i]}**" if i == score and row is rows[0] else row[i] for i in keep] for row in rows]
    names = list(kept)
    for heading, lines in parts.items():  # each cost file's step and memory ratios, by layer, at this depth
        if heading.startswith("## cost per train step"):
            cost_header, cost_rows = parse_table(lines)
            at = [r for r in cost_rows if r[column(cost_header, "depth", source)] == deepest]
            for ratio in (c for c in cost_header if c.startswith(ratios)):
                device = heading.split("(", 1)[1].split(",", 1)[0]
                by_layer = {r[cost_header.index("layer")]: r[cost_header.index(ratio)] for r in at}
                names.append(f"{ratio} ({device})")
                for row, out in zip(rows, table, strict=True):
                    out.append(by_layer.get(row[header.index("layer")], "—"))
    return deepest, names, table


def still_training(begin: str, end: str, name: str = MODERN) -> str:
    return "\n".join([
        begin, "",
        f"Still training: `results/in-progress/{name}` (`suites/{name}.yaml`; results/in-progress/README.md "
        "says how to resume it). Its tables appear here when it is published.", "", end])


def modern_block(root: Path) -> str:
    return folder_block(root, MODERN, MODERN_BEGIN, MODERN_END)


def frontier_block(root: Path) -> str:
    return folder_block(root, FRONTIER, FRONTIER_BEGIN, FRONTIER_END)


def muon_block(root: Path) -> str:
    return folder_block(root, MUON, MUON_BEGIN, MUON_END)


def folder_block(root: Path, name: str, begin: str, end: str) -> str:
    """A depth-36 folder's block in docs/results.md: the deepest table with each layer's measured cost beside it, and
    the claims; while the sweep is unpublished, where it trains."""
    source = root / "results" / name / "leaderboard.md"
    if not source.is_file():
        return still_training(begin, end, name)
    parts = read(source)
    deepest, names, table = modern_table(parts, source, MODERN_KEPT)
    claims_heading, claim_lines = section(parts, "## claims", source)
    claim_header, claim_rows = parse_table(claim_lines)
    return "\n".join([
        begin, "",
        f"`results/{name}/` ({header_item(parts, 'suite', source).split(' — ', 1)[-1]}). Regime: "
        f"{width(parts, source)}; {header_item(parts, 'regime', source)}. "
        f"Seeds: {header_item(parts, 'seeds', source)}.", "",
        f"Depth {deepest}, final accuracy (test top-1 %, the report seeds' mean and 95% t interval; bold: the true "
        "maximum) and cost per train step against layernorm (`normbench bench SUITE`):", "",
        *render(names, table), "",
        f"Claims ({claims_heading[len('## claims'):].strip(' ()')}):", "", *render(claim_header, claim_rows), "",
        end])


def modern_headline(root: Path) -> str:
    """README.md's modern table: which of today's recipes trains the deepest model best, at which lr, with how wide
    an lr window, how often it fails and what a train step costs; its claims and memory live in docs/results.md."""
    source = root / "results" / MODERN / "leaderboard.md"
    if not source.is_file():
        return still_training(MODERN_HEADLINE_BEGIN, MODERN_HEADLINE_END)
    parts = read(source)
    deepest, names, table = modern_table(parts, source, MODERN_HEADLINE_KEPT, ratios=("step vs ",))
    optimizer, steps, rest = regime_of(parts, source)
    rel = f"results/{MODERN}/leaderboard.md"
    return "\n".join([
        MODERN_HEADLINE_BEGIN, "",
        f"Depth {deepest}, {width(parts, source)}, {optimizer}, final accuracy (test top-1 %, the report seeds' "
        "mean and 95% t "
        f"interval; bold: the true maximum) after {steps}; {rest.split(' (', 1)[0]}; the cost of a train step against "
        "layernorm "
        f"(`normbench bench SUITE`). Copied from [`{rel}`]({rel}); the claims, memory and how to read each column: "
        f"[docs/results.md]({RESULTS_DOC}#todays-recipes-and-the-residual-stream-families-depth-36).", "",
        *render(names, table), "",
        MODERN_HEADLINE_END])


def updated(text: str, new_block: str, begin: str = BEGIN, end: str = END, name: str = RESULTS_DOC) -> str:
    """`text` with what lies between its `begin` and `end` markers (the markers included) replaced by `new_block`."""
    if begin not in text or end not in text:
        raise SystemExit(f"readme_results: {name} lacks the {begin} ... {end} markers")
    head, rest = text.split(begin, 1)
    return head + new_block + rest.split(end, 1)[1]


def targets(root: Path) -> list[tuple[Path, str, str, Callable[[Path], str]]]:
    """(file, begin marker, end marker, what writes its block) for each file the script keeps."""
    return [(root / RESULTS_DOC, BEGIN, END, block), (root / RESULTS_DOC, MODERN_BEGIN, MODERN_END, modern_block),
            (root / RESULTS_DOC, FRONTIER_BEGIN, FRONTIER_END, frontier_block),
            (root / RESULTS_DOC, MUON_BEGIN, MUON_END, muon_block),
            (root / README, HEADLINE_BEGIN, HEADLINE_END, headline),
            (root / README, MODERN_HEADLINE_BEGIN, MODERN_HEADLINE_END, modern_headline)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 if {README} or {RESULTS_DOC} differs from the published files")
    parser.add_argument("--root", type=Path, default=REPO, help="the checkout (default: this script's)")
    args = parser.parse_args(argv)
    files = targets(args.root)
    for path, begin, end, _ in files:  # every file and its markers first: a message before any results are read
        if not path.is_file():
            print(f"readme_results: {path} not found; pass --root the checkout that holds {README}, "
                  f"{RESULTS_DOC} and results/", file=sys.stderr)
            return 2
        updated(path.read_text(), "", begin, end, path.relative_to(args.root).as_posix())
    stale: list[str] = []
    for path, begin, end, write in files:
        text = path.read_text()
        new = updated(text, write(args.root), begin, end, path.relative_to(args.root).as_posix())
        if new == text:
            continue
        stale.append(path.relative_to(args.root).as_posix())
        if not args.check:
            path.write_text(new)
    if args.check and stale:
        print(f"readme_results: {' and '.join(dict.fromkeys(stale))}: the results tables differ from the published "
              "files; run `python scripts/readme_results.py`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
