"""The import graph: no module of normbench imports one that imports it back (lazy imports inside functions count:
they run too), and `import normbench` stays free of torch (the CLI's --help must be instant)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "normbench"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The normbench modules `path` imports anywhere in its body, resolved to files (`from a import b` is a.b when
    b is a module, else a)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in modules else node.module)
    return {name for name in found if name in modules}


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imports_of(path, set(files)) - {name} for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(start: str) -> None:
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_planted_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_lazy_and_package_relative_imports():
    graph = import_graph()
    assert "normbench.stopping" in graph["normbench.cli"]  # `from normbench import stopping`
    assert "normbench.layers.plugins" in graph["normbench.layers"]  # `from normbench.layers import plugins`
    assert "normbench.layers.compose" in graph["normbench.layers.plugins"]  # imported inside a function


def test_no_module_of_normbench_imports_one_that_imports_it_back():
    assert cycles(import_graph()) == []


def test_import_normbench_loads_no_torch():
    code = "import sys, normbench, normbench.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_importing_every_module_writes_no_environment_variable():
    modules = sorted(".".join(p.relative_to(REPO).with_suffix("").parts) for p in (REPO / "normbench").rglob("*.py")
                     if "__pycache__" not in p.parts and p.name != "__main__.py" and p.stem != "ui_app")
    # the libraries first: what they set on import (torch: TORCHINDUCTOR_CACHE_DIR) is theirs, not normbench's
    code = ("import importlib, os, sys, torch, torch._inductor.config, timm, optuna, pandas, matplotlib\n"
            "before = dict(os.environ)\n"
            f"for m in {modules!r}: importlib.import_module(m.removesuffix('.__init__'))\n"
            "print(sorted(k for k in set(os.environ) | set(before) if os.environ.get(k) != before.get(k)))")
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("MLFLOW_")}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip().splitlines()[-1] == "[]"
