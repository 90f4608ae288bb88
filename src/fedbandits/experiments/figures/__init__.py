"""Named, parameterised reproductions of published figures: the name -> factory table.

Each entry maps ``(scale, runs)`` to a plain config dict (accepted by
:func:`fedbandits.config.config_from_dict`) plus metadata: title, paper, figure, what the
``quick`` scale shrinks, and the paper's claims as checkable predicates (:class:`Claim`).

Scales:

* ``paper``: the published settings wherever one machine holds them (section 6 of Zhou &
  Chowdhury 2023: alpha = 0.01, B = 25, 25 runs; synthetic T = 10,000, M = 100, K = 100, d = 10;
  MSLR T = 25,000, M = 10; Liu et al.: T = 5e5, 10 runs); Dubey & Pentland's T = 10^7 with 100
  runs is not held: their ``paper`` scale is T = 10^5 with 4 runs, the rest as published (the
  reason and the cluster command are in ``Experiment.shrunk``);
* ``published``: the published settings everywhere (``paper`` but for Dubey & Pentland, whose
  T = 10^7 needs a cluster: ``--backend ray``);
* ``quick``: the same instance and algorithms, fewer rounds and runs (every figure together: about 5 min
  of compute, 3 min with ``--workers 2`` on 2 cores, without cause runs, the quick scale's
  default); what is shrunk is recorded in ``Experiment.shrunk``;
* ``tiny``: a smoke test only (a few agents and rounds), meaningless statistically.

Modules: :mod:`~fedbandits.experiments.figures.common` (:class:`Experiment`, :class:`Claim`, the
scales), one module per paper (:mod:`~fedbandits.experiments.figures.zhou`,
:mod:`~fedbandits.experiments.figures.dubey`, :mod:`~fedbandits.experiments.figures.liu`,
:mod:`~fedbandits.experiments.figures.he`, :mod:`~fedbandits.experiments.figures.blaser`).
"""

from __future__ import annotations

from collections.abc import Callable

from fedbandits.experiments.figures.blaser import blaser_fig
from fedbandits.experiments.figures.common import SCALES, Cause, Claim, Experiment
from fedbandits.experiments.figures.dubey import dubey_appfig2, dubey_fig1a, dubey_fig1b, dubey_fig1c
from fedbandits.experiments.figures.he import he_fig, he_fig_m15
from fedbandits.experiments.figures.liu import liu_comm, liu_fig2a, liu_fig2b
from fedbandits.experiments.figures.zhou import (
    zhou_fig2a,
    zhou_fig2b,
    zhou_fig2c,
    zhou_fig3a,
    zhou_fig3b,
    zhou_fig3c,
    zhou_fig3d,
)

__all__ = ["EXPERIMENTS", "SCALES", "Cause", "Claim", "Experiment", "get_experiment"]


EXPERIMENTS: dict[str, Callable[..., Experiment]] = {
    "zhou-fig2a": zhou_fig2a,
    "zhou-fig2b": zhou_fig2b,
    "zhou-fig2c": zhou_fig2c,
    "zhou-fig3a": zhou_fig3a,
    "zhou-fig3b": zhou_fig3b,
    "zhou-fig3c": zhou_fig3c,
    "zhou-fig3d": zhou_fig3d,
    "dubey-fig1a": dubey_fig1a,
    "dubey-fig1b": dubey_fig1b,
    "dubey-fig1c": dubey_fig1c,
    "dubey-appfig2": dubey_appfig2,
    "liu-fig2a": liu_fig2a,
    "liu-fig2b": liu_fig2b,
    "liu-comm": liu_comm,
    "he-fig": he_fig,
    "he-fig-m15": he_fig_m15,
    "blaser-fig": blaser_fig,
}


def get_experiment(name: str, scale: str = "quick", runs: int | None = None) -> Experiment:
    """The experiment ``name`` at ``scale``; a ValueError lists the valid names."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; valid: {', '.join(EXPERIMENTS)}, all")
    return EXPERIMENTS[name](scale, runs)
