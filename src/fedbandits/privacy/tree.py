"""Index math of the binary-tree (counting) mechanism, as pure functions.

Releases are numbered k = 1, 2, ..., K (one per synchronisation); release k's input is the
batch gamma_k.  Zhou & Chowdhury (2023), Algorithm 2, lines 4-6:

* release k creates the p-sum at level ``i_k = lowest_set_bit(k)``, covering the 2^{i_k}
  batches ``k - 2^{i_k} + 1 .. k`` (it absorbs the p-sums of all lower levels plus gamma_k);
* the prefix sum gamma_1 + ... + gamma_k is the sum of the p-sums at the levels of the one
  bits of k (line 14), i.e. ``popcount(k)`` nodes;
* batch j lies in the level-i block ending at e = ``ceil(j / 2^i) * 2^i``, which is released as a
  p-sum only if e <= K and e / 2^i is odd (release e creates the node of its lowest set bit); so
  over K releases one datum is in at most ``floor(log2 K) + 1`` released
  p-sums (:func:`max_nodes_per_datum`).  The papers write kappa = 1 + log(K) with the natural
  log, which *under*-counts (e.g. K = 400: 1 + ln 400 = 6.99 but 9 nodes); calibration here
  always uses the exact count.
"""

from __future__ import annotations


def _check_release(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"release index must be an integer >= 1, got {k!r}")


def lowest_set_bit(k: int) -> int:
    """i_k = min{j : Bin_j(k) = 1}: the tree level of the p-sum that release k creates."""
    _check_release(k)
    return (k & -k).bit_length() - 1


def node_span(k: int) -> tuple[int, int]:
    """Batches (first, last), inclusive, summed in the p-sum created by release k."""
    size = 1 << lowest_set_bit(k)
    return k - size + 1, k


def prefix_levels(k: int) -> list[int]:
    """Levels j with Bin_j(k) = 1, lowest first: the p-sums whose sum is the prefix [1, k]."""
    _check_release(k)
    return [j for j in range(k.bit_length()) if (k >> j) & 1]


def prefix_releases(k: int) -> list[int]:
    """Release indices of the p-sums that make up the prefix [1, k], earliest first.

    Each is the release at which that p-sum was created: for k = 6 (binary 110) the p-sums
    of releases 4 (batches 1-4) and 6 (batches 5-6).
    """
    out = []
    end = k
    for j in prefix_levels(k):
        out.append(end)
        end -= 1 << j
    return out[::-1]


def nodes_containing(j: int, releases: int) -> list[int]:
    """Release indices (<= ``releases``) whose p-sum contains batch ``j``."""
    _check_release(j)
    out: list[int] = []
    level = 0
    while True:
        size = 1 << level
        blocks = -(-j // size)  # ceil(j / size): the level-`level` block holding batch j
        end = blocks * size
        if end > releases:
            return out
        if blocks % 2 == 1:  # release `end` creates a node at this level only if end / 2^level is odd
            out.append(end)
        level += 1


def max_nodes_per_datum(releases: int) -> int:
    """The most released p-sums any one batch lies in over ``releases`` releases: floor(log2 K) + 1."""
    _check_release(releases)
    return releases.bit_length()
