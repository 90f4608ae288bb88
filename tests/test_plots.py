"""The figures a person reads: the title once, plain tick labels, every line, band and marker in a legend.

Each figure is caught as it is saved (``Figure.savefig`` wrapped) and read back from its matplotlib
objects: the title texts, the tick labels as drawn and the legend entries.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from matplotlib.collections import PolyCollection
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure

from fedbandits.config import config_from_dict, loads_config
from fedbandits.experiments.figures import get_experiment
from fedbandits.experiments.frontier import INDEPENDENT, NON_PRIVATE, frontier_plan, write_frontier
from fedbandits.experiments.reproduce import draw_figure
from fedbandits.plots import log_ticks, plain_number, plot_results
from fedbandits.sim.runner import run_experiment

CONFIG = """
[experiment]
name = "tiny"
seed = 3
runs = 2
horizon = 60
[environment]
name = "gaussian-sphere"
agents = 3
arms = 5
dim = 3
[[algorithms]]
name = "fedlinucb"
label = "tree"
batch = 10
protocol = "ldp"
delta = 1e-5
[[algorithms]]
name = "linucb-independent"
label = "alone"
"""

#: a tick label as a person writes a number: 0.3, 1, 2.5, 10,000 (no 10^k, no mathtext, no exponent)
PLAIN = re.compile(r"^[-−]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?$")


@pytest.fixture
def saved(monkeypatch: pytest.MonkeyPatch) -> dict[str, Figure]:
    """``{file name: figure}`` of every figure saved while the test runs."""
    figures: dict[str, Figure] = {}
    original = Figure.savefig

    def record(fig: Figure, path: Any, *args: Any, **kwargs: Any) -> None:
        original(fig, path, *args, **kwargs)  # drawn: the tick labels are set
        figures[Path(path).name] = fig

    monkeypatch.setattr(Figure, "savefig", record)
    return figures


def titles(fig: Figure) -> list[str]:
    texts = [fig._suptitle.get_text()] if fig._suptitle is not None else []
    return [t for t in texts + [ax.get_title() for ax in fig.axes] if t]


def legend_texts(fig: Figure) -> list[str]:
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    return [t.get_text() for legend in legends for t in legend.get_texts()]


def tick_labels(axis: Any) -> list[str]:
    low, high = sorted(axis.get_view_interval())
    return [t.get_text() for t, v in zip(axis.get_ticklabels(), axis.get_ticklocs(), strict=True) if low <= v <= high]


def assert_plain_ticks(fig: Figure) -> None:
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = tick_labels(axis)
            assert len(labels) >= 2 and all(PLAIN.match(t) for t in labels), (axis.get_scale(), labels)


def test_plain_numbers_and_log_ticks() -> None:
    assert [plain_number(v) for v in (0, 0.3, 1.0, 2.5, 300, 10_000, 2_500_000.0)] == [
        "0",
        "0.3",
        "1",
        "2.5",
        "300",
        "10,000",
        "2,500,000",
    ]
    assert log_ticks(0.08, 12.5) == [0.1, 0.3, 1, 3, 10]  # the frontier's default grid, 0.1 ... 10
    assert log_ticks(0.15, 8) == [0.2, 0.5, 1, 2, 5]
    assert log_ticks(0.001, 1000) == [0.001, 0.01, 0.1, 1, 10, 100, 1000]
    assert log_ticks(1e-5, 1e5) == [1e-4, 1e-2, 1, 100, 10_000]  # many decades: every second power
    assert log_ticks(3.2, 5.9) == [3.5, 4, 4.5, 5, 5.5]  # narrower than 4, 5: round values between
    with pytest.raises(ValueError, match="0 < low < high"):
        log_ticks(0, 1)


def test_the_frontier_figure_has_its_title_once_plain_epsilon_ticks_and_a_legend_for_everything(
    tmp_path: Path, saved: dict[str, Figure]
) -> None:
    plan = frontier_plan(loads_config(CONFIG), (0.1, 0.3, 1.0, 10.0))
    write_frontier(plan, run_experiment(plan.config, workers=1), tmp_path)
    fig = saved["frontier.png"]
    # the config's name once: the plan's experiment is "tiny-frontier", which the title used to repeat;
    # the second line says how the lines were tuned (here: not at all)
    assert titles(fig) == [f"tiny: gaussian-sphere, M = 3, T = 60\n{plan.caption()}"]
    assert plan.caption().startswith("untuned")
    assert (tmp_path / "frontier.md").read_text().startswith("# Privacy-utility frontier: tiny\n")
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and tick_labels(ax.xaxis) == ["0.1", "0.3", "1", "3", "10"]
    assert_plain_ticks(fig)
    legend = legend_texts(fig)
    assert legend[:4] == ["tree", NON_PRIVATE, INDEPENDENT, "band: mean ± 1 std over 2 runs"]
    dotted = [line for line in ax.lines if line.get_linestyle() == ":"]
    # a crossing inside the grid is a dotted line, and then (only then) the legend says what dotted means
    assert any("dotted" in t for t in legend) == bool(dotted)
    assert all(line.get_label() in legend for line in ax.lines if line.get_linestyle() != ":")


def test_the_regret_and_communication_figures_name_every_line_band_and_error_bar(
    tmp_path: Path, saved: dict[str, Figure]
) -> None:
    results = run_experiment(loads_config(CONFIG), workers=1)
    plot_results(results, tmp_path)
    regret, communication = saved["regret.png"], saved["communication.png"]
    assert titles(regret) == ["tiny: gaussian-sphere, M = 3, T = 60, 2 runs"]
    assert titles(communication) == ["tiny: communication against regret"]
    assert legend_texts(regret) == ["tree", "alone", "band: mean ± 1 std over 2 runs"]
    assert legend_texts(communication) == ["tree", "alone", "error bar: mean ± 1 std over 2 runs"]
    assert all(any(isinstance(c, PolyCollection) for c in ax.collections) for ax in regret.axes)  # the bands
    assert regret.axes[1].get_yscale() == "log"
    assert_plain_ticks(regret)
    assert_plain_ticks(communication)


def test_a_single_run_has_no_band_to_name(tmp_path: Path, saved: dict[str, Figure]) -> None:
    config = loads_config(CONFIG.replace("runs = 2", "runs = 1"))
    plot_results(run_experiment(config, workers=1), tmp_path)
    assert legend_texts(saved["regret.png"]) == ["tree", "alone"]
    assert titles(saved["regret.png"]) == ["tiny: gaussian-sphere, M = 3, T = 60, 1 run"]


def test_a_reproduction_figure_across_panels_names_its_error_bars_and_labels_epsilon_plainly(
    tmp_path: Path, saved: dict[str, Figure]
) -> None:
    experiment = get_experiment("dubey-fig1a", "tiny")
    panels = {panel: run_experiment(config_from_dict(raw), workers=1) for panel, raw in experiment.configs()}
    draw_figure(panels, experiment, tmp_path / "figure.png")
    fig = saved["figure.png"]
    (ax,) = fig.axes
    assert titles(fig) == [f"{experiment.figure}\ntiny scale, T = 50, mean over 2 runs"]
    assert legend_texts(fig) == [*panels, "error bar: ± 1 standard error of the mean"]
    assert sum(isinstance(c, ErrorbarContainer) for c in ax.containers) == len(panels)
    assert ax.get_xscale() == "log" and tick_labels(ax.xaxis) == ["0.1", "0.3", "1", "3", "10"]
    assert_plain_ticks(fig)


def test_a_reproduction_figure_names_its_band(tmp_path: Path, saved: dict[str, Figure], figure_data: list[str]) -> None:
    """zhou-fig3d reads the MSLR sample: a generated look-alike where it is absent (conftest)."""
    experiment = get_experiment("zhou-fig3d", "tiny")
    results = run_experiment(config_from_dict(experiment.config), workers=1)
    draw_figure({"": results}, experiment, tmp_path / "figure.png")
    fig = saved["figure.png"]
    runs = results.config.experiment.runs
    assert titles(fig) == [
        f"{experiment.figure}\ntiny scale, T = {plain_number(results.config.experiment.horizon)}, mean over {runs} runs"
    ]
    assert legend_texts(fig) == [*results.algorithms, "band: ± 1 standard error of the mean"]
    assert_plain_ticks(fig)
