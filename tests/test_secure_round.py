"""The transport-free round of secure aggregation (:mod:`fedbandits.crypto.secure_round`), carried in
memory between a :class:`MaskingServer` and :class:`MaskingSilo` objects: the order of its steps,
the sum it leads to, and what it refuses (issue #45: the one place a secure round is written)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedbandits.crypto.double_masking import Advert, MaskingServer, MaskingSilo, SecAggError
from fedbandits.crypto.secure_round import (
    KEYS,
    MASKED,
    SURVIVORS,
    UNMASK,
    Ask,
    Epoch,
    Replies,
    Step,
    drive,
    secure_round,
)
from maskinghelp import CONTEXT, credentials

BITS, WIDTH = 40, 64


class Memory:
    """A transport in memory: the ``present`` silos answer, the others have dropped; ``tamper``
    replaces one silo's answer in one phase."""

    def __init__(self, silos: list[MaskingSilo], x: np.ndarray, present: set[int]) -> None:
        self.silos, self.x, self.present = silos, x, present
        self.phases: list[str] = []
        self.tamper: dict[tuple[str, int], Any] = {}

    def answer(self, silo: MaskingSilo, step: Ask) -> Any:
        f = step.fields
        if step.phase == KEYS:
            return silo.advertise(f["epoch"])
        if step.phase == MASKED:
            if silo.roster != f["roster"]:
                silo.join(f["roster"])
            return f["epoch"], silo.mask(f["round"], self.x[silo.silo])
        if step.phase == SURVIVORS:
            return silo.sign_survivors(f["round"], f["survivors"])
        held = step.per_silo[silo.silo]["held"]
        return silo.unmask(f["round"], f["survivors"], f["dropped"], f["signatures"], held)

    def __call__(self, step: Step) -> Replies | None:
        if isinstance(step, Epoch):
            self.phases.append("epoch")
            return None
        self.phases.append(step.phase)
        asked = self.present if step.to is None else self.present & set(step.to)
        replies: Replies = {}
        for i in sorted(asked):
            try:
                replies[i] = (f"node-{i}", self.tamper.get((step.phase, i)) or self.answer(self.silos[i], step))
            except SecAggError as exc:
                replies[i] = (f"node-{i}", str(exc))
        return replies


def _federation(tmp_path: Path, n: int, least: int = 3) -> tuple[MaskingServer, list[MaskingSilo], np.ndarray]:
    """``least``: each silo's fewest survivors (the noise's M - dropouts)."""
    authority, ids = credentials(tmp_path, n)
    server = MaskingServer(CONTEXT, BITS, WIDTH, authority)
    silos = [MaskingSilo(i, BITS, WIDTH, CONTEXT, ids[i], authority, min_survivors=least) for i in range(n)]
    x = np.random.default_rng(5).integers(0, 1 << BITS, size=(n, WIDTH)).astype(np.uint64)
    return server, silos, x


def _modsum(x: np.ndarray, rows: list[int]) -> np.ndarray:
    return x[rows].sum(axis=0, dtype=np.uint64) & np.uint64((1 << BITS) - 1)


def test_a_whole_round_sets_up_keys_masks_and_unmasks_without_a_consistency_check(tmp_path: Path) -> None:
    server, silos, x = _federation(tmp_path, 4)
    carry = Memory(silos, x, {0, 1, 2, 3})
    out = drive(secure_round(server, 1, new_epoch=True, colluders=0), carry)
    # nobody dropped: no survivor list is signed (module docstring of double_masking)
    assert carry.phases == [KEYS, "epoch", MASKED, UNMASK]
    assert out.reveals is not None and out.survivors == [0, 1, 2, 3] and out.dropped == [] and out.rejected == []
    np.testing.assert_array_equal(server.total(out.reveals), _modsum(x, [0, 1, 2, 3]))
    # the next round of the same epoch needs no key set-up
    carry.phases = []
    out = drive(secure_round(server, 2, new_epoch=False, colluders=0), carry)
    assert carry.phases == [MASKED, UNMASK] and out.reveals is not None and server.epoch == 1


def test_a_dropped_silo_brings_the_signed_survivor_list_and_the_survivors_sum(tmp_path: Path) -> None:
    server, silos, x = _federation(tmp_path, 4)
    drive(secure_round(server, 1, new_epoch=True, colluders=0), Memory(silos, x, {0, 1, 2, 3}))
    carry = Memory(silos, x, {0, 1, 3})  # silo 2 is gone before round 2
    out = drive(secure_round(server, 2, new_epoch=False, colluders=0), carry)
    assert carry.phases == [MASKED, SURVIVORS, UNMASK]
    assert out.survivors == [0, 1, 3] and out.dropped == [2] and out.signers == [0, 1, 3]
    assert out.reveals is not None
    np.testing.assert_array_equal(server.total(out.reveals), _modsum(x, [0, 1, 3]))


def test_refused_answers_are_kept_with_the_senders_tag_and_the_round_goes_on(tmp_path: Path) -> None:
    server, silos, x = _federation(tmp_path, 4, least=2)
    carry = Memory(silos, x, {0, 1, 2, 3})
    forged = silos[3].advertise(1)
    carry.tamper[(KEYS, 3)] = Advert(forged.c_public, forged.s_public, forged.cert, bytes(64))  # a bad signature
    carry.tamper[(MASKED, 1)] = "silo 1: could not be parsed"  # the transport's own reason
    out = drive(secure_round(server, 1, new_epoch=True, colluders=0), carry)
    assert [tag for tag, _ in out.rejected] == ["node-3", "node-1", "node-3"]
    assert "signature" in out.rejected[0][1] and out.rejected[1][1] == "silo 1: could not be parsed"
    assert out.rejected[2][1] == "the roster of epoch 1 lists other keys for silo 3"  # silo 3 refuses the roster
    # silo 3 is not in the roster; silo 1 dropped from the round: the others' sum, t = 2 of 3 signing
    assert server.roster is not None and server.roster.members == [0, 1, 2]
    assert out.survivors == [0, 2] and out.dropped == [1] and out.reveals is not None
    np.testing.assert_array_equal(server.total(out.reveals), _modsum(x, [0, 2]))


def test_too_few_messages_or_no_keys_close_the_round_without_data(tmp_path: Path) -> None:
    server, silos, x = _federation(tmp_path, 4)
    out = drive(secure_round(server, 1, new_epoch=True, colluders=0), Memory(silos, x, set()))
    assert out.reveals is None and out.why == "no silo answered the secure-aggregation key set-up"
    drive(secure_round(server, 1, new_epoch=True, colluders=0), Memory(silos, x, {0, 1, 2, 3}))
    out = drive(secure_round(server, 2, new_epoch=False, colluders=0), Memory(silos, x, {0, 1}))  # t = 3
    assert out.reveals is None and out.why == "2 masked message(s), fewer than t = 3"
    # a wrong kind of answer is refused by name, not trusted
    carry = Memory(silos, x, {0, 1, 2, 3})
    carry.tamper[(MASKED, 0)] = b"not a message"
    out = drive(secure_round(server, 3, new_epoch=False, colluders=0), carry)
    assert out.rejected == [("node-0", "expected tuple, got bytes")] and out.dropped == [0]
