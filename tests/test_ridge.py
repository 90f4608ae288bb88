"""Ridge state algebra: Sherman-Morrison, Cholesky refresh, log-det, clipping."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedbandits.core import RidgeState, clip_norm, clip_rewards, spd_inverse


@settings(max_examples=60, deadline=None)
@given(
    dim=st.integers(1, 6),
    n_updates=st.integers(1, 40),
    reg=st.floats(0.05, 10.0),
    seed=st.integers(0, 2**32 - 1),
    scale=st.floats(0.01, 3.0),
)
def test_sherman_morrison_matches_direct_inverse(dim, n_updates, reg, seed, scale):
    rng = np.random.default_rng(seed)
    state = RidgeState((3, 2), dim, reg)
    gram = np.broadcast_to(reg * np.eye(dim), (3, 2, dim, dim)).copy()
    bias = np.zeros((3, 2, dim))
    for _ in range(n_updates):
        x = scale * rng.standard_normal((3, 2, dim))
        y = rng.standard_normal((3, 2))
        state.update(x, y)
        gram += x[..., :, None] * x[..., None, :]
        bias += x * y[..., None]
    np.testing.assert_allclose(state.gram, gram, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(state.bias, bias, rtol=1e-12, atol=1e-12)
    # the inverse kept by rank-1 updates equals a fresh inverse (relative to its conditioning)
    direct = np.linalg.inv(gram)
    cond = np.linalg.cond(gram).max()
    np.testing.assert_allclose(state.inv, direct, rtol=0, atol=1e-11 * cond * np.abs(direct).max())
    np.testing.assert_allclose(
        state.theta(), np.linalg.solve(gram, bias[..., None])[..., 0], atol=1e-10 * cond * max(1.0, np.abs(bias).max())
    )


def test_set_refreshes_inverse_and_broadcasts(rng):
    state = RidgeState((2, 3), 4, 1.0)
    a = rng.standard_normal((2, 1, 4, 4))
    gram = a @ np.swapaxes(a, -1, -2) + np.eye(4)
    bias = rng.standard_normal((2, 1, 4))
    state.set(gram, bias)
    assert state.gram.shape == (2, 3, 4, 4)
    np.testing.assert_array_equal(state.gram[:, 1], gram[:, 0])
    np.testing.assert_allclose(state.inv, np.broadcast_to(np.linalg.inv(gram), state.inv.shape), rtol=1e-10)
    np.testing.assert_array_equal(state.inv, np.swapaxes(state.inv, -1, -2))  # exactly symmetric


def test_logdet_matches_slogdet(rng):
    state = RidgeState((5,), 3, 0.5)
    for _ in range(10):
        state.update(rng.standard_normal((5, 3)), rng.standard_normal(5))
    sign, expected = np.linalg.slogdet(state.gram)
    assert (sign > 0).all()
    np.testing.assert_allclose(state.logdet(), expected, rtol=1e-12)


def test_spd_inverse_rejects_indefinite():
    with pytest.raises(ValueError, match="not positive definite"):
        spd_inverse(np.diag([1.0, -1.0]))


def test_clip_norm_counts_and_bounds(rng):
    x = rng.standard_normal((50, 4)) * rng.uniform(0, 3, size=(50, 1))
    clipped, count = clip_norm(x, 1.5)
    norms = np.linalg.norm(x, axis=1)
    assert count == int((norms > 1.5).sum()) > 0
    assert (np.linalg.norm(clipped, axis=1) <= 1.5 + 1e-12).all()
    inside = norms <= 1.5
    np.testing.assert_array_equal(clipped[inside], x[inside])  # untouched when within the bound
    # clipping keeps the direction
    np.testing.assert_allclose(
        clipped[~inside] / np.linalg.norm(clipped[~inside], axis=1, keepdims=True), x[~inside] / norms[~inside, None]
    )


def test_clip_norm_scales_float_rounding_without_counting_it():
    """A norm above the bound by float rounding only (float32 features of norm 1 in float64) is
    scaled, so the bound holds exactly, but not counted; 1e-5 above it counts."""
    x = np.array([[1.0 + 1e-7, 0.0], [0.0, 1.0 + 1e-5], [0.6, 0.0]])
    clipped, count = clip_norm(x, 1.0)
    assert count == 1
    np.testing.assert_array_equal(clipped, [[1.0, 0.0], [0.0, 1.0], [0.6, 0.0]])


def test_clip_rewards_counts():
    y, count = clip_rewards(np.array([-2.0, 0.0, 0.5, 1.0, 3.0]), 0.0, 1.0)
    np.testing.assert_array_equal(y, [0.0, 0.0, 0.5, 1.0, 1.0])
    assert count == 2
    with pytest.raises(ValueError, match="low < high"):
        clip_rewards(y, 1.0, 1.0)


def test_raise_eigenvalues_known_answer() -> None:
    from fedbandits.core.ridge import raise_eigenvalues

    rot = np.array([[np.cos(0.3), -np.sin(0.3)], [np.sin(0.3), np.cos(0.3)]])
    bad = rot @ np.diag([-1.0, 2.0]) @ rot.T
    good = np.eye(2) * 3.0
    out, n = raise_eigenvalues(np.stack([bad, good]), 0.5)
    assert n == 1
    np.testing.assert_allclose(out[0], rot @ np.diag([0.5, 2.0]) @ rot.T, atol=1e-12)
    np.testing.assert_array_equal(out[1], good)  # untouched
    same, n = raise_eigenvalues(good, 0.5)
    assert n == 0 and same is good
