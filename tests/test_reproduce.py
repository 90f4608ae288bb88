"""Reproductions of published figures: the registry, the claim checks, the runner and the CLI."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from io import StringIO
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from fedbandits.cli import main
from fedbandits.config import config_from_dict
from fedbandits.envs.datahome import DATA_ENV
from fedbandits.experiments import EXPERIMENTS, get_experiment, reproduce
from fedbandits.experiments.causes import config_diff
from fedbandits.experiments.claims import (
    INCONCLUSIVE,
    NOT_APPLICABLE,
    NOT_REPRODUCED,
    REPRODUCED,
    check,
    critical_t,
    decreasing,
    lower_than,
    paired_t,
    sublinear,
)
from fedbandits.experiments.page import write_page
from fedbandits.experiments.reproduce import claim_tables

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BASE = np.array([100.0, 120.0, 90.0, 110.0, 105.0, 95.0, 115.0, 85.0])
NOISE = np.array([1.0, -2.0, 0.5, 1.5, -1.0, 2.0, -0.5, -1.5])


@pytest.fixture(scope="module", autouse=True)
def figure_data(figure_data_home: tuple[Path, list[str]]) -> Iterator[list[str]]:
    """The data home the figures read (conftest's figure_data_home: the real MSLR sample and MovieLens
    ratings where present, a generated look-alike of each one absent), so the MSLR and MovieLens figures
    (zhou-fig2c, 3c, 3d, liu-fig2b) run end to end on every clone; these tests check what a
    reproduction writes, never the real numbers.  Yields the names of the generated data sets."""
    home, generated = figure_data_home
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(DATA_ENV, str(home))
        yield generated


# -- claim checks ----------------------------------------------------------------------------
def test_lower_than_holds_fails_and_inconclusive() -> None:
    table = {"a": BASE - 10 + NOISE, "b": BASE, "same": BASE + NOISE}
    held = lower_than(table, "a", "b")
    assert held.status == REPRODUCED and held.numbers["t"] > held.numbers["threshold"] > 0
    assert held.numbers["runs"] == 8 and math.isclose(held.numbers["mean difference (b - a)"], 10 - NOISE.mean())
    failed = lower_than(table, "b", "a")
    assert failed.status == NOT_REPRODUCED and "opposite" in failed.explanation
    assert lower_than(table, "same", "b").status == INCONCLUSIVE


def test_pairing_matters() -> None:
    # b - a is a constant 1 per run: significant although the spread over runs is large
    table = {"a": BASE, "b": BASE + 1.0 + 0.01 * NOISE}
    assert lower_than(table, "a", "b").status == REPRODUCED


def test_edge_cases() -> None:
    assert lower_than({"a": [1.0], "b": [2.0]}, "a", "b").status == INCONCLUSIVE
    assert paired_t(np.array([1.0, 1.0]), np.array([2.0, 2.0])) == math.inf
    assert paired_t(np.array([1.0, 1.0]), np.array([1.0, 1.0])) == 0.0
    assert critical_t(8) == pytest.approx(1.8946, abs=1e-3)
    with pytest.raises(ValueError, match="paired"):
        lower_than({"a": [1.0, 2.0], "b": [1.0]}, "a", "b")
    assert check("lower_than", {"a": [1.0]}, ("a", "zzz")).status == NOT_APPLICABLE


def test_decreasing() -> None:
    down = {"e1": BASE + 40, "e2": BASE + 20 + NOISE, "e3": BASE - NOISE}
    assert decreasing(down, ["e1", "e2", "e3"]).status == REPRODUCED
    up = {"e1": BASE, "e2": BASE + 20 + NOISE, "e3": BASE + 40}
    res = decreasing(up, ["e1", "e2", "e3"])
    assert res.status == NOT_REPRODUCED and len(res.numbers["step t"]) == 2
    flat = {"e1": BASE + 20, "e2": BASE + 20 + NOISE, "e3": BASE}
    assert decreasing(flat, ["e1", "e2", "e3"]).status == INCONCLUSIVE


def _curves(shape: np.ndarray) -> SimpleNamespace:
    """Results with one algorithm ``a`` whose 8 runs follow ``shape`` (G,) scaled by BASE / 100, on the grid
    T/8, 2T/8, ..., T with T = 800."""
    res = SimpleNamespace(
        curves=np.outer(BASE / 100.0, shape), final_regret=BASE * shape[-1] / 100.0, messages=np.zeros(8)
    )
    return SimpleNamespace(grid=np.arange(100, 900, 100), algorithms={"a": res})


def test_sublinear_reads_the_per_round_regret_of_two_stretches() -> None:
    """Per run (middle, late) rates from the curves: sqrt(t) gives late / middle = 0.71 (reproduced); linear
    regret gives equal rates, and with run-to-run noise on them the claim stays open; rising rates (t^2)
    are the opposite."""
    t = np.arange(100, 900, 100, dtype=float)
    rates = claim_tables({"": _curves(np.sqrt(t))})["regret rate"]["a"]
    assert rates.shape == (8, 2)
    # (sqrt(800) - sqrt(400)) / 400 and (sqrt(400) - sqrt(200)) / 200, times run r's scale BASE[r] / 100
    assert np.allclose(rates[:, 1] / rates[:, 0], (math.sqrt(800) - 20.0) / 400 / ((20.0 - math.sqrt(200)) / 200))
    assert sublinear({"a": rates}, "a").status == REPRODUCED
    assert check("sublinear", {"a": rates}, ("a",)).status == REPRODUCED
    linear = claim_tables({"": _curves(t)})["regret rate"]["a"]
    assert np.allclose(linear[:, 0], linear[:, 1])
    noisy = linear + np.stack([NOISE, NOISE[::-1]], axis=1) * 0.01
    assert sublinear({"a": noisy}, "a").status == INCONCLUSIVE
    rising = claim_tables({"": _curves(t**2)})["regret rate"]["a"]
    assert sublinear({"a": rising}, "a").status == NOT_REPRODUCED
    with pytest.raises(ValueError, match="sublinear"):
        check("sublinear", {"a": rates, "b": rates}, ("a", "b"))


# -- registry -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(EXPERIMENTS))
@pytest.mark.parametrize("scale", ["quick", "paper", "tiny", "published"])
def test_registry_configs_are_valid(name: str, scale: str) -> None:
    exp = get_experiment(name, scale)
    config = config_from_dict(exp.config)
    keys = set()
    for panel, raw in exp.configs():  # every panel validates; claims name "<panel> / <label>"
        panel_config = config_from_dict(raw)
        keys |= {f"{panel} / {a.label}" if panel else a.label for a in panel_config.algorithms}
    for claim in exp.claims:
        assert set(claim.args) <= keys
        assert claim.metric in ("regret", "messages", "regret rate")
        assert (claim.kind == "sublinear") == (claim.metric == "regret rate")
    # shrunk unless published; Dubey & Pentland's paper scale is the largest this machine runs
    assert bool(exp.shrunk) == (scale not in ("paper", "published") or (scale == "paper" and name.startswith("dubey")))
    if scale == "published" and not name.startswith("dubey"):  # one machine holds these: paper == published
        assert exp.config == get_experiment(name, "paper").config and exp.panels == get_experiment(name, "paper").panels
    if exp.figure_kind == "final-vs-x":
        assert all(a.label in exp.x_values for _, raw in exp.configs() for a in config_from_dict(raw).algorithms)
    if name.startswith("dubey"):
        assert exp.figure.startswith(("Figure 1", "Appendix Figure 2")) and exp.paper.startswith("Dubey & Pentland")
        assert config.environment.name == "gap-instance"
        if scale == "published":  # the published setting (section 4.4): T = 10^7, 100 runs, d = 10 unless varied
            assert (config.experiment.runs, config.experiment.horizon) == (100, 10_000_000)
        if scale == "paper":  # the largest honest scale: the reason and the command for the published one
            assert (config.experiment.runs, config.experiment.horizon) == (4, 100_000)
            assert "days per figure" in exp.shrunk and f"reproduce {name} --scale published --backend ray" in exp.shrunk
            published = get_experiment(name, "published")
            for (_, small), (_, full) in zip(exp.configs(), published.configs(), strict=True):
                # only T and the runs shrink: M, d, K, the gaps and every algorithm are the published ones,
                # but for Figure 1B's O(M^1.5) sync threshold D, which is a function of T (Proposition 1)
                diff = set(config_diff(small, full)) - {"experiment.horizon", "experiment.runs"}
                assert all(re.fullmatch(r"algorithms\[\d+\]\.threshold", d) for d in diff), diff
                assert not diff or name == "dubey-fig1b"
        return
    if name.startswith("liu"):
        assert exp.paper.startswith("Liu et al.")
        if scale in ("paper", "published"):  # section 5: T = 5e5, ten seeds, n = 100 users over L = 5 servers
            assert (config.experiment.runs, config.experiment.horizon) == (10, 500_000)
            assert config.environment.params.agents == 5
        return
    if name.startswith("he-"):  # the authors' code's settings: 30,000 interactions of M agents, 20 repetitions
        assert exp.paper.startswith("He, Wang, Min & Gu") and config.environment.name == "uniform-cube"
        if scale in ("paper", "published"):
            # he-fig: M = 50 (M-15/Federated.py as committed); he-fig-m15: M = 15 (M-15/Federatedc.py, whose
            # outputs the authors stored): every agent acts every round, so T = 30,000 / M rounds
            agents = 15 if name == "he-fig-m15" else 50
            assert (config.experiment.runs, config.experiment.horizon, config.environment.params.agents) == (
                20,
                30_000 // agents,
                agents,
            )
            assert f"at M = {agents} " in exp.figure
            assert (config.environment.params.dim, config.environment.params.arms) == (15, 25)
        return
    if name.startswith("blaser-"):  # the authors' code's Simulation.py: N = 30, 4 clusters, d = K = 25, T = 3,000
        assert exp.paper.startswith("Blaser, Li & Wang") and config.environment.name == "heterogeneous-clients"
        if scale in ("paper", "published"):
            params = config.environment.params
            assert (config.experiment.horizon, params.agents, params.clusters, params.dim, params.arms) == (
                3000,
                30,
                4,
                25,
                25,
            )
            assert config.algorithms[0].params.explore == 70 and config.algorithms[0].params.reg == 0.1
        return
    assert exp.figure.startswith(("Figure 2", "Figure 3")) and exp.paper.startswith("Zhou & Chowdhury")
    mslr = name in ("zhou-fig2c", "zhou-fig3c", "zhou-fig3d")
    assert config.environment.name == ("learning-to-rank" if mslr else "gaussian-sphere")
    if scale in ("paper", "published"):
        assert config.experiment.runs == 25
        assert config.experiment.horizon == (25_000 if mslr else 10_000)
        assert config.environment.params.agents == (10 if mslr else 100)
        assert all(a.params.batch == 25 and a.params.alpha == 0.01 for a in config.algorithms)
    assert get_experiment(name, scale, runs=3).config["experiment"]["runs"] == 3


def test_registry_errors() -> None:
    with pytest.raises(ValueError, match="zhou-fig2a"):
        get_experiment("nope")
    with pytest.raises(ValueError, match="scale"):
        get_experiment("zhou-fig2a", "huge")
    with pytest.raises(ValueError, match="runs"):
        get_experiment("zhou-fig2a", "quick", runs=0)


# -- end to end -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_all(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    out = tmp_path_factory.mktemp("reproduce")
    return out, reproduce("all", "tiny", out=out, causes="none")  # cause runs: tested on one figure below


def test_every_experiment_runs_end_to_end(tiny_all: tuple[Path, list]) -> None:
    out, outcomes = tiny_all
    assert [o.experiment.name for o in outcomes] == list(EXPERIMENTS)
    report = (out / "report.md").read_text(encoding="utf-8")
    for o in outcomes:
        folder = out / o.experiment.name
        assert (folder / "figure.png").is_file()
        subfolders = [folder / slug for slug in (p.replace("=", "-") for p, _ in o.experiment.configs()) if slug]
        for sub in subfolders or [folder]:
            for f in ("regret.png", "summary.json", "config.toml"):
                assert (sub / f).is_file()
        assert (folder / "figure.png").read_bytes().startswith(PNG_MAGIC)
        assert f"## {o.experiment.figure}" in report
        assert len(o.claims) == len(o.experiment.claims)
        for claim, result in zip(o.experiment.claims, o.claims, strict=True):
            assert result.status in (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)
            assert claim.text in report
    assert "eps spent" in report and "sdp-amplification / paper" in report


def test_every_experiment_at_once_on_two_workers_gives_the_same_numbers(
    tiny_all: tuple[Path, list], tmp_path: Path
) -> None:
    # workers = 2: the experiments run at once from threads, their tasks on one shared pool (a config of
    # one task in a worker too); each task depends only on its config and runs, so nothing may change
    _, sequential = tiny_all
    together = reproduce("all", "tiny", out=tmp_path, causes="none", workers=2)
    assert [o.experiment.name for o in together] == list(EXPERIMENTS)
    for a, b in zip(sequential, together, strict=True):
        assert [r.status for r in a.claims] == [r.status for r in b.claims]
        assert list(a.panel_results) == list(b.panel_results)
        for panel, results in a.panel_results.items():
            other = b.panel_results[panel].algorithms
            assert list(results.algorithms) == list(other)
            for lab, res in results.algorithms.items():
                np.testing.assert_array_equal(res.curves, other[lab].curves)
                np.testing.assert_array_equal(res.per_agent, other[lab].per_agent)
                np.testing.assert_array_equal(res.messages, other[lab].messages)
        assert (tmp_path / a.experiment.name / "figure.png").read_bytes().startswith(PNG_MAGIC)
    assert (tmp_path / "report.md").is_file()


def test_report_shows_failures(tiny_all: tuple[Path, list]) -> None:
    out, outcomes = tiny_all
    report = (out / "report.md").read_text(encoding="utf-8")
    statuses = [r.status for o in outcomes for r in o.claims]
    for status in set(statuses):
        assert report.count(f"**{status}**") >= statuses.count(status)


# -- CLI ------------------------------------------------------------------------------------
def _invoke(argv: list[str]) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["reproduce", "nope"], "valid: " + ", ".join(EXPERIMENTS) + ", all"),
        (["reproduce", "all", "--scale", "huge"], "scale must be one of"),
        (["reproduce", "all", "--runs", "0"], "--runs"),
        (["reproduce", "all", "--workers", "x"], "--workers"),
        (["reproduce"], "NAME|all"),
    ],
)
def test_cli_errors(argv: list[str], needle: str, tmp_path: Path) -> None:
    code, out, err = _invoke([*argv, "--out", str(tmp_path / "r")] if len(argv) > 1 else argv)
    assert code == 2 and out == ""
    assert err.startswith("fedbandits: error: ") and err.count("\n") == 1 and needle in err
    assert not (tmp_path / "r").exists()


def test_cli_out_is_a_file(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    code, _, err = _invoke(["reproduce", "zhou-fig2a", "--scale", "tiny", "--out", str(target), "--no-progress"])
    assert code == 2 and "not a folder" in err


def test_cli_runs(tmp_path: Path) -> None:
    code, out, err = _invoke(
        ["reproduce", "zhou-fig2a", "--scale", "tiny", "--runs", "2", "--out", str(tmp_path), "--no-progress"]
    )
    assert code == 0, err
    assert "zhou-fig2a (Figure 2a)" in out and (tmp_path / "report.md").is_file()
    assert (tmp_path / "zhou-fig2a" / "figure.png").is_file()


# -- power statements, cause runs and the docs page --------------------------------------------
TIMING = re.compile(r"\d+(\.\d+)? (s|min|h)\b")
#: what a page made with --resume adds: how much of the compute was loaded from checkpoints
LOADED = re.compile(
    r" \(<time> of it loaded from checkpoints\)|, of which <time> \(\d+ of \d+ tasks\) were loaded from the "
    r"checkpoints of an earlier run with the same configs \(`--resume`\) and are not in the wall time"
)


def _page(tmp: Path, resume: bool = False) -> tuple[str, list]:
    outcomes = reproduce("zhou-fig3d", "tiny", out=tmp / "results", causes="all", workers=1, resume=resume)
    command = "fedbandits reproduce zhou-fig3d --scale tiny --causes all"
    write_page(outcomes, "tiny", command, tmp / "docs" / "reproduction.md", "all")
    return (tmp / "docs" / "reproduction.md").read_text(encoding="utf-8"), outcomes


def test_page_has_every_section_and_regenerates(tmp_path: Path) -> None:
    page, outcomes = _page(tmp_path)
    (outcome,) = outcomes
    experiment = outcome.experiment
    assert [c.cause for c in outcome.causes] == list(experiment.causes)
    for c in outcome.causes:  # each cause run has its own results folder and figure
        assert (c.folder / "summary.json").is_file() and (c.folder / "figure.png").is_file()
        assert c.folder == tmp_path / "results" / "zhou-fig3d" / "causes" / c.cause.name
    png = tmp_path / "docs" / "reproduction" / "zhou-fig3d.png"
    assert png.read_bytes().startswith(PNG_MAGIC) and png.stat().st_size < 60_000
    assert "Scale: **tiny**" in page and "`fedbandits reproduce zhou-fig3d --scale tiny --causes all`" in page
    assert "](reproduction/zhou-fig3d.png)" in page and "| claim | verdict | measured |" in page
    assert "Every claim gets one-change cause runs (`--causes all`)" in page
    assert "`fedbandits reproduce zhou-fig3d --scale tiny --causes all`; base run: wall time" in page
    assert "**Power** (inconclusive claims)" in page and "**Causes**" in page and "**Notes**" in page
    # each curve's measured row, with its syncs (a claim about communication is read from it)
    measured = page[page.index("**Measured**") : page.index("**Power**")]
    for summary in outcome.results.summary()["algorithms"]:
        assert f"| {summary['label']} | {summary['final_regret_mean']:.1f} ± " in measured
        assert f"| {summary['sync_rounds']:.1f} |" in measured
    for claim in experiment.claims:
        assert claim.text in page
    for cause in experiment.causes:
        assert cause.text in page
    assert "wall time" in page and "Verdicts over 1 claim: " in page
    for note in experiment.notes:
        assert note in page
    report = (tmp_path / "results" / "report.md").read_text(encoding="utf-8")
    assert "Cause `constant-radius`" in report and "Cause runs (each changes one field" in report
    # regenerated from the checkpointed runs (the runs' own determinism is tested elsewhere): only timings move
    again, _ = _page(tmp_path, resume=True)
    assert "loaded from checkpoints" in again and "loaded from checkpoints" not in page
    assert LOADED.sub("", TIMING.sub("<time>", again)) == TIMING.sub("<time>", page)
    assert again != page.replace("tiny", "quick")  # the comparison can fail


def test_power_statements_in_the_report(tiny_all: tuple[Path, list]) -> None:
    out, outcomes = tiny_all
    report = (out / "report.md").read_text(encoding="utf-8")
    inconclusive = [r for o in outcomes for r in o.claims if r.status == INCONCLUSIVE and r.numbers.get("runs", 0) > 1]
    assert inconclusive and report.count("  * Power: ") == len(inconclusive)
    assert "a paired test would need about" in report or "no number of runs" in report


def test_cli_causes_and_page(tmp_path: Path) -> None:
    page = tmp_path / "docs" / "reproduction.md"
    argv = ["reproduce", "zhou-fig3d", "--scale", "tiny", "--out", str(tmp_path / "r"), "--no-progress"]
    code, out, err = _invoke([*argv, "--page", str(page)])  # no --causes: none is the tiny scale's default
    assert code == 0, err
    assert f"page: {page}" in out and (tmp_path / "docs" / "reproduction" / "zhou-fig3d.png").is_file()
    text = page.read_text(encoding="utf-8")
    assert "--causes none --powered none --page" in text  # the mode the scale defaults to, stated
    # without cause runs the page says so; "every claim is settled" only where it is true
    (outcome,) = reproduce("zhou-fig3d", "tiny", out=tmp_path / "r", causes="none", resume=True, workers=1)
    unsettled = sum(r.status in (NOT_REPRODUCED, INCONCLUSIVE) for r in outcome.claims)
    assert "made without the one-change cause runs (`--causes none`)" in text
    # the figure's own command: no --causes flag, none being the scale's default
    assert "`fedbandits reproduce zhou-fig3d --scale tiny`; base run" in text
    assert (
        (f"not run for this page (`--causes none`); {unsettled} claim(s) not settled" in text)
        == (unsettled > 0)
        != ("every claim is settled" in text)
    )
    assert not (tmp_path / "r" / "zhou-fig3d" / "causes").exists()
    code, _, err = _invoke([*argv, "--causes", "some"])
    assert code == 2 and "--causes" in err
    code, _, err = _invoke([*argv, "--powered", "some"])
    assert code == 2 and "--powered" in err


@pytest.mark.slow
def test_every_figure_with_its_cause_runs_and_the_page(tmp_path: Path) -> None:
    outcomes = reproduce("all", "tiny", out=tmp_path / "r", causes="unsettled")
    page = write_page(outcomes, "tiny", "fedbandits reproduce all --scale tiny", tmp_path / "reproduction.md")
    text = page.read_text(encoding="utf-8")
    for o in outcomes:
        assert f"(`{o.experiment.name}`)" in text and (tmp_path / "reproduction" / f"{o.experiment.name}.png").is_file()
        unsettled = any(r.status in (NOT_REPRODUCED, INCONCLUSIVE) for r in o.claims)
        assert len(o.causes) == (len(o.experiment.causes) if unsettled else 0)
