"""Figures whose curves come from several environments (panels): Dubey & Pentland Figure 1A, 1C, App. Fig. 2.

A panel is one complete config (e.g. M = 10 agents, or d = 20); the figure compares algorithms
*across* panels.  Each panel runs as an ordinary experiment (same seed, its own results folder);
the claim checks read one table whose keys are ``"<panel> / <algorithm label>"``.  Runs of
different panels are independent (not common random numbers), so a paired t test across panels
pairs independent runs: still a valid test, only a less powerful one.

Two figure kinds:

* ``"final-vs-x"``: per-agent regret at T (mean +- s.e. over runs) against a numeric x read from
  each algorithm label (``Experiment.x_values``), one line per panel (Figure 1A: x = epsilon,
  lines = M; App. Figure 2: x = epsilon, lines = arm gap);
* ``"curves"``: per-agent regret Reg(t)/M against t, one line per (panel, algorithm) (Figure 1C).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedbandits.config import ExperimentConfig
from fedbandits.plots import (
    _pyplot,
    error_bar_handle,
    figure_legend,
    plain_number,
    plain_ticks,
    runs_text,
    save_figure,
)
from fedbandits.sim.results import Results

if TYPE_CHECKING:
    from fedbandits.experiments.figures import Experiment


def panel_key(panel: str, label: str) -> str:
    return f"{panel} / {label}"


def table_key(panel: str, label: str) -> str:
    """The claim tables' key of ``label`` in ``panel``: the label alone in a single-environment
    experiment (panel ``""``), else :func:`panel_key`."""
    return panel_key(panel, label) if panel else label


def panel_table(results: dict[str, Results]) -> dict[str, Any]:
    """``{"<panel> / <label>": per-run final group regret}`` over every panel."""
    return {
        panel_key(panel, lab): res.final_regret for panel, r in results.items() for lab, res in r.algorithms.items()
    }


def figure_title(experiment: Experiment, config: ExperimentConfig) -> str:
    """A reproduction figure's title: the paper's figure, then the scale, horizon and runs it was run at."""
    return (
        f"{experiment.figure}\n{experiment.scale} scale, T = {plain_number(config.horizon)}, "
        f"mean over {runs_text(config.runs)}"
    )


def plot_panels(results: dict[str, Results], experiment: Experiment, path: str | Path, dpi: int = 120) -> Path:

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.8), layout="constrained")
    handles = []
    for panel, r in results.items():
        agents = r.config.environment.params.agents
        if experiment.figure_kind == "final-vs-x":
            labels = list(r.algorithms)
            xs = np.array([experiment.x_values[lab] for lab in labels], dtype=float)
            finals = np.stack([r.algorithms[lab].final_regret / agents for lab in labels])  # (A, R)
            mean = finals.mean(axis=1)
            sem = finals.std(axis=1, ddof=1) / np.sqrt(finals.shape[1]) if finals.shape[1] > 1 else 0 * mean
            order = np.argsort(xs)
            handles.append(ax.errorbar(xs[order], mean[order], yerr=sem[order], marker="o", capsize=3, label=panel))
        else:
            grid = r.grid.astype(float)
            for lab, res in r.algorithms.items():
                handles += ax.plot(grid, res.curves.mean(axis=0) / agents, label=f"{panel}, {lab}")
    exp = next(iter(results.values())).config.experiment
    if experiment.figure_kind == "final-vs-x":
        ax.set(xlabel=experiment.x_label, ylabel=f"per-agent regret at T = {plain_number(exp.horizon)}")
        if min(experiment.x_values.values()) > 0:
            ax.set_xscale("log")
        if exp.runs > 1:
            handles.append(error_bar_handle("error bar: ± 1 standard error of the mean"))
    else:
        ax.set(xlabel="round t", ylabel="per-agent regret Reg(t) / M")
    ax.set_title(figure_title(experiment, exp))
    ax.grid(alpha=0.3)
    plain_ticks(ax)
    figure_legend(fig, handles)
    return save_figure(fig, path, dpi)
