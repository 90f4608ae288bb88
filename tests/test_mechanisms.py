"""Tree randomizer, analyzer and shuffler: exact sums without noise, calibrated noise with it."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from fedbandits.privacy.mechanisms import (
    TreeAnalyzer,
    TreeRandomizer,
    pack,
    packed_width,
    protocol_streams,
    shuffle_messages,
    unpack,
)
from fedbandits.privacy.tree import prefix_levels


def _rngs(n, seed=0):
    return [np.random.Generator(np.random.SFC64(seed + i)) for i in range(n)]


def test_pack_unpack_round_trip(rng):
    a = rng.standard_normal((3, 4, 5, 5))
    cov = a + np.swapaxes(a, -1, -2)
    bias = rng.standard_normal((3, 4, 5))
    packed = pack(cov, bias)
    assert packed.shape == (3, 4, packed_width(5)) == (3, 4, 20)
    back_cov, back_bias = unpack(packed, 5)
    np.testing.assert_array_equal(back_cov, cov)
    np.testing.assert_array_equal(back_bias, bias)


@pytest.mark.parametrize("releases", [1, 5, 16, 37])
def test_noiseless_tree_releases_exact_sums(rng, releases):
    runs, silos, width = 2, 3, 4
    rand = TreeRandomizer(runs, silos, np.zeros(width), _rngs(runs), releases)
    ana = TreeAnalyzer(runs, width, releases)
    total = np.zeros((runs, silos, width))
    last_node_start = {}
    gammas = []
    for k in range(1, releases + 1):
        gamma = rng.standard_normal((runs, silos, width))
        gammas.append(gamma)
        total += gamma
        msg = rand.release(gamma)
        # the released p-sum is the exact sum of the batches of its span
        size = k & -k
        np.testing.assert_allclose(msg, sum(gammas[k - size : k]), atol=1e-12)
        np.testing.assert_allclose(rand.prefix(), total, atol=1e-12)
        np.testing.assert_allclose(ana.release(msg), total.sum(axis=1), atol=1e-12)
        last_node_start[k] = k - size + 1
    with pytest.raises(ValueError, match="planned for"):
        rand.release(gamma)


def test_psum_noise_variance_and_prefix_variance():
    """Zero data: every released p-sum entry is N(0, sigma_j^2), independent across runs, silos,
    releases and entries; the server's final prefix after k = 12 releases is N(0, M popcount(12)
    sigma_j^2) (one independent value per run and entry).  sum(z^2) ~ chi-square(n): accept
    between the 0.0005 and 0.9995 quantiles (a 5% miscalibration falls outside at these n)."""
    runs, silos, releases = 200, 20, 12
    sigma = np.array([0.5, 2.0, 3.0])
    rand = TreeRandomizer(runs, silos, sigma, _rngs(runs, 7), releases)
    ana = TreeAnalyzer(runs, sigma.size, releases)
    released = []
    for _ in range(releases):
        msg = rand.release(np.zeros((runs, silos, sigma.size)))
        released.append(msg / sigma)
        prefix = ana.release(msg)
    prefix_z = prefix / (sigma * math.sqrt(silos * len(prefix_levels(releases))))
    for sample in (np.stack(released), prefix_z):
        z2 = float((sample**2).sum())
        n = sample.size
        assert stats.chi2.ppf(0.0005, n) < z2 < stats.chi2.ppf(0.9995, n)


def test_released_noise_is_never_redrawn():
    runs, silos = 2, 3
    rand = TreeRandomizer(runs, silos, np.ones(4), _rngs(runs, 3), 8)
    ana = TreeAnalyzer(runs, 4, 8)
    released = {}
    for k in range(1, 7):
        released[k] = rand.release(np.zeros((runs, silos, 4)))
        prefix = ana.release(released[k])
    # prefix after k = 6 (binary 110) is built from the very p-sums released at k = 4 and k = 6
    np.testing.assert_array_equal(prefix, released[4].sum(axis=1) + released[6].sum(axis=1))
    # and each silo's own prefix (Algorithm 4) from the same noisy values
    np.testing.assert_array_equal(rand.prefix(), released[4] + released[6])


def test_shuffler_is_a_uniform_permutation():
    """Over 6,000 shuffles of 3 messages every one of the 3! orders appears with probability
    1/6: chi-square goodness of fit with 5 degrees of freedom, p > 0.001."""
    runs = 6000
    messages = np.broadcast_to(np.arange(3.0)[None, :, None], (runs, 3, 1)).copy()
    out = shuffle_messages(messages, _rngs(runs, 11))
    orders = [tuple(int(v) for v in row[:, 0]) for row in out]
    counts = [orders.count(p) for p in itertools.permutations(range(3))]
    assert stats.chisquare(counts).pvalue > 1e-3
    # the multiset (hence any sum the analyzer computes) is unchanged
    np.testing.assert_array_equal(np.sort(out[..., 0], axis=1), messages[..., 0])


def test_protocol_streams_are_the_first_two_children_of_the_run_stream() -> None:
    """The silos' noise and the shuffler's permutations come from children 0 and 1 of the run's
    privacy Generator, in that order -- what the deployment rebuilds for its silos and shuffler."""
    for seed in (0, 7, 2023):
        noise, shuffle = protocol_streams(np.random.Generator(np.random.SFC64(seed)))
        run = np.random.Generator(np.random.SFC64(seed))
        first, second = run.spawn(1)[0], run.spawn(1)[0]
        assert np.array_equal(noise.standard_normal(5), first.standard_normal(5))
        assert np.array_equal(shuffle.permutation(20), second.permutation(20))
