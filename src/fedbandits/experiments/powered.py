"""Powered reruns: an inconclusive claim checked again with the runs its power statement asks for.

When the base run (R runs) cannot settle a claim, :mod:`fedbandits.experiments.power` says how
many runs N a paired test would need at the observed effect.  If the rerun is affordable (at most
``AFFORDABLE_SECONDS`` of compute), ``reproduce`` plays the claim's curves with R + N runs -- every
panel that holds some of them, restricted to them (:func:`fedbandits.experiments.causes.restrict`:
each kept entry keeps its base noise stream, so runs 0..R-1 are the base run's runs of those
curves, bit for bit) -- and checks the claim on the N *fresh* runs R..R+N-1 alone
(:func:`fresh_table`).  Those are independent of the runs that made the claim inconclusive, so the
rerun is a valid test at the stated level given that selection (testing all R + N runs would look
at the selecting data twice and raise the false-verdict rate).  The page gives the base verdict
and the verdict with the fresh runs.  (Replaying the R base runs costs R / (R + N) of the rerun;
a config cannot start at run R.)

When they run (``reproduce(..., powered=...)``, ``--powered`` on the command line):

* ``"affordable"``: every inconclusive claim whose power statement is affordable;
* ``"none"``: none (the page then gives the power statement only).

The default (None) is ``"affordable"`` at the scales that settle claims (``paper``, ``published``)
and ``"none"`` at ``quick`` and ``tiny``, which are for trying the tool: a rerun may take up to
an hour of compute per claim, and the quick scale's figures take about 3 minutes together.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedbandits.experiments.causes import panel_labels, restrict
from fedbandits.experiments.figures.common import Experiment

POWERED_MODES = ("affordable", "none")


#: the scales at which the default is to run the affordable reruns
POWERED_SCALES = ("paper", "published")


def powered_mode(mode: str | None, scale: str) -> str:
    """``mode``, or for None the default at ``scale``; a one-line ValueError for an unknown mode."""
    if mode is None:
        return "affordable" if scale in POWERED_SCALES else "none"
    return check_powered_mode(mode)


def check_powered_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`POWERED_MODES`, else a one-line ValueError."""
    if mode not in POWERED_MODES:
        raise ValueError(f"powered must be one of {', '.join(map(repr, POWERED_MODES))}, got {mode!r}")
    return mode


def fresh_table(table: Mapping[str, np.ndarray], base_runs: int) -> dict[str, np.ndarray]:
    """Every key's per-run values without the first ``base_runs`` (the replayed base runs)."""
    return {key: np.asarray(values)[base_runs:] for key, values in table.items()}


def powered_configs(experiment: Experiment, index: int, runs: int) -> list[tuple[str, dict[str, Any]]]:
    """(panel, config) of claim ``index``'s rerun: each panel holding some of its curves, restricted to
    them, with ``runs`` runs in all (the base runs and the fresh ones); a one-line ValueError for a bad
    index or run count."""
    if not 0 <= index < len(experiment.claims):
        raise ValueError(f"claim index must be in [0, {len(experiment.claims) - 1}], got {index}")
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 2:
        raise ValueError(f"runs must be an integer >= 2, got {runs!r}")
    keys = experiment.claims[index].args
    configs = []
    for panel, raw in experiment.configs():
        labels = panel_labels(panel, raw, keys)
        if labels:
            config = restrict(raw, labels)
            config["experiment"] = {**copy.deepcopy(config["experiment"]), "runs": runs}
            configs.append((panel, config))
    return configs
