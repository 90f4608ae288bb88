"""The streaming banded release (issue #49, ``mechanism = "banded"``): the encoder is the banded
Toeplitz product and the decoder's recursion inverts it over a stream longer than its band; at a band
of K releases it is the factorized release exactly; the calibration covers the unbounded stream, for
ldp and for distributed-dp's integer lattice (whose modulus no longer depends on the horizon); the
simulator runs it; too little noise is caught by the audit."""

from __future__ import annotations

import numpy as np
import pytest

from fedbandits.config import ConfigError, config_from_dict
from fedbandits.privacy.accounting import tight_noise_multiplier
from fedbandits.privacy.calibration import PrivacySpec, calibrate
from fedbandits.privacy.distributed_noise import calibrate_distributed
from fedbandits.privacy.factorization import BandedEncoder, factorize, sqrt_coefficients
from fedbandits.privacy.streaming import BandedStream, StreamingAnalyzer
from fedbandits.protocols.distributed_dp import DistributedRandomizer


def _dense(column: np.ndarray, n: int) -> np.ndarray:
    rows, cols = np.indices((n, n))
    gap = rows - cols
    return np.where((gap >= 0) & (gap < column.size), column[np.clip(gap, 0, column.size - 1)], 0.0)


def test_the_encoder_is_the_banded_product_and_the_decoder_inverts_it_past_the_band() -> None:
    """3,000 releases of (2, 3) batches with a band of 16: the encoder's output is the dense banded B gamma;
    the decoder's prefix of the encoded batches is the running sum (to 1e-8, after 187 bands of the
    recursion), each side holding band x batch floats only."""
    stream = BandedStream(16)
    rng = np.random.default_rng(0)
    gamma = rng.normal(size=(3000, 2, 3))
    encoder, decoder = stream.encoder((2, 3)), StreamingAnalyzer((1, 2, 3), stream)
    encoded, prefixes = [], []
    for k in range(3000):
        encoded.append(encoder.encode(gamma[k]))
        prefixes.append(decoder.release_sum(encoded[-1][None])[0])
    dense = _dense(sqrt_coefficients(16), 400)
    assert np.allclose(np.array(encoded[:400]), np.einsum("ij,jab->iab", dense, gamma[:400]), atol=1e-12)
    assert np.abs(np.array(prefixes) - np.cumsum(gamma, axis=0)).max() < 1e-8
    assert encoder.past.shape == (32, 2, 3) and decoder.inverse.past.shape == (32, 1, 2, 3)  # each batch twice


def test_at_a_band_of_k_releases_it_is_the_factorized_release() -> None:
    """The same square-root coefficients: equal messages for K = 50 releases, equal calibrations (ldp and
    distributed-dp), and the streaming one goes on where the factorized one stops."""
    rng = np.random.default_rng(1)
    gamma = rng.normal(size=(51, 4))
    planned, streaming = BandedEncoder((4,), factorize(50)), BandedStream(50).encoder((4,))
    for k in range(50):
        np.testing.assert_allclose(streaming.encode(gamma[k]), planned.encode(gamma[k]), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="planned for 50 releases"):
        planned.encode(gamma[50])
    streaming.encode(gamma[50])
    for protocol in ("ldp", "ldp-prefix"):
        a, b = (
            calibrate(PrivacySpec(protocol, 1.0, 1e-5, mechanism=m), agents=4, horizon=500, batch=10)
            for m in ("factorized", "banded")
        )
        assert (a.sigma_cov, a.sigma_bias, a.nodes, a.epsilon_spent) == (
            b.sigma_cov,
            b.sigma_bias,
            b.nodes,
            b.epsilon_spent,
        )
        assert b.prefix_factor == pytest.approx(a.prefix_factor, rel=1e-12)
        assert b.details["horizon_of_guarantee"].startswith("unbounded") and b.details["stream_band"] == 50
    c, d = (
        calibrate_distributed(
            PrivacySpec("distributed-dp", 1.0, 1e-5, mechanism=m), agents=4, horizon=500, batch=10, dim=3
        )
        for m in ("factorized", "banded")
    )
    assert (c.share_sigma, c.profile, c.epsilon_worst) == (d.share_sigma, d.profile, d.epsilon_worst)
    assert d.prefix_factor == pytest.approx(c.prefix_factor, rel=1e-12) and "streaming banded" in d.guarantee_reason


def test_the_decoded_noise_has_the_stated_prefix_variance_past_the_band() -> None:
    """Unit noise through the decoder with a band of 8, 4,000 streams of 200 releases: the prefix's
    empirical variance at releases 5, 50, 200 within 4 standard errors (sqrt(2 / 4000) relative) of the
    stated one, which grows linearly past the band (about pi / (4 band) per release)."""
    stream = BandedStream(8)
    rng = np.random.default_rng(3)
    decoder = StreamingAnalyzer((1, 4000, 1), stream)
    prefix = np.empty((200, 4000))
    for k in range(200):
        prefix[k] = decoder.release_sum(rng.standard_normal((1, 4000, 1)))[0, :, 0]
    stated = stream.prefix_variance(200)
    for k in (4, 49, 199):
        assert abs(prefix[k].var() / stated[k] - 1) < 4 * np.sqrt(2 / 4000), (k, prefix[k].var(), stated[k])
    slope = (stated[199] - stated[99]) / 100
    assert slope == pytest.approx(1 / sqrt_coefficients(8).sum() ** 2, rel=0.05)


def test_the_calibration_covers_the_unbounded_stream() -> None:
    """ldp: sigma = z sqrt(sum_{m < band} c_m^2) Delta, z the two-stream multiplier, epsilon_spent the target,
    m contributions m times the noise.  distributed-dp: one user enters ``band`` messages, and the modulus
    is sized for band x B users and 2^40 releases, so the horizon changes neither it nor the shares."""
    spec = PrivacySpec("ldp", 1.0, 1e-5, mechanism="banded", band=32)
    cal = calibrate(spec, agents=3, horizon=1000, batch=10)
    norm_sq = float(np.sum(sqrt_coefficients(32) ** 2))
    assert cal.guarantee == "formal" and cal.epsilon_spent == pytest.approx(1.0, abs=1e-6) and cal.nodes == 32
    z = cal.sigma_cov / (spec.unit_sensitivity().cov * np.sqrt(norm_sq))
    assert z == pytest.approx(tight_noise_multiplier(1.0, 1e-5, 2), rel=1e-9)
    user = calibrate(
        PrivacySpec("ldp", 1.0, 1e-5, mechanism="banded", band=32, contributions=4), agents=3, horizon=1000, batch=10
    )
    assert user.sigma_cov == pytest.approx(4 * cal.sigma_cov, rel=1e-12) and user.guarantee == "formal"
    ddp = PrivacySpec("distributed-dp", 1.0, 1e-5, mechanism="banded", band=32)
    short, long = (calibrate_distributed(ddp, agents=5, horizon=t, batch=10, dim=3) for t in (1000, 10**7))
    assert len(short.profile) == 32 and short.guarantee == "formal" and short.epsilon_worst <= 1.0
    assert (short.bits, short.share_sigma) == (long.bits, long.share_sigma)
    tree = calibrate_distributed(PrivacySpec("distributed-dp", 1.0, 1e-5), agents=5, horizon=10**7, batch=10, dim=3)
    assert tree.bits > long.bits  # the tree's p-sums can hold the whole horizon; a banded message 320 users


def test_a_streaming_distributed_randomizer_has_no_horizon_and_a_skip_sends_nothing() -> None:
    cal = calibrate_distributed(
        PrivacySpec("distributed-dp", 1.0, 1e-5, mechanism="banded", band=4), agents=2, horizon=20, batch=10, dim=2
    )
    streams = [np.random.default_rng(5)]
    randomizer = DistributedRandomizer(1, 2, cal.codec(2), cal.share_sigma, streams, cal.releases, cal.stream)
    for _ in range(cal.releases + 3):  # the run planned 2 releases; the stream has no end
        out = randomizer.release(np.ones((1, 2, 5)))
        assert out.shape == (1, 2, 5) and out.dtype == np.uint64
    assert randomizer.skip() is None and randomizer.k == cal.releases + 4


def test_the_simulator_runs_it_and_bad_requests_are_refused() -> None:
    from fedbandits.sim.runner import run_experiment

    config = config_from_dict(
        {
            "experiment": {"horizon": 400, "runs": 2, "seed": 4},
            "environment": {"name": "gaussian-sphere", "agents": 5, "arms": 10, "dim": 4},
            "algorithms": [
                {"name": "fedlinucb", "label": p, "protocol": p, "mechanism": "banded", "batch": 10, "band": 8}
                for p in ("ldp", "ldp-prefix", "distributed-dp")
            ],
        }
    )
    summary = run_experiment(config, workers=1).summary()["algorithms"]
    assert [row["guarantee"] for row in summary] == ["formal"] * 3
    for params, message in (
        (
            {"protocol": "sdp-amplification"},
            "mechanism 'banded' needs protocol 'ldp', 'ldp-prefix' or 'distributed-dp'",
        ),
        ({"protocol": "ldp", "band": -1}, "band must be"),
        ({"protocol": "ldp", "band": 70000}, "band must be"),
        ({"protocol": "none"}, "mechanism 'banded' applies to private protocols only"),
    ):
        with pytest.raises(ConfigError, match=message):
            config_from_dict(
                {
                    "environment": {"name": "gaussian-sphere"},
                    "algorithms": [{"name": "fedlinucb", "mechanism": "banded", **params}],
                }
            )
    with pytest.raises(ConfigError, match=r"'blt' needs protocol 'ldp' or 'ldp-prefix'.*use 'banded'"):
        config_from_dict(
            {
                "environment": {"name": "gaussian-sphere"},
                "algorithms": [{"name": "fedlinucb", "mechanism": "blt", "protocol": "distributed-dp"}],
            }
        )


@pytest.mark.slow  # ~45 s: 3 x 2 x 2,000 audited runs; CI runs it in its slow audit step
@pytest.mark.parametrize(
    ("protocol", "view", "agents", "unit"),
    [
        ("ldp", "messages", 1, {}),
        ("distributed-dp", "aggregate", 2, {}),
        ("distributed-dp", "aggregate", 2, {"privacy_unit": "user", "max_contributions": 4}),
    ],
)
def test_the_banded_release_is_in_the_audit_and_an_under_noised_one_is_flagged(
    protocol: str, view: str, agents: int, unit: dict[str, object]
) -> None:
    """The lazy rows at eps = 2 with a band of 2 of the run's 4 releases (K = 4, full-sensitivity pair; a
    returning user of 4 visits for the user-level row): noise shrunk to 0.3x raises the pair's mu by 1/0.3 as
    for the tree and the factorized release, so 2,000 counted trials give a Clopper-Pearson bound above 2
    (measured 2.79, 2.06, 2.06); the calibrated noise stays consistent."""
    from fedbandits.audit import releases
    from fedbandits.audit.releases import AuditCase, run_case

    rows = {c.label for c in releases.default_cases()}
    assert any(protocol in label and "banded, band 2" in label for label in rows)
    algorithm = releases._fedlinucb(protocol, True, epsilon=2.0, mechanism="banded", band=2, **unit)
    extra = {"dataset": "user-history", "history": 4} if unit else {"dataset": "full-sensitivity"}
    shrunk = run_case(AuditCase("x0.3", algorithm, view, agents=agents, noise_scale=0.3, **extra), 2000, seed=0)
    assert shrunk.guarantee == "formal" and shrunk.verdict == "violated" and shrunk.epsilon_lower_bound > 2.0
    honest = run_case(AuditCase("banded", algorithm, view, agents=agents, **extra), 2000, seed=0)
    assert honest.verdict == "consistent"
