"""Clipping of features and rewards to the bounds a privacy guarantee relies on.

Each helper returns the clipped copy and how many entries it changed, so that runs can
report how often the configured bounds (L for feature norms, [low, high] for rewards)
were binding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: a vector whose norm exceeds the bound by at most this relative amount is scaled like any other (the
#: bound holds exactly) but not counted as clipped: float32 features of norm 1, such as the synthetic
#: instances', exceed 1 by up to 1e-7 in float64, a change below their own resolution, not a bound set
#: too low (22-23% of gaussian-sphere's features would otherwise read as clipped)
ROUNDING = 1e-6


def centred(y: Any, offset: float) -> Any:
    """Rewards as a learner fits them: y - c for the config's public ``reward_offset`` c, before any
    clipping (y itself when c = 0).  The one place the offset is applied: the simulator's policies
    (:meth:`fedbandits.algorithms.base.Policy.centred`) and the online agent call it."""
    return y - offset if offset else y


def clip_norm(x: np.ndarray, bound: float) -> tuple[np.ndarray, int]:
    """Scale each vector along the last axis to Euclidean norm <= ``bound``.

    Returns ``(clipped, n_clipped)`` where ``n_clipped`` counts vectors whose norm exceeded
    ``bound`` by more than float rounding (:data:`ROUNDING`); every vector above ``bound`` is
    scaled, counted or not.  Vectors within the bound are returned unchanged (bit for bit).
    """
    if not bound > 0:
        raise ValueError(f"bound must be > 0, got {bound}")
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    over = norms > bound
    if not over.any():
        return x.copy(), 0
    n_clipped = int(np.count_nonzero(norms > bound * (1 + ROUNDING)))
    scale = np.where(over, bound / np.where(over, norms, 1.0), 1.0)
    return x * scale, n_clipped


def clip_rewards(y: np.ndarray, low: float, high: float) -> tuple[np.ndarray, int]:
    """Clip rewards to ``[low, high]``; returns ``(clipped, n_clipped)``."""
    if not low < high:
        raise ValueError(f"reward bounds must satisfy low < high, got [{low}, {high}]")
    n_clipped = int(np.count_nonzero((y < low) | (y > high)))
    return np.clip(y, low, high), n_clipped
