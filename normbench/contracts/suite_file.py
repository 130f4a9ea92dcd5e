"""A suite file as YAML: read with `SuiteLoader` (a key given twice is an error, `3e-3` is a float), the suite's
top-level keys and sections, and `--set KEY=VALUE` overrides applied as if the file said them.
normbench/contracts/suite.py validates what this returns.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from normbench.contracts.narrowing import drop_left_out
from normbench.contracts.recipe import ModelConfig, TrainConfig
from normbench.data.config import DataConfig
from normbench.errors import SuiteError, did_you_mean

TOP_LEVEL = ("name", "description", "dataset", "model", "train", "matrix", "tune", "device", "bracket",
             "bracket_max_steps", "lr_bounds", "lr_by_layer", "baseline", "claims", "reference", "adopt_from",
             "report_seeds", "targets", "budget_check", "sequential", "interactions")
SECTIONS: dict[str, type] = {"dataset": DataConfig, "model": ModelConfig, "train": TrainConfig}
AXIS_SECTIONS = {"model": ModelConfig, "train": TrainConfig}


# YAML 1.1 (PyYAML) reads `3e-3` and `1.5e3` as strings: it wants a dot and a signed exponent. A researcher writes
# lr: [3e-3], so any number with an exponent is a float here (as in YAML 1.2).
_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
_MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(yaml.YAMLError):
    """A mapping names one key twice; PyYAML alone would keep the last value silently."""

    def __init__(self, key: str, first_line: int, line: int) -> None:
        super().__init__(f"`{key}` given twice (lines {first_line} and {line})")
        self.key, self.first_line, self.line = key, first_line, line


class SuiteLoader(yaml.SafeLoader):
    """safe_load's loader, plus: a key given twice in a mapping is refused, and `1e-3` is a float."""

    def compose_mapping_node(self, anchor: Any) -> yaml.MappingNode:
        # checked on the composed node, before merge keys (`<<`) are flattened into it: a merged key is no repeat
        node = super().compose_mapping_node(anchor)
        first_line: dict[tuple[str, str], int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
                continue
            key, line = (key_node.tag, key_node.value), key_node.start_mark.line + 1
            if key in first_line:
                raise DuplicateKeyError(key_node.value, first_line[key], line)
            first_line[key] = line
        return node


class SuiteDumper(yaml.SafeDumper):
    """Writes what SuiteLoader reads back: a string such as '1e3' is quoted, or it would come back a float."""


for _cls in (SuiteLoader, SuiteDumper):
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+.0123456789"))


def user_file_bytes(path: Path, what: str, missing: str) -> bytes:
    """The bytes of a file the user named (`what`: "suite file", "weights file"), or one line (SuiteError, exit 2)
    saying why not: missing (`missing` says where such files are), a folder, or unreadable."""
    if path.is_dir():
        raise SuiteError(f"{path}: a folder, not a {what}; name the file inside it")
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise SuiteError(f"{path}: {what} not found; {missing}") from None
    except OSError as e:
        raise SuiteError(f"{path}: cannot read this {what} ({e.strerror or e}); check its permissions and "
                         "the disk it is on") from None


def user_text(path: Path, what: str, missing: str) -> str:
    """A user's text file (`user_file_bytes`) decoded as UTF-8, or one line naming the first byte that is not."""
    data = user_file_bytes(path, what, missing)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        utf16 = " (it looks like UTF-16)" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        line = data[:e.start].count(b"\n") + 1
        raise SuiteError(f"{path}: line {line}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"
                         f"{utf16}; save the {what} as UTF-8") from None


def read_suite_file(path: Path) -> Any:
    """The file's YAML, read with SuiteLoader."""
    text = user_text(path, "suite file", "the suites/ folder holds examples (suites/smoke.yaml)")
    try:
        return yaml.load(text, Loader=SuiteLoader)
    except DuplicateKeyError as e:
        raise SuiteError(f"{path}: line {e.line}: `{e.key}` is given twice (first on line {e.first_line}); YAML "
                         "would silently keep the last value: delete one") from None
    except yaml.YAMLError as e:  # PyYAML's message spans lines: one line, as every refusal
        raise SuiteError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None


def read_suite_mapping(path: Path) -> dict[str, Any]:
    """`read_suite_file`, refused (SuiteError) unless it is a mapping of keys, as `load_suite` refuses it."""
    return as_suite_mapping(read_suite_file(path), str(path))


def as_suite_mapping(raw: Any, where: str) -> dict[str, Any]:
    """`raw` if a suite's YAML could hold it (a mapping), else the one line that says what it holds instead."""
    if not isinstance(raw, dict):
        raise SuiteError(f"{where}: a suite is a mapping of keys ({', '.join(TOP_LEVEL)}), got {type(raw).__name__}")
    return raw


def apply_overrides(raw: Any, overrides: Sequence[str], path: Path, notes: list[str] | None = None) -> Any:
    """`raw` (not changed) with each `KEY=VALUE` set: KEY is a top-level key or `section.key` (`train.epochs`,
    `dataset.root`, `matrix.lr`, `tune.trials`), VALUE a YAML scalar or flow value (`2`, `~/data`, `[1e-3, 3e-3]`).
    Only the key's name is checked here; its value is validated with the rest of the suite. Claims and a baseline
    that the overrides leave out of the matrix are dropped (contracts/narrowing.py), a line each added to `notes`."""
    if not isinstance(raw, dict):
        return raw  # parse_suite names what the file holds instead
    before, raw, set_keys = raw, copy.deepcopy(raw), set()
    for item in overrides:
        key, value = _override(item, path)
        set_keys.add(key[0])
        if key[0] in AXIS_SECTIONS and key[1] in (raw.get("matrix") or {}):  # else refused as "both" below
            raise SuiteError(f"{path}: --set {item}: `{key[1]}` is a matrix axis of this suite; set the axis instead: "
                             f"--set matrix.{key[1]}=[{item.partition('=')[2]}]")
        node = raw
        for part in key[:-1]:
            if node.get(part) is None:
                node[part] = {}
            node = node[part]
            if not isinstance(node, dict):
                raise SuiteError(f"{path}: --set {item}: `{part}` in the file is not a mapping ({node!r}); "
                                 "set the whole key instead")
        node[key[-1]] = value
    dropped = drop_left_out(before, raw, set_keys)
    if notes is not None:
        notes.extend(dropped)
    return raw


def _override(item: str, path: Path) -> tuple[list[str], Any]:
    """`train.epochs=2` -> (["train", "epochs"], 2), its key's name checked against the suite's keys."""
    name, sep, text = item.partition("=")
    key = name.strip().split(".")
    if not sep or not all(key):
        raise SuiteError(f"{path}: --set {item!r}: expected KEY=VALUE, e.g. --set train.epochs=2")
    if key[0] not in TOP_LEVEL:
        section = section_of(key[0])
        hint = (f" (`{key[0]}` is a {section} key: --set {section}.{item.strip()})" if section and len(key) == 1
                else did_you_mean(key[0], TOP_LEVEL))
        raise SuiteError(f"{path}: --set {item}: unknown key `{key[0]}`{hint}")
    if key[0] in SECTIONS:
        valid = [f.name for f in fields(SECTIONS[key[0]])]
        if len(key) != 2:
            raise SuiteError(f"{path}: --set {item}: `{key[0]}` is a section: set one of its keys, e.g. --set "
                             f"{key[0]}.{valid[0]}=VALUE")
        if key[1] not in valid:
            raise SuiteError(f"{path}: --set {item}: `{name}` is not a {key[0]} key{did_you_mean(key[1], valid)}")
    elif len(key) > 1 and key[0] not in ("matrix", "tune"):
        raise SuiteError(f"{path}: --set {item}: `{key[0]}` takes a value, not keys; use --set {key[0]}=VALUE")
    if any("\udc80" <= c <= "\udcff" for c in item):  # bytes the shell passed that are not UTF-8
        raise SuiteError(f"{path}: --set {ascii(item)}: not UTF-8 text; give the value in UTF-8")
    try:
        return key, yaml.load(text, Loader=SuiteLoader)
    except yaml.YAMLError as e:
        raise SuiteError(f"{path}: --set {item}: the value is not valid YAML "
                         f"({' '.join(str(getattr(e, 'problem', None) or e).split())})") from None


def section_of(key: str) -> str | None:
    """The section (`train`, `model`, `dataset`) a key that is no top-level key belongs to, e.g. `epochs` -> train."""
    return next((name for name, cls in SECTIONS.items() if key in {f.name for f in fields(cls)}), None)


def overridden_text(path: Path, overrides: Sequence[str]) -> str:
    """The suite file as `--set` leaves it (its comments are not kept): the output folder's record of what ran."""
    raw = apply_overrides(read_suite_file(path), overrides, path)
    return (f"# {path} with --set {' '.join(overrides)} (written by normbench)\n"
            + yaml.dump(raw, Dumper=SuiteDumper, sort_keys=False, default_flow_style=None))
