"""The binary-tree mechanism split into a per-silo randomizer and a server analyzer.

Zhou & Chowdhury (2023), Algorithm 2: at release k every silo's local randomizer R forms the
p-sum of level i_k (its lower-level p-sums plus the new batch gamma_k, line 6) and releases it
with Gaussian noise (line 7); the analyzer A adds the M silos' noisy p-sums (line 13) and
releases the prefix sum as the sum of the synchronised p-sums at the one bits of k (line 14).
Algorithm 4 (``prefix``) instead releases each silo's own noisy prefix sum.

Statistics travel as *packed* vectors: the upper triangle (diagonal included) of the symmetric
d x d covariance, row by row, followed by the d-dimensional bias -- d(d+1)/2 + d numbers.
Noise is i.i.d. N(0, sigma_j^2) on every packed entry, so the unpacked covariance noise is a
symmetric matrix whose upper-triangle entries (diagonal included) are independent and whose
lower triangle mirrors them.

Every noisy p-sum is drawn exactly once, when created, and kept until the tree no longer
needs it: noise once released is never redrawn.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedbandits.privacy.tree import lowest_set_bit, max_nodes_per_datum, prefix_levels


def packed_width(dim: int) -> int:
    return dim * (dim + 1) // 2 + dim


def pack(cov: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """``cov (..., d, d)``, ``bias (..., d)`` -> packed ``(..., d(d+1)/2 + d)``."""
    rows, cols = np.triu_indices(cov.shape[-1])
    return np.concatenate([cov[..., rows, cols], bias], axis=-1)


def unpack(packed: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`pack`: a symmetric covariance and the bias."""
    rows, cols = np.triu_indices(dim)
    n_tri = rows.size
    cov = np.zeros((*packed.shape[:-1], dim, dim))
    cov[..., rows, cols] = packed[..., :n_tri]
    cov[..., cols, rows] = packed[..., :n_tri]
    return cov, packed[..., n_tri:].copy()


class TreeRandomizer:
    """Local randomizer R of every silo, for R runs x M silos (Algorithm 2 lines 1-8).

    ``sigma (P,)`` is the noise standard deviation of every packed entry; ``rngs`` holds one
    Generator per run (the privacy-noise stream).  ``releases`` is the planned number of
    releases K (it fixes the tree depth floor(log2 K) + 1).

    Every silo draws its noise from its *own* stream: run r's Generator spawns M children
    (``rngs[r].spawn(M)``) and silo i's noise comes from child i only, as it would in a real
    deployment where each silo holds a secret stream (see :func:`silo_noise_rng`, which
    rebuilds one silo's stream alone, for the deployment's parity with this simulator).
    """

    def __init__(
        self,
        n_runs: int,
        n_silos: int,
        sigma: np.ndarray,
        rngs: Sequence[np.random.Generator],
        releases: int,
    ) -> None:
        self.sigma = np.asarray(sigma, dtype=np.float64)
        if self.sigma.ndim != 1 or not (self.sigma >= 0).all():
            raise ValueError("sigma must be a vector of non-negative standard deviations")
        if len(rngs) != n_runs:
            raise ValueError(f"need one Generator per run ({n_runs}), got {len(rngs)}")
        self.rngs = list(rngs)
        #: silo_rngs[r][i]: the noise stream of silo i in run r
        self.silo_rngs = [rng.spawn(n_silos) for rng in self.rngs]
        self.releases = releases
        self.levels = max_nodes_per_datum(releases)
        shape = (self.levels, n_runs, n_silos, self.sigma.size)
        self.exact = np.zeros(shape)  # exact p-sums alpha_j
        self.noisy = np.zeros(shape)  # released noisy p-sums alpha-hat_j
        self.k = 0

    def release(self, gamma: np.ndarray) -> np.ndarray:
        """Release k = k + 1: the noisy p-sum of level i_k, shape ``(R, M, P)`` (a copy)."""
        if self.k >= self.releases:
            raise ValueError(f"the tree was planned for {self.releases} releases; release {self.k + 1} exceeds it")
        k = self.k + 1
        level = lowest_set_bit(k)
        node = gamma + self.exact[:level].sum(axis=0)
        self.exact[level] = node
        self.noisy[level] = self._noisy(node)
        # the lower levels are absorbed into this node and never used again
        self.exact[:level] = 0.0
        self.noisy[:level] = 0.0
        self.k = k
        return self.noisy[level].copy()

    def skip(self) -> None:
        """Release k + 1 is not made (a deployed silo that was down): the tree absorbs its lower
        levels as an empty batch would; the node is never released, so nothing is drawn."""
        k = self.k + 1
        level = lowest_set_bit(k)
        self.exact[level] = self.exact[:level].sum(axis=0)
        self.noisy[level] = 0.0  # never released
        self.exact[:level] = 0.0
        self.noisy[:level] = 0.0
        self.k = k

    def _noisy(self, node: np.ndarray) -> np.ndarray:
        """The released value of a new node ``(R, M, P)``: Gaussian noise from each silo's own stream."""
        return node + silo_noise(self.silo_rngs, node.shape[-1]) * self.sigma

    def prefix(self) -> np.ndarray:
        """Algorithm 4: each silo's noisy prefix sum after release k, ``(R, M, P)``."""
        return self.noisy[prefix_levels(self.k)].sum(axis=0)


def silo_noise(silo_rngs: Sequence[Sequence[np.random.Generator]], width: int) -> np.ndarray:
    """``(R, M, width)`` standard normals: silo i of run r draws its ``width`` from ``silo_rngs[r][i]``
    (its own stream, as a deployed silo would)."""
    return np.stack([np.stack([rng.standard_normal(width) for rng in silos]) for silos in silo_rngs])


def protocol_streams(run_rng: np.random.Generator) -> tuple[np.random.Generator, np.random.Generator]:
    """A Gaussian tree protocol's two streams of one run: the silos' noise and the shuffler's
    permutations (spawned from the run's fresh privacy Generator, in that order).  The deployment
    rebuilds them with this function too, so its silos and shuffler match the simulator."""
    noise, shuffle = run_rng.spawn(2)
    return noise, shuffle


def silo_noise_rng(run_rng: np.random.Generator, n_silos: int, silo: int) -> np.random.Generator:
    """Silo ``silo``'s noise stream as :class:`TreeRandomizer` derives it from a fresh run Generator.

    ``run_rng`` must be in the state TreeRandomizer receives it (nothing spawned from it yet);
    it is consumed (its spawn counter advances) exactly as TreeRandomizer would.
    """
    if not 0 <= silo < n_silos:
        raise ValueError(f"silo must be in [0, {n_silos}), got {silo}")
    return run_rng.spawn(n_silos)[silo]


class TreeAnalyzer:
    """The server's analyzer A (Algorithm 2 lines 9-15) for R runs."""

    def __init__(self, n_runs: int, width: int, releases: int) -> None:
        self.releases = releases
        self.levels = max_nodes_per_datum(releases)
        self.synced = np.zeros((self.levels, n_runs, width))
        self.k = 0

    def release(self, messages: np.ndarray) -> np.ndarray:
        """Add the M (possibly shuffled) noisy p-sums ``(R, M, P)``; return the prefix ``(R, P)``."""
        return self.release_sum(messages.sum(axis=1))

    def release_sum(self, synced_psum: np.ndarray) -> np.ndarray:
        """As :meth:`release` when the M messages were already summed (e.g. by a shuffle protocol)."""
        k = self.k + 1
        level = lowest_set_bit(k)
        self.synced[level] = synced_psum
        self.synced[:level] = 0.0
        self.k = k
        return self.synced[prefix_levels(k)].sum(axis=0)


def shuffle_messages(messages: np.ndarray, rngs: Sequence[np.random.Generator]) -> np.ndarray:
    """The shuffler S: a uniformly random permutation of the M messages of every run.

    ``messages (R, M, P)``; the output carries no sender identity, only the order the shuffler chose.
    """
    return np.stack([messages[r, rng.permutation(messages.shape[1])] for r, rng in enumerate(rngs)])
