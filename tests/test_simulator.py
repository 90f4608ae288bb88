"""The simulator: reproducibility, common random numbers, results files."""

import numpy as np
import pytest

from fedbandits import config_from_dict
from fedbandits.sim.results import Results
from fedbandits.sim.runner import run_experiment
from fedbandits.sim.task import task_chunks, time_grid


def _config(**experiment):
    exp = {"seed": 3, "runs": 4, "horizon": 120, "runs_per_task": 1, **experiment}
    return config_from_dict(
        {
            "experiment": exp,
            "environment": {"name": "gaussian-sphere", "agents": 5, "arms": 10, "dim": 4},
            "algorithms": [
                {"name": "fedlinucb", "label": "fed", "batch": 10},
                {"name": "linucb-independent", "label": "ind"},
            ],
        }
    )


def _assert_identical(a, b):
    assert a.algorithms.keys() == b.algorithms.keys()
    for lab in a.algorithms:
        x, y = a.algorithms[lab], b.algorithms[lab]
        for field in ("curves", "per_agent", "sync_rounds", "messages", "bytes_sent"):
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field), err_msg=f"{lab}.{field}")


def test_one_and_two_workers_bit_identical():
    config = _config()
    _assert_identical(run_experiment(config, workers=1), run_experiment(config, workers=2))


def test_same_seed_same_numbers_other_seed_other_numbers():
    a, b = run_experiment(_config()), run_experiment(_config())
    _assert_identical(a, b)
    c = run_experiment(_config(seed=4))
    assert not np.array_equal(a.algorithms["fed"].curves, c.algorithms["fed"].curves)


def test_runs_do_not_depend_on_task_grouping():
    """Run r's numbers depend on (seed, r) only: grouping runs into tasks changes nothing."""
    _assert_identical(run_experiment(_config(runs_per_task=1)), run_experiment(_config(runs_per_task=3)))


def test_common_random_numbers_across_algorithm_sets():
    """An algorithm's results do not change when other algorithms share the pass."""
    both = run_experiment(_config())
    alone_cfg = config_from_dict(
        {**_config().to_dict(), "algorithms": [{"name": "linucb-independent", "label": "ind"}]}
    )
    alone = run_experiment(alone_cfg)
    np.testing.assert_array_equal(both.algorithms["ind"].curves, alone.algorithms["ind"].curves)


def test_regret_is_nonnegative_and_monotone():
    res = run_experiment(_config())
    for r in res.algorithms.values():
        assert (r.per_agent >= 0).all()
        assert (np.diff(r.curves, axis=1) >= 0).all()
        np.testing.assert_allclose(r.curves[:, -1], r.per_agent.sum(axis=1), rtol=1e-12)


def test_time_grid_and_chunks():
    grid = time_grid(1000, 50)
    assert grid[0] == 1 and grid[-1] == 1000 and np.all(np.diff(grid) > 0)
    np.testing.assert_array_equal(time_grid(5, 200), [1, 2, 3, 4, 5])
    assert task_chunks(_config(runs=5, runs_per_task=2)) == [[0, 1], [2, 3], [4]]


def test_save_and_load_round_trip(tmp_path):
    res = run_experiment(_config())
    res.save(tmp_path)
    back = Results.load(tmp_path)
    assert back.config == res.config
    np.testing.assert_array_equal(back.grid, res.grid)
    _assert_identical(res, back)  # CSV stores repr(float): exact round trip
    assert back.summary()["algorithms"][0]["label"] == "fed"


def test_load_rejects_non_results_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a results folder"):
        Results.load(tmp_path)
