"""Every entry of conftest's SERIAL list names a test file, and a test in it, that exists: a renamed file or test
would otherwise drop out of the serial part silently and race its neighbours on two xdist workers."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import SERIAL

ROOT = Path(__file__).resolve().parents[1]


def test_every_serial_entry_names_an_existing_file_and_test():
    for entry in SERIAL:
        path, _, name = entry.partition("::")
        file = ROOT / path
        assert file.is_file(), f"SERIAL entry {entry!r}: no file {path}"
        if name:
            assert re.search(rf"^def {re.escape(name)}", file.read_text(), re.MULTILINE), \
                f"SERIAL entry {entry!r}: no test starting {name!r} in {path}"
