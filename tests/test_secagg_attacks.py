"""A server that cheats, against secure aggregation as it stands (issue #32): each attack succeeds.

The harness drives the silos' side (:class:`SecAggClient`) directly and plays a server that deviates
from the protocol.  What it learns is silo 1's input: its noisy residues, i.e. its p-sum under its
own noise share only.  These tests record what the honest-but-curious protocol gives away; the
defences (signed keys, self-masks, consistency checks) turn each into a refusal.
"""

from __future__ import annotations

import numpy as np

from fedbandits.federation.secure_aggregation import (
    Roster,
    SecAggClient,
    SecAggServer,
    _agree,
    keypair,
    prg,
    shamir_join,
)

BITS, WIDTH, N = 40, 64, 5
MOD = np.uint64((1 << BITS) - 1)


def _federation() -> tuple[SecAggServer, list[SecAggClient]]:
    server = SecAggServer(b"deployment", BITS, WIDTH)
    clients = [SecAggClient(i, BITS, WIDTH) for i in range(N)]
    roster = server.publish({c.silo: c.advertise() for c in clients}, 3)
    routed = server.route({c.silo: c.share(roster) for c in clients})
    for c in clients:
        c.receive(routed[c.silo])
    return server, clients


def _inputs(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 1 << BITS, size=(N, WIDTH)).astype(np.uint64)


def _strip(roster: Roster, silo: int, key: bytes, round_: int, message: np.ndarray) -> np.ndarray:
    """Silo ``silo``'s input from its masked message, given its mask key."""
    out = message.copy()
    for j in roster.members:
        if j != silo:
            seed = _agree(key, roster.s_public[j], roster.info("mask", min(silo, j), max(silo, j)))
            m = prg(seed, round_, WIDTH, BITS)
            out = out - m if silo < j else out + m
    return out & MOD


def test_a_false_drop_opens_an_answering_silos_message() -> None:
    server, clients = _federation()
    x = _inputs(1)
    message = clients[1].mask(1, x[1])  # silo 1 answers ...
    revealed = {c.silo: c.reveal([1]) for c in clients if c.silo != 1}  # ... and is declared dropped
    key = shamir_join({j: r[1] for j, r in revealed.items()}, 3)
    assert server.roster is not None
    np.testing.assert_array_equal(_strip(server.roster, 1, key, 1, message), x[1])


def test_a_substituted_roster_key_opens_a_message() -> None:
    _server, clients = _federation()
    # a new epoch in which silo 1 is shown a roster whose other members' keys are the server's
    adverts = {c.silo: c.advertise() for c in clients}
    fake = {j: (keypair(), keypair()) for j in range(N) if j != 1}
    shown = Roster(
        b"deployment",
        2,
        3,
        {j: adverts[1][0] if j == 1 else fake[j][0][1] for j in range(N)},
        {j: adverts[1][1] if j == 1 else fake[j][1][1] for j in range(N)},
    )
    clients[1].share(shown)  # accepted: nothing says whose keys these are
    x = _inputs(2)
    message = clients[1].mask(1, x[1])
    out = message.copy()
    for j, (_, (s_private, _)) in fake.items():
        seed = _agree(s_private, shown.s_public[1], shown.info("mask", min(1, j), max(1, j)))
        m = prg(seed, 1, WIDTH, BITS)
        out = out - m if 1 < j else out + m
    np.testing.assert_array_equal(out & MOD, x[1])


def test_split_survivor_lists_give_the_sum_and_one_message() -> None:
    server, clients = _federation()
    x = _inputs(3)
    server.open_round(1)
    for c in clients:
        assert server.accept(c.silo, server.epoch, 1, c.mask(1, x[c.silo])) is None
    total = server.total()  # everybody answered: the sum ...
    # ... and silos 0, 2, 3 are told (separately from 4) that silo 1 dropped: three shares suffice
    revealed = {j: clients[j].reveal([1]) for j in (0, 2, 3)}
    key = shamir_join({j: r[1] for j, r in revealed.items()}, 3)
    assert clients[0].roster is not None
    np.testing.assert_array_equal(_strip(clients[0].roster, 1, key, 1, server.received[1]), x[1])
    np.testing.assert_array_equal(total, x.sum(axis=0, dtype=np.uint64) & MOD)


def test_asking_for_the_key_share_of_a_silo_that_answered_is_granted() -> None:
    server, clients = _federation()
    x = _inputs(4)
    server.open_round(1)
    for c in clients:
        server.accept(c.silo, server.epoch, 1, c.mask(1, x[c.silo]))
    assert server.dropped() == []
    shares = [clients[j].reveal([1]) for j in (0, 2, 3)]  # silo 1 is in the round, yet its share is given
    assert all(1 in s for s in shares)


def test_a_key_revealed_later_in_the_epoch_opens_the_earlier_rounds() -> None:
    server, clients = _federation()
    x = {r: _inputs(10 + r) for r in (1, 2)}
    kept = {r: clients[1].mask(r, x[r][1]) for r in (1, 2)}  # rounds 1 and 2: silo 1 answers
    # round 3: silo 1 really drops; the honest recovery rebuilds its key, and the old rounds open
    revealed = {c.silo: c.reveal([1]) for c in clients if c.silo != 1}
    key = shamir_join({j: r[1] for j, r in revealed.items()}, 3)
    assert server.roster is not None
    for r in (1, 2):
        np.testing.assert_array_equal(_strip(server.roster, 1, key, r, kept[r]), x[r][1])
