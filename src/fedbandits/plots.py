"""Figures in the style of the papers: regret curves with a spread band over runs,
time-averaged regret Reg(T)/T, and communication against regret."""

from __future__ import annotations

from pathlib import Path

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


def save_figure(fig, path: str | Path) -> Path:  # type: ignore[no-untyped-def]
    """Lay out, write as PNG (120 dpi) and close ``fig``; returns the path."""
    path = Path(path)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)
    return path
