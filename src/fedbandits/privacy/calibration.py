"""Noise calibration of every private protocol, and the privacy it actually spends.

Three modes (``calibration`` in the config):

* ``"paper"`` reproduces each paper's closed form exactly (needed to reproduce its figures);
* ``"code"`` reproduces the noise constants of the paper's public code (``Alphasxd/DPLCB``,
  ``Agents.py:190`` for ``ldp``/``ldp-prefix``, ``:135-136`` for ``sdp-amplification``; see
  :func:`accounting.ldp_sigma_code`), scaled by the per-user bounds as ``"paper"``; only the
  Gaussian tree protocols and ``sdp-vector-sum`` (its (g, b, p):
  :func:`accounting.vector_sum_parameters_code`) have it;
* ``"tight"`` finds the smallest noise meeting (epsilon, delta) for the *exact* release pattern:
  one user lies in ``nodes = floor(log2 K) + 1`` released p-sums of each of the two streams
  (covariance and bias), each a Gaussian mechanism; their composition is exactly a Gaussian
  mechanism (mu-GDP), calibrated with dp-accounting.

Either way the report gives ``epsilon_spent``: the exact epsilon at the target delta of what is
actually released, with the sensitivities derived from the clipping bounds and the adjacency
(:mod:`fedbandits.privacy.sensitivity`).  For the paper's closed forms this can exceed the
target: the papers count kappa = 1 + ln K nodes instead of floor(log2 K) + 1 and use sensitivity
1 for replace-one adjacency; the report shows it rather than hiding it, and ``guarantee`` is
computed from it for every protocol and calibration (:func:`fedbandits.privacy.guarantee.certified`):
"formal" only when the certificate gives ``epsilon_spent <= epsilon``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field

from fedbandits.core.validation import check_choice, check_float, check_int
from fedbandits.privacy import accounting, shuffle_amplification
from fedbandits.privacy.factorization import MECHANISMS, Factorization, factorize
from fedbandits.privacy.guarantee import certified
from fedbandits.privacy.sensitivity import ADJACENCIES, Sensitivity, stream_sensitivity
from fedbandits.privacy.streaming import (
    DEFAULT_BUFFERS,
    MAX_STREAM_BAND,
    STREAMING,
    BandedStream,
    Stream,
    stream_details,
    stream_for,
)
from fedbandits.privacy.tree import max_nodes_per_datum

CALIBRATIONS = ("paper", "tight", "code")
#: the largest epsilon a Gaussian protocol accepts: beyond it a guarantee protects nothing, and the
#: accountant's privacy-loss grid grows with epsilon (1,675,573 asked for 25 GiB)
MAX_EPSILON = 1000.0
GAUSSIAN_PROTOCOLS = ("ldp", "ldp-prefix", "sdp-amplification")
#: the calibrations of every other protocol
OTHER_CALIBRATIONS = ("paper", "tight")
#: the protocols whose releases the encoded mechanisms, user-level privacy and an uneven noise split apply to
ENCODED_PROTOCOLS = ("ldp", "ldp-prefix", "distributed-dp")
#: the protocols whose public-code constants (calibration "code") exist: the Gaussian tree and the vector sum
CODE_PROTOCOLS = (*GAUSSIAN_PROTOCOLS, "sdp-vector-sum")


@dataclass(frozen=True)
class PrivacySpec:
    """What the user asked for; validated here, calibrated by :func:`calibrate`."""

    protocol: str
    epsilon: float
    delta: float
    calibration: str = "tight"
    feature_bound: float = 1.0
    reward_bound: float = 1.0
    adjacency: str = "replace"
    mechanism: str = "tree"
    #: the unit of privacy: 1 = one interaction; m > 1 = one user with up to m contributions (user-level)
    contributions: int = 1
    #: mechanism "blt": the streaming strategy's buffers
    buffers: int = DEFAULT_BUFFERS
    #: mechanism "banded": the streaming strategy's band (0: the planned releases, at most 4096)
    band: int = 0
    #: the bias stream's noise multiplier over the covariance stream's, at the same guarantee (1: even)
    bias_noise_ratio: float = 1.0

    def __post_init__(self) -> None:
        check_int("max_contributions", self.contributions, low=1)
        if self.contributions > 1:
            self._check_user_level()
        check_float("epsilon", self.epsilon, low=0.0, high=MAX_EPSILON, low_open=True)
        check_float("delta", self.delta, low=0.0, high=1.0, low_open=True, high_open=True)
        check_choice("calibration", self.calibration, CALIBRATIONS)
        if self.calibration == "code" and self.protocol not in CODE_PROTOCOLS:
            raise ValueError(
                f"calibration must be one of {', '.join(map(repr, OTHER_CALIBRATIONS))} for protocol "
                f"{self.protocol!r} ({self.calibration!r} applies to protocols "
                f"{', '.join(map(repr, CODE_PROTOCOLS))} only), got {self.calibration!r}"
            )
        check_float("feature_bound", self.feature_bound, low=0.0, low_open=True)
        check_float("reward_bound", self.reward_bound, low=0.0, low_open=True)
        check_choice("adjacency", self.adjacency, ADJACENCIES)
        check_choice("mechanism", self.mechanism, MECHANISMS)
        if self.mechanism == "factorized":
            self._needs_tight("mechanism 'factorized'", ENCODED_PROTOCOLS)
        if self.mechanism == "blt":
            self._needs_tight(
                "mechanism 'blt'",
                ("ldp", "ldp-prefix"),
                " (distributed-dp rounds every message to its grid, which a BLT's unbounded memory cannot pay for: "
                "use 'banded')",
            )
        if self.mechanism == "banded":
            self._needs_tight("mechanism 'banded'", ENCODED_PROTOCOLS)
        check_int("buffers", self.buffers, low=1, high=12)
        check_int("band", self.band, low=0, high=MAX_STREAM_BAND)
        check_float("bias_noise_ratio", self.bias_noise_ratio, low=0.01, high=100.0)
        if self.bias_noise_ratio != 1.0:
            self._needs_tight(
                "bias_noise_ratio", ENCODED_PROTOCOLS, " (the other calibrations fix both streams' noise)"
            )

    def stream(self, releases: int) -> Stream:
        """The streaming strategy of mechanism 'blt' or 'banded' for a run planned for ``releases``."""
        return stream_for(self.mechanism, releases, buffers=self.buffers, band=self.band)

    def _check_user_level(self) -> None:
        """User-level privacy is calibrated for the tree and the factorized release of ``ldp``,
        ``ldp-prefix`` and ``distributed-dp``, by the tight accountant only."""
        self._needs_tight("privacy_unit 'user'", ENCODED_PROTOCOLS)

    def _needs_tight(self, what: str, protocols: tuple[str, ...], why: str = "") -> None:
        """One line refusing ``what`` unless the protocol is one of ``protocols`` with calibration 'tight'."""
        if self.protocol not in protocols or self.calibration != "tight":
            head, last = protocols[:-1], repr(protocols[-1])
            names = f"{', '.join(map(repr, head))} or {last}" if head else last
            raise ValueError(
                f"{what} needs protocol {names} with calibration 'tight'{why}, got protocol {self.protocol!r}, "
                f"calibration {self.calibration!r}"
            )

    def sensitivity(self) -> Sensitivity:
        """One contribution's sensitivities (one interaction)."""
        return stream_sensitivity(self.feature_bound, self.reward_bound, self.adjacency)

    def unit_sensitivity(self) -> Sensitivity:
        """The sensitivities of the whole unit of privacy for a Gaussian release: one user's up to m
        contributions move the released sequence by at most m times one contribution's L2 norm.

        Tree: contribution c lies in ``nodes`` p-sums; a p-sum holding n_k of the user's contributions
        moves by at most n_k Delta, and sum_k n_k^2 <= m sum_k n_k = m^2 nodes, so the sequence moves by
        at most m sqrt(nodes) Delta (all m in one batch attains it).  Factorized: the encoded sequence moves
        by sum_c B e_{j_c} Delta_c, of norm <= m max_j ||B e_j|| Delta (triangle inequality).  Either way the
        Gaussian mechanism's mu is m times the interaction-level one: the noise is calibrated with m Delta."""
        one = self.sensitivity()
        return Sensitivity(cov=self.contributions * one.cov, bias=self.contributions * one.bias)

    def unit(self) -> str:
        """The unit of privacy, as reports state it."""
        if self.contributions == 1:
            return "interaction"
        return f"user, up to {self.contributions} contributions"


@dataclass(frozen=True)
class NoiseCalibration:
    """The calibrated noise of a Gaussian tree protocol and what it guarantees."""

    protocol: str
    calibration: str
    epsilon: float
    delta: float
    releases: int
    nodes: int  # released p-sums one user lies in, per stream
    sigma_cov: float  # noise std per packed covariance entry, per released p-sum, per silo
    sigma_bias: float  # ... per bias entry
    epsilon_spent: float  # the smallest epsilon at delta that a theorem certifies for this noise
    guarantee: str  # "formal" if epsilon_spent <= epsilon, else "no formal guarantee" (at the target)
    guarantee_reason: str  # the certificate and the comparison, in one sentence
    epsilon_silo: float  # each silo's own (silo-level LDP) guarantee, shuffling ignored
    details: dict[str, object] = field(default_factory=dict)
    mechanism: str = "tree"  # how releases carry noise: "tree" p-sums or a "factorized" prefix-sum matrix
    #: the largest prefix noise variance per silo and entry, in units of sigma^2 (tree: at most
    #: ``nodes`` noisy p-sums in a prefix; factorized: max_k ||A[k, :]||^2)
    prefix_factor: float = 0.0

    def report(self) -> dict[str, object]:
        out = asdict(self)
        details = out.pop("details")
        out.update({f"privacy_{k}": v for k, v in details.items()})
        out["noise_std"] = self.sigma_cov
        return out


def split_noise(z: float, sens: Sensitivity, ratio: float) -> tuple[float, float]:
    """(sigma_cov, sigma_bias) for the two streams at the privacy of multiplier ``z`` on both: the bias
    stream's multiplier ``ratio`` times the covariance stream's, z_cov = z sqrt((1 + 1 / ratio^2) / 2), so
    that (Delta_cov / sigma_cov)^2 + (Delta_bias / sigma_bias)^2 = 2 / z^2, the mu of an even split."""
    z_cov = z * math.sqrt((1.0 + 1.0 / ratio**2) / 2.0)
    return z_cov * sens.cov, ratio * z_cov * sens.bias


def gaussian_tree_mu(sigma_cov: float, sigma_bias: float, sens: Sensitivity, nodes: float) -> float:
    """mu of the GDP guarantee of one silo's releases: ``nodes`` p-sums of each stream (for a
    factorized release, ``nodes`` is the encoder's squared column norm)."""
    return math.sqrt(nodes * ((sens.cov / sigma_cov) ** 2 + (sens.bias / sigma_bias) ** 2))


@dataclass(frozen=True)
class _Noise:
    """One branch's result in :func:`calibrate`: the noise per stream and what it certifies."""

    sigma_cov: float
    sigma_bias: float
    epsilon_spent: float
    epsilon_silo: float
    certificate: str


@functools.lru_cache(maxsize=256)
def calibrate(spec: PrivacySpec, *, agents: int, horizon: int, batch: int) -> NoiseCalibration:
    """Calibrate a Gaussian tree protocol (``ldp``, ``ldp-prefix``, ``sdp-amplification``).

    Raises ``ValueError`` (an :class:`shuffle_amplification.AmplificationError` for the shuffle lemma)
    naming the failing condition when the request cannot be met.  Results are cached: the
    numeric searches (about a second for Lemma F.2) run once per process and setting.
    """
    check_choice("protocol", spec.protocol, GAUSSIAN_PROTOCOLS)
    check_int("agents", agents, low=1)
    check_int("horizon", horizon, low=1)
    check_int("batch", batch, low=1, high=horizon)
    releases = horizon // batch
    nodes = max_nodes_per_datum(releases)
    sens = spec.unit_sensitivity()
    details: dict[str, object] = {
        "unit": spec.unit(),
        "adjacency": spec.adjacency,
        "sensitivity_cov": sens.cov,
        "sensitivity_bias": sens.bias,
    }
    prefix_factor = float(nodes)
    if spec.mechanism == "factorized":
        factor = factorize(releases)
        noise = _factorized_noise(spec, sens, factor, releases, details)
        nodes = factor.band  # releases one batch enters
        prefix_factor = float(factor.prefix_variance().max())
    elif spec.mechanism in STREAMING:
        stream = spec.stream(releases)
        noise = _streaming_noise(spec, sens, stream, releases, details)
        # the releases one batch enters: a BLT's every later one (its unbounded column), a band's ``band``
        nodes = stream.band if isinstance(stream, BandedStream) else releases
        prefix_factor = float(stream.prefix_variance(releases).max())
    elif spec.protocol in ("ldp", "ldp-prefix"):
        noise = _ldp_noise(spec, sens, releases, nodes, details)
    else:  # sdp-amplification
        noise = _sdp_amplification_noise(spec, sens, agents, horizon, batch, releases, nodes, details)
    guarantee, guarantee_reason = certified(noise.epsilon_spent, spec.epsilon, spec.delta, noise.certificate)
    return NoiseCalibration(
        protocol=spec.protocol,
        calibration=spec.calibration,
        epsilon=spec.epsilon,
        delta=spec.delta,
        releases=releases,
        nodes=nodes,
        sigma_cov=noise.sigma_cov,
        sigma_bias=noise.sigma_bias,
        epsilon_spent=noise.epsilon_spent,
        guarantee=guarantee,
        guarantee_reason=guarantee_reason,
        epsilon_silo=noise.epsilon_silo,
        details=details,
        mechanism=spec.mechanism,
        prefix_factor=prefix_factor,
    )


def _factorized_noise(
    spec: PrivacySpec, sens: Sensitivity, factor: Factorization, releases: int, details: dict[str, object]
) -> _Noise:
    """The factorized release of ``ldp``/``ldp-prefix`` (tight only), its details added to ``details``."""
    details.update(
        {
            "factorization": "square root of the prefix-sum matrix"
            + ("" if factor.band == releases else f", banded to {factor.band}"),
            "factor_band": factor.band,
            "factor_sensitivity_sq": factor.sensitivity_sq,
        }
    )
    return _encoded_noise(spec, sens, factor.sensitivity_sq, "the factor's column norm", details)


def _encoded_noise(
    spec: PrivacySpec, sens: Sensitivity, sensitivity_sq: float, norm: str, details: dict[str, object]
) -> _Noise:
    """One Gaussian mechanism whose l2 sensitivity is the encoder's column norm per unit:
    sigma = z ||B e_j|| Delta per stream gives mu = sqrt(2) / z, as two compositions at z."""
    z = accounting.tight_noise_multiplier(spec.epsilon, spec.delta, 2)
    scale = math.sqrt(sensitivity_sq)
    sigma_cov, sigma_bias = split_noise(z * scale, sens, spec.bias_noise_ratio)
    details["noise_multiplier"] = z * scale
    mu = gaussian_tree_mu(sigma_cov, sigma_bias, sens, sensitivity_sq)
    epsilon_spent = accounting.gaussian_epsilon(mu, spec.delta)
    certificate = f"Gaussian mechanism with {norm} as sensitivity, adaptive streams (Denisov et al. 2022, Thm 2.1)"
    return _Noise(sigma_cov, sigma_bias, epsilon_spent, epsilon_spent, certificate)


def _streaming_noise(
    spec: PrivacySpec, sens: Sensitivity, stream: Stream, releases: int, details: dict[str, object]
) -> _Noise:
    """The streaming release (BLT or banded) of ``ldp``/``ldp-prefix`` (tight only): one Gaussian mechanism
    whose sensitivity is the strategy's column norm over the unbounded stream, so the same noise covers
    every release ever made (:mod:`fedbandits.privacy.streaming`)."""
    details.update(stream_details(stream, releases))
    return _encoded_noise(
        spec, sens, stream.sensitivity_sq, "the streaming strategy's column norm over the unbounded stream", details
    )


def _ldp_noise(spec: PrivacySpec, sens: Sensitivity, releases: int, nodes: int, details: dict[str, object]) -> _Noise:
    """The tree of ``ldp``/``ldp-prefix``: Theorem 5.1 (paper), the public code's constant, or tight."""
    if spec.calibration in ("paper", "code"):
        # Theorem 5.1 (and the code, Agents.py:190) is stated for sensitivity 1 per stream (L = 1);
        # scale by the paper's per-user norms L^2 and L B so that L = B = 1 gives sigma_0 exactly.
        if spec.calibration == "paper":
            sigma0 = accounting.ldp_sigma_paper(spec.epsilon, spec.delta, releases)
        else:
            sigma0 = accounting.ldp_sigma_code(spec.epsilon, spec.delta, releases)
        sigma_cov = sigma0 * spec.feature_bound**2
        sigma_bias = sigma0 * spec.feature_bound * spec.reward_bound
        details[f"sigma0_{spec.calibration}"] = sigma0
    else:
        z = accounting.tight_noise_multiplier(spec.epsilon, spec.delta, 2 * nodes)
        sigma_cov, sigma_bias = split_noise(z, sens, spec.bias_noise_ratio)
        details["noise_multiplier"] = z
    mu = gaussian_tree_mu(sigma_cov, sigma_bias, sens, nodes)
    epsilon_spent = accounting.gaussian_epsilon(mu, spec.delta)
    certificate = f"exact Gaussian composition over {nodes} tree nodes per stream"
    return _Noise(sigma_cov, sigma_bias, epsilon_spent, epsilon_spent, certificate)


def _sdp_amplification_noise(
    spec: PrivacySpec,
    sens: Sensitivity,
    agents: int,
    horizon: int,
    batch: int,
    releases: int,
    nodes: int,
    details: dict[str, object],
) -> _Noise:
    """The shuffled tree of ``sdp-amplification``: certified by Lemma F.2 or by plain composition."""
    n_points = batch * (1 << (nodes - 1))  # the most data points one p-sum may hold
    details["points_per_psum"] = n_points
    if spec.calibration in ("paper", "code"):
        sigma_cov, sigma_bias, epsilon_amp = _sdp_published_noise(
            spec, sens, agents, horizon, releases, nodes, n_points, details
        )
    else:
        sigma_cov, sigma_bias, epsilon_amp = _sdp_tight_noise(spec, sens, agents, nodes, n_points, details)
    epsilon_silo = accounting.gaussian_epsilon(gaussian_tree_mu(sigma_cov, sigma_bias, sens, nodes), spec.delta)
    # both are theorems about the same release: Lemma F.2 + composition, or plain Gaussian
    # composition (silo-level LDP, which implies SDP); report the better one
    details["epsilon_amplification"] = None if math.isinf(epsilon_amp) else epsilon_amp
    epsilon_spent = min(epsilon_amp, epsilon_silo)
    certificate = (
        "amplification (Lemma F.2) and advanced composition"
        if epsilon_amp < epsilon_silo
        else f"exact Gaussian composition over {nodes} tree nodes per stream (silo-level LDP implies SDP)"
    )
    return _Noise(sigma_cov, sigma_bias, epsilon_spent, epsilon_silo, certificate)


def _sdp_published_noise(
    spec: PrivacySpec,
    sens: Sensitivity,
    agents: int,
    horizon: int,
    releases: int,
    nodes: int,
    n_points: int,
    details: dict[str, object],
) -> tuple[float, float, float]:
    """(sigma_cov, sigma_bias, epsilon by Lemma F.2) of the paper's heuristic or the public code's noise."""
    if spec.calibration == "paper":
        sigma0 = accounting.sdp_amplification_sigma_heuristic(spec.epsilon, spec.delta, releases, horizon, agents)
        details["note"] = "paper heuristic noise (Theorem 5.3's O(.) with constant 1): no formal guarantee"
    else:
        sigma0 = accounting.sdp_amplification_sigma_code(spec.epsilon, spec.delta, releases, horizon, agents)
        details["note"] = "the public code's noise (Alphasxd/DPLCB, Agents.py:135-136): no formal guarantee"
    sigma_cov = sigma0 * spec.feature_bound**2
    sigma_bias = sigma0 * spec.feature_bound * spec.reward_bound
    details[f"sigma0_{spec.calibration}"] = sigma0
    z_equiv = min(sigma_cov / sens.cov, sigma_bias / sens.bias)
    try:
        epsilon_amp = shuffle_amplification.amplification_epsilon(z_equiv, n_points, agents, nodes, spec.delta)
    except shuffle_amplification.AmplificationError as exc:
        epsilon_amp = math.inf
        details["amplification_refused"] = str(exc)
    return sigma_cov, sigma_bias, epsilon_amp


def _sdp_tight_noise(
    spec: PrivacySpec, sens: Sensitivity, agents: int, nodes: int, n_points: int, details: dict[str, object]
) -> tuple[float, float, float]:
    """(sigma_cov, sigma_bias, epsilon by Lemma F.2) of the smaller of the two certified noise multipliers."""
    # the shuffled release is also silo-level LDP (which implies SDP): the smaller of the
    # amplification multiplier and the plain-composition one is certified
    z_ldp = accounting.tight_noise_multiplier(spec.epsilon, spec.delta, 2 * nodes)
    try:
        z_amp = shuffle_amplification.amplification_noise_multiplier(spec.epsilon, spec.delta, n_points, agents, nodes)
    except shuffle_amplification.AmplificationError as exc:
        raise shuffle_amplification.AmplificationError(
            f"{exc}; (silo-level LDP, protocol = 'ldp', meets ({spec.epsilon}, {spec.delta}) with noise "
            f"multiplier {z_ldp:.4g})"
        ) from None
    z = min(z_amp, z_ldp)
    sigma_cov, sigma_bias = z * sens.cov, z * sens.bias
    details["noise_multiplier"] = z
    details["noise_multiplier_amplification"] = z_amp
    details["noise_multiplier_composition"] = z_ldp
    details["certified_by"] = "amplification (Lemma F.2)" if z_amp < z_ldp else "plain composition"
    try:
        epsilon_amp = shuffle_amplification.amplification_epsilon(z, n_points, agents, nodes, spec.delta)
    except shuffle_amplification.AmplificationError:
        epsilon_amp = math.inf  # z = z_ldp is below what the lemma can certify
    return sigma_cov, sigma_bias, epsilon_amp
