"""The simulator: time loop, seeding, parallel runs and results files.

Its public names are imported at their first use (PEP 562): a process that needs one small module
of the simulator (the deployment's ClientApp imports :mod:`fedbandits.sim.seeding`, once per message)
does not pay for the runner, its backends and checkpoints (about 40 ms; tests/test_lazy.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedbandits.sim.results import AlgorithmResult, Results
    from fedbandits.sim.runner import run_experiment
    from fedbandits.sim.task import simulate_runs

_HOMES = {
    "AlgorithmResult": "fedbandits.sim.results",
    "Results": "fedbandits.sim.results",
    "run_experiment": "fedbandits.sim.runner",
    "simulate_runs": "fedbandits.sim.task",
}

__all__ = ["AlgorithmResult", "Results", "run_experiment", "simulate_runs"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
