"""Powered reruns: an inconclusive claim checked again with the runs its power statement asks for;
and what a resumed run says it loaded."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedbandits.config import config_from_dict
from fedbandits.experiments import get_experiment
from fedbandits.experiments.causes import config_diff, describe
from fedbandits.experiments.claims import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, ClaimResult, check, lower_than
from fedbandits.experiments.figures import Cause, Claim, Experiment
from fedbandits.experiments.outcome import Outcome
from fedbandits.experiments.page import page_text
from fedbandits.experiments.panels import panel_key
from fedbandits.experiments.power import power_statement
from fedbandits.experiments.powered import fresh_table, powered_configs, powered_mode
from fedbandits.experiments.report import report
from fedbandits.experiments.reproduce import claim_tables, reproduce, run_one
from fedbandits.sim.results import AlgorithmResult, Results
from fedbandits.sim.runner import run_experiment

PRIVATE: dict[str, Any] = {
    "experiment": {"name": "powered", "seed": 5, "runs": 4, "horizon": 60, "runs_per_task": 2},
    "environment": {"name": "gaussian-sphere", "agents": 3, "arms": 5, "dim": 3, "noise_sd": 0.5},
    "algorithms": [
        {"name": "fedlinucb", "label": "ldp-a", "protocol": "ldp", "batch": 5, "epsilon": 1.0},
        {"name": "linucb-independent", "label": "alone"},
        {"name": "fedlinucb", "label": "ldp-b", "protocol": "ldp", "batch": 5, "epsilon": 1.2},
    ],
}
#: two private curves that differ only a little (epsilon 1 vs 1.2): inconclusive with 4 runs at seed 5
CLAIM = Claim("ldp-b lower than ldp-a", "lower_than", ("ldp-b", "ldp-a"))


def _experiment() -> Experiment:
    return Experiment("powered", "t", "p", "Figure 0", "tiny", copy.deepcopy(PRIVATE), (CLAIM,))


def test_powered_configs_change_only_the_runs_and_the_curves() -> None:
    experiment = _experiment()
    ((panel, config),) = powered_configs(experiment, 0, 40)
    assert panel == "" and config["experiment"]["runs"] == 40
    assert [e["label"] for e in config["algorithms"]] == ["ldp-a", "ldp-b"]
    assert [e["noise_stream"] for e in config["algorithms"]] == [0, 2]  # their base positions
    base = copy.deepcopy(PRIVATE)
    base["algorithms"] = [{**base["algorithms"][0], "noise_stream": 0}, {**base["algorithms"][2], "noise_stream": 2}]
    assert list(config_diff(base, config)) == ["experiment.runs"]
    assert PRIVATE["experiment"]["runs"] == 4  # the base is not touched
    for index, runs in ((1, 40), (-1, 40), (0, 1), (0, 2.5), (0, True)):
        with pytest.raises(ValueError, match=r"claim index|runs must be"):
            powered_configs(experiment, index, runs)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["dubey-fig1a", "dubey-fig1c", "dubey-fig1b"])
def test_powered_configs_of_a_multi_panel_figure_keep_only_the_panels_of_the_claim(name: str) -> None:
    experiment = get_experiment(name, "tiny")
    assert bool(experiment.panels) == (name != "dubey-fig1b")
    for i, claim in enumerate(experiment.claims):
        configs = powered_configs(experiment, i, 9)
        assert configs and all(c["experiment"]["runs"] == 9 for _, c in configs)
        played = {(p, e.get("label", e["name"])) for p, c in configs for e in c["algorithms"]}
        assert {(panel_key(p, lab) if p else lab) for p, lab in played} == set(claim.args)
    if name == "dubey-fig1a":  # its first claim compares the curves of one panel: only that panel is rerun
        assert [p for p, _ in powered_configs(experiment, 0, 9)] == ["M=4"]


def _fake(labels: list[str], env: float, each: float) -> Results:
    config = config_from_dict(
        {
            "experiment": {"name": "f", "runs": 2, "horizon": 10},
            "environment": {"name": "gaussian-sphere", "agents": 2},
            "algorithms": [{"name": "linucb-independent", "label": lab} for lab in labels],
        }
    )
    algorithms = {
        lab: AlgorithmResult("linucb-independent", lab, *(np.zeros((2, 1)),) * 2, *(np.zeros(2),) * 3, each)
        for lab in labels
    }
    return Results(config, np.array([10]), algorithms, wall_seconds=1.0, env_seconds=env)


def test_claim_compute_seconds_counts_the_claims_panels_and_curves() -> None:
    # catches counting the whole experiment (every curve, every panel) or keys built unlike the claim tables
    experiment = get_experiment("dubey-fig1a", "tiny")
    panels = {
        p: _fake([e.get("label", e["name"]) for e in raw["algorithms"]], 10.0, 1.0) for p, raw in experiment.configs()
    }
    outcome = Outcome(experiment, next(iter(panels.values())), [], Path("."), panels)
    for i, claim in enumerate(experiment.claims):
        touched = {key.split(" / ")[0] for key in claim.args}
        assert outcome.claim_compute_seconds(i) == pytest.approx(10.0 * len(touched) + 1.0 * len(claim.args))
    total = sum(10.0 + len(r.algorithms) for r in panels.values())
    assert outcome.base_cost.compute == pytest.approx(total)
    untimed = _fake(["ldp-a", "ldp-b"], float("nan"), 1.0)  # no environment time recorded: the cost is unknown
    assert math.isnan(Outcome(_experiment(), untimed, [], Path("."), {"": untimed}).claim_compute_seconds(0))


def test_the_page_states_the_commands_wall_time_not_the_sum_of_overlapping_figures() -> None:
    # two figures of 1 s wall each (_fake): one after another the command took their sum, 2 s; on one
    # shared pool they overlapped, and the command took 1.5 s
    figure = Experiment("wall", "t", "p", "Figure 0", "tiny", copy.deepcopy(PRIVATE), ())  # no claims
    outcomes = [Outcome(figure, r, [], Path("."), {"": r}) for r in (_fake(["a"], 1.0, 1.0),) * 2]
    summed = page_text(outcomes, "tiny", "cmd", ["x.png"] * 2, "none", "none")
    assert "Wall time: 2 s (simulation" in summed and "overlap" not in summed
    sequential = page_text(outcomes, "tiny", "cmd", ["x.png"] * 2, "none", "none", wall_seconds=2.0)
    assert sequential == summed
    shared = page_text(outcomes, "tiny", "cmd", ["x.png"] * 2, "none", "none", wall_seconds=1.5)
    assert "Wall time: 2 s (simulation" in shared  # 1.5 s rounds to 2 s: the sentence tells them apart
    assert "each figure's wall time below spans the time its tasks shared the workers" in shared
    assert "Wall time: 90 s" in page_text(outcomes, "tiny", "cmd", ["x.png"] * 2, "none", "none", 90.0)


def test_an_unknown_cost_is_not_affordable() -> None:
    result = lower_than({"a": np.array([1.0, 2.0, 3.0]), "b": np.array([1.1, 2.5, 2.9])}, "a", "b")
    assert result.status == INCONCLUSIVE
    statement = power_statement(result, float("nan"))
    assert statement is not None and statement.seconds_needed is None and not statement.affordable
    assert "its cost is unknown" in statement.text()


def test_an_affordable_inconclusive_claim_is_rerun_with_the_runs_it_needs(tmp_path: Path) -> None:
    experiment = _experiment()
    outcome = run_one(experiment, tmp_path, workers=1, causes="none", powered="affordable")
    (base,) = outcome.claims
    assert base.status == INCONCLUSIVE  # the setting above is chosen so (fixed seed)
    statement = power_statement(base, outcome.claim_compute_seconds(0))
    assert statement is not None and statement.affordable and statement.runs_needed is not None
    (rerun,) = outcome.powered
    assert rerun.claim == 0 and rerun.runs == statement.runs_needed > 4
    assert rerun.folder == tmp_path / "powered" / "powered" / "claim-1"
    saved = Results.load(rerun.folder)
    assert list(saved.algorithms) == ["ldp-a", "ldp-b"] and saved.config.experiment.runs == 4 + rerun.runs
    # its first runs are the base run's runs of those curves, bit for bit (same streams, same draws)
    for lab in ("ldp-a", "ldp-b"):
        assert np.array_equal(saved.algorithms[lab].curves[:4], outcome.results.algorithms[lab].curves)
    # the verdict reads the fresh runs only: not the replayed base runs, not all of them
    fresh = check(CLAIM.kind, fresh_table(claim_tables({"": saved})["regret"], 4), CLAIM.args)
    assert (fresh.status, fresh.explanation) == (rerun.result.status, rerun.result.explanation)
    assert f"(mean over {rerun.runs} runs)" in rerun.result.explanation
    assert fresh_table({"x": np.arange(6.0)}, 4)["x"].tolist() == [4.0, 5.0]
    assert outcome.verdict(0) is rerun.result and rerun.cost.compute > 0 and rerun.cost.resumed_tasks == 0
    text = report([outcome], "tiny", 1.0)
    assert f"**{INCONCLUSIVE}**, with {rerun.runs} fresh runs: **{rerun.result.status}**" in text
    assert f"With {rerun.runs} fresh runs (the claim's curves alone, after the base runs replayed" in text
    page = page_text([outcome], "tiny", "cmd", ["x.png"], "none", "affordable")
    assert f"with {rerun.runs} fresh runs: **{rerun.result.status}**" in page
    assert "(made with `--powered none`)" not in page and "verdicts (after the powered reruns)" in page
    assert "with the 1 powered rerun: 1 " + rerun.result.status in page
    assert "--powered affordable" in page  # not the tiny scale's default: the figure's command says so


def test_no_rerun_when_not_affordable_or_not_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    experiment = _experiment()
    assert run_one(experiment, tmp_path / "none", workers=1, causes="none", powered="none").powered == []
    assert run_one(experiment, tmp_path / "default", workers=1, causes="none").powered == []  # tiny: none
    monkeypatch.setattr("fedbandits.experiments.power.AFFORDABLE_SECONDS", 0.0)
    outcome = run_one(experiment, tmp_path / "poor", workers=1, causes="none", powered="affordable")
    assert outcome.powered == [] and not (tmp_path / "poor" / "powered" / "powered").exists()
    text = page_text([outcome], "tiny", "cmd", ["x.png"], "none", "none")
    assert "made without the powered reruns (`--powered none`)" in text
    assert "Not rerun for this page" not in text  # not affordable here: nothing was left out
    monkeypatch.undo()
    text = page_text([outcome], "tiny", "cmd", ["x.png"], "none", "none")
    assert "  * Not rerun for this page (made with `--powered none`)." in text  # affordable, left out


def test_results_saved_before_the_task_counts_load(tmp_path: Path) -> None:
    results = run_experiment(config_from_dict(copy.deepcopy(PRIVATE)), workers=1)
    results.save(tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    for key in ("tasks", "resumed_tasks", "resumed_seconds"):
        del summary[key]
    (tmp_path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    old = Results.load(tmp_path)
    assert (old.tasks, old.resumed_tasks, old.resumed_seconds) == (0, 0, 0.0)
    assert old.compute_seconds == pytest.approx(results.compute_seconds)


def test_a_cause_line_is_not_only_when_more_runs_reproduce_the_claim() -> None:
    base = ClaimResult(INCONCLUSIVE, "t = 1")
    under = ClaimResult(REPRODUCED, "t = 3")
    cause = Cause("c", {"algorithms.radius": "constant"}, "the radius is constant")
    assert "appears only when the radius is constant" in describe(base, cause, under)
    settled = describe(base, cause, under, ClaimResult(REPRODUCED, "t = 2"))
    assert "only" not in settled and "with more runs it is without the change too" in settled
    assert "appears only when" in describe(base, cause, under, ClaimResult(NOT_REPRODUCED, "t = -2"))
    # a cause run that leaves the claim open says so of the base run's runs when more runs reproduce it
    still_open = ClaimResult(INCONCLUSIVE, "t = 0.5")
    line = describe(base, cause, still_open, ClaimResult(REPRODUCED, "t = 2"))
    assert line.startswith("with the base run's runs it does not appear when the radius is constant")
    assert "more runs reproduce it without the change" in line and "t = 0.5" in line
    assert describe(base, cause, still_open, ClaimResult(INCONCLUSIVE, "t = 1")).startswith("does not appear when")


def test_powered_modes() -> None:
    assert powered_mode(None, "paper") == powered_mode(None, "published") == "affordable"
    assert powered_mode(None, "quick") == powered_mode(None, "tiny") == "none"
    assert powered_mode("none", "paper") == "none"
    with pytest.raises(ValueError, match="powered must be one of 'affordable', 'none', got 'some'"):
        powered_mode("some", "paper")
    with pytest.raises(ValueError, match="powered must be one of"):
        reproduce("zhou-fig3d", "tiny", powered="some")


def test_a_resumed_run_says_what_it_loaded(tmp_path: Path) -> None:
    # catches a resumed page claiming the short wall time of loading as the cost of its runs
    config = config_from_dict(copy.deepcopy(PRIVATE))
    first = run_experiment(config, workers=1, checkpoint=tmp_path / "ck")
    assert (first.tasks, first.resumed_tasks, first.resumed_seconds) == (2, 0, 0.0)
    again = run_experiment(config, workers=1, checkpoint=tmp_path / "ck", resume=True)
    assert (again.tasks, again.resumed_tasks) == (2, 2)
    assert again.resumed_seconds == pytest.approx(first.compute_seconds) and again.resumed_seconds > 0
    assert again.compute_seconds == pytest.approx(first.compute_seconds)
    again.save(tmp_path / "saved")
    loaded = Results.load(tmp_path / "saved")
    assert (loaded.tasks, loaded.resumed_tasks) == (2, 2)
    assert loaded.resumed_seconds == pytest.approx(again.resumed_seconds)
    assert loaded.compute_seconds == pytest.approx(again.compute_seconds)
