"""Tree-mechanism index math, exhaustively for up to 1024 releases."""

import numpy as np
import pytest

from fedbandits.privacy.tree import (
    lowest_set_bit,
    max_nodes_per_datum,
    node_span,
    nodes_containing,
    prefix_levels,
    prefix_releases,
)

K_MAX = 1024


def test_node_spans_partition_every_prefix():
    """Every prefix [1, k] is the disjoint union of the spans of its p-sums, in order."""
    for k in range(1, K_MAX + 1):
        covered = []
        for release in prefix_releases(k):
            first, last = node_span(release)
            covered.extend(range(first, last + 1))
        assert covered == list(range(1, k + 1)), k
        assert len(prefix_releases(k)) == bin(k).count("1")


def test_every_datum_in_at_most_log2_plus_one_released_nodes():
    for releases in range(1, K_MAX + 1):
        bound = int(np.floor(np.log2(releases))) + 1
        assert max_nodes_per_datum(releases) == bound
        counts = [len(nodes_containing(j, releases)) for j in range(1, releases + 1)]
        assert max(counts) == bound  # attained (by batch 1)
        # consistency with node_span: batch j is in release k's node iff j in its span
        if releases in (1, 7, 64, 100, 1024):
            for j in range(1, releases + 1):
                brute = [k for k in range(1, releases + 1) if node_span(k)[0] <= j <= node_span(k)[1]]
                assert nodes_containing(j, releases) == brute


def test_known_answer_sums_without_noise():
    """Tree sums of random batches equal the plain running sums (noise switched off)."""
    rng = np.random.default_rng(0)
    gammas = rng.standard_normal(K_MAX + 1)
    psum = {}
    for k in range(1, K_MAX + 1):
        first, last = node_span(k)
        psum[k] = gammas[first : last + 1].sum()
        prefix = sum(psum[r] for r in prefix_releases(k))
        assert prefix == pytest.approx(gammas[1 : k + 1].sum(), abs=1e-9)


def test_small_cases():
    assert [lowest_set_bit(k) for k in (1, 2, 3, 4, 6, 8, 12)] == [0, 1, 0, 2, 1, 3, 2]
    assert node_span(6) == (5, 6) and node_span(8) == (1, 8) and node_span(7) == (7, 7)
    assert prefix_levels(6) == [1, 2] and prefix_releases(6) == [4, 6]
    assert nodes_containing(5, 8) == [5, 6, 8]


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_rejects_bad_indices(bad):
    with pytest.raises(ValueError, match="integer >= 1"):
        lowest_set_bit(bad)
    with pytest.raises(ValueError, match="integer >= 1"):
        max_nodes_per_datum(bad)
