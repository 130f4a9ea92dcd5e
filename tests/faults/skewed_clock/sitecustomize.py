"""Put on PYTHONPATH by tests/faults/test_clock_skew.py: this process's wall clock reads NORMBENCH_TEST_CLOCK_SKEW
seconds off, its monotonic clocks untouched, as on a host whose NTP is broken: `time.time` and `time.time_ns`, and
`datetime.now`/`utcnow`/`today` as Optuna's and normbench's modules see them (swapped in those modules as they are
imported: C extensions keep the real class). libfaketime cannot do this for Python 3.11 (it hangs timed waits, or
makes `time.sleep` fail with EINVAL): docs/faults.md, "A skewed clock"."""

import datetime
import importlib.abc
import os
import sys
import time
import types

_SKEW = float(os.environ.get("NORMBENCH_TEST_CLOCK_SKEW") or 0)
_PACKAGES = ("optuna.", "normbench.")


class _SkewedDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return datetime.datetime.now(tz) + datetime.timedelta(seconds=_SKEW)

    @classmethod
    def utcnow(cls):
        return datetime.datetime.utcnow() + datetime.timedelta(seconds=_SKEW)

    @classmethod
    def today(cls):
        return cls.now()


_MODULE = types.SimpleNamespace(**{**vars(datetime), "datetime": _SkewedDatetime})


def _skew(module: types.ModuleType) -> None:
    found = module.__dict__.get("datetime")
    if found is datetime.datetime:
        module.datetime = _SkewedDatetime
    elif found is datetime:
        module.datetime = _MODULE


class _SkewOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if not name.startswith(_PACKAGES):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is not None and hasattr(loader, "exec_module"):
            run = loader.exec_module

            def exec_module(module, run=run):
                run(module)
                _skew(module)

            loader.exec_module = exec_module
        return spec


if _SKEW:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _SKEW
    time.time_ns = lambda: _time_ns() + int(_SKEW * 1e9)
    sys.meta_path.insert(0, _SkewOnImport())
