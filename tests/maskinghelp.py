"""A harness for :mod:`fedbandits.crypto.double_masking`: silos with signing identities, and the
honest server's steps, so that a test can replace any step with a cheating one.

Not a test module; the tests import it by name (pytest puts ``tests/`` on ``sys.path``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedbandits.crypto.double_masking import MaskingServer, MaskingSilo, Reveal, secure_threshold
from fedbandits.crypto.signing import Authority, Identity
from fedbandits.federation.certs import trial_signing

CONTEXT = b"deployment-digest"
CHI2_15_999 = 37.7  # 99.9% quantile of chi-square with 15 degrees of freedom


def credentials(folder: Path, n: int) -> tuple[Authority, list[Identity]]:
    signing = trial_signing(folder, n)
    return signing[0][1], [identity for identity, _ in signing]


@dataclass
class Federation:
    server: MaskingServer
    silos: list[MaskingSilo]
    bits: int
    width: int

    @property
    def mod(self) -> np.uint64:
        return np.uint64((1 << self.bits) - 1)

    def inputs(self, seed: int) -> np.ndarray:
        n = len(self.silos)
        return np.random.default_rng(seed).integers(0, 1 << self.bits, size=(n, self.width)).astype(np.uint64)

    def modsum(self, x: np.ndarray) -> np.ndarray:
        return x.sum(axis=0, dtype=np.uint64) & self.mod

    def epoch(self) -> None:
        e = self.server.next_epoch
        adverts = {s.silo: s.advertise(e) for s in self.silos}
        roster = self.server.publish(adverts, secure_threshold(len(self.silos), 0))
        for s in self.silos:
            s.join(roster)

    def send(self, round_: int, x: np.ndarray, skip: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.server.open_round(round_)
        for s in self.silos:
            if s.silo not in skip:
                assert self.server.accept(s.silo, self.server.epoch, round_, s.mask(round_, x[s.silo])) is None

    def unmask(self, round_: int, answering: set[int] | None = None) -> dict[int, Reveal]:
        """The honest consistency check and unmask step; the survivors' reveals."""
        survivors = self.server.close_messages()
        for j in survivors:
            assert self.server.accept_signature(j, self.silos[j].sign_survivors(round_, survivors)) is None
        dropped = self.server.dropped()
        return {
            j: self.silos[j].unmask(round_, survivors, dropped, dict(self.server.signatures), self.server.shares_for(j))
            for j in survivors
            if answering is None or j in answering
        }

    def round(self, round_: int, x: np.ndarray, skip: set[int] = frozenset()) -> np.ndarray:  # type: ignore[assignment]
        self.send(round_, x, skip)
        return self.server.total(self.unmask(round_))


def federation(folder: Path, n: int, bits: int = 40, width: int = 4096) -> Federation:
    authority, ids = credentials(folder, n)
    server = MaskingServer(CONTEXT, bits, width, authority)
    silos = [MaskingSilo(i, bits, width, CONTEXT, ids[i], authority) for i in range(n)]
    fed = Federation(server, silos, bits, width)
    fed.epoch()
    return fed


def chi2_top_bits(values: np.ndarray, bits: int) -> float:
    """Chi-square of the top 4 bits' counts against uniform (15 degrees of freedom)."""
    cells = (values >> np.uint64(bits - 4)).astype(np.int64)
    counts = np.bincount(cells, minlength=16)
    return float(((counts - values.size / 16) ** 2 / (values.size / 16)).sum())
