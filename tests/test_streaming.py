"""The streaming (BLT) release (issue #49): the strategy's closed forms against brute force, the
encoder and decoder exact with a few buffers of state, a guarantee computed over the unbounded
stream, the simulator running it, and too little noise caught by the audit."""

from __future__ import annotations

import numpy as np
import pytest

from fedbandits.config import ConfigError, config_from_dict
from fedbandits.privacy.calibration import PrivacySpec, calibrate
from fedbandits.privacy.streaming import BLT, BLTEncoder, StreamingAnalyzer, ra_blt


def _dense(blt: BLT, n: int) -> np.ndarray:
    c = blt.coefficients(n)
    rows, cols = np.indices((n, n))
    return np.where(rows >= cols, c[np.maximum(rows - cols, 0)], 0.0)


@pytest.mark.parametrize(("buffers", "tuned_for"), [(1, 50), (3, 1000), (5, 10**5)])
def test_the_closed_forms_are_the_brute_force_sums(buffers: int, tuned_for: int) -> None:
    """The column norm over the unbounded stream and the autocorrelations are the sums of 2 million
    coefficients (the tail beyond is below 1e-12 at these decays: theta_max^(2e6) <= e^-20); B^{-1}'s
    coefficients are the series inverse of B's; every decay is below 1, the largest 1 - 1/n."""
    blt = ra_blt(buffers, tuned_for)
    assert blt.theta.max() == pytest.approx(1 - 1 / tuned_for, abs=1e-12) and (np.abs(blt.theta) < 1).all()
    c = blt.coefficients(2_000_000)
    assert blt.sensitivity_sq == pytest.approx(float(np.sum(c**2)), rel=1e-9)
    for gap in (1, 7):
        assert blt.autocorrelation(gap) == pytest.approx(float(np.sum(c[:-gap] * c[gap:])), rel=1e-9)
    inverse = blt.inverse().coefficients(60)
    product = np.convolve(c[:60], inverse)[:60]
    assert np.allclose(product, np.r_[1.0, np.zeros(59)], atol=1e-9)


def test_the_encoder_is_the_toeplitz_product_and_the_decoder_recovers_the_prefix_exactly() -> None:
    """300 releases of (2, 3) batches: the encoder's output is the dense B gamma; the decoder's prefix of
    the encoded batches is the running sum (to 1e-9), each side holding buffers x batch floats only."""
    blt = ra_blt(5, 1000)
    rng = np.random.default_rng(0)
    gamma = rng.normal(size=(300, 2, 3))
    encoder, decoder = BLTEncoder((2, 3), blt), StreamingAnalyzer((1, 2, 3), blt)
    encoded, prefixes = [], []
    for k in range(300):
        encoded.append(encoder.encode(gamma[k]))
        prefixes.append(decoder.release_sum(encoded[-1][None])[0])
    assert np.allclose(np.array(encoded), np.einsum("ij,jab->iab", _dense(blt, 300), gamma), atol=1e-12)
    assert np.abs(np.array(prefixes) - np.cumsum(gamma, axis=0)).max() < 1e-9
    assert encoder.buffers.shape == (5, 2, 3) and decoder.inverse.buffers.shape == (5, 1, 2, 3)


def test_the_decoded_noise_has_the_stated_prefix_variance() -> None:
    """Unit noise through the decoder, 4,000 independent streams of 200 releases: the empirical variance of
    the prefix at releases 10, 100, 200 within 4 standard errors (sqrt(2 / 4000) relative) of
    ||row k of C B^-1||^2."""
    blt = ra_blt(4, 200)
    rng = np.random.default_rng(3)
    decoder = StreamingAnalyzer((1, 4000, 1), blt)
    prefix = np.empty((200, 4000))
    for k in range(200):
        prefix[k] = decoder.release_sum(rng.standard_normal((1, 4000, 1)))[0, :, 0]
    stated = blt.prefix_variance(200)
    for k in (9, 99, 199):
        assert abs(prefix[k].var() / stated[k] - 1) < 4 * np.sqrt(2 / 4000), (k, prefix[k].var(), stated[k])


def test_five_buffers_match_the_square_root_factorization_and_keep_going() -> None:
    """Known values (the module docstring's table): the squared sensitivity times the prefix variance of 5
    buffers tuned for 10^5 releases is 16.18, 19.05, 23.35 at 10^3, 10^4, 10^5 releases, against the
    tree's (log2 K + 1)^2 = 100, 196, 289 and the full square root's 10.7, 16.0, 22.4 at the same K."""
    blt = ra_blt(5, 10**5)
    variance = blt.prefix_variance(10**5)
    got = [blt.sensitivity_sq * variance[k - 1] for k in (10**3, 10**4, 10**5)]
    assert got == pytest.approx([16.18, 19.05, 23.35], abs=0.01)


def test_the_calibration_covers_the_unbounded_stream() -> None:
    """sigma = z sqrt(||B e_j||^2) Delta with z the two-stream multiplier at (1, 1e-5): the mu of the whole
    infinite release sequence is that of two Gaussian releases at z, so epsilon_spent is the target."""
    spec = PrivacySpec("ldp", 1.0, 1e-5, mechanism="blt", buffers=5)
    cal = calibrate(spec, agents=3, horizon=1000, batch=10)
    blt = ra_blt(5, 100)
    assert cal.guarantee == "formal" and cal.epsilon_spent == pytest.approx(1.0, abs=1e-6)
    assert cal.details["stream_sensitivity_sq"] == pytest.approx(blt.sensitivity_sq)
    z = cal.sigma_cov / (spec.unit_sensitivity().cov * np.sqrt(blt.sensitivity_sq))
    from fedbandits.privacy.accounting import tight_noise_multiplier

    assert z == pytest.approx(tight_noise_multiplier(1.0, 1e-5, 2), rel=1e-9)
    assert cal.prefix_factor == pytest.approx(float(blt.prefix_variance(100).max()))
    # one user with up to 4 contributions, possibly in one batch, moves the sequence by 4 ||B e_j|| Delta
    user = calibrate(PrivacySpec("ldp", 1.0, 1e-5, mechanism="blt", contributions=4), agents=3, horizon=1000, batch=10)
    assert user.sigma_cov == pytest.approx(4 * cal.sigma_cov, rel=1e-12) and user.guarantee == "formal"


def test_the_simulator_runs_the_streaming_release_and_bad_requests_are_refused() -> None:
    from fedbandits.sim.runner import run_experiment

    config = config_from_dict(
        {
            "experiment": {"horizon": 400, "runs": 2, "seed": 4},
            "environment": {"name": "gaussian-sphere", "agents": 5, "arms": 10, "dim": 4},
            "algorithms": [
                {"name": "fedlinucb", "label": p, "protocol": p, "mechanism": "blt", "batch": 10, "buffers": 3}
                for p in ("ldp", "ldp-prefix")
            ],
        }
    )
    summary = run_experiment(config, workers=1).summary()["algorithms"]
    assert [row["guarantee"] for row in summary] == ["formal", "formal"]
    for params, message in (
        ({"protocol": "distributed-dp"}, "mechanism 'blt' needs protocol 'ldp' or 'ldp-prefix'"),
        ({"protocol": "ldp", "buffers": 0}, "buffers must be"),
        ({"protocol": "none"}, "mechanism 'blt' applies to private protocols only"),
    ):
        with pytest.raises(ConfigError, match=message):
            config_from_dict(
                {
                    "environment": {"name": "gaussian-sphere"},
                    "algorithms": [{"name": "fedlinucb", "mechanism": "blt", **params}],
                }
            )


@pytest.mark.slow  # ~20 s: 2 x 2,000 audited runs; CI runs it in its slow audit step
def test_the_streaming_release_is_in_the_audit_and_an_under_noised_one_is_flagged() -> None:
    """The lazy ldp row with the streaming release at eps = 2 (K = 4 releases, full-sensitivity pair):
    noise shrunk to 0.3x raises the pair's mu by 1/0.3 as for the tree and the factorized release, so
    2,000 counted trials give a Clopper-Pearson bound above 2; the calibrated noise stays consistent."""
    from fedbandits.audit import releases
    from fedbandits.audit.releases import AuditCase, run_case

    assert any(c.algorithm.get("mechanism") == "blt" for c in releases.default_cases())
    algorithm = releases._fedlinucb("ldp", True, epsilon=2.0, mechanism="blt")
    case = AuditCase("blt x0.3", algorithm, "messages", dataset="full-sensitivity", noise_scale=0.3)
    shrunk = run_case(case, trials=2000, seed=0)
    assert shrunk.guarantee == "formal" and shrunk.verdict == "violated" and shrunk.epsilon_lower_bound > 2.0
    honest = run_case(AuditCase("blt", algorithm, "messages", dataset="full-sensitivity"), 2000, seed=0)
    assert honest.verdict == "consistent"


def test_the_online_agent_and_the_deployment_refuse_it_in_one_line() -> None:
    """A silo's secret noise is discrete (rounded to a grid), and a BLT's rounded release would touch every
    later message: the agent refuses it in one line that names 'banded'; the deployment refuses it too."""
    from fedbandits import Agent
    from fedbandits.federation.spec import make_spec

    config = config_from_dict(
        {
            "experiment": {"horizon": 100},
            "environment": {"name": "gaussian-sphere", "agents": 2, "arms": 4, "dim": 3},
            "algorithms": [{"name": "fedlinucb", "protocol": "ldp", "mechanism": "blt", "batch": 5}],
        }
    )
    with pytest.raises(ConfigError, match=r"got 'blt' \(a silo's secret noise .* 'banded' touches `band` of them\)$"):
        Agent.from_config(config, silo=1)
    with pytest.raises(
        ConfigError, match=r"mechanism 'blt' does not deploy; the deployment releases 'tree' or 'banded'"
    ):
        make_spec(config)
