"""`normbench tune --dry-run`: the searches a suite's `tune:` section makes (one study per matrix point without the
seed and the tuned keys), each one's trials finished of its budget, and the re-runs of each winner; trains nothing
and writes nothing (a ledger is only read, when the output folder or --storage has one)."""

from __future__ import annotations

from pathlib import Path

from normbench.contracts.names import OutputFolder, StudyNames
from normbench.contracts.suite import Suite, cell_id
from normbench.contracts.tuning import check_space_values, confirm_seed, search_keys, search_seed, seeds, tune_section


def tune_dry_run_report(suite: Suite, out: Path, storage: str | None) -> str:
    """A row per search (`depth=2,layer=rezero`: finished/budget trials) and a summary line."""
    from tabulate import tabulate

    check_space_values(suite)  # what the run would refuse, the dry run refuses
    tune, names = tune_section(suite), StudyNames(suite.name)
    finished: dict[str, int] = {}
    if storage or OutputFolder(out).ledger.exists():
        from optuna.trial import TrialState

        from normbench.store.ledger import Ledger

        ledger = Ledger(storage, out)
        done = (TrialState.COMPLETE, TrialState.PRUNED)  # a pruned trial spent its share of the budget
        finished = {name: len(ledger.trials(ledger.study(name), done)) for name in ledger.study_names()
                    if name in (names.tuned, names.confirm) or names.tune_point(name) is not None}
    keys = search_keys(suite)
    rows = [[cell_id(key), f"{finished.get(names.tune(cell_id(key)), 0)}/{tune.trials}"] for key in keys]
    reruns = len(keys) * len(seeds(suite))
    confirm = (f"its best {tune.confirm_top} again on seed {confirm_seed(suite)} ({len(keys) * tune.confirm_top} "
               f"cells, {finished.get(names.confirm, 0)} finished), " if tune.confirm_top else "")
    summary = (f"{len(keys)} searches x {tune.trials} trials of {', '.join(tune.space)} on seed {search_seed(suite)}, "
               f"{confirm}then each search's best configuration on seed(s) {seeds(suite)}: {reruns} re-runs "
               f"({finished.get(names.tuned, 0)} finished); output folder {out}. Nothing was trained; "
               "--set tune.trials=N changes the budget")
    return "\n".join([tabulate(rows, headers=["search", "trials finished"], tablefmt="simple"), summary])
