"""Distributed discrete Gaussian noise under secure aggregation: encoding, accounting, calibration.

The ``distributed-dp`` protocol (:mod:`fedbandits.protocols.distributed_dp`) follows Kairouz,
Liu & Steinke (2021), "The Distributed Discrete Gaussian Mechanism for Federated Learning with
Secure Aggregation" (ICML), on the tree of p-sums of ``ldp``.  Every silo encodes its node
p-sum on an integer grid, adds a *share* of discrete Gaussian noise and reduces modulo 2^bits;
secure aggregation reveals only the modular sum, so the server sees the data plus the sum of
the honest silos' shares -- central-model noise without a trusted server.

Encoding (:class:`ModularCodec`)
--------------------------------
A packed entry v (covariance entries first, then bias) becomes ``round(v / g_j)`` with grid step
g_j = ``granularity`` for covariance entries and ``granularity * Delta_bias / Delta_cov`` for
bias entries, so both streams have the same sensitivity in grid units, r = Delta_cov /
granularity.  (With ``bias_noise_ratio`` = rho the bias grid is rho times coarser: the bias stream
then moves r / rho steps and its noise, in data units, is rho times the covariance stream's; the
sensitivities below then read sqrt(1 + 1 / rho^2) r and sqrt(P_bias) r / rho.)  Rounding is
deterministic (to the nearest integer).  One user moves the unrounded
vector by at most sqrt(2) r in L2 (Delta_cov and Delta_bias of
:mod:`fedbandits.privacy.sensitivity`, each r grid steps); each rounding error lies in
[-1/2, 1/2], so the difference of two rounding errors is below 1 per entry and the rounded
vectors differ by at most

    l2 = sqrt(2) r + sqrt(P),      l1 = (sqrt(P_cov) + sqrt(P_bias)) r + P      (P entries)

(triangle inequality; ||.||_1 <= sqrt(n) ||.||_2 per stream).  This is the sensitivity the
accounting uses: the rounding is paid for, not ignored.

Privacy of the sum (KLS21, Proposition 14)
------------------------------------------
Let X_1..X_n be i.i.d. N_Z(0, s^2)^P with s >= 1/2 and Z their sum.  For every integer vector
D and alpha >= 1, the Renyi divergence D_alpha(Z + D || Z) is at most the minimum of

    alpha/2 ||D||_2^2 / (n s^2) + tau P,
    alpha/2 (||D||_2^2 / (n s^2) + 2 ||D||_1 tau / (sqrt(n) s) + tau^2 P),
    alpha/2 (||D||_2 / (sqrt(n) s) + tau sqrt(P))^2,

with tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 s^2 k / (k + 1)).  A user lies in ``nodes`` released
node sums; Renyi divergences of the same order add over them (adaptive composition, Mironov
2017, Prop. 1), and each bound has the form alpha rho + c, which is (epsilon, delta)-DP with
epsilon = c + (the zCDP conversion of rho) (Canonne, Kamath & Steinke 2020, Prop. 12 / Cor. 13;
:func:`fedbandits.privacy.discrete_gaussian.zcdp_epsilon`).  The best of the three is reported.
With the default grid s is in the thousands and tau underflows to 0: the sum is then exactly as
private as a single discrete Gaussian of variance n s^2.

Colluders and dropouts
----------------------
n counts the silos whose noise the server does not know: up to ``colluders`` silos may hand their
shares to the server, and up to ``dropouts`` silos may fail to answer in a round (their noise never
arrives).  The share s is calibrated so that n = M - colluders - dropouts meets the target; the
report also gives epsilon at the server with every silo honest and present
(``epsilon_spent``) and with the colluders but no dropout (``epsilon_colluders``).  A round with
more dropouts than planned still closes; the protocol reports the epsilon that was delivered.

Overflow (:func:`required_bits`)
--------------------------------
Each silo contributes at most one user per round, so any p-sum (and any prefix sum) of one silo
holds at most T users; a covariance entry is then at most T L^2 in absolute value and a bias
entry T L B.  In grid units, the M silos' rounded data sum to at most
A = M (T L^2 / g_cov + 1/2) for covariance entries and M (T L B / g_bias + 1/2) for bias entries
(:func:`data_bound` takes the larger).  The data part can therefore never leave [-A, A].  The noise is not bounded: a
discrete Gaussian is s^2-sub-Gaussian (CKS20, Cor. 9), so a sum of at most ``nodes`` node sums
of M shares has P[|noise| >= t] <= 2 exp(-t^2 / (2 nodes M s^2)); with
t = sqrt(2 nodes M s^2 ln(2 P K / beta)) and a union bound over the P entries of the K releases,
the noise leaves [-t, t] in a run with probability at most beta = 2^-64.  The modulus 2^bits with
2^(bits - 1) > A + t decodes every release exactly (centred residues) unless that event occurs.
A factorized message (B gamma)_k = sum_m b_m gamma_{k-m} has 0 < b_m <= 1 and at most K terms, each a
batch of at most B users, so its entries obey the same bound T L^2 (T L B); its noise is one sum of M
shares, within the tree's t.

Factorized release
------------------
With ``mechanism = "factorized"`` one user in batch j enters message k >= j with coefficient
b_{k-j} (square-root factor, :mod:`fedbandits.privacy.factorization`), so in grid units message k
has sensitivity sqrt(2) r b_{k-j} + sqrt(P) (l1 likewise).  :func:`composed_epsilon` sums each of
Prop. 14's bounds over the messages of batch 1 (the most messages, the largest coefficients); the
composition is adaptive because each message's bound holds given the earlier releases.

Streaming banded release
------------------------
With ``mechanism = "banded"`` (:class:`fedbandits.privacy.streaming.BandedStream`) the encoder is the
square root banded to ``band`` coefficients with no planned horizon: one user enters exactly ``band``
messages, with the sensitivities above for c_0..c_{band-1}, whatever the stream's length -- so one
calibration covers every release.  (A BLT's user would enter every later message, each with its
sqrt(P) rounding term: an unbounded sum, which is why BLT is not offered here.)  Its overflow bound
cannot use the horizon: a message sums at most ``band`` batches of B users per silo, so T is replaced
by band x B, and the union bound runs over :data:`STREAM_RELEASES` releases.

User-level privacy
------------------
With ``contributions = m`` (one user, up to m contributions) the releases one contribution enters --
the tree's nodes or the factorized messages -- are replaced by :func:`user_releases`' profile, which
dominates every placement of the user's m contributions in each of Prop. 14's totals.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedbandits.core.lazy import lazy_module
from fedbandits.core.validation import check_float, check_int
from fedbandits.privacy.calibration import PrivacySpec
from fedbandits.privacy.discrete_gaussian import zcdp_epsilon
from fedbandits.privacy.factorization import factorize
from fedbandits.privacy.guarantee import certified
from fedbandits.privacy.streaming import BandedStream
from fedbandits.privacy.tree import max_nodes_per_datum

optimize = lazy_module("scipy.optimize")  # used to calibrate

#: probability, per run, that the noise alone overflows the modulus (module docstring)
OVERFLOW_PROBABILITY = 2.0**-64
#: default grid: r = Delta_cov / granularity is the power of two >= this many sqrt(P), so that the
#: rounding term sqrt(P) of the sensitivity is below 1/1000 of the data term
GRID_RESOLUTION = 1000.0
MAX_BITS = 64
#: mechanism "banded" has no planned horizon: its modulus keeps the overflow probability of every release
#: below OVERFLOW_PROBABILITY / (P x STREAM_RELEASES) -- a silo releasing every millisecond for 30 years
STREAM_RELEASES = 2**40


def tau(share_sigma: float, honest: int) -> float:
    """tau of KLS21 Proposition 14 for ``honest`` shares of parameter ``share_sigma``."""
    return 10.0 * sum(math.exp(-2.0 * math.pi**2 * share_sigma**2 * k / (k + 1)) for k in range(1, honest))


def sum_epsilon(share_sigma: float, honest: int, l2: float, l1: float, width: int, nodes: int, delta: float) -> float:
    """epsilon at ``delta`` of ``nodes`` releases of a sum of ``honest`` discrete Gaussian shares.

    Each release is the data (sensitivity ``l2``, ``l1`` in grid units over ``width`` entries) plus
    the sum of ``honest`` i.i.d. N_Z(0, share_sigma^2) shares; Proposition 14 and Renyi
    composition, converted to (epsilon, delta) (module docstring).  ``inf`` if nobody is honest.
    """
    return composed_epsilon(share_sigma, honest, ((l2, l1, nodes),), width, delta)


def composed_epsilon(
    share_sigma: float, honest: int, releases: Sequence[tuple[float, float, int]], width: int, delta: float
) -> float:
    """As :func:`sum_epsilon` for releases of different sensitivities: ``releases`` lists
    (l2, l1, count), ``count`` releases of that sensitivity.  Renyi divergences of the same order
    add, so each of Prop. 14's three bounds is summed over the releases before the conversion."""
    if honest < 1:
        return math.inf
    if share_sigma < 0.5:
        raise ValueError(f"the per-silo noise is {share_sigma:.4g} grid steps; KLS21 Prop. 14 needs >= 0.5")
    t = tau(share_sigma, honest)
    scale = math.sqrt(honest) * share_sigma
    totals = [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    for l2, l1, count in releases:
        forms = (
            (l2**2 / scale**2, t * width),
            (l2**2 / scale**2 + 2.0 * l1 * t / scale + t**2 * width, 0.0),
            ((l2 / scale + t * math.sqrt(width)) ** 2, 0.0),
        )
        for total, (two_rho, const) in zip(totals, forms, strict=True):
            total[0] += count * two_rho
            total[1] += count * const
    return min(zcdp_epsilon(two_rho / 2.0, delta) + const for two_rho, const in totals)


@dataclass(frozen=True)
class ModularCodec:
    """Fixed-point encoding of packed p-sums into integers modulo 2^bits, and back.

    ``steps (P,)`` are the grid steps of the packed entries.  :meth:`encode` rounds to the grid
    (int64, exact); :meth:`residues` reduces modulo 2^bits (uint64: numpy's wrap-around is
    arithmetic modulo 2^64, and 2^bits divides it); :meth:`decode` maps a modular sum back to its
    centred representative in [-2^(bits-1), 2^(bits-1)) and rescales.
    """

    steps: np.ndarray
    bits: int

    @property
    def mask(self) -> np.uint64:
        return np.uint64((1 << self.bits) - 1)

    def encode(self, packed: np.ndarray) -> np.ndarray:
        return np.rint(packed / self.steps).astype(np.int64)

    def residues(self, ticks: np.ndarray) -> np.ndarray:
        return ticks.astype(np.uint64) & self.mask

    def centred(self, residues: np.ndarray) -> np.ndarray:
        """The representative in [-2^(bits-1), 2^(bits-1)) of every residue (int64)."""
        values = (np.asarray(residues, dtype=np.uint64) & self.mask).view(np.int64)
        if self.bits == MAX_BITS:
            return values.copy()
        half = np.int64(1 << (self.bits - 1))
        return np.where(values >= half, (values - half) - half, values)  # v - 2^bits, without 2^63 in int64

    def decode(self, ticks: np.ndarray) -> np.ndarray:
        return ticks.astype(np.float64) * self.steps


@dataclass(frozen=True)
class DistributedCalibration:
    """The calibrated shares of ``distributed-dp`` and what they guarantee."""

    protocol: str
    calibration: str
    epsilon: float
    delta: float
    releases: int
    nodes: int
    agents: int
    colluders: int
    dropouts: int
    bits: int
    granularity: float  # grid step of covariance entries (data units)
    grid_bias: float  # grid step of bias entries
    share_sigma: float  # discrete Gaussian parameter of one silo's share, grid steps
    l2: float  # per-user sensitivity of a rounded node sum, grid steps
    l1: float
    width: int
    epsilon_spent: float  # at the server, every silo honest and present
    epsilon_colluders: float  # ``colluders`` silos share their noise with the server, none drops
    epsilon_worst: float  # colluders and ``dropouts`` missing shares: the calibrated case
    guarantee: str
    guarantee_reason: str
    mechanism: str = "tree"
    #: factorized: the per-user sensitivities (l2, l1) of the messages one user enters, one per
    #: release (the tree: empty, ``nodes`` releases of (l2, l1))
    profile: tuple[tuple[float, float], ...] = ()
    #: the unit of privacy: 1 = one interaction, m > 1 = one user with up to m contributions
    contributions: int = 1
    #: mechanism "banded": the streaming strategy's band (0 otherwise)
    band: int = 0

    @property
    def stream(self) -> BandedStream:
        """The streaming strategy of mechanism 'banded'."""
        if self.mechanism != "banded":
            raise ValueError(f"mechanism {self.mechanism!r} has no streaming strategy")
        return BandedStream(self.band)

    @property
    def prefix_factor(self) -> float:
        """The largest prefix noise variance per unit share variance and silo (over the planned releases
        for 'banded'): the tree's ``nodes`` (a bound on popcount), a factorization's max_k ||A[k, :]||^2."""
        if self.mechanism == "factorized":
            return float(factorize(self.releases).prefix_variance().max())
        if self.mechanism == "banded":
            return float(self.stream.prefix_variance(self.releases).max())
        return float(self.nodes)

    def release_sensitivities(self) -> tuple[tuple[float, float, int], ...]:
        """(l2, l1, count) of the releases one user enters, for :func:`composed_epsilon`."""
        one = tuple((l2, l1, 1) for l2, l1 in self.profile) if self.profile else ((self.l2, self.l1, self.nodes),)
        return user_releases(one, self.width, self.contributions)

    @property
    def sigma_cov(self) -> float:
        """Std bound of one silo's share on a covariance entry, data units (the discrete Gaussian's
        variance is below its parameter squared, CKS20 Prop. 19)."""
        return self.share_sigma * self.granularity

    @property
    def sigma_bias(self) -> float:
        return self.share_sigma * self.grid_bias

    def steps(self, dim: int) -> np.ndarray:
        n_tri = dim * (dim + 1) // 2
        return np.concatenate([np.full(n_tri, self.granularity), np.full(dim, self.grid_bias)])

    def codec(self, dim: int) -> ModularCodec:
        return ModularCodec(self.steps(dim), self.bits)

    def epsilon_with(self, honest: int) -> float:
        """epsilon at the server when ``honest`` silos' shares arrived and are unknown to it."""
        return composed_epsilon(self.share_sigma, honest, self.release_sensitivities(), self.width, self.delta)

    def report(self) -> dict[str, object]:
        return {
            "protocol": self.protocol,
            "calibration": self.calibration,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "releases": self.releases,
            "nodes": self.nodes,
            "mechanism": self.mechanism,
            "epsilon_spent": self.epsilon_spent,
            "guarantee": self.guarantee,
            "guarantee_reason": self.guarantee_reason,
            "noise_std": self.sigma_cov,
            "server_noise_std": math.sqrt(self.agents) * self.sigma_cov,
            "colluders": self.colluders,
            "dropouts": self.dropouts,
            "epsilon_colluders": self.epsilon_colluders,
            "epsilon_worst": self.epsilon_worst,
            "privacy_unit": "interaction"
            if self.contributions == 1
            else f"user, up to {self.contributions} contributions",
            "privacy_bits": self.bits,
            "privacy_granularity": self.granularity,
            "privacy_grid_bias": self.grid_bias,
            "privacy_share_sigma": self.share_sigma,
            "privacy_sensitivity_l2": self.l2,
            "privacy_overflow_probability": OVERFLOW_PROBABILITY,
            "privacy_accountant": "distributed discrete Gaussian (Kairouz, Liu & Steinke 2021, Prop. 14), RDP",
        }


def default_granularity(sens_cov: float, width: int) -> float:
    """The grid step with r = Delta_cov / g the power of two >= GRID_RESOLUTION sqrt(P)."""
    r = 2.0 ** math.ceil(math.log2(GRID_RESOLUTION * math.sqrt(width)))
    return sens_cov / r


def data_bound(agents: int, horizon: int, spec: PrivacySpec, granularity: float, grid_bias: float) -> float:
    """A: the largest |entry| of the M silos' rounded data sums, grid steps (module docstring)."""
    cov = horizon * spec.feature_bound**2 / granularity
    bias = horizon * spec.feature_bound * spec.reward_bound / grid_bias
    return agents * (max(cov, bias) + 0.5)


def noise_bound(agents: int, nodes: int, share_sigma: float, width: int, releases: int) -> float:
    """t: the noise of any prefix stays in [-t, t] except with probability OVERFLOW_PROBABILITY."""
    return math.sqrt(2.0 * nodes * agents * share_sigma**2 * math.log(2.0 * width * releases / OVERFLOW_PROBABILITY))


def required_bits(data: float, noise: float) -> int:
    """The smallest bits with 2^(bits - 1) > data + noise."""
    return max(2, math.floor(math.log2(data + noise)) + 2)


@functools.lru_cache(maxsize=128)
def user_releases(
    releases: tuple[tuple[float, float, int], ...], width: int, contributions: int
) -> tuple[tuple[float, float, int], ...]:
    """(l2, l1, count) releases that dominate, in each of Prop. 14's three totals, what one user with up to
    m = ``contributions`` contributions changes in the rounded messages; ``releases`` are those one
    contribution enters (the tree: ``nodes`` releases of (l2, l1); factorized: message k's (l2_k, l1_k)).

    One contribution moves message k by a_k = l2_k - b (l1: a1_k = l1_k - b1) before rounding, and
    rounding adds at most b = sqrt(P) (b1 = P) per message touched.  With contributions in batches
    j_1..j_m, message k moves by at most S_k = sum_c a_{k - j_c} (triangle inequality; the coefficients
    of a shifted contribution are those of the first batch's, truncated, so never larger), and
    sum_k S_k^2 <= m^2 sum_k a_k^2 (Minkowski: m shifted copies of one vector, summed),
    sum_k S_k <= m sum_k a_k, and at most m n messages are touched (n = the releases one contribution
    enters).  So sum (S_k + b)^2 <= m^2 sum a_k^2 + 2 b m sum a_k + m n b^2 and sum (S_k + b) <= m sum a_k +
    m n b (l1 likewise): exactly the totals of the releases (m a_k + b, m a1_k + b1) and (m - 1) n releases
    of (b, b1).  Each bound of :func:`composed_epsilon` grows with these totals and the count of releases
    touched, so the result is an upper bound; all m contributions in one batch attains the l2^2 total.
    m = 1: ``releases`` unchanged."""
    if contributions == 1:
        return releases
    b, b1 = math.sqrt(width), float(width)
    m = contributions
    scaled = tuple((m * (l2 - b) + b, m * (l1 - b1) + b1, count) for l2, l1, count in releases)
    return (*scaled, (b, b1, (m - 1) * sum(count for _, _, count in releases)))


@functools.lru_cache(maxsize=256)  # a pure function of hashable, immutable inputs (as ``calibrate``)
def calibrate_distributed(
    spec: PrivacySpec,
    *,
    agents: int,
    horizon: int,
    batch: int,
    dim: int,
    colluders: int = 0,
    dropouts: int = 0,
    bits: int | None = None,
    granularity: float | None = None,
) -> DistributedCalibration:
    """The smallest share sigma for which M - colluders - dropouts honest shares meet (epsilon, delta).

    Raises ``ValueError`` naming the parameter when the request cannot be met (paper calibration,
    too many colluders/dropouts, a grid too coarse for Prop. 14, a modulus that could overflow).
    """
    honest = _honest_shares(spec, agents, horizon, batch, dim, colluders, dropouts)
    releases = horizon // batch
    tree_nodes = max_nodes_per_datum(releases)
    sens = spec.sensitivity()
    n_tri, width = dim * (dim + 1) // 2, dim * (dim + 1) // 2 + dim
    g = (
        default_granularity(sens.cov, width)
        if granularity is None
        else check_float("granularity", granularity, low=0.0, low_open=True)
    )
    # the bias grid is the covariance one scaled by Delta_bias / Delta_cov (both streams move r steps) and by
    # bias_noise_ratio (the bias stream then moves r / ratio steps, and its noise is ratio times larger)
    ratio = spec.bias_noise_ratio
    g_bias = g * sens.bias / sens.cov * ratio
    r = sens.cov / g
    l2 = math.sqrt(1.0 + 1.0 / ratio**2) * r + math.sqrt(width)
    l1 = (math.sqrt(n_tri) + math.sqrt(dim) / ratio) * r + width
    profile, band = _encoded_profile(spec, releases, r, dim)
    if profile:
        one: tuple[tuple[float, float, int], ...] = tuple((a, b, 1) for a, b in profile)
        nodes = len(profile)
    else:
        one = ((l2, l1, tree_nodes),)
        nodes = tree_nodes
    sensitivities = user_releases(one, width, spec.contributions)
    share_sigma = _smallest_share_sigma(spec, honest, sensitivities, width)
    if band:  # an unbounded stream: a message holds at most band x batch users per silo; size for 2^40 releases
        bits = _modulus_bits(bits, spec, agents, band * batch, g, g_bias, 1, share_sigma, width, STREAM_RELEASES)
    else:
        bits = _modulus_bits(bits, spec, agents, horizon, g, g_bias, tree_nodes, share_sigma, width, releases)
    epsilon_worst = composed_epsilon(share_sigma, honest, sensitivities, width, spec.delta)
    guarantee, reason = _certify(epsilon_worst, spec, nodes, profile, honest, colluders, dropouts)
    return DistributedCalibration(
        protocol="distributed-dp",
        calibration=spec.calibration,
        epsilon=spec.epsilon,
        delta=spec.delta,
        releases=releases,
        nodes=nodes,
        agents=agents,
        colluders=colluders,
        dropouts=dropouts,
        bits=bits,
        granularity=g,
        grid_bias=g_bias,
        share_sigma=share_sigma,
        l2=l2,
        l1=l1,
        width=width,
        epsilon_spent=composed_epsilon(share_sigma, agents, sensitivities, width, spec.delta),
        epsilon_colluders=composed_epsilon(share_sigma, agents - colluders, sensitivities, width, spec.delta),
        epsilon_worst=epsilon_worst,
        guarantee=guarantee,
        guarantee_reason=reason,
        mechanism=spec.mechanism,
        profile=profile,
        contributions=spec.contributions,
        band=band,
    )


def _honest_shares(
    spec: PrivacySpec, agents: int, horizon: int, batch: int, dim: int, colluders: int, dropouts: int
) -> int:
    """The checked request of :func:`calibrate_distributed`: the honest shares M - colluders - dropouts."""
    if spec.calibration != "tight":
        raise ValueError("calibration must be 'tight' for protocol 'distributed-dp' (no paper defines it)")
    check_int("agents", agents, low=1)
    check_int("horizon", horizon, low=1)
    check_int("batch", batch, low=1, high=horizon)
    check_int("dim", dim, low=1)
    check_int("colluders", colluders, low=0)
    check_int("dropouts", dropouts, low=0)
    honest = agents - colluders - dropouts
    if honest < 1:
        raise ValueError(
            f"colluders + dropouts must be <= agents - 1 = {agents - 1} (one honest silo's noise must arrive), "
            f"got {colluders} + {dropouts}"
        )
    return honest


def _certify(
    epsilon_worst: float,
    spec: PrivacySpec,
    nodes: int,
    profile: tuple[tuple[float, float], ...],
    honest: int,
    colluders: int,
    dropouts: int,
) -> tuple[str, str]:
    """(guarantee, reason) of the calibrated worst case: ``honest`` shares over the releases one user enters."""
    releases_entered = (
        f"{nodes} {'streaming banded' if spec.mechanism == 'banded' else 'factorized'} messages (square-root "
        "factor, DMRST22 Thm 2.1 for adaptive streams)"
        if profile
        else f"{nodes} tree nodes"
    )
    return certified(
        epsilon_worst,
        spec.epsilon,
        spec.delta,
        f"distributed discrete Gaussian (KLS21 Prop. 14) over {releases_entered}, {honest} honest shares "
        f"({colluders} colluders, {dropouts} dropouts tolerated)",
    )


def _encoded_profile(
    spec: PrivacySpec, releases: int, r: float, dim: int
) -> tuple[tuple[tuple[float, float], ...], int]:
    """(the (l2, l1) of the messages one user enters, the band) of an encoded release: the factorized one
    (band 0: planned for ``releases``), the streaming banded one; ((), 0) for the tree."""
    n_tri, width = dim * (dim + 1) // 2, dim * (dim + 1) // 2 + dim
    if spec.mechanism == "banded":
        stream = spec.stream(releases)
        assert isinstance(stream, BandedStream)
        return _coefficient_profile(stream.column, r, n_tri, dim, width, spec.bias_noise_ratio), stream.band
    if spec.mechanism == "factorized":
        return _coefficient_profile(factorize(releases).encoder, r, n_tri, dim, width, spec.bias_noise_ratio), 0
    return (), 0


def _coefficient_profile(
    column: np.ndarray, r: float, n_tri: int, dim: int, width: int, ratio: float = 1.0
) -> tuple[tuple[float, float], ...]:
    """(l2, l1) of the encoded messages one user enters, grid steps (r = Delta_cov / granularity)."""
    # message k carries b_{k-j} times the user's change (rounded: + the rounding term), for the
    # releases k >= j within the band; j = 1 enters the most, with the largest coefficients
    return tuple(
        (
            math.sqrt(1.0 + 1.0 / ratio**2) * r * b + math.sqrt(width),
            (math.sqrt(n_tri) + math.sqrt(dim) / ratio) * r * b + width,
        )
        for b in column
    )


def _smallest_share_sigma(
    spec: PrivacySpec, honest: int, sensitivities: tuple[tuple[float, float, int], ...], width: int
) -> float:
    """The smallest share parameter (>= 1/2, Prop. 14) whose ``honest`` shares meet (epsilon, delta)."""

    def spent(log_sigma: float) -> float:
        return composed_epsilon(math.exp(log_sigma), honest, sensitivities, width, spec.delta)

    lo = math.log(0.5)
    if spent(lo) > spec.epsilon:
        hi = lo + 1.0
        while spent(hi) > spec.epsilon:
            lo, hi = hi, hi + 1.0
        root = optimize.brentq(lambda s: spent(s) - spec.epsilon, lo, hi, xtol=1e-9)
        while spent(root) > spec.epsilon:  # never optimistic
            root += 1e-9
        share_sigma = math.exp(root)
    else:
        share_sigma = 0.5  # Prop. 14's smallest parameter already meets the target
    return share_sigma


def _modulus_bits(
    bits: int | None,
    spec: PrivacySpec,
    agents: int,
    horizon: int,
    g: float,
    g_bias: float,
    tree_nodes: int,
    share_sigma: float,
    width: int,
    releases: int,
) -> int:
    """The modulus bits: ``bits`` checked against the overflow bound (module docstring), or the smallest."""
    needed = required_bits(
        data_bound(agents, horizon, spec, g, g_bias), noise_bound(agents, tree_nodes, share_sigma, width, releases)
    )
    if needed > MAX_BITS:
        raise ValueError(
            f"granularity = {g:.4g} needs a {needed}-bit modulus for T = {horizon}, M = {agents}; the limit is "
            f"{MAX_BITS}: choose a granularity >= {g * 2.0 ** (needed - MAX_BITS):.4g}"
        )
    if bits is None:
        bits = needed
    elif check_int("modulus_bits", bits, low=2, high=MAX_BITS) < needed:
        raise ValueError(
            f"modulus_bits must be an integer in [{needed}, {MAX_BITS}] for these bounds (a sum could overflow "
            f"2^{bits}), got {bits}"
        )
    return bits


def sample_shares(rng: np.random.Generator, share_sigma: float, size: int) -> np.ndarray:
    """``size`` draws of N_Z(0, share_sigma^2) (int64) from a seeded Generator, for the simulator.

    CKS20's Algorithm 3 vectorised: discrete Laplace proposals with scale t = floor(s) + 1 (the
    difference of two geometric variables), accepted with probability
    exp(-(|y| - s^2/t)^2 / (2 s^2)).  The acceptance test is in floating point, which is exact up to
    rounding of the probabilities (a deployed silo uses the exact sampler of
    :mod:`fedbandits.privacy.discrete_gaussian` with secret randomness).  Candidates are drawn in
    blocks and the first ``size`` accepted are kept, so the output is a function of the stream.
    """
    s2 = share_sigma * share_sigma
    t = math.floor(share_sigma) + 1
    p = -math.expm1(-1.0 / t)  # success probability of the geometric variables
    out = np.empty(0, dtype=np.int64)
    while out.size < size:
        block = 2 * (size - out.size) + 8
        y = rng.geometric(p, block) - rng.geometric(p, block)
        accept = rng.random(block) < np.exp(-((np.abs(y) - s2 / t) ** 2) / (2.0 * s2))
        out = np.concatenate([out, y[accept].astype(np.int64)])
    return out[:size]
