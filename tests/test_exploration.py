"""Randomized exploration's propensities (issue #46): each rule's stated probability of an arm is the
frequency with which it takes that arm, exactly for the closed forms and within the stated error for
Thompson sampling's Monte Carlo estimate."""

from __future__ import annotations

import numpy as np
import pytest

from fedbandits.core.exploration import (
    cholesky_of_inverse,
    draw,
    greedy_distribution,
    softmax_distribution,
    thompson_draw,
    thompson_propensity,
)

DRAWS = 200_000


def _frequencies(choices: np.ndarray, k: int) -> np.ndarray:
    return np.bincount(choices, minlength=k) / len(choices)


def _close(freq: np.ndarray, probs: np.ndarray, extra: np.ndarray | float = 0.0) -> None:
    """Each frequency of DRAWS choices within 4.5 standard errors sqrt(p (1 - p) / DRAWS) (plus the
    stated error of an estimated p) of its probability: over the K arms of a test a false alarm has
    probability below 1e-4."""
    tolerance = 4.5 * np.sqrt(probs * (1 - probs) / DRAWS + np.square(extra)) + 1e-12
    assert (np.abs(freq - probs) <= tolerance).all(), (freq, probs, tolerance)


@pytest.mark.parametrize("rule", ["epsilon-greedy", "softmax"])
def test_the_closed_form_propensities_are_the_frequencies(rule: str) -> None:
    scores = np.array([[0.3, 0.9, 0.9, -0.2, 0.5]])
    probs = greedy_distribution(scores, 0.2) if rule == "epsilon-greedy" else softmax_distribution(scores, 0.25)
    assert probs.sum() == pytest.approx(1.0)
    if rule == "epsilon-greedy":  # a tie goes to the lowest index, as the UCB choice does
        assert probs[0, 1] == pytest.approx(0.84) and probs[0, 2] == pytest.approx(0.04)
    u = np.random.default_rng(1).random(DRAWS)
    choices = draw(np.repeat(probs, DRAWS, axis=0), u)
    _close(_frequencies(choices, 5), probs[0])


def test_draw_never_leaves_the_arms() -> None:
    probs = np.array([[0.5, 0.5 - 1e-9]])  # round-off leaves the sum short of 1
    assert draw(probs, np.array([0.9999999999])).tolist() == [1]


def _posterior(k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    d = 3
    x = rng.normal(size=(1, k, d))
    theta = rng.normal(size=(1, d)) * 0.3
    a = rng.normal(size=(d, d))
    inv = np.linalg.inv(a @ a.T + np.eye(d))[None]
    return x, theta, cholesky_of_inverse(inv)


@pytest.mark.parametrize("k", [2, 5])
def test_thompson_sampling_propensities_are_its_frequencies(k: int) -> None:
    """Thompson sampling's own choices over DRAWS posterior draws against its stated propensity: exact
    for K = 2, a Monte Carlo estimate from 20,000 other draws (error stated and allowed for) for K = 5."""
    x, theta, chol = _posterior(k, seed=k)
    rng = np.random.default_rng(7)
    z = rng.normal(size=(DRAWS, 3))
    n = DRAWS
    scores = thompson_draw(np.repeat(x, n, axis=0), np.repeat(theta, n, axis=0), np.repeat(chol, n, axis=0), 0.8, z)
    freq = _frequencies(scores.argmax(axis=1), k)
    normals = np.random.default_rng(8).normal(size=(1, 20_000, 3))
    probs, errors = zip(
        *(thompson_propensity(x, theta, chol, 0.8, np.array([a]), normals) for a in range(k)), strict=True
    )
    probs_arr, errors_arr = np.concatenate(probs), np.concatenate(errors)
    if k == 2:
        assert (errors_arr == 0).all() and probs_arr.sum() == pytest.approx(1.0)
    _close(freq, probs_arr, errors_arr)
    assert 0.05 < probs_arr.max() < 0.99  # the test posterior really explores
