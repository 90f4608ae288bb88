"""The factorized continual release (mechanism = "factorized"): factors, noise, calibration, audit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedbandits.audit import releases
from fedbandits.audit.releases import AuditCase, run_case
from fedbandits.config import ConfigError, config_from_dict
from fedbandits.privacy.calibration import PrivacySpec, calibrate
from fedbandits.privacy.factorization import (
    FactorizedAnalyzer,
    FactorizedRandomizer,
    factorize,
    honaker_node_variance,
    honaker_prefix_variance,
    sqrt_coefficients,
    tree_prefix_variance,
)
from fedbandits.privacy.mechanisms import TreeAnalyzer, TreeRandomizer
from fedbandits.privacy.tree import max_nodes_per_datum
from fedbandits.sim.runner import run_experiment

FORMAL = "formal"


def _toeplitz(coefficients: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros((size, size))
    for m, c in enumerate(coefficients[:size]):
        out += np.diag(np.full(size - m, c), -m)
    return out


# -- the factors ------------------------------------------------------------------------------
def test_square_root_coefficients_have_the_closed_form() -> None:
    """c_m = binom(2m, m) / 4^m, the coefficients of (1 - x)^(-1/2)."""
    expected = [math.comb(2 * m, m) / 4**m for m in range(30)]
    np.testing.assert_allclose(sqrt_coefficients(30), expected, rtol=1e-14)
    # and the square-root matrix squared is the all-ones lower triangle
    root = _toeplitz(sqrt_coefficients(12), 12)
    np.testing.assert_allclose(root @ root, np.tril(np.ones((12, 12))), atol=1e-13)


@pytest.mark.parametrize(("releases", "band"), [(1, None), (7, None), (64, None), (64, 8), (50, 1), (33, 32)])
def test_factors_multiply_to_the_prefix_sum_matrix(releases: int, band: int | None) -> None:
    f = factorize(releases, band)
    a = _toeplitz(f.decoder, releases)
    b = _toeplitz(np.concatenate([f.encoder, np.zeros(releases - f.band)]), releases)
    np.testing.assert_allclose(a @ b, np.tril(np.ones((releases, releases))), atol=1e-12)
    assert f.sensitivity_sq == pytest.approx(float(np.max(np.sum(b**2, axis=0))), rel=1e-12)
    np.testing.assert_allclose(f.prefix_variance(), np.sum(a**2, axis=1), rtol=1e-12)


def test_the_tree_variance_is_popcount_and_the_factorization_is_lower_at_the_same_guarantee() -> None:
    """At K = 400 (B = 25, T = 10,000) the calibrated factorized release has a smaller largest prefix
    variance than the calibrated tree: sigma^2 * max_k ||A_k||^2 against sigma^2 * max popcount."""
    assert tree_prefix_variance(400).max() == 8 and tree_prefix_variance(7).tolist() == [1, 1, 2, 1, 2, 2, 3]
    tree = calibrate(PrivacySpec("ldp", 1.0, 1e-5), agents=20, horizon=10_000, batch=25)
    fact = calibrate(PrivacySpec("ldp", 1.0, 1e-5, mechanism="factorized"), agents=20, horizon=10_000, batch=25)
    assert tree.prefix_factor == max_nodes_per_datum(400) >= tree_prefix_variance(400).max()
    tree_var = tree.sigma_cov**2 * tree_prefix_variance(400).max()
    fact_var = fact.sigma_cov**2 * fact.prefix_factor
    assert fact_var < tree_var / 4  # measured 8.0x lower: (9 x 8) / (3.09 x 2.86) ~ 72 / 8.84
    for cal in (tree, fact):
        assert cal.guarantee == FORMAL and 0.99 < cal.epsilon_spent <= 1.0
    assert fact.mechanism == "factorized" and fact.report()["privacy_factor_band"] == 400


def _full_tree_blue_variance(k: int) -> float:
    """Brute force: every complete dyadic block ending at or before k observed with unit noise;
    the variance of the best linear unbiased estimate of the prefix sum, 1^T (H^T H)^{-1} 1."""
    rows = []
    size = 1
    while size <= k:
        for end in range(size, k + 1, size):
            row = np.zeros(k)
            row[end - size : end] = 1.0
            rows.append(row)
        size *= 2
    h = np.array(rows)
    ones = np.ones(k)
    return float(ones @ np.linalg.solve(h.T @ h, ones))


def test_honaker_estimate_is_the_best_linear_unbiased_prefix_of_the_full_tree() -> None:
    """The closed form v_h = 2^h / (2^(h+1) - 1), summed over the one bits of k, equals the GLS
    variance of the prefix from every released node, computed by brute force."""
    np.testing.assert_allclose(honaker_node_variance(4), [1.0, 2 / 3, 4 / 7, 8 / 15], rtol=1e-14)
    brute = [_full_tree_blue_variance(k) for k in range(1, 40)]
    np.testing.assert_allclose(honaker_prefix_variance(39), brute, rtol=1e-10)


@pytest.mark.parametrize("releases", [3, 100, 400, 1000, 4000])
def test_factorized_beats_honaker_which_beats_the_tree(releases: int) -> None:
    """Same count of released nodes per datum, so the same node noise: per unit of it, the largest
    prefix variance of the factorized release < Honaker's full tree < the papers' tree (K >= 3).
    Measured at K = 400: 8.84 < 43.2 < 72."""
    nodes = max_nodes_per_datum(releases)
    tree = nodes * tree_prefix_variance(releases).max()
    honaker = nodes * honaker_prefix_variance(releases).max()
    f = factorize(releases)
    fact = f.sensitivity_sq * f.prefix_variance().max()
    assert fact < honaker < tree
    assert tree / honaker < 2.0  # Honaker gains less than 2x: v_h >= 1/2


# -- the randomizer and the analyzer --------------------------------------------------------------
@pytest.mark.parametrize("band", [None, 5])
def test_without_noise_the_decoded_prefix_is_the_exact_running_sum(band: int | None) -> None:
    rng = np.random.default_rng(3)
    runs, silos, width, releases_ = 2, 3, 4, 23
    f = factorize(releases_, band)
    rngs = [np.random.default_rng(i).spawn(silos) for i in range(runs)]
    randomizer = FactorizedRandomizer(runs, silos, np.zeros(width), rngs, f, keep_prefix=True)
    analyzer = FactorizedAnalyzer((runs, width), f)
    total = np.zeros((runs, silos, width))
    for _ in range(releases_):
        gamma = rng.normal(size=(runs, silos, width))
        total += gamma
        prefix = analyzer.release(randomizer.release(gamma))
        np.testing.assert_allclose(prefix, total.sum(axis=1), atol=1e-10)
        np.testing.assert_allclose(randomizer.prefix(), total, atol=1e-10)
    with pytest.raises(ValueError, match="planned for 23 releases"):
        randomizer.release(gamma)


def test_one_batch_moves_the_releases_by_its_encoder_column() -> None:
    """Changing batch j moves the message sequence by B[:, j] times the change: the sensitivity the
    calibration uses is the largest column norm, reached at j = 1."""
    f = factorize(16)
    rngs = [np.random.default_rng(0).spawn(1)]

    def messages(change_at: int) -> np.ndarray:
        r = FactorizedRandomizer(1, 1, np.zeros(1), rngs, f)
        return np.array([r.release(np.full((1, 1, 1), 1.0 if k == change_at else 0.0))[0, 0, 0] for k in range(16)])

    norms = [np.linalg.norm(messages(j)) for j in range(16)]
    assert norms[0] == pytest.approx(math.sqrt(f.sensitivity_sq), rel=1e-12)
    assert all(n <= norms[0] + 1e-12 for n in norms)


def test_prefix_noise_has_the_covariance_of_the_decoder() -> None:
    """With no data, the prefixes are A z: their covariance over releases is sigma^2 A A^T.  N = 8,000
    runs of K = 6 releases, sigma = 1; each sample covariance entry has std at most
    sqrt((S_ii S_jj + S_ij^2) / N) <= sqrt(2 max_i S_ii^2 / N) (max S_ii = ||A_6||^2 = 2.02 so <= 0.032);
    a 5-std band (0.16) around every one of the 21 entries fails by chance with probability < 1.2e-5.
    The tree's prefixes (independent p-sums) put 0 where A A^T has 0.5 or more, far outside it."""
    runs, releases_ = 8_000, 6
    f = factorize(releases_)
    rngs = [np.random.default_rng([7, r]).spawn(1) for r in range(runs)]
    randomizer = FactorizedRandomizer(runs, 1, np.ones(1), rngs, f)
    analyzer = FactorizedAnalyzer((runs, 1), f)
    prefixes = np.stack([analyzer.release(randomizer.release(np.zeros((runs, 1, 1))))[:, 0] for _ in range(6)], 1)
    empirical = np.cov(prefixes, rowvar=False)
    a = _toeplitz(f.decoder, releases_)
    expected = a @ a.T
    bound = 5 * math.sqrt(2 * np.diag(expected).max() ** 2 / runs)
    assert np.abs(empirical - expected).max() < bound
    # the tree at the same sigma: prefix 2 = node of release 2 alone, independent of prefix 1
    tree = TreeRandomizer(runs, 1, np.ones(1), [np.random.default_rng([8, r]) for r in range(runs)], releases_)
    tree_analyzer = TreeAnalyzer(runs, 1, releases_)
    tree_prefixes = np.stack([tree_analyzer.release(tree.release(np.zeros((runs, 1, 1))))[:, 0] for _ in range(6)], 1)
    tree_cov = np.cov(tree_prefixes, rowvar=False)
    assert abs(tree_cov[0, 1]) < bound < expected[0, 1]
    # and the tree's prefix variance is popcount(k) sigma^2 (max 2 here; the same band holds)
    np.testing.assert_allclose(np.diag(tree_cov), tree_prefix_variance(releases_), atol=bound)


# -- runs, audit, bad input ---------------------------------------------------------------------
def _config(**alg: object):  # type: ignore[no-untyped-def]
    return config_from_dict(
        {
            "experiment": {"seed": 5, "runs": 2, "horizon": 300},
            "environment": {"name": "gaussian-sphere", "agents": 4, "arms": 10, "dim": 4},
            "algorithms": [{"name": "fedlinucb", "label": "f", "batch": 10, "protocol": "ldp", "delta": 1e-5, **alg}],
        }
    )


@pytest.mark.parametrize("protocol", ["ldp", "ldp-prefix"])
def test_a_factorized_run_is_reproducible_and_reports_its_mechanism(protocol: str) -> None:
    config = _config(protocol=protocol, mechanism="factorized")
    a, b = (run_experiment(config, workers=w, record_transcript=True).algorithms["f"] for w in (1, 2))
    np.testing.assert_array_equal(a.final_regret, b.final_regret)
    assert a.report["mechanism"] == "factorized" and a.report["guarantee"] == FORMAL
    assert a.report["epsilon_spent"] <= 1.0


@pytest.mark.slow  # ~17 s: 2 x 4,000 audited runs; CI runs it in its slow audit step
def test_factorized_is_in_the_audit_and_an_under_noised_release_is_flagged() -> None:
    """The lazy ldp row with the factorized release at eps = 2 (K = 4, full-sensitivity pair): noise
    shrunk to 0.3x raises the pair's mu as for the tree (tests/test_audit_privacy.py), so 2,000
    counted trials give a Clopper-Pearson bound above 2; the calibrated noise stays consistent."""
    assert any(c.algorithm.get("mechanism") == "factorized" for c in releases.default_cases())
    algorithm = releases._fedlinucb("ldp", True, epsilon=2.0, mechanism="factorized")
    case = AuditCase("fact x0.3", algorithm, "messages", dataset="full-sensitivity", noise_scale=0.3)
    shrunk = run_case(case, trials=2000, seed=0)
    assert shrunk.guarantee == FORMAL and shrunk.verdict == "violated" and shrunk.epsilon_lower_bound > 2.0
    honest = run_case(AuditCase("fact", algorithm, "messages", dataset="full-sensitivity"), 2000, seed=0)
    assert honest.verdict == "consistent"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"mechanism": "matrix"}, "mechanism must be one of 'tree', 'factorized', 'blt', 'banded', got 'matrix'"),
        ({"mechanism": "factorized", "protocol": "sdp-amplification"}, "mechanism 'factorized' needs protocol 'ldp'"),
        ({"mechanism": "factorized", "protocol": "sdp-vector-sum"}, "mechanism 'factorized' needs protocol 'ldp'"),
        ({"mechanism": "factorized", "calibration": "paper"}, "with calibration 'tight'"),
        ({"mechanism": "factorized", "protocol": "none"}, "mechanism 'factorized' applies to private protocols"),
    ],
)
def test_bad_mechanism_settings_get_one_line_errors(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        _config(**fields)
    assert "\n" not in str(info.value)


def test_the_memory_estimate_counts_the_batches_a_factorized_silo_keeps() -> None:
    from fedbandits.sim.memory import task_bytes

    tree, fact = _config(), _config(mechanism="factorized")
    prefix = _config(mechanism="factorized", protocol="ldp-prefix")
    runs, agents, width, releases_ = fact.experiment.runs, 4, 4 * 5 // 2 + 4, 30  # 2 runs: one task holds both
    assert task_bytes(fact) - task_bytes(tree) == (releases_ * agents + releases_) * runs * width * 8
    assert task_bytes(prefix) - task_bytes(fact) == releases_ * agents * runs * width * 8
