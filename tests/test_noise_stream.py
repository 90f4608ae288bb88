"""``noise_stream``: an algorithm entry's privacy-noise stream, by default its position."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedbandits.config import ConfigError, config_from_dict, load_config
from fedbandits.experiments.frontier import frontier_plan
from fedbandits.sim.checkpoint import key_fields
from fedbandits.sim.runner import run_experiment

BASE: dict[str, Any] = {
    "experiment": {"seed": 5, "runs": 3, "horizon": 60, "runs_per_task": 2},
    "environment": {"name": "gaussian-sphere", "agents": 3, "arms": 6, "dim": 3},
    "algorithms": [
        {"name": "fedlinucb", "label": "ldp", "protocol": "ldp", "batch": 5, "epsilon": 1.0},
        {"name": "linucb-independent", "label": "alone"},
        {"name": "fedlinucb", "label": "ldp2", "protocol": "ldp", "batch": 10, "epsilon": 2.0},
    ],
}


def _with_streams(streams: list[int | None]) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    for entry, stream in zip(data["algorithms"], streams, strict=True):
        if stream is not None:
            entry["noise_stream"] = stream
    return data


def test_default_stream_is_the_position_bit_for_bit() -> None:
    # catches a default other than the 0-based position (e.g. 1-based), which would change every
    # existing private result: stating the positions must give today's numbers exactly
    default = run_experiment(config_from_dict(copy.deepcopy(BASE)), workers=1)
    stated = run_experiment(config_from_dict(_with_streams([0, 1, 2])), workers=1)
    for lab in ("ldp", "alone", "ldp2"):
        assert np.array_equal(default.algorithms[lab].curves, stated.algorithms[lab].curves), lab
        assert np.array_equal(default.algorithms[lab].per_agent, stated.algorithms[lab].per_agent), lab
    # and the stream is used at all: another stream gives the private algorithm other noise, so other curves
    other = run_experiment(config_from_dict(_with_streams([7, None, None])), workers=1)
    assert not np.array_equal(default.algorithms["ldp"].curves, other.algorithms["ldp"].curves)
    assert np.array_equal(default.algorithms["ldp2"].curves, other.algorithms["ldp2"].curves)


def test_unstated_stream_leaves_the_saved_config_and_checkpoint_key_as_before(tmp_path: Path) -> None:
    # catches a stream resolved eagerly into the config: it would change every existing checkpoint
    # key, config.toml and deployment spec digest (they all hash Config.to_dict())
    config = config_from_dict(copy.deepcopy(BASE))
    assert all("noise_stream" not in a for a in config.to_dict()["algorithms"])
    assert [config.noise_stream(i) for i in range(3)] == [0, 1, 2]
    stated = config_from_dict(_with_streams([None, 4, None]))
    assert [stated.noise_stream(i) for i in range(3)] == [0, 4, 2]
    assert key_fields(stated) != key_fields(config)  # a stated stream is part of the checkpoint key
    results = run_experiment(stated, workers=1)
    results.save(tmp_path / "r")
    assert load_config(tmp_path / "r" / "config.toml") == stated  # survives config.toml
    assert config_from_dict(stated.to_dict()) == stated


@pytest.mark.parametrize(
    ("streams", "message"),
    [
        ([None, 1.0, None], "algorithms[2].noise_stream must be an integer >= 0, got 1.0"),
        ([None, True, None], "algorithms[2].noise_stream must be an integer >= 0, got True"),
        (["0", None, None], "algorithms[1].noise_stream must be an integer >= 0, got '0'"),
        ([None, None, -1], "algorithms[3].noise_stream must be an integer >= 0, got -1"),
        (
            [5, None, 5],
            "algorithms[3].noise_stream must be an integer >= 0 used by no other entry, got 5: the stream of "
            "algorithms[1] (an entry without noise_stream uses its 0-based position); entries sharing a stream "
            "would draw the same privacy noise",
        ),
        (  # a stated stream equal to another entry's default (its position) is a duplicate too
            [None, 0, None],
            "algorithms[2].noise_stream must be an integer >= 0 used by no other entry, got 0: the stream of "
            "algorithms[1] (an entry without noise_stream uses its 0-based position); entries sharing a stream "
            "would draw the same privacy noise",
        ),
    ],
)
def test_bad_noise_stream_is_refused_in_one_line(streams: list[Any], message: str) -> None:
    # catches a bad value that is accepted, or an error that does not name the field and its range
    data = _with_streams(streams)
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    assert str(info.value) == message and "\n" not in str(info.value)


def test_environment_takes_no_noise_stream() -> None:
    data = copy.deepcopy(BASE)
    data["environment"]["noise_stream"] = 1
    with pytest.raises(ConfigError, match=re.escape("environment (gaussian-sphere): unknown key(s) ['noise_stream']")):
        config_from_dict(data)


def test_frontier_expands_an_entry_with_a_stated_stream() -> None:
    # catches the frontier copying one entry's noise_stream into every epsilon variant (refused as shared)
    config = config_from_dict(_with_streams([3, None, None]))
    plan = frontier_plan(config, (0.5, 1.0))
    assert len(plan.config.algorithms) == 2 * 2 + 2
    assert all(a.noise_stream is None for a in plan.config.algorithms)
