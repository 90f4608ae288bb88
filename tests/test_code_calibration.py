"""calibration = "code": the noise constants of Zhou & Chowdhury's public code (Alphasxd/DPLCB,
Agents.py:190 and :135-136), with the guarantee computed by our accountant, never assumed."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from fedbandits import ConfigError, config_from_dict
from fedbandits.algorithms.feducb import FEDUCB_CALIBRATIONS
from fedbandits.experiments import get_experiment
from fedbandits.privacy import accounting as acc
from fedbandits.privacy.calibration import CALIBRATIONS, PrivacySpec, calibrate
from fedbandits.protocols.vector_sum_tree import calibrate_vector_sum

# Figure 2a: eps = 1e-3, delta = 1e-4, T = 10,000, B = 25 (K = 400 releases, N = 9 nodes), M = 100
EPS, DELTA, HORIZON, BATCH, AGENTS, RELEASES, NODES = 1e-3, 1e-4, 10_000, 25, 100, 400, 9


def _ldp_code(eps: float, delta: float, nodes: int) -> float:
    """Agents.py:190, typed from the code: L * sqrt(N (ln(1/delta) + eps)) / eps with L = 1."""
    return math.sqrt(nodes * (math.log(1 / delta) + eps)) / eps


def _sdp_code(eps: float, delta: float, nodes: int, horizon: int, agents: int) -> float:
    """Agents.py:135-136: sqrt(N ln(1/delta) ln(1 + N/(n delta)) ln(M N/delta)) / (eps sqrt(M)), n = T."""
    inner = nodes * math.log(1 / delta) * math.log(1 + nodes / (horizon * delta)) * math.log(agents * nodes / delta)
    return math.sqrt(inner) / (eps * math.sqrt(agents))


def _gaussian_delta(eps: float, mu: float) -> float:
    """Balle & Wang (2018), Thm 8: the privacy profile of a mu-GDP mechanism, typed independently."""
    return float(stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2))


def test_the_known_values_to_four_digits() -> None:
    ldp, sdp = _ldp_code(EPS, DELTA, NODES), _sdp_code(EPS, DELTA, NODES, HORIZON, AGENTS)
    assert (f"{ldp:.4g}", f"{sdp:.4g}") == ("9105", "5528")
    assert acc.ldp_sigma_code(EPS, DELTA, RELEASES) == pytest.approx(ldp, rel=1e-12)
    assert acc.sdp_amplification_sigma_code(EPS, DELTA, RELEASES, HORIZON, AGENTS) == pytest.approx(sdp, rel=1e-12)
    # ten times both at eps = 1e-4 (helper report: 91,046 and 55,284)
    assert f"{acc.ldp_sigma_code(1e-4, DELTA, RELEASES):.5g}" == "91046"
    assert f"{acc.sdp_amplification_sigma_code(1e-4, DELTA, RELEASES, HORIZON, AGENTS):.5g}" == "55284"


@pytest.mark.parametrize(
    ("eps", "delta", "releases", "nodes", "horizon", "agents"),
    [
        (1.0, 0.1, 1000, 10, 25_000, 10),  # Figure 2c: K = 1000 has 10 nodes
        (0.2, 0.1, 1, 1, 25, 3),  # one release, one node
        (5.0, 1e-3, 1023, 10, 1023, 7),
        (5.0, 1e-3, 1024, 11, 1024, 7),  # a power of two adds a node
    ],
)
def test_the_formulas_count_floor_log2_k_plus_one_nodes(eps, delta, releases, nodes, horizon, agents) -> None:
    assert math.floor(math.log2(releases)) + 1 == nodes
    assert acc.ldp_sigma_code(eps, delta, releases) == pytest.approx(_ldp_code(eps, delta, nodes), rel=1e-12)
    got = acc.sdp_amplification_sigma_code(eps, delta, releases, horizon, agents)
    assert got == pytest.approx(_sdp_code(eps, delta, nodes, horizon, agents), rel=1e-12)


def _replace_mu(sigma_cov: float, sigma_bias: float, feature_bound: float, reward_bound: float, nodes: int) -> float:
    """mu of N p-sums per stream under replace-one adjacency: Delta_cov = sqrt(2) L^2, Delta_bias = 2 L B."""
    cov = math.sqrt(2) * feature_bound**2 / sigma_cov
    bias = 2 * feature_bound * reward_bound / sigma_bias
    return math.sqrt(nodes * (cov**2 + bias**2))


@pytest.mark.parametrize("protocol", ["ldp", "ldp-prefix", "sdp-amplification"])
def test_code_noise_is_scaled_by_the_bounds_and_its_epsilon_is_computed(protocol: str) -> None:
    bound, reward = 2.0, 0.5
    spec = PrivacySpec(protocol, EPS, DELTA, calibration="code", feature_bound=bound, reward_bound=reward)
    cal = calibrate(spec, agents=AGENTS, horizon=HORIZON, batch=BATCH)
    if protocol == "sdp-amplification":
        sigma0 = _sdp_code(EPS, DELTA, NODES, HORIZON, AGENTS)
    else:
        sigma0 = _ldp_code(EPS, DELTA, NODES)
    assert cal.calibration == "code" and cal.nodes == NODES
    assert cal.sigma_cov == pytest.approx(sigma0 * bound**2, rel=1e-12)
    assert cal.sigma_bias == pytest.approx(sigma0 * bound * reward, rel=1e-12)
    assert cal.details["sigma0_code"] == pytest.approx(sigma0, rel=1e-12)
    # the reported epsilon is where the exact privacy profile of the noise actually added meets delta
    mu = _replace_mu(cal.sigma_cov, cal.sigma_bias, bound, reward, NODES)
    assert _gaussian_delta(cal.epsilon_spent, mu) == pytest.approx(DELTA, rel=1e-4)
    assert cal.guarantee == ("formal" if cal.epsilon_spent <= EPS else "no formal guarantee")


def test_the_code_ldp_noise_is_certified_at_figure_2a() -> None:
    cal = calibrate(PrivacySpec("ldp", EPS, DELTA, calibration="code"), agents=AGENTS, horizon=HORIZON, batch=BATCH)
    # mu = sqrt(9 * 6) / 9105.06 = 8.071e-4: delta(1e-3) < 1e-4, so the target holds (spent 6.319e-4)
    mu = math.sqrt(NODES * 6) / _ldp_code(EPS, DELTA, NODES)
    assert _gaussian_delta(EPS, mu) < DELTA
    assert f"{cal.epsilon_spent:.4g}" == "0.0006319"
    assert cal.guarantee == "formal" and "exact Gaussian composition over 9 tree nodes" in cal.guarantee_reason


def test_too_little_noise_is_reported_not_certified() -> None:
    """The code's SDP noise at Figure 2a (5,528 per silo; shuffling credits nothing at M = 100) is
    (1e-3, 1e-4)-DP for no theorem here: mu = sqrt(9 * 6) / 5528.4 = 1.329e-3 and delta(1e-3) > 1e-4."""
    spec = PrivacySpec("sdp-amplification", EPS, DELTA, calibration="code")
    cal = calibrate(spec, agents=AGENTS, horizon=HORIZON, batch=BATCH)
    mu = math.sqrt(NODES * 6) / _sdp_code(EPS, DELTA, NODES, HORIZON, AGENTS)
    assert _gaussian_delta(EPS, mu) > DELTA
    assert f"{cal.epsilon_spent:.3g}" == "0.0014"
    assert cal.epsilon_spent > EPS and cal.guarantee == "no formal guarantee"
    assert "0.0014" in cal.guarantee_reason and "> target 0.001" in cal.guarantee_reason
    # and the code's LDP noise at Figure 2c's eps = 1, delta = 0.1 (K = 1000) spends 1.954 > 1
    ldp = calibrate(PrivacySpec("ldp", 1.0, 0.1, calibration="code"), agents=10, horizon=25_000, batch=25)
    assert f"{ldp.epsilon_spent:.4g}" == "1.954" and ldp.guarantee == "no formal guarantee"
    assert _gaussian_delta(1.0, _replace_mu(ldp.sigma_cov, ldp.sigma_bias, 1.0, 1.0, 10)) > 0.1


NOT_FOR_CODE = (
    "calibration must be one of 'paper', 'tight' for protocol {!r} ('code' applies to protocols 'ldp', "
    "'ldp-prefix', 'sdp-amplification', 'sdp-vector-sum' only), got 'code'"
)


@pytest.mark.parametrize("protocol", ["distributed-dp"])
def test_protocols_without_the_code_constants_refuse_it_in_one_line(protocol: str) -> None:
    with pytest.raises(ValueError) as info:
        PrivacySpec(protocol, 1.0, 0.1, calibration="code")
    assert str(info.value) == NOT_FOR_CODE.format(protocol)
    alg = {"name": "fedlinucb", "batch": 5, "protocol": protocol, "epsilon": 1.0, "delta": 0.1, "calibration": "code"}
    config = {
        "experiment": {"horizon": 100},
        "environment": {"name": "gaussian-sphere", "agents": 4},
        "algorithms": [alg],
    }
    with pytest.raises(ConfigError) as refused:
        config_from_dict(config)
    message = str(refused.value)
    assert message.endswith(NOT_FOR_CODE.format(protocol)) and "\n" not in message


def test_code_is_accepted_by_the_zhou_protocols_and_no_other_algorithm_changes() -> None:
    assert CALIBRATIONS == ("paper", "tight", "code")
    assert FEDUCB_CALIBRATIONS == ("paper", "tight")
    for protocol in ("ldp", "ldp-prefix", "sdp-amplification", "sdp-vector-sum"):
        alg = {"name": "fedlinucb", "protocol": protocol, "epsilon": 1.0, "delta": 1e-4, "calibration": "code"}
        env = {"name": "gaussian-sphere", "agents": 20}
        config = config_from_dict({"experiment": {"horizon": 100}, "environment": env, "algorithms": [alg]})
        assert config.algorithms[0].params.calibration == "code"
    with pytest.raises(ValueError, match=r"mechanism 'factorized' needs .* calibration 'tight'"):
        PrivacySpec("ldp", 1.0, 1e-4, calibration="code", mechanism="factorized")


def test_the_code_cause_is_registered_where_every_panel_can_take_it() -> None:
    with_code = {
        name
        for name in ("zhou-fig2a", "zhou-fig2b", "zhou-fig2c", "zhou-fig3a", "zhou-fig3b", "zhou-fig3c", "zhou-fig3d")
        if "code-calibration" in {c.name for c in get_experiment(name, "tiny").causes}
    }
    # every Zhou & Chowdhury figure, Figure 2b's sdp-vector-sum included
    assert with_code == {
        "zhou-fig2a",
        "zhou-fig2b",
        "zhou-fig2c",
        "zhou-fig3a",
        "zhou-fig3b",
        "zhou-fig3c",
        "zhou-fig3d",
    }


def test_the_vector_sums_code_parameters_typed_from_the_code() -> None:
    # SDPFedLinUCBVecSum.update with scale = 1: G = max(2 sqrt(n), d, 4), b = G^2 ln(d^2/delta)^2 / (eps^2 n);
    # the code encodes range 2L with step L/G, so the grid here is 2 G.  Figure 2b, eps = 1, delta = 0.1,
    # level 0: n = B M = 2500 points, d = 10: G = 100, b = 1e4 * ln(1000)^2 / 2500 = 190.87 -> 190 (truncated)
    assert acc.vector_sum_parameters_code(1.0, 0.1, 2500, 10) == (200, 190, 0.25)
    # d dominates the grid for few points
    g, b, p = acc.vector_sum_parameters_code(0.5, 0.01, 4, 30)
    assert (g, p) == (60, 0.25) and b == math.floor(900 * math.log(900 / 0.01) ** 2 / (0.25 * 4))
    # a real G = 2 sqrt(5000) = 141.42 enters b unrounded (G^2 = 20000), the grid as 2 * 142
    g, b, _ = acc.vector_sum_parameters_code(1.0, 0.1, 5000, 10)
    assert g == 284 and b == math.floor(5000 * 4 * math.log(1000) ** 2 / 5000)
    with pytest.raises(ValueError, match="epsilon"):
        acc.vector_sum_parameters_code(0.0, 0.1, 10, 3)


def test_the_vector_sum_epsilon0_inverts_appendix_f2() -> None:
    # F.2's b for (eps0, delta0) is certified at eps0 by the inverse (b rounds up: a little below eps0)
    for eps0, delta0, n, dim in ((0.05, 1e-3, 2500, 65), (1.0, 1e-5, 100, 5), (14.0, 0.01, 400, 20)):
        g, b, _ = acc.vector_sum_parameters(eps0, delta0, n, dim)
        back = acc.vector_sum_epsilon0(g, b, n, dim, delta0)
        assert back <= eps0 and back == pytest.approx(eps0, rel=1e-6)
        # a quarter of the noise bits: twice the epsilon0 (while inside the lemma's range)
        if 2 * eps0 <= 15:
            assert acc.vector_sum_epsilon0(g, b // 4, n, dim, delta0) == pytest.approx(2 * back, rel=1e-3)
    # a known answer typed from the formula: sqrt(24e4) * 200 * ln(4 * (65^2 + 1) / (0.1/36)) / sqrt(b * 2500)
    b = 10**9
    expected = math.sqrt(24e4) * 200 * math.log(4 * (65**2 + 1) / (0.1 / 36)) / math.sqrt(b * 2500)
    assert acc.vector_sum_epsilon0(200, b, 2500, 65, 0.1 / 36) == pytest.approx(expected, rel=1e-12)
    g, b, _ = acc.vector_sum_parameters(1.0, 1e-3, 2500, 65)
    assert math.isinf(acc.vector_sum_epsilon0(g - 1, b, 2500, 65, 1e-3))  # grid below the lemma's
    assert math.isinf(acc.vector_sum_epsilon0(g, 0, 2500, 65, 1e-3))  # no noise
    assert math.isinf(acc.vector_sum_epsilon0(g, b // 400, 2500, 65, 1e-3))  # eps0 = 20 > 15


def _vector_sum(eps: float, calibration: str) -> dict:
    spec = PrivacySpec("sdp-vector-sum", eps, 0.1, calibration=calibration)
    return calibrate_vector_sum(spec, agents=100, horizon=10_000, batch=25, dim=10).report()


def test_the_vector_sums_code_noise_is_reported_without_a_guarantee() -> None:
    # Figure 2b at eps = 1, delta = 0.1: the code's b = 190 is ~2e-9 of F.2's; the lemma certifies no
    # eps0 <= 15 for it, so the report must not claim the target (a label written in would say formal)
    rp, rc = _vector_sum(1.0, "paper"), _vector_sum(1.0, "code")
    assert rp["calibration"] == "paper" and rp["guarantee"] == "formal" and rp["epsilon_spent"] <= 1.0
    assert rc["calibration"] == "code" and rc["privacy_b_level0"] == 190 and rc["privacy_g_level0"] == 200
    assert math.isinf(rc["epsilon_spent"]) and math.isinf(rc["privacy_epsilon0"])
    assert rc["guarantee"] == "no formal guarantee" and "the lemma does not certify" in rc["guarantee_reason"]
    # (2L/g)^2 n b p (1-p) with L = 1, g = 200, n = 2500, b = 190: std 0.01 * sqrt(2500 * 190 * 3/16) = 2.98
    assert rc["noise_std"] == pytest.approx(0.01 * math.sqrt(2500 * 190 * 3 / 16), rel=0.01)
    assert rp["noise_std"] > 1e4 * rc["noise_std"]


def test_the_vector_sums_code_noise_where_the_lemma_certifies_it() -> None:
    # at eps = 0.005 the code's b is large enough that every run's eps0 is <= 15: the spent epsilon is the
    # advanced composition of the worst run's eps0 over k = 2 * 9 runs at delta0 = 0.1 / 36 (far above 0.005)
    rc = _vector_sum(0.005, "code")
    eps0 = rc["privacy_epsilon0"]
    assert 1.0 < eps0 <= 15.0
    # the worst run is the largest p-sum (level 8): its (g, b) give eps0 by the lemma's inverse
    n = 2**8 * 25 * 100
    g, b, _ = acc.vector_sum_parameters_code(0.005, 0.1, n, 10)
    levels = [
        acc.vector_sum_epsilon0(
            *acc.vector_sum_parameters_code(0.005, 0.1, 2**lv * 2500, 10)[:2], 2**lv * 2500, 65, 0.1 / 36
        )
        for lv in range(9)
    ]
    assert eps0 == pytest.approx(max(levels)) and max(levels) >= acc.vector_sum_epsilon0(g, b, n, 65, 0.1 / 36)
    k = 18
    spent = math.sqrt(2 * k * math.log(2 / 0.1)) * eps0 + k * eps0 * math.expm1(eps0)
    assert rc["epsilon_spent"] == pytest.approx(spent) and rc["guarantee"] == "no formal guarantee"
    # the code's total epsilon need not admit the paper's split: still calibrated, without a guarantee
    assert _vector_sum(20.0, "code")["guarantee"] == "no formal guarantee"
    with pytest.raises(ValueError):
        _vector_sum(20.0, "paper")
