"""YAML -> validated Suite -> list of Cells. Every problem is found before anything runs.

A suite names a dataset, a base recipe (`model:`, `train:`), a `matrix:` whose axes are any model or train key
(`depth`, `layer`, `lr`, `seed`, `drop_path_rate`, ...) and optionally a `tune:` section, lr bracketing
(`bracket`, `bracket_max_steps`), the `baseline` layer of the paired comparisons, `claims` to check and a
`reference` suite's output folder whose layer ranking the leaderboard tests for transfer, the folders to `adopt_from`
(cells of this recipe another suite finished, copied instead of trained again: sweep/adopt.py), the `report_seeds`
that train each row's chosen lr once selection is over (selection never sees them), and the val `targets` whose
steps-to-reach measure learning speed. Errors name the file, the key, the bad value and the closest valid one.

The file is read by contracts/suite_file.py (a key given twice is an error, `3e-3` is a float); `load_suite(path,
overrides)` applies `--set KEY=VALUE` overrides before validating, as if the file said them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from normbench.contracts.bracketing import DEFAULT_LR_BOUNDS
from normbench.contracts.cell_checks import check_cell, check_dataset, check_device
from normbench.contracts.claim_rounds import ClaimRounds, parse_claim_rounds, round_seeds
from normbench.contracts.interactions import Interaction, parse_interactions
from normbench.contracts.layer_tunables import SOURCE, check_layer_space, is_layer_key
from normbench.contracts.recipe import RUN_KEYS, Cell, CellConfig, ModelConfig, TrainConfig
from normbench.contracts.row_lrs import parse_lr_by_layer
from normbench.contracts.suite_file import (
    AXIS_SECTIONS,
    SECTIONS,
    TOP_LEVEL,
    apply_overrides,
    as_suite_mapping,
    read_suite_file,
    section_of,
)
from normbench.data.config import DataConfig
from normbench.errors import SuiteError, did_you_mean

CLAIM_KEYS = ("layer", "beats", "steadier_than", "depth", "by", "claimed")
CLAIM_RIVALS = ("beats", "steadier_than")  # a claim names exactly one: higher score, or lower lr sensitivity
DEFAULT_TARGETS = (50.0, 70.0, 90.0)  # val top-1 (%) whose first crossing measures learning speed


@dataclass(frozen=True)
class TuneConfig:
    trials: int                                  # per study, the same for every layer
    space: dict[str, dict[str, Any]]             # key -> {low, high, log} | {choices: [...]}
    sampler: str = "tpe"                         # tpe or random
    pruner: str = "median"                       # median or none
    startup_trials: int = 5                      # trials before TPE and the pruner act
    confirm_top: int = 0                         # the best trials re-trained on a second search seed, then chosen
                                                 # on the mean of both (docs/protocol.md, "Tuned"); 0: the best one
    prune_after: float = 0.25                    # the share of a trial's epochs before the pruner may stop it


@dataclass
class Suite:
    name: str
    path: Path
    dataset: DataConfig
    model: dict[str, Any]
    train: dict[str, Any]
    matrix: dict[str, list[Any]]
    tune: TuneConfig | None = None
    device: str = "auto"
    description: str = ""
    axis_section: dict[str, str] = field(default_factory=dict)  # axis -> "model" | "train"
    bracket: bool = False          # add lr cells beyond the grid's edge until the best lr is interior
    bracket_max_steps: int | None = None  # optional cap on v2's grid steps beyond each end (None: lr_bounds only)
    lr_bounds: tuple[float, float] = DEFAULT_LR_BOUNDS  # no bracketing round goes outside these lrs
    lr_by_layer: dict[str, list[float]] = field(default_factory=dict)  # a layer's own lr grid (contracts/row_lrs.py)
    baseline: str | None = None    # the layer every other is compared with (default layernorm when present)
    claims: list[dict[str, Any]] = field(default_factory=list)  # {layer, beats, depth, by (default: claimed)}
    # `reference:`, other suites' output folders (relative to the cwd): does the first's ranking hold here? A tuned
    # row's lr is measured from the lr the first of them that has the row selected (its rows may come from two grids)
    references: list[str] = field(default_factory=list)
    adopt_from: list[str] = field(default_factory=list)  # output folders whose cells of this recipe are copied, not
                                                         # trained again (sweep/adopt.py)
    report_seeds: list[int] = field(default_factory=list)  # train each row's chosen lr on these; they report
    budget_check: bool = False     # also train each row's chosen lr at BUDGET_FACTOR x the epochs: converged?
    targets: list[float] = field(default_factory=lambda: list(DEFAULT_TARGETS))  # learning-speed val targets (%)
    sequential: ClaimRounds = field(default_factory=ClaimRounds)  # claims add report seeds in rounds until decided
    # gaps larger here than in the folder `normbench compare` sets beside this one (contracts/interactions.py)
    interactions: list[Interaction] = field(default_factory=list)
    # what loading it with --set said (claims the overrides left out, dropped): the command prints them; not the suite
    notes: list[str] = field(default_factory=list, compare=False)

    def cells(self) -> list[Cell]:
        """The matrix expanded in file order (the last axis varies fastest); a layer of `lr_by_layer` takes only its
        own lrs, the others `matrix.lr`."""
        names, values = list(self.matrix), list(self.matrix.values())
        if self.lr_by_layer:  # every lr any row takes, ascending; each cell then keeps its row's own
            lrs = {float(lr) for lr in self.matrix["lr"]}.union(*self.lr_by_layer.values())
            values[names.index("lr")] = sorted(lrs)
        every = (dict(zip(names, v, strict=True)) for v in itertools.product(*values))
        return [self.cell(axes) for axes in every if "lr" not in axes or axes["lr"] in self.lr_grid(axes.get("layer"))]

    def lr_grid(self, layer: str | None = None) -> list[float]:
        """The lrs `layer`'s rows start from (its `lr_by_layer` entry, else `matrix.lr`). `None`: the recipe's one
        layer when the matrix has no layer axis."""
        return list(self.lr_by_layer.get(self._row_layer(layer), self.matrix.get("lr", [])))

    def lr_lattice(self, layer: str | None = None) -> list[float] | None:
        """For a layer with its own grid, `matrix.lr`: the lattice its bracketing steps land on (contracts/
        bracketing.py `lattice_step`); None for the others, which step from their edges as they always have."""
        return list(self.matrix["lr"]) if self._row_layer(layer) in self.lr_by_layer else None

    def _row_layer(self, layer: str | None) -> str:
        return layer if layer is not None else self.model.get("layer", "layernorm")

    def cell(self, axes: dict[str, Any]) -> Cell:
        """The cell of `axes`: matrix axes, or any model/train key (a report cell's seed when the matrix has none)."""
        model, train = dict(self.model), dict(self.train)
        for axis, value in axes.items():
            section = self.axis_section.get(axis) or ("model" if axis in _MODEL_KEYS else "train")
            (model if section == "model" else train)[axis] = value
        config = CellConfig(model=ModelConfig(**model), train=TrainConfig(**train), data=self.dataset)
        return Cell(axes=axes, config=config, cell_id=cell_id(axes))

    def budget_axes(self, report_axes: dict[str, Any]) -> dict[str, Any]:
        """A report cell's axes at BUDGET_FACTOR x its epochs: the schedule stretched (warmup too), not extended, so
        the 2x cell is the same recipe trained slower, and its final lr is the same floor."""
        train = self.cell(report_axes).config.train
        return {**report_axes, "epochs": train.epochs * BUDGET_FACTOR,
                "warmup_epochs": train.warmup_epochs * BUDGET_FACTOR}

    @property
    def reference(self) -> str | None:
        """The folder whose layer ranking the leaderboard tests for transfer: the first `reference:`."""
        return self.references[0] if self.references else None

    def layers(self) -> list[str]:
        return list(self.matrix.get("layer", [self.model.get("layer", "layernorm")]))

    def depths(self) -> list[int]:
        return list(self.matrix.get("depth", [self.model.get("depth", 12)]))

    def selection_seeds(self) -> list[int]:
        """The seeds that choose each row's lr: the matrix's, else the recipe's one seed."""
        return list(self.matrix.get("seed", [self.train.get("seed", TrainConfig.seed)]))

    def claim_seeds(self) -> list[int]:
        """Every report seed a claim's rows may train: `report_seeds`, then the claim rounds' (contracts/
        claim_rounds.py)."""
        return round_seeds(self.report_seeds, self.selection_seeds(), self.sequential)

    def row_axes(self) -> list[str]:
        """The matrix axes that make a leaderboard row (all but lr and seed), in file order."""
        return [k for k in self.matrix if k not in ("lr", "seed")]

    def enable_bracket(self) -> None:
        """Turn on lr bracketing (`--bracket`), which needs a grid of at least two lrs to take its ratio from."""
        lrs = self.matrix.get("lr", [])
        if len(lrs) < 2:
            raise SuiteError(f"{self.path}: bracket: needs `matrix.lr` with at least two values (a step beyond the "
                             f"edge is the grid's own ratio), got {lrs or 'no lr axis'}; add lrs or drop bracket")
        short = {layer: grid for layer, grid in self.lr_by_layer.items() if len(grid) < 2}
        if short:
            raise SuiteError(f"{self.path}: bracket: needs at least two lrs in each `lr_by_layer` grid, got {short}; "
                             "add lrs or drop bracket")
        self.bracket = True

    def recipe_hash(self) -> str:
        """Fingerprint of everything but the matrix: a ledger trained with another recipe must not be resumed.
        RUN_KEYS (checkpointing, kept weights) change no result, so they are left out."""
        train = {k: v for k, v in self.train.items() if k not in RUN_KEYS}
        recipe = {"dataset": asdict(self.dataset), "model": self.model, "train": train}
        return hashlib.sha256(json.dumps(recipe, sort_keys=True, default=str).encode()).hexdigest()[:12]


BUDGET_FACTOR = 2  # the convergence check's epochs, as a multiple of the recipe's
BUDGET_SEEDS = 2   # ... trained on this many of the report seeds (the first ones)

_MODEL_KEYS = frozenset(f.name for f in fields(ModelConfig))


def claim_rival(claim: Mapping[str, Any]) -> tuple[str, str]:
    """(`beats` or `steadier_than`, the rival layer) of a claim (a dict, or a row of a claims frame)."""
    for kind in CLAIM_RIVALS:
        if isinstance(claim.get(kind), str):
            return kind, claim[kind]
    raise KeyError(f"a claim names one of {CLAIM_RIVALS}: {dict(claim)!r}")


def cell_id(axes: dict[str, Any]) -> str:
    """`depth=2,layer=rmsnorm,lr=0.001,seed=0`: axes sorted by name, so reordering a suite's keys keeps every id."""
    return ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(axes.items()))


# ---------------------------------------------------------------------------------------------------- loading

def load_suite(path: str | Path, overrides: Sequence[str] = ()) -> Suite:
    """Read and validate a suite file, with `--set KEY=VALUE` overrides applied first. Raises SuiteError (exit
    code 2) naming file, key and value."""
    path = Path(path)
    raw = read_suite_file(path)
    if not overrides:
        return parse_suite(raw, path)
    notes: list[str] = []
    suite = parse_suite(apply_overrides(raw, overrides, path, notes), path,
                        where=f"{path} with --set {' '.join(overrides)}")
    suite.notes = notes
    return suite


def parse_suite(raw: Any, path: Path, where: str | None = None) -> Suite:
    """Validate a suite's YAML (`where` names it in messages: the file, and any --set overrides)."""
    where = where or str(path)
    raw = as_suite_mapping(raw, where)
    for key in raw:
        if key not in TOP_LEVEL:
            section = section_of(str(key))
            hint = (f" (`{key}` is a {section} key: write it under `{section}:`, e.g. {section}: {{{key}: "
                    f"{raw[key]}}})" if section else did_you_mean(key, TOP_LEVEL))
            raise SuiteError(f"{where}: unknown key `{key}`{hint}")
    name = raw.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise SuiteError(f"{where}: `name` must be a word of letters, digits, '-', '_' or '.' "
                         f"(it names the output folder), got {name!r}")
    sections = {s: _section(raw.get(s), cls, s, where) for s, cls in SECTIONS.items()}
    if "name" not in sections["dataset"]:  # no silent default: the data is the first thing a result depends on
        from normbench.data import DATASETS

        raise SuiteError(f"{where}: dataset.name: missing; name the data the suite trains on, e.g. dataset: {{name: "
                         f"digits}} (bundled, no download; one of {', '.join(DATASETS)})")
    try:
        dataset = DataConfig(**sections["dataset"])
        check_dataset(dataset, where)
    except TypeError as e:
        raise SuiteError(f"{where}: dataset: {e}") from None
    matrix, axis_section = _matrix(raw.get("matrix"), where)
    for axis in matrix:  # an axis overrides the base recipe; saying both is a mistake worth naming
        if axis in sections[axis_section[axis]]:
            raise SuiteError(f"{where}: `{axis}` is both in `{axis_section[axis]}:` and a matrix axis; keep one")
    suite = Suite(name=name, path=path, dataset=dataset, model=sections["model"], train=sections["train"],
                  matrix=matrix, axis_section=axis_section,
                  device=check_device(raw.get("device", "auto"), f"{where}: device"),
                  description=str(raw.get("description", "")))
    suite.tune = _tune(raw.get("tune"), suite, where)
    _protocol(raw, suite, where)
    for cell in suite.cells():
        check_cell(cell, where)
    return suite


def _section(value: Any, cls: type, name: str, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SuiteError(f"{where}: `{name}` must be a mapping of keys, got {value!r}")
    hints = typing.get_type_hints(cls)
    valid = [f.name for f in fields(cls)]
    for key, v in value.items():
        if key not in hints:
            raise SuiteError(f"{where}: {name}.{key}: unknown key{did_you_mean(key, valid)}")
        _check_type(v, hints[key], f"{name}.{key}", where)
    return dict(value)


def _check_type(value: Any, hint: Any, key: str, where: str) -> None:
    allowed = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, __import__("types").UnionType) \
        else (hint,)
    for t in allowed:
        origin = typing.get_origin(t) or t
        if t is type(None) and value is None:
            return
        if origin is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return
        if origin is int and isinstance(value, int) and not isinstance(value, bool):
            return
        if origin in (str, bool, dict) and isinstance(value, origin):
            return
    wanted = " or ".join("null" if t is type(None) else getattr(typing.get_origin(t) or t, "__name__", str(t))
                         for t in allowed)
    raise SuiteError(f"{where}: {key}: expected {wanted}, got {value!r} ({type(value).__name__})")


def _matrix(raw: Any, where: str) -> tuple[dict[str, list[Any]], dict[str, str]]:
    if raw is None or raw == {}:  # else one cell with an empty id trains on hidden defaults
        raise SuiteError(f"{where}: matrix: needs at least one axis (e.g. layer: [layernorm]), got {raw!r}; each "
                         "axis is a model or train key with the values to train")
    if not isinstance(raw, dict):
        raise SuiteError(f"{where}: `matrix` must map axis names to lists of values, got {raw!r}")
    hints = {s: typing.get_type_hints(cls) for s, cls in AXIS_SECTIONS.items()}
    matrix, axis_section = {}, {}
    for axis, values in raw.items():
        section = next((s for s, h in hints.items() if axis in h), None)
        if section is None:
            valid = [k for h in hints.values() for k in h]
            raise SuiteError(f"{where}: matrix.{axis}: not a model or train key{did_you_mean(axis, valid)}")
        values = values if isinstance(values, list) else [values]
        if not values:
            raise SuiteError(f"{where}: matrix.{axis}: needs at least one value")
        if len(set(map(repr, values))) != len(values):
            raise SuiteError(f"{where}: matrix.{axis}: repeated value in {values}")
        for v in values:
            _check_type(v, hints[section][axis], f"matrix.{axis}", where)
        matrix[axis], axis_section[axis] = values, section
    return matrix, axis_section


def _tune(raw: Any, suite: Suite, where: str) -> TuneConfig | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise SuiteError(f"{where}: `tune` must be a mapping (trials, space, ...), got {raw!r}")
    valid = [f.name for f in fields(TuneConfig)]
    for key in raw:
        if key not in valid:
            raise SuiteError(f"{where}: tune.{key}: unknown key{did_you_mean(key, valid)}")
    trials, space = raw.get("trials"), raw.get("space")
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise SuiteError(f"{where}: tune.trials: expected a positive int (trials per layer and depth), got {trials!r}")
    if not isinstance(space, dict) or not space:
        raise SuiteError(f"{where}: tune.space: expected a mapping of key -> {{low, high, log}} or {{choices}}")
    tunable = {**typing.get_type_hints(ModelConfig), **typing.get_type_hints(TrainConfig)}
    for key, dist in space.items():
        if is_layer_key(key):  # a layer's own hyper-parameter, within its source's range
            if dist != SOURCE:
                _check_space(key, dist, float | int | str | bool, where)  # the layer's own range decides its type
            check_layer_space(key, dist, suite.layers(), where)
            continue
        if key not in tunable:
            raise SuiteError(f"{where}: tune.space.{key}: not a model or train key{did_you_mean(key, tunable)}, nor "
                             "a layer's tunable (`layer.<name>`)")
        _check_space(key, dist, tunable[key], where)
    confirm = raw.get("confirm_top", 0)
    if isinstance(confirm, bool) or not isinstance(confirm, int) or confirm < 0:
        raise SuiteError(f"{where}: tune.confirm_top: expected a whole number of the best trials to train again on a "
                         f"second search seed (0: none), got {confirm!r}")
    after = raw.get("prune_after", 0.25)
    if isinstance(after, bool) or not isinstance(after, (int, float)) or not 0 <= after <= 1:
        raise SuiteError(f"{where}: tune.prune_after: expected the share of a trial's epochs (0 to 1) before the "
                         f"pruner may stop it, got {after!r}")
    for key in ("sampler", "pruner"):
        options = {"sampler": ("tpe", "random"), "pruner": ("median", "none")}[key]
        if key in raw and raw[key] not in options:
            raise SuiteError(f"{where}: tune.{key}: {raw[key]!r}{did_you_mean(raw[key], options)}")
    return TuneConfig(**raw)


def _check_space(key: str, dist: Any, hint: Any, where: str) -> None:
    """A `tune.space` entry that Optuna takes and the key's type holds, as sweep/tune.py `suggest` samples it (int
    low and high without log: integers; else floats): refused when the suite is read, not by Optuna mid-tune."""
    at = f"{where}: tune.space.{key}"
    if isinstance(dist, dict) and set(dist) == {"choices"}:
        if not isinstance(dist["choices"], list) or not dist["choices"]:
            raise SuiteError(f"{at}.choices: expected a list of one or more values to try, got {dist['choices']!r}")
        for value in dist["choices"]:
            _check_type(value, hint, f"tune.space.{key}.choices", where)
        return
    if not isinstance(dist, dict) or not {"low", "high"} <= set(dist) <= {"low", "high", "log", "step"}:
        raise SuiteError(f"{at}: expected {{low: a, high: b}} (and optionally log: true, or step: s) with a < b, "
                         f"or {{choices: [...]}}, got {dist!r}")
    low, high, log, step = dist["low"], dist["high"], dist.get("log", False), dist.get("step")
    for bound, value in (("low", low), ("high", high)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SuiteError(f"{at}.{bound}: expected a number, got {value!r}; a key of other values takes "
                             "{choices: [...]}")
        _check_type(value, hint, f"tune.space.{key}.{bound}", where)
    if not isinstance(log, bool):
        raise SuiteError(f"{at}.log: expected true or false, got {log!r}")
    if not low < high:
        raise SuiteError(f"{at}: expected {{low: a, high: b}} with a < b, got low {low!r} and high {high!r}; swap "
                         "them, or give one value as {choices: [value]}")
    integers = isinstance(low, int) and isinstance(high, int) and not log
    if integers and _takes(0.5, hint):
        raise SuiteError(f"{at}: low {low} and high {high} are integers, so only whole numbers would be tried; write "
                         f"them as floats (low: {float(low)}, high: {float(high)}) for a range of {key}")
    if not integers and not _takes(0.5, hint):
        raise SuiteError(f"{at}: log: true samples floats, but {key} is an integer; drop log (the integers from low "
                         "to high are tried evenly) or give {choices: [...]}")
    if log and low <= 0:
        raise SuiteError(f"{at}: log: true needs low > 0 (a log scale has no 0 or negatives), got low {low!r}; "
                         f"set low to a positive value (e.g. {high / 1000:g}) or drop log")
    if step is not None:
        if log:
            raise SuiteError(f"{at}: step and log: true do not combine (Optuna refuses it); drop one")
        whole = isinstance(step, int) and not isinstance(step, bool)
        if not (whole if integers else isinstance(step, (int, float)) and not isinstance(step, bool)) or step <= 0:
            raise SuiteError(f"{at}.step: expected a positive {'integer' if integers else 'number'}, got {step!r}")


def _takes(value: Any, hint: Any) -> bool:
    """Whether a key of type `hint` holds `value` (a float: is it a float key?)."""
    try:
        _check_type(value, hint, "", "")
    except SuiteError:
        return False
    return True


def _lr_bounds(value: Any, suite: Suite, where: str) -> tuple[float, float]:
    """`lr_bounds: [low, high]`: positive, low < high, and the matrix's own lrs inside them."""
    ok = (isinstance(value, list) and len(value) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                             and v > 0 for v in value) and value[0] < value[1])
    if not ok:
        raise SuiteError(f"{where}: lr_bounds: expected [low, high] with 0 < low < high (the lrs bracketing may "
                         f"reach), got {value!r}")
    for key, lrs in [("matrix.lr", suite.matrix.get("lr", [])),
                     *((f"lr_by_layer.{layer}", grid) for layer, grid in suite.lr_by_layer.items())]:
        outside = [lr for lr in lrs if not value[0] <= lr <= value[1]]
        if outside:
            raise SuiteError(f"{where}: lr_bounds: {value} leaves out {key} {outside}; widen lr_bounds or drop "
                             f"those lrs")
    return float(value[0]), float(value[1])


def _check_layer_names(suite: Suite, where: str) -> None:
    """Before saying a baseline or claim names no layer of the suite: a typo in the suite's own layers (`layernrom`)
    is the mistake to name, with its suggestion, not the correct name it left out."""
    for cell in suite.cells():
        check_cell(cell, where)


def _protocol(raw: dict[str, Any], suite: Suite, where: str) -> None:
    """bracket, bracket_max_steps, lr_by_layer, lr_bounds, baseline, claims and reference."""
    bracket, steps = raw.get("bracket", False), raw.get("bracket_max_steps")
    if not isinstance(bracket, bool):
        raise SuiteError(f"{where}: bracket: expected true or false, got {bracket!r}")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise SuiteError(f"{where}: bracket_max_steps: expected a positive int (grid steps beyond each edge), "
                         f"got {steps!r}; leave it out to stop only at lr_bounds")
    suite.bracket_max_steps = steps
    suite.lr_by_layer = parse_lr_by_layer(raw.get("lr_by_layer"), suite.matrix, suite.layers(), bracket=bracket,
                                          where=where)
    if "lr_bounds" in raw:
        suite.lr_bounds = _lr_bounds(raw["lr_bounds"], suite, where)
    else:  # the default widens to hold the suite's own grid
        grid = [float(lr) for lr in suite.matrix.get("lr", []) if isinstance(lr, (int, float))]
        grid += [lr for lrs in suite.lr_by_layer.values() for lr in lrs]
        suite.lr_bounds = (min([DEFAULT_LR_BOUNDS[0], *grid]), max([DEFAULT_LR_BOUNDS[1], *grid]))
    if bracket:
        suite.enable_bracket()
    layers, depths = suite.layers(), suite.depths()
    baseline = raw.get("baseline", "layernorm" if "layernorm" in layers else None)
    if baseline is not None and baseline not in layers:
        _check_layer_names(suite, where)
        raise SuiteError(f"{where}: baseline: {baseline!r} is not a layer of this suite{did_you_mean(baseline, layers)}"
                         f" (layers: {', '.join(layers)})")
    suite.baseline = baseline
    claims = raw.get("claims") or []
    if not isinstance(claims, list):
        raise SuiteError(f"{where}: claims: expected a list of {{layer, beats, depth, by}}, got {claims!r}")
    for i, claim in enumerate(claims):
        key = f"claims[{i}]"
        if not isinstance(claim, dict) or not {"layer", "depth"} <= set(claim) \
                or sum(k in claim for k in CLAIM_RIVALS) != 1:
            raise SuiteError(f"{where}: {key}: expected {{layer: A, beats: B, depth: D}} or {{layer: A, "
                             f"steadier_than: B, depth: D}} (and optionally by: points), got {claim!r}")
        for k in claim:
            if k not in CLAIM_KEYS:
                raise SuiteError(f"{where}: {key}.{k}: unknown key{did_you_mean(k, CLAIM_KEYS)}")
        for k in ("layer", next(k for k in CLAIM_RIVALS if k in claim)):
            if claim[k] not in layers:
                _check_layer_names(suite, where)
                raise SuiteError(f"{where}: {key}.{k}: {claim[k]!r} is not a layer of this suite"
                                 f"{did_you_mean(str(claim[k]), layers)} (layers: {', '.join(layers)})")
        if claim["depth"] not in depths:
            raise SuiteError(f"{where}: {key}.depth: {claim['depth']!r} is not a depth of this suite "
                             f"(depths: {', '.join(map(str, depths))})")
        _check_steadier_grids(suite, claim, f"{where}: {key}")
        for k in ("by", "claimed"):
            value = claim.get(k, 0)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SuiteError(f"{where}: {key}.{k}: expected a number of points, got {value!r}")
    # a claim is tested against the margin its source claimed unless `by` says otherwise: "beats by 3.4" is the
    # claim, not "beats"
    suite.claims = [{**c, "by": float(c.get("by", c.get("claimed", 0))),
                     **({"claimed": float(c["claimed"])} if "claimed" in c else {})} for c in claims]
    suite.references = _references(raw.get("reference"), where)
    suite.adopt_from = _adopt_from(raw.get("adopt_from", []), where)
    suite.report_seeds = _report_seeds(raw.get("report_seeds"), suite, where)
    suite.targets = _targets(raw.get("targets", list(DEFAULT_TARGETS)), where)
    suite.budget_check = _budget_check(raw.get("budget_check", False), suite, where)
    suite.sequential = parse_claim_rounds(raw.get("sequential"), suite.report_seeds, where)
    suite.interactions = parse_interactions(raw.get("interactions"), layers, depths, where)


def _check_steadier_grids(suite: Suite, claim: dict[str, Any], at: str) -> None:
    """A steadier_than claim pairs the lrs both rows tried; rows that start from grids of their own (`lr_by_layer`)
    sharing fewer than two would have nothing to pair unless bracketing happened to meet."""
    if "steadier_than" not in claim or not suite.lr_by_layer:
        return
    shared = set(suite.lr_grid(claim["layer"])) & set(suite.lr_grid(claim["steadier_than"]))
    if len(shared) < 2:
        raise SuiteError(f"{at}: {claim['layer']} steadier_than {claim['steadier_than']} compares the lrs both rows "
                         f"tried, and their start grids share {sorted(shared) or 'none'} (lr_by_layer); give both at "
                         "least two common lrs or drop the claim")


def _adopt_from(raw: Any, where: str) -> list[str]:
    """Output folders (paths from the cwd) to copy this recipe's finished cells from: one path or a list. Whether
    each holds a ledger of this recipe is checked when a run opens (sweep/adopt.py): it may finish after the suite is
    written."""
    folders = [raw] if isinstance(raw, str) else raw
    if not isinstance(folders, list) or not all(isinstance(f, str) and f.strip() for f in folders):
        raise SuiteError(f"{where}: adopt_from: expected an output folder's path or a list of them, e.g. "
                         f"[results/depth-sweep-digits-modern], got {raw!r}")
    return list(folders)


def _budget_check(raw: Any, suite: Suite, where: str) -> bool:
    """The convergence check trains on the first BUDGET_SEEDS report seeds: it needs them."""
    if not isinstance(raw, bool):
        raise SuiteError(f"{where}: budget_check: expected true or false, got {raw!r}")
    if raw and "epochs" in suite.matrix:
        raise SuiteError(f"{where}: budget_check: the matrix already varies epochs, which compares budgets row by row;"
                         " drop budget_check or the epochs axis")
    if raw and len(suite.report_seeds) < BUDGET_SEEDS:
        raise SuiteError(f"{where}: budget_check: trains each row's chosen lr on the first {BUDGET_SEEDS} report "
                         f"seeds at {BUDGET_FACTOR}x the epochs, but report_seeds is {suite.report_seeds or 'unset'}; "
                         f"add report_seeds (e.g. [100, 101, 102, 103]) or drop budget_check")
    return raw


def _references(reference: Any, where: str) -> list[str]:
    """`reference:` as one output folder or a list of them (checked for existence only by the leaderboard: a
    reference may finish after this suite starts)."""
    if reference is None:
        return []
    folders = reference if isinstance(reference, list) else [reference]
    if not folders or any(not isinstance(f, str) or not f.strip() for f in folders):
        raise SuiteError(f"{where}: reference: expected the path of another suite's output folder (or a list of "
                         f"them), e.g. results/depth-sweep-digits, got {reference!r}")
    return list(folders)


def _report_seeds(raw: Any, suite: Suite, where: str) -> list[int]:
    """Fresh seeds, none of which selection trains on: a lucky selection seed must not also report."""
    if raw is None:
        return []
    if not isinstance(raw, list) or not raw or not all(isinstance(s, int) and not isinstance(s, bool) for s in raw):
        raise SuiteError(f"{where}: report_seeds: expected a list of integer seeds, e.g. [100, 101, 102, 103], "
                         f"got {raw!r}")
    if len(set(raw)) != len(raw):
        raise SuiteError(f"{where}: report_seeds: repeated seed in {raw}")
    shared = sorted(set(raw) & set(suite.selection_seeds()))
    if shared:
        raise SuiteError(f"{where}: report_seeds: {shared} also select the lr (matrix seeds "
                         f"{suite.selection_seeds()}); report seeds must be fresh: pick others, e.g. "
                         f"{[max(suite.selection_seeds()) + 100 + i for i in range(len(raw))]}")
    return list(raw)


def _targets(raw: Any, where: str) -> list[float]:
    numbers = isinstance(raw, list) and raw and all(isinstance(t, (int, float)) and not isinstance(t, bool)
                                                    for t in raw)
    if not numbers or not all(0 < t <= 100 for t in raw):
        raise SuiteError(f"{where}: targets: expected a list of val top-1 percentages in (0, 100], e.g. "
                         f"[50, 70, 90], got {raw!r}")
    if len(set(raw)) != len(raw):
        raise SuiteError(f"{where}: targets: repeated value in {raw}")
    return sorted(float(t) for t in raw)


def with_overrides(cell: Cell, overrides: dict[str, Any]) -> CellConfig:
    """A cell's recipe with tuned values applied (keys are model or train field names)."""
    model_keys = {f.name for f in fields(ModelConfig)}
    cfg = cell.config
    model = replace(cfg.model, **{k: v for k, v in overrides.items() if k in model_keys})
    train = replace(cfg.train, **{k: v for k, v in overrides.items() if k not in model_keys})
    return CellConfig(model=model, train=train, data=cfg.data)
