"""The reproduction page of the docs: ``docs/reproduction.md``, generated, never edited by hand.

``fedbandits reproduce all --scale paper --page docs/reproduction.md`` runs every figure and
then writes the page (:func:`write_page`): the scale it was generated at and the command, the
verdict counts, and per figure a small PNG (``docs/reproduction/<name>.png``, 90 dpi), the claims
table, each curve's measured regret, syncs and privacy (the report's table), a power statement for
every inconclusive claim and the verdict of its powered rerun when that was affordable
(:mod:`fedbandits.experiments.powered`), the cause analysis (what each one-change run does to each
claim it checks), the notes -- among them what matches the paper's instance,
what differs and where the paper is silent -- and the command and wall time of that figure alone.

Regenerating from the same results gives the same text except the wall and compute times (and
the same PNGs), with one exception the page states: which inconclusive claims get a powered rerun
depends on the compute times measured here (a rerun is affordable below a budget), so a much
slower or faster machine can rerun other claims.  A page made with ``--resume`` says how much of
its compute was loaded from checkpoints.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from fedbandits.experiments.causes import UNSETTLED, causes_mode, describe
from fedbandits.experiments.claims import INCONCLUSIVE, NOT_APPLICABLE, NOT_REPRODUCED, REPRODUCED
from fedbandits.experiments.outcome import Cost, Outcome
from fedbandits.experiments.power import AFFORDABLE_SECONDS, POWER, power_statement
from fedbandits.experiments.powered import powered_mode
from fedbandits.experiments.report import cost_sentence, measured_lines, powered_line, verdict_cell
from fedbandits.experiments.reproduce import draw_figure

#: PNG resolution on the page (figures are 5.5 x 4.2 in: about 500 x 380 pixels)
PAGE_DPI = 90
STATUSES = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_APPLICABLE)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _cost(cost: Cost) -> str:
    text = f"wall time {_duration(cost.wall)}, compute {_duration(cost.compute)}"
    if cost.resumed_tasks:
        text += f" ({_duration(cost.resumed_compute)} of it loaded from checkpoints)"
    return text


def modes_flags(scale: str, causes: str, powered: str | None) -> str:
    """The command-line flags of the modes that are not the default at ``scale`` (``" --causes none"``, ...)."""
    powered = powered_mode(powered, scale)
    return ("" if causes == causes_mode(None, scale) else f" --causes {causes}") + (
        "" if powered == powered_mode(None, scale) else f" --powered {powered}"
    )


def figure_section(
    outcome: Outcome, scale: str, image: str, causes: str = "unsettled", powered: str | None = None
) -> list[str]:
    """The page's section of one figure (``image``: the PNG's path relative to the page; ``causes``,
    ``powered``: the modes the page was made with, None: the scale's default)."""
    e, exp = outcome.experiment, outcome.results.config.experiment
    lines = [
        f"## {e.figure}: {e.title} (`{e.name}`)",
        "",
        f"{e.paper}, {e.figure}.  ",
        f"Setting: T = {exp.horizon}, {exp.runs} runs, seed {exp.seed}; {e.setting.rstrip('; ')}.  ",
    ]
    if e.shrunk:
        lines.append(f"Shrunk from the paper: {e.shrunk}.  ")
    extra = [
        f"cause runs: {_cost(outcome.causes_cost)}" if outcome.causes else "",
        f"powered reruns: {_cost(outcome.powered_cost)}" if outcome.powered else "",
    ]
    extra_text = "; ".join(x for x in extra if x)
    lines += [
        f"Command: `fedbandits reproduce {e.name} --scale {scale}{modes_flags(scale, causes, powered)}`; "
        + f"base run: {_cost(outcome.base_cost)}"
        + (f"; {extra_text}" if extra_text else "")
        + ".",
        "",
        f"![{e.figure}]({image})",
        "",
        "| claim | verdict | measured |",
        "|---|---|---|",
    ]
    lines += [
        f"| {_cell(c.text)} | {verdict_cell(outcome, i)} | {_cell(r.explanation)} |"
        for i, (c, r) in enumerate(zip(e.claims, outcome.claims, strict=True))
    ]
    lines += ["", f"**Measured** (each curve, mean over the base run's {exp.runs} runs):", *measured_lines(outcome)]
    powers_text = []
    for i, (c, r) in enumerate(zip(e.claims, outcome.claims, strict=True)):
        statement = power_statement(r, outcome.claim_compute_seconds(i))
        if statement is None:
            continue
        powers_text.append(f"* {c.text}: {statement.text()}.")
        rerun = outcome.powered_result(i)
        if rerun is not None:
            powers_text.append(f"  * {powered_line(rerun)}.")
        elif statement.affordable and powered_mode(powered, scale) == "none":
            powers_text.append("  * Not rerun for this page (made with `--powered none`).")
    if powers_text:
        lines += ["", "**Power** (inconclusive claims):", "", *powers_text]
    if outcome.causes:
        lines += ["", "**Causes** (each run changes one field of the setting; same seed and runs):", ""]
        unchecked = 0
        for i, (c, r) in enumerate(zip(e.claims, outcome.claims, strict=True)):
            final = outcome.verdict(i)
            verdicts = [
                describe(r, cause.cause, v, final) for cause in outcome.causes if (v := cause.claims[i]) is not None
            ]
            if not verdicts:
                unchecked += 1
                continue
            lines.append(f"* {c.text} ({verdict_cell(outcome, i)}):")
            lines += [f"  * {v}." for v in verdicts]
        if unchecked:
            lines.append(
                f"* {unchecked} claim(s) without a line here: not checked under the causes (a cause run plays only "
                "the algorithms of the claims it is for; by default those not settled in the base run)."
            )
    elif e.causes:
        unsettled = sum(outcome.verdict(i).status in UNSETTLED for i in range(len(outcome.claims)))
        if unsettled:  # only when the page was made with --causes none (see page_text)
            lines += ["", f"Causes: not run for this page (`--causes none`); {unsettled} claim(s) not settled."]
        else:
            lines += ["", "Causes: not run (every claim is settled)."]
    if e.notes:
        lines += ["", "**Notes** (the instance against the paper, and our choices where it is silent):", ""]
        lines += [f"* {n}" for n in e.notes]
    return lines


CAUSE_SENTENCES = {
    "unsettled": "A claim that is not settled gets one-change cause runs: the same setting with exactly one field "
    "changed, playing only the algorithms that the unsettled claims compare (with the same noise).",
    "all": "Every claim gets one-change cause runs (`--causes all`): the same setting with exactly one field "
    "changed, playing the algorithms the claims compare (with the same noise).",
    "none": "This page was made without the one-change cause runs (`--causes none`): a claim that is not "
    "settled has no cause analysis here.",
}


POWERED_SENTENCES = {
    "affordable": "An affordable one is rerun: its curves alone, the base runs replayed and then that many fresh "
    "runs, and the test reads the fresh runs only (independent of the runs that left it inconclusive); that verdict "
    "is given beside the base verdict.  Which claims are affordable depends on compute times measured on this "
    "machine.  ",
    "none": "This page was made without the powered reruns (`--powered none`).  ",
}


def _counts(statuses: list[str]) -> str:
    counts = Counter(statuses)
    return ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s])


def page_text(
    outcomes: list[Outcome],
    scale: str,
    command: str,
    images: list[str],
    causes: str = "unsettled",
    powered: str | None = None,
    wall_seconds: float | None = None,
) -> str:
    """The whole page; ``images[i]`` is the PNG of ``outcomes[i]`` relative to the page; ``causes``,
    ``powered``: the modes of the cause runs and powered reruns
    (:data:`fedbandits.experiments.causes.CAUSE_MODES`, :data:`fedbandits.experiments.powered.POWERED_MODES`;
    None: the scale's default); ``wall_seconds``: the whole command's wall time (None: the sum of the
    figures', right only when they ran one after another).  Figures that ran at once on one pool of
    workers (``reproduce all --workers 2``) each span the time they shared it, so their wall times
    overlap: the page then says so rather than add them up."""
    if causes not in CAUSE_SENTENCES:
        raise ValueError(f"causes must be one of {', '.join(map(repr, CAUSE_SENTENCES))}, got {causes!r}")
    powered = powered_mode(powered, scale)
    base = [r.status for o in outcomes for r in o.claims]
    final = [o.verdict(i).status for o in outcomes for i in range(len(o.claims))]
    claims = len(base)
    summary = f"Verdicts over {claims} claim{'' if claims == 1 else 's'}: {_counts(base)}"
    if any(o.powered for o in outcomes):
        reruns = sum(len(o.powered) for o in outcomes)
        summary += f"; with the {reruns} powered rerun{'' if reruns == 1 else 's'}: {_counts(final)}"
    cost = Cost.total(o.cost for o in outcomes)
    wall = cost.wall if wall_seconds is None else wall_seconds
    overlap = (
        "  The figures ran at once on one pool of workers: each figure's wall time below spans the time its "
        "tasks shared the workers, so those times overlap and do not add up to this one."
        if wall < cost.wall
        else ""
    )
    lines = [
        "# Reproduction of the papers' figures",
        "",
        "Generated by the tool; do not edit by hand.  ",
        f"Scale: **{scale}**.  Command: `{command}`.  ",
        f"Wall time: {_duration(wall)} (simulation: base, cause and powered runs).{overlap}  ",
        cost_sentence(cost, _duration),
        "",
        "Each claim is tested by a one-sided paired t test over runs (every algorithm plays the same contexts "
        "and reward noise) at level 0.05: reproduced if t >= threshold, not reproduced if t <= -threshold, "
        f"otherwise inconclusive.  An inconclusive claim gets a power statement (power {POWER:g}: the runs a "
        f"test would need at the observed effect; affordable if the claim's curves with those runs need at most "
        f"{AFFORDABLE_SECONDS / 3600:g} h of compute here).  " + POWERED_SENTENCES[powered] + CAUSE_SENTENCES[causes],
        "",
        summary + ".",
        "",
        "| figure | claims | verdicts"
        + (" (after the powered reruns)" if any(o.powered for o in outcomes) else "")
        + " |",
        "|---|---|---|",
    ]
    for o in outcomes:
        text = _counts([o.verdict(i).status for i in range(len(o.claims))])
        lines.append(f"| {o.experiment.figure} (`{o.experiment.name}`) | {len(o.claims)} | {text} |")
    for o, image in zip(outcomes, images, strict=True):
        lines += ["", *figure_section(o, scale, image, causes, powered)]
    return "\n".join(lines) + "\n"


def write_page(
    outcomes: list[Outcome],
    scale: str,
    command: str,
    path: str | Path,
    causes: str = "unsettled",
    powered: str | None = None,
    wall_seconds: float | None = None,
) -> Path:
    """Write the page to ``path`` and each figure's PNG (``PAGE_DPI``) to ``<path stem>/<name>.png``
    (``wall_seconds``: as for :func:`page_text`)."""
    path = Path(path)
    images_dir = path.with_suffix("")
    images_dir.mkdir(parents=True, exist_ok=True)
    images = []
    for o in outcomes:
        png = images_dir / f"{o.experiment.name}.png"
        draw_figure(o.panel_results, o.experiment, png, PAGE_DPI)
        images.append(Path(os.path.relpath(png, path.parent)).as_posix())
    path.write_text(page_text(outcomes, scale, command, images, causes, powered, wall_seconds), encoding="utf-8")
    return path
