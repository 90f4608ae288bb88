"""Off-policy estimators of a fixed policy's value from logged bandit feedback, with intervals.

A log holds n rounds: round i showed context x_i, the logging policy chose action a_i with
probability p_i (its *propensity*, logged when the choice was made) and reward r_i was observed.
The value of a target policy pi is V(pi) = E_x[ sum_a pi(a | x) E[r | x, a] ].  With
w_i = pi(a_i | x_i) / p_i (the importance weight) and a reward model q(x, a):

* **DM** (direct method): (1/n) sum_i sum_a pi(a | x_i) q(x_i, a).  Biased as the model is.
* **IPS** (Horvitz & Thompson 1952; Precup et al. 2000): (1/n) sum_i w_i r_i.  Unbiased whenever
  p_i > 0 wherever pi puts mass (the log then covers pi).
* **SNIPS** (self-normalized; Swaminathan & Joachims 2015): sum_i w_i r_i / sum_i w_i.  Slightly
  biased, consistent, and usually of much lower variance when weights are large.
* **DR** (doubly robust; Dudik, Langford & Li 2011):
  (1/n) sum_i [ sum_a pi(a | x_i) q(x_i, a) + w_i (r_i - q(x_i, a_i)) ].  Unbiased when the
  propensities are right whatever q is; its variance shrinks as q improves.

Intervals (``interval = "normal"``, the default): each estimate is a mean of per-round terms (SNIPS
by the delta method: terms w_i (r_i - V) / mean(w)), so V +- z * s / sqrt(n), with s the terms'
sample standard deviation and z the normal quantile: asymptotic, and narrow when few rounds carry
the weight (read the effective sample size beside it).  ``interval = "bootstrap"``: the percentile
interval of B resamples of the rounds drawn from a seeded Generator (the reward model held fixed:
the interval covers the estimator's sampling error given q, not the model's own).

The effective sample size of the weights, ESS = (sum w)^2 / sum w^2 (Kong 1992), is n for w = 1 and
falls as a few rounds carry the weight: an estimate with ESS of a few dozen decides little.

Inputs are the per-round numbers only (the caller evaluates pi and q): ``target[i]`` =
pi(a_i | x_i), ``q_logged[i]`` = q(x_i, a_i), ``q_target[i]`` = sum_a pi(a | x_i) q(x_i, a).  So one
estimate over 10^6 rounds is a few vector operations.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

ESTIMATORS = ("dm", "ips", "snips", "dr")
INTERVALS = ("normal", "bootstrap")
#: rows of a bootstrap resample drawn at once (B x n indices would not fit for n = 10^6)
_BOOTSTRAP_CHUNK = 2_000_000


@dataclass(frozen=True)
class Estimate:
    """One estimator's value of one policy on one log, with its interval."""

    estimator: str
    value: float
    stderr: float
    low: float
    high: float
    #: rounds in the log
    n: int
    #: (sum w)^2 / sum w^2 of the importance weights (n for DM, which uses none)
    ess: float
    #: how [low, high] was made: "normal 95%" or "bootstrap 95% (B = 1000)"
    interval: str

    def row(self) -> dict[str, object]:
        return {
            "estimator": self.estimator,
            "value": self.value,
            "stderr": self.stderr,
            "low": self.low,
            "high": self.high,
            "n": self.n,
            "ess": self.ess,
            "interval": self.interval,
        }


@dataclass(frozen=True)
class LoggedTerms:
    """What every estimator reads of one log and one policy (length-n float64 arrays)."""

    rewards: np.ndarray
    propensities: np.ndarray
    #: pi(a_i | x_i): the target policy's probability of the logged action
    target: np.ndarray
    #: q(x_i, a_i) and sum_a pi(a | x_i) q(x_i, a); None when no reward model was fit (IPS, SNIPS only)
    q_logged: np.ndarray | None = None
    q_target: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.rewards)
        if n == 0:
            raise ValueError("the log has no rounds")
        for name in ("rewards", "propensities", "target", "q_logged", "q_target"):
            value = getattr(self, name)
            if value is None:
                continue
            arr = np.asarray(value, dtype=np.float64)
            if arr.shape != (n,):
                raise ValueError(f"{name} must have shape ({n},), got {arr.shape}")
            if not np.isfinite(arr).all():
                raise ValueError(f"{name} must be finite (round {int(np.flatnonzero(~np.isfinite(arr))[0])})")
            object.__setattr__(self, name, arr)
        bad = np.flatnonzero((self.propensities <= 0) | (self.propensities > 1))
        if bad.size:
            raise ValueError(f"propensity of round {int(bad[0])} must be in (0, 1], got {self.propensities[bad[0]]:g}")
        bad = np.flatnonzero((self.target < 0) | (self.target > 1))
        if bad.size:
            raise ValueError(
                f"target probability of round {int(bad[0])} must be in [0, 1], got {self.target[bad[0]]:g}"
            )
        if (self.q_logged is None) != (self.q_target is None):
            raise ValueError("give q_logged and q_target together (a reward model), or neither")

    @property
    def weights(self) -> np.ndarray:
        return self.target / self.propensities


def _terms(name: str, log: LoggedTerms) -> tuple[np.ndarray, Callable[[np.ndarray], float]]:
    """Per-round terms whose mean (or ratio, for SNIPS) is the estimate, and the estimate as a function
    of resampled row indices (for the bootstrap)."""
    w, r = log.weights, log.rewards
    if name in ("dm", "dr"):
        if log.q_logged is None or log.q_target is None:
            raise ValueError(f"estimator {name!r} needs a reward model")
        q_logged, q_target = log.q_logged, log.q_target
        terms = q_target if name == "dm" else q_target + w * (r - q_logged)
        return terms, lambda idx: float(terms[idx].mean())
    if name == "ips":
        terms = w * r
        return terms, lambda idx: float(terms[idx].mean())
    if name == "snips":
        total = w.sum()
        if total <= 0:
            raise ValueError("snips: the target policy puts no mass on any logged action (every weight is 0)")
        value = float((w * r).sum() / total)
        # the delta method's influence terms of the ratio estimator
        terms = w * (r - value) / (total / len(w)) + value

        def ratio(idx: np.ndarray) -> float:
            ws = w[idx].sum()
            return float((w[idx] * r[idx]).sum() / ws) if ws > 0 else float("nan")

        return terms, ratio
    raise ValueError(f"estimator must be one of {', '.join(map(repr, ESTIMATORS))}, got {name!r}")


def ess(weights: np.ndarray) -> float:
    """(sum w)^2 / sum w^2: the number of equally weighted rounds the weights are worth."""
    square = float(np.square(weights).sum())
    return float(weights.sum()) ** 2 / square if square > 0 else 0.0


def estimate(
    name: str,
    log: LoggedTerms,
    *,
    level: float = 0.95,
    interval: str = "normal",
    resamples: int = 1000,
    rng: np.random.Generator | None = None,
) -> Estimate:
    """The ``name`` estimate of the target policy's value on ``log``, with a ``level`` interval."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if interval not in INTERVALS:
        raise ValueError(f"interval must be one of {', '.join(map(repr, INTERVALS))}, got {interval!r}")
    terms, of_rows = _terms(name, log)
    n = len(terms)
    value = of_rows(np.arange(n)) if name == "snips" else float(terms.mean())
    stderr = float(terms.std(ddof=1) / math.sqrt(n)) if n > 1 else float("inf")
    weights = ess(log.weights) if name != "dm" else float(n)
    if interval == "normal":
        z = float(norm.ppf(0.5 + level / 2))
        label = f"normal {level:.0%}" + (
            " (the contexts' sampling only: not the model's error)" if name == "dm" else ""
        )
        return Estimate(name, value, stderr, value - z * stderr, value + z * stderr, n, weights, label)
    if rng is None:
        raise ValueError("a bootstrap interval needs a seeded Generator (rng)")
    if resamples < 10:
        raise ValueError(f"resamples must be >= 10, got {resamples}")
    draws = _bootstrap(of_rows, n, resamples, rng)
    low, high = np.nanquantile(draws, [0.5 - level / 2, 0.5 + level / 2])
    label = f"bootstrap {level:.0%} (B = {resamples})"
    return Estimate(name, value, float(np.nanstd(draws, ddof=1)), float(low), float(high), n, weights, label)


def _bootstrap(of_rows: Callable[[np.ndarray], float], n: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``resamples`` estimates, each on n rows drawn with replacement (one resample's indices at a time
    when n is large, else a block of them)."""
    per_block = max(1, _BOOTSTRAP_CHUNK // n)
    out = np.empty(resamples)
    for start in range(0, resamples, per_block):
        stop = min(resamples, start + per_block)
        idx = rng.integers(0, n, size=(stop - start, n))
        for j in range(stop - start):
            out[start + j] = of_rows(idx[j])
    return out
