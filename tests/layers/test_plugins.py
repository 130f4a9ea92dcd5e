"""Layers from outside normbench: plugins (entry points, NORMBENCH_LAYER_MODULES) load in every process, one that
fails is skipped with one warning line, and a layer registered from Python is handed to worker processes or refused
before any starts."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest
from torch import nn

import normbench
from normbench.errors import NormbenchError, UnknownLayerError
from normbench.layers import plugins, registry
from tests.conftest import REPO

TOY_MODULE = '''
from torch import nn

import normbench


@normbench.register_layer("{name}", kind="norm", formula="toy", source="tests/layers/test_plugins.py")
class ToyNorm(nn.LayerNorm):
    def __init__(self, dim, eps=1e-6, device=None, dtype=None):
        super().__init__(dim, eps=eps, device=device, dtype=dtype)
'''


@pytest.fixture
def fresh_plugins(monkeypatch):
    """The registry and the plugin state as they are, restored afterwards; plugins load again on the next lookup."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(plugins, "_failed", {})
    monkeypatch.setattr(plugins, "_loaded", False)
    monkeypatch.delenv(plugins.MODULES_ENV, raising=False)
    monkeypatch.delenv(plugins.WARNED_ENV, raising=False)
    monkeypatch.setattr(plugins, "entry_points", lambda *, group: [])


@pytest.fixture
def module_folder(tmp_path, monkeypatch):
    """A folder on sys.path to write modules into; they leave sys.modules afterwards."""
    folder = tmp_path / "modules"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    before = set(sys.modules)
    yield folder
    for name in set(sys.modules) - before:
        sys.modules.pop(name, None)


class _EntryPoint:
    def __init__(self, name: str, value: str, load) -> None:
        self.name, self.value, self.load = name, value, load


def _broken() -> None:
    raise ModuleNotFoundError("No module named 'scipy_that_is_not_here'")


# --- a plugin that fails is skipped with one line; the command goes on ---------------------------------------------


def test_a_failing_entry_point_is_skipped_with_one_warning_and_the_rest_load(fresh_plugins, monkeypatch, capsys):
    def register() -> None:
        normbench.register_layer("toy_ok_norm", kind="norm", formula="f", source="s")(nn.LayerNorm)

    found = [_EntryPoint("broken", "broken_pkg.layers", _broken), _EntryPoint("ok", "ok:register", lambda: register)]
    monkeypatch.setattr(plugins, "entry_points", lambda *, group: found)
    assert "toy_ok_norm" in normbench.list_layers()  # the good plugin after the broken one still loads
    err = capsys.readouterr().err.splitlines()
    assert err == ["normbench: warning: plugin `broken` (broken_pkg.layers) failed to load and is skipped: "
                   "ModuleNotFoundError: No module named 'scipy_that_is_not_here'"]
    normbench.list_layers()
    assert capsys.readouterr().err == "", "plugins load once per process"
    with pytest.raises(UnknownLayerError, match=r"plugin `broken` \(broken_pkg.layers\) failed to load: "
                                                r"ModuleNotFoundError"):
        normbench.get_layer("broken_norm")  # the unknown-layer message says why the layer may be missing


def test_a_broken_plugin_does_not_take_normbench_layers_down(tmp_path):
    """The issue's case, end to end: an installed plugin whose import raises. Before, every command crashed."""
    info = tmp_path / "broken_plugin-0.1.dist-info"
    info.mkdir()
    (tmp_path / "broken_plugin.py").write_text("import not_installed_dependency\n")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[normbench.layers]\nbroken = broken_plugin\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    env.pop(plugins.MODULES_ENV, None)
    proc = subprocess.run([sys.executable, "-m", "normbench", "layers", "layer*"], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == ["normbench: warning: plugin `broken` (broken_plugin) failed to load and is "
                                        "skipped: ModuleNotFoundError: No module named 'not_installed_dependency'"]
    assert [line.split()[0] for line in proc.stdout.splitlines()[2:] if not line.startswith(" ")] == \
        ["layernorm", "layerscale"]


# --- NORMBENCH_LAYER_MODULES: a plugin without installing anything -------------------------------------------------


def test_modules_named_in_the_environment_register_their_layers(fresh_plugins, module_folder, monkeypatch, capsys):
    (module_folder / "env_layers.py").write_text(TOY_MODULE.format(name="toy_env_norm"))
    monkeypatch.setenv(plugins.MODULES_ENV, "env_layers, missing_layers_module")
    assert normbench.get_layer("toy_env_norm").__module__ == "env_layers"
    assert capsys.readouterr().err.splitlines() == [
        "normbench: warning: plugin `missing_layers_module` (NORMBENCH_LAYER_MODULES) failed to load and is skipped: "
        "ModuleNotFoundError: No module named 'missing_layers_module'"]
    assert normbench.layers.get_spec("toy_env_norm").origin is None, "every process loads a plugin: nothing to hand on"


def test_a_failure_the_parent_already_reported_is_not_repeated_by_its_workers(fresh_plugins, monkeypatch, capsys):
    monkeypatch.setattr(plugins, "entry_points", lambda *, group: [_EntryPoint("broken", "broken_pkg", _broken)])
    normbench.list_layers()
    assert capsys.readouterr().err.count("warning") == 1
    env = plugins.worker_environ({})
    assert env[plugins.WARNED_ENV] == "`broken` (broken_pkg)"
    monkeypatch.setattr(plugins, "_loaded", False)
    monkeypatch.setenv(plugins.WARNED_ENV, env[plugins.WARNED_ENV])  # what a local worker inherits
    normbench.list_layers()
    assert capsys.readouterr().err == ""


# --- layers registered from Python reach worker processes, or are refused -------------------------------------------


def test_a_layer_registered_by_an_importable_module_is_handed_to_workers(fresh_plugins, module_folder):
    (module_folder / "my_layers.py").write_text(TOY_MODULE.format(name="toy_module_norm"))
    import my_layers  # noqa: F401  (registers on import, as a user's script does)

    assert normbench.layers.get_spec("toy_module_norm").origin == "my_layers"
    assert plugins.worker_modules(["toy_module_norm+layerscale", "layernorm"]) == ["my_layers"]
    env = plugins.worker_environ({"PYTHONPATH": "/elsewhere", plugins.MODULES_ENV: "other_plugin"})
    assert env[plugins.MODULES_ENV] == "other_plugin,my_layers"
    assert env["PYTHONPATH"].split(os.pathsep) == [str(module_folder.resolve()), "/elsewhere"]


def test_a_worker_with_the_handed_on_environment_knows_the_layer(fresh_plugins, module_folder):
    """What a `--workers` child does first: load the suite's layers. Before, it exited 2 on "unknown layer"."""
    (module_folder / "my_layers.py").write_text(TOY_MODULE.format(name="toy_child_norm"))
    import my_layers  # noqa: F401

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(plugins.MODULES_ENV, None)
    env.update(plugins.worker_environ(env))
    proc = subprocess.run([sys.executable, "-m", "normbench", "layers", "toy_child*"], env=env, capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[2].split()[:2] == ["toy_child_norm", "norm"]


def test_a_layer_registered_in_main_is_refused_with_the_fix(fresh_plugins):
    @normbench.register_layer("toy_main_norm", kind="norm", formula="f", source="s")
    class MainNorm(nn.LayerNorm):  # defined in a function: importing no module registers it again
        pass

    with pytest.raises(NormbenchError) as refused:  # its nearest module body is pytest's entry script, `__main__`
        plugins.worker_modules(["layerscale", "toy_main_norm"])
    message = str(refused.value)
    assert "layer `toy_main_norm` is registered in " in message and "a --workers process cannot import" in message
    assert "move `" in message and "MainNorm` and its @register_layer into a module" in message
    assert "workers=1" in message and "\n" not in message
    assert plugins.worker_modules(["layerscale"]) == [], "built-in layers need nothing handed on"


def test_a_plugin_registered_function_is_not_mistaken_for_a_script_layer(fresh_plugins, monkeypatch):
    def register() -> None:  # `name = "pkg:register"`: called while plugins load, in every process alike
        normbench.register_layer("toy_fn_norm", kind="norm", formula="f", source="s")(nn.LayerNorm)

    monkeypatch.setattr(plugins, "entry_points", lambda *, group: [_EntryPoint("fn", "pkg:register", lambda: register)])
    assert plugins.worker_modules(["toy_fn_norm"]) == []
    assert plugins.worker_environ({}) == {}


def test_import_root_is_the_sys_path_folder_of_a_module_or_package(module_folder):
    package = module_folder / "pkg" / "sub"
    package.mkdir(parents=True)
    (module_folder / "pkg" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "leaf.py").write_text("")
    import pkg.sub.leaf  # noqa: F401

    root = module_folder.resolve()
    assert plugins.import_root("pkg.sub.leaf") == plugins.import_root("pkg.sub") == plugins.import_root("pkg") == root
    assert plugins.import_root("not_imported_anywhere") is None
    assert plugins.import_root(types.__name__) is not None  # a stdlib module: its own folder
