"""HetoFedBandit (Blaser et al. 2024): the cliques, the homogeneity test, planted clusters, the group syncs."""

import numpy as np
import pytest

from fedbandits import ConfigError, config_from_dict
from fedbandits.algorithms.hetofedbandit import (
    HetoFedBandit,
    HetoFedBanditParams,
    homogeneity_pvalues,
    maximal_cliques,
)
from fedbandits.envs.heterogeneous import HeterogeneousClients, HeterogeneousClientsParams
from fedbandits.envs.synthetic import GapInstanceParams, GaussianSphereParams
from fedbandits.registry import ALGORITHMS, ENVIRONMENTS, PolicyContext


def test_maximal_cliques_known_graph():
    """A triangle 0-1-2 with a tail 2-3, a pair 5-6 and a lone vertex 4: the cliques may overlap (2)."""
    adjacent = np.zeros((7, 7), dtype=bool)
    for i, j in ((0, 1), (1, 2), (0, 2), (2, 3), (5, 6)):
        adjacent[i, j] = adjacent[j, i] = True
    assert maximal_cliques(adjacent) == [(0, 1, 2), (2, 3), (4,), (5, 6)]
    assert maximal_cliques(np.ones((3, 3), dtype=bool) & ~np.eye(3, dtype=bool)) == [(0, 1, 2)]


def test_homogeneity_test_accepts_equal_and_rejects_different_vectors():
    """Clients 0 and 1 share theta, client 2 is 1.0 away; 200 noise-free-ish samples each (noise 0.01,
    sigma 0.05: S under H0 is chi2(3) / 25, far below the 0.99 quantile 11.3)."""
    rng = np.random.default_rng(3)
    thetas = np.array([[0.6, 0.0, 0.8], [0.6, 0.0, 0.8], [-0.4, 0.0, 0.8]])
    grams, biases = [], []
    for theta in thetas:
        x = rng.standard_normal((200, 3))
        y = x @ theta + 0.01 * rng.standard_normal(200)
        grams.append(x.T @ x)
        biases.append(x.T @ y)
    p = homogeneity_pvalues(np.array(grams), np.array(biases), sigma=0.05)
    assert p[0, 1] > 0.5 and p[0, 2] < 1e-12 and p[1, 2] < 1e-12
    np.testing.assert_array_equal(p, p.T)


def test_planted_clusters_are_recovered_on_an_easy_instance():
    """8 clients in 2 clusters, d = 5, reward noise 0.1, 100 exploration rounds, the test's sigma 0.2:
    a homogeneous pair's S is chi2(5) / 4 (up to the clients' spread 6e-4), and a 0.01-level split needs
    chi2(5) > 4 x 15.1 = 60 (probability ~1e-11); heterogeneous pairs are >= 0.85 apart, estimated to
    ~0.01 from 100 samples, so S is in the thousands.  Every run must find exactly the planted groups."""
    env_params = HeterogeneousClientsParams(agents=8, clusters=2, dim=5, arms=10, noise_sd=0.1, instance_seed=2)
    rngs = [np.random.default_rng([9, r]) for r in range(3)]
    env = HeterogeneousClients(rngs, env_params)
    params = HetoFedBanditParams(explore=100, sigma=0.2)
    policy = ALGORITHMS["hetofedbandit"].factory(
        params, PolicyContext(3, 8, 10, 5, 200, [np.random.default_rng([7, r]) for r in range(3)], env=env)
    )
    assert isinstance(policy, HetoFedBandit)
    for _ in range(100):
        policy.step(env.next_round(), env)
    planted = sorted(tuple(np.flatnonzero(env.user_cluster == c).tolist()) for c in range(2))
    assert all(len(g) >= 2 for g in planted)
    assert policy.groups == [planted] * 3
    # then every client triggers (its buffer holds the exploration), both groups queue, one is served per
    # round: the first group's members hold the sum of its clean statistics
    policy.step(env.next_round(), env)
    assert (policy.sync_rounds == 1).all() and (policy.messages == 2 * len(planted[0])).all()
    first, second = list(planted[0]), list(planted[1])  # client 0's group queued first (FIFO by client)
    for r in range(3):
        for i in first:
            np.testing.assert_allclose(policy.gram[r, i], policy.clean_gram[r, first].sum(axis=0))
            assert policy.n[r, i] == policy.clean_n[r, first].sum() == 101 * len(first)
        np.testing.assert_allclose(policy.gram[r, second[0]], policy.clean_gram[r, second[0]])  # not served yet
    policy.step(env.next_round(), env)
    assert (policy.sync_rounds == 2).all() and (policy.messages == 2 * 8).all()


def test_bad_parameters_are_refused_in_one_line():
    for fields, message in (
        ({"explore": 0}, "explore must be"),
        ({"test_alpha": 1.0}, "test_alpha must be"),
        ({"threshold": 0.0}, "threshold must be"),
        ({"radius": "theory"}, "radius must be one of 'alpha-t', 'constant'"),
    ):
        with pytest.raises(ValueError, match=message) as err:
            HetoFedBanditParams(**fields)
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"explore must be an integer in \[1, horizon - 1 = 49\]"):
        config_from_dict(
            {
                "experiment": {"runs": 1, "horizon": 50},
                "environment": {"name": "heterogeneous-clients", "agents": 4, "clusters": 2},
                "algorithms": [{"name": "hetofedbandit"}],
            }
        )


def test_environments_state_the_noise_scale_a_default_should_fit():
    """The stated Gaussian noise sd where there is one, else half the expected rewards' range."""
    rngs = [np.random.default_rng(0)]
    assert HeterogeneousClients(rngs, HeterogeneousClientsParams()).noise_scale() == 0.1
    assert HeterogeneousClients(rngs, HeterogeneousClientsParams(noise_sd=0.0)).noise_scale() == 1.0  # [-1, 1]
    assert ENVIRONMENTS["gaussian-sphere"].factory(GaussianSphereParams(), rngs).noise_scale() == 0.5
    assert ENVIRONMENTS["gap-instance"].factory(GapInstanceParams(), rngs).noise_scale() == 0.5  # Bernoulli in [0, 1]


@pytest.mark.parametrize(("sigma", "groups"), [(None, 4), (0.5, 1)])
def test_the_default_sigma_fits_the_instance_it_ships_with(sigma, groups):
    """heterogeneous-clients at its defaults (30 clients in 4 clusters, noise 0.1), 2 runs to the end of the
    70 rounds of exploration: the default sigma is the instance's 0.1 and the test finds the 4 planted clusters;
    the former fixed default 0.5 divides S by 25 more and every pair passes as homogeneous (one group of 30)."""
    rngs = [np.random.default_rng([5, r]) for r in range(2)]
    env = HeterogeneousClients(rngs, HeterogeneousClientsParams())
    policy = ALGORITHMS["hetofedbandit"].factory(
        HetoFedBanditParams(sigma=sigma),
        PolicyContext(2, 30, 25, 25, 3000, [np.random.default_rng([6, r]) for r in range(2)], env=env),
    )
    assert isinstance(policy, HetoFedBandit)
    assert policy.sigma == (0.1 if sigma is None else sigma) and policy.report()["sigma"] == policy.sigma
    for _ in range(70):
        policy.step(env.next_round(), env)
    assert [len(g) for g in policy.groups] == [groups, groups]
    if sigma is None:
        planted = sorted(tuple(np.flatnonzero(env.user_cluster == c).tolist()) for c in range(4))
        assert policy.groups == [planted, planted]
