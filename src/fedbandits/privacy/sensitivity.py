"""Sensitivities of the two released streams, derived from the clipping bounds.

Adjacency (Zhou & Chowdhury 2023, section 2): two datasets are adjacent if they differ in
exactly one user, i.e. one user is *replaced* by another.  With every feature clipped to
||x|| <= L and every reward to [-B, B] (or [0, B]):

* covariance stream, one user contributes x x^T:
  ||x x^T - x' x'^T||_F^2 = ||x||^4 + ||x'||^4 - 2 (x.x')^2 <= 2 L^4, so Delta_cov = sqrt(2) L^2;
  the released upper triangle (diagonal included) has L2 norm <= the Frobenius norm, so the same
  bound holds for the d(d+1)/2 numbers actually released;
* bias stream, one user contributes x y:  ||x y - x' y'|| <= 2 L B  (x' = -x, y = y' = B).

The papers' closed forms use "L = 1" for both streams, i.e. the norm of one user's
contribution (an add/remove-style bound).  ``adjacency = "add-remove"`` reproduces that:
Delta_cov = L^2, Delta_bias = L B.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fedbandits.core.validation import check_choice, check_float

ADJACENCIES = ("replace", "add-remove")


@dataclass(frozen=True)
class Sensitivity:
    cov: float
    bias: float


def stream_sensitivity(feature_bound: float, reward_bound: float, adjacency: str = "replace") -> Sensitivity:
    """L2 sensitivities of one user's (covariance, bias) contribution."""
    lb = check_float("feature_bound", feature_bound, low=0.0, low_open=True)
    rb = check_float("reward_bound", reward_bound, low=0.0, low_open=True)
    check_choice("adjacency", adjacency, ADJACENCIES)
    if adjacency == "replace":
        return Sensitivity(cov=math.sqrt(2.0) * lb * lb, bias=2.0 * lb * rb)
    return Sensitivity(cov=lb * lb, bias=lb * rb)
