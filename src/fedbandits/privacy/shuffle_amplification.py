"""Amplification by shuffling for the tree protocols of Zhou & Chowdhury (2023): Lemma F.2.

:func:`amplification_round`, :func:`amplification_epsilon`, :func:`amplification_parameters`
and :func:`amplification_noise_multiplier` evaluate Lemma F.2 (amplification by shuffling for
Gaussian silo randomizers, with its group step corrected) plus the advanced composition theorem
numerically, with the free parameters optimised; this *is* a formal guarantee (as far as
Lemma F.2 is).  The Gaussian privacy profile, the exact composition and the papers' closed-form
calibrations it is compared with are in :mod:`fedbandits.privacy.accounting`; as there, every
multiplier is in units of the stream sensitivity.

Figure 2a and Lemma F.2 (computed with this module by ``_figure_2a_report()``)
----------------------------------------------------------------------------
Settings: M = 100 agents, delta = 1e-4, eps in {1e-3, 1e-4}, T = 10^4, B = 25, K = 400
releases, nodes = 9, n = 6400 (= B * 256, the largest p-sum) or T = 10^4.  The shuffled rounds
are the 9 joint (covariance, bias) messages a datum takes part in; the plain composition counts
the 18 Gaussian releases of the two streams.
"z (tight)" below is :func:`~fedbandits.privacy.accounting.tight_noise_multiplier` for the
same release pattern *without* any shuffling (plain Gaussian composition, which already gives
silo-level LDP and hence SDP at the same (eps, delta)); every multiplier is for sensitivity 1
per stream.

* The paper's own per-round choices are refused by the lemma.  Lemma F.2 needs
  ``eps0 <= (1/n) ln(N / (16 ln(2/delta_mid)))``.  For N = M = 100 the right-hand side is <= 0
  unless delta_mid > 2 e^{-6.25} = 0.0039, and even for delta_mid -> 1 it is at most
  ln(100 / (16 ln 2)) / n = 3.44e-4 (n = 6400) or 2.20e-4 (n = 10^4).  The proof of
  Theorem 5.3 takes eps0 = eps sqrt(M) / sqrt(kappa log(1/delta) log(kappa/(delta T))) =
  8.94e-4 for eps = 1e-3 (C_1 = 1), above both bounds; with the lemma's suggested
  delta_mid = N n delta0 and delta0 = delta / (M kappa) (C_2 = 1), delta_mid = 0.0915 and the
  bound is 1.10e-4.  The paper's heuristic sigma_0 (6283 for eps = 1e-3) is likewise not
  admissible: at z = 6283 no choice of the free parameters meets delta = 1e-4.
* With the free parameters optimised (:func:`amplification_noise_multiplier`) the lemma does
  cover Figure 2a's (eps, delta) -- it applies whenever N >= 12 (N > 16 ln 2) -- but only with
  a multiplier far above the no-shuffling tight one, i.e. amplification brings no benefit:

  ======  ======  =============  ==========  =====  =====================
  eps     n       z (Lemma F.2)  z (tight)   ratio  Thm 5.3 heuristic
  ======  ======  =============  ==========  =====  =====================
  1e-3    6400    9.29e4         3978        23.3   6283 (exact eps 4.6e-4)
  1e-3    10^4    1.04e5         3978        26.1   6283
  1e-4    6400    4.80e5         1.171e4     41.0   6.28e4 (exact eps 0)
  1e-4    10^4    5.00e5         1.171e4     42.7   6.28e4
  ======  ======  =============  ==========  =====  =====================

  (Before the two corrections of :func:`amplification_round` and :func:`amplification_epsilon`
  -- the group step's delta and one shuffled message per node instead of two -- the lemma's
  multipliers read 5.74e4 / 6.12e4 / 2.97e5 / 3.00e5: the flawed group step made the lemma
  look 1.6 times better than it is.)

  (The heuristic sigma_0 of Theorem 5.3 does meet Figure 2a's (eps, delta), but through the
  plain Gaussian composition, not through amplification; the tight multiplier is smaller
  still, whereas the paper's LDP sigma_0 for the same budget is 2.35e4 / 2.35e5.)
* Larger federations: eps = 1e-3, delta = 1e-4, n = 6400, nodes = 9 with M = 10^4:
  z = 2.76e4 (ratio 6.93); M = 10^6: z = 1.35e4 (ratio 3.38); M = 10^10: z = 6555 (ratio 1.65);
  M = 10^12: z = 5321 (ratio 1.34): with the corrected group step the lemma never beats the
  no-shuffling multiplier at any federation size we tried (before the correction it did from
  about M = 10^10).  The slack: the lemma's delta^r contains N (e^{eps^r} + 1) times each
  silo's TV bound, which forces the group delta gaussian_delta(n mu0, n eps0) below
  delta / (3 N c), i.e. n eps0 well inside the tail of a Gaussian of parameter n mu0; and the
  advanced composition theorem is loose compared with exact Gaussian composition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedbandits.core.validation import check_float, check_int
from fedbandits.privacy.accounting import (
    _kappa,
    _log_gaussian_delta,
    epsilon_spent,
    gaussian_delta,
    ldp_sigma_paper,
    sdp_amplification_sigma_heuristic,
    tight_noise_multiplier,
)
from fedbandits.privacy.tree import max_nodes_per_datum

__all__ = [
    "AmplificationError",
    "AmplificationResult",
    "amplification_epsilon",
    "amplification_noise_multiplier",
    "amplification_parameters",
    "amplification_round",
]

# ---------------------------------------------------------------------------------------
# Lemma F.2 (amplification by shuffling for Gaussian silo randomizers)
# ---------------------------------------------------------------------------------------


#: mu0 z of one shuffled message: the two streams (covariance, bias) at multiplier z each
JOINT_STREAMS_MU = math.sqrt(2.0)


class AmplificationError(ValueError):
    """A condition of Lemma F.2 (or of its composition) cannot be met; the message says which."""


class _NoiseTooSmallError(AmplificationError):
    """Lemma F.2 applies but the noise multiplier is too small to meet delta (a larger z may work)."""


def _lemma_bound(n: int, agents: int, delta_mid: float) -> float:
    """Right-hand side of Lemma F.2's condition: (1/n) ln(N / (16 ln(2/delta_mid)))."""
    return math.log(agents / (16.0 * math.log(2.0 / delta_mid))) / n


def _round_eps(eps0: np.ndarray, u: np.ndarray, n: int, agents: int) -> np.ndarray:
    """eps^r of Lemma F.2 with u = ln(2/delta_mid) (so ln(4/delta_mid) = u + ln 2)."""
    growth = np.exp(n * eps0)
    amp = 8.0 * np.sqrt(growth * (u + math.log(2.0)) / agents) + 8.0 * growth / agents
    return np.log1p(np.tanh(eps0 / 2.0) * amp)


def _silo_tv(eps0: np.ndarray, delta0: np.ndarray, delta_group: np.ndarray, n: int) -> np.ndarray:
    """The proof's bound on TV(R(X), L(X)) of one silo, with the group step corrected.

    For the victim's randomizer it is delta0; for any other silo it is delta_group + delta0
    e^{-n eps0} / 2, where delta_group is the delta at epsilon n eps0 of the randomizer on two
    datasets differing in all n points (the paper takes delta_group = delta0)."""
    return np.maximum(delta0, delta_group + 0.5 * delta0 * np.exp(-n * eps0))


def _round_delta(
    eps0: np.ndarray,
    delta0: np.ndarray,
    delta_group: np.ndarray,
    delta_mid: np.ndarray,
    eps_r: np.ndarray,
    n: int,
    agents: int,
) -> np.ndarray:
    """delta^r of Lemma F.2 with the corrected group step (see :func:`amplification_round`)."""
    tv = _silo_tv(eps0, delta0, delta_group, n)
    return np.tanh(eps0 / 2.0) * delta_mid + agents * (np.exp(eps_r) + 1.0) * tv


def amplification_round(
    eps0: float, delta0: float, delta_mid: float, n: int, agents: int, delta_group: float
) -> tuple[float, float]:
    """(eps^r, delta^r) of one shuffled round by Lemma F.2 (Zhou & Chowdhury 2023, appendix F.1),
    with its group step corrected.

    N = ``agents`` silos each run a Gaussian mechanism that is (eps0, delta0)-DP on its n
    data points; ``delta_mid`` is the lemma's free delta in [0, 1].  Requires eps0 in (0, 1)
    and ``eps0 <= (1/n) ln(N / (16 ln(2/delta_mid)))``; then

    ``eps^r = ln[1 + (e^eps0 - 1)/(e^eps0 + 1) (8 sqrt(e^{n eps0} ln(4/delta_mid) / N)
    + 8 e^{n eps0} / N)]`` and ``delta^r = (e^eps0 - 1)/(e^eps0 + 1) delta_mid
    + N (e^{eps^r} + 1) max(delta0, delta_group + delta0 e^{-n eps0} / 2)``  (logs natural).

    The correction: the proof (appendix F.1, "we denote tilde eps0 := n eps0 and tilde delta0 :=
    delta0") claims that R(X) and R(X_1^0) are (n eps0, delta0)-indistinguishable for datasets
    differing in all n points -- "scale eps0 by n while keeping the same delta0".  That is false
    for a Gaussian mechanism: with sensitivity n times larger it is (n mu0)-GDP, and at epsilon
    n eps0 its delta is ``delta_group = gaussian_delta(n mu0, n eps0)``, orders of magnitude
    above delta0.  Carrying tilde delta0 = delta_group through the rest of the proof (Lowy &
    Razaviyayn 2021, Lemmas D.11 and D.13) bounds each non-victim silo's TV(R(X), L(X)) by
    delta_group + delta0 e^{-n eps0} / 2 and the victim's by delta0, which gives delta^r above;
    with n = 1, delta_group = delta0 and it is the paper's statement.  (The statement prints
    e^{-eps0} where its proof gives e^{-n eps0}; the proof's value is used.)

    Raises :class:`AmplificationError` naming the failing condition.
    """
    eps0 = check_float("eps0", eps0, low=0.0, low_open=True)
    delta0 = check_float("delta0", delta0, low=0.0, high=1.0)
    delta_mid = check_float("delta_mid", delta_mid, low=0.0, high=1.0, low_open=True)
    n = check_int("n", n, low=1)
    agents = check_int("agents", agents, low=1)
    if eps0 >= 1.0:
        raise AmplificationError(f"Lemma F.2 requires eps0 in (0, 1), got eps0={eps0}")
    bound = _lemma_bound(n, agents, delta_mid)
    if bound <= 0.0:
        raise AmplificationError(
            "Lemma F.2 condition eps0 <= (1/n) ln(N / (16 ln(2/delta_mid))) cannot hold: its right-hand side is "
            f"{bound:.6g} <= 0 (needs N = {agents} > 16 ln(2/delta_mid) = {16 * math.log(2 / delta_mid):.6g})"
        )
    if eps0 > bound:
        raise AmplificationError(
            f"Lemma F.2 condition eps0 <= (1/n) ln(N / (16 ln(2/delta_mid))) fails: eps0={eps0:.6g} > {bound:.6g} "
            f"(n={n}, N={agents}, delta_mid={delta_mid:.6g})"
        )
    delta_group = check_float("delta_group", delta_group, low=0.0, high=1.0)
    e0 = np.asarray(eps0)
    eps_r = _round_eps(e0, np.asarray(math.log(2.0 / delta_mid)), n, agents)
    delta_r = _round_delta(e0, np.asarray(delta0), np.asarray(delta_group), np.asarray(delta_mid), eps_r, n, agents)
    return float(eps_r), float(delta_r)


def _advanced_composition(eps_r: np.ndarray, c: int, delta_prime: np.ndarray) -> np.ndarray:
    """Dwork & Roth (2014), Thm 3.20: sqrt(2 c ln(1/delta')) eps + c eps (e^eps - 1)."""
    return np.sqrt(2.0 * c * np.log(1.0 / delta_prime)) * eps_r + c * eps_r * np.expm1(eps_r)


@dataclass(frozen=True)
class AmplificationResult:
    """The parameters chosen by :func:`amplification_parameters` and the resulting budget."""

    eps0: float
    delta0: float
    delta_mid: float
    delta_prime: float
    eps_round: float
    delta_round: float
    compositions: int
    epsilon: float
    delta: float


_N_U = 32  # grid over u = ln(2/delta_mid)
_N_F = 16  # grid over delta' / delta
_N_E = 100  # grid over eps0
_EPS0_FLOOR = 1e-2  # smallest eps0 on the grid, in units of the per-round mu0
_BISECT_STEPS = 60


def _min_feasible_eps0(
    u: np.ndarray, f: np.ndarray, mu: float, n: int, agents: int, c: int, delta: float
) -> tuple[np.ndarray, np.ndarray]:
    """For each (u, f) pair the smallest admissible eps0 and the resulting total epsilon.

    Admissible: 0 < eps0 <= min(1, Lemma F.2 bound) and c delta^r + delta' <= delta.  The
    total epsilon is increasing in eps0, so the smallest admissible eps0 is optimal for fixed
    (u, f).  Found on a log grid, then refined by bisection between the last inadmissible and
    the first admissible grid point.  Pairs with no admissible eps0 get +inf.
    """
    delta_mid = 2.0 * np.exp(-u)
    delta_prime = f * delta
    budget = delta - delta_prime  # for c * delta^r
    cap = np.minimum(np.log(agents / (16.0 * u)) / n, 1.0 - 1e-12)  # > 0 on the grid

    def excess(e0: np.ndarray) -> np.ndarray:  # e0 has shape (pairs, k)
        uu, dm, bud = u[:, None], delta_mid[:, None], budget[:, None]
        eps_r = _round_eps(e0, uu, n, agents)
        delta0 = np.exp(_log_gaussian_delta(mu, e0))
        delta_group = np.exp(_log_gaussian_delta(n * mu, n * e0))
        return c * _round_delta(e0, delta0, delta_group, dm, eps_r, n, agents) - bud

    # eps0 below ~mu/100 leaves delta0 at ~delta0(0) = erf(mu / (2 sqrt 2)): nothing to gain
    # in delta, so the grid starts there (if that is already admissible the returned epsilon
    # is a valid, slightly conservative value rather than the infimum at eps0 -> 0).
    e_lo = np.minimum(_EPS0_FLOOR * mu, 1e-3 * cap)
    s = np.linspace(0.0, 1.0, _N_E)
    grid = np.exp(np.log(e_lo)[:, None] + np.log(cap / e_lo)[:, None] * s[None, :])
    ok = excess(grid) <= 0.0
    any_ok = ok.any(axis=1)
    first = np.argmax(ok, axis=1)
    rows = np.arange(grid.shape[0])
    hi = grid[rows, first]
    lo = np.where(first > 0, grid[rows, np.maximum(first - 1, 0)], 0.0)
    refine = any_ok & (first > 0)
    if refine.any():
        lo_r, hi_r = lo[refine], hi[refine]
        u_r = u[refine]
        sub_delta_mid = delta_mid[refine]
        sub_budget = budget[refine]

        def excess_r(e0: np.ndarray) -> np.ndarray:
            eps_r = _round_eps(e0, u_r, n, agents)
            delta0 = np.exp(_log_gaussian_delta(mu, e0))
            delta_group = np.exp(_log_gaussian_delta(n * mu, n * e0))
            return c * _round_delta(e0, delta0, delta_group, sub_delta_mid, eps_r, n, agents) - sub_budget

        for _ in range(_BISECT_STEPS):
            mid = np.sqrt(lo_r * hi_r) if np.all(lo_r > 0) else 0.5 * (lo_r + hi_r)
            good = excess_r(mid) <= 0.0
            hi_r = np.where(good, mid, hi_r)
            lo_r = np.where(good, lo_r, mid)
        hi = hi.copy()
        hi[refine] = hi_r
    eps_r = _round_eps(hi, u, n, agents)
    total = _advanced_composition(eps_r, c, delta_prime)
    total = np.where(any_ok, total, np.inf)
    return hi, total


def _check_amplification_args(n: object, agents: object, nodes: object) -> tuple[int, int, int]:
    n_i = check_int("n", n, low=1)
    agents_i = check_int("agents", agents, low=1)
    nodes_i = check_int("nodes", nodes, low=1)
    if agents_i <= 16.0 * math.log(2.0):
        raise AmplificationError(
            f"Lemma F.2 needs N > 16 ln(2/delta_mid) > 16 ln 2 = 11.09 for some delta_mid < 1, got agents={agents_i}"
        )
    return n_i, agents_i, nodes_i


def amplification_parameters(
    noise_multiplier: float, n: int, agents: int, nodes: int, delta: float
) -> AmplificationResult:
    """Optimised free parameters of Lemma F.2 + advanced composition; see :func:`amplification_epsilon`."""
    z = check_float("noise_multiplier", noise_multiplier, low=0.0, low_open=True)
    delta = check_float("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    n, agents, nodes = _check_amplification_args(n, agents, nodes)
    mu = JOINT_STREAMS_MU / z  # one shuffled message carries both streams, each at multiplier z
    c = nodes  # shuffled rounds a datum takes part in
    u_lo = math.log(2.0) * (1.0 + 1e-9)  # delta_mid < 1
    u_hi = min(agents / 16.0, 60.0) * (1.0 - 1e-9)  # lemma bound > 0; delta_mid >= 2 e^-60
    if u_hi <= u_lo:
        raise AmplificationError(f"Lemma F.2 needs N > 16 ln(2/delta_mid) for some delta_mid < 1, got agents={agents}")

    def evaluate(us: np.ndarray, fs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        uu, ff = np.meshgrid(us, fs, indexing="ij")
        uu, ff = uu.ravel(), ff.ravel()
        eps0, total = _min_feasible_eps0(uu, ff, mu, n, agents, c, delta)
        return uu, ff, eps0, total

    us = np.geomspace(u_lo, u_hi, _N_U)
    fs = np.geomspace(1e-6, 1.0 - 1e-6, _N_F)
    uu, ff, eps0, total = evaluate(us, fs)
    best = int(np.argmin(total))
    if not np.isfinite(total[best]):
        raise _NoiseTooSmallError(
            f"no admissible Lemma F.2 parameters: for every eps0 <= min(1, (1/n) ln(N/(16 ln(2/delta_mid)))) the "
            f"composed delta c*delta^r + delta' exceeds delta={delta} (noise_multiplier={z} too small; n={n}, "
            f"N={agents}, compositions={c})"
        )
    # Two rounds of local refinement around the best grid point (log-spaced, deterministic).
    u_step = (math.log(u_hi) - math.log(u_lo)) / (_N_U - 1)
    f_step = (math.log(1.0 - 1e-6) - math.log(1e-6)) / (_N_F - 1)
    for _ in range(2):
        u_c, f_c = math.log(uu[best]), math.log(ff[best])
        us = np.exp(np.linspace(max(u_c - u_step, math.log(u_lo)), min(u_c + u_step, math.log(u_hi)), 11))
        fs = np.exp(np.linspace(f_c - f_step, min(f_c + f_step, math.log(1.0 - 1e-9)), 11))
        uu2, ff2, eps02, total2 = evaluate(us, fs)
        b2 = int(np.argmin(total2))
        if total2[b2] < total[best]:
            uu, ff, eps0, total, best = uu2, ff2, eps02, total2, b2
        u_step /= 5.0
        f_step /= 5.0
    e0 = float(eps0[best])
    delta_mid = float(2.0 * math.exp(-uu[best]))
    delta_prime = float(ff[best] * delta)
    delta0 = gaussian_delta(mu, e0)
    delta_group = gaussian_delta(n * mu, n * e0)
    eps_r, delta_r = amplification_round(e0, delta0, delta_mid, n, agents, delta_group=delta_group)  # re-validates
    eps_total = float(_advanced_composition(np.asarray(eps_r), c, np.asarray(delta_prime)))
    delta_total = c * delta_r + delta_prime
    if delta_total > delta * (1.0 + 1e-12):
        raise RuntimeError(f"internal error: composed delta {delta_total} exceeds {delta}")
    return AmplificationResult(
        eps0=e0,
        delta0=delta0,
        delta_mid=delta_mid,
        delta_prime=delta_prime,
        eps_round=eps_r,
        delta_round=delta_r,
        compositions=c,
        epsilon=eps_total,
        delta=delta_total,
    )


def amplification_epsilon(noise_multiplier: float, n: int, agents: int, nodes: int, delta: float) -> float:
    """Smallest total epsilon at total delta <= ``delta`` certified by Lemma F.2 + advanced composition.

    What is shuffled is one message per silo and release: the covariance and the bias p-sums
    packed together, each with noise of multiplier z (std z times its stream's sensitivity).
    One user moves both streams, so each silo's randomizer for one release is a Gaussian
    mechanism with mu0 = sqrt(1/z^2 + 1/z^2) = sqrt(2)/z and per-round curve (eps0,
    gaussian_delta(mu0, eps0)).  Each of the ``compositions = nodes`` shuffled rounds a datum
    takes part in is amplified by Lemma F.2 -- with the corrected group step of
    :func:`amplification_round`, delta_group = gaussian_delta(n mu0, n eps0) -- with
    N = ``agents`` silos of ``n`` points, and the rounds are
    composed with Dwork & Roth (2014), Thm 3.20:
    ``eps_tot = sqrt(2 c ln(1/delta')) eps^r + c eps^r (e^{eps^r} - 1)``,
    ``delta_tot = c delta^r + delta'``.
    The free eps0 in (0, min(1, bound)), delta_mid in (0, 1) and delta' in (0, delta) are
    chosen to minimise eps_tot (log grid + bisection + local refinement; deterministic).
    Raises :class:`AmplificationError` naming the failing condition if nothing is admissible.
    """
    return amplification_parameters(noise_multiplier, n, agents, nodes, delta).epsilon


def _amp_eps_or_inf(z: float, n: int, agents: int, nodes: int, delta: float) -> float:
    try:
        return amplification_epsilon(z, n, agents, nodes, delta)
    except _NoiseTooSmallError:  # only "z too small" is recoverable by a larger z
        return math.inf


def amplification_noise_multiplier(epsilon: float, delta: float, n: int, agents: int, nodes: int) -> float:
    """Smallest z with ``amplification_epsilon(z, n, agents, nodes, delta) <= epsilon`` (bisection on log z).

    Returns the upper end of the final bracket (relative width 1e-4), so the returned z
    always satisfies the budget.  Raises :class:`AmplificationError` with the failing
    condition when no multiplier works (e.g. agents <= 11).
    """
    epsilon = check_float("epsilon", epsilon, low=0.0, low_open=True)
    delta = check_float("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    n, agents, nodes = _check_amplification_args(n, agents, nodes)
    hi = 1.0
    for _ in range(200):
        if _amp_eps_or_inf(hi, n, agents, nodes, delta) <= epsilon:
            break
        hi *= 4.0
    else:
        raise AmplificationError(
            f"no noise multiplier up to {hi:.3g} meets epsilon={epsilon}, delta={delta} via Lemma F.2 "
            f"(n={n}, agents={agents}, nodes={nodes})"
        )
    lo = hi / 4.0  # known to fail unless hi == 1 (the first try)
    if hi == 1.0:
        lo = 1e-6
        if _amp_eps_or_inf(lo, n, agents, nodes, delta) <= epsilon:
            return lo
    while hi / lo > 1.0 + 1e-4:
        mid = math.sqrt(lo * hi)
        if _amp_eps_or_inf(mid, n, agents, nodes, delta) <= epsilon:
            hi = mid
        else:
            lo = mid
    return hi


def _figure_2a_report() -> str:  # pragma: no cover - documentation helper, slow (~15 s)
    """Recompute the numbers quoted in the module docstring."""

    lines = []
    agents, delta, horizon, releases = 100, 1e-4, 10_000, 400
    nodes = max_nodes_per_datum(releases)
    c = 2 * nodes
    kappa = _kappa(releases)
    eps0_paper = 1e-3 * math.sqrt(agents) / math.sqrt(kappa * math.log(1 / delta) * math.log(kappa / (delta * horizon)))
    delta_mid_paper = agents * 6400 * delta / (agents * kappa)
    lines.append(
        f"paper eps0={eps0_paper:.4g}; bound(delta_mid->1, n=6400)={_lemma_bound(6400, agents, 1.0):.4g}; "
        f"bound(n=1e4)={_lemma_bound(10_000, agents, 1.0):.4g}; "
        f"bound(delta_mid={delta_mid_paper:.4g}, n=6400)={_lemma_bound(6400, agents, delta_mid_paper):.4g}"
    )
    for eps, n in ((1e-3, 6400), (1e-3, 10_000), (1e-4, 6400), (1e-4, 10_000)):
        z_amp = amplification_noise_multiplier(eps, delta, n, agents, nodes)
        z_tight = tight_noise_multiplier(eps, delta, c)
        heur = sdp_amplification_sigma_heuristic(eps, delta, releases, horizon, agents)
        lines.append(
            f"eps={eps:g} n={n}: z_amp={z_amp:.4g} z_tight={z_tight:.4g} ratio={z_amp / z_tight:.3g} "
            f"heuristic={heur:.4g} (exact eps at heuristic: {epsilon_spent(heur, c, delta):.3g})"
        )
    z_tight = tight_noise_multiplier(1e-3, delta, c)
    for m in (10_000, 1_000_000, 10**10, 10**12):
        z_amp = amplification_noise_multiplier(1e-3, delta, 6400, m, nodes)
        lines.append(f"M={m}: z_amp={z_amp:.4g} ratio={z_amp / z_tight:.3g}")
    for eps, dlt, k in (
        (1e-3, 1e-4, 400),
        (1e-4, 1e-4, 400),
        (0.2, 0.1, 400),
        (1.0, 0.1, 400),
        (5.0, 0.1, 400),
        (0.2, 0.1, 1000),
        (1.0, 0.1, 1000),
        (5.0, 0.1, 1000),
    ):
        cc = 2 * max_nodes_per_datum(k)
        paper = ldp_sigma_paper(eps, dlt, k)
        tight = tight_noise_multiplier(eps, dlt, cc)
        lines.append(
            f"LDP eps={eps:g} delta={dlt:g} K={k}: paper={paper:.4g} tight={tight:.4g} ratio={tight / paper:.3f} "
            f"exact eps at paper={epsilon_spent(paper, cc, dlt):.3g}"
        )
    return "\n".join(lines)
