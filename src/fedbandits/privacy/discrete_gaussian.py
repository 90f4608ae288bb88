"""Secret noise for a deployed silo: an exact discrete Gaussian on a fixed-point grid, and its accounting.

Sampling
--------
A floating-point Gaussian sampler leaks through the bits of its output (Mironov 2012), and a
seeded pseudo-random generator is only as secret as its seed.  :func:`sample_discrete_gaussian`
is the exact sampler of Canonne, Kamath & Steinke (2020), "The Discrete Gaussian for Differential
Privacy", Algorithms 1-3: Bernoulli(exp(-gamma)) from Bernoulli(gamma / k) trials, a discrete
Laplace by rejection, then a discrete Gaussian by rejection from it -- all in exact rational
arithmetic, driven by uniform integers from a bit source (default: the OS CSPRNG through
:mod:`secrets`).  Its output is exactly distributed as N_Z(0, sigma^2): P[X = x] proportional to
exp(-x^2 / (2 sigma^2)) on the integers.

A silo releases ``g * (round(v / g) + Z)`` for every packed entry v of its p-sum, with Z drawn
independently per entry with parameter (sigma / g)^2 and g a power of two (the message is then
exactly representable in float64).

Accounting (what is actually sampled)
-------------------------------------
Rounding to the grid moves each entry by at most g / 2, so two neighbouring p-sums differ after
rounding by at most Delta / g + sqrt(P) in grid units (L2, P entries).  The multivariate discrete
Gaussian with per-entry parameters sigma_j is rho-zCDP with rho = (1/2) sum_j diff_j^2 / sigma_j^2
(CKS20, Theorem 14), zCDP composes additively over the tree nodes a user lies in (Bun & Steinke
2016, Lemma 2.3), and rho-zCDP implies (epsilon, delta)-DP with
delta = exp((alpha - 1)(alpha rho - epsilon)) / (alpha - 1) * (1 - 1/alpha)^alpha for every
alpha > 1 (CKS20, Corollary 13), minimised over alpha.  This is looser than the exact Gaussian
curve the simulator's continuous noise is calibrated with, so the secret noise is calibrated on
its own (:func:`calibrate_secret_noise`): a slightly larger sigma meeting the same target.
"""

from __future__ import annotations

import functools
import math
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from fedbandits.core.lazy import lazy_module
from fedbandits.core.validation import check_float, check_int
from fedbandits.privacy.calibration import NoiseCalibration
from fedbandits.privacy.factorization import EncodedRandomizer
from fedbandits.privacy.mechanisms import TreeRandomizer
from fedbandits.privacy.sensitivity import Sensitivity
from fedbandits.privacy.streaming import BandedStream, calibrated_stream

optimize = lazy_module("scipy.optimize")  # used to calibrate

#: a source of uniform integers: ``randbelow(n)`` in [0, n)
RandBelow = Callable[[int], int]

#: the grid step is the largest power of two with sigma / g >= GRID_RESOLUTION
GRID_RESOLUTION = 4096


def _bernoulli(p: Fraction, randbelow: RandBelow) -> bool:
    return randbelow(p.denominator) < p.numerator


def _bernoulli_exp_small(gamma: Fraction, randbelow: RandBelow) -> bool:
    """Bernoulli(exp(-gamma)) for gamma in [0, 1] (CKS20, Algorithm 1)."""
    k = 1
    while _bernoulli(gamma / k, randbelow):
        k += 1
    return k % 2 == 1


def bernoulli_exp(gamma: Fraction, randbelow: RandBelow) -> bool:
    """Bernoulli(exp(-gamma)) for rational gamma >= 0, exactly."""
    while gamma > 1:
        if not _bernoulli_exp_small(Fraction(1), randbelow):
            return False
        gamma -= 1
    return _bernoulli_exp_small(gamma, randbelow)


def sample_discrete_laplace(t: int, randbelow: RandBelow) -> int:
    """P[X = x] proportional to exp(-|x| / t) on the integers, t >= 1 (CKS20, Algorithm 2)."""
    while True:
        u = randbelow(t)
        if not bernoulli_exp(Fraction(u, t), randbelow):
            continue
        v = 0
        while bernoulli_exp(Fraction(1), randbelow):
            v += 1
        x = u + t * v
        negative = randbelow(2) == 1
        if negative and x == 0:
            continue
        return -x if negative else x


def sample_discrete_gaussian(sigma2: Fraction, randbelow: RandBelow = secrets.randbelow) -> int:
    """One draw of N_Z(0, sigma2) (CKS20, Algorithm 3), exact for rational sigma2 > 0."""
    if sigma2 <= 0:
        raise ValueError(f"sigma2 must be > 0, got {sigma2}")
    t = math.isqrt(sigma2.numerator // sigma2.denominator) + 1  # floor(sigma) + 1
    while True:
        y = sample_discrete_laplace(t, randbelow)
        gamma = (abs(y) - sigma2 / t) ** 2 / (2 * sigma2)
        if bernoulli_exp(gamma, randbelow):
            return y


def grid_step(sigma: float) -> float:
    """The power of two g with GRID_RESOLUTION <= sigma / g < 2 GRID_RESOLUTION."""
    sigma = check_float("sigma", sigma, low=0.0, low_open=True)
    return math.ldexp(1.0, math.floor(math.log2(sigma / GRID_RESOLUTION)))


def noise_ticks(sigma: float, g: float, randbelow: RandBelow = secrets.randbelow) -> int:
    """One Z ~ N_Z(0, (sigma / g)^2): the noise of one entry, in grid steps."""
    return sample_discrete_gaussian(Fraction(float(sigma) / g) ** 2, randbelow)


def discrete_gaussian_release(
    value: np.ndarray,
    sigma: np.ndarray,
    g: float,
    randbelow: RandBelow = secrets.randbelow,
    drawn: Sequence[int] = (),
) -> np.ndarray:
    """``g * (round(value / g) + Z)`` with Z_j ~ N_Z(0, (sigma_j / g)^2), entry by entry; ``drawn``:
    the first entries' Z drawn ahead of time (noise does not depend on the value)."""
    ticks = np.rint(np.asarray(value, dtype=np.float64) / g)
    flat = np.asarray(sigma).ravel()
    noise = [drawn[j] if j < len(drawn) else noise_ticks(s, g, randbelow) for j, s in enumerate(flat)]
    return g * (ticks + np.asarray(noise, dtype=np.float64).reshape(ticks.shape))


def zcdp_epsilon(rho: float, delta: float) -> float:
    """The smallest epsilon CKS20's Corollary 13 gives for rho-zCDP at ``delta`` (minimised over alpha)."""
    rho = check_float("rho", rho, low=0.0)
    delta = check_float("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    if rho == 0.0:
        return 0.0

    def eps(log_am1: float) -> float:
        am1 = math.exp(log_am1)  # alpha - 1 > 0
        alpha = am1 + 1.0
        return alpha * rho + (-math.log(delta) - math.log(am1) + alpha * math.log1p(-1.0 / alpha)) / am1

    res = optimize.minimize_scalar(eps, bounds=(-20.0, 20.0), method="bounded", options={"xatol": 1e-10})
    return max(0.0, float(min(res.fun, eps(res.x))))


@dataclass(frozen=True)
class SecretNoise:
    """The calibrated secret noise of one deployment: per-entry sigma, grid step, what it spends."""

    sigma_cov: float
    sigma_bias: float
    grid: float
    rho: float
    epsilon_spent: float
    scale: float  # sigma over the simulator's continuous-Gaussian sigma

    def report(self) -> dict[str, object]:
        return {
            "secret_noise_sampler": "exact discrete Gaussian (Canonne, Kamath & Steinke 2020), OS CSPRNG",
            "secret_noise_sigma_cov": self.sigma_cov,
            "secret_noise_sigma_bias": self.sigma_bias,
            "secret_noise_grid": self.grid,
            "secret_noise_rho": self.rho,
            "secret_noise_epsilon_spent": self.epsilon_spent,
            "secret_noise_scale": self.scale,
        }


def release_rho(
    sigma_cov: float,
    sigma_bias: float,
    grid: float,
    sens_cov: float,
    sens_bias: float,
    dim: int,
    nodes: int | tuple[float, ...],
    contributions: int = 1,
) -> float:
    """rho of one user's releases: ``nodes`` rounded, discrete-Gaussian p-sums (module docstring), or,
    given a tuple, the messages of a streaming banded release, which carry the user's change times
    those coefficients (each rounded message adds its sqrt(entries) once: a finite sum, the band's).

    ``contributions = m`` > 1 (user-level): the user's m contributions, each of sensitivity ``sens``,
    move a p-sum holding n_k of them by at most n_k a + r (a = sens / grid, r = sqrt(entries): the
    rounding, paid once per p-sum touched), with sum n_k = m nodes, n_k <= m and at most m nodes p-sums
    touched, so sum (n_k a + r)^2 <= nodes (m a + r)^2 + (m - 1) nodes r^2 (as
    :func:`fedbandits.privacy.distributed_noise.user_releases` argues for the shares; with coefficients
    c_k, a_k = c_k a in each term)."""
    column = np.ones(nodes) if isinstance(nodes, int) else np.asarray(nodes, dtype=np.float64)
    n_cov, n_bias = dim * (dim + 1) // 2, dim
    m = contributions
    cov, bias = (
        float(np.sum(((m * column * sens / grid + math.sqrt(entries)) / (sigma / grid)) ** 2))
        + (m - 1) * column.size * (math.sqrt(entries) / (sigma / grid)) ** 2
        for sens, sigma, entries in ((sens_cov, sigma_cov, n_cov), (sens_bias, sigma_bias, n_bias))
    )
    return 0.5 * (cov + bias)


@functools.lru_cache(maxsize=64)  # a pure function; a serving replica reloads its agent at every round
def calibrate_secret_noise(
    sigma_cov: float,
    sigma_bias: float,
    sens_cov: float,
    sens_bias: float,
    dim: int,
    nodes: int | tuple[float, ...],
    epsilon: float,
    delta: float,
    contributions: int = 1,
) -> SecretNoise:
    """The smallest common scale s >= 1 of the continuous sigmas whose discrete, rounded release
    meets (epsilon, delta) by the zCDP accounting (bisection to a relative 1e-6; the returned
    noise always meets the target); ``contributions``: one user's contributions, ``nodes``: the
    p-sums or the banded coefficients of the releases one user enters (:func:`release_rho`)."""
    check_int("dim", dim, low=1)
    if isinstance(nodes, int):
        check_int("nodes", nodes, low=1)
    check_int("contributions", contributions, low=1)
    grid = grid_step(min(sigma_cov, sigma_bias))

    def spent(scale: float) -> float:
        rho = release_rho(scale * sigma_cov, scale * sigma_bias, grid, sens_cov, sens_bias, dim, nodes, contributions)
        return zcdp_epsilon(rho, delta)

    lo, hi = 1.0, 2.0
    while spent(hi) > epsilon:
        lo, hi = hi, hi * 2.0
    if spent(lo) > epsilon:
        while hi / lo > 1.0 + 1e-6:
            mid = math.sqrt(lo * hi)
            lo, hi = (lo, mid) if spent(mid) <= epsilon else (mid, hi)
        scale = hi
    else:
        scale = lo
    rho = release_rho(scale * sigma_cov, scale * sigma_bias, grid, sens_cov, sens_bias, dim, nodes, contributions)
    return SecretNoise(scale * sigma_cov, scale * sigma_bias, grid, rho, zcdp_epsilon(rho, delta), scale)


def secret_noise_for(cal: NoiseCalibration, sens: Sensitivity, dim: int, contributions: int = 1) -> SecretNoise:
    """The secret noise meeting a calibration's own (epsilon, delta) for its tree (``cal.nodes``
    p-sums per contribution) or its streaming banded release (the band's coefficients), with one
    contribution's sensitivities ``sens`` and up to ``contributions`` contributions per user: what a
    deployed silo and an online agent draw."""
    nodes: int | tuple[float, ...] = cal.nodes
    if cal.mechanism == "banded":
        stream = calibrated_stream(cal.mechanism, cal.details, cal.releases)
        assert isinstance(stream, BandedStream)
        nodes = tuple(float(c) for c in stream.column)
    elif cal.mechanism != "tree":
        raise ValueError(f"mechanism {cal.mechanism!r} has no secret discrete release: use 'tree' or 'banded'")
    return calibrate_secret_noise(
        cal.sigma_cov, cal.sigma_bias, sens.cov, sens.bias, dim, nodes, cal.epsilon, cal.delta, contributions
    )


#: the report line of ``distributed-dp``'s secret shares (their law is the one the calibration assumes)
SECRET_SHARES_SAMPLER = "exact discrete Gaussian shares (Canonne, Kamath & Steinke 2020), OS CSPRNG"


class DrawsAhead:
    """Secret noise drawn between releases: :meth:`prepare` draws one entry of the next release's noise
    ahead of time (it does not depend on the data), :meth:`_noisy` hands them to the release.  Drawn-ahead
    noise is kept in memory only: never saved, never pickled (a restart draws afresh; nothing drawn ahead
    was released)."""

    sigma: np.ndarray
    grid: float
    _ahead: list[int]

    def prepare(self) -> bool:
        """Draw one entry of the next release's noise; False once it is complete (a service calls this
        between releases, so a release costs no sampling)."""
        if len(self._ahead) >= self.sigma.size:
            return False
        self._ahead.append(noise_ticks(float(self.sigma[len(self._ahead)]), self.grid))
        return True

    def _noisy(self, value: np.ndarray) -> np.ndarray:
        drawn, self._ahead = self._ahead, []
        return discrete_gaussian_release(value, np.broadcast_to(self.sigma, value.shape), self.grid, drawn=drawn)

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_ahead": []}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update({"_ahead": [], **state})


class SecretTreeRandomizer(DrawsAhead, TreeRandomizer):
    """One deployed silo's randomizer with secret noise: every new node is released as
    :func:`discrete_gaussian_release` with the OS CSPRNG.  Nothing secret is kept in the object
    (it is pickled into the silo's durable state): released nodes are stored, never redrawn."""

    def __init__(self, sigma: np.ndarray, grid: float, releases: int) -> None:
        TreeRandomizer.__init__(self, 1, 1, sigma, [np.random.Generator(np.random.SFC64(0))], releases)
        self.silo_rngs = []  # no pseudo-random stream: the noise comes from the OS CSPRNG
        self.grid = check_float("grid", grid, low=0.0, low_open=True)
        self._ahead = []


class SecretStreamRandomizer(DrawsAhead, EncodedRandomizer):
    """One silo's streaming banded release with secret noise (``ldp``, ``mechanism = "banded"``): release k
    is :func:`discrete_gaussian_release` of (B gamma)_k, the silo keeping its last ``band`` batches
    (:class:`fedbandits.privacy.streaming.BandedStreamEncoder`); no planned horizon.  Its accounting is
    :func:`release_rho` over the band's coefficients (:func:`secret_noise_for`).  The encoding, the count
    and a skipped release are :class:`~fedbandits.privacy.factorization.EncodedRandomizer`'s; only the
    noise is this class's, as :class:`SecretTreeRandomizer` is the tree's with secret noise."""

    def __init__(self, sigma: np.ndarray, grid: float, stream: BandedStream) -> None:
        sigma = np.asarray(sigma, dtype=np.float64)
        # no pseudo-random stream: the noise comes from the OS CSPRNG
        EncodedRandomizer.__init__(self, sigma, [], stream.encoder((1, 1, sigma.size)), None)
        self.grid = check_float("grid", grid, low=0.0, low_open=True)
        self._ahead = []
