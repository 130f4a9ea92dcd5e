"""How layers from outside normbench reach every process: plugins, and layers registered in Python.

A plugin is a module that calls `register_layer` when imported (or a function that does, when called). Every
normbench process loads them once, before its first layer lookup, from
- the entry-point group `normbench.layers` of installed packages (`pip install -e examples/plugin`), then
- `NORMBENCH_LAYER_MODULES`, comma-separated module names importable from sys.path (PYTHONPATH), no install needed.
A plugin that fails to load is skipped with one warning line naming it and its error, and the command goes on.

A layer registered by a script exists in that process only. `--workers` processes know it by importing the module
that registered it (sweep/launch.py passes `worker_modules` in NORMBENCH_LAYER_MODULES and their folders in
PYTHONPATH); a layer registered in `__main__` cannot be imported elsewhere and is refused before any worker starts.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from normbench.errors import NormbenchError
from normbench.layers import registry

ENTRY_POINT_GROUP = "normbench.layers"
MODULES_ENV = "NORMBENCH_LAYER_MODULES"
WARNED_ENV = "NORMBENCH_PLUGINS_WARNED"  # plugins whose failure the parent of local workers already printed

_loaded = False
_failed: dict[str, str] = {}  # plugin -> its error: the unknown-layer message names it


def load() -> None:
    """Load every plugin once per process: entry points, then NORMBENCH_LAYER_MODULES."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    registry._loading_plugins = True  # what registers now, every process loads by itself: no origin to hand on
    try:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            _load_one(f"`{ep.name}` ({ep.value})", ep.load)
        for module in env_modules():
            _load_one(f"`{module}` ({MODULES_ENV})", lambda m=module: importlib.import_module(m))
    finally:
        registry._loading_plugins = False


def env_modules(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The module names in NORMBENCH_LAYER_MODULES."""
    return [m.strip() for m in environ.get(MODULES_ENV, "").split(",") if m.strip()]


def _load_one(label: str, load_target: Callable[[], Any]) -> None:
    try:
        target = load_target()
        if callable(target) and not isinstance(target, type):  # `name = "pkg:register"`: a function to call
            target()
    except Exception as e:  # a broken plugin must not take every command down with it
        error = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        _failed[label] = error
        if label not in os.environ.get(WARNED_ENV, "").split("|"):
            print(f"normbench: warning: plugin {label} failed to load and is skipped: {error}", file=sys.stderr)


def failed_note() -> str:
    """'; plugin `x` (...) failed to load: ...' for an unknown-layer message, or ''."""
    return "".join(f"; plugin {label} failed to load: {error}" for label, error in _failed.items())


def worker_modules(layers: Iterable[str]) -> list[str]:
    """The modules another process must import to know `layers` (names or `+` combinations, partners included) as
    this one does: those that registered them from Python outside normbench and its plugins. Raises NormbenchError
    (exit 2) for a layer no other process can import (registered in `__main__`: a script, a notebook)."""
    from normbench.layers.compose import resolve_layer

    modules: dict[str, None] = {}
    for layer in layers:
        for spec in resolve_layer(layer).specs:
            origin = spec.origin
            if origin is None:
                continue
            if not _importable(origin):
                where = "the script or notebook that runs (`__main__`)" if origin == "__main__" else f"`{origin}`"
                raise NormbenchError(
                    f"layer `{spec.name}` is registered in {where}, which a --workers process cannot import, so it "
                    f"would not know the layer; move `{spec.cls.__qualname__}` and its @register_layer into a module "
                    "(e.g. my_layers.py beside the script) and import it from there, or run with workers=1. Nothing "
                    "was started.")
            modules[origin] = None
    return list(modules)


def worker_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """What to add to a worker process's environment `environ` so it knows this process's layers: the importable
    modules that registered layers from Python (NORMBENCH_LAYER_MODULES) and their folders (PYTHONPATH), and the
    plugins whose failure this process has already warned about, so the worker does not repeat it."""
    added: dict[str, str] = {}
    origins = (s.origin for s in registry._REGISTRY.values() if s.origin is not None)
    modules = [m for m in dict.fromkeys(origins) if _importable(m)]
    if modules:
        added[MODULES_ENV] = ",".join(dict.fromkeys([*env_modules(environ), *modules]))
        roots = [str(root) for m in modules if (root := import_root(m)) is not None]
        paths = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        added["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*roots, *paths]))
    if _failed:
        added[WARNED_ENV] = "|".join(_failed)
    return added


registry.on_lookup(load, failed_note)


def import_root(module: str) -> Path | None:
    """The sys.path folder `module` was imported from (for a worker's PYTHONPATH), or None when it has no file."""
    file = getattr(sys.modules.get(module), "__file__", None)
    if file is None:
        return None
    up = module.count(".") + (1 if Path(file).stem == "__init__" else 0)
    return Path(file).resolve().parents[up]


def _importable(module: str) -> bool:
    return module != "__main__" and getattr(sys.modules.get(module), "__spec__", None) is not None
