"""Private-FedLinUCB end to end: calibrated noise, clipping, seeds, regret ordering, bad input."""

import math

import numpy as np
import pytest
from scipy import stats

from fedbandits import ConfigError, config_from_dict
from fedbandits.algorithms import FedLinUCBParams
from fedbandits.envs import GaussianSphere, GaussianSphereParams
from fedbandits.privacy.mechanisms import pack
from fedbandits.privacy.tree import node_span
from fedbandits.registry import ALGORITHMS, PolicyContext
from fedbandits.sim.runner import run_experiment
from fedbandits.sim.seeding import env_rngs, noise_rngs


def _policy(params, runs=4, agents=5, arms=8, dim=3, horizon=64, seed=0, record=False):
    ctx = PolicyContext(runs, agents, arms, dim, horizon, noise_rngs(seed, list(range(runs)), 0), record)
    return ALGORITHMS["fedlinucb"].factory(params, ctx)


def _env(runs=4, agents=5, arms=8, dim=3, seed=0, noise_sd=0.5):
    params = GaussianSphereParams(agents=agents, arms=arms, dim=dim, noise_sd=noise_sd)
    return GaussianSphere(env_rngs(seed, list(range(runs))), params)


@pytest.mark.parametrize("protocol", ["ldp", "sdp-amplification"])
def test_released_noise_has_the_calibrated_variance(protocol):
    """Every silo's released p-sum minus the exact p-sum of its (clipped) batches is fresh
    N(0, sigma^2) noise on every packed entry, independent across silos, releases and entries:
    the sum of squared standardised errors is chi-square(n); accept between the 0.0005 and
    0.9995 quantiles (n ~ 2,900 here: a 5% error in sigma falls outside)."""
    calibration = "tight" if protocol == "ldp" else "paper"
    params = FedLinUCBParams(batch=4, protocol=protocol, epsilon=2.0, delta=1e-3, calibration=calibration)
    runs, agents, dim = 4, 5, 3
    policy = _policy(params, runs=runs, agents=agents, dim=dim, record=True)
    env = _env(runs=runs, agents=agents, dim=dim)
    batches = []
    inner = policy.protocol.sync
    policy.protocol.sync = lambda cov, bias: (batches.append(pack(cov, bias)), inner(cov, bias))[1]
    for _ in range(64):
        policy.step(env.next_round(), env)
    z = []
    for rec in policy.protocol.transcript:
        first, last = node_span(rec["sync"])
        exact = sum(batches[first - 1 : last])  # (R, M, P), before shuffling
        z.append(((rec["messages"] - exact) / rec["sigma"]).ravel())
    z = np.concatenate(z)
    assert stats.chi2.ppf(0.0005, z.size) < float(z @ z) < stats.chi2.ppf(0.9995, z.size)
    # and what the silos adopt is the server's prefix of those very messages (noise never redrawn)
    # after sync 16 (binary 10000) the prefix is the single level-4 node released at sync 16
    total = next(rec["messages"].sum(axis=1) for rec in policy.protocol.transcript if rec["sync"] == 16)
    np.testing.assert_allclose(pack(policy.synced_cov, policy.synced_bias), total, rtol=1e-12, atol=1e-9)


def test_clipping_bounds_and_counts():
    params = FedLinUCBParams(batch=4, protocol="ldp", epsilon=1.0, delta=1e-3, reward_bound=0.5, feature_bound=0.8)
    policy = _policy(params, horizon=32)
    env = _env(noise_sd=1.0)  # rewards often outside [-0.5, 0.5], features of norm 1 > 0.8
    seen = []
    inner = policy.protocol.sync
    policy.protocol.sync = lambda cov, bias: (seen.append((cov.copy(), bias.copy())), inner(cov, bias))[1]
    for _ in range(32):
        policy.step(env.next_round(), env)
    report = policy.report()
    assert report["observations"] == 32 * 4 * 5  # T x R x M: every observation is checked
    assert report["clipped_features"] == 32 * 4 * 5  # every feature had norm 1 > L = 0.8
    assert 0 < report["clipped_rewards"] < 32 * 4 * 5
    assert report["clipped"] == report["clipped_features"] + report["clipped_rewards"]
    for cov, bias in seen:
        # trace of a batch covariance = sum of ||x||^2 <= B L^2 per silo, |bias| <= B L B_r
        assert (np.trace(cov, axis1=-2, axis2=-1) <= 4 * 0.8**2 + 1e-9).all()
        assert (np.linalg.norm(bias, axis=-1) <= 4 * 0.8 * 0.5 + 1e-9).all()


def test_clipping_counts_merge_over_tasks_into_shares_of_every_observation():
    """The counts are sums over tasks; ``observations`` (the shares' denominator) is R x M x T."""
    runs, agents, horizon = 3, 2, 40
    algorithm = {"name": "fedlinucb", "batch": 4, "protocol": "ldp", "feature_bound": 0.9, "label": "ldp"}
    reports = []
    for per_task in (1, 3):  # three tasks of one run, one task of three
        config = config_from_dict(
            {
                "experiment": {"name": "clip", "seed": 5, "runs": runs, "horizon": horizon, "runs_per_task": per_task},
                "environment": {"name": "gaussian-sphere", "agents": agents, "arms": 4, "dim": 3},
                "algorithms": [algorithm],
            }
        )
        reports.append(run_experiment(config).algorithms["ldp"].report)
    for report in reports:
        assert report["observations"] == runs * agents * horizon
        assert report["clipped_features"] == runs * agents * horizon  # norms 1 > 0.9: every one
        assert 0 < report["clipped_rewards"] < report["observations"]
    assert reports[0]["clipped_rewards"] == reports[1]["clipped_rewards"]  # the grouping changes nothing


def test_lazy_variant_acts_on_private_statistics_only():
    params = FedLinUCBParams(batch=5, protocol="ldp", epsilon=1.0, delta=1e-3, lazy=True)
    policy = _policy(params, horizon=30)
    env = _env()
    for t in range(1, 31):
        before = policy.state.gram.copy()
        policy.step(env.next_round(), env)
        if t % 5:
            np.testing.assert_array_equal(policy.state.gram, before)  # no unreleased data used
        else:
            assert not np.array_equal(policy.state.gram, before)
    assert policy.radius_samples() == 5 * 30


#: the label of _private_config's entry (it states none: the default names protocol and epsilon)
PRIVATE_LABEL = "fedlinucb ldp eps=1"


def _private_config(seed=5, noise_seed=None, horizon=60, **alg):
    exp = {"seed": seed, "runs": 2, "horizon": horizon}
    if noise_seed is not None:
        exp["noise_seed"] = noise_seed
    return config_from_dict(
        {
            "experiment": exp,
            "environment": {"name": "gaussian-sphere", "agents": 4, "arms": 10, "dim": 4},
            "algorithms": [{"name": "fedlinucb", "batch": 10, "protocol": "ldp", "epsilon": 1.0, "delta": 1e-3, **alg}],
        }
    )


def test_noise_seed_changes_only_the_privacy_noise():
    a = run_experiment(_private_config(noise_seed=1)).algorithms[PRIVATE_LABEL]
    b = run_experiment(_private_config(noise_seed=2)).algorithms[PRIVATE_LABEL]
    c = run_experiment(_private_config(noise_seed=1)).algorithms[PRIVATE_LABEL]
    np.testing.assert_array_equal(a.curves, c.curves)
    # identical environments and decisions up to the first release (t = 10)...
    np.testing.assert_array_equal(a.curves[:, :10], b.curves[:, :10])
    # ... different afterwards
    assert not np.array_equal(a.curves[:, -1], b.curves[:, -1])
    # the default noise seed is the experiment seed
    d = run_experiment(_private_config()).algorithms[PRIVATE_LABEL]
    e = run_experiment(_private_config(noise_seed=5)).algorithms[PRIVATE_LABEL]
    np.testing.assert_array_equal(d.curves, e.curves)


def test_transcript_records_every_release():
    res = run_experiment(_private_config(), record_transcript=True).algorithms[PRIVATE_LABEL]
    assert [run for run, _ in res.transcripts] == [0, 1]
    data = res.transcripts[0][1]
    assert data["sync"].tolist() == list(range(1, 7))
    assert data["messages"].shape == (6, 4, 4 * 5 // 2 + 4)
    assert (data["sigma"] > 0).all()


def test_report_fields():
    res = run_experiment(_private_config(calibration="paper")).summary()["algorithms"][0]
    for key in ("protocol", "calibration", "epsilon", "delta", "epsilon_spent", "noise_std", "clipped"):
        assert key in res, key
    assert res["protocol"] == "ldp" and res["calibration"] == "paper"
    assert 0 < res["epsilon_spent"] <= res["epsilon"]  # the paper's LDP closed form is conservative


@pytest.fixture(scope="module")
def ordering():
    """Figure 2a's comparison at M = 100, scaled down (T = 600, K = 20, eps = 1, delta = 1e-4),
    with the papers' closed-form calibrations, 4 runs on common random numbers."""
    algs = [{"name": "fedlinucb", "label": "non-private"}]
    for proto in ("sdp-amplification", "ldp"):
        algs.append(
            {
                "name": "fedlinucb",
                "label": proto,
                "protocol": proto,
                "calibration": "paper",
                "epsilon": 1.0,
                "delta": 1e-4,
            }
        )
    for eps in (0.3, 3.0, 30.0):
        algs.append({"name": "fedlinucb", "label": f"ldp eps={eps}", "protocol": "ldp", "epsilon": eps, "delta": 1e-4})
    config = config_from_dict(
        {
            "experiment": {"seed": 21, "runs": 4, "horizon": 600},
            "environment": {"name": "gaussian-sphere", "agents": 100, "arms": 20},
            "algorithms": algs,
        }
    )
    return {lab: r.final_regret for lab, r in run_experiment(config).algorithms.items()}


def _t(results, low, high):
    # paired t statistic over 4 runs (3 degrees of freedom): t > 4.5 has probability < 1% one-sided
    diff = results[high] - results[low]
    return diff.mean() / (diff.std(ddof=1) / math.sqrt(diff.size))


def test_regret_order_nonprivate_sdp_ldp(ordering):
    assert _t(ordering, "non-private", "sdp-amplification") > 4.5
    assert _t(ordering, "sdp-amplification", "ldp") > 4.5


def test_regret_falls_as_epsilon_grows(ordering):
    assert _t(ordering, "ldp eps=3.0", "ldp eps=0.3") > 4.5
    assert _t(ordering, "ldp eps=30.0", "ldp eps=3.0") > 4.5


BASE = {
    "experiment": {"horizon": 100},
    "environment": {"name": "gaussian-sphere", "agents": 4},
}


@pytest.mark.parametrize(
    ("alg", "pattern"),
    [
        ({"protocol": "ldp", "epsilon": 0.0}, r"epsilon must be in \(0.0, 1000.0\], got 0.0"),
        ({"protocol": "ldp", "epsilon": -1.0}, r"epsilon must be in \(0.0, 1000.0\], got -1.0"),
        # a budget above 1000 protects nothing and would ask the accountant for gigabytes
        ({"protocol": "ldp", "epsilon": 1675573.0}, r"epsilon must be in \(0.0, 1000.0\], got 1675573.0"),
        ({"protocol": "ldp", "delta": 0.0}, r"delta must be in \(0\.0, 1\.0\)"),
        ({"protocol": "ldp", "delta": 1.0}, r"delta must be in \(0\.0, 1\.0\)"),
        ({"protocol": "ldp", "batch": 0}, r"batch must be an integer >= 1"),
        ({"protocol": "ldp", "batch": 101}, r"batch must be an integer in \[1, horizon = 100\]"),
        ({"protocol": "laplace"}, r"protocol must be one of 'none', 'ldp'"),
        ({"protocol": "ldp", "calibration": "loose"}, r"calibration must be one of 'paper', 'tight'"),
        ({"protocol": "ldp", "adjacency": "swap"}, r"adjacency must be one of"),
        ({"protocol": "ldp", "feature_bound": 0.0}, r"feature_bound must be > 0"),
        # Lemma F.2 cannot apply with 4 silos: ln(M / (16 ln(2/delta))) < 0
        ({"protocol": "sdp-amplification", "epsilon": 0.5, "delta": 1e-4}, r"Lemma F\.2|condition"),
        ({"protocol": "sdp-vector-sum", "epsilon": 50.0, "delta": 0.1}, r"epsilon=50\.0 too large"),
    ],
)
def test_bad_privacy_requests_are_refused(alg, pattern):
    with pytest.raises(ConfigError, match=pattern):
        config_from_dict({**BASE, "algorithms": [{"name": "fedlinucb", **alg}]})


# -- the noise regularizer (regularizer = "noise") ------------------------------------------------
def test_noise_norm_bound_holds_for_symmetric_gaussian_noise() -> None:
    """Lambda = s (2 sqrt(d) + 2 sqrt(ln(K / alpha))) bounds the operator norm of K symmetric noise
    matrices with probability >= 1 - alpha.  2,000 draws of d = 10, s = 1 (K = 1, alpha = 0.5: Lambda =
    6.32 + 2 sqrt(ln 2) = 7.99): a violation count above 1,000 would refute it; the bound is not
    loose either -- the largest norm seen must exceed 0.6 Lambda (E||N|| is about 2 sqrt(d) s = 6.3)."""
    from fedbandits.algorithms.fedlinucb import noise_norm_bound

    rng = np.random.default_rng(11)
    d, draws = 10, 2000
    upper = np.triu(rng.standard_normal((draws, d, d)))
    noise = upper + np.triu(upper, 1).transpose(0, 2, 1)
    norms = np.abs(np.linalg.eigvalsh(noise)).max(axis=1)
    bound = noise_norm_bound(1.0, d, 1, 0.5)
    assert bound == pytest.approx(2 * np.sqrt(10) + 2 * np.sqrt(np.log(2)))
    assert (norms > bound).sum() <= draws // 2 and norms.max() > 0.6 * bound


def test_noise_regularizer_is_the_psd_shift_in_simulator_and_deployment() -> None:
    from fedbandits.algorithms.fedlinucb import NOISE_SHIFT, calibrate_protocol, noise_norm_bound
    from fedbandits.federation.spec import make_spec
    from fedbandits.registry import prefix_noise_std

    config = config_from_dict(
        {
            "experiment": {"seed": 1, "runs": 1, "horizon": 400},
            "environment": {"name": "gaussian-sphere", "agents": 3, "arms": 5, "dim": 3},
            "algorithms": [{"name": "fedlinucb", "batch": 20, "protocol": "ldp", "regularizer": "noise"}],
        }
    )
    params = config.algorithms[0].params
    cal = calibrate_protocol(params, horizon=400, agents=3, dim=3)
    std = cal.sigma_cov * np.sqrt(3 * cal.prefix_factor)  # 3 silos, at most `nodes` p-sums per prefix
    assert prefix_noise_std(cal, 3) == pytest.approx(std)
    expected = NOISE_SHIFT * noise_norm_bound(std, 3, 20, params.alpha)
    assert make_spec(config).regularizer() == pytest.approx(expected) and expected > 100
    policy = _policy(params, runs=1, agents=3, arms=5, dim=3, horizon=400)
    assert policy.reg_value == pytest.approx(expected)  # the simulator's learner uses the same lambda
