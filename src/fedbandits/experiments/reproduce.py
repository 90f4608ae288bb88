"""Run registered reproductions, draw the paper-style figures and write a report.

``reproduce(name_or_all, scale, runs=None, out=DIR, workers=N)`` writes, per experiment,
``DIR/<name>/`` (the usual results folder: config.toml, summary.json, CSVs, regret.png,
communication.png, plus ``figure.png``: time-averaged group regret Reg(t)/t against t, one line
per algorithm, as in the paper's figure) and ``DIR/report.md`` with one section per figure: each
claim in words, its status and the measured numbers, and the epsilon each private algorithm
actually spends by our accounting.  A failing claim is reported as failing.

Every finished task is written to ``DIR/checkpoint/`` as it arrives (keyed by the hash of its
experiment's config and its runs, see :mod:`fedbandits.sim.checkpoint`); ``resume=True``
(``--resume``) reuses them, so an interrupted ``all --scale paper`` continues where it stopped
without redoing finished runs.  ``backend="ray"`` runs the tasks on a Ray cluster instead of
local processes, with the same results bit for bit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedbandits.config import config_from_dict
from fedbandits.experiments.claims import ClaimResult, check
from fedbandits.experiments.figures import EXPERIMENTS, Experiment, get_experiment
from fedbandits.experiments.panels import panel_key, plot_panels
from fedbandits.plots import _pyplot, plot_results, save_figure
from fedbandits.sim.backends import open_backend
from fedbandits.sim.results import Results
from fedbandits.sim.runner import run_experiment


@dataclass
class Outcome:
    experiment: Experiment
    results: Results  # the (first) panel's results
    claims: list[ClaimResult]
    folder: Path
    #: every panel's results, in order ({"": results} for a single-environment experiment)
    panels: dict[str, Results] = field(default_factory=dict)

    @property
    def wall_seconds(self) -> float:
        return sum(r.wall_seconds for r in self.panels.values()) if self.panels else self.results.wall_seconds


def resolve(name: str, scale: str = "quick", runs: int | None = None) -> list[Experiment]:
    """The experiments ``name`` (or every one for ``"all"``) at ``scale``, validated before any run."""
    names = list(EXPERIMENTS) if name == "all" else [name]
    return [get_experiment(n, scale, runs) for n in names]


def final_regrets(results: Results) -> dict[str, Any]:
    """``{label: per-run final group regret}``: the table the claim checks read."""
    return {lab: res.final_regret for lab, res in results.algorithms.items()}


def claim_tables(panels: dict[str, Results]) -> dict[str, dict[str, Any]]:
    """Per metric (``regret``: final group regret, ``messages``: messages sent), ``{key: per-run values}``.

    Keys are algorithm labels, or ``"<panel> / <label>"`` for multi-panel experiments.
    """

    def key(panel: str, lab: str) -> str:
        return panel_key(panel, lab) if panel else lab

    regret, messages = {}, {}
    for panel, results in panels.items():
        for lab, res in results.algorithms.items():
            regret[key(panel, lab)] = res.final_regret
            messages[key(panel, lab)] = res.messages.astype(float)
    return {"regret": regret, "messages": messages}


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-." else "-" for ch in text).strip("-") or "panel"


def plot_figure(results: Results, experiment: Experiment, path: str | Path) -> Path:
    """Time-averaged group regret Reg(t)/t against t, one line (mean over runs) per algorithm."""

    plt = _pyplot()
    grid = results.grid.astype(float)
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    for lab, res in results.algorithms.items():
        avg = res.curves / grid
        mean = avg.mean(axis=0)
        (line,) = ax.plot(grid, mean, label=lab)
        if avg.shape[0] > 1:
            sem = avg.std(axis=0, ddof=1) / avg.shape[0] ** 0.5
            ax.fill_between(grid, mean - sem, mean + sem, color=line.get_color(), alpha=0.2, linewidth=0)
    exp = results.config.experiment
    ax.set(
        xlabel="round t",
        ylabel="time-averaged group regret Reg(t)/t",
        title=f"{experiment.figure} ({experiment.scale}): T={exp.horizon}, {exp.runs} runs",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def run_one(
    experiment: Experiment,
    out: Path,
    workers: int | str = "auto",
    progress: bool = False,
    *,
    backend: Any = "local",
    address: str | None = None,
    checkpoint: str | Path | None = None,
    resume: bool = False,
    max_retries: int = 3,
    log: Callable[[str], None] | None = None,
) -> Outcome:
    """Run one experiment (see :func:`fedbandits.sim.runner.run_experiment` for the backend options)."""

    folder = out / experiment.name
    panels: dict[str, Results] = {}
    for panel, raw in experiment.configs():
        results = run_experiment(
            config_from_dict(raw),
            workers=workers,
            progress=progress,
            backend=backend,
            address=address,
            checkpoint=checkpoint,
            resume=resume,
            max_retries=max_retries,
            log=log,
        )
        sub = folder / _slug(panel) if panel else folder
        results.save(sub)
        plot_results(results, sub)
        panels[panel] = results
    if experiment.panels:
        plot_panels(panels, experiment, folder / "figure.png")
    else:
        plot_figure(panels[""], experiment, folder / "figure.png")
    tables = claim_tables(panels)
    claims = [check(c.kind, tables[c.metric], c.args) for c in experiment.claims]
    return Outcome(experiment, next(iter(panels.values())), claims, folder, panels)


def reproduce(
    name: str = "all",
    scale: str = "quick",
    runs: int | None = None,
    out: str | Path = "results/reproduce",
    workers: int | str = "auto",
    progress: bool = False,
    *,
    backend: Any = "local",
    address: str | None = None,
    resume: bool = False,
    max_retries: int = 3,
    log: Callable[[str], None] | None = None,
) -> list[Outcome]:
    """Run ``name`` (or ``"all"``), save everything under ``out`` and write ``out/report.md``.

    ``backend``, ``workers``, ``address`` and ``max_retries`` choose where tasks run (one Ray
    connection serves every experiment); finished tasks go to ``out/checkpoint/`` and
    ``resume=True`` skips those already there.
    """

    experiments = resolve(name, scale, runs)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out {out} exists and is not a folder")
    for e in experiments:  # validate every config before running anything
        config_from_dict(e.config)
    started = time.perf_counter()
    opened = open_backend(backend, workers, address, max_retries) if isinstance(backend, str) else None
    try:
        outcomes = [
            run_one(
                e,
                out,
                workers="auto" if opened is not None else workers,
                progress=progress,
                backend=opened if opened is not None else backend,
                checkpoint=out / "checkpoint",
                resume=resume,
                log=log,
            )
            for e in experiments
        ]
    finally:
        if opened is not None:
            opened.close()
    wall = time.perf_counter() - started
    (out / "report.md").write_text(report(outcomes, scale, wall), encoding="utf-8")
    return outcomes


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _privacy_rows(results: Results) -> list[str]:
    rows = [
        "| algorithm | final regret (mean ± std) | Reg(T)/T | syncs | protocol / calibration | target (eps, delta) "
        "| eps spent (our accounting) | guarantee | noise std |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    horizon = results.config.experiment.horizon
    for s in results.summary()["algorithms"]:
        protocol = s.get("protocol", "-")
        private = protocol not in ("-", "none")
        rows.append(
            "| {} | {:.1f} ± {:.1f} | {:.3f} | {:.1f} | {} | {} | {} | {} | {} |".format(
                s["label"],
                s["final_regret_mean"],
                s["final_regret_std"],
                s["final_regret_mean"] / horizon,
                s["sync_rounds"],
                f"{protocol} / {s.get('calibration', '?')}" if private else "none (non-private)",
                f"({_fmt(s.get('epsilon'))}, {_fmt(s.get('delta'))})" if private else "-",
                _fmt(s.get("epsilon_spent")) if private else "-",
                s.get("guarantee", "-") if private else "-",
                _fmt(s.get("noise_std")) if private else "-",
            )
        )
    return rows


def report(outcomes: list[Outcome], scale: str, wall_seconds: float) -> str:
    """The markdown report: a status overview, then one section per figure."""
    lines = [
        "# Reproduction report",
        "",
        f"Scale `{scale}`; {len(outcomes)} experiment(s); total wall time {wall_seconds:.1f} s.",
        "Claims are tested by a one-sided paired t test over runs (common random numbers) at level 0.05: "
        "reproduced if t >= threshold, not reproduced if t <= -threshold, otherwise inconclusive.",
        "",
        "| experiment | figure | claim | status |",
        "|---|---|---|---|",
    ]
    for o in outcomes:
        for c, r in zip(o.experiment.claims, o.claims, strict=True):
            lines.append(f"| {o.experiment.name} | {o.experiment.figure} | {c.text} | **{r.status}** |")
    for o in outcomes:
        e, exp, env = o.experiment, o.results.config.experiment, o.results.config.environment
        panels = o.panels or {"": o.results}
        what = f"M = {env.params.agents}" if len(panels) == 1 else "panels " + ", ".join(panels)
        lines += [
            "",
            f"## {e.figure}: {e.title} (`{e.name}`)",
            "",
            f"Paper: {e.paper}, {e.figure}.  ",
            f"Setting: {env.name}, {what}, T = {exp.horizon}, {exp.runs} run(s), seed {exp.seed}, "
            f"{e.setting}wall time {o.wall_seconds:.1f} s.  ",
        ]
        if e.shrunk:
            lines.append(f"Shrunk from the paper: {e.shrunk}.  ")
        lines.append(
            f"Files: `{o.folder.name}/figure.png`, `{o.folder.name}/summary.json`, `{o.folder.name}/regret.png`"
            + (" (one folder per panel)." if e.panels else ".")
        )
        lines += ["", "### Claims", ""]
        for c, r in zip(e.claims, o.claims, strict=True):
            lines.append(f"* {c.text}: **{r.status}**. {r.explanation}.")
        lines += ["", "### Measured"]
        for panel, results in panels.items():
            lines += ["", *([f"Panel {panel}:", ""] if panel else []), *_privacy_rows(results)]
        summaries = [s for r in panels.values() for s in r.summary()["algorithms"]]
        uncertified = [s["label"] for s in summaries if str(s.get("guarantee", "")).startswith("no formal guarantee")]
        if uncertified:
            lines += [
                "",
                f"**No formal guarantee** by our accounting for: {', '.join(uncertified)} "
                "(the noise does not certify the target epsilon; see `eps spent`).",
            ]
        if e.notes:
            lines += ["", "Notes:", "", *[f"* {n}" for n in e.notes]]
    lines += [
        "",
        "Finished runs are checkpointed in `checkpoint/`: `--resume` continues an interrupted reproduction "
        "without redoing them.",
        "",
    ]
    return "\n".join(lines)
