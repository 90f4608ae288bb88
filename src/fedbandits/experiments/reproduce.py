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

``causes`` (``--causes``; :mod:`fedbandits.experiments.causes`) chooses when an experiment's
one-change cause runs run: ``"unsettled"`` (when a claim is not reproduced or inconclusive),
``"all"`` or ``"none"``; None (default): ``"unsettled"`` at the paper and published scales, else
``"none"``; each writes ``DIR/<name>/causes/<cause>/``.  A cause run
plays only the algorithms of the claims it is for (the unsettled ones; every claim with
``"all"``), with the noise streams of the base config, and checks only those claims.  The report
(:mod:`fedbandits.experiments.report`) gives every inconclusive claim a power statement
(:mod:`fedbandits.experiments.power`) and every cause run's verdict on the claims it checks.

``powered`` (``--powered``; :mod:`fedbandits.experiments.powered`): ``"affordable"`` reruns every
inconclusive claim whose power statement is affordable with the runs it asks for (its curves
alone), writing ``DIR/<name>/powered/claim-<i>/``, and reports the verdict with those runs;
``"none"`` does not; None (default): ``"affordable"`` at the paper and published scales, else
``"none"``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np

from fedbandits.config import config_from_dict
from fedbandits.envs.datahome import check_required_data
from fedbandits.experiments.causes import cause_claims, cause_configs, causes_mode, claim_keys, wants_causes
from fedbandits.experiments.claims import ClaimResult, check
from fedbandits.experiments.figures import EXPERIMENTS, Experiment, get_experiment
from fedbandits.experiments.outcome import CauseOutcome, Cost, Outcome, PoweredOutcome
from fedbandits.experiments.panels import figure_title, plot_panels, table_key
from fedbandits.experiments.power import power_statement
from fedbandits.experiments.powered import fresh_table, powered_configs, powered_mode
from fedbandits.experiments.report import report
from fedbandits.plots import _pyplot, figure_legend, plain_ticks, plot_results, save_figure, spread_handle
from fedbandits.sim.backends import open_backend
from fedbandits.sim.results import Results
from fedbandits.sim.runner import check_run_memory, run_experiment

#: matplotlib's pyplot is not thread-safe: experiments running at once draw one at a time
_PLOTTING = threading.Lock()


def resolve(name: str, scale: str = "quick", runs: int | None = None) -> list[Experiment]:
    """The experiments ``name`` (or every one for ``"all"``) at ``scale``, validated before any run."""
    names = list(EXPERIMENTS) if name == "all" else [name]
    return [get_experiment(n, scale, runs) for n in names]


def final_regrets(results: Results) -> dict[str, Any]:
    """``{label: per-run final group regret}``: the table the claim checks read."""
    return {lab: res.final_regret for lab, res in results.algorithms.items()}


def claim_tables(panels: dict[str, Results]) -> dict[str, dict[str, Any]]:
    """Per metric (``regret``: final group regret, ``messages``: messages sent, ``regret rate``: the
    regret per round over t in (T/4, T/2] and (T/2, T], (R, 2), for :func:`~fedbandits.experiments.claims.
    sublinear`), ``{key: per-run values}``.

    Keys are algorithm labels, or ``"<panel> / <label>"`` for multi-panel experiments.
    """

    regret, messages, rate = {}, {}, {}
    for panel, results in panels.items():
        horizon = float(results.grid[-1])
        grid = np.concatenate([[0.0], results.grid.astype(float)])
        points = np.array([horizon / 4, horizon / 2, horizon])
        for lab, res in results.algorithms.items():
            regret[table_key(panel, lab)] = res.final_regret
            messages[table_key(panel, lab)] = res.messages.astype(float)
            at = np.array([np.interp(points, grid, np.concatenate([[0.0], curve])) for curve in res.curves])
            rate[table_key(panel, lab)] = np.diff(at, axis=1) / np.diff(points)
    return {"regret": regret, "messages": messages, "regret rate": rate}


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-." else "-" for ch in text).strip("-") or "panel"


def plot_figure(results: Results, experiment: Experiment, path: str | Path, dpi: int = 120) -> Path:
    """Time-averaged group regret Reg(t)/t against t, one line (mean over runs) per algorithm, a band of
    ± 1 standard error of that mean."""

    plt = _pyplot()
    grid = results.grid.astype(float)
    fig, ax = plt.subplots(figsize=(6, 4.8), layout="constrained")
    handles = []
    for lab, res in results.algorithms.items():
        avg = res.curves / grid
        mean = avg.mean(axis=0)
        (line,) = ax.plot(grid, mean, label=lab)
        handles.append(line)
        if avg.shape[0] > 1:
            sem = avg.std(axis=0, ddof=1) / avg.shape[0] ** 0.5
            ax.fill_between(grid, mean - sem, mean + sem, color=line.get_color(), alpha=0.2, linewidth=0)
    exp = results.config.experiment
    if exp.runs > 1:
        handles.append(spread_handle("band: ± 1 standard error of the mean"))
    ax.set(xlabel="round t", ylabel="time-averaged group regret Reg(t)/t", title=figure_title(experiment, exp))
    ax.grid(alpha=0.3)
    plain_ticks(ax)
    figure_legend(fig, handles)
    return save_figure(fig, path, dpi)


def draw_figure(panels: dict[str, Results], experiment: Experiment, path: str | Path, dpi: int = 120) -> Path:
    """The experiment's paper-style figure: regret curves, or the figure across panels."""
    if experiment.panels:
        return plot_panels(panels, experiment, path, dpi)
    return plot_figure(panels[""], experiment, path, dpi)


def _run_panels(
    configs: list[tuple[str, dict[str, Any]]], folder: Path, experiment: Experiment, plots: bool, **options: Any
) -> dict[str, Results]:
    """Run every (panel, config), save each in its folder (with its plots if ``plots``) and draw the figure
    (a cause run's figure has only the curves it plays)."""
    panels: dict[str, Results] = {}
    for panel, raw in configs:
        results = run_experiment(config_from_dict(raw), **options)
        sub = folder / _slug(panel) if panel else folder
        results.save(sub)
        if plots:
            with _PLOTTING:
                plot_results(results, sub)
        panels[panel] = results
    with _PLOTTING:
        draw_figure(panels, experiment, folder / "figure.png")
    return panels


def _claims(experiment: Experiment, panels: dict[str, Results]) -> list[ClaimResult]:
    tables = claim_tables(panels)
    return [check(c.kind, tables[c.metric], c.args, c.factor) for c in experiment.claims]


def _cause_claims(experiment: Experiment, panels: dict[str, Results], wanted: list[int]) -> list[ClaimResult | None]:
    """The claims ``wanted`` whose every curve the cause run played, checked; None for the others."""
    tables = claim_tables(panels)
    return [
        check(c.kind, tables[c.metric], c.args, c.factor)
        if i in wanted and all(a in tables[c.metric] for a in c.args)
        else None
        for i, c in enumerate(experiment.claims)
    ]


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
    max_memory: int | None = None,
    causes: str = "unsettled",
    powered: str | None = None,
) -> Outcome:
    """Run one experiment and, as ``causes`` and ``powered`` say, its cause runs and powered reruns (see
    :func:`fedbandits.sim.runner.run_experiment` for the backend options and ``max_memory``)."""

    options = {
        "workers": workers,
        "progress": progress,
        "backend": backend,
        "address": address,
        "checkpoint": checkpoint,
        "resume": resume,
        "max_retries": max_retries,
        "log": log,
        "max_memory": max_memory,
    }
    folder = out / experiment.name
    panels = _run_panels(experiment.configs(), folder, experiment, True, **options)
    claims = _claims(experiment, panels)
    outcome = Outcome(experiment, next(iter(panels.values())), claims, folder, panels)
    if wants_causes(causes, experiment, claims):
        # a cause run plays only the curves of the claims it is for, each with its base noise stream
        wanted = cause_claims(causes, claims)
        keys = claim_keys(experiment.claims[i] for i in wanted)
        for cause in experiment.causes:
            configs = cause_configs(experiment, cause, keys)
            if not configs:  # the claims name no algorithm of the experiment (each is not applicable)
                continue
            sub = folder / "causes" / cause.name
            cause_panels = _run_panels(configs, sub, experiment, False, **options)
            cost = Cost.of(cause_panels.values())
            outcome.causes.append(CauseOutcome(cause, _cause_claims(experiment, cause_panels, wanted), sub, cost))
    if powered_mode(powered, experiment.scale) == "affordable":
        for i, (claim, result) in enumerate(zip(experiment.claims, claims, strict=True)):
            statement = power_statement(result, outcome.claim_compute_seconds(i))
            if statement is None or not statement.affordable or statement.runs_needed is None:
                continue
            # the base runs replayed, then the fresh ones the test reads (see fedbandits.experiments.powered)
            sub = folder / "powered" / f"claim-{i + 1}"
            configs = powered_configs(experiment, i, statement.runs + statement.runs_needed)
            rerun = _run_panels(configs, sub, experiment, False, **options)
            fresh = fresh_table(claim_tables(rerun)[claim.metric], statement.runs)
            checked = check(claim.kind, fresh, claim.args, claim.factor)
            outcome.powered.append(PoweredOutcome(i, statement.runs_needed, checked, sub, Cost.of(rerun.values())))
    return outcome


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
    max_memory: int | None = None,
    causes: str | None = None,
    powered: str | None = None,
) -> list[Outcome]:
    """Run ``name`` (or ``"all"``), save everything under ``out`` and write ``out/report.md``.

    ``backend``, ``workers``, ``address`` and ``max_retries`` choose where tasks run (one Ray
    connection serves every experiment); finished tasks go to ``out/checkpoint/`` and
    ``resume=True`` skips those already there.  ``causes``: when to run the cause runs
    (``"unsettled"``, ``"all"`` or ``"none"``; None: the scale's default, see
    :mod:`fedbandits.experiments.causes`);
    ``powered``: whether to rerun affordable inconclusive claims (``"affordable"`` or ``"none"``;
    None: the scale's default, see :mod:`fedbandits.experiments.powered`).  Every figure's configs
    are validated, the data sets they read checked (:mod:`fedbandits.envs.datahome`), and their memory
    estimated against ``max_memory`` bytes (default: the available memory), before anything runs
    (:func:`fedbandits.sim.runner.check_run_memory`).
    """

    causes = causes_mode(causes, scale)
    powered = powered_mode(powered, scale)
    experiments = resolve(name, scale, runs)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"out {out} exists and is not a folder")
    for e in experiments:  # validate every config and check its memory before running anything
        # (a cause run plays at most the algorithms of every claim: its memory is at most this one's;
        # without cause runs their configs are not built: calibrating their noise is most of this loop)
        every = claim_keys(e.claims)
        causes_run = e.causes if causes != "none" else ()
        for _, raw in [*e.configs(), *(c for cause in causes_run for c in cause_configs(e, cause, every))]:
            config = config_from_dict(raw)
            check_required_data(config.environment.params)  # a missing data set: one line, before any run
            check_run_memory(config, workers, backend, max_memory)
    started = time.perf_counter()
    shared = backend == "local" and isinstance(workers, int) and workers > 1 and len(experiments) > 1
    opened = open_backend(backend, workers, address, max_retries, shared=shared) if isinstance(backend, str) else None
    options: dict[str, Any] = {
        "workers": "auto" if opened is not None else workers,
        "backend": opened if opened is not None else backend,
        "checkpoint": out / "checkpoint",
        "resume": resume,
        "log": log,
        "causes": causes,
        "powered": powered,
        "max_memory": max_memory,
    }
    try:
        if shared:
            outcomes = _run_concurrently(experiments, out, progress, log, started, options)
        else:
            outcomes = [run_one(e, out, progress=progress, **options) for e in experiments]
    finally:
        if opened is not None:
            opened.close()
    wall = time.perf_counter() - started
    (out / "report.md").write_text(report(outcomes, scale, wall), encoding="utf-8")
    return outcomes


def _run_concurrently(
    experiments: list[Experiment],
    out: Path,
    progress: bool,
    log: Callable[[str], None] | None,
    started: float,
    options: dict[str, Any],
) -> list[Outcome]:
    """:func:`run_one` of every experiment at once, each in a thread of this process, on one shared pool
    of local workers: the tasks of every base run, then of every cause and powered run as its base
    finishes, queue for the same workers, so they stay busy while this process merges results,
    writes files and draws figures.  Every task's result depends only on its config and runs, so the
    numbers are those of running the experiments one after the other.  The longest experiments
    start first (their base runs gate their cause runs); ``progress``: one line per finished
    experiment through ``log`` instead of a bar per config.  The first error stops every
    experiment (the caller closes the pool) and is raised."""

    order = sorted(range(len(experiments)), key=lambda i: -_work(experiments[i]))
    finished = 0
    outcomes: dict[int, Outcome] = {}
    threads = ThreadPoolExecutor(len(experiments), thread_name_prefix="fedbandits-reproduce")
    try:
        futures = {threads.submit(run_one, experiments[i], out, progress=False, **options): i for i in order}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=futures.__getitem__):
                i = futures[fut]
                outcomes[i] = fut.result()  # the first error is raised here
                finished += 1
                if progress and log is not None:
                    o = outcomes[i]
                    log(
                        f"{o.experiment.name} done ({finished} of {len(experiments)}; "
                        f"{time.perf_counter() - started:.0f} s since the start)"
                    )
    finally:
        threads.shutdown(wait=False, cancel_futures=True)
    return [outcomes[i] for i in range(len(experiments))]


def _work(experiment: Experiment) -> int:
    """A rough size of an experiment's base run, to start the longest first: rounds x runs x agents x
    algorithms, summed over panels."""
    total = 0
    for _, raw in experiment.configs():
        exp, env = raw["experiment"], raw["environment"]
        total += exp["horizon"] * exp["runs"] * env.get("agents", 1) * len(raw["algorithms"])
    return total
