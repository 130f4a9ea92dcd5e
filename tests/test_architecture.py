"""ARCHITECTURE.md is true to the code: every module and class it names exists, and every module of the package is
named there (a new file without its line in the map fails here)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "normbench"
TEXT = (ROOT / "ARCHITECTURE.md").read_text()
NAMED = set(re.findall(r"`([^`\s]+)`", TEXT))


def _modules() -> set[str]:
    """Every module as `folder/file.py` (or `file.py` at the top), without `__init__`/`__main__`."""
    return {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
            if not p.name.startswith("__") and "__pycache__" not in p.parts}


def _mentioned_modules() -> set[str]:
    """The modules the map names: `folder/file.py`, or a bare `file.py` in the row of its folder's table."""
    found = {name for name in NAMED if name.endswith(".py") and "<" not in name}
    for row in re.findall(r"^\| `(\w+)/` \|(.*)$", TEXT, re.MULTILINE):
        folder, cells = row
        found |= {f"{folder}/{name}" for name in re.findall(r"`(\w+\.py)`", cells)}
    return found


def test_every_module_the_map_names_exists():
    modules = _modules()
    missing = sorted(name for name in _mentioned_modules()
                     if name not in modules and not any(m.endswith("/" + name) for m in modules))
    assert not missing, f"ARCHITECTURE.md names modules that do not exist: {missing}"


def test_every_module_is_on_the_map():
    mentioned = _mentioned_modules()
    absent = sorted(m for m in _modules() if m not in mentioned)
    assert not absent, f"modules missing from ARCHITECTURE.md (give each its few words): {absent}"


def test_every_class_the_map_names_exists():
    classes = {node.name for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts
               for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)}
    named = {name for name in NAMED if re.fullmatch(r"[A-Z][a-z]+(?:[A-Z][a-z]+)+", name)}
    assert named, "the map names no class: the pattern above no longer reads it"
    assert not sorted(named - classes), f"ARCHITECTURE.md names classes that do not exist: {sorted(named - classes)}"


SHARED = {"errors", "settings", "stopping", "normbench", "__main__"}  # what any folder may import: not a "reads"


def _folder_of(module: str) -> str:
    """`normbench.store.ledger` -> `store`; a top-level module (`normbench.cli`) -> `cli`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_what_each_folder_reads_is_what_its_modules_import():
    from tests.test_imports import import_graph

    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    imported: dict[str, set[str]] = {f: set() for f in folders}
    for module, deps in import_graph().items():
        if _folder_of(module) in folders:
            imported[_folder_of(module)] |= {_folder_of(d) for d in deps} - SHARED - {_folder_of(module)}
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in TEXT.splitlines()
             if re.match(r"^\| `\w+/` \|", line)]
    rows = {row[0].strip("`/"): row[-2] for row in cells}  # the folder -> its "reads" column
    assert set(rows) == folders, "every folder of the package has its row in ARCHITECTURE.md's table"
    for folder, reads in rows.items():
        declared = set(re.findall(r"\b(" + "|".join(sorted(folders)) + r")\b", reads))
        assert imported[folder] == declared, (
            f"ARCHITECTURE.md says `{folder}/` reads {sorted(declared)}; its modules import {sorted(imported[folder])}")


def test_the_tests_sit_in_the_folders_the_map_promises():
    tests = ROOT / "tests"
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    holding = {p.parent.name for p in tests.rglob("test_*.py") if p.parent != tests}
    assert holding <= folders | {"faults", "examples"}, sorted(holding - folders)
    # the ledger's two jobs, each with its own tests
    assert (tests / "store" / "test_ledger.py").exists() and (tests / "store" / "test_attempts.py").exists()
