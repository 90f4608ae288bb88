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

A *banded* streaming strategy (:class:`BandedStream`, ``mechanism = "banded"``) keeps the first
``band`` coefficients of the square-root factor (1 - x)^(-1/2) and none beyond (Kalinin & Lampert
2024, "Banded Square Root Matrix Factorization for Differentially Private Model Training", the
BSR of their Section 3; McKenna 2024 optimises banded strategies).  One batch then enters exactly
``band`` messages, so:

* its column norm over the unbounded stream is sum_{m < band} c_m^2 ~ 1 + ln(band) / pi, finite,
  and the silo keeps its last ``band`` batches (state band x P floats);
* B^{-1} is the linear recurrence d_k = y_k - sum_{1 <= m < band} c_m d_{k-m} (the server's
  decoder, ``band`` decoded messages of state), stable because c_0 > c_1 > ... > 0 puts every zero of
  c(x) on or outside the unit circle (Enestrom-Kakeya);
* a release rounded to an integer grid moves, between neighbouring streams, by its share of the
  user's change plus at most sqrt(P) grid steps of rounding in ``band`` messages only: a finite
  sum.  This is why ``banded`` serves secure aggregation's integer lattice (``distributed-dp``) and
  a deployed silo's exact discrete noise, where a BLT's rounding terms, one in every later
  release, would sum to an unbounded sensitivity.

Its prefix noise equals the full square-root factorization's for the first ``band`` releases
(both factors are then the same series), and beyond grows linearly at the rate 1 / c(1)^2 ~
pi / (4 band) per release.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fedbandits.core.validation import check_int
from fedbandits.privacy.factorization import DEFAULT_MAX_BAND, EncodedRandomizer, series_inverse, sqrt_coefficients

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
        inverse = series_inverse(self.coefficients(n + 1), n + 1)
        vandermonde = lam[None, :] ** np.arange(n)[:, None]
        return BLT(lam, np.linalg.solve(vandermonde, inverse[1:]))

    def prefix_variance(self, releases: int) -> np.ndarray:
        """(releases,) the decoded prefix noise's variance at every release, per unit noise variance:
        ||row k of C B^{-1}||^2, C the prefix-sum matrix (the server's decoder)."""
        decoder = np.cumsum(self.inverse().coefficients(releases))
        return np.cumsum(decoder**2)  # type: ignore[no-any-return]

    def encoder(self, shape: tuple[int, ...]) -> BLTEncoder:
        """A silo's encoder (or the server's decoder) for batches of ``shape``."""
        return BLTEncoder(shape, self)

    def describe(self) -> str:
        return f"streaming BLT, {self.theta.size} buffers"


@dataclass(frozen=True)
class BandedStream:
    """The square-root factor (1 - x)^(-1/2) banded to its first ``band`` coefficients, with no
    planned horizon (module docstring)."""

    band: int

    def __post_init__(self) -> None:
        check_int("band", self.band, low=1, high=MAX_STREAM_BAND)

    @property
    def column(self) -> np.ndarray:
        """(band,) c_0..c_{band-1}: the coefficients one batch enters its ``band`` messages with."""
        return _banded_column(self.band)

    @property
    def sensitivity_sq(self) -> float:
        """||B e_j||^2 = sum_{m < band} c_m^2, the same for every column of the unbounded stream."""
        return float(np.sum(self.column**2))

    def prefix_variance(self, releases: int) -> np.ndarray:
        """(releases,) the decoded prefix noise's variance at every release, per unit noise variance."""
        decoder = np.cumsum(series_inverse(self.column, releases))
        return np.cumsum(decoder**2)  # type: ignore[no-any-return]

    def prefix_variance_at(self, release: int) -> float:
        """:meth:`prefix_variance` at one release, cheaply for any: exact to 16 bands, where the decoder's
        coefficients have reached their limit 1 / c(1) (to 1e-10 at bands 8-400), then that limit's
        square per release."""
        check_int("release", release, low=1)
        exact = _banded_prefix_variance(self.band)
        if release <= exact.size:
            return float(exact[release - 1])
        return float(exact[-1] + (release - exact.size) / float(np.sum(self.column)) ** 2)

    def encoder(self, shape: tuple[int, ...]) -> BandedStreamEncoder:
        return BandedStreamEncoder(shape, self.column)

    def describe(self) -> str:
        return f"streaming banded square root, band {self.band}"


#: the widest band a streaming banded strategy may have (a silo keeps ``band`` batches of P floats)
MAX_STREAM_BAND = 65536


@functools.lru_cache(maxsize=16)
def _banded_column(band: int) -> np.ndarray:
    column = sqrt_coefficients(band)
    column.setflags(write=False)
    return column


@functools.lru_cache(maxsize=16)
def _banded_prefix_variance(band: int) -> np.ndarray:
    out = BandedStream(band).prefix_variance(16 * band)
    out.setflags(write=False)
    return out


def default_stream_band(releases: int) -> int:
    """The band of ``mechanism = "banded"`` unless one is given: the planned releases K (the full
    square root over them), at most :data:`fedbandits.privacy.factorization.DEFAULT_MAX_BAND`."""
    return max(1, min(releases, DEFAULT_MAX_BAND))


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
    """The streaming BLT strategy of a calibration: ``buffers`` buffers, its noise tuned for the run's
    planned ``releases`` (its guarantee holds beyond them)."""
    return ra_blt(buffers, max(releases, 2))


#: a streaming strategy: what a silo encodes with and the server decodes with, over an unbounded stream
Stream = BLT | BandedStream


#: the streaming mechanisms: a guarantee over every release the silo will ever make
STREAMING = ("blt", "banded")


def stream_details(stream: Stream, releases: int) -> dict[str, object]:
    """What a calibration's details say of its streaming strategy (:func:`calibrated_stream` reads it back)."""
    out: dict[str, object] = {
        "factorization": f"{stream.describe()}, noise tuned for {releases} releases",
        "stream_sensitivity_sq": stream.sensitivity_sq,
        "horizon_of_guarantee": "unbounded: every release the silo will ever make",
    }
    if isinstance(stream, BandedStream):
        out["stream_band"] = stream.band
    else:
        out["blt_buffers"] = int(stream.theta.size)
    return out


def calibrated_stream(mechanism: str, details: Mapping[str, object], releases: int) -> Stream:
    """The strategy a calibration of ``mechanism`` chose, from its details (:func:`stream_details`)."""
    buffers, band = details.get("blt_buffers", DEFAULT_BUFFERS), details.get("stream_band", 0)
    assert isinstance(buffers, int) and isinstance(band, int)
    return stream_for(mechanism, releases, buffers=buffers, band=band)


def stream_for(mechanism: str, releases: int, *, buffers: int, band: int) -> Stream:
    """The streaming strategy of ``mechanism`` ("blt" or "banded") for a run planned for ``releases``:
    ``band = 0`` takes :func:`default_stream_band`."""
    if mechanism == "blt":
        return strategy_for(buffers, releases)
    if mechanism == "banded":
        return BandedStream(band or default_stream_band(releases))
    raise ValueError(f"mechanism {mechanism!r} is not a streaming one ('blt', 'banded')")


#: items a weighted sum multiplies at once (products of that many items stay in the CPU's cache)
_CHUNK = 32


def _weighted_sum(weights: np.ndarray, items: np.ndarray) -> np.ndarray:
    """sum_m weights[m] items[m] with elementwise products and sums over m in a fixed order: every entry's
    arithmetic is the same whatever the items' shape, so a silo encoding alone (the online agent, a
    deployed silo) and the simulator encoding R runs x M silos at once agree bit for bit (a BLAS
    contraction rounds differently with the shape; measured: 2.8e-14 apart after 9 releases)."""
    out = np.zeros(items.shape[1:])
    expand = (-1,) + (1,) * (items.ndim - 1)
    for i in range(0, weights.size, _CHUNK):
        out += (weights[i : i + _CHUNK].reshape(expand) * items[i : i + _CHUNK]).sum(axis=0)
    return out


class StreamEncoder:
    """What a streaming strategy's encoder does with its state: (B gamma)_k is gamma_k plus the carry of
    the earlier items (:meth:`_carry`), and the state then takes gamma_k (:meth:`_push`); decoding is the
    exact inverse with the same state, holding the decoded past (b_0 = 1)."""

    shape: tuple[int, ...]
    k: int

    def _carry(self) -> np.ndarray:
        raise NotImplementedError

    def _push(self, item: np.ndarray) -> None:
        raise NotImplementedError

    def encode(self, gamma: np.ndarray) -> np.ndarray:
        """(B gamma)_k = gamma_k + the carry of gamma_1..gamma_{k-1}; the state then takes gamma_k."""
        out = gamma + self._carry()
        self._push(gamma)
        return out

    def decode(self, encoded: np.ndarray) -> np.ndarray:
        """(B^{-1} y)_k for the encoded ``y_k``: gamma_k = y_k - the carry of the decoded past."""
        out = encoded - self._carry()
        self._push(out)
        return out


class BLTEncoder(StreamEncoder):
    """(B gamma)_k release by release, for batches of any shape: one buffer per decay, holding
    buf_j = sum_{i >= 1} theta_j^(i-1) gamma_{k-i}."""

    def __init__(self, shape: tuple[int, ...], blt: BLT) -> None:
        self.shape = shape
        self.blt = blt
        self.buffers = np.zeros((blt.theta.size, *shape))
        self.k = 0

    def _carry(self) -> np.ndarray:
        return _weighted_sum(self.blt.omega, self.buffers)

    def _push(self, gamma: np.ndarray) -> None:
        self.buffers *= self.blt.theta.reshape((-1,) + (1,) * gamma.ndim)
        self.buffers += gamma
        self.k += 1


class BandedStreamEncoder(StreamEncoder):
    """(B gamma)_k for a banded B, release by release, with no planned horizon: the last ``band`` batches
    (encode) or decoded messages (decode), each kept twice in a ring of 2 x band slots so that the ones a
    release needs are one contiguous window, read without a copy."""

    def __init__(self, shape: tuple[int, ...], column: np.ndarray) -> None:
        self.shape = shape
        self.column = column
        self.past = np.zeros((2 * column.size, *shape))  # item k in slots (k - 1) % band and that + band
        self.k = 0

    def _carry(self) -> np.ndarray:
        """sum_{1 <= m < band} c_m item_{k+1-m}: the earlier items' part of release k + 1."""
        band = self.column.size
        if band == 1 or self.k == 0:
            return np.zeros(self.shape)
        latest = (self.k - 1) % band + band  # item k; items k - 1, k - 2, ... sit just before it
        window = self.past[latest - band + 2 : latest + 1]  # items k + 2 - band .. k: m = band - 1 .. 1
        return _weighted_sum(self.column[:0:-1], window)

    def _push(self, item: np.ndarray) -> None:
        slot = self.k % self.column.size
        self.past[slot] = item
        self.past[slot + self.column.size] = item
        self.k += 1


class StreamingRandomizer(EncodedRandomizer):
    """The streaming release of R runs x M silos: each silo encodes with its strategy's state (a BLT's
    buffers, a banded strategy's last batches); :class:`fedbandits.privacy.factorization.EncodedRandomizer`
    adds the noise."""

    def __init__(
        self,
        n_runs: int,
        n_silos: int,
        sigma: np.ndarray,
        silo_rngs: Sequence[Sequence[np.random.Generator]],
        stream: Stream,
        keep_prefix: bool = False,
    ) -> None:
        shape = (n_runs, n_silos, np.asarray(sigma).size)
        decoder = StreamingAnalyzer(shape, stream) if keep_prefix else None
        super().__init__(sigma, silo_rngs, stream.encoder(shape), decoder)


class StreamingAnalyzer:
    """The server's decoder: B^{-1} (with the strategy's own state) on the summed messages, then their
    running sum: prefix k = sum_{i <= k} gamma_i + (C B^{-1} z)_k."""

    def __init__(self, shape: tuple[int, ...], stream: Stream) -> None:
        self.inverse = stream.encoder(shape)
        self.prefix = np.zeros(shape)
        self.k = 0

    def release(self, messages: np.ndarray) -> np.ndarray:
        """Add the M silos' messages ``(R, M, P)``; return the prefix ``(R, P)``."""
        return self.release_sum(messages.sum(axis=1))

    def release_sum(self, summed: np.ndarray) -> np.ndarray:
        self.prefix = self.prefix + self.inverse.decode(summed)
        self.k = self.inverse.k
        return self.prefix.copy()
