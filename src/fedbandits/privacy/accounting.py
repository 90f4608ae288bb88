"""Privacy accounting for the tree-based protocols of Zhou & Chowdhury (2023).

Conventions
-----------
The tree protocols (Algorithm 2) add Gaussian noise to every released p-sum of two streams,
the covariance matrices and the bias vectors.  The noise is described by a *noise
multiplier* ``z``: stream ``s`` gets standard deviation ``sigma_s = z * Delta_s`` with
``Delta_s`` its L2 sensitivity, so both streams are equally private.  Over ``K`` releases
one datum (one user) lies in ``nodes = floor(log2 K) + 1`` released p-sums of each stream
(:func:`fedbandits.privacy.tree.max_nodes_per_datum`), so the whole transcript is the
adaptive composition of ``compositions = 2 * nodes`` Gaussian mechanisms of multiplier
``z``, which is *exactly* one Gaussian mechanism with ``mu = sqrt(compositions) / z``
(mu-GDP, Dong, Roth & Su 2022, Cor. 3.3).  Its privacy profile delta(eps) is known in closed
form (Balle & Wang 2018, Thm 8), so :func:`epsilon_spent` with ``method="exact"`` is tight,
and :func:`tight_noise_multiplier` is the smallest multiplier for that release pattern.

The papers' own calibrations are kept for comparison:

* :func:`ldp_sigma_paper` -- Theorem 5.1 (silo-level LDP), sigma_0 for sensitivity L = 1.
* :func:`sdp_amplification_sigma_heuristic` -- the O(.) formula of Theorem 5.3 with constant
  1; *no formal guarantee*.
* Lemma F.2 (amplification by shuffling for Gaussian silo randomizers) plus the advanced
  composition theorem, with Figure 2a's numbers, is in :mod:`fedbandits.privacy.shuffle_amplification`.
* :func:`vector_sum_parameters`, :func:`vector_sum_round_budget` -- appendix F.2 and the
  proof of Theorem 5.5 (vector-sum protocol of Cheu et al. 2021).

The public code's constants (``Alphasxd/DPLCB``, ``Agents.py``; ``calibration = "code"``) are kept
beside them, to reproduce the figures as that code ran them:

* :func:`ldp_sigma_code` -- ``Agents.py:190``, silo-level LDP;
* :func:`sdp_amplification_sigma_code` -- ``Agents.py:135-136``, the shuffle model;
* :func:`vector_sum_parameters_code` -- ``SDPFedLinUCBVecSum.update``, the vector-sum protocol's
  (g, b, p), and :func:`vector_sum_epsilon0`, what Cheu et al.'s lemma certifies for given ones.

Neither is a certificate: the callers compute what the noise actually spends.

Figures 2b/2c (silo-level LDP, Theorem 5.1, delta = 0.1, sensitivity 1 per stream): the
tight multiplier over the paper's sigma_0 is 0.146 / 0.308 / 0.426 for eps = 0.2 / 1 / 5 at
K = 400 (nodes = 9) and 0.145 / 0.305 / 0.423 at K = 1000 (T = 25000, B = 25, nodes = 10);
e.g. eps = 1, K = 1000: sigma_0 = 15.90, tight z = 4.856.  The paper's sigma_0 is valid in
all these settings (its exact epsilon is 0, 0.03, 1.15 at K = 1000) despite kappa = 1 + ln K
under-counting the nodes.

Sensitivity and adjacency
-------------------------
Every function here works in units of the stream sensitivity (multiplier = std / Delta).  The
paper takes L = 1 per stream; under *replace-one* adjacency with ||x|| <= 1, |y| <= 1 the
bias stream x*y has L2 sensitivity 2 and the covariance stream x x^T has Frobenius
sensitivity sqrt(2), so callers must multiply z by the right Delta_s.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from fedbandits.core.lazy import lazy_module
from fedbandits.core.validation import check_choice, check_float, check_int
from fedbandits.privacy.tree import max_nodes_per_datum

optimize, special = lazy_module("scipy.optimize"), lazy_module("scipy.special")  # used to calibrate

__all__ = [
    "epsilon_spent",
    "gaussian_delta",
    "gaussian_epsilon",
    "ldp_sigma_code",
    "ldp_sigma_paper",
    "sdp_amplification_sigma_code",
    "sdp_amplification_sigma_heuristic",
    "tight_noise_multiplier",
    "vector_sum_parameters",
    "vector_sum_round_budget",
]

Method = Literal["exact", "pld", "rdp"]

# ---------------------------------------------------------------------------------------
# Exact privacy profile of a mu-GDP (Gaussian) mechanism
# ---------------------------------------------------------------------------------------


_GL_RANGE = 0.5
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(12)
_LOG_GL_WEIGHTS = np.log(_GL_WEIGHTS)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _log_gaussian_delta(mu: np.ndarray | float, eps: np.ndarray | float) -> np.ndarray:
    """log delta(eps) of a mu-GDP mechanism, vectorised, stable in both tails.

    delta = Phi(a) - e^eps Phi(b) with a = m + mu/2, b = m - mu/2, m = -eps/mu, computed as
    log Phi(a) + log(1 - exp(eps - L)) with L = log Phi(a) - log Phi(b) >= 0.  L is the
    difference of two ``log_ndtr`` values, which loses accuracy when mu/2 * max(1, |m|) is
    small; there it is recomputed as log1p(D / Phi(b)) with D = Phi(a) - Phi(b) = int_b^a phi
    by 12-point Gauss-Legendre quadrature (accurate to machine precision for such short
    intervals).  Checked against high-precision mpmath (relative error < 1e-9, see the tests).
    """
    mu_a, eps_a = np.broadcast_arrays(np.asarray(mu, dtype=float), np.asarray(eps, dtype=float))
    half = mu_a / 2.0
    m = -eps_a / mu_a
    a = m + half
    b = m - half
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_pa = special.log_ndtr(a)
        log_pb = special.log_ndtr(b)
        gap = np.array(log_pa - log_pb, dtype=float, copy=True)
        # The difference of two log_ndtr values is only accurate to ~1e-16 * |log Phi| in
        # absolute terms, which matters when gap or eps - gap is small: use quadrature there.
        short = half * np.maximum(1.0, np.abs(m)) <= _GL_RANGE
        if np.any(short):
            t = m[short][:, None] + half[short][:, None] * _GL_NODES
            terms = _LOG_GL_WEIGHTS - t * t / 2.0
            top = terms.max(axis=-1)
            log_d = top + np.log(np.exp(terms - top[:, None]).sum(axis=-1)) - _HALF_LOG_2PI + np.log(half[short])
            gap[short] = np.log1p(np.exp(log_d - log_pb[short]))
        ratio = np.minimum(eps_a - gap, 0.0)  # <= 0 mathematically
        out = log_pa + np.log(-np.expm1(ratio))
    return np.where(np.isneginf(log_pa), -np.inf, out)  # Phi(a) underflowed: delta = 0


def gaussian_delta(mu: float, epsilon: float) -> float:
    """Tight delta(epsilon) of a mu-GDP mechanism (analytic Gaussian mechanism).

    Balle & Wang (2018), Theorem 8; Dong, Roth & Su (2022), Cor. 2.13:
    ``delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``.
    A Gaussian mechanism with L2 sensitivity Delta and noise std sigma is mu-GDP with
    mu = Delta / sigma.  Evaluated in log space (``scipy.special.log_ndtr``) so that it is
    accurate for delta down to ~1e-300 and for very small or large mu.
    """
    mu = check_float("mu", mu, low=0.0, low_open=True)
    epsilon = check_float("epsilon", epsilon, low=0.0)
    return float(np.exp(_log_gaussian_delta(mu, epsilon)))


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon >= 0 with ``gaussian_delta(mu, epsilon) <= delta`` (tight).

    Inverts the Balle & Wang (2018) profile by root finding on log delta(eps); returns 0.0 if
    delta(0) = 2 Phi(mu/2) - 1 is already <= delta.  The root is nudged upwards so that the
    returned epsilon always satisfies the delta constraint (never optimistic).
    """
    mu = check_float("mu", mu, low=0.0, low_open=True)
    delta = check_float("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    log_target = math.log(delta)

    def gap(eps: float) -> float:
        return float(_log_gaussian_delta(mu, eps)) - log_target

    if gap(0.0) <= 0.0:
        return 0.0
    # delta(eps) <= Phi(-eps/mu + mu/2) <= delta once eps >= mu (mu/2 - Phi^{-1}(delta)).
    hi = max(mu * (mu / 2.0 - float(special.ndtri(delta))), 1e-300)
    while gap(hi) > 0.0:  # only reachable through rounding
        hi *= 2.0
    root = float(optimize.brentq(gap, 0.0, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500))
    step = max(abs(root), 1e-300) * 1e-15
    while float(np.exp(_log_gaussian_delta(mu, root))) > delta:  # exactly what gaussian_delta returns
        root += step
        step *= 2.0
    return root


# ---------------------------------------------------------------------------------------
# Composition of the tree release: exact and via dp_accounting
# ---------------------------------------------------------------------------------------


def _check_compositions(compositions: object) -> int:
    return check_int("compositions", compositions, low=1)


def _composed_event(noise_multiplier: float, compositions: int) -> Any:
    """dp_accounting event: ``compositions`` adaptive Gaussian mechanisms of this multiplier.

    dp_accounting is imported lazily so that the exact accounting works without it.
    """
    import dp_accounting

    return dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(noise_multiplier), compositions)


def epsilon_spent(
    noise_multiplier: float,
    compositions: int,
    delta: float,
    method: Method = "exact",
) -> float:
    """Epsilon at ``delta`` of ``compositions`` Gaussian mechanisms of multiplier ``noise_multiplier``.

    ``method="exact"``: the composition is exactly mu-GDP with mu = sqrt(compositions) / z
    (Dong, Roth & Su 2022, Cor. 3.3), evaluated with :func:`gaussian_epsilon` (Balle & Wang
    2018, Thm 8).  ``"pld"``: ``dp_accounting.pld.PLDAccountant`` (pessimistic discretisation,
    so >= exact up to ~1e-4).  ``"rdp"``: ``dp_accounting.rdp.RdpAccountant`` (an upper bound,
    looser).  For the tree protocols, ``compositions = 2 * max_nodes_per_datum(K)``.
    """
    z = check_float("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    c = _check_compositions(compositions)
    delta = check_float("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    chosen = check_choice("method", method, ("exact", "pld", "rdp"))
    if chosen == "exact":
        return gaussian_epsilon(math.sqrt(c) / z, delta)
    from dp_accounting import pld, rdp

    accountant = pld.PLDAccountant() if chosen == "pld" else rdp.RdpAccountant()
    accountant.compose(_composed_event(z, c))
    return float(accountant.get_epsilon(delta))


def _exact_noise_multiplier(epsilon: float, delta: float, compositions: int) -> float:
    """Smallest z with exact epsilon <= target, by root finding on the closed form."""
    # Smallest mu with gaussian_epsilon(mu, delta) <= epsilon, i.e. log delta(mu, eps) = log delta.
    log_target = math.log(delta)

    def gap(mu: float) -> float:
        return float(_log_gaussian_delta(mu, epsilon)) - log_target

    lo, hi = 1e-3, 1.0
    for _ in range(2000):  # gap -> -inf as mu -> 0 and -> -log(delta) > 0 as mu -> inf
        if gap(lo) <= 0.0 and gap(hi) > 0.0:
            break
        lo, hi = (lo / 2.0, hi) if gap(lo) > 0.0 else (lo, hi * 2.0)
    else:  # pragma: no cover - only for absurd inputs
        raise ValueError(f"cannot bracket the noise multiplier for epsilon={epsilon}, delta={delta}")
    mu = float(optimize.brentq(gap, lo, hi, rtol=1e-14, xtol=1e-300, maxiter=500))
    return math.sqrt(compositions) / mu


def tight_noise_multiplier(epsilon: float, delta: float, compositions: int) -> float:
    """Smallest multiplier z such that ``compositions`` Gaussian mechanisms meet (epsilon, delta).

    Computed with ``dp_accounting.calibrate_dp_mechanism`` and the PLD accountant (whose
    pessimistic discretisation makes it conservative) and then checked against the exact
    profile: the exact epsilon at the returned z is <= ``epsilon``.  It is therefore the
    smallest multiplier for this release pattern (``compositions = 2 * nodes`` Gaussian
    releases per datum) up to the accountant's discretisation (value interval
    ``min(1e-3, epsilon * 1e-2)``: a relative excess in epsilon of at most ~1e-2, in practice
    < 1e-4) and the root finder's tolerance (1e-6 relative in z).
    """
    epsilon = check_float("epsilon", epsilon, low=0.0, low_open=True)
    delta = check_float("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    c = _check_compositions(compositions)
    import dp_accounting
    from dp_accounting import pld

    z_exact = _exact_noise_multiplier(epsilon, delta, c)
    # The PLD's pessimistic rounding overstates epsilon by at most ~one value interval, so an
    # interval <= epsilon * 1e-2 bounds the relative excess by 1e-2 (in practice < 1e-4, see
    # the tests) while keeping the discretised PLD small enough to calibrate in ~0.1 s.
    interval = min(1e-3, epsilon * 1e-2)

    def calibrate(lo: float, hi: float) -> float:
        return float(
            dp_accounting.calibrate_dp_mechanism(
                lambda: pld.PLDAccountant(value_discretization_interval=interval),
                lambda zz: _composed_event(zz, c),
                epsilon,
                delta,
                bracket_interval=dp_accounting.ExplicitBracketInterval(lo, hi),
                tol=z_exact * 1e-6,
            )
        )

    try:  # PLD epsilon >= exact epsilon, so the root lies just above z_exact
        z = calibrate(z_exact * 0.999, z_exact * 1.25)
    except ValueError:
        z = calibrate(z_exact * 0.5, z_exact * 8.0)
    exact = epsilon_spent(z, c, delta, "exact")
    if exact > epsilon:
        raise RuntimeError(f"calibrated noise multiplier {z} spends exact epsilon {exact} > target {epsilon}")
    return z


# ---------------------------------------------------------------------------------------
# The papers' calibrations
# ---------------------------------------------------------------------------------------


def _kappa(releases: int) -> float:
    """kappa = 1 + log(K) with the natural log, as the paper writes (under-counts the nodes)."""
    return 1.0 + math.log(releases)


def ldp_sigma_paper(epsilon: float, delta: float, releases: int) -> float:
    """Theorem 5.1's sigma_0 (a standard deviation) for silo-level (epsilon, delta)-LDP.

    ``sigma_0^2 = 8 kappa (log(2/delta) + epsilon) / epsilon^2`` with ``kappa = 1 + ln(K)``,
    K = ``releases`` = T / B (Thm 5.1 and its proof, appendix E.1: zCDP of kappa nodes,
    Bun & Steinke's conversion with Steinke's lower bound on f(eps, delta), and an
    (eps/2, delta/2) split between the two streams).  It is for sensitivity L = 1 per
    stream: the noise std of a stream with sensitivity Delta is ``Delta * sigma_0``, i.e.
    sigma_0 *is* the noise multiplier.
    """
    epsilon = check_float("epsilon", epsilon, low=0.0, low_open=True)
    delta = check_float("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    releases = check_int("releases", releases, low=1)
    kappa = _kappa(releases)
    return math.sqrt(8.0 * kappa * (math.log(2.0 / delta) + epsilon) / epsilon**2)


def _check_shuffle_args(
    epsilon: float, delta: float, releases: int, horizon: int, agents: int
) -> tuple[float, float, int, int, int]:
    """The validated (epsilon, delta, releases, horizon, agents) of a shuffle-model noise formula."""
    return (
        check_float("epsilon", epsilon, low=0.0, low_open=True),
        check_float("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True),
        check_int("releases", releases, low=1),
        check_int("horizon", horizon, low=1),
        check_int("agents", agents, low=1),
    )


def sdp_amplification_sigma_heuristic(epsilon: float, delta: float, releases: int, horizon: int, agents: int) -> float:
    """Theorem 5.3's displayed O(.) noise level with constant 1 -- *no formal guarantee*.

    ``sigma_0^2 = 2 kappa log(1/delta) log(kappa/(delta T)) log(M kappa/delta) / (eps^2 M)``,
    ``kappa = 1 + ln(releases)``.  The theorem only asserts this up to unspecified constants
    and for eps <= sqrt(kappa) / (C_1 T sqrt(M)), delta <= kappa / (C_2 T); this function
    makes no attempt to check that and the value is not backed by a proof (compare with
    :func:`~fedbandits.privacy.shuffle_amplification.amplification_noise_multiplier`).  Raises
    ``ValueError`` if a log factor is <= 0.
    """
    epsilon, delta, releases, horizon, agents = _check_shuffle_args(epsilon, delta, releases, horizon, agents)
    kappa = _kappa(releases)
    factors = {
        "log(1/delta)": math.log(1.0 / delta),
        "log(kappa/(delta*T))": math.log(kappa / (delta * horizon)),
        "log(M*kappa/delta)": math.log(agents * kappa / delta),
    }
    for name, value in factors.items():
        if value <= 0.0:
            raise ValueError(
                f"Theorem 5.3 heuristic needs {name} > 0, got {value:.6g} "
                f"(epsilon={epsilon}, delta={delta}, releases={releases}, horizon={horizon}, agents={agents})"
            )
    product = math.prod(factors.values())
    return math.sqrt(2.0 * kappa * product / (epsilon**2 * agents))


def ldp_sigma_code(epsilon: float, delta: float, releases: int) -> float:
    """The public code's silo-level LDP noise (a standard deviation for sensitivity L = 1).

    ``sigma_0 = sqrt(N (ln(1/delta) + epsilon)) / epsilon`` with ``N = floor(log2 K) + 1`` tree
    nodes, K = ``releases`` = T // B: ``Agents.py:190`` of ``Alphasxd/DPLCB`` (``self.noise``, with
    ``np.max(self.L) = 1`` from ``:87`` and ``self.N`` from ``:89``).  Against Theorem 5.1
    (:func:`ldp_sigma_paper`) it drops the factor 8, writes ln(1/delta) for ln(2/delta) and counts
    the exact N nodes for kappa = 1 + ln K; e.g. 9,105 against 23,537 at epsilon = 1e-3,
    delta = 1e-4, K = 400.  No theorem is attached: the caller accounts for it.
    """
    epsilon = check_float("epsilon", epsilon, low=0.0, low_open=True)
    delta = check_float("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    releases = check_int("releases", releases, low=1)
    nodes = max_nodes_per_datum(releases)
    return math.sqrt(nodes * (math.log(1.0 / delta) + epsilon)) / epsilon


def sdp_amplification_sigma_code(epsilon: float, delta: float, releases: int, horizon: int, agents: int) -> float:
    """The public code's shuffle-model (amplification) noise, a standard deviation for L = 1.

    ``sigma_0 = sqrt(N ln(1/delta) ln(1 + N/(T delta)) ln(M N/delta)) / (epsilon sqrt(M))`` with
    ``N = floor(log2 K) + 1``, K = ``releases``, T = ``horizon``, M = ``agents``:
    ``Agents.py:135-136`` of ``Alphasxd/DPLCB`` (``self.n`` is T, ``Fed_Lin_Bandit.py:54``).
    Against Theorem 5.3's O(.) with constant 1 (:func:`sdp_amplification_sigma_heuristic`) it has
    no factor 2, N for kappa, and ln(1 + N/(T delta)) for ln(kappa/(delta T)); e.g. 5,528 against
    6,283 at epsilon = 1e-3, delta = 1e-4, T = 10,000, B = 25, M = 100.  No theorem is attached:
    the caller accounts for it.  Every log factor is positive (M N >= 1 > delta), unlike the paper's.
    """
    epsilon, delta, releases, horizon, agents = _check_shuffle_args(epsilon, delta, releases, horizon, agents)
    nodes = max_nodes_per_datum(releases)
    product = math.log(1.0 / delta) * math.log1p(nodes / (horizon * delta)) * math.log(agents * nodes / delta)
    return math.sqrt(nodes * product) / (epsilon * math.sqrt(agents))


# ---------------------------------------------------------------------------------------
# Vector-sum protocol (appendix F.2, Theorem 5.5)
# ---------------------------------------------------------------------------------------


def vector_sum_parameters(epsilon0: float, delta0: float, n: int, dim: int) -> tuple[int, int, float]:
    """(g, b, p) of the vector-sum protocol P_Vec for one (epsilon0, delta0)-SDP sum of n vectors.

    Appendix F.2 (from Chowdhury & Zhou 2022b, proof of Thm C.1; Cheu et al. 2021):
    ``g = max(2 sqrt(n), d, 4)`` rounded up to an integer,
    ``b = ceil(24e4 g^2 (log(4 (d^2 + 1) / delta0))^2 / (epsilon0^2 n))``, ``p = 1/4``
    (natural log).  Valid for epsilon0 in (0, 15] and delta0 in (0, 1/2).  ``n`` is the number
    of vectors summed (e.g. 2 B M for release k = 6), ``dim`` = d their dimension (for the
    covariance stream, the number of matrix entries encoded).
    """
    epsilon0 = check_float("epsilon0", epsilon0, low=0.0, high=15.0, low_open=True)
    delta0 = check_float("delta0", delta0, low=0.0, high=0.5, low_open=True, high_open=True)
    n = check_int("n", n, low=1)
    dim = check_int("dim", dim, low=1)
    g = max(math.ceil(2.0 * math.sqrt(n)), dim, 4)
    b = math.ceil(24e4 * g**2 * math.log(4.0 * (dim**2 + 1) / delta0) ** 2 / (epsilon0**2 * n))
    return g, b, 0.25


def vector_sum_parameters_code(epsilon: float, delta: float, n: int, dim: int) -> tuple[int, int, float]:
    """(g, b, p) of the vector-sum protocol that reproduce the paper's public code (Alphasxd/DPLCB,
    Agents.py, ``SDPFedLinUCBVecSum.update``), in this module's convention (range 2L, step 2L/g).

    The code sets ``G = max(2 sqrt(n), d, 4)`` and ``b = scale G^2 (ln(d^2 / delta))^2 / (epsilon^2 n)``
    with ``scale = 1`` where appendix F.2 has 24e4, the *total* (epsilon, delta) where F.2 has the
    per-run (epsilon0, delta0), and ``d^2`` where F.2 has ``4 (d^2 + 1)``; ``p = 1/4``.  ``dim`` is the
    code's d, the feature dimension.  Its randomizer encodes the shifted value in [0, 2L] with step
    L/G and its analyzer decodes with L/G: a grid of ``g = 2 ceil(G)`` here (step 2L/g = L/G; G is
    rounded up where it is not an integer, because the protocol needs one), so that the encoding,
    the decoding and the noise are the code's.  ``b`` is rounded down, as
    numpy's binomial truncates the code's real b (its analyzer then subtracts p b n with the real b,
    a bias of -p frac(b) n L/G per entry that is not reproduced: the analyzer here is unbiased).
    """
    epsilon = check_float("epsilon", epsilon, low=0.0, low_open=True)
    delta = check_float("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    n = check_int("n", n, low=1)
    dim = check_int("dim", dim, low=1)
    code_grid = max(2.0 * math.sqrt(n), dim, 4)  # real, as in the code
    b = math.floor(code_grid**2 * math.log(dim**2 / delta) ** 2 / (epsilon**2 * n))
    return 2 * math.ceil(code_grid), b, 0.25


def vector_sum_epsilon0(g: int, b: int, n: int, dim: int, delta0: float) -> float:
    """The smallest epsilon0 at which appendix F.2's form of Cheu et al.'s lemma certifies one run of
    P_Vec with grid ``g``, ``b`` noise bits and p = 1/4 on ``n`` points of dimension ``dim`` at ``delta0``:
    the inverse of :func:`vector_sum_parameters`' ``b``,
    ``epsilon0 = sqrt(24e4) g ln(4 (dim^2 + 1) / delta0) / sqrt(b n)``.

    ``inf`` when no such theorem applies: ``g`` below ``max(2 sqrt(n), dim, 4)`` (the lemma's grid),
    ``b = 0``, or an epsilon0 above 15 (outside the lemma's range).
    """
    g = check_int("g", g, low=1)
    b = check_int("b", b, low=0)
    n = check_int("n", n, low=1)
    dim = check_int("dim", dim, low=1)
    delta0 = check_float("delta0", delta0, low=0.0, high=0.5, low_open=True, high_open=True)
    if b == 0 or g < max(math.ceil(2.0 * math.sqrt(n)), dim, 4):
        return math.inf
    eps0 = math.sqrt(24e4) * g * math.log(4.0 * (dim**2 + 1) / delta0) / math.sqrt(b * n)
    return eps0 if eps0 <= 15.0 else math.inf


def vector_sum_round_budget(epsilon: float, delta: float, nodes: int) -> tuple[float, float]:
    """Per-run budget (eps0, delta0) of P_Vec so that the whole transcript is (epsilon, delta)-SDP.

    Split used: one datum (one user) lies in ``nodes`` runs of P_Vec per stream and there are
    two streams (bias, covariance), so the transcript composes ``k = 2 * nodes`` runs.  By the
    advanced composition theorem (Dwork & Roth 2014, Thm 3.20) with delta' = delta / 2:
    ``eps0 = epsilon / (2 sqrt(2 k ln(2/delta)))``, ``delta0 = delta / (2 k)``.
    This is the proof of Theorem 5.5 with kappa replaced by the exact count k of runs over
    *both* streams.  The paper instead splits (eps/2, delta/2) per stream with kappa =
    1 + ln K per stream; composing all 2 * nodes runs at once is both consistent (one
    accounting over everything a user influences) and conservative (exact node count,
    not 1 + ln K; the delta of both streams is counted, whereas the paper's final statement
    doubles epsilon but not delta).

    Unlike the paper (which ignores it), the second-order term of Thm 3.20 is checked:
    ``k eps0 (e^eps0 - 1) <= epsilon / 2``, i.e. ``e^eps0 - 1 <= sqrt(2 ln(2/delta) / k)``;
    otherwise ``ValueError``.  Also eps0 must lie in P_Vec's validity range (0, 15] and delta0 in
    (0, 1/2) (Cheu et al. 2021, Lemma 3.1; automatically true for delta0 here).
    """
    epsilon = check_float("epsilon", epsilon, low=0.0, low_open=True)
    delta = check_float("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    nodes = check_int("nodes", nodes, low=1)
    k = 2 * nodes
    log_term = math.log(2.0 / delta)
    eps0 = epsilon / (2.0 * math.sqrt(2.0 * k * log_term))
    delta0 = delta / (2.0 * k)
    if eps0 > 15.0:
        raise ValueError(f"per-run eps0={eps0:.6g} outside P_Vec's validity range (0, 15]; epsilon={epsilon} too large")
    if k * eps0 * math.expm1(eps0) > epsilon / 2.0:
        raise ValueError(
            f"advanced composition needs k*eps0*(e^eps0 - 1) <= epsilon/2 (e^eps0 - 1 <= sqrt(2 ln(2/delta)/k) = "
            f"{math.sqrt(2 * log_term / k):.6g}); got eps0={eps0:.6g}, k={k}: epsilon={epsilon} too large"
        )
    return eps0, delta0
