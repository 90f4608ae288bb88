"""A fixed policy's value on a log: its action distribution on every logged round, the reward model,
and the estimators of :mod:`fedbandits.evaluation.estimators`.

A fixed policy is given by ``pi`` (n, K): its probability of each candidate on each logged round.
The built-in ones:

* :func:`uniform`: 1/K_s on each of a round's K_s candidates;
* :func:`on_policy`: not an off-policy question at all: the log's own mean reward, the logging
  policy's on-policy value (its interval the normal one of a mean): the truth the estimates of the
  other logging policy's rounds are checked against (:mod:`fedbandits.evaluation.obd_check`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from fedbandits.evaluation.estimators import ESTIMATORS, Estimate, LoggedTerms, estimate
from fedbandits.evaluation.logs import BanditLog
from fedbandits.evaluation.reward_model import cross_fitted


def uniform(log: BanditLog) -> np.ndarray:
    """1 / K_s on each of a round's K_s candidates (its silo's)."""
    available = log.available(slice(None))
    if available is None:
        return np.full((log.n, log.n_arms), 1.0 / log.n_arms)
    return available / available.sum(axis=1, keepdims=True)  # type: ignore[no-any-return]


def terms(log: BanditLog, pi: np.ndarray, q: np.ndarray | None) -> LoggedTerms:
    """What the estimators read: pi's probability of each logged action, and the model's predictions."""
    if pi.shape != (log.n, log.n_arms):
        raise ValueError(f"the policy's distribution must be ({log.n}, {log.n_arms}), got {pi.shape}")
    if not np.allclose(pi.sum(axis=1), 1.0, atol=1e-6) or (pi < 0).any():
        raise ValueError("the policy's distribution must be non-negative and sum to 1 on every round")
    rows = np.arange(log.n)
    if q is None:
        return LoggedTerms(log.rewards, log.propensities, pi[rows, log.actions])
    return LoggedTerms(log.rewards, log.propensities, pi[rows, log.actions], q[rows, log.actions], (pi * q).sum(axis=1))


def on_policy(log: BanditLog, level: float = 0.95) -> Estimate:
    """The logging policy's value on its own log: the mean reward, with its normal interval."""
    ones = np.ones(log.n)
    return dataclasses.replace(
        estimate("ips", LoggedTerms(log.rewards, ones, ones), level=level), estimator="on-policy"
    )


def evaluate(
    log: BanditLog,
    pi: np.ndarray,
    *,
    estimators: Sequence[str] = ESTIMATORS,
    level: float = 0.95,
    interval: str = "normal",
    resamples: int = 1000,
    seed: int = 0,
    folds: int = 2,
    reg: float = 1.0,
) -> list[Estimate]:
    """Every estimator of ``estimators`` for the policy ``pi`` on ``log``; the reward model (DM, DR)
    is cross-fitted with ``folds`` folds from ``seed``, the bootstrap drawn from ``seed`` too."""
    unknown = [name for name in estimators if name not in ESTIMATORS]
    if unknown:
        raise ValueError(f"estimator must be one of {', '.join(map(repr, ESTIMATORS))}, got {unknown[0]!r}")
    needs_model = any(name in ("dm", "dr") for name in estimators)
    q = cross_fitted(log, folds=folds, reg=reg, seed=seed) if needs_model else None
    bundle = terms(log, pi, q)
    out = []
    for i, name in enumerate(estimators):
        rng = np.random.default_rng([seed, i]) if interval == "bootstrap" else None
        out.append(estimate(name, bundle, level=level, interval=interval, resamples=resamples, rng=rng))
    return out
