"""One-change cause runs: is a claim's ordering there only when one field of the setting changes?

An :class:`~fedbandits.experiments.figures.common.Experiment` declares ``causes``: named variants
that each change exactly one field of its config -- an environment field (e.g. the reward noise)
or a field of its algorithms (e.g. ``calibration = "paper"`` -> ``"tight"``, ``radius =
"theory"`` -> ``"constant"``), set to the new value in every algorithm entry that states it.
Everything else -- seed, runs, horizon, labels -- is the base run's, so a cause run plays the same
contexts and reward noise (common random numbers) and the same claims are checked on it.

A cause run plays only the curves its claims compare: :func:`cause_config` with ``labels`` keeps
the algorithm entries of those labels (every panel of a multi-panel experiment restricted to its
own claimed labels, a panel with none left out) and states each kept entry's ``noise_stream``
as its position in the base config, so every kept curve is bit for bit the one the full cause
run would give (the environment's draws never depend on the algorithms, and each entry's privacy
noise depends only on its stream).  ``reproduce`` runs the causes on the labels of the claims
:func:`cause_claims` selects and checks under a cause only those claims.

When they run (``reproduce(..., causes=...)``, ``--causes`` on the command line):

* ``"unsettled"``: the causes of every experiment with a claim that is not reproduced or
  inconclusive -- the question "is the figure reachable at all, and under what change?" is the
  same for both;
* ``"all"``: the causes of every experiment that declares some;
* ``"none"``: no cause runs.

The default (None, :func:`causes_mode`) is ``"unsettled"`` at the scales that settle claims
(``paper``, ``published``) and ``"none"`` at ``quick`` and ``tiny``, which are for trying the tool:
with their few runs most claims are unsettled, so the cause runs would replay the unsettled claims'
curves of nearly every figure once per cause: at the quick scale they took 2.3 times the base runs'
compute (the whole run took 3.3 times as long), for verdicts with as few
runs as the base run's.

:func:`describe` turns a claim's status under the base and a cause into the report's sentence
("the claimed ordering appears only when ..." / "does not appear with ... either").
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any

from fedbandits.config import algorithm_label
from fedbandits.experiments.claims import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, ClaimResult
from fedbandits.experiments.figures.common import Cause, Claim, Experiment
from fedbandits.experiments.panels import table_key

CAUSE_MODES = ("unsettled", "all", "none")
#: the scales at which the default is to run the cause runs of the unsettled claims
CAUSE_SCALES = ("paper", "published")
SECTIONS = ("environment", "algorithms")
#: the statuses of a claim that is not settled: its experiment's cause runs are for it
UNSETTLED = (NOT_REPRODUCED, INCONCLUSIVE)


def _parse(cause: Cause) -> tuple[str, str, Any]:
    if len(cause.change) != 1:
        fields = ", ".join(cause.change) or "none"
        raise ValueError(f"cause {cause.name!r} must change exactly one field, got {len(cause.change)}: {fields}")
    ((path, value),) = cause.change.items()
    section, _, name = path.partition(".")
    if section not in SECTIONS or not name or "." in name:
        raise ValueError(f"cause {cause.name!r}: field {path!r} must be 'environment.<field>' or 'algorithms.<field>'")
    return section, name, value


def entry_label(entry: Mapping[str, Any]) -> str:
    """An algorithm entry's label as the config reads it (:func:`fedbandits.config.algorithm_label`:
    when it states none, its name and, for a private entry, protocol and epsilon -- so a cause that
    changes the epsilon of an unlabelled entry changes its label: label the entries a claim names)."""
    return str(entry["label"]) if "label" in entry else algorithm_label(dict(entry))


def restrict(config: Mapping[str, Any], labels: Collection[str]) -> dict[str, Any]:
    """A deep copy of ``config`` with only the algorithm entries labelled in ``labels``, in their order,
    each with ``noise_stream`` = its 0-based position in ``config`` unless it states one already
    (so it draws the privacy noise it drew in ``config``); a one-line ValueError for a label that
    names no entry."""
    entries = list(config["algorithms"])
    have = [entry_label(e) for e in entries]
    missing = sorted(set(labels) - set(have))
    if missing:
        raise ValueError(f"labels {missing} name no algorithm entry of {config['experiment']['name']!r}; have {have}")
    restricted = copy.deepcopy(dict(config))
    restricted["algorithms"] = [
        {**copy.deepcopy(dict(e)), "noise_stream": i if e.get("noise_stream") is None else e["noise_stream"]}
        for i, e in enumerate(entries)
        if entry_label(e) in labels
    ]
    return restricted


def cause_config(base: Mapping[str, Any], cause: Cause, labels: Collection[str] | None = None) -> dict[str, Any]:
    """A deep copy of ``base`` with the one field of ``cause`` changed; a one-line ValueError otherwise.

    Refused: a cause naming no field or several, a field the base does not state (in the
    environment, or in any algorithm entry), and a change that leaves the config as it was.

    ``labels``: play only the algorithm entries with these labels (:func:`restrict`: each kept entry
    keeps its base noise stream).  Whether the field is stated, and whether the cause changes
    something, is judged on the *whole* base, not on the kept entries: the restricted run is then
    exactly the full cause run with the other entries dropped -- valid exactly when the full one is,
    whichever claims turn out unsettled (so ``reproduce`` can refuse a bad cause before any run) --
    and if the field is stated only by dropped entries, the kept curves are the base run's, which is
    what the full cause run gives for them too.
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
    return config if labels is None else restrict(config, labels)


def claim_keys(claims: Iterable[Claim]) -> set[str]:
    """The table keys (labels, or ``"<panel> / <label>"``) that ``claims`` compare."""
    return {key for claim in claims for key in claim.args}


def panel_labels(panel: str, config: Mapping[str, Any], keys: Collection[str]) -> set[str]:
    """The labels of ``panel``'s entries among ``keys`` (claim table keys: see
    :func:`fedbandits.experiments.panels.table_key`)."""
    have = {entry_label(e) for e in config["algorithms"]}
    return {lab for lab in have if table_key(panel, lab) in keys}


def cause_configs(
    experiment: Experiment, cause: Cause, keys: Collection[str] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """(panel, config) of every environment of ``experiment`` with ``cause`` applied.

    ``keys`` (claim table keys, see :func:`claim_keys`): restrict each panel to the entries they
    name and leave out a panel they name none of (its config is still built, so a bad cause is
    refused whatever the keys); a key naming no entry (a claim not applicable to the experiment)
    is ignored.  None: every entry of every panel.
    """
    configs = []
    for panel, raw in experiment.configs():
        full = cause_config(raw, cause)
        if keys is None:
            configs.append((panel, full))
            continue
        labels = panel_labels(panel, raw, keys)
        if labels:
            configs.append((panel, restrict(full, labels)))
    return configs


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


def causes_mode(mode: str | None, scale: str) -> str:
    """``mode``, or for None the default at ``scale`` (see the module docstring); a one-line ValueError
    for an unknown mode."""
    if mode is None:
        return "unsettled" if scale in CAUSE_SCALES else "none"
    if mode not in CAUSE_MODES:
        raise ValueError(f"causes must be one of {', '.join(map(repr, CAUSE_MODES))}, got {mode!r}")
    return mode


def wants_causes(mode: str, experiment: Experiment, claims: list[ClaimResult]) -> bool:
    """Should ``experiment``'s cause runs run, given its claims' results and the mode?"""
    return bool(cause_claims(mode, claims)) and bool(experiment.causes)


def cause_claims(mode: str, claims: list[ClaimResult]) -> list[int]:
    """The indices of the claims the cause runs are for: every claim (``"all"``), the unsettled ones
    (``"unsettled"``: not reproduced or inconclusive in the base run) or none (``"none"``)."""
    if mode not in CAUSE_MODES:
        raise ValueError(f"causes must be one of {', '.join(map(repr, CAUSE_MODES))}, got {mode!r}")
    if mode == "none":
        return []
    return [i for i, c in enumerate(claims) if mode == "all" or c.status in UNSETTLED]


def describe(base: ClaimResult, cause: Cause, result: ClaimResult, final: ClaimResult | None = None) -> str:
    """One sentence: what changing only ``cause``'s field does to a claim (``base``: its result in the base
    run, which has the cause run's runs; ``final``: its verdict with more runs, when a powered rerun
    settled it -- a claim reproduced with more runs does not appear "only" under the cause, and a cause
    run that leaves it unsettled speaks of the base run's runs only)."""
    change = f"({', '.join(f'{k} = {v!r}' for k, v in cause.change.items())})"
    if base.status == REPRODUCED:
        if result.status == REPRODUCED:
            return f"still holds when {cause.text} {change}"
        return f"holds in the base run but not when {cause.text} {change}: **{result.status}**; {result.explanation}"
    if result.status == REPRODUCED and final is not None and final.status == REPRODUCED:
        return (
            f"with the base run's runs the claimed ordering is significant when {cause.text} {change} "
            f"(with more runs it is without the change too): {result.explanation}"
        )
    if result.status == REPRODUCED:
        return f"the claimed ordering appears only when {cause.text} {change}: {result.explanation}"
    if final is not None and final.status == REPRODUCED:
        return (
            f"with the base run's runs it does not appear when {cause.text} {change} either "
            f"(more runs reproduce it without the change): **{result.status}**; {result.explanation}"
        )
    return f"does not appear when {cause.text} {change} either: **{result.status}**; {result.explanation}"
