"""The memory estimate before allocation: a config sized far above the machine is one line, exit 2."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from fedbandits.config import config_from_dict
from fedbandits.sim.memory import check_memory, parse_bytes, task_bytes


def _config(agents: int, arms: int, dim: int, algorithms: tuple[str, ...] = ("linucb-independent",)):  # type: ignore[no-untyped-def]
    return config_from_dict(
        {
            "experiment": {"horizon": 50, "runs": 3, "runs_per_task": 2},
            "environment": {"name": "gaussian-sphere", "agents": agents, "arms": arms, "dim": dim},
            "algorithms": [{"name": a, "label": f"{a}-{i}"} for i, a in enumerate(algorithms)],
        }
    )


def test_task_bytes_counts_contexts_and_per_agent_state() -> None:
    """R = 2 runs per task, M = 5, K = 7, d = 3: contexts 2*5*7*3 float32 = 840 B; each per-agent
    learner 2 float64 (R, M, d, d) arrays = 2*2*5*9*8 = 1440 B; linucb-super keeps none per agent."""
    assert task_bytes(_config(5, 7, 3)) == 840 + 1440
    assert task_bytes(_config(5, 7, 3, ("linucb-independent", "fedlinucb", "linucb-super"))) == 840 + 2 * 1440


def test_check_memory_refuses_above_the_bound() -> None:
    """3 runs of 2 per task: a task of 2 runs (2280 B) and one of 1 run (840 / 2 + 1440 / 2 = 1140 B);
    4 workers run both at once, no more (the tasks there are, with the runs each holds)."""
    config = _config(5, 7, 3)
    assert check_memory(config, 1, 10_000) == 2280
    assert check_memory(config, 4, 10_000) == 2280 + 1140  # tasks running at once
    sizes = r"\(2 task\(s\): 1 of 2 runs, 1 of 1 run, agents = 5, arms = 7, dim = 3, 1 algorithm\(s\)\)"
    with pytest.raises(ValueError, match=r"at least 3.34 KiB " + sizes):
        check_memory(config, 4, 3_000)


def _runs_config(runs: int):  # type: ignore[no-untyped-def]
    """M = 10 (default runs_per_task 128 // 10 = 12), K = 7, d = 3, one per-agent learner: a run
    holds 10*7*3 float32 contexts (840 B) and 2 float64 (10, 3, 3) arrays (1440 B), 2280 B."""
    return config_from_dict(
        {
            "experiment": {"horizon": 50, "runs": runs},
            "environment": {"name": "gaussian-sphere", "agents": 10, "arms": 7, "dim": 3},
            "algorithms": [{"name": "linucb-independent"}],
        }
    )


@pytest.mark.parametrize(
    ("runs", "workers", "need", "tasks"),
    [
        (1, 1, 2280, "1 task(s) of 1 run"),  # was estimated as 12 runs (27360 B) and said "12 runs"
        (1, 2, 2280, "1 task(s) of 1 run"),  # one task: the second worker has nothing to hold
        (12, 1, 12 * 2280, "1 task(s) of 12 runs"),
        (12, 4, 12 * 2280, "1 task(s) of 12 runs"),
        (13, 1, 12 * 2280, "1 task(s) of 12 runs"),  # the largest task
        (13, 2, 13 * 2280, "2 task(s): 1 of 12 runs, 1 of 1 run"),  # the last task holds 1 run
        (30, 2, 24 * 2280, "2 task(s) of 12 runs"),  # tasks of 12, 12 and 6 runs: the 2 largest
    ],
)
def test_the_estimate_counts_the_runs_a_task_holds(runs: int, workers: int, need: int, tasks: str) -> None:
    from fedbandits.sim.runner import check_run_memory

    config = _runs_config(runs)
    assert config.runs_per_task() == 12
    assert check_run_memory(config, workers=workers, max_memory=need) == need
    with pytest.raises(ValueError, match=re.escape(f"({tasks}, agents = 10, arms = 7, dim = 3, 1 algorithm(s))")):
        check_run_memory(config, workers=workers, max_memory=need - 1)


def test_parse_bytes() -> None:
    assert parse_bytes("512M") == 512 << 20 and parse_bytes("1.5G") == 3 << 29 and parse_bytes("100") == 100
    assert parse_bytes("8GiB") == 8 << 30 and parse_bytes("2t") == 2 << 40
    for bad in ("", "-1G", "0", "lots", "1X"):
        with pytest.raises(ValueError, match="--max-memory must be a positive size"):
            parse_bytes(bad)


def test_oversized_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """The issue's example (M = 10^7, K = 1000, d = 1000) asked numpy for 36.3 TiB and died with a
    traceback; now it is refused before anything is allocated, and nothing is written."""
    config = tmp_path / "huge.toml"
    config.write_text(
        '[experiment]\nhorizon = 10\n[environment]\nname = "gaussian-sphere"\nagents = 10000000\narms = 1000\n'
        'dim = 1000\n[[algorithms]]\nname = "linucb-independent"\n'
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "fedbandits.cli", "run", str(config), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "more than the" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()
    small = subprocess.run(
        # the quickstart's 4 runs hold 4*20*100*10*4 B of contexts and 4 per-agent learners of
        # 2*4*20*10*10*8 B: 832,000 B (812 KiB), however its tasks split them
        [sys.executable, "-m", "fedbandits.cli", "quickstart", "--max-memory", "512K", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert small.returncode == 2 and "of --max-memory" in small.stderr and not out.exists()


def test_export_is_refused_before_building_anything(tmp_path: Path) -> None:
    """data export holds M x rounds x K x (d + 1) float32 plus one round's contexts: M = 5, K = 7,
    d = 3, 10 rounds = 5*10*7*4*4 + 5*7*3*4 = 5600 + 420 B.  Above the bound: one line, no folder."""
    from fedbandits.sim.export import export_partition
    from fedbandits.sim.memory import check_export_memory, export_bytes

    config = _config(5, 7, 3)
    assert export_bytes(config, 10) == 6020 and check_export_memory(config, 10, 6020) == 6020
    out = tmp_path / "export"
    with pytest.raises(ValueError, match=r"at least 5.88 KiB \(10 rounds, agents = 5, arms = 7, dim = 3\)") as err:
        export_partition(config, out, 10, max_memory=6019)
    assert "\n" not in str(err.value) and not out.exists()
    assert len(export_partition(config, out, 10, max_memory=6020)) == 5
    huge = config_from_dict(
        {
            "experiment": {"horizon": 10},
            "environment": {"name": "gaussian-sphere", "agents": 10_000_000, "arms": 1000, "dim": 1000},
            "algorithms": [{"name": "linucb-independent"}],
        }
    )
    with pytest.raises(ValueError, match=r"more than the .* of available memory"):
        export_partition(huge, out, 10)


def test_reproduce_max_memory_refuses_before_any_figure_runs(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`reproduce --max-memory` bounds every figure it runs: too small a bound is one line naming
    the sizes and the estimate, exit 2, before any figure runs (nothing written)."""
    from fedbandits.cli import main

    out = tmp_path / "rep"
    assert main(["reproduce", "zhou-fig2a", "--scale", "tiny", "--max-memory", "1K", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedbandits: error: the simulation would hold at least")
    sizes = r"agents = \d+, arms = \d+, dim = \d+, \d+ algorithm\(s\)\), more than the 1 KiB of --max-memory"
    assert re.search(sizes, err)
    assert not out.exists()
    assert main(["reproduce", "zhou-fig2a", "--scale", "tiny", "--max-memory", "lots", "--out", str(out)]) == 2
    assert "--max-memory must be a positive size" in capsys.readouterr().err and not out.exists()


def test_reproduce_counts_the_tasks_of_its_local_pool() -> None:
    """reproduce opens one backend for every figure: the estimate counts that pool's workers."""
    from fedbandits.sim.backends import LocalBackend
    from fedbandits.sim.runner import check_run_memory

    config = _config(5, 7, 3)  # 3 runs of 2 per task: tasks of 2 runs (2280 B) and 1 run (1140 B)
    assert check_run_memory(config, backend=LocalBackend(4), max_memory=10_000) == 2280 + 1140
    assert check_run_memory(config, workers=4, max_memory=10_000) == 2280 + 1140
    assert check_run_memory(config, backend=LocalBackend(1), max_memory=10_000) == 2280
    with pytest.raises(ValueError, match=r"2 task\(s\): 1 of 2 runs, 1 of 1 run"):
        check_run_memory(config, backend=LocalBackend(2), max_memory=3419)


def test_data_export_max_memory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`data export --max-memory`: the export's estimate (6020 B here) against the bound."""
    from fedbandits.cli import main

    config = tmp_path / "c.toml"
    config.write_text(
        '[environment]\nname = "gaussian-sphere"\nagents = 5\narms = 7\ndim = 3\n'
        '[[algorithms]]\nname = "linucb-independent"\n'
    )
    out = tmp_path / "export"
    base = ["data", "export", "--config", str(config), "--rounds", "10", "--out", str(out)]
    assert main([*base, "--max-memory", "1K"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "fedbandits: error: the export would hold at least 5.88 KiB (10 rounds, agents = 5, arms = 7, dim = 3), "
        "more than the 1 KiB of --max-memory: lower --rounds or the sizes\n"
    )
    assert not out.exists()
    assert main([*base, "--max-memory", "6020"]) == 0
    assert len(list(out.glob("silo-*.npz"))) == 5
