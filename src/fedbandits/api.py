"""The Python entry point: the same runs as the command line."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from fedbandits.config import Config, as_config, load_config
from fedbandits.experiments.tune import (
    DEFAULT_TUNING_RUNS,
    Grid,
    Tuning,
    load_grid,
    parse_grid,
    run_tuning,
    tune_plan,
    write_tuning,
)
from fedbandits.plots import plot_results
from fedbandits.sim.results import ClippingWarning, PrivacyUnitWarning, Results
from fedbandits.sim.runner import run_experiment


def _checkpoint_folder(out: str | Path | None, checkpoint: str | Path | None, resume: bool) -> str | Path | None:
    """``checkpoint``, or ``out/checkpoint`` when only ``out`` is given; ``resume`` needs one of them."""
    if checkpoint is None and out is not None:
        checkpoint = Path(out) / "checkpoint"
    if resume and checkpoint is None:
        raise ValueError("resume=True needs out= or checkpoint= (the folder holding the finished runs)")
    return checkpoint


def run(
    config: Config | dict[str, Any] | str | Path,
    *,
    workers: int | str = "auto",
    out: str | Path | None = None,
    progress: bool = False,
    backend: str = "local",
    address: str | None = None,
    resume: bool = False,
    checkpoint: str | Path | None = None,
    max_retries: int = 3,
    **experiment: Any,
) -> Results:
    """Run an experiment and return its :class:`Results` (optionally saved to ``out``).

    ``config`` is a :class:`Config`, a dict shaped like the TOML file, or a path to one.
    Keyword arguments override ``[experiment]`` fields (``runs=``, ``seed=``, ...), exactly like
    the CLI's ``--runs`` and ``--seed``.

    ``backend="local"`` (default: ``workers`` local processes; ``"auto"``: 1) or ``"ray"`` (a Ray
    cluster at ``address``, or a local Ray instance without one; ``workers`` caps the tasks in
    flight; ``"auto"``: twice the cluster's CPUs); the numbers are the same either way.  More than
    one local worker re-runs the calling script in every worker process: from a script, call this
    under ``if __name__ == "__main__":`` (without it the call is refused in one line, before any
    process starts; :mod:`fedbandits.sim.mainguard`).
    Finished tasks are written to ``checkpoint`` (default ``out/checkpoint`` when ``out`` is
    given) as they arrive; ``resume=True`` skips those already there, as the CLI's ``--resume``.

    An algorithm that clipped more than 5% of its features or rewards gets one
    :class:`~fedbandits.sim.results.ClippingWarning` naming the bound to raise (the CLI prints the
    same line on stderr); ``warnings.simplefilter("ignore", ClippingWarning)`` silences them.  A private
    algorithm that protects interactions while its users return gets a
    :class:`~fedbandits.sim.results.PrivacyUnitWarning`.
    """
    config = as_config(config)
    if experiment:
        config = config.with_experiment(**experiment)
    checkpoint = _checkpoint_folder(out, checkpoint, resume)
    results = run_experiment(
        config,
        workers=workers,
        progress=progress,
        backend=backend,
        address=address,
        checkpoint=checkpoint,
        resume=resume,
        max_retries=max_retries,
    )
    for line in results.clipping_warnings():
        warnings.warn(line, ClippingWarning, stacklevel=2)
    for line in results.privacy_unit_warnings():
        warnings.warn(line, PrivacyUnitWarning, stacklevel=2)
    if out is not None:
        results.save(out)
        plot_results(results, out)
    return results


def tune(
    config: Config | dict[str, Any] | str | Path,
    grid: dict[str, Any] | str | Path,
    *,
    out: str | Path | None = None,
    tuning_seed: int | None = None,
    tuning_runs: int = DEFAULT_TUNING_RUNS,
    tuning_horizon: int | None = None,
    workers: int | str = "auto",
    progress: bool = False,
    backend: str = "local",
    address: str | None = None,
    resume: bool = False,
    checkpoint: str | Path | None = None,
    max_retries: int = 3,
    max_memory: int | None = None,
) -> Tuning:
    """Tune the entries of ``config`` named in ``grid`` on seeds no report of ``config`` uses
    (:mod:`fedbandits.experiments.tune`); the tuned config is ``.config``, the scores ``.record()``.

    ``grid`` is a path to a grid TOML file or a dict shaped like one (``{"grid": {label: {parameter:
    [values]}}}``).  ``tuning_seed`` (default 1000, or the next integer that is no report seed),
    ``tuning_runs`` and ``tuning_horizon`` (default: the config's) are the CLI's ``--tuning-*``
    options; the execution options are :func:`run`'s.  With ``out``, writes ``tuned.toml``,
    ``tune.json`` and the tuning results there.  Every bad input is refused before anything runs.
    """
    source = str(config) if isinstance(config, (str, Path)) else "the config"
    config = as_config(config)
    grid_source = str(grid) if isinstance(grid, (str, Path)) else "the grid"
    table: Grid = load_grid(grid) if isinstance(grid, (str, Path)) else parse_grid(grid)
    plan = tune_plan(config, table, seed=tuning_seed, runs=tuning_runs, horizon=tuning_horizon)
    checkpoint = _checkpoint_folder(out, checkpoint, resume)
    tuning = run_tuning(
        plan,
        checkpoint=checkpoint,
        workers=workers,
        progress=progress,
        backend=backend,
        address=address,
        resume=resume,
        max_retries=max_retries,
        max_memory=max_memory,
    )
    if out is not None:
        write_tuning(tuning, out, source, grid_source)
    return tuning


def quickstart_config() -> Config:
    """The embedded default experiment shipped with the package."""
    return load_config(Path(__file__).with_name("quickstart.toml"))
