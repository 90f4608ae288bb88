"""The benchmarks' common ground: Zhou & Chowdhury's synthetic instance at M = 20 and M = 100.

``gaussian-sphere`` with K = 100 arms and d = 10, seed 2023, T = 10,000 and 4 runs (``--quick``:
T = 1,000 and 2 runs); every algorithm of a benchmark runs in one experiment per M, so all see the
same contexts and rewards.  Imported by the scripts beside it (run them from anywhere:
``python benchmarks/NAME.py``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from typing import Any

import fedbandits
from fedbandits.config import Config
from fedbandits.sim.results import Results
from fedbandits.sim.runner import run_experiment


def scale(args: argparse.Namespace) -> tuple[int, int]:
    """(runs, horizon) of the full or the ``--quick`` benchmark."""
    return (2, 1000) if args.quick else (4, 10_000)


AGENTS = (20, 100)


def instance(name: str, algorithms: list[dict[str, Any]], runs: int, horizon: int, agents: int) -> Config:
    """The config of ``algorithms`` on the instance with M = ``agents`` (seed 2023)."""
    return fedbandits.config_from_dict(
        {
            "experiment": {"name": f"{name} M={agents}", "seed": 2023, "runs": runs, "horizon": horizon},
            "environment": {"name": "gaussian-sphere", "agents": agents, "arms": 100, "dim": 10},
            "algorithms": algorithms,
        }
    )


def experiments(
    name: str, algorithms: list[dict[str, Any]], runs: int, horizon: int, workers: int = 1
) -> Iterator[tuple[int, Results]]:
    """Run ``algorithms`` on the instance at M = 20 and M = 100; yields (M, results) and prints a header."""
    for agents in AGENTS:
        config = instance(name, algorithms, runs, horizon, agents)
        start = time.perf_counter()
        results = run_experiment(config, workers=workers)
        print(f"M = {agents}, T = {horizon}, {runs} runs ({time.perf_counter() - start:.0f} s)")
        yield agents, results


def print_regrets(results: Results, reference: str | None = None) -> None:
    """Final regret (mean +- std over runs) and seconds of every algorithm, and the ratio to ``reference``."""
    base = results.algorithms[reference].final_regret.mean() if reference else None
    for label, res in results.algorithms.items():
        final = res.final_regret
        std = final.std(ddof=1) if final.size > 1 else 0.0
        ratio = f"   x{final.mean() / base:5.2f}" if base else ""
        print(f"  {label:<36} regret {final.mean():>8.0f} +- {std:>5.0f}   {res.seconds:6.2f} s{ratio}")
