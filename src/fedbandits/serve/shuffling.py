"""``sdp-amplification`` for serving silos: releases go through the deployment's shuffler party.

Zhou & Chowdhury (2023), Algorithm 2 with S = shuffle: each silo's noisy p-sum reaches the server
only inside the round's anonymous, uniformly permuted batch, which the shuffler party
(:mod:`fedbandits.federation.shuffler`, ``fedbandits deploy shuffler``) hands over when the server
closes the round.  For serving silos:

* a silo's ``/v1/sync/release`` commits its release as always (:mod:`fedbandits.serve.silo`), then
  posts it to the shuffler over mutual TLS (its client certificate ``silo-<i>``) and answers the
  coordinator with an acknowledgement that carries **no payload** (:class:`SiloShuffling`); a
  retried round re-sends the stored bytes, which the shuffler recognises (never a second message);
* once every silo has acknowledged, the coordinator closes the round at the shuffler and aggregates
  the batch (:class:`ServerShuffling`): the tree analyzer sums the rows, so their order does not
  matter.  A batch the shuffler withholds (fewer messages than the amplification lemma assumed:
  a silo acknowledged without sending) adds nothing to the prefix.

The shuffler is bound to the deployment's spec (:func:`fedbandits.federation.spec.make_spec` of
the same config and entry: its hash), and numbers the rounds of one budget epoch 1..K; so serving
silos run ``sdp-amplification`` with the budget policy ``stop``.  Trust: as in the deployment, the
server sees an anonymous multiset (the amplified epsilon) as long as server and shuffler do not
collude; each release is protected from the shuffler by the silo's own noise (``epsilon_silo`` in the
status).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from fedbandits.federation.shuffler_client import ShufflerError
from fedbandits.serve.silo import ServeError


class ShufflerParty(Protocol):
    """What :class:`fedbandits.federation.shuffler_client.ShufflerClient` offers (tests: an in-process core)."""

    def send(self, silo: int, digest: str, round_: int, psum: np.ndarray, patience: float = 30.0) -> str: ...

    def close(self, digest: str, round_: int, width: int, patience: float = 60.0) -> tuple[np.ndarray, bool, int]: ...


def shuffler_round(epoch: int, round_: int) -> int:
    """The shuffler's round number of sync round ``(epoch, round_)`` (one budget epoch: 1..K)."""
    if epoch != 0:
        raise ServeError(409, f"epoch {epoch}: the shuffler numbers the rounds of one budget epoch (policy stop)")
    return round_ + 1


class SiloShuffling:
    """Silo ``silo``'s way to the shuffler."""

    def __init__(self, party: ShufflerParty, digest: str, silo: int, patience: float = 5.0) -> None:
        self.party = party
        self.digest = digest
        self.silo = silo
        self.patience = patience

    def send(self, epoch: int, round_: int, payload: np.ndarray) -> str:
        """Post the stored release of ``(epoch, round_)``; the shuffler's word for it ("accepted",
        "duplicate", or after the round closed "included" / "withheld")."""
        k = shuffler_round(epoch, round_)
        try:
            return self.party.send(self.silo, self.digest, k, payload, patience=self.patience)
        except ShufflerError as exc:
            # unreachable: the coordinator asks again (the same stored bytes go); refused: say why
            raise ServeError(503 if exc.status >= 500 else 409, f"shuffler: {exc}") from None


class ServerShuffling:
    """The coordinator's way to the shuffler: the anonymous batch of a round."""

    def __init__(self, party: ShufflerParty, digest: str, width: int, silos: int, patience: float = 30.0) -> None:
        self.party = party
        self.digest = digest
        self.width = width
        self.silos = silos
        self.patience = patience

    def close(self, epoch: int, round_: int) -> tuple[np.ndarray, bool]:
        """The batch of ``(epoch, round_)`` (``(n, P)``, n <= M, in the shuffler's order) and whether
        it was withheld; raises :class:`ShufflerError` if the shuffler is unreachable or answers
        something malformed."""
        batch, withheld, _ = self.party.close(self.digest, shuffler_round(epoch, round_), self.width, self.patience)
        if batch.ndim != 2 or batch.shape[1] != self.width or len(batch) > self.silos or not np.isfinite(batch).all():
            raise ShufflerError(f"a malformed batch of shape {batch.shape}", 502)
        return batch, withheld
