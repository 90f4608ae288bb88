"""The Python entry point: the same runs as the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedbandits.config import Config, config_from_dict, load_config
from fedbandits.plots import plot_results
from fedbandits.sim.results import Results
from fedbandits.sim.runner import run_experiment


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
    """
    if isinstance(config, (str, Path)):
        config = load_config(config)
    elif isinstance(config, dict):
        config = config_from_dict(config)
    if experiment:
        config = config.with_experiment(**experiment)
    if checkpoint is None and out is not None:
        checkpoint = Path(out) / "checkpoint"
    if resume and checkpoint is None:
        raise ValueError("resume=True needs out= or checkpoint= (the folder holding the finished runs)")
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
    if out is not None:
        results.save(out)
        plot_results(results, out)
    return results


def quickstart_config() -> Config:
    """The embedded default experiment shipped with the package."""
    return load_config(Path(__file__).with_name("quickstart.toml"))
