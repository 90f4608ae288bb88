"""FedUCB's PRIVATIZER: Algorithm 2 of Dubey & Pentland (2020), for many independent streams.

Every agent (and, in the decentralized algorithm, every one of its gamma parameter sets) owns
one *stream*: a binary tree over its own synchronisation rounds.  At its k-th release the stream
inserts the batch statistic

    Q-hat = sum over the batch of [x; y][x; y]^T            ((d+1) x (d+1))

and returns the noisy *prefix* sum of everything inserted so far, assembled from
``popcount(k)`` tree nodes.  Each node's noise is drawn once, when the node is created, as

    N = (N-hat + N-hat^T) / sqrt(2),   N-hat_ij ~ N(0, sigma_N^2) i.i.d.,
    sigma_N^2 = 16 m (L^2 + 1)^2 log(2/delta)^2 / epsilon^2          (Alg. 2 line 5, section 4.3)

so an off-diagonal entry of N has variance sigma_N^2 and a diagonal one 2 sigma_N^2.  The agent
receives U-hat (top-left d x d block) and u-hat (first d entries of the last column); the
(d+1, d+1) entry (sum of y^2) is never released.

Unlike :class:`fedbandits.privacy.mechanisms.TreeRandomizer` (one release counter for all runs,
the fixed schedule of Zhou & Chowdhury), every (run, stream) pair here has its own release
counter: FedUCB's adaptive schedule synchronises different runs at different rounds.

The tree depth: the paper uses m = 1 + ceil(log2 n) when the number n of releases is fixed in
advance and m = 1 + ceil(log2 T) otherwise (adaptive schedules, where every round may sync).
A datum lies in at most floor(log2 K) + 1 released nodes over K releases
(:func:`fedbandits.privacy.tree.max_nodes_per_datum`), which never exceeds the paper's m, so the
paper's node count is conservative here.  :func:`message_mu` gives the exact Gaussian-DP
parameter of one stream's releases for any sigma_N.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fedbandits.core.validation import check_float, check_int
from fedbandits.privacy.sensitivity import Sensitivity
from fedbandits.privacy.tree import max_nodes_per_datum


def paper_depth(releases: int) -> int:
    """m = 1 + ceil(log2 n): the tree depth of Algorithm 2 for at most n releases."""
    check_int("releases", releases, low=1)
    return 1 + math.ceil(math.log2(releases)) if releases > 1 else 1


def paper_sigma(epsilon: float, delta: float, depth: int, feature_bound: float = 1.0) -> float:
    """sigma_N = 4 sqrt(m) (L^2 + 1) log(2/delta) / epsilon (std of an N-hat entry, Alg. 2 line 5)."""
    check_float("epsilon", epsilon, low=0.0, low_open=True)
    check_float("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)
    check_int("depth", depth, low=1)
    return 4.0 * math.sqrt(depth) * (feature_bound**2 + 1.0) * math.log(2.0 / delta) / epsilon


def paper_shift(
    epsilon: float,
    delta: float,
    depth: int,
    dim: int,
    syncs: int,
    agents: int,
    alpha: float,
    feature_bound: float = 1.0,
) -> float:
    """Lambda = sqrt(32) m (L^2+1) log(4/delta) (4 sqrt(d) + 2 ln(2 n M / alpha)) / epsilon (section 4.3).

    With probability >= 1 - alpha/(nM) the operator norm of H_{i,t} is at most Lambda; FedUCB
    shifts every released Gram matrix by 2 Lambda I, so rho_min = Lambda, rho_max = 3 Lambda
    (Proposition 4).
    """
    check_float("alpha", alpha, low=0.0, high=1.0, low_open=True)
    spread = 4.0 * math.sqrt(dim) + 2.0 * math.log(2.0 * syncs * agents / alpha)
    return math.sqrt(32.0) * depth * (feature_bound**2 + 1.0) * math.log(4.0 / delta) * spread / epsilon


def sigma_shift(sigma: float, nodes: int, dim: int, syncs: int, agents: int, alpha: float) -> float:
    """The same operator-norm bound for an arbitrary node std sigma (used by the private-schedule variant).

    Lambda = sqrt(2 nodes) sigma (4 sqrt(d) + 2 ln(2 n M / alpha)): the paper's Lambda with its
    sigma_N written out (the paper's constant is sqrt(32) m (L^2+1) log(4/delta)/eps =
    sqrt(2m) sigma_N * log(4/delta)/log(2/delta), i.e. this with log(4/delta) for log(2/delta)).
    """
    check_float("alpha", alpha, low=0.0, high=1.0, low_open=True)
    spread = 4.0 * math.sqrt(dim) + 2.0 * math.log(2.0 * syncs * agents / alpha)
    return math.sqrt(2.0 * nodes) * sigma * spread


def paper_kappa(
    epsilon: float, depth: int, dim: int, syncs: int, agents: int, alpha: float, feature_bound: float = 1.0
) -> float:
    """kappa = sqrt(m (L^2+1) (sqrt(d) + 2 log(2 n M / alpha)) / (sqrt(2) epsilon)) (Proposition 4)."""
    inner = depth * (feature_bound**2 + 1.0) * (math.sqrt(dim) + 2.0 * math.log(2.0 * syncs * agents / alpha))
    return math.sqrt(inner / (math.sqrt(2.0) * epsilon))


def message_mu(sigma: float, nodes: int, sens: Sensitivity) -> float:
    """Gaussian-DP mu of everything one stream releases, for node std ``sigma``.

    The released entries of a node are the upper triangle of U-hat (off-diagonal variance
    sigma^2, diagonal 2 sigma^2) and u-hat (variance sigma^2), all independent.  A change of one
    datum moves them by Delta W (symmetric) and Delta b, so the privacy loss of one node is
    sum_{i<j} dW_ij^2/sigma^2 + sum_i dW_ii^2/(2 sigma^2) + |db|^2/sigma^2
    = ||dW||_F^2/(2 sigma^2) + |db|^2/sigma^2, and a datum lies in at most ``nodes`` nodes.
    """
    per_node = (sens.cov**2 / 2.0 + sens.bias**2) / sigma**2
    return math.sqrt(nodes * per_node)


class TreePrivatizer:
    """Algorithm 2 for a batch of R runs x S streams, each with its own release counter.

    ``capacity``: the most releases any stream may make (its tree has
    ``floor(log2 capacity) + 1`` levels); ``sigma``: std of every N-hat entry;
    ``rngs``: one Generator per run (the privacy-noise stream of that run).
    """

    def __init__(
        self,
        n_runs: int,
        n_streams: int,
        dim: int,
        sigma: float,
        rngs: Sequence[np.random.Generator],
        capacity: int,
    ) -> None:
        if len(rngs) != n_runs:
            raise ValueError(f"need one Generator per run ({n_runs}), got {len(rngs)}")
        self.sigma = check_float("sigma", sigma, low=0.0)
        self.capacity = check_int("capacity", capacity, low=1)
        self.rngs = list(rngs)
        self.dim = dim
        self.levels = max_nodes_per_datum(capacity)
        size = dim + 1
        shape = (self.levels, n_runs, n_streams, size, size)
        self.exact = np.zeros(shape)  # exact p-sums
        self.noisy = np.zeros(shape)  # released noisy p-sums (noise drawn once per node)
        self.k = np.zeros((n_runs, n_streams), dtype=np.int64)  # releases made per stream
        self._bits = 1 << np.arange(self.levels)
        #: every release's (mask, released prefixes) when set to a list (the privacy audit's view)
        self.log: list[tuple[np.ndarray, np.ndarray]] | None = None

    def release(self, mask: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Insert ``q[r, s]`` for every (r, s) with ``mask[r, s]`` and return their noisy prefix sums.

        ``mask (R, S)`` bool, ``q (R, S, d+1, d+1)`` (entries outside the mask are ignored).
        Returns ``(R, S, d+1, d+1)``: the new noisy prefix for masked pairs, zeros elsewhere.
        Raises ``ValueError`` (nothing changed) if a masked stream is already at capacity.
        """
        mask = np.asarray(mask, dtype=bool)
        runs, streams = np.nonzero(mask)
        new_k = self.k[runs, streams] + 1
        if (new_k > self.capacity).any():
            raise ValueError(f"a stream exceeded the {self.capacity} releases its tree was planned for")
        levels = np.log2(new_k & -new_k).round().astype(np.int64)  # lowest set bit of every new k
        size = self.dim + 1
        # noise: per run, one block of standard normals for all its releasing streams (run order)
        noise = np.empty((runs.size, size, size))
        for r in np.unique(runs):
            sel = runs == r
            noise[sel] = self.rngs[r].standard_normal((int(sel.sum()), size, size))
        noise = (noise + np.swapaxes(noise, -1, -2)) * (self.sigma / math.sqrt(2.0))
        for level in np.unique(levels):
            sel = levels == level
            rr, ss = runs[sel], streams[sel]
            node = q[rr, ss] + self.exact[:level, rr, ss].sum(axis=0)
            self.exact[level, rr, ss] = node
            self.noisy[level, rr, ss] = node + noise[sel]
            # the lower levels are absorbed into this node and never used again
            self.exact[:level, rr, ss] = 0.0
            self.noisy[:level, rr, ss] = 0.0
        self.k[runs, streams] = new_k
        out = np.zeros((*mask.shape, size, size))
        out[runs, streams] = self.prefix(runs, streams)
        if self.log is not None:
            self.log.append((mask.copy(), out.copy()))
        return out

    def prefix(self, runs: np.ndarray, streams: np.ndarray) -> np.ndarray:
        """Noisy prefix sums of the given (run, stream) pairs after their latest release."""
        ones = (self.k[runs, streams][:, None] & self._bits[None, :]) != 0  # (P, levels)
        nodes = self.noisy[:, runs, streams]  # (levels, P, d+1, d+1)
        return np.einsum("pl,lpij->pij", ones.astype(np.float64), nodes)
