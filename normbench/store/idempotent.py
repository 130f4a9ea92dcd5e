"""The writes a retry must not replay blindly, and how to tell whether one landed (see normbench.store.retry).

A request can reach the server, be committed, and lose its answer (a timeout, a reset, a proxy's 502). Replaying
it would apply it twice: a second queued trial. So each such write carries a key and, after an ambiguous error, is
looked up by it before it is sent again. Only the ledger's writes are wrapped: MLflow is a view of the ledger that
`normbench sync` rebuilds (tracking/sync.py), so its writes are never retried.
- Optuna's RDBStorage.create_new_trial / _create_new_trial (queueing a cell): a `normbench_key` system attr. Optuna
  itself retries a trial's creation after an error of its commit (deadlocks), so the lookup also runs inside each
  of its tries, in the same transaction as the insert (under its lock of the study's row);
- RDBStorage.set_trial_state_values: finishing a trial twice is refused by Optuna, so a lost answer is checked by
  reading the trial's state back. A claim (WAITING -> RUNNING) is a compare-and-set: replayed after it landed, it
  answers "taken by another worker"; that trial, never signed, is freed by the ledger without counting an attempt.
Other writes are safe to repeat as they are: attrs overwrite with the same value, a heartbeat is a heartbeat.
"""

from __future__ import annotations

import copy
import inspect
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from normbench.store.optuna_api import find_trial_by_key

NOT_LANDED = object()  # what an Unsafe.landed check answers when the write is not on the server


@dataclass(frozen=True)
class Unsafe:
    """A write that must not be replayed blindly. `prepare(args, kwargs) -> (args, kwargs)` runs once before the
    first try (it gives the write a key); `landed(*args, **kwargs)` (with the prepared arguments) returns what the
    call would have returned if the write is on the server, else NOT_LANDED (normbench.store.retry uses both)."""

    landed: Callable[..., Any] | None = None
    prepare: Callable[[tuple, dict], tuple[tuple, dict]] | None = None

TRIAL_KEY = "normbench_key"  # Optuna system attr of a queued trial: what its creation is found by


def unsafe_methods(obj: Any) -> dict[str, Unsafe]:
    """The unsafe writes of `obj` (an Optuna RDBStorage), by method name; {} for others. An RDBStorage's own retries
    of a trial's creation are made to find the trial a lost commit left (on `obj`)."""
    if type(obj).__name__ == "RDBStorage":
        find_trial_by_key(obj, TRIAL_KEY)
        trial_id = obj.get_trial_id_from_study_id_trial_number
        return {"create_new_trial": _create_trial(obj, lambda study_id, t: trial_id(study_id, t.number)),
                "_create_new_trial": _create_trial(obj, lambda study_id, t: t),
                "set_trial_state_values": _set_state(obj)}
    return {}


def _binder(method: Callable[..., Any]) -> Callable[[tuple, dict], inspect.BoundArguments]:
    signature = inspect.signature(method)

    def bind(args: tuple, kwargs: dict) -> inspect.BoundArguments:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound

    return bind


def _create_trial(storage: Any, answer: Callable[[int, Any], Any]) -> Unsafe:
    bind = _binder(storage._create_new_trial)

    def prepare(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        bound = bind(args, kwargs)
        template = bound.arguments.get("template_trial")
        if template is not None:  # a fresh key even if the template has one: a re-queued copy inherits its attrs
            template = copy.copy(template)  # the caller's template is not ours to change
            template.system_attrs = {**template.system_attrs, TRIAL_KEY: uuid.uuid4().hex}
            bound.arguments["template_trial"] = template
        return bound.args, bound.kwargs

    def landed(*args: Any, **kwargs: Any) -> Any:
        bound = bind(args, kwargs)
        template = bound.arguments.get("template_trial")
        key = template.system_attrs.get(TRIAL_KEY) if template is not None else None
        if key is None:  # a bare trial (study.ask) has no key to be found by: it may not be replayed
            raise LookupError("a trial created without a template cannot be looked up after a lost answer")
        study_id = bound.arguments["study_id"]
        for trial in storage.get_all_trials(study_id, deepcopy=False):
            if trial.system_attrs.get(TRIAL_KEY) == key:
                return answer(study_id, trial)
        return NOT_LANDED

    return Unsafe(landed=landed, prepare=prepare)


def _set_state(storage: Any) -> Unsafe:
    bind = _binder(storage.set_trial_state_values)

    def landed(*args: Any, **kwargs: Any) -> Any:
        bound = bind(args, kwargs)
        state, values = bound.arguments["state"], bound.arguments.get("values")
        if not state.is_finished():  # a claim: replayed (see the module docstring)
            return NOT_LANDED
        trial = storage.get_trial(bound.arguments["trial_id"])
        same = trial.state == state and (values is None or list(trial.values or []) == list(values))
        return True if same else NOT_LANDED

    return Unsafe(landed=landed)
