"""The simulator: time loop, seeding, parallel runs and results files."""

from fedbandits.sim.results import AlgorithmResult, Results
from fedbandits.sim.runner import run_experiment
from fedbandits.sim.task import simulate_runs

__all__ = ["AlgorithmResult", "Results", "run_experiment", "simulate_runs"]
