"""Clustered instances, the FCLUB tree privatizer, clustering helpers and bad input (issue #5)."""

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse import csr_array
from scipy.sparse.csgraph import connected_components

from fedbandits import config_from_dict
from fedbandits.algorithms.clustering import adjusted_rand_index, components, confidence_width_f
from fedbandits.config import ConfigError
from fedbandits.envs.clustered import ClusteredSynthetic, ClusteredSyntheticParams
from fedbandits.envs.movielens import MovieLensClusters, MovieLensClustersParams
from fedbandits.privacy.accounting import gaussian_epsilon
from fedbandits.privacy.cluster_tree import (
    ClusterTreePrivatizer,
    composed_epsilon,
    node_mu,
    node_variance,
    rho_bound,
    tree_nodes,
)
from fedbandits.privacy.tree import max_nodes_per_datum
from fedbandits.sim.seeding import env_rngs

# -- the synthetic clustered instance -------------------------------------------------------------


def test_instance_structure_and_means() -> None:
    params = ClusteredSyntheticParams(users=23, clusters=4, agents=5, arms=7, dim=6, gap=0.6)
    env = ClusteredSynthetic(env_rngs(0, [0, 1]), params)
    assert env.n_agents == 1 and env.gap >= 0.6
    np.testing.assert_allclose(np.linalg.norm(env.centres, axis=1), 1.0, atol=1e-6)
    sizes = np.bincount(env.user_cluster, minlength=4)
    assert sizes.sum() == 23 and sizes.max() - sizes.min() <= 1  # dealt round-robin
    assert sorted(np.concatenate(env.server_users).tolist()) == list(range(23))
    for s, members in enumerate(env.server_users):
        assert (env.user_server[members] == s).all()
    for _ in range(20):
        rnd = env.next_round()
        assert rnd.features.shape == (2, 1, 7, 6) and rnd.features.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(rnd.features, axis=-1), 1.0, atol=1e-6)
        theta = env.centres[env.user_cluster[env.last_users]]
        np.testing.assert_allclose(rnd.means, np.einsum("rmkd,rmd->rmk", rnd.features, theta), atol=1e-6)
        assert ((rnd.means >= 0) & (rnd.means <= 1)).all()
        y = env.rewards(rnd.means[..., 0], rnd.noise)
        assert set(np.unique(y)) <= {0.0, 1.0}


def test_single_arrivals_are_uniform_over_users() -> None:
    """n = 10 users, 20,000 arrivals: each count is Binomial(20000, 0.1), sd 42; allow 5 sd."""
    env = ClusteredSynthetic(env_rngs(3, [0]), ClusteredSyntheticParams(users=10, clusters=2, agents=3, dim=3))
    counts = np.zeros(10)
    for _ in range(20_000):
        env.next_round()
        counts[env.last_users[0, 0]] += 1
    assert np.abs(counts - 2000).max() < 5 * math.sqrt(20_000 * 0.1 * 0.9)


def test_per_server_arrivals_and_reproducibility() -> None:
    params = ClusteredSyntheticParams(users=12, clusters=3, agents=4, dim=4, arrivals="per-server")
    a = ClusteredSynthetic(env_rngs(5, [0, 1]), params)
    b = ClusteredSynthetic(env_rngs(5, [0, 1]), params)
    assert a.n_agents == 4
    for _ in range(5):
        ra, rb = a.next_round(), b.next_round()
        np.testing.assert_array_equal(ra.features, rb.features)
        assert (a.user_server[a.last_users] == np.arange(4)).all()  # slot l serves server l


def test_expected_reward_matrix_is_full_rank() -> None:
    """E[x x^T] = diag(I/(2(d-1)), 1/2): lambda_x = 1/(2(d-1)) (Assumption 2); 40,000 items, tol 0.01."""
    env = ClusteredSynthetic(env_rngs(1, [0]), ClusteredSyntheticParams(users=4, clusters=2, agents=1, dim=5, arms=40))
    acc = np.zeros((5, 5))
    for _ in range(1000):
        x = env.next_round().features[0, 0].astype(np.float64)
        acc += x.T @ x
    acc /= 40_000
    np.testing.assert_allclose(acc, np.diag([1 / 8] * 4 + [0.5]), atol=0.01)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"users": 3, "clusters": 4}, r"clusters must be an integer in \[1, 3\], got 4"),
        ({"users": 3, "clusters": 2, "agents": 4}, r"agents must be an integer in \[1, 3\], got 4"),
        ({"gap": 0.0}, r"gap must be in \(0.0, 1.2\]"),
        ({"gap": 1.5}, r"gap must be in \(0.0, 1.2\]"),
        ({"arrivals": "poisson"}, "arrivals must be one of 'single', 'per-server'"),
        ({"dim": 1}, r"dim must be an integer >= 2"),
    ],
)
def test_instance_bad_input(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClusteredSyntheticParams(**kwargs)


def test_movielens_single_arrivals(tmp_path: Path) -> None:
    lines = []
    for u in range(1, 9):
        liked = (1, 2, 3) if u <= 4 else (4, 5, 6)
        lines += [f"{u},{i},{5.0 if i in liked else 1.0},0" for i in range(1, 7)]
    path = tmp_path / "ratings.csv"
    path.write_text("\n".join(lines) + "\n")
    common = {"path": str(path), "agents": 2, "arms": 3, "dim": 3, "users": 8, "items": 6, "clusters": 2}
    env = MovieLensClusters(env_rngs(0, [0]), MovieLensClustersParams(**common, arrivals="single"))
    assert env.n_agents == 1 and env.n_servers == 2
    seen = set()
    for _ in range(200):
        rnd = env.next_round()
        seen.add(int(env.last_users[0, 0]))
        theta = env.centres[env.user_cluster[env.last_users]]
        np.testing.assert_allclose(rnd.means, np.einsum("rmkd,rmd->rmk", rnd.features, theta), atol=1e-6)
    assert seen == set(range(8))  # P(a user never arrives in 200) = 8 (7/8)^200 < 1e-10
    assert MovieLensClusters(env_rngs(0, [0]), MovieLensClustersParams(**common)).n_agents == 2
    with pytest.raises(ValueError, match="arrivals must be one of"):
        MovieLensClustersParams(**common, arrivals="all")


# -- the tree privatizer (Algorithm 5) ------------------------------------------------------------


def test_node_count_and_formulas() -> None:
    # Algorithm 5 line 2: nu = ceil(log2(t_c + 1)) + 1; exact: floor(log2(t_c + 1)) + 1
    assert [tree_nodes(t, "paper") for t in (0, 1, 2, 3, 6, 7)] == [1, 2, 3, 3, 4, 4]
    assert [tree_nodes(t, "exact") for t in (0, 1, 2, 3, 6, 7)] == [1, 2, 2, 3, 3, 4]
    assert all(tree_nodes(t, "exact") == max_nodes_per_datum(t + 1) <= tree_nodes(t, "paper") for t in range(500))
    assert node_variance(2.0, 0.1, 5) == pytest.approx(64 * 5 * math.log(20) ** 2 / 4)
    expected_rho = 8 * math.sqrt(2) * 5 * math.log(40) * (4 * math.sqrt(10) + 2 * math.log(2 * 4 * 5 / 0.01)) / 2
    assert rho_bound(2.0, 0.1, 5, 10, 4, 5, 0.01) == pytest.approx(expected_rho)
    assert node_mu(4.0, 1.0, 1.0) == 0.5
    assert composed_epsilon(9, 4.0, 1e-3, 1.0, 1.0) == pytest.approx(gaussian_epsilon(1.5, 1e-3))
    assert composed_epsilon(0, 4.0, 1e-3, 1.0, 1.0) == 0.0


def test_node_noise_variance_matches_formula() -> None:
    """Entry variance of N = (Nbar + Nbar^T)/sqrt(2): sigma^2 off the diagonal, 2 sigma^2 on it.

    sigma^2 = 64 nu log(2/delta)^2 / eps^2 (a variance).  4000 nodes of a 3 x 3 matrix give 12,000
    off-diagonal (upper) and 12,000 diagonal samples; a sample variance of k normals has relative
    sd sqrt(2/k) = 1.3%, so 5% is ~4 sd.  Using sigma (not sigma^2) as the std would be off by 100x.
    """
    var = node_variance(1.0, 0.1, 4)
    tree = ClusterTreePrivatizer(2, math.sqrt(var), np.random.default_rng(0))
    nodes = np.stack([tree._fresh() for _ in range(4000)])
    iu = np.triu_indices(3, 1)
    off = nodes[:, iu[0], iu[1]].ravel()
    diag = np.diagonal(nodes, axis1=1, axis2=2).ravel()
    assert off.var() / var == pytest.approx(1.0, abs=0.05)
    assert diag.var() / (2 * var) == pytest.approx(1.0, abs=0.05)
    np.testing.assert_array_equal(nodes, nodes.transpose(0, 2, 1))


def test_prefix_noise_reuses_nodes_and_never_redraws() -> None:
    """Release k's noise is the sum of the nodes of the one bits of k, each drawn once."""
    dim, std = 2, 1.0
    tree = ClusterTreePrivatizer(dim, std, np.random.default_rng(42))
    replay = np.random.default_rng(42)
    nodes: dict[int, np.ndarray] = {}
    for k in range(1, 40):
        h, hv = tree.next_noise()
        raw = replay.standard_normal((dim + 1, dim + 1)) * std
        nodes[(k & -k).bit_length() - 1] = (raw + raw.T) * math.sqrt(0.5)
        total = sum(nodes[j] for j in range(k.bit_length()) if (k >> j) & 1)
        np.testing.assert_allclose(h, total[:dim, :dim], rtol=0, atol=1e-12)
        np.testing.assert_allclose(hv, total[:dim, dim], rtol=0, atol=1e-12)
        assert tree.draws == k  # exactly one fresh node per release
    assert tree.nodes_per_datum() == max_nodes_per_datum(39)


# -- helpers ---------------------------------------------------------------------------------------


def test_adjusted_rand_index_known_values() -> None:
    assert adjusted_rand_index([0, 0, 1, 1], [5, 5, 3, 3]) == 1.0
    assert adjusted_rand_index([0, 0, 1, 1], [0, 1, 0, 1]) == pytest.approx(-0.5)
    # sklearn's documented example: ARI([0,0,1,1],[0,0,1,2]) = 0.5714...
    assert adjusted_rand_index([0, 0, 1, 1], [0, 0, 1, 2]) == pytest.approx(4 / 7)
    assert adjusted_rand_index([0, 0, 0], [1, 1, 1]) == 1.0


def test_confidence_width_and_components() -> None:
    assert confidence_width_f(0) == 1.0
    np.testing.assert_allclose(confidence_width_f(np.array([0.0, 9.0])), [1.0, math.sqrt((1 + math.log(10)) / 10)])
    adj = np.zeros((5, 5), dtype=bool)
    adj[0, 1] = adj[1, 0] = adj[3, 4] = adj[4, 3] = True
    count, labels = components(adj)
    assert count == 3 and labels[0] == labels[1] and labels[3] == labels[4] and len({*labels.tolist()}) == 3


def test_components_number_like_scipy() -> None:
    """The label of a component is its rank by smallest vertex, exactly as scipy's connected_components
    (FCLUB numbers local clusters, and so draws their privatizers' noise, in this order)."""
    rng = np.random.default_rng(11)
    for trial in range(3000):
        n = int(rng.integers(0, 45))
        adj = rng.random((n, n)) < rng.choice([0.0, 0.02, 0.05, 0.1, 0.3, 1.0])
        if trial % 2:
            adj |= adj.T
        count, labels = components(adj)
        expect_count, expect = connected_components(csr_array(adj), directed=False)
        assert count == expect_count and labels.dtype == np.int64
        np.testing.assert_array_equal(labels, expect)
    path = np.zeros((60, 60), dtype=bool)
    order = rng.permutation(60)
    path[order[:-1], order[1:]] = True  # one long path, directed edges only: still one component
    assert components(path)[0] == 1 and not components(path)[1].any()


# -- bad input through configs ---------------------------------------------------------------------


def _config(alg: dict[str, object], **env: object) -> dict[str, object]:
    return {
        "experiment": {"horizon": 10},
        "environment": {"name": "clustered-synthetic", "users": 8, "clusters": 2, "agents": 2, "dim": 3, **env},
        "algorithms": [alg],
    }


@pytest.mark.parametrize(
    ("alg", "message"),
    [
        ({"name": "fclub", "alpha1": 0.0}, r"alpha1 must be > 0.0, got 0.0"),
        ({"name": "fclub-dc", "alpha2": -1.0}, r"alpha2 must be > 0.0, got -1.0"),
        ({"name": "fclub-dc", "upload": 1.0}, r"upload must be > 1.0, got 1.0"),
        ({"name": "cdp-fclub-dc", "download": 0.5}, r"download must be > 1.0, got 0.5"),
        ({"name": "homo-dc", "upload": 1.0}, r"upload must be > 1.0, got 1.0"),
        ({"name": "cdp-fclub-dc", "epsilon": 0.0}, r"epsilon must be > 0.0, got 0.0"),
        ({"name": "cdp-fclub-dc", "delta": 1.0}, r"delta must be in \(0.0, 1.0\)"),
        ({"name": "cdp-fclub-dc", "calibration": "tight"}, "calibration must be one of 'paper', 'exact'"),
        ({"name": "club", "alpha1": 0.0}, r"alpha1 must be > 0.0, got 0.0"),
        ({"name": "sclub", "beta": -1.0}, r"beta must be >= 0.0, got -1.0"),
    ],
)
def test_bad_algorithm_parameters(alg: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_dict(_config(alg))


def test_bad_structure_in_config() -> None:
    with pytest.raises(ConfigError, match=r"clusters must be an integer in \[1, 8\], got 9"):
        config_from_dict(_config({"name": "fclub"}, clusters=9))
    with pytest.raises(ConfigError, match=r"agents must be an integer in \[1, 8\], got 9"):
        config_from_dict(_config({"name": "fclub"}, agents=9))


def test_clustering_policy_needs_a_clustered_environment() -> None:
    from fedbandits.sim.runner import run_experiment

    cfg = config_from_dict(
        {
            "experiment": {"horizon": 5},
            "environment": {"name": "gaussian-sphere", "agents": 2, "arms": 3, "dim": 3},
            "algorithms": [{"name": "fclub"}],
        }
    )
    with pytest.raises(ValueError, match="clustering policies need a clustered environment"):
        run_experiment(cfg)
