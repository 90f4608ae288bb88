"""One-change cause runs: each differs from its base config in exactly the named field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedbandits.config import config_from_dict
from fedbandits.experiments import EXPERIMENTS, get_experiment
from fedbandits.experiments.causes import (
    cause_claims,
    cause_config,
    cause_configs,
    causes_mode,
    claim_keys,
    config_diff,
    describe,
    entry_label,
    restrict,
    wants_causes,
)
from fedbandits.experiments.claims import INCONCLUSIVE, NOT_APPLICABLE, NOT_REPRODUCED, REPRODUCED, ClaimResult
from fedbandits.experiments.figures import Cause, Claim, Experiment
from fedbandits.experiments.panels import panel_key
from fedbandits.experiments.report import claim_lines, report
from fedbandits.experiments.reproduce import reproduce, run_one
from fedbandits.sim.results import Results
from fedbandits.sim.runner import run_experiment

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


# -- cause runs restricted to the claimed curves -----------------------------------------------
def _claim_subsets(experiment: Experiment) -> list[tuple[Claim, ...]]:
    """Every single claim, and all of them (as if every claim were unsettled)."""
    return [(c,) for c in experiment.claims] + [experiment.claims]


@pytest.mark.parametrize("scale", ["tiny", "paper"])
@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_restricted_cause_keeps_the_claimed_entries_changed_in_one_field(name: str, scale: str) -> None:
    # catches a kept entry changed in anything but the cause's field and its noise_stream, a
    # noise_stream other than the entry's base position, an entry dropped that a claim names (or kept
    # that none names), and a panel kept or dropped wrongly
    experiment = get_experiment(name, scale)
    for cause in experiment.causes:
        (path,) = cause.change
        section, _, field = path.partition(".")
        for claims in _claim_subsets(experiment):
            keys = claim_keys(claims)
            restricted = dict(cause_configs(experiment, cause, keys))
            for panel, base in experiment.configs():
                key = (lambda lab, p=panel: panel_key(p, lab)) if experiment.panels else (lambda lab: lab)
                named = [i for i, e in enumerate(base["algorithms"]) if key(entry_label(e)) in keys]
                if not named:
                    assert panel not in restricted, (name, cause.name, panel)
                    continue
                changed = restricted[panel]
                assert [entry_label(e) for e in changed["algorithms"]] == [
                    entry_label(base["algorithms"][i]) for i in named
                ]
                (value,) = cause.change.values()
                for i, entry in zip(named, changed["algorithms"], strict=True):
                    was = base["algorithms"][i]
                    assert entry["noise_stream"] == was.get("noise_stream", i)
                    expected = set() if "noise_stream" in was else {"noise_stream"}
                    if section == "algorithms" and field in was and was[field] != value:
                        expected.add(field)
                    assert {p.partition(".")[0] for p in config_diff(was, entry)} == expected, (name, cause.name)
                rest = {k: v for k, v in changed.items() if k != "algorithms"}
                others = {k: v for k, v in base.items() if k != "algorithms"}
                env_diff = list(config_diff(others, rest))
                assert env_diff == ([path] if section == "environment" else []), (name, cause.name, env_diff)
                if scale == "tiny":
                    config_from_dict(changed)
            # the restricted runs are exactly the full cause runs with the unnamed entries dropped
            for panel, full in cause_configs(experiment, cause):
                if panel in restricted:
                    labels = {entry_label(e) for e in restricted[panel]["algorithms"]}
                    assert restricted[panel] == restrict(full, labels)


def test_a_restricted_cause_states_the_field_on_the_whole_base() -> None:
    # the cause's field stated only by a dropped entry: refused neither here nor in reproduce, since
    # the full cause run is valid; the kept entry is the base's (what the full cause run plays for it)
    cause = Cause("t", {"algorithms.calibration": "tight"}, "tight")
    kept = cause_config(BASE, cause, {"b"})
    assert kept["algorithms"] == [{**BASE["algorithms"][1], "noise_stream": 1}]
    with pytest.raises(ValueError, match="changes nothing") as info:
        cause_config(BASE, Cause("bad", {"algorithms.calibration": "paper"}, "x"), {"b"})
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"labels \['zzz'\] name no algorithm entry of 'x'"):
        cause_config(BASE, cause, {"a", "zzz"})
    stated = copy.deepcopy(BASE)
    stated["algorithms"][1]["noise_stream"] = 9  # a stream stated already is kept
    assert cause_config(stated, cause, {"b"})["algorithms"][0]["noise_stream"] == 9


def test_entry_label_is_the_label_the_config_gives() -> None:
    entries = [
        {"name": "fedlinucb", "protocol": "ldp", "epsilon": 2.0, "batch": 5},
        {"name": "fedlinucb", "batch": 5},
        {"name": "fedlinucb", "label": "mine", "protocol": "ldp", "batch": 5},
    ]
    config = config_from_dict({**BASE, "algorithms": entries})
    assert [entry_label(e) for e in entries] == [a.label for a in config.algorithms]
    assert [a.label for a in config.algorithms] == ["fedlinucb ldp eps=2", "fedlinucb", "mine"]
    assert restrict({**BASE, "algorithms": entries}, {"fedlinucb ldp eps=2"})["algorithms"] == [
        {**entries[0], "noise_stream": 0}
    ]


PRIVATE: dict[str, Any] = {
    "experiment": {"name": "private", "seed": 11, "runs": 3, "horizon": 80, "runs_per_task": 2},
    "environment": {"name": "gaussian-sphere", "agents": 3, "arms": 5, "dim": 3, "noise_sd": 0.5},
    "algorithms": [
        {"name": "fedlinucb", "label": "ldp-a", "protocol": "ldp", "batch": 5, "epsilon": 1.0, "calibration": "paper"},
        {"name": "linucb-independent", "label": "alone"},
        {"name": "fedlinucb", "label": "ldp-b", "protocol": "ldp", "batch": 8, "epsilon": 2.0, "calibration": "paper"},
        {"name": "fedlinucb", "label": "ldp-c", "protocol": "ldp", "batch": 4, "epsilon": 4.0},
    ],
}
TIGHT = Cause("tight", {"algorithms.calibration": "tight"}, "the noise is calibrated tightly")


@pytest.mark.parametrize("labels", [{"ldp-b"}, {"ldp-c", "alone"}, {"ldp-a", "ldp-c"}])
def test_a_restricted_cause_run_plays_the_full_runs_curves_bit_for_bit(labels: set[str]) -> None:
    # catches a kept entry drawing other privacy noise (its position in the restricted config instead
    # of its base stream), or any dependence of a curve on the other entries
    full = run_experiment(config_from_dict(cause_config(PRIVATE, TIGHT)), workers=1)
    restricted_config = cause_config(PRIVATE, TIGHT, labels)
    restricted = run_experiment(config_from_dict(restricted_config), workers=1)
    assert set(restricted.algorithms) == labels
    for lab in labels:
        a, b = full.algorithms[lab], restricted.algorithms[lab]
        for what in ("curves", "per_agent", "sync_rounds", "messages", "bytes_sent"):
            assert np.array_equal(getattr(a, what), getattr(b, what)), (lab, what)
    # the streams are what makes it so: without them a private entry at another position draws other noise
    positions = {entry_label(e): i for i, e in enumerate(PRIVATE["algorithms"])}
    kept = [entry_label(e) for e in restricted_config["algorithms"]]
    shifted = [lab for j, lab in enumerate(kept) if lab != "alone" and positions[lab] != j]
    assert shifted  # every parametrisation moves a private entry
    plain = copy.deepcopy(restricted_config)
    for e in plain["algorithms"]:
        del e["noise_stream"]
    moved = run_experiment(config_from_dict(plain), workers=1)
    for lab in shifted:
        assert not np.array_equal(full.algorithms[lab].curves, moved.algorithms[lab].curves), lab


def _experiment(claims: tuple[Claim, ...]) -> Experiment:
    config = copy.deepcopy(PRIVATE)
    config["experiment"]["runs"] = 1  # one run: a lower_than claim is inconclusive (unsettled) by construction
    return Experiment("private", "t", "p", "Figure 0", "tiny", config, claims, causes=(TIGHT,))


def test_run_one_plays_only_the_unsettled_claims_curves(tmp_path: Path) -> None:
    # catches cause runs that replay every entry, check claims they do not play (a crash or a "not
    # applicable" line), or give a settled claim a cause line
    claims = (
        Claim("c lower than b", "lower_than", ("ldp-c", "ldp-b")),  # inconclusive with one run: unsettled
        Claim("alone lower than a ghost", "lower_than", ("alone", "ghost")),  # not applicable: settled
    )
    experiment = _experiment(claims)
    outcome = run_one(experiment, tmp_path, workers=1, causes="unsettled")
    assert [r.status for r in outcome.claims] == [INCONCLUSIVE, NOT_APPLICABLE]
    (cause,) = outcome.causes
    assert cause.checked() == [0] and cause.claims[1] is None and cause.claims[0] is not None
    played = config_from_dict(cause_config(experiment.config, TIGHT))
    full = run_experiment(played, workers=1)
    saved = Results.load(cause.folder)
    assert list(saved.algorithms) == ["ldp-b", "ldp-c"]
    assert (cause.folder / "figure.png").is_file()  # drawn with the fewer curves
    for lab in saved.algorithms:
        assert np.array_equal(saved.algorithms[lab].curves, full.algorithms[lab].curves)
    lines = claim_lines(outcome)
    assert sum(line.startswith("  * Cause") for line in lines) == 1
    assert lines.index(next(li for li in lines if li.startswith("  * Cause"))) == 1  # under the first claim
    text = report([outcome], "tiny", 1.0)
    assert "checks 1 of 2 claim(s)" in text and "not applicable" not in text.split("Cause runs")[1]
    everything = run_one(experiment, tmp_path / "all", workers=1, causes="all")
    assert everything.causes[0].checked() == [0]  # "all": the ghost claim names an entry no run plays
    assert list(Results.load(everything.causes[0].folder).algorithms) == ["alone", "ldp-b", "ldp-c"]


def test_cause_claims() -> None:
    ok, open_, bad = ClaimResult(REPRODUCED, "ok"), ClaimResult(INCONCLUSIVE, "?"), ClaimResult(NOT_REPRODUCED, "no")
    assert cause_claims("unsettled", [ok, open_, bad]) == [1, 2]
    assert cause_claims("all", [ok, open_]) == [0, 1] and cause_claims("none", [bad]) == []
    with pytest.raises(ValueError, match="causes must be one of"):
        cause_claims("some", [ok])


def test_causes_mode_defaults_by_scale() -> None:
    # the scales that settle claims run the unsettled claims' causes; quick and tiny (for trying the
    # tool: few runs, nearly every claim unsettled) run none unless asked
    assert causes_mode(None, "paper") == causes_mode(None, "published") == "unsettled"
    assert causes_mode(None, "quick") == causes_mode(None, "tiny") == "none"
    assert causes_mode("all", "quick") == "all" and causes_mode("none", "paper") == "none"
    with pytest.raises(ValueError, match="causes must be one of"):
        causes_mode("some", "quick")


def test_reproduce_runs_no_causes_at_the_tiny_scale_by_default(tmp_path: Path, figure_data: list[str]) -> None:
    """zhou-fig3d reads the MSLR sample: a generated look-alike where it is absent (conftest)."""
    (outcome,) = reproduce("zhou-fig3d", "tiny", out=tmp_path, workers=1)
    # some claim is unsettled, so "unsettled" (the paper scale's default) would have run the causes
    assert outcome.experiment.causes and any(r.status in (INCONCLUSIVE, NOT_REPRODUCED) for r in outcome.claims)
    assert not outcome.causes
    assert not (tmp_path / "zhou-fig3d" / "causes").exists()
