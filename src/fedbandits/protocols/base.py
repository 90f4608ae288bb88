"""The protocol P = (R, S, A) through which silos synchronise statistics.

Zhou & Chowdhury (2023), Algorithm 1 lines 10-17: at the k-th synchronisation every silo i
hands its *batch* statistics gamma_{k,i} = (sum of x x^T, sum of x y over the batch) to its
local randomizer R; a third party S forwards (or shuffles) the messages; the server's
analyzer A releases the synchronised cumulative statistics (W_syn, U_syn) that every silo
receives.  A protocol object implements all three parts for a batch of R runs and M silos and
counts what crosses the network.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

FLOAT_BYTES = 8


def symmetric_payload_floats(dim: int) -> int:
    """Floats in one (covariance, bias) message: the upper triangle of the symmetric
    d x d covariance (d(d+1)/2 numbers) plus the d-dimensional bias vector."""
    return dim * (dim + 1) // 2 + dim


class Protocol(ABC):
    """Aggregates per-silo batch statistics into synchronised cumulative statistics."""

    name: str = ""
    description: str = ""

    def __init__(self, n_runs: int, n_agents: int, dim: int) -> None:
        self.n_runs = n_runs
        self.n_agents = n_agents
        self.dim = dim
        self.syncs = 0
        #: messages and payload bytes, counted per run; uplink (silo -> server) and downlink.  float64:
        #: exact below 2^53, and the vector sum at paper scale sends ~1e20 one-bit messages (> int64)
        self.messages = np.zeros(n_runs, dtype=np.float64)
        self.bytes_sent = np.zeros(n_runs, dtype=np.float64)

    @abstractmethod
    def sync(self, cov: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One synchronisation round.

        ``cov (R, M, d, d)`` and ``bias (R, M, d)`` are each silo's statistics of the batch
        since its previous sync.  Returns the synchronised cumulative ``W_syn (R, d, d)`` and
        ``U_syn (R, d)`` that every silo receives.
        """

    def privacy_report(self) -> dict[str, object]:
        """What the protocol guarantees and spent; fields arrive with the privacy layer."""
        return {"protocol": self.name}

    def _count_round(self) -> None:
        """Count one round: M uplink messages and M downlink messages of one payload each."""
        self.syncs += 1
        payload = symmetric_payload_floats(self.dim) * FLOAT_BYTES
        self.messages += 2 * self.n_agents
        self.bytes_sent += 2 * self.n_agents * payload
