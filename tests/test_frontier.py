"""`fedbandits frontier`: the plan it runs, the crossing point, its files and its errors, and its lines
tuned (``--grid``) or plainly labelled untuned."""

from __future__ import annotations

import csv
import itertools
import json
import math
import tomllib
from pathlib import Path

import pytest

import fedbandits.sim.task as task_module
from fedbandits.cli import main
from fedbandits.config import ConfigError, load_config, loads_config
from fedbandits.experiments.frontier import (
    DEFAULT_EPSILONS,
    INDEPENDENT,
    NON_PRIVATE,
    UNTUNED,
    crossing,
    describe_crossing,
    frontier_plan,
    frontier_tune_plan,
    parse_epsilons,
)
from fedbandits.experiments.tune import RULE, load_grid, parse_grid, tune_plan

CONFIG = """
[experiment]
name = "tiny"
seed = 3
runs = 2
horizon = 60
[environment]
name = "gaussian-sphere"
agents = 3
arms = 5
dim = 3
[[algorithms]]
name = "fedlinucb"
label = "tree"
batch = 10
protocol = "ldp"
delta = 1e-5
reg = 2.0
[[algorithms]]
name = "fedlinucb"
label = "factorized"
batch = 10
protocol = "ldp"
delta = 1e-5
mechanism = "factorized"
[[algorithms]]
name = "linucb-independent"
label = "alone"
"""


def test_default_grid_is_log_spaced_from_a_tenth_to_ten() -> None:
    assert DEFAULT_EPSILONS[0] == 0.1 and DEFAULT_EPSILONS[-1] == 10.0 and len(DEFAULT_EPSILONS) == 7
    ratios = [b / a for a, b in itertools.pairwise(DEFAULT_EPSILONS)]
    assert max(ratios) / min(ratios) < 1.01  # equal steps in log epsilon (up to the 3-digit rounding)


def test_the_plan_runs_every_private_entry_at_every_epsilon_beside_the_references() -> None:
    plan = frontier_plan(loads_config(CONFIG), (0.5, 2.0))
    labels = [a.label for a in plan.config.algorithms]
    assert labels == [
        "tree @ eps=0.5",
        "tree @ eps=2",
        "factorized @ eps=0.5",
        "factorized @ eps=2",
        NON_PRIVATE,
        INDEPENDENT,
    ]
    by_label = {a.label: a.params for a in plan.config.algorithms}
    assert by_label["factorized @ eps=2"].epsilon == 2.0 and by_label["factorized @ eps=2"].mechanism == "factorized"
    reference = by_label[NON_PRIVATE]
    assert reference.protocol == "none" and reference.reg == 2.0 and reference.batch == 10 and reference.lazy is False
    # the private entries' noise-aware tuning is not copied: the reference is tuned as a non-private run
    assert by_label["tree @ eps=2"].radius == "constant" and by_label["tree @ eps=2"].regularizer == "noise"
    # (the non-private defaults: lambda = reg and the constant radius beta = 1, chosen by the rule)
    assert (reference.regularizer, reference.radius, reference.beta) == ("fixed", "constant", 1.0)
    assert plan.variants["tree @ eps=0.5"] == ("tree", 0.5) and NON_PRIVATE not in plan.variants


def test_both_reference_lines_centre_the_rewards_as_the_private_entries_do() -> None:
    centred = CONFIG.replace("reg = 2.0\n", "reg = 2.0\nreward_offset = 0.5\n")
    by_label = {a.label: a.params for a in frontier_plan(loads_config(centred), (0.5, 2.0)).config.algorithms}
    assert by_label[NON_PRIVATE].reward_offset == by_label[INDEPENDENT].reward_offset == 0.5
    plain = {a.label: a.params for a in frontier_plan(loads_config(CONFIG), (0.5, 2.0)).config.algorithms}
    assert plain[NON_PRIVATE].reward_offset == plain[INDEPENDENT].reward_offset == 0.0


def test_an_unlabelled_private_entry_is_named_without_the_epsilon_the_frontier_replaces() -> None:
    # "fedlinucb ldp eps=1" (the default label) would read as eps = 1 at every point of the line
    unlabelled = CONFIG.replace('label = "tree"\n', "").replace('label = "factorized"\n', "")
    plan = frontier_plan(loads_config(unlabelled), (0.5, 2.0))
    assert [a.label for a in plan.config.algorithms][:4] == [
        "fedlinucb ldp @ eps=0.5",
        "fedlinucb ldp @ eps=2",
        "fedlinucb ldp factorized @ eps=0.5",
        "fedlinucb ldp factorized @ eps=2",
    ]
    assert plan.variants["fedlinucb ldp factorized @ eps=2"] == ("fedlinucb ldp factorized", 2.0)
    # two default labels that differ only in epsilon would share a line name: each keeps its label
    same = unlabelled.replace('mechanism = "factorized"\n', "epsilon = 3.0\n")
    plan = frontier_plan(loads_config(same), (0.5, 2.0))
    assert [a.label for a in plan.config.algorithms][:4] == [
        "fedlinucb ldp eps=1 @ eps=0.5",
        "fedlinucb ldp eps=1 @ eps=2",
        "fedlinucb ldp eps=3 @ eps=0.5",
        "fedlinucb ldp eps=3 @ eps=2",
    ]


def test_crossing_point_interpolates_in_log_epsilon() -> None:
    grid = (0.1, 1.0, 10.0)
    assert crossing(grid, [300.0, 200.0, 100.0], 150.0) == pytest.approx(math.sqrt(10.0))  # halfway in log
    assert crossing(grid, [300.0, 200.0, 100.0], 200.0) == pytest.approx(1.0)
    assert crossing(grid, [90.0, 80.0, 70.0], 100.0) == 0.0
    assert crossing(grid, [300.0, 200.0, 150.0], 100.0) is None
    assert describe_crossing(None, grid) == "never on [0.1, 10]"
    assert describe_crossing(0.0, grid) == "already at eps = 0.1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0,1", r"every epsilon must be in \(0, 1000\], got 0"),
        ("1,2000", r"every epsilon must be in \(0, 1000\], got 2000"),
        ("1,x", "must be numbers separated by commas, got 'x'"),
        ("1,1", "at least two distinct values"),
        ("nan,1", r"every epsilon must be in \(0, 1000\], got nan"),
    ],
)
def test_bad_epsilon_grids_get_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_epsilons(text)


def test_a_config_without_private_algorithms_is_refused() -> None:
    config = loads_config(CONFIG.split("[[algorithms]]")[0] + '[[algorithms]]\nname = "linucb-independent"\n')
    with pytest.raises(ConfigError, match="frontier needs at least one private algorithm"):
        frontier_plan(config)
    # a private entry named like a reference line would be confused with it (its crossing, its tuning)
    with pytest.raises(ConfigError, match="'independent agents' is the name of one of the frontier's reference lines"):
        frontier_plan(loads_config(CONFIG.replace('label = "tree"', f'label = "{INDEPENDENT}"')))


def test_the_command_writes_the_frontier_and_refuses_bad_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    out = tmp_path / "out"
    assert main(["frontier", str(config), "--epsilons", "1,4", "--out", str(out), "--no-progress"]) == 0
    captured = capsys.readouterr()
    stdout = captured.out
    # rewards <x, theta*> + N(0, 1/4) clipped to [-1, 1]: an arm of mean >= 1/2 (the best of 5 arms
    # mostly is) exceeds 1 with probability >= P(z > 1) = 16% > 5%, so both entries warn -- once
    # each, over their two epsilons together, naming the entry of the config, not its variants
    warned = captured.err.splitlines()
    assert [line.split("'")[1] for line in warned] == ["tree", "factorized"]
    assert all("(its 2 variants together): raise its reward_bound" in line for line in warned)
    with (out / "frontier.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["algorithm"], r["epsilon"]) for r in rows][:4] == [
        ("tree", "1.0"),
        ("tree", "4.0"),
        ("factorized", "1.0"),
        ("factorized", "4.0"),
    ]
    assert {r["algorithm"] for r in rows[4:]} == {NON_PRIVATE, INDEPENDENT} and len(rows) == 6
    assert all(r["guarantee"] == "formal" and float(r["epsilon_spent"]) <= float(r["epsilon"]) for r in rows[:4])
    assert (out / "frontier.png").stat().st_size > 0 and "beats independent agents" in stdout
    assert "Where federation starts to beat going alone" in (out / "frontier.md").read_text()
    assert main(["frontier", str(config), "--epsilons", "0,1", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedbandits: error: --epsilons")
    assert not (tmp_path / "bad").exists()  # nothing runs before validation


def test_the_example_frontier_config_plans_four_private_variants() -> None:
    from fedbandits.config import load_config

    plan = frontier_plan(load_config(Path(__file__).parent.parent / "examples" / "frontier-synthetic.toml"))
    assert len(plan.config.algorithms) == 4 * 7 + 2
    variants = {"ldp (tree)", "ldp (factorized)", "distributed-dp", "distributed-dp (factorized)"}
    assert {p for p, _ in plan.variants.values()} == variants


# every line of CONFIG's frontier, each with an absurd radius first: a constant radius of 1000 explores
# all T = 60 rounds (the rule must not pick it for the reference lines: see test_tune.py's known grid)
GRID = """
[grid.tree]
radius = ["constant"]
beta = [1000.0, 1.0]
[grid.factorized]
beta = [3.0, 10.0]
[grid."independent agents"]
radius = ["constant"]
beta = [1000.0, 1.0]
[grid."non-private federation"]
radius = ["constant"]
beta = [1000.0, 1.0]
"""


def _files(tmp_path: Path, grid: str = GRID) -> tuple[Path, Path]:
    config, grid_path = tmp_path / "c.toml", tmp_path / "g.toml"
    config.write_text(CONFIG)
    grid_path.write_text(grid)
    return config, grid_path


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_an_untuned_frontier_says_so_everywhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config, _ = _files(tmp_path)
    out = tmp_path / "out"
    assert main(["frontier", str(config), "--epsilons", "1,4", "--out", str(out), "--no-progress"]) == 0
    stdout = capsys.readouterr().out
    assert "NOT tuned" in stdout and "tuned on seed" not in stdout
    assert stdout.count(f"({UNTUNED})") == 2  # one per private line's crossing point
    rows = _csv(out / "frontier.csv")
    assert [r["tuning"] for r in rows] == ["untuned: the config's values"] * 4 + ["untuned: library defaults"] * 2
    record = json.loads((out / "frontier.json").read_text())
    assert record["tuned"] is False and record["caption"] == UNTUNED and record["rule"] is None
    assert all(r["chosen"] is None for r in record["rows"]) and len(record["rows"]) == 6
    assert "NOT tuned" in (out / "frontier.md").read_text() and not (out / "tune").exists()


def test_a_tuned_frontier_runs_its_lines_with_the_tuned_values_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, grid = _files(tmp_path)
    out = tmp_path / "out"
    argv = ["frontier", str(config), "--epsilons", "1,4", "--out", str(out), "--no-progress"]
    assert main([*argv, "--grid", str(grid), "--tuning-runs", "3"]) == 0
    stdout = capsys.readouterr().out
    assert RULE in stdout and "NOT tuned" not in stdout and "Every line tuned on seed 1000 (3 run(s)" in stdout
    assert stdout.count("(tuned on seed 1000, rule: smallest mean final regret)") == 2  # one per private line
    tune = json.loads((out / "tune" / "tune.json").read_text())
    assert tune["tuning_seed"] == 1000 and tune["report_seeds"] == [3] and tune["runs"] == 3
    # every private variant tuned on its own, with its line's table; each reference line once
    grid_labels = {e: v["grid_label"] for e, v in tune["entries"].items()}
    assert grid_labels == {
        "tree @ eps=1": "tree",
        "tree @ eps=4": "tree",
        "factorized @ eps=1": "factorized",
        "factorized @ eps=4": "factorized",
        NON_PRIVATE: NON_PRIVATE,
        INDEPENDENT: INDEPENDENT,
    }
    for entry in tune["entries"].values():  # the rule's choice: the smallest mean, first on ties
        means = [c["final_regret_mean"] for c in entry["candidates"]]
        assert entry["chosen"] == entry["candidates"][means.index(min(means))]["values"]
    # the known answer: the absurd radius loses for both reference lines
    assert tune["entries"][INDEPENDENT]["chosen"]["beta"] == tune["entries"][NON_PRIVATE]["chosen"]["beta"] == 1.0
    record = json.loads((out / "frontier.json").read_text())
    assert record["tuned"] is True and record["rule"] == RULE and record["tuning_seed"] == 1000
    assert record["caption"] == "tuned on seed 1000, rule: smallest mean final regret"
    labels = list(tune["entries"])
    rows = _csv(out / "frontier.csv")
    for label, row, json_row in zip(labels, rows, record["rows"], strict=True):
        chosen = tune["entries"][label]["chosen"]
        assert json_row["chosen"] == chosen
        described = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in chosen.items())
        assert row["tuning"] == f"tuned on seed 1000: {described}"
    # the report ran the chosen values on the report seed: its config holds them, and running the
    # tuned config written beside the tuning gives the frontier's numbers exactly
    report = load_config(out / "config.toml")
    assert report.experiment.seed == 3
    for alg in report.algorithms:
        for key, value in tune["entries"][alg.label]["chosen"].items():
            assert getattr(alg.params, key) == value, (alg.label, key)
    assert main(["run", str(out / "tune" / "tuned.toml"), "--out", str(tmp_path / "rerun"), "--no-progress"]) == 0
    rerun = _csv(tmp_path / "rerun" / "runs.csv")
    frontier_runs = _csv(out / "runs.csv")
    assert rerun == frontier_runs
    # and a line moves exactly when its tuned values differ from its untuned ones: the tree entry's
    # untuned radius is the noise-aware constant 10, its grid {1000, 1} has no 10; the independent agents'
    # default is the constant radius 1, which the tuning chose too (same streams: the same regret)
    assert (
        main(["frontier", str(config), "--epsilons", "1,4", "--out", str(tmp_path / "untuned"), "--no-progress"]) == 0
    )
    untuned = {
        (r["algorithm"], r["epsilon"]): float(r["final_regret_mean"])
        for r in _csv(tmp_path / "untuned" / "frontier.csv")
    }
    tuned = {(r["algorithm"], r["epsilon"]): float(r["final_regret_mean"]) for r in rows}
    assert tune["entries"][INDEPENDENT]["chosen"] == {"radius": "constant", "beta": 1.0}
    assert untuned[INDEPENDENT, "nan"] == pytest.approx(tuned[INDEPENDENT, "nan"], rel=1e-12)
    assert tune["entries"]["tree @ eps=1"]["chosen"]["beta"] != 10.0
    assert untuned["tree", "1.0"] != pytest.approx(tuned["tree", "1.0"])


BAD_GRIDS = [
    ("", [], "is empty"),
    (
        GRID + "[grid.alone]\nbeta = [1.0]\n",
        [],
        'grid."alone": the frontier draws no line with that label; its lines: ',
    ),
    (
        GRID.split('[grid."independent agents"]')[0],
        [],
        'the grid leaves out "non-private federation", "independent agents": a tuned frontier tunes every line',
    ),
    (
        GRID.replace('radius = ["constant"]\nbeta = [1000.0, 1.0]\n[grid."non', 'batch = [5]\n[grid."non'),
        [],
        "grid.\"independent agents\".batch: algorithm 'linucb-independent' has no parameter 'batch'",
    ),
    (
        GRID.replace("beta = [3.0, 10.0]", "beta = [3.0, -1.0]"),
        [],
        'grid."factorized" (for "factorized @ eps=1") candidate beta=-1: ',
    ),
    (GRID, ["--tuning-seed", "3"], "tuning seed 3 overlaps the report seeds (seed = 3)"),
    (GRID, ["--seed", "1000", "--tuning-seed", "1000"], "tuning seed 1000 overlaps the report seeds (seed = 1000)"),
    (None, ["--tuning-runs", "2"], "--tuning-runs is only for --grid"),
]


@pytest.mark.parametrize(("grid", "extra", "message"), BAD_GRIDS)
def test_a_grid_the_frontier_cannot_run_is_one_line_and_nothing_runs(
    grid: str | None,
    extra: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_task(*args: object, **kwargs: object) -> None:
        raise AssertionError("a task ran")

    monkeypatch.setattr(task_module, "simulate_runs", no_task)
    config, grid_path = _files(tmp_path, grid or "")
    out = tmp_path / "out"
    with_grid = [] if grid is None else ["--grid", str(grid_path)]
    status = main(["frontier", str(config), "--epsilons", "1,4", "--out", str(out), *with_grid, *extra])
    assert status == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedbandits: error: "), err
    assert message in err, err
    assert not out.exists()


def test_the_tuning_plan_applies_each_lines_table_at_every_epsilon() -> None:
    plan = frontier_plan(loads_config(CONFIG), (0.5, 2.0))
    tune = frontier_tune_plan(plan, parse_grid(tomllib.loads(GRID)), runs=2)
    per_entry: dict[str, list[dict[str, object]]] = {}
    for c in tune.candidates:
        per_entry.setdefault(c.entry, []).append(c.values)
    assert sorted(per_entry) == sorted(a.label for a in plan.config.algorithms)  # every entry of every line
    assert (
        per_entry["tree @ eps=0.5"]
        == per_entry["tree @ eps=2"]
        == [
            {"radius": "constant", "beta": 1000.0},
            {"radius": "constant", "beta": 1.0},
        ]
    )
    assert per_entry["factorized @ eps=2"] == [{"beta": 3.0}, {"beta": 10.0}]
    # the candidates keep their variant's epsilon and mechanism
    by_label = {a.label: a.params for a in tune.tuning.algorithms}
    assert by_label["factorized @ eps=2 [beta=10]"].epsilon == 2.0
    assert by_label["factorized @ eps=2 [beta=10]"].mechanism == "factorized"
    assert tune.tuning.experiment.seed == 1000 and tune.tuning.experiment.runs == 2


def test_the_example_grids_plan_against_their_configs() -> None:
    examples = Path(__file__).parent.parent / "examples"
    plan = frontier_plan(load_config(examples / "frontier-synthetic.toml"))
    tune = frontier_tune_plan(plan, load_grid(examples / "frontier-synthetic-grid.toml"))
    assert len(tune.candidates) == 4 * 7 * 4 + 2 * 4 and tune.seed == 1000 and tune.tuning.experiment.runs == 4
    centred = frontier_tune_plan(
        frontier_plan(load_config(examples / "frontier-synthetic.toml"), (0.3, 1.0, 3.0)),
        load_grid(examples / "frontier-synthetic-centred-grid.toml"),
    )
    assert len(centred.candidates) == 4 * 3 * 16 + 2 * 8  # the count its header states
    streaming = frontier_plan(load_config(examples / "frontier-streaming.toml"))  # the docs' streaming frontier
    assert len({base for base, _ in streaming.variants.values()}) == 7 and len(streaming.variants) == 7 * 7
    config = load_config(examples / "centred-rewards.toml")
    for grid, count in (
        ("centred-rewards-grid.toml", 6 + 24),
        ("centred-rewards-baseline-grid.toml", 24),
        ("centred-rewards-split-grid.toml", 4 + 6),  # the second stage (its keys apply to the first's config too)
    ):
        assert len(tune_plan(config, load_grid(examples / grid)).candidates) == count
    config = load_config(examples / "ddp-vs-independent.toml")
    pair = tune_plan(config, load_grid(examples / "ddp-vs-independent-grid.toml"))
    assert len(pair.candidates) == 8 and pair.seed == 1000 and config.experiment.seed == 777
