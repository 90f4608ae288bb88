"""Statistics of an empirical privacy audit: Clopper-Pearson bounds and a distinguishing test.

An (epsilon, delta)-DP mechanism M and any test (event) S satisfy, on neighbouring datasets D, D',
``P[M(D') in S] <= e^eps P[M(D) in S] + delta`` and the same with 1 - P on both sides
(Kairouz, Oh & Viswanath 2015).  With n trials per dataset, a true-positive count (S on D') and a
false-positive count (S on D) give, through one-sided (1 - alpha/2) Clopper-Pearson bounds,

    eps >= max( log((TPR_lo - delta) / FPR_hi), log((1 - FPR_hi - delta) / (1 - TPR_lo)) )

with confidence 1 - alpha (Jagielski, Ullman & Oprea 2020; Nasr et al. 2021).  A reported
epsilon below this bound is refuted.

The test must be fixed before the counted trials are seen: :func:`fit_test` learns a linear
score (the difference of the two datasets' mean views, each coordinate divided by its pooled
variance: the likelihood-ratio direction of two Gaussians with equal diagonal covariance) and a
threshold on *calibration* trials, and :func:`apply_test` counts on separate *test* trials.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


def clopper_pearson(successes: int, n: int, alpha: float) -> tuple[float, float]:
    """Exact two-sided (1 - alpha) interval for a binomial proportion."""
    lo = 0.0 if successes == 0 else float(stats.beta.ppf(alpha / 2, successes, n - successes + 1))
    hi = 1.0 if successes == n else float(stats.beta.ppf(1 - alpha / 2, successes + 1, n - successes))
    return lo, hi


def epsilon_lower_bound(true_pos: int, false_pos: int, n: int, delta: float, alpha: float) -> float:
    """Empirical epsilon implied by n trials per dataset (see the module docstring); >= 0."""
    tpr_lo, _ = clopper_pearson(true_pos, n, alpha)
    _, fpr_hi = clopper_pearson(false_pos, n, alpha)
    bounds = [0.0]
    if tpr_lo - delta > 0 and fpr_hi > 0:
        bounds.append(math.log((tpr_lo - delta) / fpr_hi))
    if 1 - fpr_hi - delta > 0 and 1 - tpr_lo > 0:
        bounds.append(math.log((1 - fpr_hi - delta) / (1 - tpr_lo)))
    return max(bounds)


def epsilon_estimate(true_pos: int, false_pos: int, n: int, delta: float) -> float:
    """The same bound from the raw rates (no confidence correction); inf when FPR = 0 < TPR - delta."""
    tpr, fpr = true_pos / n, false_pos / n
    bounds = [0.0]
    if tpr - delta > 0:
        bounds.append(math.log((tpr - delta) / fpr) if fpr > 0 else math.inf)
    if 1 - fpr - delta > 0:
        bounds.append(math.log((1 - fpr - delta) / (1 - tpr)) if tpr < 1 else math.inf)
    return max(bounds)


@dataclass(frozen=True)
class LinearTest:
    """Decide "D'" iff ``(view - centre) . weights > threshold``."""

    weights: np.ndarray
    centre: np.ndarray
    threshold: float

    def scores(self, views: np.ndarray) -> np.ndarray:
        return (np.asarray(views, dtype=np.float64) - self.centre) @ self.weights


#: pooled variances below this fraction of the largest are floored (constant coordinates)
_VARIANCE_FLOOR = 1e-9


def fit_test(views_d: np.ndarray, views_d2: np.ndarray, delta: float, alpha: float) -> LinearTest:
    """Fit the score and the threshold on calibration views ``(n, features)`` of D and D'.

    The threshold maximises :func:`epsilon_lower_bound` on the calibration trials themselves;
    every distinct calibration score is a candidate.
    """
    a = np.asarray(views_d, dtype=np.float64)
    b = np.asarray(views_d2, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 2 or a.shape[0] < 2:
        raise ValueError(
            f"calibration views must be two (n >= 2, features) arrays of one shape, got {a.shape}, {b.shape}"
        )
    diff = b.mean(axis=0) - a.mean(axis=0)
    var = 0.5 * (a.var(axis=0) + b.var(axis=0))
    floor = max(float(var.max()) * _VARIANCE_FLOOR, 1e-300)
    weights = diff / np.maximum(var, floor)
    centre = 0.5 * (a.mean(axis=0) + b.mean(axis=0))
    test = LinearTest(weights, centre, 0.0)
    sa, sb = test.scores(a), test.scores(b)
    n = a.shape[0]
    best, best_eps = float(np.max(sa)), -1.0
    for tau in np.unique(np.concatenate([sa, sb])):
        eps = epsilon_lower_bound(int((sb > tau).sum()), int((sa > tau).sum()), n, delta, alpha)
        if eps > best_eps:
            best, best_eps = float(tau), eps
    return LinearTest(weights, centre, best)


def apply_test(test: LinearTest, views_d: np.ndarray, views_d2: np.ndarray) -> tuple[int, int]:
    """(true positives on D', false positives on D) of a fitted test on fresh views."""
    return int((test.scores(views_d2) > test.threshold).sum()), int((test.scores(views_d) > test.threshold).sum())
