"""The non-private protocol: silos send their exact batch statistics, the server sums."""

from __future__ import annotations

import numpy as np

from fedbandits.protocols.base import Protocol


class NonPrivate(Protocol):
    """P with R = identity, S = identity, A = running sum (no privacy).

    After the k-th sync, W_syn = sum over all silos and all rounds up to kB of x x^T and
    U_syn likewise of x y -- exactly, up to float rounding.
    """

    name = "none"
    description = "non-private pass-through: exact sums of all silos' statistics"

    def __init__(self, n_runs: int, n_agents: int, dim: int) -> None:
        super().__init__(n_runs, n_agents, dim)
        self._cov_total = np.zeros((n_runs, dim, dim))
        self._bias_total = np.zeros((n_runs, dim))

    def sync(self, cov: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self._cov_total += cov.sum(axis=1)
        self._bias_total += bias.sum(axis=1)
        self._count_round()
        return self._cov_total.copy(), self._bias_total.copy()
