"""Powered reruns: an inconclusive claim checked again with the runs its power statement asks for.

When the base run cannot settle a claim, :mod:`fedbandits.experiments.power` says how many runs a
paired test would need at the observed effect.  If that is affordable (at most
``AFFORDABLE_SECONDS`` of compute for the claim's curves alone), ``reproduce`` runs the claim's
curves with that many runs -- every panel that holds some of them, restricted to them
(:func:`fedbandits.experiments.causes.restrict`: each kept entry keeps its base noise stream, so
runs 0..n-1 of the rerun are the base run's runs for those curves, bit for bit, and the rest are
new) -- and checks the claim on it.  The rerun's verdict is the claim's verdict with those runs; the
page gives both.

When they run (``reproduce(..., powered=...)``, ``--powered`` on the command line):

* ``"affordable"``: every inconclusive claim whose power statement is affordable;
* ``"none"``: none (the page then gives the power statement only).

The default (None) is ``"affordable"`` at the scales that settle claims (``paper``, ``published``)
and ``"none"`` at ``quick`` and ``tiny``, which are for trying the tool: a rerun may take up to
an hour of compute per claim, and the quick scale promises about a minute.
"""

from __future__ import annotations

import copy
from typing import Any

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


def powered_configs(experiment: Experiment, index: int, runs: int) -> list[tuple[str, dict[str, Any]]]:
    """(panel, config) of claim ``index``'s rerun: each panel holding some of its curves, restricted to
    them, with ``runs`` runs; a one-line ValueError for a bad index or run count."""
    if not 0 <= index < len(experiment.claims):
        raise ValueError(f"claim index must be in [0, {len(experiment.claims) - 1}], got {index}")
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 2:
        raise ValueError(f"runs must be an integer >= 2, got {runs!r}")
    keys = experiment.claims[index].args
    configs = []
    for panel, raw in experiment.configs():
        labels = panel_labels(experiment, panel, raw, keys)
        if labels:
            config = restrict(raw, labels)
            config["experiment"] = {**copy.deepcopy(config["experiment"]), "runs": runs}
            configs.append((panel, config))
    return configs
