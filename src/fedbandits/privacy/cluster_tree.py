"""Tree-based privatizer PVT(l, j) of CDP-FCLUB-DC (Liu et al. 2022, section 3 and Algorithm 5).

One privatizer serves one local cluster (l, j) of one server.  Its stream has one leaf per
release: leaf 1 is the cluster's data sum at the start of the phase (the phase-start upload of
Algorithm 2, line 5), leaf k + 1 the k-th upload buffer of the phase (Algorithm 3).  Release k
publishes the prefix sum of leaves 1..k plus the sum of the noise of the tree nodes that make up
that prefix (the binary-counter decomposition of :mod:`fedbandits.privacy.tree`: release k
creates the node at level ``lowest_set_bit(k)`` and the prefix is the nodes of the one bits of
k).  Each node's noise is drawn **once**, when the node is created, and reused by every later
prefix that contains it; nothing is ever redrawn.  Algorithm 5 draws the whole queue up front;
drawing each node when it is first needed gives the same joint distribution.

Node noise (Algorithm 5, line 3): a (d+1) x (d+1) matrix N = (Nbar + Nbar^T) / sqrt(2) with
Nbar_pq i.i.d. N(0, sigma^2) and **variance** ``sigma^2 = 64 nu log(2/delta)^2 / epsilon^2``
(:func:`node_variance`; the paper's public code passes this number as a standard deviation, which
is not what the paper says).  Off-diagonal entries of N then have variance sigma^2 and diagonal
entries 2 sigma^2.  H = N[:d, :d] perturbs the Gram matrix, h = N[:d, d] the moment vector.

nu, the number of tree nodes one datum lies in, is computed from ``t_c``, the a-priori number of
uploads one privatizer serves (the paper's c <= d log T / log min(U, D), section 4), i.e.
``t_c + 1`` releases including the phase-start leaf:

* ``calibration = "paper"``: nu = ceil(log2(t_c + 1)) + 1 (Algorithm 5, line 2: the tree depth);
* ``calibration = "exact"``: nu = floor(log2(t_c + 1)) + 1 =
  :func:`~fedbandits.privacy.tree.max_nodes_per_datum`, the exact worst-case number of released
  nodes containing one leaf (<= the paper's value; equal when t_c + 1 is a power of two).

Privacy of the released statistics (:func:`node_mu`): under replace-one adjacency with
||x|| <= L and y in [0, B], the datum z = (x, y) changes the (d+1) x (d+1) matrix z z^T by
Delta with ||Delta||_F^2 <= ||z||^4 + ||z'||^4 <= 2 (L^2 + B^2)^2.  The released entries (upper
triangle of H with the diagonal at variance 2 sigma^2, and h) form a Gaussian mechanism whose
Mahalanobis sensitivity is at most sqrt(||Delta||_F^2 / 2) / sigma, so each node is
mu-GDP with ``mu = (L^2 + B^2) / sigma``, and k node releases containing one datum compose to
``sqrt(k) mu`` (Dong, Roth & Su 2022, Cor. 3.3), converted to epsilon at delta exactly by
:func:`fedbandits.privacy.accounting.gaussian_epsilon`.
"""

from __future__ import annotations

import math

import numpy as np

from fedbandits.core.validation import check_choice, check_float, check_int
from fedbandits.privacy.accounting import gaussian_epsilon
from fedbandits.privacy.tree import lowest_set_bit, max_nodes_per_datum

CALIBRATIONS = ("paper", "exact")


def tree_nodes(uploads: int, calibration: str = "paper") -> int:
    """nu for a privatizer of ``uploads`` uploads plus the phase-start leaf (module docstring)."""
    uploads = check_int("uploads", uploads, low=0)
    check_choice("calibration", calibration, CALIBRATIONS)
    leaves = uploads + 1
    if calibration == "paper":
        return math.ceil(math.log2(leaves)) + 1
    return max_nodes_per_datum(leaves)


def node_variance(epsilon: float, delta: float, nu: int) -> float:
    """Variance of every entry of Nbar: 64 nu log(2/delta)^2 / epsilon^2 (Algorithm 5, line 3)."""
    epsilon = check_float("epsilon", epsilon, low=0.0, low_open=True)
    delta = check_float("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    nu = check_int("nu", nu, low=1)
    return 64.0 * nu * math.log(2.0 / delta) ** 2 / epsilon**2


def rho_bound(epsilon: float, delta: float, nu: int, dim: int, clusters: int, servers: int, alpha: float) -> float:
    """rho of Eq. (7): 8 sqrt(2) nu log(4/delta) (4 sqrt(d) + 2 log(2 m L / alpha)) / epsilon.

    The bound on ||H||_op (a sum of at most nu node matrices) that holds for every (l, j, t)
    with probability >= 1 - alpha / (m L).  The shared text prints "8 sqrt 2 nu log(4/delta)";
    it is read as 8 * sqrt(2) * nu * log(4/delta) (nu node matrices of entry std
    8 sqrt(nu) log(2/delta) / epsilon sum to std 8 nu log(2/delta) / epsilon per entry).
    """
    epsilon = check_float("epsilon", epsilon, low=0.0, low_open=True)
    delta = check_float("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    alpha = check_float("alpha", alpha, low=0.0, high=1.0, low_open=True)
    nu = check_int("nu", nu, low=1)
    dim = check_int("dim", dim, low=1)
    log_term = 2.0 * math.log(2.0 * clusters * servers / alpha)
    return 8.0 * math.sqrt(2.0) * nu * math.log(4.0 / delta) * (4.0 * math.sqrt(dim) + log_term) / epsilon


def node_mu(std: float, feature_bound: float = 1.0, reward_bound: float = 1.0) -> float:
    """GDP parameter mu of one node release for one datum: (L^2 + B^2) / sigma (module docstring)."""
    std = check_float("std", std, low=0.0, low_open=True)
    return (feature_bound**2 + reward_bound**2) / std


def composed_epsilon(compositions: int, std: float, delta: float, feature_bound: float, reward_bound: float) -> float:
    """Exact epsilon at ``delta`` of ``compositions`` node releases containing one datum (0 if none)."""
    if compositions <= 0:
        return 0.0
    return gaussian_epsilon(math.sqrt(compositions) * node_mu(std, feature_bound, reward_bound), delta)


class ClusterTreePrivatizer:
    """PVT(l, j) of Algorithm 5 for one local cluster: noise of released prefix sums.

    ``next_noise()`` returns (H, h) for the next release k = 1, 2, ...: the sum of the noise of
    the nodes covering the prefix [1, k].  The node created by release k (level
    ``lowest_set_bit(k)``) gets fresh noise; all other nodes of the prefix were drawn earlier and
    are reused unchanged.
    """

    def __init__(self, dim: int, std: float, rng: np.random.Generator) -> None:
        self.dim = dim
        self.std = std
        self.rng = rng
        self.releases = 0
        #: noise of the latest node at every level (None until created), (d+1, d+1) each
        self.nodes: list[np.ndarray | None] = []
        #: nodes drawn so far (for tests: never more than one per release)
        self.draws = 0

    def _fresh(self) -> np.ndarray:
        raw = self.rng.standard_normal((self.dim + 1, self.dim + 1)) * self.std
        self.draws += 1
        return (raw + raw.T) * math.sqrt(0.5)

    def next_noise(self) -> tuple[np.ndarray, np.ndarray]:
        """(H (d, d), h (d,)) of the next release's prefix (Algorithm 5, line 5)."""
        self.releases += 1
        k = self.releases
        level = lowest_set_bit(k)
        while len(self.nodes) <= level:
            self.nodes.append(None)
        self.nodes[level] = self._fresh()
        total = np.zeros((self.dim + 1, self.dim + 1))
        for j in range(k.bit_length()):
            if (k >> j) & 1:
                node = self.nodes[j]
                assert node is not None  # created by an earlier release (binary counter)
                total += node
        return total[: self.dim, : self.dim].copy(), total[: self.dim, self.dim].copy()

    def nodes_per_datum(self) -> int:
        """Released nodes the worst-case datum of this stream lies in so far."""
        return max_nodes_per_datum(self.releases) if self.releases else 0
