"""What `normbench tune` searches, decided by the suite alone (sweep/tune.py runs it; report/tune_frame.py reads its
trials back): a study per matrix point without the seed and the tuned keys, the search's own seed, and the user attr
a search trial is labelled by."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from normbench.contracts.layer_tunables import PREFIX, declared, is_layer_key
from normbench.contracts.recipe import ADAM_BETA2_DEFAULT, Cell, CellConfig
from normbench.contracts.suite import Suite, TuneConfig, cell_id, with_overrides
from normbench.errors import SuiteError

LABEL = "label"  # a search trial's user attr: trial_label's text (its cell_id attr is its budget slot, `slot-3`)
# a confirmation's axis: which search trial it trains again (its cells differ only in the values that trial sampled,
# so the axis keeps their ids apart); not a recipe key (`recipe_axes` drops it)
SEARCH_TRIAL = "search_trial"


def recipe_axes(axes: dict[str, Any]) -> dict[str, Any]:
    """A tuning cell's axes as the suite builds its cell: without SEARCH_TRIAL."""
    return {k: v for k, v in axes.items() if k != SEARCH_TRIAL}


def check_space_values(suite: Suite) -> None:
    """Every choice and both ends of every range of a recipe key in `tune.space` pass the checks each cell gets,
    for every search: SuiteError (exit 2) naming the key and value, before a trial is queued, not when a trial draws
    it hours in."""
    from normbench.contracts.cell_checks import check_cell

    space = tune_section(suite).space
    for key in search_keys(suite):
        cell = suite.cell({**key, "seed": search_seed(suite)})
        for name, dist in space.items():
            if is_layer_key(name) or not isinstance(dist, dict):
                continue
            for value in dist["choices"] if "choices" in dist else (dist["low"], dist["high"]):
                drawn = replace(cell, config=with_overrides(cell, {name: value}))
                check_cell(drawn, f"{suite.path}: tune.space.{name} may draw {value!r}")


def search_point(axes: dict[str, Any]) -> dict[str, Any]:
    """The matrix point (`depth`, `layer`) a confirmation or re-run cell's axes belong to: without seed and
    SEARCH_TRIAL."""
    return {k: v for k, v in axes.items() if k not in ("seed", SEARCH_TRIAL)}


def tune_section(suite: Suite) -> TuneConfig:
    """The suite's `tune:` section; SuiteError (exit 2) naming what to add when it has none."""
    if suite.tune is None:
        raise SuiteError(f"{suite.path}: has no `tune:` section; add one with `trials:` and `space:` "
                         "(see suites/smoke.yaml)")
    return suite.tune


def search_keys(suite: Suite) -> list[dict[str, Any]]:
    """The matrix points that get their own study: every axis except seed and the tuned keys, in matrix order (from
    the suite's cells, so a layer's own lr grid, `lr_by_layer`, gives its studies)."""
    assert suite.tune is not None
    keys: dict[str, dict[str, Any]] = {}
    for cell in suite.cells():
        point = {k: v for k, v in cell.axes.items() if k != "seed" and k not in suite.tune.space}
        keys.setdefault(cell_id(point), point)
    return list(keys.values())


def search_in_flight(tune: TuneConfig) -> int | None:
    """The most trials of one search training at once, on every device and however they are fused (sweep/plan.py
    Job.max_in_flight): TPE's are its startup draws' number, so a batch drawn together (seeing its peers only as
    running: constant liar) is no larger than the random design it starts from; a random search's draws are
    independent, unbounded (None)."""
    return max(1, tune.startup_trials) if tune.sampler == "tpe" else None


def seeds(suite: Suite) -> list[int]:
    """The re-run seeds: the suite's report seeds (fresh: no search trained on them), else the matrix's."""
    return list(suite.report_seeds) or list(suite.matrix.get("seed", [suite.train.get("seed", 0)]))


def search_seed(suite: Suite) -> int:
    """The seed the search trains on: one past every seed the suite names, so no re-run repeats a search trial."""
    named = [*seeds(suite), *suite.matrix.get("seed", [suite.train.get("seed", 0)])]
    return max(named) + 1


def confirm_seed(suite: Suite) -> int:
    """The second search seed the best trials train on again (`tune.confirm_top`)."""
    return search_seed(suite) + 1


def apply_sampled(cell: Cell, sampled: dict[str, Any]) -> CellConfig:
    """The cell's recipe with a trial's sampled values: recipe keys as `with_overrides` sets them, `layer.<name>`
    keys through their tunable's target (a dict target merged into the recipe's dict, not replacing it)."""
    config = with_overrides(cell, {k: v for k, v in sampled.items() if not is_layer_key(k)})
    layered = {k[len(PREFIX):]: v for k, v in sampled.items() if is_layer_key(k)}
    if not layered:
        return config
    own = declared(config.model.layer)
    model = config.model
    for name, value in layered.items():
        field, _, item = own[name].target.partition(".")
        if item:
            model = replace(model, **{field: {**getattr(model, field), item: value}})
        else:
            model = replace(model, **{field: value})
    return replace(config, model=model)


def recipe_value(cell: Cell, key: str) -> Any:
    """What the grid's recipe trains `key` at, for the cell a tuned value replaced: a recipe key's value, or a
    layer tunable's (the recipe's own setting, else the entry's default at the cell's depth); None if unknown."""
    model, train = cell.config.model, cell.config.train
    if not is_layer_key(key):
        value = getattr(model, key, getattr(train, key, None))
        return ADAM_BETA2_DEFAULT if key == "adam_beta2" and value is None else value  # null: the optimizer's own
    tunable = declared(model.layer).get(key[len(PREFIX):])
    if tunable is None:
        return None
    field, _, item = tunable.target.partition(".")
    value = getattr(model, field).get(item) if item else getattr(model, field)
    if value is None and tunable.default is not None:
        value = tunable.default(model.depth)
    return value
