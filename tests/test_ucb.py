"""UCB scoring and the confidence radius: known answers."""

import math

import numpy as np
import pytest

from fedbandits.core import ConfidenceRadius, UCBScorer


def _score(features, inv, theta, beta):
    scorer = UCBScorer(features.shape[0], features.shape[1], features.shape[2])
    return scorer.scores(features.astype(np.float32), inv, theta, np.asarray(beta)), scorer


def test_scores_match_formula(rng):
    n, k, d = 4, 7, 3
    features = rng.standard_normal((n, k, d)).astype(np.float32)
    a = rng.standard_normal((n, d, d))
    inv = np.linalg.inv(a @ np.swapaxes(a, -1, -2) + np.eye(d))
    theta = rng.standard_normal((n, d))
    beta = rng.uniform(0, 2, size=n)
    scores, _ = _score(features, inv, theta, beta)
    x = features.astype(np.float64)
    expected = np.einsum("nkd,nd->nk", x, theta) + beta[:, None] * np.sqrt(np.einsum("nkd,nde,nke->nk", x, inv, x))
    np.testing.assert_allclose(scores, expected, rtol=2e-5, atol=2e-5)


def test_select_known_answers():
    # arm 0: mean 1.0, width 0 ; arm 1: mean 0.5, width 1 ; arm 2: mean 0.9, width 0.1
    features = np.array([[[1.0, 0.0], [0.5, 1.0], [0.9, 0.1]]] * 3, dtype=np.float32)
    inv = np.broadcast_to(np.diag([0.0, 1.0]), (3, 2, 2))  # width = |x_2|
    theta = np.broadcast_to([1.0, 0.0], (3, 2))
    scorer = UCBScorer(3, 3, 2)
    # beta=0: greedy on the mean; beta=1: 0.5+1 wins; beta=0.5: 1.0 vs 1.0 vs 0.95 -> first of the tie
    actions = scorer.select(features, inv, theta, np.array([0.0, 1.0, 0.5]))
    np.testing.assert_array_equal(actions, [0, 1, 0])


def test_theory_radius_known_value():
    radius = ConfidenceRadius(kind="theory", alpha=0.01)
    d, reg, n = 10, 1.0, 1000
    expected = math.sqrt(2 * math.log(2 / 0.01) + d * math.log(1 + n / (d * reg))) + 1.0
    assert radius(n, d, reg) == pytest.approx(expected, rel=1e-12)
    scaled = ConfidenceRadius(kind="theory", scale=0.1, alpha=0.01)
    assert scaled(n, d, reg) == pytest.approx(0.1 * expected, rel=1e-12)
    assert ConfidenceRadius(kind="constant", scale=0.3)(n, d, reg) == 0.3
    # grows with the number of samples
    assert radius(10 * n, d, reg) > radius(n, d, reg)
