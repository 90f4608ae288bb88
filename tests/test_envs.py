"""Synthetic environments: the instances the papers describe."""

import math

import numpy as np

from fedbandits.envs import GapInstance, GapInstanceParams, GaussianSphere, GaussianSphereParams
from fedbandits.sim.seeding import env_rngs


def test_gaussian_sphere_geometry():
    env = GaussianSphere(env_rngs(1, [0, 1, 2]), GaussianSphereParams(agents=4, arms=50, dim=6))
    for _ in range(3):
        rnd = env.next_round()
        assert rnd.features.shape == (3, 4, 50, 6) and rnd.features.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(rnd.features[..., :-1], axis=-1), math.sqrt(0.5), rtol=1e-6)
        np.testing.assert_array_equal(rnd.features[..., -1], np.float32(math.sqrt(0.5)))
        expected = np.einsum("rmkd,rd->rmk", rnd.features.astype(np.float64), env.theta.astype(np.float64))
        np.testing.assert_allclose(rnd.means, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(env.theta[:, :-1], axis=1), math.sqrt(0.5), rtol=1e-6)
    assert (np.abs(rnd.means) <= 1 + 1e-6).all()


def test_gaussian_sphere_direction_is_uniform():
    # the mean of a uniform direction on the sphere is 0; each coordinate of x[:-1] has
    # variance (1/2)/(d-1).  With n samples the std of the sample mean is sqrt(var/n); 5 sigma.
    env = GaussianSphere(env_rngs(2, [0]), GaussianSphereParams(agents=10, arms=1000, dim=5))
    x = env.next_round().features[0, ..., :-1].reshape(-1, 4).astype(np.float64)
    var = 0.5 / 4
    assert np.abs(x.mean(axis=0)).max() < 5 * math.sqrt(var / x.shape[0])
    np.testing.assert_allclose(x.var(axis=0), var, rtol=0.05)  # 5% >> sampling error ~ sqrt(2/1e4)


def test_gaussian_sphere_reward_noise_variance():
    # noise_sd = 0.5 => variance 0.25; over n = 40,000 draws the sample variance has
    # relative standard error sqrt(2/n) ~ 0.7%, so 4% is a > 5 sigma margin.
    env = GaussianSphere(env_rngs(3, [0, 1]), GaussianSphereParams(agents=200, arms=2, dim=3))
    noise = np.concatenate([env.next_round().noise.ravel().copy() for _ in range(100)])
    y = env.rewards(np.zeros_like(noise), noise)
    assert abs(y.mean()) < 5 * 0.5 / math.sqrt(y.size)
    assert abs(y.var() / 0.25 - 1) < 0.04


def test_gap_instance_means_and_norms():
    params = GapInstanceParams(agents=5, arms=20, dim=6, gap=0.15)
    env = GapInstance(env_rngs(4, [0, 1]), params)
    for _ in range(5):
        rnd = env.next_round()
        assert (np.linalg.norm(rnd.features, axis=-1) <= 1 + 1e-6).all()
        means = np.sort(rnd.means, axis=-1)
        assert ((means[..., :-1] >= 0.5 - 1e-5) & (means[..., :-1] <= 0.6 + 1e-5)).all()
        assert ((means[..., -1] >= 0.75 - 1e-5) & (means[..., -1] <= 0.85 + 1e-5)).all()
    # best arm position is spread over the K slots, not fixed
    positions = {int(p) for p in rnd.means.argmax(axis=-1).ravel()}
    assert len(positions) > 1


def test_gap_instance_bernoulli_rewards():
    env = GapInstance(env_rngs(5, [0]), GapInstanceParams(agents=1000, arms=4, dim=2))
    rnd = env.next_round()
    means = np.full((1, 1000), 0.3)
    y = env.rewards(means, rnd.noise)
    assert set(np.unique(y)) <= {0.0, 1.0}
    # binomial(1000, 0.3): std ~ 14.5, 5 sigma ~ 73
    assert abs(y.sum() - 300) < 73


def test_runs_are_independent_of_their_batch():
    """Run r's contexts depend only on (seed, r), not on which other runs share the batch."""
    alone = GaussianSphere(env_rngs(9, [2]), GaussianSphereParams(agents=3, arms=4, dim=3))
    batch = GaussianSphere(env_rngs(9, [0, 1, 2]), GaussianSphereParams(agents=3, arms=4, dim=3))
    for _ in range(3):
        a, b = alone.next_round(), batch.next_round()
        np.testing.assert_array_equal(a.features[0], b.features[2])
        np.testing.assert_array_equal(a.noise[0], b.noise[2])
