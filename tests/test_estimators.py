"""Off-policy estimators (issue #46): on synthetic logs whose policy value is known, each estimate
approaches the truth as n grows, and its interval covers the truth at its stated rate over seeded
repetitions; bad inputs are refused in one line."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedbandits.evaluation.estimators import ESTIMATORS, LoggedTerms, ess, estimate

K, DIM = 5, 3
THETA = np.random.default_rng(7).normal(size=(K, DIM))


def _softmax(scores: np.ndarray, temperature: float) -> np.ndarray:
    z = scores / temperature
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def _means(x: np.ndarray) -> np.ndarray:
    """E[r | x, a] = sigmoid(<theta_a, x>): Bernoulli rewards, not linear in x (so a linear model is wrong)."""
    return 1.0 / (1.0 + np.exp(-(x @ THETA.T)))


def _policies(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The logger (a soft policy over fixed scores, every p >= a few percent) and the target (greedier,
    preferring other actions), both (n, K)."""
    scores = x @ THETA.T
    logger = 0.7 * _softmax(-0.5 * scores, 1.0) + 0.3 / K
    target = _softmax(scores, 1.0)
    return logger, target


def _truth() -> float:
    """V(target) over the context distribution, by 2,000,000 contexts (its Monte Carlo error, about
    0.3 / sqrt(2e6) = 2e-4, is under a tenth of the smallest standard error the tests compare with)."""
    x = np.random.default_rng(12345).normal(size=(2_000_000, DIM))
    return float((_policies(x)[1] * _means(x)).sum(axis=1).mean())


TRUTH = _truth()


def _log(n: int, seed: int, model_bias: float = 0.15) -> LoggedTerms:
    """n logged rounds; the reward model is the true mean shifted by ``model_bias`` (a wrong model:
    DM is then biased by about that much, DR is not)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, DIM))
    logger, target = _policies(x)
    a = (rng.random(n)[:, None] > np.cumsum(logger, axis=1)).sum(axis=1)
    mu = _means(x)
    r = (rng.random(n) < mu[np.arange(n), a]).astype(float)
    q = mu + model_bias
    rows = np.arange(n)
    return LoggedTerms(r, logger[rows, a], target[rows, a], q[rows, a], (target * q).sum(axis=1))


def test_the_truth_is_what_the_test_log_makes() -> None:
    """The fixture's own check: on a large log, the mean of sum_a pi(a|x) mu(x, a) is TRUTH."""
    assert 0.2 < TRUTH < 0.8
    log = _log(200_000, 1, model_bias=0.0)
    assert estimate("dm", log).value == pytest.approx(TRUTH, abs=0.003)  # DM with the true model


@pytest.mark.parametrize("name", ["ips", "snips", "dr"])
def test_the_error_shrinks_with_n(name: str) -> None:
    """Mean absolute error over 20 seeds at n = 1,000 and 16,000: a root-n estimator's error falls by
    4; we ask for at least 2 (the mean of 20 absolute errors varies by about 0.75 / sqrt(20) = 17% of
    itself, so a ratio of 0.25 lands above 0.5 with negligible probability)."""
    errors = {
        n: np.mean([abs(estimate(name, _log(n, seed)).value - TRUTH) for seed in range(20)]) for n in (1000, 16000)
    }
    assert errors[16000] < 0.5 * errors[1000], errors
    assert errors[16000] < 0.02


def test_dm_with_a_wrong_model_is_biased_and_dr_is_not() -> None:
    """The point of DR: with a reward model off by +0.15, DM is off by about 0.15 and DR is unbiased."""
    dm = np.mean([estimate("dm", _log(4000, seed)).value for seed in range(10)])
    dr = np.mean([estimate("dr", _log(4000, seed)).value for seed in range(10)])
    assert dm - TRUTH == pytest.approx(0.15, abs=0.02)
    assert abs(dr - TRUTH) < 0.02


# 300 repetitions: with true coverage 0.95 the observed rate has standard deviation
# sqrt(0.95 * 0.05 / 300) = 0.0126; we accept [0.95 - 3 x 0.0126, 0.95 + 3 x 0.0126] = [0.912, 0.988]
# (the normal interval is asymptotic; at n = 2,000 with these weights its error is well inside that).
REPS, N = 300, 2000


@pytest.mark.parametrize("name", ["ips", "snips", "dr"])
def test_the_normal_interval_covers_the_truth_at_its_level(name: str) -> None:
    hits = [(e.low <= TRUTH <= e.high) for e in (estimate(name, _log(N, 100 + s)) for s in range(REPS))]
    assert 0.912 <= np.mean(hits) <= 0.988, np.mean(hits)


def test_the_bootstrap_interval_covers_the_truth_at_its_level() -> None:
    """100 repetitions of B = 200 resamples: accepted coverage [0.95 - 3 x 0.0218, 1] = [0.885, 1]
    (sqrt(0.95 x 0.05 / 100) = 0.0218; a percentile interval from 200 resamples is a little noisy)."""
    hits = []
    for s in range(100):
        e = estimate("snips", _log(N, 500 + s), interval="bootstrap", resamples=200, rng=np.random.default_rng(s))
        hits.append(e.low <= TRUTH <= e.high)
        assert e.interval == "bootstrap 95% (B = 200)"
    assert np.mean(hits) >= 0.885, np.mean(hits)


def test_the_bootstrap_is_reproducible_from_its_seed() -> None:
    log = _log(500, 3)
    one = estimate("dr", log, interval="bootstrap", resamples=50, rng=np.random.default_rng(9))
    two = estimate("dr", log, interval="bootstrap", resamples=50, rng=np.random.default_rng(9))
    assert one == two


def test_ess_and_a_uniform_logger() -> None:
    """A deterministic target on a uniform logger over K actions: weights K on the 1/K of rounds whose
    action it would take, 0 elsewhere, so ESS = n / K in expectation, and IPS is the mean reward of
    those rounds times their share times K (replay's value, Li et al. 2011)."""
    rng = np.random.default_rng(4)
    n = 50_000
    a = rng.integers(0, K, size=n)
    r = rng.random(n)
    target = (a == 0).astype(float)
    log = LoggedTerms(r, np.full(n, 1 / K), target)
    e = estimate("ips", log)
    assert e.ess == pytest.approx(n / K, rel=0.03)
    assert e.value == pytest.approx(r[a == 0].mean() * (a == 0).mean() * K)
    assert estimate("snips", log).value == pytest.approx(r[a == 0].mean())
    assert ess(np.ones(10)) == 10


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"propensities": np.array([0.5, 0.0])}, r"^propensity of round 1 must be in \(0, 1\], got 0$"),
        ({"propensities": np.array([1.5, 0.5])}, r"^propensity of round 0 must be in \(0, 1\], got 1.5$"),
        ({"target": np.array([0.5, -0.1])}, r"^target probability of round 1 must be in \[0, 1\], got -0.1$"),
        ({"rewards": np.array([0.0, np.nan])}, r"^rewards must be finite \(round 1\)$"),
        ({"rewards": np.array([0.0, 1.0, 1.0])}, r"^propensities must have shape \(3,\), got \(2,\)$"),
        ({"q_logged": np.array([0.1, 0.2])}, r"^give q_logged and q_target together"),
    ],
)
def test_bad_logs_are_refused_in_one_line(change: dict[str, np.ndarray], message: str) -> None:
    fields = {"rewards": np.array([0.0, 1.0]), "propensities": np.array([0.5, 0.5]), "target": np.array([1.0, 0.0])}
    with pytest.raises(ValueError, match=message):
        LoggedTerms(**{**fields, **change})


def test_bad_requests_are_refused_in_one_line() -> None:
    log = LoggedTerms(np.array([0.0, 1.0]), np.array([0.5, 0.5]), np.array([0.0, 0.0]))
    with pytest.raises(ValueError, match=r"^estimator 'dr' needs a reward model$"):
        estimate("dr", log)
    with pytest.raises(ValueError, match=r"^snips: the target policy puts no mass on any logged action"):
        estimate("snips", log)
    with pytest.raises(ValueError, match=r"^estimator must be one of 'dm', 'ips', 'snips', 'dr', got 'x'$"):
        estimate("x", log)
    with pytest.raises(ValueError, match=r"^a bootstrap interval needs a seeded Generator"):
        estimate("ips", log, interval="bootstrap")
    with pytest.raises(ValueError, match=r"^level must be in \(0, 1\), got 1.2$"):
        estimate("ips", log, level=1.2)
    assert set(ESTIMATORS) == {"dm", "ips", "snips", "dr"}
    assert math.isinf(estimate("ips", LoggedTerms(np.array([1.0]), np.array([1.0]), np.array([1.0]))).stderr)
