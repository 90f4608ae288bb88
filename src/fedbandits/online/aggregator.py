"""The server's side for online agents: the analyzer A that turns M silos' releases into a prefix.

A driver (a test, a benchmark, the next issue's service) collects every silo's
:meth:`fedbandits.online.agent.Agent.sync_payload` for one sync round, hands them here in silo
order and gives the returned prefix to every silo's :meth:`~fedbandits.online.agent.Agent.apply_sync`.
The arithmetic is the simulator's; it is written here once, and the deployment's coordinator
(:mod:`fedbandits.federation.server`) and the service's (:mod:`fedbandits.serve.coordinator`) both close
their rounds through it:
``none`` keeps the exact running sum; ``ldp`` adds the noisy p-sums and releases the tree prefix
(:class:`~fedbandits.privacy.mechanisms.TreeAnalyzer`); ``distributed-dp`` adds the residues
modulo 2^bits -- what secure aggregation's masks leave the server -- and decodes the prefix
(:class:`~fedbandits.protocols.distributed_dp.ModularTreeAnalyzer`); with ``mechanism = "banded"``
either decodes the streaming release instead (no planned horizon: rounds never run out).  Masking itself (so that the
server sees no single silo's residues) is the transport's job, as in the deployment.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedbandits.config import Config
from fedbandits.online.setup import AgentSetup
from fedbandits.privacy.distributed_noise import DistributedCalibration
from fedbandits.privacy.mechanisms import TreeAnalyzer
from fedbandits.privacy.streaming import StreamingAnalyzer
from fedbandits.protocols.distributed_dp import ModularFactorizedAnalyzer, ModularTreeAnalyzer


class Aggregator:
    """The synced prefix of a federation of online FedLinUCB agents, round by round."""

    def __init__(self, setup: AgentSetup) -> None:
        if not setup.federated:
            raise ValueError(f"entry: {setup.name!r} does not synchronise; an aggregator needs a fedlinucb entry")
        self.setup = setup
        self.silos = setup.silos
        self.width = setup.width
        self.rounds = 0
        cal = setup.calibration
        self.analyzer: TreeAnalyzer | StreamingAnalyzer | None = None
        self.modular: ModularTreeAnalyzer | ModularFactorizedAnalyzer | None = None
        self.total: np.ndarray | None = None
        if isinstance(cal, DistributedCalibration):
            self.codec = cal.codec(setup.dim)
            self.modular = (
                ModularFactorizedAnalyzer(1, self.codec, setup.stream)
                if setup.streaming
                else ModularTreeAnalyzer(1, self.codec, cal.releases)
            )
        elif cal is not None:
            self.analyzer = (
                StreamingAnalyzer((1, self.width), setup.stream)
                if setup.streaming
                else TreeAnalyzer(1, self.width, cal.releases)
            )
        else:
            self.total = np.zeros((1, self.width))

    @classmethod
    def from_config(cls, config: Config | dict[str, Any] | str | Path, *, entry: str | None = None) -> Aggregator:
        return cls(AgentSetup.from_config(config, entry))

    def aggregate(self, payloads: Sequence[np.ndarray]) -> np.ndarray:
        """Close one sync round with the M silos' payloads (silo order); return the prefix ``(P,)``."""
        if len(payloads) != self.silos:
            raise ValueError(f"payloads must hold one release per silo ({self.silos}), got {len(payloads)}")
        if self.modular is not None:
            rows = np.stack([np.asarray(p) for p in payloads])
            if rows.shape != (self.silos, self.width) or rows.dtype != np.uint64:
                raise ValueError(
                    f"payloads must be {self.silos} uint64 residue vectors of {self.width}, got {rows.shape}"
                )
            return self.close_sum(rows.sum(axis=0, dtype=np.uint64) & self.codec.mask)[1]
        rows = np.stack([np.asarray(p, dtype=np.float64) for p in payloads])
        if rows.shape != (self.silos, self.width) or not np.isfinite(rows).all():
            raise ValueError(f"payloads must be {self.silos} finite vectors of {self.width}, got {rows.shape}")
        return self.close_rows(rows)

    def close_rows(self, rows: np.ndarray) -> np.ndarray:
        """Close one round of ``none`` / ``ldp`` / a shuffled protocol with the releases it has,
        ``rows (n, P)`` with n <= M: a silo's row, zeros for a missing one, or the shuffler's
        anonymous batch in the order it chose (the sum's order is the simulator's); the prefix ``(P,)``."""
        if self.modular is not None:
            raise ValueError("distributed-dp closes a round with its modular sum (close_sum)")
        self._next()
        batch = np.asarray(rows, dtype=np.float64)[None]
        if self.analyzer is not None:
            return self.analyzer.release(batch)[0]
        assert self.total is not None
        self.total += batch.sum(axis=1)
        return self.total[0].copy()

    def close_sum(self, total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Close one ``distributed-dp`` round with the modular sum of its residues ``(P,)`` uint64
        (what secure aggregation leaves the server; zeros for a round closed without data): the
        decoded node ``(1, P)`` and the prefix ``(P,)``."""
        if self.modular is None:
            raise ValueError("only distributed-dp closes a round with a modular sum")
        self._next()
        node, prefix = self.modular.release(np.asarray(total, dtype=np.uint64).reshape(1, self.width))
        return node, prefix[0]

    def _next(self) -> None:
        releases = self.setup.releases
        if releases is not None and self.rounds >= releases:
            raise ValueError(f"payloads: the noise is calibrated for {releases} rounds, all closed")
        self.rounds += 1
