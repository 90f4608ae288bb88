"""UCB scoring of K arms for a batch of learners, and the confidence radius beta_t.

Score of arm a for learner n:  <x_a, theta_n> + beta_n * ||x_a||_{V_n^{-1}}
(Zhou & Chowdhury 2023, Algorithm 1 line 6; Abbasi-Yadkori et al. 2011).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedbandits.core.validation import check_choice, check_float

RADIUS_KINDS = ("theory", "constant")


@dataclass(frozen=True)
class ConfidenceRadius:
    """The exploration radius beta as a function of the number of samples n a learner holds.

    ``kind="theory"`` (Lemma C.4 of Zhou & Chowdhury 2023 with sub-Gaussian reward noise
    scale sigma, ||theta*|| <= S, ||x|| <= L)::

        beta(n) = scale * ( sigma * sqrt(2 log(2/alpha) + d log(1 + n L^2 / (d lambda))) + sqrt(lambda) S )

    ``kind="constant"``: beta(n) = scale, the scaled constant the papers' experiments use.
    """

    kind: str = "theory"
    scale: float = 1.0
    alpha: float = 0.01
    noise_scale: float = 1.0
    theta_bound: float = 1.0
    feature_bound: float = 1.0

    def __post_init__(self) -> None:
        check_choice("radius", self.kind, RADIUS_KINDS)
        check_float("beta_scale" if self.kind == "theory" else "beta", self.scale, low=0.0)
        check_float("alpha", self.alpha, low=0.0, high=1.0, low_open=True)
        check_float("noise_scale", self.noise_scale, low=0.0)
        check_float("theta_bound", self.theta_bound, low=0.0)
        check_float("feature_bound", self.feature_bound, low=0.0, low_open=True)

    def __call__(self, n_samples: float | np.ndarray, dim: int, reg: float) -> float | np.ndarray:
        if self.kind == "constant":
            return self.scale if np.isscalar(n_samples) else np.full(np.shape(n_samples), self.scale)
        log_term = 2.0 * math.log(2.0 / self.alpha) + dim * np.log1p(
            np.asarray(n_samples, dtype=np.float64) * self.feature_bound**2 / (dim * reg)
        )
        beta = self.scale * (self.noise_scale * np.sqrt(log_term) + math.sqrt(reg) * self.theta_bound)
        return float(beta) if np.isscalar(n_samples) else beta


class UCBScorer:
    """Scores K arms for a batch of N learners with one fused matrix product.

    ``features (N, K, d)`` (float32) are multiplied by ``[V^{-1} | theta] (N, d, d+1)`` so
    that one ``matmul`` yields both V^{-1}x (for the width) and <x, theta> (the mean).
    Work buffers are allocated once; scoring runs in float32, which is ample for ranking
    arms (relative error ~1e-7) while the ridge state itself stays float64.
    """

    def __init__(self, n_learners: int, n_arms: int, dim: int) -> None:
        self.shape = (n_learners, n_arms, dim)
        self._proj = np.empty((n_learners, dim, dim + 1), dtype=np.float32)
        self._prod = np.empty((n_learners, n_arms, dim + 1), dtype=np.float32)
        self._width = np.empty((n_learners, n_arms), dtype=np.float32)

    def scores(self, features: np.ndarray, inv: np.ndarray, theta: np.ndarray, beta: np.ndarray | float) -> np.ndarray:
        """UCB of every arm, shape ``(N, K)``; ``beta`` has shape ``(N,)`` or is a scalar."""
        dim = self.shape[2]
        self._proj[:, :, :dim] = inv
        self._proj[:, :, dim] = theta
        np.matmul(features, self._proj, out=self._prod)
        np.einsum("nkd,nkd->nk", self._prod[:, :, :dim], features, out=self._width)
        np.maximum(self._width, 0.0, out=self._width)  # guard float round-off below zero
        np.sqrt(self._width, out=self._width)
        self._width *= np.asarray(beta, dtype=np.float32).reshape(-1, 1)
        self._width += self._prod[:, :, dim]
        return self._width

    def select(self, features: np.ndarray, inv: np.ndarray, theta: np.ndarray, beta: np.ndarray | float) -> np.ndarray:
        """Index of the arm of maximal UCB per learner (first one on ties), shape ``(N,)``."""
        return self.scores(features, inv, theta, beta).argmax(axis=1)


def projection(inv: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """``[V^{-1} | theta]`` of one learner, ``(d, d+1)`` float32: what :class:`UCBScorer` builds per call,
    built once per state change by a learner that scores one decision at a time."""
    dim = theta.shape[-1]
    proj = np.empty((dim, dim + 1), dtype=np.float32)
    proj[:, :dim] = inv
    proj[:, dim] = theta
    return proj


def score_one(features: np.ndarray, proj: np.ndarray, beta: float) -> np.ndarray:
    """UCB of the K arms ``features (K, d)`` (float32, C-contiguous) of one learner, ``(K,)`` float32.

    The same operations as :meth:`UCBScorer.scores` on one learner, without the batch axis, so the
    same numbers bit for bit (tests/test_online_parity.py checks it); for the online agent, whose
    K changes from call to call."""
    dim = proj.shape[0]
    prod = features @ proj
    width = np.einsum("kd,kd->k", prod[:, :dim], features)
    np.maximum(width, 0.0, out=width)
    np.sqrt(width, out=width)
    width *= np.float32(beta)
    width += prod[:, dim]
    return width
