"""An output folder's suite.yaml that is not UTF-8 (an editor saved it as UTF-16), not YAML or not a mapping is the
same one line, exit 2, wherever a command reads it: `sync`, `leaderboard`, `ui` and a `run` that resumes the folder.
Every read goes through the one suite reader (contracts/suite_file.py); nothing in the folder is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from normbench.cli import main
from tests.faults.helpers import free_port
from tests.tracking.ledgers import write_ledger

TEXT = "name: tiny\ndataset: {name: digits}\nmatrix: {layer: [layernorm]}\n"


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("content, said", [
    (TEXT.encode("utf-16"), "line 1: not UTF-8 text (byte 0xff at offset 0) (it looks like UTF-16); save the suite "
                            "file as UTF-8"),
    (b"name: tiny\nmatrix: [depth: 1\n", "not valid YAML: while parsing a flow sequence"),
    (b"- name\n- tiny\n", "a suite is a mapping of keys (name, description, dataset"),
])
def test_a_saved_suite_that_cannot_be_read_is_the_same_line_for_every_command(tmp_path, capsys, write_suite,
                                                                              content, said):
    out = tmp_path / "out"
    write_ledger(out)  # finished cells of TINY's suite, no MLflow store yet
    (out / "suite.yaml").write_bytes(content)
    before = _files(out)
    commands = {"sync": ["sync", out, "--tracking-uri", f"sqlite:///{tmp_path / 'elsewhere.db'}"],
                "sync into the folder": ["sync", out],
                "leaderboard": ["leaderboard", out],
                "ui": ["ui", out, "--no-browser", "--port", free_port()],
                "run": ["run", write_suite(), "--out", out, "--quiet"]}
    said_by = {}
    for name, args in commands.items():
        code = main([str(a) for a in args])
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err, (name, err)
        said_by[name] = err
    assert len(set(said_by.values())) == 1, said_by  # one reader, one line
    line = next(iter(said_by.values()))
    assert line.startswith(f"normbench: error: {out / 'suite.yaml'}: ") and said in line and line.count("\n") == 1
    assert _files(out) == before and not (tmp_path / "elsewhere.db").exists()
