"""`fedbandits frontier`: the plan it runs, the crossing point, its files and its errors."""

from __future__ import annotations

import csv
import itertools
import math
from pathlib import Path

import pytest

from fedbandits.cli import main
from fedbandits.config import ConfigError, loads_config
from fedbandits.experiments.frontier import (
    DEFAULT_EPSILONS,
    INDEPENDENT,
    NON_PRIVATE,
    crossing,
    describe_crossing,
    frontier_plan,
    parse_epsilons,
)

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
    assert (reference.regularizer, reference.radius, reference.beta) == ("fixed", "theory", 1.0)
    assert plan.variants["tree @ eps=0.5"] == ("tree", 0.5) and NON_PRIVATE not in plan.variants


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
