"""Tests for fedbandits.privacy.accounting (exact Gaussian accounting and the papers' calibrations)
and fedbandits.privacy.shuffle_amplification (Lemma F.2)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedbandits.privacy import accounting as acc
from fedbandits.privacy import shuffle_amplification as amp
from fedbandits.privacy.tree import max_nodes_per_datum

# ---------------------------------------------------------------------------------------
# Paper formulas, typed independently of the module
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("eps", "delta", "releases"),
    [(1.0, 0.1, 1000), (0.2, 0.1, 400), (5.0, 0.1, 1000), (1e-3, 1e-4, 400), (2.0, 1e-6, 1)],
)
def test_ldp_sigma_paper_matches_theorem_5_1(eps: float, delta: float, releases: int) -> None:
    kappa = 1 + math.log(releases)
    variance = 8 * kappa * (math.log(2 / delta) + eps) / eps**2
    assert acc.ldp_sigma_paper(eps, delta, releases) == pytest.approx(math.sqrt(variance), rel=1e-12)


def test_ldp_sigma_paper_hand_value() -> None:
    # eps = 1, delta = 0.1, K = 1000: kappa = 7.907755, log 20 + 1 = 3.995732, 8 * product = 252.777
    assert acc.ldp_sigma_paper(1.0, 0.1, 1000) == pytest.approx(15.899, abs=1e-3)


@pytest.mark.parametrize(
    ("eps", "delta", "releases", "horizon", "agents"),
    [(1e-3, 1e-4, 400, 10_000, 100), (1e-4, 1e-4, 400, 10_000, 100), (0.5, 1e-6, 1000, 25_000, 1000)],
)
def test_sdp_heuristic_matches_theorem_5_3(eps: float, delta: float, releases: int, horizon: int, agents: int) -> None:
    kappa = 1 + math.log(releases)
    variance = (
        2
        * kappa
        * math.log(1 / delta)
        * math.log(kappa / (delta * horizon))
        * math.log(agents * kappa / delta)
        / (eps**2 * agents)
    )
    got = acc.sdp_amplification_sigma_heuristic(eps, delta, releases, horizon, agents)
    assert got == pytest.approx(math.sqrt(variance), rel=1e-12)


def test_sdp_heuristic_figure_2a_hand_value() -> None:
    # kappa = 6.991465, log(1e4) = 9.210340, log(6.991465) = 1.944690, log(6.991465e6) = 15.760201:
    # sqrt(2 * 6.991465 * 9.210340 * 1.944690 * 15.760201 / (1e-6 * 100)) = 6282.65
    assert acc.sdp_amplification_sigma_heuristic(1e-3, 1e-4, 400, 10_000, 100) == pytest.approx(6282.65, rel=1e-5)


def test_sdp_heuristic_rejects_non_positive_log_factor() -> None:
    # delta * T = 1000 > kappa = 6.99: log(kappa / (delta T)) < 0
    with pytest.raises(ValueError, match=r"log\(kappa/\(delta\*T\)\)"):
        acc.sdp_amplification_sigma_heuristic(1.0, 0.1, 400, 10_000, 100)


# ---------------------------------------------------------------------------------------
# Exact Gaussian privacy profile
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mu", [1e-5, 0.01, 0.3, 1.0, 2.5, 8.0])
@pytest.mark.parametrize("delta", [1e-12, 1e-6, 1e-3, 0.1])
def test_gaussian_epsilon_inverts_gaussian_delta(mu: float, delta: float) -> None:
    eps = acc.gaussian_epsilon(mu, delta)
    if eps == 0.0:
        assert acc.gaussian_delta(mu, 0.0) <= delta
    else:
        got = acc.gaussian_delta(mu, eps)
        assert got <= delta
        assert got == pytest.approx(delta, rel=1e-8)
        assert acc.gaussian_delta(mu, eps * (1 - 1e-6)) > delta  # the smallest such epsilon


def test_gaussian_delta_round_trip_from_epsilon() -> None:
    for mu, eps in [(0.5, 0.3), (1.0, 2.0), (3.0, 10.0), (1e-3, 1e-3)]:
        d = acc.gaussian_delta(mu, eps)
        assert acc.gaussian_epsilon(mu, d) == pytest.approx(eps, rel=1e-7)


def test_gaussian_profile_is_monotone() -> None:
    eps_grid = np.linspace(0.0, 8.0, 60)
    deltas = [acc.gaussian_delta(1.5, float(e)) for e in eps_grid]
    assert all(b < a for a, b in itertools.pairwise(deltas))
    mus = [0.05, 0.2, 1.0, 3.0, 6.0]
    eps_mu = [acc.gaussian_epsilon(mu, 1e-5) for mu in mus]
    assert all(b > a for a, b in itertools.pairwise(eps_mu))
    eps_delta = [acc.gaussian_epsilon(1.0, d) for d in (1e-10, 1e-6, 1e-3, 0.05)]
    assert all(b < a for a, b in itertools.pairwise(eps_delta))


def test_gaussian_epsilon_zero_when_delta_met_at_zero() -> None:
    mu = 0.1
    d0 = acc.gaussian_delta(mu, 0.0)
    assert d0 == pytest.approx(math.erf(mu / (2 * math.sqrt(2))), rel=1e-12)
    assert acc.gaussian_epsilon(mu, d0 * 1.01) == 0.0
    assert acc.gaussian_epsilon(mu, d0 * 0.99) > 0.0


def test_gaussian_epsilon_matches_dp_accounting_closed_form() -> None:
    from dp_accounting import get_epsilon_gaussian

    for sigma, delta in [(0.8, 1e-5), (2.0, 1e-6), (10.0, 1e-3)]:
        assert acc.gaussian_epsilon(1 / sigma, delta) == pytest.approx(get_epsilon_gaussian(sigma, delta), rel=1e-6)


def test_gaussian_delta_extreme_values_against_mpmath() -> None:
    mp = pytest.importorskip("mpmath")

    def ref(mu: float, eps: float) -> float:
        with mp.workdps(400):
            m, e = mp.mpf(mu), mp.mpf(eps)
            return float(mp.ncdf(-e / m + m / 2) - mp.exp(e) * mp.ncdf(-e / m - m / 2))

    cases = [(1e-200, 0.0), (1e-8, 1e-7), (1e-6, 1e-5), (3.2e-6, 1.06e-4), (0.05, 1.0), (3.0, 100.0), (40.0, 500.0)]
    for mu, eps in cases:
        assert acc.gaussian_delta(mu, eps) == pytest.approx(ref(mu, eps), rel=1e-8), (mu, eps)
    assert acc.gaussian_delta(0.1, 10.0) == 0.0  # e^-5000 underflows to 0, not NaN


# ---------------------------------------------------------------------------------------
# Composition: exact vs dp_accounting
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("z", "compositions", "delta"), [(4.0, 20, 1e-5), (1.0, 1, 1e-8), (15.0, 18, 1e-4)])
def test_exact_epsilon_vs_pld_and_rdp(z: float, compositions: int, delta: float) -> None:
    exact = acc.epsilon_spent(z, compositions, delta, method="exact")
    pld = acc.epsilon_spent(z, compositions, delta, method="pld")
    rdp = acc.epsilon_spent(z, compositions, delta, method="rdp")
    assert exact > 0
    assert pld >= exact - 1e-6
    assert pld == pytest.approx(exact, rel=1e-2)
    assert rdp >= exact


def test_exact_epsilon_is_one_gaussian_with_mu_sqrt_c_over_z() -> None:
    assert acc.epsilon_spent(3.0, 18, 1e-5) == acc.gaussian_epsilon(math.sqrt(18) / 3.0, 1e-5)
    # composing more releases costs more
    assert acc.epsilon_spent(3.0, 20, 1e-5) > acc.epsilon_spent(3.0, 18, 1e-5)


@settings(max_examples=15, deadline=None)
@given(
    eps=st.floats(min_value=0.05, max_value=10.0),
    log_delta=st.floats(min_value=math.log(1e-8), max_value=math.log(0.1)),
    compositions=st.integers(min_value=1, max_value=40),
)
def test_tight_noise_multiplier_meets_and_nearly_attains_target(
    eps: float, log_delta: float, compositions: int
) -> None:
    delta = math.exp(log_delta)
    z = acc.tight_noise_multiplier(eps, delta, compositions)
    spent = acc.epsilon_spent(z, compositions, delta)
    assert spent <= eps
    assert spent >= 0.97 * eps  # tight: a smaller multiplier would overspend
    assert acc.epsilon_spent(z * 0.98, compositions, delta) > eps


# ---------------------------------------------------------------------------------------
# The paper's LDP sigma against the exact accountant
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("eps", "delta", "releases"),
    [(1e-3, 1e-4, 400), (1e-4, 1e-4, 400), (0.2, 0.1, 400), (1.0, 0.1, 1000), (5.0, 0.1, 1000), (5.0, 1e-6, 4096)],
)
def test_paper_ldp_sigma_is_private_with_exact_node_count(eps: float, delta: float, releases: int) -> None:
    sigma = acc.ldp_sigma_paper(eps, delta, releases)  # sensitivity 1 per stream: sigma is the multiplier
    compositions = 2 * max_nodes_per_datum(releases)
    assert acc.epsilon_spent(sigma, compositions, delta) <= eps
    # and it is conservative: the tight multiplier is below it
    assert acc.tight_noise_multiplier(eps, delta, compositions) < sigma


# ---------------------------------------------------------------------------------------
# Lemma F.2 (amplification)
# ---------------------------------------------------------------------------------------


def test_lemma_f2_refuses_paper_parameters_at_figure_2a() -> None:
    kappa = 1 + math.log(400)
    eps0 = 1e-3 * math.sqrt(100) / math.sqrt(kappa * math.log(1e4) * math.log(kappa / (1e-4 * 1e4)))
    delta0 = 1e-4 / (100 * kappa)
    delta_mid = 100 * 6400 * delta0
    with pytest.raises(amp.AmplificationError, match=r"eps0 <= \(1/n\) ln\(N / \(16 ln\(2/delta_mid\)\)\) fails"):
        amp.amplification_round(eps0, delta0, delta_mid, 6400, 100, delta_group=delta0)
    # n = T is refused too, even with delta_mid -> 1 (the bound is then 2.2e-4 < eps0 = 8.9e-4)
    with pytest.raises(amp.AmplificationError, match="fails"):
        amp.amplification_round(eps0, delta0, 0.999, 10_000, 100, delta_group=delta0)


def test_lemma_f2_right_hand_side_negative_for_small_delta_mid() -> None:
    with pytest.raises(amp.AmplificationError, match="right-hand side") as info:
        amp.amplification_round(1e-5, 1e-9, 1e-3, 6400, 100, delta_group=1e-9)
    assert isinstance(info.value, ValueError)
    amp.amplification_round(1e-5, 1e-9, 0.004, 1, 100, delta_group=1e-9)  # 16 ln(2/0.004) = 99.4 < 100: admissible


def test_lemma_f2_requires_eps0_below_one() -> None:
    with pytest.raises(amp.AmplificationError, match=r"eps0 in \(0, 1\)"):
        amp.amplification_round(1.0, 1e-9, 0.5, 1, 10**9, delta_group=1e-9)


def test_lemma_f2_round_formula() -> None:
    """The corrected statement: each non-victim silo's TV bound is delta_group + delta0 e^{-n eps0}/2."""
    eps0, delta0, delta_group, delta_mid, n, agents = 1e-3, 1e-10, 3e-9, 0.1, 100, 10**5
    th = (math.exp(eps0) - 1) / (math.exp(eps0) + 1)
    g = math.exp(n * eps0)
    eps_r = math.log(1 + th * (8 * math.sqrt(g * math.log(4 / delta_mid)) / math.sqrt(agents) + 8 * g / agents))
    tv = delta_group + delta0 * math.exp(-n * eps0) / 2
    delta_r = th * delta_mid + agents * (math.exp(eps_r) + 1) * tv
    got = amp.amplification_round(eps0, delta0, delta_mid, n, agents, delta_group=delta_group)
    assert got == pytest.approx((eps_r, delta_r), rel=1e-12)


def test_lemma_f2_with_one_point_is_the_papers_statement() -> None:
    """n = 1: the group is one point, delta_group = delta0, and delta^r is the paper's
    (1 + e^{-eps0}/2) delta0 term exactly."""
    eps0, mu, delta_mid, agents = 0.05, 0.02, 0.5, 10**4
    delta0 = acc.gaussian_delta(mu, eps0)
    eps_r, delta_r = amp.amplification_round(eps0, delta0, delta_mid, 1, agents, delta_group=delta0)
    th = math.tanh(eps0 / 2)
    assert delta_r == pytest.approx(
        th * delta_mid + agents * (math.exp(eps_r) + 1) * (1 + math.exp(-eps0) / 2) * delta0
    )


def test_group_delta_is_far_above_the_papers_delta0() -> None:
    """The flawed step keeps delta0 for a change of all n points; the Gaussian's true delta at
    n eps0 (mu = n mu0) is larger, and so is the corrected delta^r."""
    mu0, n = 1e-4, 6400
    eps0 = 4 * mu0  # a typical admissible choice: eps0 a few mu0
    delta0 = acc.gaussian_delta(mu0, eps0)
    delta_group = acc.gaussian_delta(n * mu0, n * eps0)
    assert delta_group > 1e3 * delta0
    paper = amp.amplification_round(eps0, delta0, 0.5, n, 10**6, delta_group=delta0)
    corrected = amp.amplification_round(eps0, delta0, 0.5, n, 10**6, delta_group=delta_group)
    assert corrected[0] == paper[0] and corrected[1] > 100 * paper[1]


def test_amplification_counts_one_joint_message_per_node() -> None:
    """The optimised parameters compose `nodes` shuffled rounds (one message per node carries both
    streams) and each round's delta0 is that of mu0 = sqrt(2) / z."""
    res = amp.amplification_parameters(2e4, 6400, 10**4, 9, 1e-4)
    assert res.compositions == 9
    assert res.delta0 == pytest.approx(acc.gaussian_delta(math.sqrt(2) / 2e4, res.eps0), rel=1e-12)


def test_amplification_epsilon_decreases_with_the_noise() -> None:
    values = [amp.amplification_epsilon(z, 6400, 10**4, 9, 1e-4) for z in (3e4, 6e4, 1.2e5)]
    assert values[0] > values[1] > values[2] > 0


def test_amplification_refuses_heuristic_sigma_at_figure_2a() -> None:
    # Figure 2a: eps = 1e-3, delta = 1e-4, K = 400, T = 10^4, M = 100 -> sigma_0 = 6282.65
    z = acc.sdp_amplification_sigma_heuristic(1e-3, 1e-4, 400, 10_000, 100)
    with pytest.raises(amp.AmplificationError, match="exceeds delta"):
        amp.amplification_epsilon(z, 6400, 100, 9, 1e-4)


def test_amplification_needs_more_than_eleven_agents() -> None:
    with pytest.raises(amp.AmplificationError, match="16 ln"):
        amp.amplification_epsilon(1e4, 6400, 11, 9, 1e-4)
    with pytest.raises(amp.AmplificationError, match="16 ln"):
        amp.amplification_noise_multiplier(1.0, 1e-4, 6400, 11, 9)


def test_amplification_large_m_finite_and_decreasing_in_agents() -> None:
    values = [amp.amplification_epsilon(2e4, 6400, m, 9, 1e-4) for m in (10**4, 10**6, 10**8)]
    assert all(math.isfinite(v) and v > 0 for v in values)
    assert values[0] > values[1] > values[2]


def test_amplification_parameters_are_consistent_and_admissible() -> None:
    res = amp.amplification_parameters(2e4, 6400, 10**4, 9, 1e-4)
    assert 0 < res.eps0 < 1
    assert res.eps0 <= math.log(10**4 / (16 * math.log(2 / res.delta_mid))) / 6400
    mu0 = math.sqrt(2) / 2e4
    assert res.delta0 == pytest.approx(acc.gaussian_delta(mu0, res.eps0), rel=1e-12)
    delta_group = acc.gaussian_delta(6400 * mu0, 6400 * res.eps0)
    eps_r, delta_r = amp.amplification_round(res.eps0, res.delta0, res.delta_mid, 6400, 10**4, delta_group=delta_group)
    c = 9
    total = math.sqrt(2 * c * math.log(1 / res.delta_prime)) * eps_r + c * eps_r * math.expm1(eps_r)
    assert res.epsilon == pytest.approx(total, rel=1e-12)
    assert c * delta_r + res.delta_prime <= 1e-4 * (1 + 1e-12)


def test_amplification_optimiser_beats_random_search() -> None:
    z, n, agents, c, delta = 2e4, 6400, 10**4, 9, 1e-4
    mu0 = math.sqrt(2) / z  # one joint message of both streams per node
    best = amp.amplification_epsilon(z, n, agents, c, delta)
    rng = np.random.default_rng(7)
    k = 50_000
    u = np.exp(rng.uniform(math.log(math.log(2) * 1.0001), math.log(agents / 16 * 0.9999), k))
    f = np.exp(rng.uniform(math.log(1e-6), math.log(1 - 1e-6), k))
    cap = np.minimum(np.log(agents / (16 * u)) / n, 1 - 1e-12)
    eps0 = cap * np.exp(rng.uniform(math.log(1e-6), 0.0, k))
    delta_mid = 2 * np.exp(-u)
    th = np.tanh(eps0 / 2)
    g = np.exp(n * eps0)
    eps_r = np.log1p(th * (8 * np.sqrt(g * np.log(4 / delta_mid) / agents) + 8 * g / agents))
    delta0 = np.exp(acc._log_gaussian_delta(mu0, eps0))  # vectorised gaussian_delta (tested above)
    delta_group = np.exp(acc._log_gaussian_delta(n * mu0, n * eps0))
    tv = np.maximum(delta0, delta_group + delta0 * np.exp(-n * eps0) / 2)
    delta_r = th * delta_mid + agents * (np.exp(eps_r) + 1) * tv
    ok = c * delta_r + f * delta <= delta
    total = np.sqrt(2 * c * np.log(1 / (f * delta))) * eps_r + c * eps_r * np.expm1(eps_r)
    assert ok.any()
    assert best <= total[ok].min() * (1 + 1e-6)


def test_amplification_noise_multiplier_is_smallest() -> None:
    z = amp.amplification_noise_multiplier(1e-3, 1e-4, 6400, 10**4, 9)
    assert amp.amplification_epsilon(z, 6400, 10**4, 9, 1e-4) <= 1e-3
    try:
        assert amp.amplification_epsilon(z * 0.995, 6400, 10**4, 9, 1e-4) > 1e-3
    except amp.AmplificationError:
        pass
    # at M = 10^4 the lemma is still worse than composing the Gaussians without shuffling
    assert z > acc.tight_noise_multiplier(1e-3, 1e-4, 18)


# ---------------------------------------------------------------------------------------
# Vector-sum protocol (appendix F.2, Theorem 5.5)
# ---------------------------------------------------------------------------------------


def test_vector_sum_parameters_known_answers() -> None:
    # n = 100: g = max(20, 5, 4) = 20; b = ceil(24e4 * 400 * ln(4 * 26 / 1e-5)^2 / 100)
    g, b, p = acc.vector_sum_parameters(1.0, 1e-5, 100, 5)
    assert (g, p) == (20, 0.25)
    assert b == math.ceil(24e4 * 400 * math.log(104 / 1e-5) ** 2 / 100)
    assert b == 250_616_518  # 960000 * ln(1.04e7)^2 = 960000 * 16.1573164^2 = 250616517.2, rounded up
    # d dominates; g rounds up 2 sqrt(n) = 2 sqrt(2) -> 4 ; and sqrt case 2 sqrt(10) = 6.32 -> 7
    assert acc.vector_sum_parameters(0.5, 0.01, 2, 30)[0] == 30
    assert acc.vector_sum_parameters(0.5, 0.01, 2, 1)[0] == 4
    assert acc.vector_sum_parameters(0.5, 0.01, 10, 1)[0] == 7


def test_vector_sum_round_budget_split_and_composition() -> None:
    eps, delta, nodes = 1.0, 0.1, 10
    eps0, delta0 = acc.vector_sum_round_budget(eps, delta, nodes)
    k = 2 * nodes
    assert eps0 == pytest.approx(eps / (2 * math.sqrt(2 * k * math.log(2 / delta))), rel=1e-12)
    assert delta0 == pytest.approx(delta / (2 * k), rel=1e-12)
    # advanced composition (Dwork & Roth Thm 3.20, delta' = delta / 2) meets the budget
    total = math.sqrt(2 * k * math.log(2 / delta)) * eps0 + k * eps0 * math.expm1(eps0)
    assert total <= eps
    assert k * delta0 + delta / 2 == pytest.approx(delta, rel=1e-12)


def test_vector_sum_round_budget_rejects_second_order_violation() -> None:
    with pytest.raises(ValueError, match="advanced composition"):
        acc.vector_sum_round_budget(50.0, 0.1, 9)


# ---------------------------------------------------------------------------------------
# Argument validation
# ---------------------------------------------------------------------------------------

BAD_CALLS = [
    (acc.gaussian_delta, (0.0, 1.0), "mu"),
    (acc.gaussian_delta, (1.0, -0.1), "epsilon"),
    (acc.gaussian_epsilon, (1.0, 0.0), "delta"),
    (acc.gaussian_epsilon, (1.0, 1.0), "delta"),
    (acc.gaussian_epsilon, (float("nan"), 0.1), "mu"),
    (acc.epsilon_spent, (0.0, 5, 1e-5), "noise_multiplier"),
    (acc.epsilon_spent, (1.0, 0, 1e-5), "compositions"),
    (acc.epsilon_spent, (1.0, 2.5, 1e-5), "compositions"),
    (acc.epsilon_spent, (1.0, 5, 1.5), "delta"),
    (acc.epsilon_spent, (1.0, 5, 1e-5, "zcdp"), "method"),
    (acc.tight_noise_multiplier, (0.0, 1e-5, 5), "epsilon"),
    (acc.tight_noise_multiplier, (-1.0, 1e-5, 5), "epsilon"),
    (acc.tight_noise_multiplier, (1.0, 0.0, 5), "delta"),
    (acc.tight_noise_multiplier, (1.0, 1e-5, 0), "compositions"),
    (acc.ldp_sigma_paper, (0.0, 0.1, 10), "epsilon"),
    (acc.ldp_sigma_paper, (1.0, 1.0, 10), "delta"),
    (acc.ldp_sigma_paper, (1.0, 0.1, 0), "releases"),
    (acc.sdp_amplification_sigma_heuristic, (1e-3, 1e-4, 400, 0, 100), "horizon"),
    (acc.sdp_amplification_sigma_heuristic, (1e-3, 1e-4, 400, 100, 0), "agents"),
    (amp.amplification_round, (0.0, 1e-9, 0.5, 1, 100, 1e-9), "eps0"),
    (amp.amplification_round, (0.1, 2.0, 0.5, 1, 100, 1e-9), "delta0"),
    (amp.amplification_round, (0.1, 1e-9, 0.0, 1, 100, 1e-9), "delta_mid"),
    (amp.amplification_round, (0.1, 1e-9, 0.5, 0, 100, 1e-9), "n"),
    (amp.amplification_round, (0.1, 1e-9, 0.5, 1, 10**6, 2.0), "delta_group"),
    (amp.amplification_epsilon, (-1.0, 10, 100, 9, 1e-4), "noise_multiplier"),
    (amp.amplification_epsilon, (1e4, 10, 100, 0, 1e-4), "nodes"),
    (amp.amplification_epsilon, (1e4, 10, 100, 9, 1.0), "delta"),
    (amp.amplification_noise_multiplier, (0.0, 1e-4, 10, 100, 9), "epsilon"),
    (acc.vector_sum_parameters, (16.0, 1e-5, 10, 3), "epsilon0"),
    (acc.vector_sum_parameters, (1.0, 0.5, 10, 3), "delta0"),
    (acc.vector_sum_parameters, (1.0, 1e-5, 0, 3), "n"),
    (acc.vector_sum_parameters, (1.0, 1e-5, 10, 0), "dim"),
    (acc.vector_sum_round_budget, (0.0, 0.1, 9), "epsilon"),
    (acc.vector_sum_round_budget, (1.0, 0.1, 0), "nodes"),
]


@pytest.mark.parametrize(("func", "args", "name"), BAD_CALLS, ids=[f"{f.__name__}-{n}" for f, _, n in BAD_CALLS])
def test_bad_inputs_raise_naming_the_parameter(func, args, name) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=rf"^{name} must"):
        func(*args)


def test_the_shuffled_calibration_feeds_lemma_f2_its_inputs_where_the_lemma_decides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """sdp-amplification at eps = 0.01, delta = 1e-5, M = 10^6 silos, batch B = 25 over T = 100 rounds.
    By hand: K = T / B = 4 releases; a datum sits in floor(log2 4) + 1 = 3 tree nodes; the largest p-sum
    covers 2^(3 - 1) = 4 batches, n = 4 B = 100 points.  There Lemma F.2's multiplier (387.8) is 0.65 of
    plain Gaussian composition's over 2 x 3 releases (597.2), so the lemma decides the noise, and its
    inputs matter: with n halved it would be 269.7, doubled 588.2 (a factor-2 slip in n moves the noise
    by 30% or more), and the multiplier certified for n = 100 points certifies eps = 0.040, not 0.01,
    if the p-sums held 200."""
    from fedbandits.privacy.calibration import PrivacySpec, calibrate

    calls: list[tuple[object, ...]] = []
    real = amp.amplification_noise_multiplier

    def spy(*args: object) -> float:
        calls.append(args)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(amp, "amplification_noise_multiplier", spy)
    spec = PrivacySpec("sdp-amplification", 0.01, 1e-5, calibration="tight")
    cal = calibrate.__wrapped__(spec, agents=10**6, horizon=100, batch=25)  # past the cache: the spy sees it
    assert calls == [(0.01, 1e-5, 100, 10**6, 3)]
    details = cal.details
    assert details["points_per_psum"] == 100 and details["certified_by"] == "amplification (Lemma F.2)"
    z = details["noise_multiplier"]
    assert z == pytest.approx(387.787, rel=1e-4) and details["noise_multiplier_composition"] == pytest.approx(
        597.150, rel=1e-4
    )
    assert cal.sigma_cov == pytest.approx(z * spec.unit_sensitivity().cov, rel=1e-12)
    assert real(0.01, 1e-5, 50, 10**6, 3) == pytest.approx(269.697, rel=1e-4)
    assert real(0.01, 1e-5, 200, 10**6, 3) == pytest.approx(588.163, rel=1e-4)
    assert amp.amplification_epsilon(z, 100, 10**6, 3, 1e-5) <= 0.01
    assert amp.amplification_epsilon(z, 200, 10**6, 3, 1e-5) == pytest.approx(0.0402, rel=1e-2)
