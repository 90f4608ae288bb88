"""`fedbandits tune`: it never touches the report seeds, it picks what its rule says, its tuned
config runs, and every bad grid or seed is refused in one line before anything runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedbandits
import fedbandits.sim.task as task_module
from fedbandits.cli import main
from fedbandits.config import ConfigError, load_config, loads_config
from fedbandits.experiments.tune import (
    DEFAULT_TUNING_SEED,
    RULE,
    Candidate,
    Scored,
    choose,
    load_grid,
    parse_grid,
    tune_plan,
    tuning_seed,
)
from fedbandits.sim.memory import task_bytes, task_runs

CONFIG = """
[experiment]
name = "tiny"
seed = 3
runs = 2
horizon = 200
[environment]
name = "gaussian-sphere"
agents = 3
arms = 5
dim = 3
[[algorithms]]
name = "fedlinucb"
label = "fed"
batch = 10
[[algorithms]]
name = "fedlinucb"
label = "private"
batch = 20
protocol = "ldp"
epsilon = 1.0
delta = 1e-5
[[algorithms]]
name = "linucb-independent"
label = "alone"
"""

# the absurd radius first: a rule that took the first, or the largest, candidate would pick it
GRID = {"grid": {"fed": {"radius": ["constant"], "beta": [1000.0, 1.0]}, "private": {"beta": [3.0, 10.0]}}}


def _config(**experiment: Any) -> fedbandits.Config:
    config = loads_config(CONFIG)
    return config.with_experiment(**experiment) if experiment else config


def test_tune_never_draws_from_the_report_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spy on the entropies the simulator's generators are built from: only the tuning seed."""
    entropies: dict[str, list[int]] = {"env": [], "noise": []}
    env_rngs, noise_rngs = task_module.env_rngs, task_module.noise_rngs

    def spy_env(seed: int, runs: list[int]) -> list[np.random.Generator]:
        entropies["env"].append(seed)
        return env_rngs(seed, runs)

    def spy_noise(seed: int, runs: list[int], index: int) -> list[np.random.Generator]:
        entropies["noise"].append(seed)
        return noise_rngs(seed, runs, index)

    monkeypatch.setattr(task_module, "env_rngs", spy_env)
    monkeypatch.setattr(task_module, "noise_rngs", spy_noise)
    config = _config(seed=3, noise_seed=5)
    tuning = fedbandits.tune(config, GRID, tuning_seed=7)
    assert entropies["env"] and entropies["noise"]  # the spy sees the tuning's runs
    assert set(entropies["env"]) == set(entropies["noise"]) == {7} == {tuning.plan.seed}
    # the spy would see a report seed: running the config itself draws from 3 and 5
    entropies["env"].clear()
    entropies["noise"].clear()
    fedbandits.run(config)
    assert set(entropies["env"]) == {3} and set(entropies["noise"]) == {5}


def test_the_tuned_choice_does_not_depend_on_the_report_seed() -> None:
    first = fedbandits.tune(_config(seed=3), GRID)
    other = fedbandits.tune(_config(seed=4, noise_seed=9), GRID)
    assert first.plan.seed == other.plan.seed == DEFAULT_TUNING_SEED
    assert first.record()["entries"] == other.record()["entries"]  # every candidate's scores, run by run
    # and the tuning runs are not the report runs: the chosen candidate run on the config's own
    # seed (same runs, same horizon) ends elsewhere
    chosen = first.scores["fed"][first.chosen["fed"]]
    report = fedbandits.run(first.config, runs=len(chosen.final_regret))
    assert not np.allclose(report.algorithms["fed"].final_regret, chosen.final_regret)


def test_the_rule_picks_the_smallest_mean_and_the_first_on_ties() -> None:
    def scored(*finals: float) -> Scored:
        return Scored(Candidate("e", {}, "e"), tuple(finals))

    assert choose([scored(5, 7), scored(2, 4), scored(3, 3)]) == 1  # means 6, 3, 3: the first of the tied 3s
    assert choose([scored(1, 3), scored(2, 2)]) == 0  # equal means: grid order
    assert choose([scored(float("nan"), 1), scored(9, 9)]) == 1  # a NaN mean never wins


def test_tune_chooses_the_candidate_its_rule_names_on_a_grid_whose_answer_is_known() -> None:
    tuning = fedbandits.tune(_config(), GRID)
    fed = tuning.scores["fed"]
    # a constant radius of 1000 explores all T = 200 rounds: its regret is about that of uniform
    # play, over ten times the tuned radius' (measured on these seeds: 239 against 6.9), so beta = 1 must win
    assert [s.candidate.values["beta"] for s in fed] == [1000.0, 1.0]
    assert tuning.chosen["fed"] == 1 and fed[0].mean > 10 * fed[1].mean
    for entry, scored in tuning.scores.items():
        means = [float(tuning.results.algorithms[s.candidate.label].final_regret.mean()) for s in scored]
        assert tuning.chosen[entry] == int(np.argmin(means))  # argmin: the first minimum, as the rule
        assert [s.mean for s in scored] == pytest.approx(means)
    assert tuning.config.algorithms[0].params.beta == 1.0
    assert tuning.config.algorithms[1].params.beta == [3.0, 10.0][tuning.chosen["private"]]


def test_a_grid_that_changes_nothing_is_flagged() -> None:
    # with Lemma C.4's radius ("theory") FedLinUCB ignores beta: every candidate plays alike
    tuning = fedbandits.tune(
        _config(),
        {"grid": {"fed": {"radius": ["theory"], "beta": [0.5, 5.0]}, "alone": {"radius": ["constant", "theory"]}}},
    )
    assert tuning.inert() == ["fed"] and tuning.chosen["fed"] == 0
    assert "the grid changes nothing this entry does" in tuning.table()
    assert tuning.record()["entries"]["fed"]["all_alike"] and not tuning.record()["entries"]["alone"]["all_alike"]


def test_the_tuning_experiment_runs_every_candidate_together_and_counts_them_in_memory() -> None:
    config = _config()
    plan = tune_plan(config, parse_grid(GRID), runs=3, horizon=100)
    exp = plan.tuning.experiment
    assert (exp.seed, exp.noise_seed, exp.runs, exp.horizon) == (DEFAULT_TUNING_SEED, None, 3, 100)
    assert [a.label for a in plan.tuning.algorithms] == [
        "fed [radius=constant, beta=1000]",
        "fed [radius=constant, beta=1]",
        "private [beta=3]",
        "private [beta=10]",
    ]
    private = [a.params for a in plan.tuning.algorithms[2:]]
    assert all(p.protocol == "ldp" and p.batch == 20 and p.epsilon == 1.0 for p in private)
    # four ridge learners now, against three in the config: the estimate holds every candidate
    # (both counted at the tuning's task of 3 runs: the estimate counts the runs a task holds)
    assert max(task_runs(plan.tuning)) == 3
    per_learner = 2 * 3 * 3 * 3 * 3 * 8  # (gram, inverse) x runs x agents x d x d float64
    assert task_bytes(plan.tuning) - task_bytes(config, runs=3) == per_learner


def test_default_tuning_seed_steps_over_the_report_seeds() -> None:
    assert tuning_seed(_config(seed=3)) == 1000
    assert tuning_seed(_config(seed=1000)) == 1001
    assert tuning_seed(_config(seed=1000, noise_seed=1001)) == 1002
    assert tuning_seed(_config(seed=3), 4) == 4


def test_the_tuned_config_round_trips_through_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    grid = tmp_path / "g.toml"
    grid.write_text('[grid.fed]\nradius = ["constant"]\nbeta = [1000.0, 1.0]\nreg = [1.0, 2.0]\n')
    out = tmp_path / "out"
    argv = ["tune", str(config), "--grid", str(grid), "--out", str(out), "--tuning-runs", "3", "--no-progress"]
    assert main(argv) == 0
    stdout = capsys.readouterr().out
    assert RULE in stdout and "* radius=constant, beta=1, reg=" in stdout
    tuned = load_config(out / "tuned.toml")
    record = json.loads((out / "tune.json").read_text())
    assert record["rule"] == RULE and record["tuning_seed"] == 1000 and record["report_seeds"] == [3]
    assert (record["runs"], record["horizon"]) == (3, 200) and record["task_seconds"] > 0
    candidates = record["entries"]["fed"]["candidates"]
    assert len(candidates) == 4 and all(len(c["final_regret"]) == 3 for c in candidates)
    chosen = record["entries"]["fed"]["chosen"]
    assert chosen["beta"] == 1.0
    original = load_config(config)
    fed = tuned.algorithms[0].params
    assert (fed.radius, fed.beta, fed.reg) == ("constant", chosen["beta"], chosen["reg"])
    assert tuned.algorithms[1:] == original.algorithms[1:]  # untuned entries unchanged
    assert tuned.experiment.seed == 3 and tuned.experiment.name == "tiny-tuned"
    header = (out / "tuned.toml").read_text().split("\n[experiment]")[0]
    assert "tuning seed 1000" in header and RULE in header and '"beta": [1000.0, 1.0]' in header
    assert main(["run", str(out / "tuned.toml"), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    assert "tiny-tuned" in capsys.readouterr().out
    # resume: the finished task is loaded, not re-run, and the choice is the same
    assert main([*argv, "--resume"]) == 0
    assert "resume: 1 of 1 task(s) already finished" in capsys.readouterr().err
    assert json.loads((out / "tune.json").read_text())["entries"] == record["entries"]


BAD = [
    ("", [], "is empty"),
    ("[grid]\n", [], "is empty"),
    ("[grid.fed\nbeta = [1]\n", [], "malformed TOML in grid"),
    ("[grid.nobody]\nbeta = [1.0]\n", [], 'grid."nobody": no algorithm entry has that label; the config\'s labels: '),
    (
        "[grid.alone]\nbatch = [5]\n",
        [],
        "grid.\"alone\".batch: algorithm 'linucb-independent' has no parameter 'batch'",
    ),
    ("[grid.fed]\nbeta = [1.0, -1.0]\n", [], 'grid."fed" candidate beta=-1: algorithms[1] (fedlinucb): beta must be'),
    ("[grid.fed]\nbatch = [500]\n", [], 'grid."fed" candidate batch=500: algorithms[1] (fedlinucb): batch must be'),
    ("[grid.fed]\nbeta = 1.0\n", [], 'grid."fed".beta must be a non-empty list of candidate values, got 1.0'),
    ("[grid.fed]\nbeta = []\n", [], 'grid."fed".beta must be a non-empty list'),
    ("[grid.fed]\n", [], 'grid."fed" is empty'),
    ("[grid.fed]\nbeta = [1.0, 1.0]\n", [], 'grid."fed".beta repeats 1.0'),
    ('[grid.fed]\nlabel = ["x"]\n', [], 'grid."fed".label: an entry\'s label is not a parameter'),
    ("[grid]\nfed = 1\n", [], 'grid."fed" must be a table'),
    ("[tune]\nruns = 2\n", [], "unknown top-level key(s) ['tune']; valid: 'grid'"),
    ("[grid.fed]\nbeta = [1.0]\n", ["--tuning-seed", "3"], "tuning seed 3 overlaps the report seeds (seed = 3)"),
    ("[grid.fed]\nbeta = [1.0]\n", ["--tuning-seed", "-1"], "--tuning-seed: expected an integer >= 0, got -1"),
    ("[grid.fed]\nbeta = [1.0]\n", ["--tuning-horizon", "201"], "tuning horizon must be an integer in [1, 200]"),
    ("[grid.fed]\nbeta = [1.0]\n", ["--tuning-horizon", "5"], "the tuning experiment (horizon 5): algorithms[1]"),
    ("[grid.fed]\nbeta = [1.0]\n", ["--address", "x:1"], "--address is only for --backend ray"),
    ("[grid.fed]\nbeta = [1.0]\n", ["--max-memory", "1K"], "the simulation would hold at least"),
]


@pytest.mark.parametrize(("grid", "extra", "message"), BAD)
def test_bad_grids_and_seeds_get_one_line_and_nothing_runs(
    grid: str,
    extra: list[str],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_task(*args: object, **kwargs: object) -> None:
        raise AssertionError("a task ran")

    monkeypatch.setattr(task_module, "simulate_runs", no_task)
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    grid_path = tmp_path / "g.toml"
    grid_path.write_text(grid)
    out = tmp_path / "out"
    try:
        status = main(["tune", str(config), "--grid", str(grid_path), "--out", str(out), *extra])
    except SystemExit as exc:  # argparse refuses an option's value itself
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedbandits: error: "), err
    assert message in err, err
    assert not out.exists()


def test_a_noise_seed_is_a_report_seed_too() -> None:
    with pytest.raises(ValueError, match=r"tuning seed 5 overlaps the report seeds \(seed = 3, noise_seed = 5\)"):
        tune_plan(_config(seed=3, noise_seed=5), parse_grid(GRID), seed=5)


def test_the_api_refuses_a_grid_it_cannot_read(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read grid"):
        fedbandits.tune(_config(), tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="must be a table with a"):
        parse_grid(["beta"])
    with pytest.raises(ValueError, match="tuning runs must be an integer >= 1"):
        tune_plan(_config(), parse_grid(GRID), runs=0)
    with pytest.raises(ValueError, match="resume=True needs out= or checkpoint="):
        fedbandits.tune(_config(), GRID, resume=True)


def test_the_example_grid_plans_against_its_config() -> None:
    examples = Path(__file__).parent.parent / "examples"
    plan = tune_plan(load_config(examples / "zhou-synthetic.toml"), load_grid(examples / "zhou-synthetic-grid.toml"))
    assert len(plan.candidates) == 6 and plan.seed == 1000 and plan.tuning.experiment.runs == 4
    assert plan.tuning.experiment.horizon == 10_000


def test_the_non_private_default_is_the_rules_choice_and_the_reproductions_keep_the_papers() -> None:
    """docs/tuning.md "The defaults": the rule chose a constant radius beta = 1 for the LinUCB learners
    without privacy (linucb-independent, linucb-super, fedlinucb with protocol 'none'); Zhou &
    Chowdhury's reproductions state Lemma C.4's radius for their non-private FedLinUCB, as the paper ran it."""
    from fedbandits.experiments.figures import zhou

    config = fedbandits.config_from_dict(
        {
            "experiment": {"seed": 1, "horizon": 100},
            "environment": {"name": "gaussian-sphere", "agents": 2, "arms": 3, "dim": 2},
            "algorithms": [
                {"name": "linucb-independent"},
                {"name": "linucb-super"},
                {"name": "fedlinucb"},
                {"name": "fedlinucb", "protocol": "ldp", "delta": 1e-3},
            ],
        }
    )
    radii = [(a.params.radius, a.params.beta) for a in config.algorithms]
    assert radii == [("constant", 1.0)] * 3 + [("constant", 10.0)]  # private: the noise-aware default
    for figure in (zhou.zhou_fig2c(), zhou.zhou_fig3a()):
        (fed,) = [a for a in figure.config["algorithms"] if a["label"] == "FedLinUCB"]
        assert fed["radius"] == "theory"
