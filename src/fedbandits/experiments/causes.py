"""One-change cause runs: is a claim's ordering there only when one field of the setting changes?

An :class:`~fedbandits.experiments.figures.common.Experiment` declares ``causes``: named variants
that each change exactly one field of its config -- an environment field (e.g. the reward noise)
or a field of its algorithms (e.g. ``calibration = "paper"`` -> ``"tight"``, ``radius =
"theory"`` -> ``"constant"``), set to the new value in every algorithm entry that states it.
Everything else -- seed, runs, horizon, labels -- is the base run's, so a cause run plays the same
contexts and reward noise (common random numbers) and the same claims are checked on it.

When they run (``reproduce(..., causes=...)``, ``--causes`` on the command line):

* ``"unsettled"`` (default): the causes of every experiment with a claim that is not reproduced
  or inconclusive -- the question "is the figure reachable at all, and under what change?" is
  the same for both;
* ``"all"``: the causes of every experiment that declares some;
* ``"none"``: no cause runs.

:func:`describe` turns a claim's status under the base and a cause into the report's sentence
("the claimed ordering appears only when ..." / "does not appear with ... either").
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

from fedbandits.experiments.claims import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, ClaimResult
from fedbandits.experiments.figures.common import Cause, Experiment

CAUSE_MODES = ("unsettled", "all", "none")
SECTIONS = ("environment", "algorithms")


def _parse(cause: Cause) -> tuple[str, str, Any]:
    if len(cause.change) != 1:
        fields = ", ".join(cause.change) or "none"
        raise ValueError(f"cause {cause.name!r} must change exactly one field, got {len(cause.change)}: {fields}")
    ((path, value),) = cause.change.items()
    section, _, name = path.partition(".")
    if section not in SECTIONS or not name or "." in name:
        raise ValueError(f"cause {cause.name!r}: field {path!r} must be 'environment.<field>' or 'algorithms.<field>'")
    return section, name, value


def cause_config(base: Mapping[str, Any], cause: Cause) -> dict[str, Any]:
    """A deep copy of ``base`` with the one field of ``cause`` changed; a one-line ValueError otherwise.

    Refused: a cause naming no field or several, a field the base does not state (in the
    environment, or in any algorithm entry), and a change that leaves the config as it was.
    """
    section, name, value = _parse(cause)
    config = copy.deepcopy(dict(base))
    targets = [config["environment"]] if section == "environment" else list(config["algorithms"])
    stated = [entry for entry in targets if name in entry]
    if not stated:
        raise ValueError(
            f"cause {cause.name!r}: {section}.{name} is not stated in the base config of "
            f"{base['experiment']['name']!r}; a cause changes a field the base sets"
        )
    if all(entry[name] == value for entry in stated):
        raise ValueError(f"cause {cause.name!r}: {section}.{name} is {value!r} already; the cause changes nothing")
    for entry in stated:
        entry[name] = copy.deepcopy(value)
    return config


def cause_configs(experiment: Experiment, cause: Cause) -> list[tuple[str, dict[str, Any]]]:
    """(panel, config) of every environment of ``experiment`` with ``cause`` applied."""
    return [(panel, cause_config(raw, cause)) for panel, raw in experiment.configs()]


def config_diff(a: Any, b: Any, path: str = "") -> Iterator[str]:
    """The paths (``algorithms[2].calibration``) at which two config dicts differ, deeply."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b)):
            sub = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                yield sub
            else:
                yield from config_diff(a[key], b[key], sub)
    elif isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from config_diff(x, y, f"{path}[{i}]")
    elif a != b or type(a) is not type(b):
        yield path


def wants_causes(mode: str, experiment: Experiment, claims: list[ClaimResult]) -> bool:
    """Should ``experiment``'s cause runs run, given its claims' results and the mode?"""
    if mode not in CAUSE_MODES:
        raise ValueError(f"causes must be one of {', '.join(map(repr, CAUSE_MODES))}, got {mode!r}")
    if mode == "none" or not experiment.causes:
        return False
    return mode == "all" or any(c.status in (NOT_REPRODUCED, INCONCLUSIVE) for c in claims)


def describe(base: ClaimResult, cause: Cause, result: ClaimResult) -> str:
    """One sentence: what changing only ``cause``'s field does to a claim."""
    change = f"({', '.join(f'{k} = {v!r}' for k, v in cause.change.items())})"
    if base.status == REPRODUCED:
        if result.status == REPRODUCED:
            return f"still holds when {cause.text} {change}"
        return f"holds in the base run but not when {cause.text} {change}: **{result.status}**; {result.explanation}"
    if result.status == REPRODUCED:
        return f"the claimed ordering appears only when {cause.text} {change}: {result.explanation}"
    return f"does not appear when {cause.text} {change} either: **{result.status}**; {result.explanation}"
