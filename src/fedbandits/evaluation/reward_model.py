"""The reward model q(x, a) of the direct and doubly robust estimators: a ridge regression of the
logged reward on the logged action's features and an intercept (the linear model our learners fit,
plus the constant a log's features may lack: without it a mean reward of 0.5 over features centred
at 0 would be predicted as 0).

Cross-fitted (Chernozhukov et al. 2018; Open Bandit Pipeline's ``RegressionModel.fit_predict`` does
the same): the rounds are split into ``folds`` by a seeded permutation, and each fold's predictions
come from the model fit on the other folds, so no round's own reward enters its prediction (DR's
correction term stays unbiased given the model).  With ``folds = 1`` the model is fit on every round
and predicts every round (in-sample, stated as such).
"""

from __future__ import annotations

import numpy as np

from fedbandits.evaluation.logs import BanditLog


def ridge(x: np.ndarray, y: np.ndarray, reg: float) -> np.ndarray:
    """argmin_theta ||x theta - y||^2 + reg ||theta||^2 (float64)."""
    gram = x.T @ x + reg * np.eye(x.shape[1])
    return np.linalg.solve(gram, x.T @ y)


def predictions(log: BanditLog, theta: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """q(x_i, k) for every candidate k of ``rows``, (len(rows), K), from the factored features and
    ``theta`` (d + 1: the features' weights, then the intercept)."""
    q = log.static.shape[1]
    if log.catalogue is None:  # the static part once for every round
        fixed = (log.static.astype(np.float64) @ theta[:q])[None, :]
    else:
        fixed = log.static_of(rows).astype(np.float64) @ theta[:q]
    return fixed + theta[-1] + log.dynamic[rows].astype(np.float64) @ theta[q:-1]  # type: ignore[no-any-return]


def cross_fitted(log: BanditLog, *, folds: int = 2, reg: float = 1.0, seed: int = 0) -> np.ndarray:
    """q(x_i, k) for every round i and candidate k, (n, K), each fold predicted by the others' model."""
    if not isinstance(folds, int) or folds < 1:
        raise ValueError(f"folds must be an integer >= 1, got {folds!r}")
    if not reg > 0:
        raise ValueError(f"reg must be > 0, got {reg}")
    if folds > log.n:
        raise ValueError(f"folds = {folds} exceeds the log's {log.n} rounds")
    x = np.column_stack([log.logged_features(slice(None)).astype(np.float64), np.ones(log.n)])
    out = np.empty((log.n, log.n_arms))
    if folds == 1:
        return predictions(log, ridge(x, log.rewards, reg), np.arange(log.n))
    parts = np.array_split(np.random.default_rng(seed).permutation(log.n), folds)
    for part in parts:
        train = np.ones(log.n, dtype=bool)
        train[part] = False
        out[part] = predictions(log, ridge(x[train], log.rewards[train], reg), part)
    return out
