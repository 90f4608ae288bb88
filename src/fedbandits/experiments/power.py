"""Power statements for claims the runs could not settle: how many runs a paired test would need.

The claims are tested by the one-sided paired t test of :mod:`fedbandits.experiments.claims` at
level ``LEVEL = 0.05``.  For an observed mean paired difference ``mean`` and standard deviation of
the differences ``sd`` (effect size ``d = mean / sd``), :func:`required_runs` is the smallest
number of runs ``n`` for which that test has power ``POWER = 0.8`` if the true effect equals the
observed one, computed exactly with the noncentral t distribution:

    n = min { n >= 2 : P(T > t_{1 - level, n - 1}) >= power },  T ~ t_{n - 1}(ncp = sqrt(n) |d|).

The power grows with n, so the search doubles n and then bisects.  The direction is the observed
one: a negative ``mean`` (the opposite of the claim) gives the runs a test needs to find the
opposite significant, i.e. to turn "inconclusive" into "not reproduced".

A run count is *affordable* when the rerun that would test it -- the claim's curves alone, the
base run's ``runs`` replayed and then ``n`` fresh runs, the test reading only the fresh ones (see
:mod:`fedbandits.experiments.powered`) -- would take at most ``AFFORDABLE_SECONDS`` (one hour) of
compute on one core of the machine that measured it, taken linear in runs:
``compute_seconds * (runs + n) / runs``, where ``compute_seconds`` is what the base run spent on
the environment and the claim's algorithms, summed over its tasks
(:meth:`fedbandits.experiments.outcome.Outcome.claim_compute_seconds`: the same whether the base
run was resumed from checkpoints or not, and whatever its workers).  A compute time that is not
a finite number (results saved without timings) leaves the cost unknown: not affordable.  With
``powered = "affordable"``, ``reproduce`` runs the affordable reruns; with W workers they take
about 1/W of their compute in wall time.  Since affordability is measured here, which claims are
rerun can differ on a slower or faster machine (the page says so).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from scipy import stats

from fedbandits.experiments.claims import INCONCLUSIVE, LEVEL, ClaimResult

POWER = 0.8
#: a run count is affordable if its rerun (the claim's curves, the base runs then that many fresh
#: ones) takes at most this much compute (one core) here
AFFORDABLE_SECONDS = 3600.0
#: beyond this many runs the search stops (the answer is then "more than MAX_RUNS")
MAX_RUNS = 10**9


def power_at(n: int, effect: float, level: float = LEVEL) -> float:
    """Power of the one-sided paired t test with ``n`` runs when the true effect size is ``effect``."""
    if n < 2:
        return 0.0
    crit = stats.t.ppf(1.0 - level, n - 1)
    return float(stats.nct.sf(crit, n - 1, math.sqrt(n) * abs(effect)))


def required_runs(mean: float, sd: float, level: float = LEVEL, power: float = POWER) -> int | None:
    """Smallest n with power >= ``power`` at the effect ``|mean| / sd``; None if no n <= MAX_RUNS does.

    ``mean == 0`` (no effect to detect) gives None; ``sd == 0`` with a nonzero mean gives 2 (the
    paired statistic is then infinite with any two runs).
    """
    if not (0.0 < level < 1.0 and 0.0 < power < 1.0):
        raise ValueError(f"level and power must be in (0, 1), got {level!r} and {power!r}")
    if not (math.isfinite(mean) and math.isfinite(sd)) or sd < 0:
        raise ValueError(f"mean must be finite and sd finite and >= 0, got {mean!r} and {sd!r}")
    if mean == 0.0:
        return None
    if sd == 0.0:
        return 2
    effect = abs(mean) / sd
    if power_at(MAX_RUNS, effect, level) < power:
        return None
    low, high = 1, 2  # invariant: power(low) < power <= power(high)
    while power_at(high, effect, level) < power:
        low, high = high, 2 * high
    high = min(high, MAX_RUNS)
    while high - low > 1:
        mid = (low + high) // 2
        if power_at(mid, effect, level) >= power:
            high = mid
        else:
            low = mid
    return high


@dataclass(frozen=True)
class PowerStatement:
    """The runs a paired test needs at the observed effect of one (inconclusive) claim."""

    runs_needed: int | None
    effect: float  # observed mean / sd of the differences, signed: > 0 in the claim's direction
    runs: int  # runs of the experiment that measured it
    #: compute_seconds * (runs + runs_needed) / runs: one core's time for the rerun; None if unknown
    seconds_needed: float | None
    what: str  # "" for a two-algorithm claim, else which step of a chain decides

    @property
    def affordable(self) -> bool:
        return self.seconds_needed is not None and self.seconds_needed <= AFFORDABLE_SECONDS

    def text(self) -> str:
        """ "a paired test would need about N runs at the observed effect (d = ...)", with its cost."""
        step = f" ({self.what})" if self.what else ""
        if self.runs_needed is None:
            if self.effect == 0:
                return "the observed mean difference is 0: no number of runs would settle it"
            return f"more than {MAX_RUNS:.0e} runs would be needed at the observed effect{step} (d = {self.effect:.3g})"
        outcome = "reproduced" if self.effect > 0 else "not reproduced (the opposite)"
        out = (
            f"a paired test would need about {self.runs_needed} runs at the observed effect{step} "
            f"(d = {self.effect:.3g}; level {LEVEL:g}, power {POWER:g}; it would then say {outcome})"
        )
        if self.seconds_needed is None:
            return f"{out}; its cost is unknown (the run recorded no compute time): not rerun"
        cost = (
            f"a rerun of its curves with {self.runs_needed} fresh runs: about {_duration(self.seconds_needed)} "
            f"of compute here, budget {AFFORDABLE_SECONDS / 3600:g} h"
        )
        if not self.affordable:
            return f"{out}; not affordable ({cost})"
        return f"{out}; affordable ({cost})"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _effects(result: ClaimResult) -> list[tuple[str, float, float]]:
    """(step name, mean difference, sd of differences) of every paired comparison in ``result``."""
    n = result.numbers
    if "step mean difference" in n:
        return list(zip(n["step names"], n["step mean difference"], n["step sd"], strict=True))
    if "mean difference (b - a)" in n:
        return [("", n["mean difference (b - a)"], n["sd of differences"])]
    return []


def power_statement(result: ClaimResult, compute_seconds: float) -> PowerStatement | None:
    """The power statement of an inconclusive claim (None for any other status or a single run);
    ``compute_seconds``: what the claim's curves cost in the run that measured it (one core).

    A chain (``decreasing``) is settled when every step is: if a step goes against the claim, the
    first step a test would find significantly opposite decides (fewest runs); otherwise the step
    needing the most runs does.
    """
    if result.status != INCONCLUSIVE or result.numbers.get("runs", 2) < 2:
        return None
    steps: list[tuple[str, int | None, float]] = []
    for name, mean, sd in _effects(result):
        effect = math.copysign(math.inf, mean) if sd == 0 and mean != 0 else (mean / sd if sd > 0 else 0.0)
        steps.append((name, required_runs(mean, sd), effect))
    if not steps:
        return None
    against = [s for s in steps if s[2] < 0]

    def key(step: tuple[str, int | None, float]) -> float:
        return math.inf if step[1] is None else step[1]

    name, needed, effect = min(against, key=key) if against else max(steps, key=key)
    runs = int(result.numbers["runs"])
    known = math.isfinite(compute_seconds) and compute_seconds >= 0
    seconds = None if needed is None or not known else compute_seconds * (runs + needed) / runs
    return PowerStatement(needed, effect, runs, seconds, name if len(steps) > 1 else "")


def power_numbers(statement: PowerStatement | None) -> dict[str, Any]:
    """The statement as plain numbers (for summaries and tests)."""
    if statement is None:
        return {}
    return {
        "runs needed": statement.runs_needed,
        "effect d": statement.effect,
        "seconds needed": statement.seconds_needed,
        "affordable": statement.affordable,
    }
