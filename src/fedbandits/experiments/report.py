"""The markdown report of a reproduction: an overview of every claim, then one section per figure.

Per claim: its status and measured numbers; for an inconclusive claim the power statement
(:mod:`fedbandits.experiments.power`) and, if it was affordable, the verdict of its powered rerun
(:mod:`fedbandits.experiments.powered`); for every cause run (:mod:`fedbandits.experiments.causes`)
that checks the claim, what the one change does to it (a cause run checks only the claims it is
for: with ``causes = "unsettled"`` a settled claim has no cause line).  :func:`report` writes ``DIR/report.md``;
:mod:`fedbandits.experiments.page` builds the docs page from the same pieces.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fedbandits.experiments.causes import describe
from fedbandits.experiments.outcome import Cost, Outcome, PoweredOutcome
from fedbandits.experiments.power import power_statement
from fedbandits.sim.results import Results


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


def measured_lines(outcome: Outcome) -> list[str]:
    """Each curve of the base run (per panel): regret, syncs, protocol, target and spent privacy, the
    guarantee our accounting computes and the noise; then the curves without a formal guarantee."""
    panels = outcome.panel_results
    lines: list[str] = []
    for panel, results in panels.items():
        lines += ["", *([f"Panel {panel}:", ""] if panel else []), *_privacy_rows(results)]
    summaries = [s for r in panels.values() for s in r.summary()["algorithms"]]
    uncertified = [s["label"] for s in summaries if str(s.get("guarantee", "")).startswith("no formal guarantee")]
    if uncertified:
        lines += [
            "",
            f"**No formal guarantee** by our accounting for: {', '.join(uncertified)} "
            "(for each, `eps spent` is above the target or, as the notes say, the theorem does not cover its release "
            "pattern: decisions on unreleased data, a schedule that reads raw data).",
        ]
    return lines


def claim_lines(outcome: Outcome) -> list[str]:
    """One bullet per claim: status, numbers, the power statement if inconclusive, the verdict of each
    cause run that checks it."""
    e = outcome.experiment
    lines = []
    for i, (c, r) in enumerate(zip(e.claims, outcome.claims, strict=True)):
        lines.append(f"* {c.text}: **{r.status}**. {r.explanation}.")
        statement = power_statement(r, outcome.claim_compute_seconds(i))
        if statement is not None:
            lines.append(f"  * Power: {statement.text()}.")
        rerun = outcome.powered_result(i)
        if rerun is not None:
            lines.append(f"  * {powered_line(rerun)}.")
        for cause in outcome.causes:
            result = cause.claims[i]
            if result is not None:
                lines.append(f"  * Cause `{cause.cause.name}`: {describe(r, cause.cause, result, outcome.verdict(i))}.")
    return lines


def _seconds(seconds: float) -> str:
    return f"{seconds:.0f} s"


def cost_sentence(cost: Cost, duration: Callable[[float], str] = _seconds) -> str:
    """ "Compute, summed over tasks (one core): X", and the part loaded from checkpoints, if any
    (``duration`` formats the times; the page writes minutes)."""
    text = f"Compute, summed over tasks (one core): {duration(cost.compute)}"
    if cost.resumed_tasks:
        text += (
            f", of which {duration(cost.resumed_compute)} ({cost.resumed_tasks} of {cost.tasks} tasks) were loaded "
            "from the checkpoints of an earlier run with the same configs (`--resume`) and are not in the wall time"
        )
    return text + "."


def verdict_cell(outcome: Outcome, index: int) -> str:
    """ "**status**", or "**inconclusive**, with N runs: **status**" when the claim was rerun."""
    base = f"**{outcome.claims[index].status}**"
    rerun = outcome.powered_result(index)
    return base if rerun is None else f"{base}, with {rerun.runs} fresh runs: **{rerun.result.status}**"


def powered_line(rerun: PoweredOutcome) -> str:
    """ "With N fresh runs (the claim's curves alone; wall ..., compute ...): **status**; numbers"."""
    return (
        f"With {rerun.runs} fresh runs (the claim's curves alone, after the base runs replayed, in "
        f"`{rerun.folder.parent.parent.name}/powered/{rerun.folder.name}/`; wall time {rerun.cost.wall:.0f} s, "
        f"compute {rerun.cost.compute:.0f} s): "
        f"**{rerun.result.status}**; {rerun.result.explanation}"
    )


def cause_summary(outcome: Outcome) -> list[str]:
    """The cause runs of an experiment: what each changed and its wall time (empty if none ran)."""
    if not outcome.causes:
        return []
    lines = [
        "",
        "Cause runs (each changes one field of the base config; same seed and runs; each plays only the "
        "algorithms of the claims it checks, with their noise streams of the base run):",
        "",
    ]
    for c in outcome.causes:
        change = ", ".join(f"`{k} = {v!r}`" for k, v in c.cause.change.items())
        checks = f"checks {len(c.checked())} of {len(c.claims)} claim(s)"
        lines.append(f"* `{c.cause.name}`: {change} -- {c.cause.text}; {checks}; wall time {c.wall_seconds:.1f} s.")
    return lines


def report(outcomes: list[Outcome], scale: str, wall_seconds: float) -> str:
    """The markdown report: a status overview, then one section per figure."""
    lines = [
        "# Reproduction report",
        "",
        f"Scale `{scale}`; {len(outcomes)} experiment(s); total wall time {wall_seconds:.1f} s.  ",
        cost_sentence(Cost.total(o.cost for o in outcomes)),
        "Claims are tested by a one-sided paired t test over runs (common random numbers) at level 0.05: "
        "reproduced if t >= threshold, not reproduced if t <= -threshold, otherwise inconclusive.",
        "",
        "| experiment | figure | claim | status |",
        "|---|---|---|---|",
    ]
    for o in outcomes:
        for i, c in enumerate(o.experiment.claims):
            lines.append(f"| {o.experiment.name} | {o.experiment.figure} | {c.text} | {verdict_cell(o, i)} |")
    for o in outcomes:
        e, exp, env = o.experiment, o.results.config.experiment, o.results.config.environment
        panels = o.panel_results
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
        lines += ["", "### Claims", "", *claim_lines(o)]
        lines += ["", "### Measured", *measured_lines(o)]
        lines += cause_summary(o)
        if e.notes:
            lines += ["", "Notes:", "", *[f"* {n}" for n in e.notes]]
    lines += [
        "",
        "Finished runs are checkpointed in `checkpoint/`: `--resume` continues an interrupted reproduction "
        "without redoing them.",
        "",
    ]
    return "\n".join(lines)
