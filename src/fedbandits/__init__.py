"""fedbandits: differentially private federated linear contextual bandits.

The flow of one run through the modules:

    config.py          a TOML file or dict -> a validated Config (names checked against the registry)
    registry.py        each name -> its parameter dataclass and factory (environments, algorithms, protocols)
    sim/runner.py      run_experiment: splits the runs into tasks, checks memory, merges results in run order
    sim/backends.py    executes the tasks here, in a local process pool or on Ray (sim/checkpoint.py keeps them)
    sim/task.py        simulate_runs: builds env + policy (+ its protocol) and loops over time
    envs/, algorithms/, protocols/   contexts and rewards; actions and local statistics; the private sync P=(R, S, A)
    sim/results.py     Results: regret curves, communication and privacy spent, saved with the config
    online/            Agent: one silo's live decisions (choose, reward later, sync), from the same config
    sim/reports.py, plots.py         the per-algorithm reports merged over tasks; the figures

Where a newcomer's code goes: a new algorithm in algorithms/ (its entry in registry.py), a new
protocol in protocols/ (its entry in protocols/catalog.py; its mechanism and calibration in privacy/),
a new environment in envs/ (its entry in registry.py); then its entry point in pyproject.toml
(plugins.py loads every name from the entry points; a third-party package adds its own the same way,
docs/extending.md).  A module imports only its own room and lower ones (core, plugins < envs,
privacy < protocols < algorithms < registry < config < online < sim < experiments, federation, audit < cli);
tests/test_imports.py checks it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fedbandits._version import __version__

if TYPE_CHECKING:
    from fedbandits.api import quickstart_config, run, tune
    from fedbandits.config import Config, ConfigError, config_from_dict, load_config, loads_config
    from fedbandits.online import Agent, Decision
    from fedbandits.sim.results import Results

# The public names are imported at their first use (PEP 562): importing a submodule -- the
# deployment's ClientApp imports fedbandits.federation.client_app once per message -- must not pay for the
# experiments and their scipy solvers, which ``fedbandits.api`` pulls in (tests/test_lazy.py).
_HOMES = {
    "quickstart_config": "fedbandits.api",
    "run": "fedbandits.api",
    "tune": "fedbandits.api",
    "Config": "fedbandits.config",
    "ConfigError": "fedbandits.config",
    "config_from_dict": "fedbandits.config",
    "load_config": "fedbandits.config",
    "loads_config": "fedbandits.config",
    "Agent": "fedbandits.online",
    "Decision": "fedbandits.online",
    "Results": "fedbandits.sim.results",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'fedbandits' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])


__all__ = [
    "Agent",
    "Config",
    "ConfigError",
    "Decision",
    "Results",
    "__version__",
    "config_from_dict",
    "load_config",
    "loads_config",
    "quickstart_config",
    "run",
    "tune",
]
