"""The final screen of ``fedbandits serve demo``: federated silos against silos serving alone, with
intervals, and a verdict that says which line wins at this traffic and why.

Every user is shown to a federated silo and to its lone twin (same silo index, same K arms), so the
two lines are compared *paired*: per user, the difference of the two pseudo-regrets (the best arm's
expected reward minus the chosen arm's).  Intervals are over users, 95% normal (mean +- 1.96 standard
errors of the per-user values): each user's context is a fresh draw, so given what the silos have
learned before it, a user's pseudo-regret is independent of the other users' -- the per-user values
of a window are martingale differences around the learners' expected pseudo-regret, and the interval
covers that expectation *for this run* (this theta*, these noise draws), not for another seed.  The
silos are not the unit: the federated ones share one model, so their regrets are not independent.
Windows are counted in users per silo (the traffic's steps), so the table is the learning curve.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

#: a chosen arm: (step = users per silo before this one, silo, expected reward of the chosen arm, best)
Choice = tuple[int, int, float, float]
Z95 = 1.959963984540054


@dataclass(frozen=True)
class Estimate:
    """A mean over users with its 95% interval."""

    mean: float
    half: float  # half-width of the 95% interval
    n: int

    @classmethod
    def of(cls, values: np.ndarray) -> Estimate:
        n = len(values)
        if n == 0:
            return cls(math.nan, math.nan, 0)
        half = Z95 * float(np.std(values, ddof=1)) / math.sqrt(n) if n > 1 else math.inf
        return cls(float(np.mean(values)), half, n)

    @property
    def low(self) -> float:
        return self.mean - self.half

    @property
    def high(self) -> float:
        return self.mean + self.half

    def __str__(self) -> str:
        if self.n == 0:
            return "-"
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"

    def signed(self) -> str:
        if self.n == 0:
            return "-"
        return f"{self.mean:+.3f} [{self.low:+.3f}, {self.high:+.3f}]"


@dataclass(frozen=True)
class Window:
    """One window of steps [first, last): both lines' pseudo-regret per user and their paired difference."""

    first: int
    last: int
    federated: Estimate
    alone: Estimate
    difference: Estimate  # federated - alone, over the users both lines served


def regrets(rows: Sequence[Choice]) -> dict[tuple[int, int], float]:
    """Pseudo-regret of each served user, keyed by (step, silo)."""
    return {(step, silo): best - mean for step, silo, mean, best in rows}


Regrets = Mapping[tuple[int, int], float]


def window(fed: Regrets, alone: Regrets, first: int, last: int) -> Window:
    def inside(d: Regrets) -> np.ndarray:
        return np.array([r for (step, _), r in d.items() if first <= step < last])

    both = [fed[k] - alone[k] for k in fed.keys() & alone.keys() if first <= k[0] < last]
    return Window(first, last, Estimate.of(inside(fed)), Estimate.of(inside(alone)), Estimate.of(np.array(both)))


def learning_curve(chosen: Mapping[str, Sequence[Choice]], windows: int = 6) -> tuple[list[Window], Window]:
    """``windows`` equal windows of the steps served, and the second half of them."""
    fed, alone = regrets(chosen.get("federated", [])), regrets(chosen.get("alone", []))
    steps = 1 + max((k[0] for k in (*fed, *alone)), default=-1)
    edges = [round(i * steps / windows) for i in range(windows + 1)]
    curve = [window(fed, alone, a, b) for a, b in itertools.pairwise(edges) if b > a]
    return curve, window(fed, alone, steps // 2, steps)


def ahead_from(curve: Sequence[Window]) -> int | None:
    """Users per silo from which the federated silos were ahead (lower mean) in every window since."""
    return next((w.first for i, w in enumerate(curve) if all(v.federated.mean < v.alone.mean for v in curve[i:])), None)


def verdict(curve: Sequence[Window], half: Window, silos: int, synced: bool = True) -> str:
    """Which line wins at this traffic, from the paired difference of the second half (its 95% interval
    entirely below or above 0), and from how many users per silo the federated silos have been ahead.
    ``synced``: whether any sync round closed (else the federated silos never had data to learn from)."""
    d = half.difference
    if d.n < 2 or not curve:
        return "verdict: too few users served to compare the two lines"
    if not synced:
        return (
            "verdict: no sync round closed in this run, so the federated silos served every user with no data "
            "at all (they decide from released sums only): no comparison of federation yet; run longer "
            "(--seconds; the first round also sets up secure aggregation, and through Flower a round takes "
            "several of its messages)"
        )
    ahead = ahead_from(curve)
    served = curve[-1].last
    ratio = half.federated.mean / half.alone.mean if half.alone.mean > 0 else math.inf
    since = f"; ahead in every window from about {ahead:,} users per silo on" if ahead is not None else ""
    if d.high < 0:
        return (
            f"verdict: federation pays off: in the second half the {silos} federated silos' pseudo-regret per user "
            f"is {ratio:.2f}x the lone silos' (paired difference {d.signed()}){since}.  Each lone silo learns "
            f"from its own users only; each federated silo from all {silos} silos' users, through a noisy secure sum"
        )
    if ahead is not None:
        why = (
            f"the federated silos have been ahead since about {ahead:,} users per silo: federation pays off from "
            "there, and the second half still holds the start they lost (they decide from released sums only, "
            "so they begin with no data, then with little data against the privacy noise)"
        )
    else:
        why = (
            f"after {served:,} users per silo the federated silos have not caught up: they decide from released "
            f"sums only (so they start with none), and the pooled data of {silos} silos has not yet outweighed the "
            "noise the private sync adds.  That noise is a fixed cost: more silos outweigh it sooner (the embedded "
            "demo's 20 within its 2 minutes); more time helps less, as each lone silo keeps learning too"
        )
    if d.low > 0:
        return (
            f"verdict: the silos alone win at this traffic: in the second half the federated silos' pseudo-regret "
            f"per user is {ratio:.2f}x theirs (paired difference {d.signed()}); {why}"
        )
    return (
        f"verdict: no difference resolved at this traffic: the second half's paired difference {d.signed()} "
        f"has 0 in its 95% interval; {why}"
    )


def regret_table(
    chosen: Mapping[str, Sequence[Choice]], silos: int, synced: bool = True, windows: int = 6
) -> list[str]:
    """The learning curve (pseudo-regret per user, 95% intervals over users), its second half, the verdict."""
    curve, half = learning_curve(chosen, windows)
    lines = [
        "pseudo-regret per user (best arm's expected reward - the chosen arm's; lower is better), mean "
        "[95% interval over users]:",
        f"{'users per silo':>16}  {'federated':<22} {'alone':<22} federated - alone (paired)",
    ]
    for w in [*curve, half]:
        span = "second half" if w is half else f"{w.first}-{w.last}"
        lines.append(f"{span:>16}  {w.federated!s:<22} {w.alone!s:<22} {w.difference.signed()}")
    lines.append(verdict(curve, half, silos, synced))
    return lines
