"""The Python entry point: the same runs as the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedbandits.config import Config, config_from_dict, load_config
from fedbandits.sim.results import Results
from fedbandits.sim.runner import run_experiment


def run(
    config: Config | dict[str, Any] | str | Path,
    *,
    workers: int = 1,
    out: str | Path | None = None,
    progress: bool = False,
    **experiment: Any,
) -> Results:
    """Run an experiment and return its :class:`Results` (optionally saved to ``out``).

    ``config`` is a :class:`Config`, a dict shaped like the TOML file, or a path to one.
    Keyword arguments override ``[experiment]`` fields (``runs=``, ``seed=``, ...), exactly like
    the CLI's ``--runs`` and ``--seed``.
    """
    if isinstance(config, (str, Path)):
        config = load_config(config)
    elif isinstance(config, dict):
        config = config_from_dict(config)
    if experiment:
        config = config.with_experiment(**experiment)
    results = run_experiment(config, workers=workers, progress=progress)
    if out is not None:
        from fedbandits.plots import plot_results

        results.save(out)
        plot_results(results, out)
    return results


def quickstart_config() -> Config:
    """The embedded default experiment shipped with the package."""
    return load_config(Path(__file__).with_name("quickstart.toml"))
