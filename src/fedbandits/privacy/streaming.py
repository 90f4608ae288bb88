"""Streaming correlated noise with no planned horizon: buffered linear Toeplitz (BLT) mechanisms.

The factorized release (:mod:`fedbandits.privacy.factorization`) writes the prefix-sum matrix as
C = A B for a planned number K of releases: its guarantee ends at K and its decoder's memory grows
with K.  A *buffered linear Toeplitz* strategy (Dvijotham, McMahan, Pillutla, Steinke & Thakurta
2024, "Efficient and near-optimal noise generation for streaming differential privacy",
arXiv:2404.16706; McMahan, Pillutla et al. 2024, arXiv:2408.08868) is a lower-triangular Toeplitz
B whose generating function is rational:

    B(x) = 1 + sum_j omega_j x / (1 - theta_j x),   i.e.  b_0 = 1,  b_i = sum_j omega_j theta_j^(i-1),

with a few *buffers* j (theta_j the buffer's decay, omega_j its output scale).  Then:

* the silo releases (B gamma)_k + z_k: B gamma is computed with one running buffer per j,
  buf_j <- theta_j buf_j + gamma_k (state: buffers x P floats, never the past batches);
* B^{-1} is again a BLT (:meth:`BLT.inverse`: the same rational function inverted); the server
  applies it exactly with B's own buffers (:meth:`BLTEncoder.decode`), recovering gamma + B^{-1} z,
  and sums it into the prefix, again with buffers x P floats;
* the released sequence is one Gaussian mechanism whose l2 sensitivity is B's column norm over
  the *unbounded* stream: ||B e_j||^2 = 1 + sum_{j,k} omega_j omega_k / (1 - theta_j theta_k),
  finite when every theta < 1 (Denisov et al. 2022, Thm 2.1: adaptive streams, B lower
  triangular).  So one calibration covers every release the silo will ever make; the price is
  prefix noise that, once the stream outgrows the buffers' memory ~1 / (1 - theta_max),
  grows linearly (at the rate (1 / B(1))^2 per release) instead of logarithmically.

The parameters: the rational approximation of (1 - x)^(1/2) of Dvijotham et al. (2024),
Proposition 4.5 (its "RA-BLT"), built for B^{-1}, inverted to B, and B's decays scaled so that the
largest is 1 - 1/n for the number n of releases the noise is tuned for (:func:`ra_blt`).  Measured
(the prefix noise variance times the squared sensitivity, the tree's (log2 K + 1)^2 and the full
square-root factorization's at K in brackets): 5 buffers tuned for 10^5 releases give 16.2, 19.1,
23.4 at 10^3, 10^4, 10^5 releases (tree 100, 196, 289; square root 10.7, 16.0, 22.4), and keep
their guarantee beyond.  jax-privacy's optimizer (``buffered_toeplitz.optimize``) finds better
parameters for a given n; it is not used here (an optional extra later).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedbandits.core.validation import check_int
from fedbandits.privacy.factorization import EncodedRandomizer

#: buffers of the default streaming mechanism (5: measured in the module docstring)
DEFAULT_BUFFERS = 5


@dataclass(frozen=True)
class BLT:
    """A lower-triangular Toeplitz matrix with b_0 = 1 and b_i = sum_j omega_j theta_j^(i-1)."""

    theta: np.ndarray  # (buffers,) decays, distinct, in (-1, 1)
    omega: np.ndarray  # (buffers,) output scales

    def coefficients(self, n: int) -> np.ndarray:
        """b_0, ..., b_{n-1}."""
        powers = self.theta[None, :] ** np.arange(max(n - 1, 0))[:, None]
        return np.concatenate([[1.0], powers @ self.omega])[:n]

    def generating_at_one(self) -> float:
        """B(1) = 1 + sum_j omega_j / (1 - theta_j): the sum of all coefficients."""
        return float(1.0 + np.sum(self.omega / (1.0 - self.theta)))

    def autocorrelation(self, gap: int) -> float:
        """sum_i b_i b_{i+gap} over the unbounded stream: <B e_j, B e_{j+gap}>."""
        pair = np.outer(self.omega, self.omega) / (1.0 - np.outer(self.theta, self.theta))
        if gap == 0:
            return float(1.0 + pair.sum())
        return float(self.coefficients(gap + 1)[gap] + (pair * self.theta[None, :] ** gap).sum())

    @property
    def sensitivity_sq(self) -> float:
        """||B e_j||^2 over the unbounded stream (every column's: B is Toeplitz); infinite when a decay
        reaches 1 in absolute value."""
        if np.abs(self.theta).max(initial=0.0) >= 1.0:
            return math.inf
        return self.autocorrelation(0)

    def inverse(self) -> BLT:
        """B^{-1} as a BLT.  B(x) = 1 + omega^T (1 - x Theta)^{-1} 1 x is the transfer function of the
        state-space system (Theta, 1, omega^T, 1); its inverse system is (Theta - 1 omega^T, 1, -omega^T,
        1), whose decays are the eigenvalues lambda of Theta - 1 omega^T.  The output scales are the
        solution of the Vandermonde system matching B^{-1}'s first coefficients (series inversion)."""
        n = self.theta.size
        lam = np.linalg.eigvals(np.diag(self.theta) - np.outer(np.ones(n), self.omega))
        if np.abs(lam.imag).max(initial=0.0) > 1e-9 or np.abs(lam.real).max(initial=0.0) > 1.0 + 1e-9:
            raise ValueError(f"this BLT's inverse has decays {lam}: not real and in [-1, 1]")
        lam = np.clip(np.sort(lam.real)[::-1], -1.0, 1.0)  # a decay of 1 (to round-off): a pole at x = 1
        if n > 1 and np.min(np.abs(np.diff(lam))) < 1e-9:
            raise ValueError("this BLT's inverse has repeated decays: no BLT of the same size")
        inverse = _series_inverse(self.coefficients(n + 1))
        vandermonde = lam[None, :] ** np.arange(n)[:, None]
        return BLT(lam, np.linalg.solve(vandermonde, inverse[1:]))

    def prefix_variance(self, releases: int) -> np.ndarray:
        """(releases,) the decoded prefix noise's variance at every release, per unit noise variance:
        ||row k of C B^{-1}||^2, C the prefix-sum matrix (the server's decoder)."""
        decoder = np.cumsum(self.inverse().coefficients(releases))
        return np.cumsum(decoder**2)  # type: ignore[no-any-return]


def _series_inverse(b: np.ndarray) -> np.ndarray:
    """The first len(b) coefficients of 1 / b(x), b_0 = 1."""
    out = np.zeros(b.size)
    out[0] = 1.0
    for k in range(1, b.size):
        out[k] = -np.dot(b[1 : k + 1], out[k - 1 :: -1][:k])
    return out


@functools.lru_cache(maxsize=64)
def ra_blt(buffers: int, tuned_for: int) -> BLT:
    """The streaming strategy B with ``buffers`` buffers whose noise is tuned for ``tuned_for`` releases.

    B^{-1} first, as Dvijotham et al. (2024), Proposition 4.5 approximate (1 - x)^(1/2) by a rational
    function of degree ``buffers``: with d1 = ceil(buffers / 2), step h = 1.6 pi / sqrt(2 (d1 + 1)) and
    nodes k = -d1, ..., buffers - d1 - 1 (their counter shifted by -1, as jax-privacy's
    ``from_rational_approx_to_sqrt_x`` defaults), decays c_k = 1 / (1 + e^(2 h k)) and scales
    -c_k^2 e^(3 h k) / sum_k e^(h k) c_k.  Its inverse approximates (1 - x)^(-1/2), the square-root
    factor, with a decay of 1: scaled so the largest decay is 1 - 1 / tuned_for, the sensitivity over
    an unbounded stream is finite."""
    check_int("buffers", buffers, low=1, high=12)
    check_int("tuned_for", tuned_for, low=2)
    d1 = (buffers + 1) // 2
    h = 1.6 * math.pi / math.sqrt(2 * (d1 + 1))
    k = np.arange(-d1 + 1, buffers - d1 + 1) - 1
    decay = 1.0 / (1.0 + np.exp(2.0 * h * k))
    scale = -(decay**2) * np.exp(3.0 * h * k) / np.sum(np.exp(h * k) * decay)
    strategy = BLT(decay, scale).inverse()
    largest = 1.0 - 1.0 / tuned_for
    theta = strategy.theta * min(1.0, largest / float(strategy.theta.max()))
    out = BLT(theta, strategy.omega)
    out.theta.setflags(write=False)
    out.omega.setflags(write=False)
    return out


def strategy_for(buffers: int, releases: int) -> BLT:
    """The streaming strategy of a calibration: ``buffers`` buffers, its noise tuned for the run's
    planned ``releases`` (its guarantee holds beyond them)."""
    return ra_blt(buffers, max(releases, 2))


class BLTEncoder:
    """(B gamma)_k release by release, for batches of any shape: one buffer per decay, holding
    buf_j = sum_{i >= 1} theta_j^(i-1) gamma_{k-i}."""

    def __init__(self, shape: tuple[int, ...], blt: BLT) -> None:
        self.blt = blt
        self.buffers = np.zeros((blt.theta.size, *shape))
        self.k = 0

    def _carry(self) -> np.ndarray:
        return np.tensordot(self.blt.omega, self.buffers, axes=1)  # type: ignore[no-any-return]

    def _push(self, gamma: np.ndarray) -> None:
        self.buffers *= self.blt.theta.reshape((-1,) + (1,) * gamma.ndim)
        self.buffers += gamma
        self.k += 1

    def encode(self, gamma: np.ndarray) -> np.ndarray:
        """(B gamma)_k = gamma_k + sum_j omega_j buf_j, then the buffers take gamma_k."""
        out = gamma + self._carry()
        self._push(gamma)
        return out

    def decode(self, encoded: np.ndarray) -> np.ndarray:
        """(B^{-1} y)_k for the encoded ``y_k``: gamma_k = y_k - sum_j omega_j buf_j, the buffers holding
        the decoded past (the exact inverse of :meth:`encode`, with the same decays and scales)."""
        out = encoded - self._carry()
        self._push(out)
        return out


class StreamingRandomizer(EncodedRandomizer):
    """The streaming release of R runs x M silos: each silo encodes with its BLT buffers
    (:class:`fedbandits.privacy.factorization.EncodedRandomizer` adds the noise)."""

    def __init__(
        self,
        n_runs: int,
        n_silos: int,
        sigma: np.ndarray,
        silo_rngs: Sequence[Sequence[np.random.Generator]],
        blt: BLT,
        keep_prefix: bool = False,
    ) -> None:
        shape = (n_runs, n_silos, np.asarray(sigma).size)
        decoder = StreamingAnalyzer(shape, blt) if keep_prefix else None
        super().__init__(sigma, silo_rngs, BLTEncoder(shape, blt), decoder)


class StreamingAnalyzer:
    """The server's decoder: B^{-1} (a BLT, its own buffers) on the summed messages, then their running
    sum: prefix k = sum_{i <= k} gamma_i + (C B^{-1} z)_k."""

    def __init__(self, shape: tuple[int, ...], blt: BLT) -> None:
        self.inverse = BLTEncoder(shape, blt)
        self.prefix = np.zeros(shape)
        self.k = 0

    def release(self, messages: np.ndarray) -> np.ndarray:
        """Add the M silos' messages ``(R, M, P)``; return the prefix ``(R, P)``."""
        return self.release_sum(messages.sum(axis=1))

    def release_sum(self, summed: np.ndarray) -> np.ndarray:
        self.prefix = self.prefix + self.inverse.decode(summed)
        self.k = self.inverse.k
        return self.prefix.copy()
