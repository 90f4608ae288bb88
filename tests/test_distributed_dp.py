"""Protocol distributed-dp: encoding, accounting, noise shares, secure sum, reports, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedbandits.algorithms.fedlinucb import FedLinUCBParams
from fedbandits.audit import releases
from fedbandits.audit.releases import AuditCase, run_case
from fedbandits.config import ConfigError, config_from_dict
from fedbandits.privacy.calibration import PrivacySpec
from fedbandits.privacy.discrete_gaussian import zcdp_epsilon
from fedbandits.privacy.distributed_noise import (
    ModularCodec,
    calibrate_distributed,
    composed_epsilon,
    data_bound,
    noise_bound,
    sample_shares,
    sum_epsilon,
    tau,
)
from fedbandits.privacy.factorization import factorize
from fedbandits.privacy.guarantee import FORMAL, NOT_FORMAL
from fedbandits.privacy.mechanisms import pack, unpack
from fedbandits.protocols.distributed_dp import DistributedDPProtocol, SimulatedSecureSum
from fedbandits.sim.runner import run_experiment

SPEC = PrivacySpec("distributed-dp", 1.0, 1e-5)


def _cal(agents: int = 4, horizon: int = 400, batch: int = 25, dim: int = 3, **kw: object):  # type: ignore[no-untyped-def]
    return calibrate_distributed(SPEC, agents=agents, horizon=horizon, batch=batch, dim=dim, **kw)  # type: ignore[arg-type]


def _protocol(cal, runs: int = 2, seed: int = 0) -> DistributedDPProtocol:  # type: ignore[no-untyped-def]
    rngs = [np.random.default_rng([seed, r]) for r in range(runs)]
    return DistributedDPProtocol(runs, cal.agents, 3, cal, rngs, record=True)


# -- encoding ---------------------------------------------------------------------------------
@pytest.mark.parametrize("bits", [8, 33, 63, 64])
def test_modular_sum_decodes_exactly_up_to_the_bound(bits: int) -> None:
    """Any integers whose sum lies in [-2^(bits-1), 2^(bits-1)) decode exactly from their residues."""
    codec = ModularCodec(np.ones(4), bits)
    half = 1 << (bits - 1)
    sums = np.array([half - 1, -half, 0, -1], dtype=np.int64)
    rng = np.random.default_rng(1)
    parts = rng.integers(-half, half, size=(5, 4), dtype=np.int64)
    parts[-1] = sums - parts[:-1].sum(axis=0)  # int64 wrap-around is arithmetic modulo 2^64
    total = codec.residues(parts).sum(axis=0, dtype=np.uint64) & codec.mask
    np.testing.assert_array_equal(codec.centred(total), sums)
    # one step beyond the bound wraps to the other end: the bound is where exactness ends
    over = codec.residues(np.array([half - 1], dtype=np.int64)) + np.uint64(1)
    assert codec.centred(over & codec.mask)[0] == -half


def test_default_modulus_holds_the_data_bound_and_the_noise_tail() -> None:
    cal = _cal(agents=20, horizon=10_000)
    data = data_bound(20, 10_000, SPEC, cal.granularity, cal.grid_bias)
    noise = noise_bound(20, cal.nodes, cal.share_sigma, cal.width, cal.releases)
    assert data + noise < 2 ** (cal.bits - 1) <= 2 * (data + noise)  # the fewest bits that hold it
    # M silos at the data bound in every entry, plus noise at the tail bound: decoded exactly
    codec = cal.codec(3)
    ticks = np.full((20, cal.width), int(data / 20) + int(noise / 20), dtype=np.int64)
    total = codec.residues(ticks).sum(axis=0, dtype=np.uint64) & codec.mask
    np.testing.assert_array_equal(codec.centred(total), ticks.sum(axis=0))


def test_settings_that_could_overflow_are_refused() -> None:
    cal = _cal()
    with pytest.raises(ValueError, match=rf"modulus_bits must be an integer in \[{cal.bits}, 64\]"):
        _cal(bits=cal.bits - 1)
    with pytest.raises(ValueError, match=r"needs a .*-bit modulus .* choose a granularity >="):
        _cal(granularity=1e-17)
    assert _cal(bits=64).bits == 64


# -- accounting -------------------------------------------------------------------------------
def test_sum_accounting_reduces_to_zcdp_when_tau_vanishes() -> None:
    """With s in the thousands tau underflows and Prop. 14 is the zCDP of one Gaussian of variance n s^2."""
    assert tau(3000.0, 20) == 0.0
    assert tau(0.5, 1) == 0.0  # one share: nothing to sum
    assert tau(0.5, 3) == pytest.approx(10 * (math.exp(-(math.pi**2) / 4) + math.exp(-(math.pi**2) / 3)))
    eps = sum_epsilon(3000.0, 20, 4000.0, 9000.0, 9, 7, 1e-5)
    assert eps == pytest.approx(zcdp_epsilon(7 * 4000.0**2 / (2 * 20 * 3000.0**2), 1e-5), rel=1e-12)
    # more honest shares, or larger shares: less epsilon; nobody honest: nothing guaranteed
    assert sum_epsilon(3000.0, 40, 4000.0, 9000.0, 9, 7, 1e-5) < eps
    assert sum_epsilon(6000.0, 20, 4000.0, 9000.0, 9, 7, 1e-5) < eps
    assert sum_epsilon(3000.0, 0, 4000.0, 9000.0, 9, 7, 1e-5) == math.inf


def test_calibration_is_tight_and_provisions_for_colluders_and_dropouts() -> None:
    cal = _cal(agents=10)
    assert cal.guarantee == FORMAL and cal.epsilon_spent == pytest.approx(1.0, rel=1e-6) and cal.epsilon_spent <= 1.0
    assert cal.epsilon_with(10) == cal.epsilon_spent
    # 1% less noise per share would overspend: the share is the smallest that meets the target
    assert sum_epsilon(cal.share_sigma * 0.99, 10, cal.l2, cal.l1, cal.width, cal.nodes, 1e-5) > 1.0
    both = _cal(agents=10, colluders=2, dropouts=1)
    assert both.epsilon_worst <= 1.0 and both.epsilon_worst == pytest.approx(1.0, rel=1e-6)
    assert both.epsilon_spent < both.epsilon_colluders < both.epsilon_worst
    # the worst case is 7 honest shares: the same total noise as 7 shares of the honest calibration
    assert both.share_sigma * math.sqrt(7) == pytest.approx(cal.share_sigma * math.sqrt(10), rel=1e-5)


def test_server_noise_is_central_not_local() -> None:
    """The sum carries ~1/sqrt(M) of ldp's server-side noise (within 1.1x: zCDP vs the exact Gaussian
    curve, and the rounding's sqrt(P) in the sensitivity)."""
    from fedbandits.privacy.calibration import calibrate

    for agents in (20, 100):
        ldp = calibrate(PrivacySpec("ldp", 1.0, 1e-5), agents=agents, horizon=10_000, batch=25)
        ddp = _cal(agents=agents, horizon=10_000, dim=10)
        ratio = math.sqrt(agents) * ddp.sigma_cov / ldp.sigma_cov
        assert 1.0 < ratio <= 1.1, (agents, ratio)


# -- the factorized release ------------------------------------------------------------------------
FACTORIZED = PrivacySpec("distributed-dp", 1.0, 1e-5, mechanism="factorized")


def test_composition_of_equal_releases_is_the_tree_accounting() -> None:
    """A profile of ``nodes`` identical releases is exactly sum_epsilon's ``nodes`` releases, and a
    release with a smaller sensitivity costs less."""
    args = (3000.0, 20, ((4000.0, 9000.0, 1),) * 7, 9, 1e-5)
    assert composed_epsilon(*args) == pytest.approx(sum_epsilon(3000.0, 20, 4000.0, 9000.0, 9, 7, 1e-5), rel=1e-12)
    smaller = composed_epsilon(3000.0, 20, ((4000.0, 9000.0, 1),) * 6 + ((2000.0, 4500.0, 1),), 9, 1e-5)
    assert smaller < composed_epsilon(*args)


def test_factorized_shares_follow_the_factor_column_and_lower_the_prefix_noise() -> None:
    """K = 400 (T = 10,000, B = 25), M = 20, d = 10: message k - 1 of a user's batch carries b_k of its
    change (plus the rounding term), the calibration is tight, and the largest prefix noise variance,
    sigma^2 max_k ||A_k||^2, is below the tree's sigma^2 nodes (measured 8.0x lower: as for ldp)."""
    tree = _cal(agents=20, horizon=10_000, dim=10)
    fact = calibrate_distributed(FACTORIZED, agents=20, horizon=10_000, batch=25, dim=10)
    column = factorize(400).encoder
    assert fact.mechanism == "factorized" and len(fact.profile) == 400 and fact.nodes == 400
    assert fact.profile[0] == pytest.approx((tree.l2, tree.l1), rel=1e-12)
    r = (tree.l2 - math.sqrt(tree.width)) / math.sqrt(2.0)
    assert fact.profile[-1][0] == pytest.approx(math.sqrt(2.0) * r * column[-1] + math.sqrt(tree.width), rel=1e-9)
    assert fact.guarantee == FORMAL and fact.epsilon_spent == pytest.approx(1.0, rel=1e-6)
    assert fact.epsilon_spent <= 1.0
    shrunk = composed_epsilon(fact.share_sigma * 0.99, 20, fact.release_sensitivities(), fact.width, 1e-5)
    assert shrunk > 1.0  # the smallest share that meets the target
    tree_var = tree.sigma_cov**2 * tree.prefix_factor
    fact_var = fact.sigma_cov**2 * fact.prefix_factor
    assert tree.prefix_factor == tree.nodes and fact_var < tree_var / 4


def test_factorized_messages_decode_to_the_exact_prefix_up_to_rounding() -> None:
    """With the shares switched off (the audit's test hook), the server's prefix is C gamma up to the
    grid: each decoded message sum is within M / 2 steps of M silos' B gamma, so the prefix within
    sum_m a_m M / 2 steps (a_m <= 1: at most k M / 2)."""
    spec = FACTORIZED
    cal = calibrate_distributed(spec, agents=4, horizon=400, batch=25, dim=3)
    protocol = DistributedDPProtocol(2, 4, 3, cal, [np.random.default_rng([0, r]) for r in range(2)], record=True)
    protocol.randomizer.sigma = 1e-9  # every share is then 0
    rng = np.random.default_rng(7)
    total = np.zeros((2, 9))
    steps = cal.steps(3)
    for k in range(1, 17):
        cov = rng.normal(size=(2, 4, 3, 3))
        cov = cov + np.swapaxes(cov, -1, -2)
        bias = rng.normal(size=(2, 4, 3))
        prefix_cov, prefix_bias = protocol.sync(cov, bias)
        total += pack(cov, bias).sum(axis=1)
        got = pack(prefix_cov, prefix_bias)
        assert np.all(np.abs(got - total) <= k * 4 * 0.5 * steps + 1e-9), k
    exact_cov, _ = unpack(total, 3)
    assert np.abs(prefix_cov - exact_cov).max() > 0  # rounding is real, not skipped
    assert protocol.privacy_report()["mechanism"] == "factorized"


# -- noise shares -----------------------------------------------------------------------------
@pytest.mark.parametrize("sigma", [0.7, 12.5, 3000.3])
def test_share_sampler_has_the_discrete_gaussian_law(sigma: float) -> None:
    """200,000 draws: mean within 5 standard errors of 0; the variance matches the discrete Gaussian's
    exact variance (sum over a wide support) within 5 standard errors (sd of the sample variance is
    ~sqrt(2/n) var = 0.32%)."""
    x = sample_shares(np.random.default_rng(7), sigma, 200_000)
    support = np.arange(-int(40 * sigma) - 5, int(40 * sigma) + 6)
    weights = np.exp(-(support.astype(float) ** 2) / (2 * sigma**2))
    var = float((weights * support**2).sum() / weights.sum())
    assert abs(x.mean()) < 5 * math.sqrt(var / x.size)
    assert x.var() == pytest.approx(var, rel=5 * math.sqrt(2 / x.size))
    np.testing.assert_array_equal(x, sample_shares(np.random.default_rng(7), sigma, 200_000))


def _aggregate_noise(cal, tamper=None) -> np.ndarray:  # type: ignore[no-untyped-def]
    """The server's decoded node sums with all-zero data: pure aggregate noise, in grid steps."""
    proto = _protocol(cal, runs=8)
    if tamper is not None:
        original = proto.randomizer.release

        def release(gamma: np.ndarray) -> np.ndarray:
            before = proto.randomizer.codec.centred(original(gamma))
            return proto.codec.residues(tamper(before))

        proto.randomizer.release = release  # type: ignore[method-assign]
    zeros = (np.zeros((8, cal.agents, 3, 3)), np.zeros((8, cal.agents, 3)))
    for _ in range(cal.releases):
        proto.sync(*zeros)
    assert proto.transcript is not None
    return np.stack([rec["sum"] for rec in proto.transcript]) / proto.codec.steps


def test_aggregate_noise_has_central_variance_and_a_cheating_silo_is_detected() -> None:
    """16 releases x 8 runs x 9 entries = 1,152 node sums: the variance estimate has sd sqrt(2/n) =
    4.2%; honest: M s^2 (within 5 sd, 21%).  One of 4 silos adding its share twice gives 7/4 of it,
    one adding none 3/4: both 6+ sd away."""
    cal = _cal(agents=4)
    target = cal.agents * cal.share_sigma**2
    tol = 5 * math.sqrt(2 / (16 * 8 * 9))
    assert np.var(_aggregate_noise(cal)) / target == pytest.approx(1.0, abs=tol)
    twice = _aggregate_noise(cal, lambda v: v + np.concatenate([v[:, :1], 0 * v[:, 1:]], axis=1))
    assert np.var(twice) / target > 1 + tol
    none = _aggregate_noise(cal, lambda v: np.concatenate([np.rint(v[:, :1] * 0), v[:, 1:]], axis=1))
    assert np.var(none) / target < 1 - tol


# -- secure sum -------------------------------------------------------------------------------
def _uniform_top_bits(values: np.ndarray, bits: int) -> float:
    """Chi-square statistic of the top 4 bits (16 cells) of residues modulo 2^bits."""
    cells = (values.astype(np.uint64) >> np.uint64(bits - 4)).astype(np.int64).ravel()
    counts = np.bincount(cells, minlength=16)
    expected = cells.size / 16
    return float(((counts - expected) ** 2 / expected).sum())


CHI2_15_999 = 37.7  # 99.9% quantile of chi-square with 15 degrees of freedom


def test_the_server_sees_only_masked_messages_and_their_sum(monkeypatch: pytest.MonkeyPatch) -> None:
    cal = _cal(agents=5)
    proto = _protocol(cal, runs=4)
    seen: list[np.ndarray] = []
    plain: list[np.ndarray] = []
    original_aggregate, original_mask = SimulatedSecureSum.aggregate, SimulatedSecureSum.mask

    def aggregate(self, messages, present, recovered):  # type: ignore[no-untyped-def]
        seen.append(messages.copy())
        return original_aggregate(self, messages, present, recovered)

    def mask(self, residues):  # type: ignore[no-untyped-def]
        plain.append(residues.copy())
        return original_mask(self, residues)

    monkeypatch.setattr(SimulatedSecureSum, "aggregate", aggregate)
    monkeypatch.setattr(SimulatedSecureSum, "mask", mask)
    rng = np.random.default_rng(3)
    for _ in range(cal.releases):
        x = rng.normal(size=(4, 5, 3)) / 3
        proto.sync(x[..., :, None] * x[..., None, :], x)
    masked, residues = np.stack(seen), np.stack(plain)
    assert not np.any(masked == residues)  # no plaintext residue reaches the aggregation
    assert _uniform_top_bits(masked, cal.bits) < CHI2_15_999
    assert _uniform_top_bits(residues, cal.bits) > 10 * CHI2_15_999  # the plaintext is far from uniform
    codec = proto.codec
    for k in range(cal.releases):
        exact = codec.centred(residues[k].sum(axis=1, dtype=np.uint64) & codec.mask)
        np.testing.assert_array_equal(proto.transcript[k]["sum"], codec.decode(exact))  # type: ignore[index]


def test_a_missing_mask_leaves_garbage_and_recovery_gives_the_exact_sum() -> None:
    bits = 40
    secure = SimulatedSecureSum(50, 6, bits, [np.random.default_rng(r) for r in range(50)])
    rng = np.random.default_rng(9)
    residues = rng.integers(0, 1000, size=(50, 6, 20)).astype(np.uint64)
    messages = secure.mask(residues)
    present = np.ones((50, 6), dtype=bool)
    present[:, 2] = False
    exact = residues[:, [0, 1, 3, 4, 5]].sum(axis=1, dtype=np.uint64)
    garbage = secure.aggregate(messages, present, np.zeros((50, 20), dtype=np.uint64))
    assert _uniform_top_bits(garbage, bits) < CHI2_15_999
    np.testing.assert_array_equal(secure.aggregate(messages, present, secure.recover(present)), exact)
    everyone = np.ones((50, 6), dtype=bool)
    np.testing.assert_array_equal(
        secure.aggregate(messages, everyone, secure.recover(everyone)), residues.sum(axis=1, dtype=np.uint64)
    )


# -- reports and runs -------------------------------------------------------------------------
def test_a_round_with_unplanned_dropouts_reports_what_it_delivered() -> None:
    zeros = (np.zeros((2, 4, 3, 3)), np.zeros((2, 4, 3)))
    one_missing = np.ones((2, 4), dtype=bool)
    one_missing[1, 3] = False
    plain = _protocol(_cal(agents=4))
    plain.sync(*zeros)
    plain.sync(*zeros, present=one_missing)
    report = plain.privacy_report()
    assert report["min_present"] == 3 and report["short_rounds"] == 1
    assert report["epsilon_delivered"] > 1.0 and report["guarantee"] == NOT_FORMAL
    assert "3 of 4 silos" in str(report["guarantee_reason"])
    provisioned = _protocol(_cal(agents=4, dropouts=1))
    provisioned.sync(*zeros, present=one_missing)
    report = provisioned.privacy_report()
    assert report["short_rounds"] == 0 and report["guarantee"] == FORMAL and report["epsilon_delivered"] <= 1.0
    # a round that nobody answered (in run 0) carries no one's data: it does not lower the guarantee
    nobody = np.ones((2, 4), dtype=bool)
    nobody[0] = False
    empty = _protocol(_cal(agents=4))
    empty.sync(*zeros, present=nobody)
    report = empty.privacy_report()
    assert report["min_present"] == 4 and report["short_rounds"] == 1 and report["guarantee"] == FORMAL
    with pytest.raises(ValueError, match=r"present must have shape \(2, 4\)"):
        provisioned.sync(*zeros, present=np.ones(4, dtype=bool))


def _config(**alg: object):  # type: ignore[no-untyped-def]
    return config_from_dict(
        {
            "experiment": {"seed": 5, "runs": 4, "horizon": 200, "runs_per_task": 1},
            "environment": {"name": "gaussian-sphere", "agents": 6, "arms": 10, "dim": 4},
            "algorithms": [
                {"name": "fedlinucb", "label": "ddp", "batch": 10, "protocol": "distributed-dp", "delta": 1e-5, **alg}
            ],
        }
    )


def test_runs_are_bit_identical_across_workers_and_record_the_transcript() -> None:
    config = _config(colluders=1)
    one = run_experiment(config, workers=1, record_transcript=True)
    two = run_experiment(config, workers=2, record_transcript=True)
    a, b = one.algorithms["ddp"], two.algorithms["ddp"]
    np.testing.assert_array_equal(a.curves, b.curves)
    for (ra, ta), (rb, tb) in zip(a.transcripts, b.transcripts, strict=True):
        assert ra == rb and set(ta) == {"sync", "messages", "sigma", "sum", "present"}
        for key in ta:
            np.testing.assert_array_equal(ta[key], tb[key])  # type: ignore[literal-required]
        assert ta["messages"].dtype == np.uint64 and ta["messages"].shape == (20, 6, 14)
    assert a.report["guarantee"] == FORMAL and a.report["colluders"] == 1 and a.report["lazy"] is True


@pytest.mark.slow  # ~20 s each: 2 x 4,000 audited runs; CI runs it in its slow audit step
@pytest.mark.parametrize("mechanism", ["tree", "factorized"])
def test_distributed_dp_is_in_the_audit_and_an_under_noised_share_is_flagged(mechanism: str) -> None:
    """The lazy-only audit rows at eps = 2 (agents = 2, the aggregate view): shares shrunk to 0.3x
    raise the full-sensitivity pair's mu from ~0.43 to 1.45 (as for ldp,
    tests/test_audit_privacy.py), so 2,000 counted trials give a Clopper-Pearson bound above 2;
    the calibrated shares stay consistent (measured 0.45).  The factorized release spreads the
    user over the messages with the factor's column, and the linear test sees all of them."""
    views = [(c.view, c.algorithm.get("mechanism", "tree")) for c in releases.default_cases()]
    assert ("aggregate", mechanism) in views
    algorithm = releases._fedlinucb("distributed-dp", True, epsilon=2.0, mechanism=mechanism)
    case = AuditCase("ddp x0.3", algorithm, "aggregate", dataset="full-sensitivity", agents=2, noise_scale=0.3)
    shrunk = run_case(case, trials=2000, seed=0)
    assert shrunk.guarantee == FORMAL and shrunk.verdict == "violated" and shrunk.epsilon_lower_bound > 2.0
    honest = run_case(AuditCase("ddp", algorithm, "aggregate", dataset="full-sensitivity", agents=2), 2000, seed=0)
    assert honest.verdict == "consistent"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"colluders": 6}, r"colluders \+ dropouts must be <= agents - 1 = 5"),
        ({"dropouts": 6}, r"colluders \+ dropouts must be <= agents - 1 = 5"),
        ({"colluders": 3, "dropouts": 3}, r"colluders \+ dropouts must be <= agents - 1 = 5"),
        ({"colluders": -1}, "colluders must be an integer >= 0"),
        ({"granularity": 0.0}, "granularity must be > 0"),
        ({"granularity": "fine"}, "granularity must be a finite number > 0"),
        ({"modulus_bits": 65}, r"modulus_bits must be an integer in \[2, 64\]"),
        ({"modulus_bits": 8}, r"modulus_bits must be an integer in \[\d+, 64\] for these bounds"),
        ({"lazy": False}, "lazy must be true for protocol 'distributed-dp'"),
        ({"calibration": "paper"}, "calibration must be 'tight' for protocol 'distributed-dp'"),
        ({"protocol": "ldp", "colluders": 1}, "colluders applies to protocol 'distributed-dp' only"),
        ({"protocol": "none", "granularity": 0.1}, "granularity applies to protocol 'distributed-dp' only"),
    ],
)
def test_bad_parameters_get_one_line_errors(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        _config(**fields)
    assert "\n" not in str(err.value)


def test_list_shows_the_protocol_and_its_parameters() -> None:
    from fedbandits.registry import ALGORITHMS, PROTOCOLS

    assert "distributed-dp" in PROTOCOLS
    names = [name for name, _, _ in ALGORITHMS["fedlinucb"].parameters()]
    assert {"colluders", "dropouts", "modulus_bits", "granularity"} <= set(names)
    assert FedLinUCBParams(protocol="distributed-dp").lazy is True
