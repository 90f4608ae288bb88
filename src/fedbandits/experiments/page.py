"""The reproduction page of the docs: ``docs/reproduction.md``, generated, never edited by hand.

``fedbandits reproduce all --scale paper --page docs/reproduction.md`` runs every figure and
then writes the page (:func:`write_page`): the scale it was generated at and the command, the
verdict counts, and per figure a small PNG (``docs/reproduction/<name>.png``, 90 dpi), the claims
table, a power statement for every inconclusive claim, the cause analysis (what each one-change
run does to each claim it checks), the notes -- among them what matches the paper's instance,
what differs and where the paper is silent -- and the command and wall time of that figure alone.

Regenerating from the same results gives the same text except the wall times (and the same
PNGs): nothing else on the page depends on the clock or the machine.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from fedbandits.experiments.causes import UNSETTLED, describe
from fedbandits.experiments.claims import INCONCLUSIVE, NOT_APPLICABLE, NOT_REPRODUCED, REPRODUCED
from fedbandits.experiments.outcome import Outcome
from fedbandits.experiments.power import AFFORDABLE_SECONDS, POWER, power_statement
from fedbandits.experiments.reproduce import draw_figure

#: PNG resolution on the page (figures are 5.5 x 4.2 in: about 500 x 380 pixels)
PAGE_DPI = 90
STATUSES = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_APPLICABLE)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def figure_section(outcome: Outcome, scale: str, image: str, causes: str = "unsettled") -> list[str]:
    """The page's section of one figure (``image``: the PNG's path relative to the page; ``causes``:
    the mode the page was made with)."""
    e, exp = outcome.experiment, outcome.results.config.experiment
    lines = [
        f"## {e.figure}: {e.title} (`{e.name}`)",
        "",
        f"{e.paper}, {e.figure}.  ",
        f"Setting: T = {exp.horizon}, {exp.runs} runs, seed {exp.seed}; {e.setting.rstrip('; ')}.  ",
    ]
    if e.shrunk:
        lines.append(f"Shrunk from the paper: {e.shrunk}.  ")
    lines += [
        f"Command: `fedbandits reproduce {e.name} --scale {scale}"
        + ("" if causes == "unsettled" else f" --causes {causes}")
        + f"`; wall time {_duration(outcome.wall_seconds)}"
        + (f" (cause runs: {_duration(outcome.total_seconds - outcome.wall_seconds)})" if outcome.causes else "")
        + ".",
        "",
        f"![{e.figure}]({image})",
        "",
        "| claim | verdict | measured |",
        "|---|---|---|",
    ]
    lines += [
        f"| {_cell(c.text)} | **{r.status}** | {_cell(r.explanation)} |"
        for c, r in zip(e.claims, outcome.claims, strict=True)
    ]
    powers = [(c, power_statement(r, outcome.wall_seconds)) for c, r in zip(e.claims, outcome.claims, strict=True)]
    powers_text = [f"* {c.text}: {p.text(e.name, scale)}." for c, p in powers if p is not None]
    if powers_text:
        lines += ["", "**Power** (inconclusive claims):", "", *powers_text]
    if outcome.causes:
        lines += ["", "**Causes** (each run changes one field of the setting; same seed and runs):", ""]
        unchecked = 0
        for i, (c, r) in enumerate(zip(e.claims, outcome.claims, strict=True)):
            verdicts = [describe(r, cause.cause, v) for cause in outcome.causes if (v := cause.claims[i]) is not None]
            if not verdicts:
                unchecked += 1
                continue
            lines.append(f"* {c.text} (**{r.status}**):")
            lines += [f"  * {v}." for v in verdicts]
        if unchecked:
            lines.append(
                f"* {unchecked} claim(s) without a line here: not checked under the causes (a cause run plays only "
                "the algorithms of the claims it is for; by default those not settled in the base run)."
            )
    elif e.causes:
        unsettled = sum(r.status in UNSETTLED for r in outcome.claims)
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


def page_text(
    outcomes: list[Outcome],
    scale: str,
    wall_seconds: float,
    command: str,
    images: list[str],
    causes: str = "unsettled",
) -> str:
    """The whole page; ``images[i]`` is the PNG of ``outcomes[i]`` relative to the page; ``causes``:
    the mode of the cause runs (:data:`fedbandits.experiments.causes.CAUSE_MODES`)."""
    if causes not in CAUSE_SENTENCES:
        raise ValueError(f"causes must be one of {', '.join(map(repr, CAUSE_SENTENCES))}, got {causes!r}")
    counts = Counter(r.status for o in outcomes for r in o.claims)
    claims = sum(counts.values())
    summary = f"Verdicts over {claims} claim{'' if claims == 1 else 's'}: " + ", ".join(
        f"{counts[s]} {s}" for s in STATUSES if counts[s]
    )
    lines = [
        "# Reproduction of the papers' figures",
        "",
        "Generated by the tool; do not edit by hand.  ",
        f"Scale: **{scale}**.  Command: `{command}`.  ",
        f"Total wall time: {_duration(wall_seconds)} (simulation, cause runs included).",
        "",
        "Each claim is tested by a one-sided paired t test over runs (every algorithm plays the same contexts "
        "and reward noise) at level 0.05: reproduced if t >= threshold, not reproduced if t <= -threshold, "
        f"otherwise inconclusive.  An inconclusive claim gets a power statement (power {POWER:g}: the runs a "
        f"test would need at the observed effect; affordable if they fit in {AFFORDABLE_SECONDS / 3600:g} h "
        "here).  " + CAUSE_SENTENCES[causes],
        "",
        summary + ".",
        "",
        "| figure | claims | verdicts |",
        "|---|---|---|",
    ]
    for o in outcomes:
        per_figure = Counter(r.status for r in o.claims)
        text = ", ".join(f"{per_figure[s]} {s}" for s in STATUSES if per_figure[s])
        lines.append(f"| {o.experiment.figure} (`{o.experiment.name}`) | {len(o.claims)} | {text} |")
    for o, image in zip(outcomes, images, strict=True):
        lines += ["", *figure_section(o, scale, image, causes)]
    return "\n".join(lines) + "\n"


def write_page(outcomes: list[Outcome], scale: str, command: str, path: str | Path, causes: str = "unsettled") -> Path:
    """Write the page to ``path`` and each figure's PNG (``PAGE_DPI``) to ``<path stem>/<name>.png``."""
    path = Path(path)
    images_dir = path.with_suffix("")
    images_dir.mkdir(parents=True, exist_ok=True)
    images = []
    for o in outcomes:
        png = images_dir / f"{o.experiment.name}.png"
        draw_figure(o.panels or {"": o.results}, o.experiment, png, PAGE_DPI)
        images.append(Path(os.path.relpath(png, path.parent)).as_posix())
    wall_seconds = sum(o.total_seconds for o in outcomes)
    path.write_text(page_text(outcomes, scale, wall_seconds, command, images, causes), encoding="utf-8")
    return path
