"""Figures in the style of the papers: regret curves with a spread band over runs,
time-averaged regret Reg(t)/t, communication against regret, and regret against epsilon.

Every figure a person reads follows the same rules: its title once (the experiment's name in it
once), tick labels as a person writes numbers (0.3, 1, 10,000: :func:`plain_ticks`, never
3x10^-1), and every line, band and marker in the legend (:func:`spread_handle` and friends give
the bands and markers their entries).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedbandits.sim.results import Results

#: log-axis tick patterns, sparsest first: 1, 10, 100 / 0.1, 0.3, 1, 3 / 1, 2, 5 / every integer multiple
_LOG_SUBS = ((1.0,), (1.0, 3.0), (1.0, 2.0, 5.0), tuple(float(s) for s in range(1, 10)))
#: labelled ticks a log axis should have: preferably 4-6, else 3-7 (more crowd the labels)
_LOG_TICK_COUNTS = ((4, 6), (3, 7))
#: the grey of the legend entries that stand for every colour (bands, error bars, dotted markers)
_KEY_GREY = "0.45"


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def runs_text(runs: int) -> str:
    return f"{runs} run" if runs == 1 else f"{runs} runs"


def plain_number(value: float, _position: object = None) -> str:
    """A tick label as a person writes the number: ``0.3``, ``1``, ``2.5``, ``10,000`` (no exponent, no offset)."""
    if value == 0:
        return "0"
    if abs(value) >= 1000 and value == round(value):
        return f"{value:,.0f}"
    return f"{value:g}"


def log_ticks(low: float, high: float) -> list[float]:
    """Ticks of a log axis showing ``[low, high]``: the sparsest pattern of :data:`_LOG_SUBS` that puts
    a readable number of ticks (:data:`_LOG_TICK_COUNTS`) in the range (0.1, 0.3, 1, 3, 10 for
    0.1 ... 10); every k-th power of ten over many decades; evenly spaced round values in a range too
    narrow for three ticks of any pattern."""
    if not 0 < low < high:
        raise ValueError(f"a log axis needs 0 < low < high, got {low!r}, {high!r}")
    exponents = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    candidates = []
    for subs in _LOG_SUBS:
        # rounded to 12 significant digits: 3 * 10**-1 is 0.30000000000000004
        ticks = [float(f"{s * 10.0**e:.12g}") for e in exponents for s in subs]
        candidates.append([t for t in ticks if low <= t <= high])
    for fewest, most in _LOG_TICK_COUNTS:
        for ticks in candidates:
            if fewest <= len(ticks) <= most:
                return ticks
    powers = candidates[0]
    if len(powers) > _LOG_TICK_COUNTS[-1][1]:
        stride = math.ceil(len(powers) / _LOG_TICK_COUNTS[0][1])
        return [t for t in powers if round(math.log10(t)) % stride == 0]
    from matplotlib.ticker import MaxNLocator

    even = MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10], min_n_ticks=3).tick_values(low, high)
    return [float(f"{t:.12g}") for t in even if low <= t <= high]


def plain_ticks(ax: Any) -> None:
    """Plain tick labels on both axes of ``ax`` (call it once the data are drawn: a log axis's ticks
    are chosen for its limits).  Linear axes keep their tick positions; log axes get
    :func:`log_ticks` and no labels on their minor ticks."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        if axis.get_scale() == "log":
            axis.set_ticks(log_ticks(min(limits), max(limits)))
            axis.set_minor_formatter(NullFormatter())
        axis.set_major_formatter(FuncFormatter(plain_number))


def spread_handle(text: str) -> Any:
    """A legend entry for the shaded bands (every colour's band is the same statistic)."""
    from matplotlib.patches import Patch

    return Patch(facecolor=_KEY_GREY, alpha=0.3, linewidth=0, label=text)


def error_bar_handle(text: str) -> Any:
    """A legend entry for the error bars."""
    from matplotlib.lines import Line2D

    return Line2D([], [], color=_KEY_GREY, marker="|", markersize=12, linestyle="none", label=text)


def dotted_handle(text: str) -> Any:
    """A legend entry for the dotted lines drawn in every colour (markers such as crossing points)."""
    from matplotlib.lines import Line2D

    return Line2D([], [], color=_KEY_GREY, linestyle=":", linewidth=1, label=text)


def figure_legend(fig: Any, handles: list[Any]) -> None:
    """One legend under the axes of ``fig``, in as many columns (at most 3) as its widest entry allows."""
    widest = max(len(h.get_label()) for h in handles)
    width = fig.get_figwidth() * 72 / (8 * 0.6)  # characters of 8-point text across the figure, roughly
    columns = max(1, min(len(handles), 3, int(width // (widest + 6))))
    fig.legend(handles=handles, loc="outside lower center", ncol=columns, fontsize=8)


def plot_results(results: Results, out: str | Path) -> list[Path]:
    """Write ``regret.png`` (cumulative and time-averaged regret) and ``communication.png``."""
    plt = _pyplot()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    grid = results.grid.astype(float)
    config = results.config
    runs = config.experiment.runs
    setting = (
        f"{config.environment.name}, M = {config.environment.params.agents}, "
        f"T = {plain_number(config.experiment.horizon)}, {runs_text(runs)}"
    )
    fig, (ax_cum, ax_avg) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    handles = []
    for lab, res in results.algorithms.items():
        mean = res.curves.mean(axis=0)
        std = res.curves.std(axis=0)
        (line,) = ax_cum.plot(grid, mean, label=lab)
        handles.append(line)
        ax_cum.fill_between(grid, mean - std, mean + std, color=line.get_color(), alpha=0.2, linewidth=0)
        avg = res.curves / grid
        ax_avg.plot(grid, avg.mean(axis=0), color=line.get_color(), label=lab)
        ax_avg.fill_between(
            grid,
            avg.mean(axis=0) - avg.std(axis=0),
            avg.mean(axis=0) + avg.std(axis=0),
            color=line.get_color(),
            alpha=0.2,
            linewidth=0,
        )
    if runs > 1:
        handles.append(spread_handle(f"band: mean ± 1 std over {runs_text(runs)}"))
    ax_cum.set(xlabel="round t", ylabel="cumulative group pseudo-regret")
    ax_avg.set(xlabel="round t", ylabel="time-averaged regret Reg(t)/t")
    ax_avg.set_yscale("log")
    for ax in (ax_cum, ax_avg):
        ax.grid(alpha=0.3)
        plain_ticks(ax)
    figure_legend(fig, handles)
    fig.suptitle(f"{config.experiment.name}: {setting}")
    paths = [save_figure(fig, out / "regret.png")]

    fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
    handles = []
    for lab, res in results.algorithms.items():
        bars = ax.errorbar(
            np.mean(res.bytes_sent) / 1e6,
            res.final_regret.mean(),
            yerr=res.final_regret.std(),
            fmt="o",
            capsize=3,
            label=lab,
        )
        handles.append(bars)
    if runs > 1:
        handles.append(error_bar_handle(f"error bar: mean ± 1 std over {runs_text(runs)}"))
    ax.set(
        xlabel="MB sent per run (uplink + downlink)",
        ylabel="final group pseudo-regret",
        title=f"{config.experiment.name}: communication against regret",
    )
    ax.grid(alpha=0.3)
    plain_ticks(ax)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    paths.append(save_figure(fig, out / "communication.png"))
    return paths


def frontier_figure(
    rows: list[dict[str, Any]],
    points: dict[str, float | None],
    epsilons: Sequence[float],
    path: str | Path,
    title: str = "",
) -> Path:
    """Final regret against epsilon (log x) for every private algorithm of a frontier, mean ± 1 std
    over runs, the reference lines (rows whose epsilon is NaN) dashed, crossing points dotted.

    Every line, the band, the dotted crossings and the dashed references have a legend entry."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5), layout="constrained")
    handles = []
    crossed = False
    for base in points:
        mine = sorted((r for r in rows if r["algorithm"] == base), key=lambda r: r["epsilon"])
        eps = np.array([r["epsilon"] for r in mine])
        mean = np.array([r["final_regret_mean"] for r in mine])
        std = np.array([r["final_regret_std"] for r in mine])
        (line,) = ax.plot(eps, mean, "o-", label=base)
        handles.append(line)
        ax.fill_between(eps, mean - std, mean + std, color=line.get_color(), alpha=0.2, linewidth=0)
        point = points[base]
        if point:  # crossing inside the grid
            ax.axvline(point, color=line.get_color(), linestyle=":", linewidth=1)
            crossed = True
    for ref in (r for r in rows if np.isnan(r["epsilon"])):
        colour = "grey" if "independent" in ref["algorithm"] else "k"
        handles.append(ax.axhline(ref["final_regret_mean"], linestyle="--", color=colour, label=ref["algorithm"]))
    runs = max((int(r["runs"]) for r in rows), default=1)
    if runs > 1:
        handles.append(spread_handle(f"band: mean ± 1 std over {runs_text(runs)}"))
    if crossed:
        handles.append(dotted_handle("dotted, in a line's colour: the epsilon\nfrom which it beats independent agents"))
    ax.set_xscale("log")
    ax.set_xlim(min(epsilons) / 1.25, max(epsilons) * 1.25)
    ax.set(xlabel="epsilon (log scale; delta as configured)", ylabel="final group pseudo-regret", title=title)
    ax.grid(alpha=0.3)
    plain_ticks(ax)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    return save_figure(fig, path)


def save_figure(fig, path: str | Path, dpi: int = 120) -> Path:  # type: ignore[no-untyped-def]
    """Lay out (unless the figure has its own layout engine), write as PNG (120 dpi unless told) and
    close ``fig``; returns the path."""
    path = Path(path)
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    _pyplot().close(fig)
    return path
