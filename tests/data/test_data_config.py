from __future__ import annotations

import dataclasses
from pathlib import Path

from normbench.data import DataConfig


def test_every_key_has_a_default() -> None:
    for field in dataclasses.fields(DataConfig):
        assert field.default is not dataclasses.MISSING, field.name
    assert DataConfig().name == "digits"


def test_root_path_expands_home() -> None:
    assert DataConfig().root_path() is None
    assert DataConfig(root="~/data").root_path() == Path.home() / "data"
