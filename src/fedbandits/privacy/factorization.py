"""Factorized continual release: correlated noise through a factorization of the prefix-sum matrix.

Release k of the tree mechanism carries the noise of ``popcount(k)`` p-sums, and one user sits in
``floor(log2 K) + 1`` of them.  A *matrix-factorization mechanism* does better for the same
guarantee.  Write the K releases of one silo's batches gamma_1..gamma_K as the prefix-sum matrix
C (C[k, j] = 1 for j <= k) applied to gamma, and factor C = A B with lower-triangular A and B:

* the silo releases m = B gamma + z, z_k ~ N(0, sigma^2 I) drawn once per release and never
  redrawn (m_k depends on gamma_1..gamma_k only, since B is lower triangular);
* the server releases A (sum of the silos' m) = C gamma + A z: the exact prefix plus noise of
  variance sigma^2 ||A[k, :]||^2 per silo and entry at release k.

Privacy.  One user lies in one batch j; replacing them moves B gamma by B[:, j] times their
change, so the whole release sequence is a Gaussian mechanism with l2 sensitivity
``max_j ||B[:, j]||`` times the per-user sensitivity.  This holds in the *adaptive* continual
release model, where the batches are chosen after seeing earlier releases, because B is lower
triangular (Denisov, McMahan, Rush, Smith & Thakurta 2022, "Improved Differential Privacy for SGD
via Optimal Private Linear Operators on Adaptive Streams", Theorem 2.1, single participation);
the lazy agents here act only on released prefixes, so their batches are such an adaptive stream.

The factorization.  Both factors are lower-triangular Toeplitz, so each is a power series in the
shift x and C = 1/(1 - x): the square-root factorization A = B = (1 - x)^(-1/2) has coefficients
c_m = binom(2m, m) / 4^m (Fichtenberger, Henzinger & Upadhyay 2023; Henzinger, Upadhyay &
Upadhyay 2023), column norm^2 sum_{m<K} c_m^2 ~ 1 + ln(K)/pi, so the largest prefix variance grows
as (ln K)^2 / pi^2 instead of the tree's (log2 K)^2.  A *banded* encoder keeps b_m = c_m for
m < band and 0 beyond (the decoder is A = C B^{-1}, again Toeplitz: a = cumsum(1/b(x))); the
silo then keeps only its last ``band`` batches, which bounds its memory (Choquette-Choo et al.
2023 study optimised banded factorizations; we truncate the square root).  Only the coefficient
vectors (length K) are stored, never a K x K matrix.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedbandits.core.validation import check_int
from fedbandits.privacy.mechanisms import silo_noise

#: how a protocol's releases carry noise: tree p-sums, a factorization planned for K releases, or a
#: streaming one with no planned horizon, BLT or banded (:mod:`fedbandits.privacy.streaming`)
MECHANISMS = ("tree", "factorized", "blt", "banded")
#: the encoder band used when none is given: the full square root up to this many releases (a
#: silo keeps ``band`` past batches of P floats), a band of this width beyond it
DEFAULT_MAX_BAND = 4096


def sqrt_coefficients(n: int) -> np.ndarray:
    """The first ``n`` coefficients of (1 - x)^(-1/2): c_0 = 1, c_m = c_{m-1} (2m - 1) / (2m)."""
    check_int("n", n, low=1)
    m = np.arange(1, n)
    return np.concatenate([[1.0], np.cumprod((2 * m - 1) / (2 * m))])


def series_inverse(b: np.ndarray, n: int) -> np.ndarray:
    """First ``n`` coefficients of 1 / b(x) for b_0 != 0: inv_k = -(sum_{1 <= i <= k} b_i inv_{k-i}) / b_0
    (b has ``len(b)`` coefficients, so this costs O(n len(b)))."""
    inv = np.zeros(n)
    inv[0] = 1.0 / b[0]
    for k in range(1, n):
        top = min(k, len(b) - 1)
        inv[k] = -np.dot(b[1 : top + 1], inv[k - top : k][::-1]) / b[0]
    return inv


@dataclass(frozen=True)
class Factorization:
    """C = A B for K releases, as the Toeplitz coefficient vectors of the two factors."""

    releases: int
    band: int
    encoder: np.ndarray  # (band,) b_m: release k of a silo is sum_{m < band} b_m gamma_{k-m} + z_k
    decoder: np.ndarray  # (K,) a_m: the server's prefix k is sum_{m < k} a_m (summed messages)_{k-m}

    @property
    def sensitivity_sq(self) -> float:
        """max_j ||B[:, j]||^2: the squared l2 norm of B's first column (the longest)."""
        return float(np.sum(self.encoder[: self.releases] ** 2))

    def prefix_variance(self) -> np.ndarray:
        """(K,) ||A[k, :]||^2: the prefix noise variance at every release per unit noise variance."""
        return np.cumsum(self.decoder**2)


def default_band(releases: int) -> int:
    """The encoder band :func:`factorize` uses unless told: the full K up to DEFAULT_MAX_BAND."""
    return min(releases, DEFAULT_MAX_BAND)


@functools.lru_cache(maxsize=32)
def factorize(releases: int, band: int | None = None) -> Factorization:
    """The square-root factorization of the K x K prefix-sum matrix, banded to ``band`` (default:
    full up to :data:`DEFAULT_MAX_BAND` releases, that band beyond)."""
    check_int("releases", releases, low=1)
    if band is None:
        band = default_band(releases)
    check_int("band", band, low=1, high=releases)
    b = sqrt_coefficients(band)
    if band == releases:
        a = sqrt_coefficients(releases)  # A = B exactly: (1 - x)^(-1/2) squared is 1 / (1 - x)
    else:
        a = np.cumsum(series_inverse(b, releases))  # A = C B^{-1}
    b.setflags(write=False)
    a.setflags(write=False)
    return Factorization(releases, band, b, a)


def tree_prefix_variance(releases: int) -> np.ndarray:
    """(K,) the tree's prefix noise variance per unit node variance: popcount(k) noisy p-sums."""
    check_int("releases", releases, low=1)
    return np.array([bin(k).count("1") for k in range(1, releases + 1)], dtype=np.float64)


def honaker_node_variance(levels: int) -> np.ndarray:
    """(levels,) v_h: variance, per unit node variance, of Honaker's estimate of a complete level-h
    node of a *full* binary tree (leaves released too) from the noisy nodes of its subtree.

    The node's own noisy value (variance 1) and the sum of its two children's estimates (variance
    2 v_{h-1}) are independent unbiased estimates of the same sum; their inverse-variance weighted
    mean has v_h = 1 / (1 + 1 / (2 v_{h-1})), v_0 = 1, i.e. v_h = 2^h / (2^(h+1) - 1) -> 1/2
    (Honaker 2015, "Efficient use of differentially private binary trees", the bottom-up pass).
    """
    check_int("levels", levels, low=1)
    h = np.arange(levels, dtype=np.float64)
    return 2.0**h / (2.0 ** (h + 1) - 1.0)


def honaker_prefix_variance(releases: int) -> np.ndarray:
    """(K,) the best linear unbiased prefix estimate's variance at every release, per unit node
    variance, for a full binary tree (every batch a leaf, every complete dyadic block a node).

    At release k the released nodes are the complete dyadic blocks ending at or before k; each lies
    inside one of the popcount(k) maximal blocks of [1, k], and those subtrees' noises are
    independent, so the prefix's best estimate sums the blocks' Honaker estimates: the variance is
    the sum of :func:`honaker_node_variance` over the one bits of k.  No later release can help: the
    continual release has to answer at k.  One batch lies in floor(log2 K) + 1 released nodes, as in
    the papers' tree, so the node noise is calibrated the same way.

    This is why ``"tree-honaker"`` is not a release mechanism here: the papers' tree (Algorithm 2)
    releases one node per batch, K observations of K unknowns, so it has no redundancy to exploit
    (its prefix is already the only unbiased linear estimate); the full tree's Honaker estimate
    needs twice the messages and lowers the largest prefix variance by less than 2x, where the
    factorized release lowers it 6.5-9.6x at K = 100-4,000 (docs/mechanisms.md).
    """
    check_int("releases", releases, low=1)
    v = honaker_node_variance(releases.bit_length())
    k = np.arange(1, releases + 1)
    bits = (k[:, None] >> np.arange(releases.bit_length())) & 1
    return bits @ v


class BandedEncoder:
    """B gamma for every silo, release by release: keeps the last ``band`` batches (a ring buffer)."""

    def __init__(self, shape: tuple[int, ...], factorization: Factorization) -> None:
        self.shape = shape
        self.factorization = factorization
        self.batches = np.zeros((factorization.band, *shape))
        self.k = 0

    def encode(self, gamma: np.ndarray) -> np.ndarray:
        """(B gamma)_k for release k = k + 1, with ``gamma`` its batch (shape ``shape``)."""
        f = self.factorization
        if self.k >= f.releases:
            raise ValueError(
                f"the factorization was planned for {f.releases} releases; release {self.k + 1} exceeds it"
            )
        k = self.k + 1
        pos = (k - 1) % f.band
        self.batches[pos] = gamma
        # slot s holds gamma_{k - ((pos - s) mod band)}; slots not yet written hold zeros
        coefficients = f.encoder[(pos - np.arange(f.band)) % f.band]
        self.k = k
        return np.tensordot(coefficients, self.batches, axes=1)


class EncodedRandomizer:
    """Every silo's release for R runs x M silos through an encoder B: release k is (B gamma)_k + z_k,
    z_k fresh (never redrawn).  ``sigma (P,)`` is the noise std of every packed entry,
    ``silo_rngs[r][i]`` silo i's noise stream in run r; with a ``decoder`` the silo also decodes its
    own messages (Algorithm 4's prefix-releasing variant).  The encoder and the decoder say which
    factorization: :class:`FactorizedRandomizer`, or the streaming one of
    :mod:`fedbandits.privacy.streaming`."""

    def __init__(
        self,
        sigma: np.ndarray,
        silo_rngs: Sequence[Sequence[np.random.Generator]],
        encoder: BandedEncoder | Any,
        decoder: FactorizedAnalyzer | Any | None,
    ) -> None:
        self.sigma = np.asarray(sigma, dtype=np.float64)
        self.silo_rngs = silo_rngs
        self.encoder = encoder
        self.decoder = decoder
        self.k = 0

    def release(self, gamma: np.ndarray) -> np.ndarray:
        """Release k = k + 1 of every silo, shape ``(R, M, P)``: its encoded batches plus fresh noise."""
        message = self._noisy(self.encoder.encode(gamma))
        if self.decoder is not None:
            self.decoder.release_sum(message)
        self.k = self.encoder.k
        return message

    def _noisy(self, encoded: np.ndarray) -> np.ndarray:
        """The released value of encoded batches ``(R, M, P)``: Gaussian noise from each silo's own stream."""
        return encoded + silo_noise(self.silo_rngs, encoded.shape[-1]) * self.sigma  # type: ignore[no-any-return]

    def skip(self) -> None:
        """Release k + 1 is not made (a silo that was down): its batch is empty, nothing is drawn or sent."""
        self.encoder.encode(np.zeros(self.encoder.shape))
        self.k = self.encoder.k

    def prefix(self) -> np.ndarray:
        """Each silo's own noisy prefix after release k, ``(R, M, P)`` (the decoder on its messages)."""
        if self.decoder is None:
            raise ValueError("this randomizer was built without keep_prefix")
        return self.decoder.prefix.copy()  # type: ignore[no-any-return]


class FactorizedRandomizer(EncodedRandomizer):
    """The factorized release: the silo keeps its last ``band`` batches (a ring buffer) to encode."""

    def __init__(
        self,
        n_runs: int,
        n_silos: int,
        sigma: np.ndarray,
        silo_rngs: Sequence[Sequence[np.random.Generator]],
        factorization: Factorization,
        keep_prefix: bool = False,
    ) -> None:
        shape = (n_runs, n_silos, np.asarray(sigma).size)
        decoder = FactorizedAnalyzer(shape, factorization) if keep_prefix else None
        super().__init__(sigma, silo_rngs, BandedEncoder(shape, factorization), decoder)
        self.factorization = factorization

    @property
    def releases(self) -> int:
        return self.factorization.releases


class FactorizedAnalyzer:
    """The decoder A: prefix k = sum_{m < k} a_m S_{k-m} over the summed messages S (any shape)."""

    def __init__(self, shape: tuple[int, ...], factorization: Factorization) -> None:
        self.factorization = factorization
        self.sums = np.zeros((factorization.releases, *shape))
        self.prefix = np.zeros(shape)
        self.k = 0

    def release(self, messages: np.ndarray) -> np.ndarray:
        """Add the M silos' messages ``(R, M, P)``; return the prefix ``(R, P)``."""
        return self.release_sum(messages.sum(axis=1))

    def release_sum(self, summed: np.ndarray) -> np.ndarray:
        k = self.k + 1
        self.sums[k - 1] = summed
        # row k of A: a_{k-1}, ..., a_0 against S_1..S_k
        self.prefix = np.tensordot(self.factorization.decoder[k - 1 :: -1], self.sums[:k], axes=1)
        self.k = k
        return self.prefix.copy()
