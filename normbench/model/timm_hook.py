"""Register `normbench_vit` with timm without importing torch when normbench is imported.

`timm.create_model("normbench_vit", ...)` must work after `import normbench`, but importing timm (and torch)
there would cost ~2 s on every `normbench --help`. So: if timm is already imported, register now; otherwise wait
on the import system and register right after timm finishes importing.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from types import ModuleType


def _register() -> None:
    # A thin entrypoint that imports normbench.model.vit only when called: the hook may fire while normbench.layers
    # is itself importing timm, and importing the model from here would then be circular.
    import normbench.model.timm_entry  # noqa: F401  (its @register_model decorator does the work)


class _AfterTimmImport(importlib.abc.MetaPathFinder):
    """A one-shot finder: lets the normal finders locate timm, then runs `_register` after timm's module body."""

    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname != "timm":
            return None
        index = sys.meta_path.index(self)
        sys.meta_path.remove(self)  # so that find_spec below asks the normal finders
        try:
            spec = importlib.util.find_spec(fullname)
        finally:  # stay until timm's body really runs: a bare `find_spec("timm")` probe must not disarm us
            sys.meta_path.insert(index, self)
        if spec is None or spec.loader is None:
            return spec
        exec_timm = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            exec_timm(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            _register()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    if "timm" in sys.modules:
        _register()
    elif not any(isinstance(f, _AfterTimmImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterTimmImport())
