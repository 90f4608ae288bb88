"""Checks of a paper's claims over per-run final regrets.

Every algorithm of an experiment is played on the same contexts and reward noise (common random
numbers), so run r of algorithm a and run r of algorithm b are paired.  ``lower_than`` tests the
paired differences ``d_r = regret_b[r] - regret_a[r]`` with a one-sided paired t statistic
``t = mean(d) / (std(d, ddof=1) / sqrt(R))``:

* ``reproduced`` if ``t >= t_crit`` (the one-sided ``1 - level`` quantile of Student's t with
  R - 1 degrees of freedom; level = 0.05 unless told),
* ``not reproduced`` if ``t <= -t_crit`` (the opposite is significant),
* ``inconclusive`` otherwise (or with fewer than 2 runs).

``sublinear`` applies the same test to one algorithm's per-round regret late in the run against earlier.

The functions are pure: a table ``{label: per-run final regrets}`` in, a :class:`ClaimResult` out.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
NOT_APPLICABLE = "not applicable"
LEVEL = 0.05

Table = Mapping[str, Sequence[float] | np.ndarray]


@dataclass(frozen=True)
class ClaimResult:
    status: str
    explanation: str
    numbers: dict[str, Any] = field(default_factory=dict)


def _runs(table: Table, label: str) -> np.ndarray:
    if label not in table:
        raise KeyError(f"no algorithm labelled {label!r}; have {sorted(table)}")
    return np.asarray(table[label], dtype=float).ravel()


def paired_t(a: np.ndarray, b: np.ndarray) -> float:
    """One-sided paired t statistic for ``a < b`` (positive when a is lower); +-inf if no spread."""
    d = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    if d.size < 2:
        return math.nan
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd == 0.0:
        return 0.0 if mean == 0.0 else math.copysign(math.inf, mean)
    return mean / (sd / math.sqrt(d.size))


def critical_t(runs: int, level: float = LEVEL) -> float:
    """The one-sided threshold: Student's t quantile 1 - level with runs - 1 degrees of freedom."""
    return float(stats.t.ppf(1.0 - level, runs - 1)) if runs >= 2 else math.inf


def _mean(values: np.ndarray) -> str:
    """A mean as the explanations print it: one decimal, or four significant digits below 10 (rates)."""
    mean = float(values.mean())
    return f"{mean:.4g}" if abs(mean) < 10 else f"{mean:.1f}"


def lower_than(table: Table, a: str, b: str, level: float = LEVEL, factor: float = 1.0) -> ClaimResult:
    """Does ``a`` end with lower regret than ``b`` (than ``factor`` times ``b``'s)?  Paired one-sided t test
    over runs, of the differences factor b_r - a_r."""
    ra, rb = _runs(table, a), _runs(table, b)
    if factor != 1.0:
        rb, b = factor * rb, f"{factor:g} x {b}"
    if ra.size != rb.size:
        raise ValueError(f"{a!r} has {ra.size} runs and {b!r} {rb.size}: runs must be paired")
    n = ra.size
    t, crit = paired_t(ra, rb), critical_t(n, level)
    numbers = {
        a: float(ra.mean()),
        b: float(rb.mean()),
        "mean difference (b - a)": float((rb - ra).mean()),
        "sd of differences": float((rb - ra).std(ddof=1)) if n >= 2 else 0.0,
        "t": t,
        "threshold": crit,
        "runs": n,
    }
    summary = f"{a}: {_mean(ra)} vs {b}: {_mean(rb)} (mean over {n} runs)"
    if n < 2:
        return ClaimResult(INCONCLUSIVE, f"{summary}; one run cannot be tested", numbers)
    if t >= crit:
        return ClaimResult(REPRODUCED, f"{summary}; paired t = {t:.2f} >= {crit:.2f} (one-sided, {level:g})", numbers)
    if t <= -crit:
        return ClaimResult(
            NOT_REPRODUCED, f"{summary}; the opposite is significant: paired t = {t:.2f} <= -{crit:.2f}", numbers
        )
    return ClaimResult(INCONCLUSIVE, f"{summary}; paired t = {t:.2f}, |t| < {crit:.2f}", numbers)


def decreasing(table: Table, labels: Sequence[str], level: float = LEVEL) -> ClaimResult:
    """Does regret decrease along ``labels`` (ordered by increasing epsilon)?

    Each consecutive pair is tested with :func:`lower_than` (the later one lower): reproduced if
    every step is, not reproduced if any step significantly goes the other way, else inconclusive.
    """
    if len(labels) < 2:
        raise ValueError("decreasing needs at least two labels")
    steps = [lower_than(table, later, earlier, level) for earlier, later in itertools.pairwise(labels)]
    means = {lab: float(_runs(table, lab).mean()) for lab in labels}
    numbers: dict[str, Any] = dict(means)
    numbers["step t"] = [s.numbers["t"] for s in steps]
    # what a power statement reads (fedbandits.experiments.power): each step's paired differences
    numbers["step names"] = [f"{earlier} -> {later}" for earlier, later in itertools.pairwise(labels)]
    numbers["step mean difference"] = [s.numbers["mean difference (b - a)"] for s in steps]
    numbers["step sd"] = [s.numbers["sd of differences"] for s in steps]
    numbers["runs"] = steps[0].numbers["runs"]
    numbers["threshold"] = steps[0].numbers["threshold"]
    chain = " > ".join(f"{means[lab]:.1f}" for lab in labels)
    ts = ", ".join(f"{s.numbers['t']:.2f}" for s in steps)
    statuses = [s.status for s in steps]
    if all(s == REPRODUCED for s in statuses):
        status, why = REPRODUCED, "every step significantly lower"
    elif NOT_REPRODUCED in statuses:
        bad = [f"{labels[i]} -> {labels[i + 1]}" for i, s in enumerate(statuses) if s == NOT_REPRODUCED]
        status, why = NOT_REPRODUCED, f"regret significantly increases at {', '.join(bad)}"
    else:
        status, why = INCONCLUSIVE, "not every step is significant"
    explanation = f"means {chain} along {', '.join(labels)}; step t = [{ts}] vs {numbers['threshold']:.2f}: {why}"
    return ClaimResult(status, explanation, numbers)


#: the two stretches :func:`sublinear` compares, as its explanation names them
MIDDLE, LATE = "per-round regret over t in (T/4, T/2]", "per-round regret over t in (T/2, T]"


def sublinear(table: Table, label: str, level: float = LEVEL) -> ClaimResult:
    """Does ``label``'s per-round regret fall, the checkable face of a sub-linear regret claim?

    ``table[label]`` holds per run (middle, late): the regret per round over t in (T/4, T/2] and over
    (T/2, T] (the first quarter, where explorations and burn-in sit, is left out).  Linear regret keeps the
    two equal in expectation; R(t) ~ sqrt(t) makes late / middle = (1 - 1/sqrt 2) / (sqrt 2 - 1) = 0.71.
    The test is :func:`lower_than`'s paired one, late against middle.
    """
    rates = np.asarray(table[label], dtype=float).reshape(-1, 2)
    result = lower_than({LATE: rates[:, 1], MIDDLE: rates[:, 0]}, LATE, MIDDLE, level)
    return ClaimResult(result.status, f"{label}: {result.explanation}", result.numbers)


def check(kind: str, table: Table, args: Sequence[str], factor: float = 1.0) -> ClaimResult:
    """Evaluate the claim ``kind`` (``lower_than``, with ``factor`` on its second line, ``decreasing``, or
    ``sublinear`` over the ``regret rate`` table); not applicable if a label is missing."""
    missing = [a for a in args if a not in table]
    if missing:
        return ClaimResult(NOT_APPLICABLE, f"algorithm(s) {missing} not in this run")
    if kind == "lower_than":
        a, b = args
        return lower_than(table, a, b, factor=factor)
    if kind == "decreasing" and factor == 1.0:
        return decreasing(table, tuple(args))
    if kind == "sublinear" and factor == 1.0 and len(args) == 1:
        return sublinear(table, args[0])
    raise ValueError(
        f"claim kind must be 'lower_than', 'decreasing' (factor 1) or 'sublinear' (factor 1, one label), got "
        f"{kind!r} (factor {factor:g}, {len(args)} labels)"
    )
