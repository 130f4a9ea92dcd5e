"""The README stays a front page a newcomer can read (at most 15,000 bytes), every relative link in README.md,
ARCHITECTURE.md and docs/*.md reaches a file (and a heading, where it names one), every page in docs/ is linked from
the README, and every `normbench <verb>` in the README's command list is a real subcommand."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from normbench.cli import build_parser
from tests.conftest import REPO

README_LIMIT = 15_000  # bytes: the results, runbooks and reference live in docs/
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def pages(root: Path = REPO) -> list[Path]:
    return [root / "README.md", root / "ARCHITECTURE.md", *sorted((root / "docs").glob("*.md"))]


def links(markdown: str) -> list[str]:
    """Every link and image target outside code (fenced blocks and inline spans are not links)."""
    text = INLINE_CODE.sub("", FENCE.sub("", markdown))
    return LINK.findall(text)


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", FENCE.sub("", markdown), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def dead_links(page: Path) -> list[str]:
    """The relative links of `page` whose file (or, in a markdown file, heading) does not exist."""
    dead = []
    for target in links(page.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            dead.append(f"{page.name}: {target} (no {resolved})")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved.read_text()):
            dead.append(f"{page.name}: {target} (no heading #{fragment} in {resolved.name})")
    return dead


def linked_docs(readme: Path) -> set[Path]:
    return {(readme.parent / t.partition("#")[0]).resolve() for t in links(readme.read_text()) if ":" not in t}


def command_list(readme_text: str) -> list[str]:
    """The verbs of the README's command list: the first bash block under '## Commands', `normbench VERB ...`."""
    section = readme_text.split("\n## Commands", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split()[1] for line in block.splitlines() if line.startswith("normbench ")]


def subcommands() -> set[str]:
    parser = build_parser()
    return {name for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name in action.choices}


def test_the_readme_is_a_front_page():
    size = len((REPO / "README.md").read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes (at most {README_LIMIT}): move detail into docs/"


def test_every_relative_link_reaches_a_file():
    dead = [d for page in pages() for d in dead_links(page)]
    assert not dead, "dead links:\n" + "\n".join(dead)


def test_every_docs_page_is_linked_from_the_readme():
    linked = linked_docs(REPO / "README.md")
    unlinked = [p.name for p in sorted((REPO / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not unlinked, f"docs/ pages the README does not link: {unlinked}"


def test_every_command_in_the_readme_list_is_a_subcommand():
    verbs = command_list((REPO / "README.md").read_text())
    assert len(verbs) >= 8, verbs  # the list was found and parsed
    unknown = sorted(set(verbs) - subcommands())
    assert not unknown, f"README's command list names {unknown}, which `normbench --help` lacks"


# the checks themselves: each catches what it is for (a check that cannot fail proves nothing)

def test_a_dead_link_or_heading_is_caught_and_code_is_not_a_link(tmp_path):
    (tmp_path / "there.md").write_text("# A page\n\n## Starting workers\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md) [ok](there.md#starting-workers) [web](https://example.org/x) [self](#a-page)\n"
                    "# A page\n[gone](missing.md) ![gone](img/none.png) [bad](there.md#no-such-heading)\n"
                    "`[code](not-a-link.md)`\n```\n[block](not-a-link-either.md)\n```\n")
    dead = dead_links(page)
    assert [d.split(" ")[1] for d in dead] == ["missing.md", "img/none.png", "there.md#no-such-heading"], dead


def test_an_unlinked_page_and_an_unknown_verb_are_caught(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# a\n")
    (tmp_path / "README.md").write_text("[a](docs/a.md)\n\n## Commands\n\n```bash\nnormbench run X  # run\n"
                                        "normbench frobnicate  # no such verb\noptuna-dashboard x\n```\n\n## Next\n")
    assert (tmp_path / "docs" / "a.md").resolve() in linked_docs(tmp_path / "README.md")
    assert (tmp_path / "docs" / "b.md").resolve() not in linked_docs(tmp_path / "README.md")
    verbs = command_list((tmp_path / "README.md").read_text())
    assert verbs == ["run", "frobnicate"] and set(verbs) - subcommands() == {"frobnicate"}


def test_the_readmes_suite_is_a_valid_suite_with_the_smoke_suites_cells(tmp_path):
    from normbench.contracts.suite import load_suite

    [block] = re.findall(r"```yaml\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    (tmp_path / "suite.yaml").write_text(block)
    shown, smoke = load_suite(tmp_path / "suite.yaml"), load_suite(REPO / "suites" / "smoke.yaml")
    assert len(block.strip().splitlines()) <= 12  # a glance, before the command list
    assert [c.cell_id for c in shown.cells()] == [c.cell_id for c in smoke.cells()]
