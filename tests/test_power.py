"""Power statements: the runs a one-sided paired t test (level 0.05) needs for power 0.8."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fedbandits.experiments.claims import INCONCLUSIVE, REPRODUCED, ClaimResult, decreasing, lower_than
from fedbandits.experiments.power import (
    AFFORDABLE_SECONDS,
    MAX_RUNS,
    power_at,
    power_statement,
    required_runs,
)

Z95, Z80 = stats.norm.ppf(0.95), stats.norm.ppf(0.8)


@pytest.mark.parametrize(
    ("effect", "expected"),
    # G*Power 3.1, "Means: difference between two dependent means (matched pairs)", one tail,
    # alpha = 0.05, power 0.8: total sample size 156 (dz = 0.2), 27 (0.5), 12 (0.8), 8 (1.0).
    # The normal approximation ((z_0.95 + z_0.8) / dz)^2 + z_0.95^2 / 2 (the usual small-sample
    # correction) gives 155.9, 26.1, 11.0, 7.5: the exact t answers are the next integers up.
    [(0.2, 156), (0.5, 27), (0.8, 12), (1.0, 8)],
)
def test_known_answers(effect: float, expected: int) -> None:
    assert required_runs(effect, 1.0) == expected
    assert required_runs(3.0 * effect, 3.0) == expected  # only the ratio counts
    assert required_runs(-effect, 1.0) == expected  # the observed direction, whichever it is
    approx = ((Z95 + Z80) / effect) ** 2 + Z95**2 / 2
    assert abs(expected - approx) < 1.6


@pytest.mark.parametrize("effect", [0.05, 0.3, 1.7])
def test_smallest_n_by_brute_force(effect: float) -> None:
    n = required_runs(effect, 1.0)
    assert n is not None
    # the definition, straight from the noncentral t: P(T_{n-1, sqrt(n) d} > t_crit(n-1)) >= 0.8
    k = np.arange(2, n + 1)
    exact = stats.nct.sf(stats.t.ppf(0.95, k - 1), k - 1, np.sqrt(k) * effect)
    assert exact[-1] >= 0.8 > exact[:-1].max(initial=0.0)
    assert power_at(n, effect) == pytest.approx(exact[-1])


def test_edge_cases() -> None:
    assert required_runs(0.0, 1.0) is None  # no effect: no number of runs
    assert required_runs(0.0, 0.0) is None
    assert required_runs(2.0, 0.0) == 2  # no spread: t is infinite with two runs
    assert required_runs(1e-6, 1.0) is None  # beyond MAX_RUNS
    assert required_runs(1e-3, 1.0) < MAX_RUNS
    for bad in ((1.0, -1.0), (math.nan, 1.0), (1.0, math.inf)):
        with pytest.raises(ValueError, match="finite"):
            required_runs(*bad)
    with pytest.raises(ValueError, match="power"):
        required_runs(1.0, 1.0, power=1.0)
    assert power_at(1, 1.0) == 0.0


def test_statement_of_an_inconclusive_claim() -> None:
    rng = np.random.default_rng(0)
    base = rng.normal(100.0, 10.0, size=6)
    diff = np.array([1.0, -0.5, 0.8, 0.2, -0.3, 0.6])  # mean 0.3, sd 0.55: d about 0.55
    result = lower_than({"a": base, "b": base + diff}, "a", "b")
    assert result.status == INCONCLUSIVE
    statement = power_statement(result, compute_seconds=60.0)
    assert statement is not None
    d = diff.mean() / diff.std(ddof=1)
    assert statement.effect == pytest.approx(d)
    assert statement.runs_needed == required_runs(diff.mean(), diff.std(ddof=1)) > 6
    # the rerun replays the 6 base runs, then plays the fresh ones the test reads
    assert statement.seconds_needed == pytest.approx(60.0 * (6 + statement.runs_needed) / 6)
    assert statement.affordable
    text = statement.text()
    assert text.startswith(f"a paired test would need about {statement.runs_needed} runs at the observed effect")
    assert f"d = {d:.3g}" in text and "affordable" in text and "not affordable" not in text
    # at AFFORDABLE_SECONDS for 6 runs, the > 6 runs needed cost more than the budget
    expensive = power_statement(result, compute_seconds=AFFORDABLE_SECONDS)
    assert expensive is not None and not expensive.affordable and "not affordable" in expensive.text()
    # opposite direction: the runs needed to find the opposite significant
    against = power_statement(lower_than({"a": base + diff, "b": base}, "a", "b"), 60.0)
    assert against is not None and against.effect < 0 and "not reproduced" in against.text()


def test_statement_only_for_inconclusive_claims() -> None:
    assert power_statement(ClaimResult(REPRODUCED, "x", {"runs": 8}), 1.0) is None
    assert power_statement(lower_than({"a": [1.0], "b": [2.0]}, "a", "b"), 1.0) is None


def test_statement_of_a_chain() -> None:
    base = np.linspace(100.0, 120.0, 8)
    noise = np.array([1.0, -2.0, 0.5, 1.5, -1.0, 2.0, -0.5, -1.5])
    # e1 -> e2 clearly lower, e2 -> e3 barely lower: the second step decides
    table = {"e1": base + 40, "e2": base + 1.0 + noise, "e3": base + 0.5 - noise}
    result = decreasing(table, ["e1", "e2", "e3"])
    assert result.status == INCONCLUSIVE
    statement = power_statement(result, 10.0)
    assert statement is not None and statement.what == "e2 -> e3"
    step = (table["e2"] - table["e3"]).astype(float)
    assert statement.runs_needed == required_runs(step.mean(), step.std(ddof=1))
