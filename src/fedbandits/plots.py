"""Figures in the style of the papers: regret curves with a spread band over runs,
time-averaged regret Reg(T)/T, communication against regret, and regret against epsilon."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedbandits.sim.results import Results


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_results(results: Results, out: str | Path) -> list[Path]:
    """Write ``regret.png`` (cumulative and time-averaged regret) and ``communication.png``."""
    plt = _pyplot()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    grid = results.grid.astype(float)
    fig, (ax_cum, ax_avg) = plt.subplots(1, 2, figsize=(11, 4.2))
    for lab, res in results.algorithms.items():
        mean = res.curves.mean(axis=0)
        std = res.curves.std(axis=0)
        (line,) = ax_cum.plot(grid, mean, label=lab)
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
    runs = results.config.experiment.runs
    ax_cum.set(xlabel="round t", ylabel="cumulative group pseudo-regret", title=f"mean ± 1 std over {runs} run(s)")
    ax_avg.set(xlabel="round t", ylabel="time-averaged regret Reg(t)/t", title="time-averaged group regret")
    ax_avg.set_yscale("log")
    for ax in (ax_cum, ax_avg):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(
        f"{results.config.experiment.name}: {results.config.environment.name}, "
        f"M={results.config.environment.params.agents}"
    )
    paths = [save_figure(fig, out / "regret.png")]

    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    for lab, res in results.algorithms.items():
        ax.errorbar(
            np.mean(res.bytes_sent) / 1e6,
            res.final_regret.mean(),
            yerr=res.final_regret.std(),
            fmt="o",
            capsize=3,
            label=lab,
        )
    ax.set(xlabel="MB sent (uplink + downlink, per run)", ylabel="final group regret", title="communication vs regret")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    paths.append(save_figure(fig, out / "communication.png"))
    return paths


def frontier_figure(
    rows: list[dict[str, Any]],
    points: dict[str, float | None],
    epsilons: tuple[float, ...],
    path: str | Path,
    title: str = "",
) -> Path:
    """Final regret against epsilon (log x) for every private algorithm of a frontier, mean ± 1 std
    over runs, the reference lines (rows whose epsilon is NaN) dashed, crossing points marked."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for base in points:
        mine = sorted((r for r in rows if r["algorithm"] == base), key=lambda r: r["epsilon"])
        eps = np.array([r["epsilon"] for r in mine])
        mean = np.array([r["final_regret_mean"] for r in mine])
        std = np.array([r["final_regret_std"] for r in mine])
        (line,) = ax.plot(eps, mean, "o-", label=base)
        ax.fill_between(eps, mean - std, mean + std, color=line.get_color(), alpha=0.2, linewidth=0)
        point = points[base]
        if point:  # crossing inside the grid
            ax.axvline(point, color=line.get_color(), linestyle=":", linewidth=1)
    for ref in (r for r in rows if np.isnan(r["epsilon"])):
        ax.axhline(ref["final_regret_mean"], linestyle="--", color="grey" if "independent" in ref["algorithm"] else "k")
        ax.annotate(ref["algorithm"], (epsilons[0], ref["final_regret_mean"]), fontsize=8, va="bottom")
    ax.set_xscale("log")
    ax.set(xlabel="epsilon (delta as configured)", ylabel="final group pseudo-regret", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def save_figure(fig, path: str | Path, dpi: int = 120) -> Path:  # type: ignore[no-untyped-def]
    """Lay out, write as PNG (120 dpi unless told) and close ``fig``; returns the path."""
    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    _pyplot().close(fig)
    return path
