"""Exporting a simulated instance as data files, one per agent (``fedbandits data export``).

A configured environment, built with exactly the Generator the simulator gives a run, is played
for some rounds and written in the formats of :mod:`fedbandits.envs.files`: a data-files
environment over the files serves every agent the same contexts as the source run.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fedbandits.config import Config
from fedbandits.core.validation import check_choice, check_int
from fedbandits.envs.files import write_data_file
from fedbandits.registry import ENVIRONMENTS
from fedbandits.sim.memory import check_export_memory
from fedbandits.sim.seeding import env_rngs

EXPORT_FORMATS = ("npz", "csv")


def export_partition(
    config: Config,
    out_dir: str | os.PathLike[str],
    rounds: int,
    run: int = 0,
    fmt: str = "npz",
    max_memory: int | None = None,
) -> list[Path]:
    """Play ``rounds`` rounds of run ``run`` of ``config``'s environment and write each agent's file.

    The environment is built with exactly the Generator the simulator gives run ``run``
    (:func:`fedbandits.sim.seeding.env_rngs`); agent i's features and expected rewards of every
    round become user t of ``out_dir/silo-<i>.<fmt>``.  A data-files environment over these files
    in file order then serves every agent the same contexts as the source run (its reward noise
    comes from its own streams).  Holds all rounds in memory: rounds x M x K x (d + 1) float32;
    refused in one line before anything is built when that exceeds ``max_memory`` bytes (default:
    the available memory, :func:`fedbandits.sim.memory.check_export_memory`).
    """
    check_int("rounds", rounds, low=1)
    check_int("run", run, low=0, high=config.experiment.runs - 1)
    check_choice("format", fmt, EXPORT_FORMATS)
    check_export_memory(config, rounds, max_memory)
    env_cfg = config.environment
    env = ENVIRONMENTS[env_cfg.name].factory(env_cfg.params, env_rngs(config.experiment.seed, [run]))
    available = getattr(env, "rounds_available", None)
    if available is not None and available < rounds:
        raise ValueError(f"environment {env_cfg.name} has {available} rounds available, {rounds} asked for")
    m, k, d = env.n_agents, env.n_arms, env.dim
    features = np.empty((m, rounds, k, d), dtype=np.float32)
    means = np.empty((m, rounds, k), dtype=np.float32)
    for t in range(rounds):
        rnd = env.next_round()
        features[:, t] = rnd.features[0]
        means[:, t] = rnd.means[0]
    out = Path(out_dir)
    return [write_data_file(out / f"silo-{i}.{fmt}", features[i], means[i]) for i in range(m)]
