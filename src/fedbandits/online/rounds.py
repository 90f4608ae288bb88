"""The server's side of a federation's sync rounds, with no transport in it.

One object, :class:`Rounds`, is what both transports' coordinators hold (the Flower deployment's
:class:`fedbandits.federation.server.Coordinator` and the HTTP service's
:class:`fedbandits.serve.coordinator.Coordinator`): which round is open, the budget epoch's
round-closing arithmetic (:class:`~fedbandits.online.aggregator.Aggregator`, the analyzer A of
Algorithm 2 of Li & Song 2022 for a tree, the exact sum for ``none``, the modular analyzer of
``distributed-dp``), the synced prefix of the earlier epochs, and what happens after an epoch's
last release -- the budget policy:

* ``stop`` (the default): the noise covers K releases (K = T // B); after the K-th round nothing
  is synced again (the silos keep serving from the last prefix).  A deployment is one such epoch.
* ``renew`` (``renew=True``): the K-th round ends budget epoch e; epoch e + 1 starts a new tree on
  both sides and its prefixes are added to epoch e's last one (the lifetime epsilon adds up: basic
  composition).

The numbering is the same for both: round r (0-based) of epoch e; the deployment names its
synchronisation k = r + 1 of its one epoch.  The object pickles whole (the deployment's durable
state holds it) and a replay of the stored closed rounds rebuilds it (the service's event log):
the analyzers add no noise, so nothing is redrawn either way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedbandits.online.aggregator import Aggregator
from fedbandits.online.setup import AgentSetup


class Rounds:
    """The open round ``(epoch, round)`` of a federation, and the arithmetic that closes it."""

    def __init__(self, setup: AgentSetup, *, renew: bool = False) -> None:
        """``renew``: the budget policy ``renew`` (else ``stop``)."""
        self.setup = setup
        self.renew = renew
        self.epoch = 0
        self.round = 0  # the open round of the epoch (0-based)
        self.finished = False  # ``stop``: the epoch's last release is synced; nothing more will be
        self.aggregator = Aggregator(setup)
        self.base = np.zeros(setup.width)  # the final prefix of the earlier epochs
        self.prefix: np.ndarray | None = None  # the newest synced prefix (None before the first)

    @property
    def closed(self) -> int:
        """Rounds closed, over every epoch (an epoch before the open one closed all K of its own)."""
        releases = self.setup.releases
        return self.round if releases is None else self.epoch * releases + self.round

    def close(self, payloads: Sequence[np.ndarray]) -> np.ndarray:
        """Close the open round with one release per silo (silo order); the synced prefix."""
        self._check()
        return self._advance(self.aggregator.aggregate(payloads))

    def close_rows(self, rows: np.ndarray) -> np.ndarray:
        """Close the open round of ``none`` / ``ldp`` / a shuffled protocol with the rows it has
        (zeros for a missing silo, or the shuffler's batch in its order); the synced prefix."""
        self._check()
        return self._advance(self.aggregator.close_rows(rows))

    def close_batch(self, batch: np.ndarray) -> np.ndarray:
        """Close the open round of a shuffled protocol with the shuffler's anonymous batch ``(n, P)``,
        n <= M rows in the order it chose (one withheld or short adds nothing for the missing); the
        synced prefix."""
        width, silos = self.setup.width, self.setup.silos
        if batch.ndim != 2 or batch.shape[1] != width or len(batch) > silos or not np.isfinite(batch).all():
            raise ValueError(f"a shuffled batch is at most {silos} finite rows of {width}, got {batch.shape}")
        return self.close_rows(batch)

    def close_sum(self, total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Close the open ``distributed-dp`` round with the modular sum secure aggregation left
        (zeros: closed without data); the decoded node ``(1, P)`` and the synced prefix."""
        self._check()
        node, prefix = self.aggregator.close_sum(total)
        return node, self._advance(prefix)

    def _check(self) -> None:
        if self.finished:
            raise ValueError(f"rounds: the noise covers {self.setup.releases} releases, all synced (policy 'stop')")

    def _advance(self, epoch_prefix: np.ndarray) -> np.ndarray:
        """Past the open round: the next one, or after the epoch's last release the policy's."""
        prefix = self.base + epoch_prefix
        self.prefix = prefix.copy()
        self.round += 1
        releases = self.setup.releases
        if releases is not None and self.round == releases:
            self.base = prefix.copy()
            if self.renew:
                self.epoch, self.round, self.aggregator = self.epoch + 1, 0, Aggregator(self.setup)
            else:
                self.finished = True
        return prefix
