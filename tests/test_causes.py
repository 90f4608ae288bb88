"""One-change cause runs: each differs from its base config in exactly the named field."""

from __future__ import annotations

import pytest

from fedbandits.config import config_from_dict
from fedbandits.experiments import EXPERIMENTS, get_experiment
from fedbandits.experiments.causes import (
    cause_config,
    cause_configs,
    config_diff,
    describe,
    wants_causes,
)
from fedbandits.experiments.claims import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, ClaimResult
from fedbandits.experiments.figures import Cause

BASE = {
    "experiment": {"name": "x", "seed": 1, "runs": 2, "horizon": 10},
    "environment": {"name": "gaussian-sphere", "agents": 2, "noise_sd": 0.5},
    "algorithms": [
        {"name": "fedlinucb", "label": "a", "calibration": "paper", "radius": "theory"},
        {"name": "fedlinucb", "label": "b"},
    ],
}


def _field_of(path: str) -> str:
    """``algorithms[3].calibration`` -> ``algorithms.calibration``."""
    section, _, rest = path.partition(".")
    return f"{section.partition('[')[0]}.{rest}"


@pytest.mark.parametrize("scale", ["tiny", "quick", "paper"])
@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_every_cause_changes_exactly_its_field(name: str, scale: str) -> None:
    experiment = get_experiment(name, scale)
    for cause in experiment.causes:
        (field,) = cause.change
        for (panel, base), (cause_panel, changed) in zip(
            experiment.configs(), cause_configs(experiment, cause), strict=True
        ):
            assert panel == cause_panel
            diff = list(config_diff(base, changed))
            assert diff, f"{name} / {cause.name} changes nothing"
            assert {_field_of(p) for p in diff} == {field}, (name, cause.name, diff)
            if scale == "tiny":  # the cause run is a valid config (every scale: tested by reproduce's check)
                config_from_dict(changed)


def test_causes_are_registered_where_claims_can_fail() -> None:
    with_causes = {n for n in EXPERIMENTS if get_experiment(n, "tiny").causes}
    assert with_causes == set(EXPERIMENTS) - {"liu-comm"}
    names = {c.name for c in get_experiment("zhou-fig2a", "tiny").causes}
    assert {"tight-calibration", "constant-radius", "theory-regularizer", "noise-sd-0.25"} <= names


def test_cause_config_changes_one_field_in_every_entry_that_states_it() -> None:
    changed = cause_config(BASE, Cause("t", {"algorithms.calibration": "tight"}, "tight"))
    assert list(config_diff(BASE, changed)) == ["algorithms[0].calibration"]
    assert BASE["algorithms"][0]["calibration"] == "paper"  # the base is not touched
    env = cause_config(BASE, Cause("n", {"environment.noise_sd": 0.25}, "sd"))
    assert list(config_diff(BASE, env)) == ["environment.noise_sd"]


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"algorithms.calibration": "tight", "algorithms.radius": "constant"}, "exactly one field, got 2"),
        ({}, "exactly one field, got 0"),
        ({"algorithms.beta": 2.0}, "not stated in the base config"),
        ({"environment.arms": 5}, "not stated in the base config"),
        ({"experiment.horizon": 5}, "must be 'environment.<field>' or 'algorithms.<field>'"),
        ({"calibration": "tight"}, "must be 'environment.<field>'"),
        ({"algorithms.calibration": "paper"}, "changes nothing"),
    ],
)
def test_invalid_causes_are_refused(change: dict, needle: str) -> None:
    with pytest.raises(ValueError, match="cause 'bad'") as info:
        cause_config(BASE, Cause("bad", change, "x"))
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_config_diff() -> None:
    assert list(config_diff(BASE, BASE)) == []
    other = {**BASE, "experiment": {**BASE["experiment"], "runs": 3, "extra": 1}}
    assert list(config_diff(BASE, other)) == ["experiment.extra", "experiment.runs"]
    assert list(config_diff({"a": [1, 2]}, {"a": [1, 2, 3]})) == ["a"]
    assert list(config_diff({"a": 1}, {"a": 1.0})) == ["a"]  # a type change is a change


def test_when_causes_run_and_what_the_report_says() -> None:
    experiment = get_experiment("zhou-fig2a", "tiny")
    ok, open_, bad = ClaimResult(REPRODUCED, "ok"), ClaimResult(INCONCLUSIVE, "?"), ClaimResult(NOT_REPRODUCED, "no")
    assert not wants_causes("unsettled", experiment, [ok, ok])
    assert wants_causes("unsettled", experiment, [ok, open_]) and wants_causes("unsettled", experiment, [bad])
    assert wants_causes("all", experiment, [ok]) and not wants_causes("none", experiment, [bad])
    assert not wants_causes("all", get_experiment("liu-comm", "tiny"), [bad])
    with pytest.raises(ValueError, match="causes must be one of"):
        wants_causes("some", experiment, [ok])
    cause = experiment.causes[0]
    assert describe(bad, cause, ok).startswith(f"the claimed ordering appears only when {cause.text}")
    assert describe(open_, cause, bad).startswith(f"does not appear when {cause.text}")
    assert "either" in describe(open_, cause, bad)
    assert describe(ok, cause, ok).startswith("still holds")
    assert describe(ok, cause, bad).startswith("holds in the base run but not")
