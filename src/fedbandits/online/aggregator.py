"""The server's side for online agents: the analyzer A that turns M silos' releases into a prefix.

A driver (a test, a benchmark, the next issue's service) collects every silo's
:meth:`fedbandits.online.agent.Agent.sync_payload` for one sync round, hands them here in silo
order and gives the returned prefix to every silo's :meth:`~fedbandits.online.agent.Agent.apply_sync`.
The arithmetic is the simulator's and the deployment's coordinator's (:mod:`fedbandits.federation.server`):
``none`` keeps the exact running sum; ``ldp`` adds the noisy p-sums and releases the tree prefix
(:class:`~fedbandits.privacy.mechanisms.TreeAnalyzer`); ``distributed-dp`` adds the residues
modulo 2^bits -- what secure aggregation's masks leave the server -- and decodes the prefix
(:class:`~fedbandits.protocols.distributed_dp.ModularTreeAnalyzer`).  Masking itself (so that the
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
from fedbandits.protocols.distributed_dp import ModularTreeAnalyzer


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
        self.analyzer: TreeAnalyzer | None = None
        self.modular: ModularTreeAnalyzer | None = None
        self.total: np.ndarray | None = None
        if isinstance(cal, DistributedCalibration):
            self.codec = cal.codec(setup.dim)
            self.modular = ModularTreeAnalyzer(1, self.codec, cal.releases)
        elif cal is not None:
            self.analyzer = TreeAnalyzer(1, self.width, cal.releases)
        else:
            self.total = np.zeros((1, self.width))

    @classmethod
    def from_config(cls, config: Config | dict[str, Any] | str | Path, *, entry: str | None = None) -> Aggregator:
        return cls(AgentSetup.from_config(config, entry))

    def aggregate(self, payloads: Sequence[np.ndarray]) -> np.ndarray:
        """Close one sync round with the M silos' payloads (silo order); return the prefix ``(P,)``."""
        if len(payloads) != self.silos:
            raise ValueError(f"payloads must hold one release per silo ({self.silos}), got {len(payloads)}")
        releases = self.setup.releases
        if releases is not None and self.rounds >= releases:
            raise ValueError(f"payloads: the noise is calibrated for {releases} rounds, all closed")
        if self.modular is not None:
            rows = np.stack([np.asarray(p) for p in payloads])
            if rows.shape != (self.silos, self.width) or rows.dtype != np.uint64:
                raise ValueError(
                    f"payloads must be {self.silos} uint64 residue vectors of {self.width}, got {rows.shape}"
                )
            total = rows.sum(axis=0, dtype=np.uint64)[None] & self.codec.mask
            prefix = self.modular.release(total)[1][0]
        else:
            rows = np.stack([np.asarray(p, dtype=np.float64) for p in payloads])[None]
            if rows.shape != (1, self.silos, self.width) or not np.isfinite(rows).all():
                raise ValueError(f"payloads must be {self.silos} finite vectors of {self.width}, got {rows.shape[1:]}")
            if self.analyzer is not None:
                prefix = self.analyzer.release(rows)[0]
            else:
                assert self.total is not None
                self.total += rows.sum(axis=1)
                prefix = self.total[0].copy()
        self.rounds += 1
        return prefix
