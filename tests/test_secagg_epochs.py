"""A release enters one masked sum, ever (issue #44): the cross-epoch attack, in process.

A cheating server sums release k of every silo but the victim in epoch A (a roster of the others,
which needs no lie, or a false drop), starts epoch B and asks every silo for release k again.  If
the silos masked their stored release afresh under epoch B, the sum of epoch B minus the sum of
epoch A would be the victim's release under its own noise share only: with the deployment's
objects of commit e0f683a (before this fix) that difference equals the victim's residues exactly
(at a calibrated epsilon = 1, delta = 1e-5 the server then holds epsilon 1.82 at M = 4, dropouts =
1).  Here each silo that masked release k in epoch A refuses to mask it again, so epoch B's round k
has only the victim's message, which it will not let be opened alone (the survivor floor).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedbandits.config import loads_config
from fedbandits.crypto.double_masking import (
    Advert,
    MaskingServer,
    MaskingSilo,
    Reveal,
    SecAggError,
    SignedRoster,
    advert_bytes,
    check_advert,
    secure_threshold,
)
from fedbandits.crypto.secure_aggregation import _agree
from fedbandits.federation.certs import trial_signing
from fedbandits.federation.server import Coordinator
from fedbandits.federation.silo import Silo, SiloError
from fedbandits.federation.spec import make_spec
from maskinghelp import CONTEXT, Federation, credentials, federation

M, VICTIM = 4, 1
NODES = [1000 + i for i in range(M)]
ONE_SUM = "a release enters one masked sum"


def _spec():  # type: ignore[no-untyped-def]
    return make_spec(
        loads_config(
            f"""
[experiment]
seed = 5
horizon = 40
[environment]
name = "gaussian-sphere"
agents = {M}
arms = 10
dim = 3
[[algorithms]]
name = "fedlinucb"
batch = 10
protocol = "distributed-dp"
epsilon = 1.0
delta = 1e-5
dropouts = 1
"""
        )
    )


def _epoch(coord: Coordinator, silos: list[Silo], members: list[int]) -> None:
    secagg = coord.state.secagg
    assert secagg is not None
    adverts = {i: silos[i].advertise(secagg.next_epoch) for i in members}
    roster = secagg.publish(adverts, secure_threshold(len(members), coord.spec.params.colluders))
    coord.record_epoch(roster, [NODES[i] for i in members])
    for i in members:
        silos[i].join(roster)


def _sum(coord: Coordinator, silos: list[Silo], k: int, present: list[int], hide: int | None = None) -> np.ndarray:
    """Round ``k`` as the cheating server runs it: the ``present`` silos asked for their masked
    release k, ``hide``'s message dropped on the floor, the honest consistency check and unmask step,
    and the raw modular sum of the survivors' residues.  A silo's refusal propagates."""
    secagg = coord.state.secagg
    assert secagg is not None
    coord.state.secagg.open_round(k)
    for i in present:
        silos[i].release(k, coord.state.prefix if k > 1 else None, k - 1)  # the stored message if made already
        assert coord.state.secagg.accept(i, secagg.epoch, k, silos[i].masked(k)) is None
    if hide is not None:
        secagg.received.pop(hide)
    survivors, dropped = coord.state.secagg.close_messages(), coord.state.secagg.dropped()
    for j in survivors if dropped else []:
        assert coord.state.secagg.accept_signature(j, silos[j].sign_survivors(k, survivors)) is None
    reveals = {
        j: silos[j].unmask(k, survivors, dropped, dict(secagg.signatures), secagg.shares_for(j)) for j in survivors
    }
    return secagg.total(reveals)


@pytest.mark.parametrize("how", ["a roster without the victim", "a false drop of the victim"])
def test_a_release_summed_in_one_epoch_cannot_enter_another_epochs_sum(tmp_path: Path, how: str) -> None:
    spec = _spec()
    signing = trial_signing(tmp_path / "signing", M)
    coord = Coordinator(spec, tmp_path / "server", signing[0][1])
    silos = [Silo(spec, i, tmp_path / f"silo-{i}", "os", signing=signing[i]) for i in range(M)]
    others = [i for i in range(M) if i != VICTIM]
    if how == "a roster without the victim":  # M - 1 = M - dropouts members: every silo joins it
        _epoch(coord, silos, others)
        first = _sum(coord, silos, 1, others)
    else:
        _epoch(coord, silos, list(range(M)))
        first = _sum(coord, silos, 1, list(range(M)), hide=VICTIM)
    bits = spec.distributed().bits
    exact = np.sum([silos[i].state.messages[1] for i in others], axis=0, dtype=np.uint64) & np.uint64((1 << bits) - 1)
    np.testing.assert_array_equal(first, exact)  # epoch A: the others' sum, as the protocol allows
    # epoch B, every silo in the roster, release 1 asked for again
    _epoch(coord, silos, list(range(M)))
    refusals = []
    for i in others:
        with pytest.raises(SiloError, match=ONE_SUM) as exc:
            silos[i].masked(1)
        refusals.append(str(exc.value))
    assert all("\n" not in r and "epoch 1" in r for r in refusals)  # one line, naming the epoch it went into
    if how == "a roster without the victim":
        # the victim's release 1 is masked once, in epoch B, and its sum would hold it alone: no silo
        # signs for it (1 survivor: below the threshold t = 3 and M - dropouts = 3), so nothing opens it
        with pytest.raises(SiloError, match=r"1 survivor\(s\), fewer than the threshold 3"):
            _sum(coord, silos, 1, [VICTIM])
    else:  # the victim's hidden message of epoch A was its one masked release 1
        with pytest.raises(SiloError, match=ONE_SUM):
            silos[VICTIM].masked(1)
    coord.close_without_data(1, [])  # what the honest server does with such a round
    # the epoch goes on: release 2 of every silo enters epoch B's round 2, and it opens honestly
    second = _sum(coord, silos, 2, list(range(M)))
    expected = np.sum([s.state.messages[2] for s in silos], axis=0, dtype=np.uint64) & np.uint64((1 << bits) - 1)
    np.testing.assert_array_equal(second, expected)


def test_a_restarted_silo_still_refuses_a_release_masked_in_an_earlier_epoch(tmp_path: Path) -> None:
    """The record of what was masked is durable: a silo restarted from its state folder refuses too."""
    spec = _spec()
    signing = trial_signing(tmp_path / "signing", M)
    coord = Coordinator(spec, tmp_path / "server", signing[0][1])
    silos = [Silo(spec, i, tmp_path / f"silo-{i}", "os", signing=signing[i]) for i in range(M)]
    _epoch(coord, silos, list(range(M)))
    _sum(coord, silos, 1, list(range(M)))
    _epoch(coord, silos, list(range(M)))
    again = Silo(spec, 0, tmp_path / "silo-0", "os", signing=signing[0])
    with pytest.raises(SiloError, match=ONE_SUM):
        again.masked(1)
    with pytest.raises(SecAggError, match=ONE_SUM):  # the protocol object itself, below the silo
        assert again.state.secagg is not None
        again.state.secagg.mask(1, again.state.messages[1])


# -- a model server choosing any sequence of epochs, rosters, lists and repeated requests ----------
SEQUENCES, STEPS, SILOS, RELEASES = 300, 14, 5, 3


def _ask(method, *args) -> Any:  # type: ignore[no-untyped-def]
    """A silo's answer, or None when it refused with the protocol's own one-line error."""
    try:
        return method(*args)
    except SecAggError as exc:
        assert "\n" not in str(exc) and str(exc), repr(exc)
        return None


def _walk(rng: np.random.Generator, fed, x: np.ndarray, opened: dict) -> None:  # type: ignore[no-untyped-def]
    """One sequence of a model server's steps against honest silos; ``opened`` collects, per
    (silo, release), the member sets of every sum the server could open."""
    server, silos = fed.server, fed.silos
    mod = np.uint64((1 << fed.bits) - 1)
    for _ in range(STEPS):
        step = rng.choice(["epoch", "round", "round", "round", "stray keys"])
        if step == "stray keys":  # a keys request nobody asked for, for some later epoch
            s = silos[rng.integers(SILOS)]
            _ask(s.advertise, server.next_epoch + int(rng.integers(0, 3)))
            continue
        if step == "epoch" or server.roster is None:
            size = int(rng.integers(2, SILOS + 1))
            members = sorted(rng.choice(SILOS, size, replace=False).tolist())
            e = server.next_epoch
            adverts = {i: a for i in members if (a := _ask(silos[i].advertise, e))}
            if not adverts:
                continue
            t = secure_threshold(len(adverts), 0) if rng.random() < 0.8 else int(rng.integers(1, len(adverts) + 1))
            roster = server.publish(adverts, t)
            for i in members:
                _ask(silos[i].join, roster)
            continue
        members, k = server.roster.members, int(rng.integers(1, RELEASES + 1))
        server.open_round(k)
        for i in members:
            if rng.random() < 0.8:
                message = _ask(silos[i].mask, k, x[i, k])
                if message is not None:  # (one masked under a roster the silo holds from before is refused)
                    server.accept(i, server.epoch, k, message)
        received = dict(server.received)
        b_shares: dict[int, dict[int, bytes]] = {}
        seeds: dict[int, dict[int, bytes]] = {}
        lists = []
        for _attempt in range(int(rng.integers(1, 4))):  # lists of the server's choosing, asked in any order
            listed = sorted(received) if rng.random() < 0.5 else sorted(j for j in members if rng.random() < 0.75)
            listed = listed or [members[0]]
            dropped = [j for j in members if j not in listed]
            lists.append(listed)
            signatures = {}
            for j in listed:
                if rng.random() < 0.9:
                    sig = _ask(silos[j].sign_survivors, k, listed)
                    if sig is not None:
                        signatures[j] = sig
            for j in members:
                blobs = {i: received[i].blobs[j] for i in listed if i != j and i in received}
                reveal = _ask(silos[j].unmask, k, listed, dropped, signatures, blobs)
                if reveal is not None:
                    b_shares.setdefault(j, {}).update(reveal.b_shares)
                    seeds.setdefault(j, {}).update(reveal.seeds)
        pooled = {j: Reveal(b_shares.get(j, {}), seeds.get(j, {})) for j in set(b_shares) | set(seeds)}
        for listed in lists:  # every sum the server can compute from all it was given this round
            if not set(listed) <= set(received):
                continue
            server.round_, server.survivors, server.received = k, listed, received
            try:
                total = server.total(pooled)
            except SecAggError:
                continue
            if np.array_equal(total, x[listed, k].sum(axis=0, dtype=np.uint64) & mod):
                opened.setdefault("sums", set()).add((server.epoch, k))
                for i in listed:
                    opened.setdefault((i, k), set()).add(frozenset(listed))
        server.round_, server.survivors, server.received = None, None, {}


def test_no_model_server_gets_a_release_into_two_sums(tmp_path: Path) -> None:
    """Hundreds of seeded sequences of a model server's choices (epochs with any roster, stray keys
    requests, rounds asked again in later epochs, several survivor lists per round, any silo asked to
    sign and unmask) against honest silos with dropouts = 1: every silo's release k is in at most one
    sum the server can open, that sum holds at least M - dropouts silos, and every refusal is the
    protocol's one-line SecAggError (anything else would fail the walk).  On the code before this
    fix the same walk opens a release in two sums within the first sequences."""
    authority, ids = credentials(tmp_path, SILOS)
    twice, smallest, sums = 0, SILOS, 0
    for seq in range(SEQUENCES):
        rng = np.random.default_rng(seq)
        server = MaskingServer(CONTEXT, 40, 4, authority)
        silos = [MaskingSilo(i, 40, 4, CONTEXT, ids[i], authority, min_survivors=SILOS - 1) for i in range(SILOS)]
        x = rng.integers(0, 1 << 40, size=(SILOS, RELEASES + 1, 4)).astype(np.uint64)
        opened: dict[tuple[int, int], set[frozenset[int]]] = {}
        _walk(rng, Federation(server, silos, 40, 4), x, opened)
        sums += len(opened.pop("sums", ()))
        twice += sum(len(sets) > 1 for sets in opened.values())
        smallest = min([smallest, *(len(s) for sets in opened.values() for s in sets)])
    assert sums >= 120  # the walk opens sums (156 with these seeds), so the two checks below are not vacuous
    assert twice == 0
    assert smallest >= SILOS - 1  # the survivor floor holds across epochs too


# -- the three smaller findings --------------------------------------------------------------------
def test_a_stray_keys_request_leaves_the_epoch_in_force_working(tmp_path: Path) -> None:
    fed = federation(tmp_path, 4)
    x = fed.inputs(21)
    fed.send(1, x, skip={3})  # a round with a dropped silo: every survivor's round seeds are needed
    e = fed.server.next_epoch
    stray = fed.silos[0].advertise(e)  # before the fix this replaced the keys round 1 is masked under
    survivors = fed.server.close_messages()
    for j in survivors:
        assert fed.server.accept_signature(j, fed.silos[j].sign_survivors(1, survivors)) is None
    reveals = {
        j: fed.silos[j].unmask(1, survivors, [3], dict(fed.server.signatures), fed.server.shares_for(j))
        for j in survivors
    }
    np.testing.assert_array_equal(fed.server.total(reveals), fed.modsum(x[:3]))
    assert fed.silos[0].advertise(e) == stray  # the epoch then set up takes the offered keys
    fed.epoch()
    np.testing.assert_array_equal(fed.round(2, x), fed.modsum(x))
    fed.silos[1].advertise(4)
    with pytest.raises(SecAggError, match="advertised keys for the later epoch 4 already"):
        fed.silos[1].advertise(3)  # one advert per epoch: none for an epoch before the one offered


def test_survivor_signatures_bind_the_roster(tmp_path: Path) -> None:
    """Two validly signed adverts of one epoch (a silo whose state was lost advertises again) give
    two rosters; a survivor's signature under one verifies under no other."""
    fed = federation(tmp_path, 3)  # t = 2
    authority, ids = fed.server.authority, [s.identity for s in fed.silos]
    e = fed.server.next_epoch
    adverts = {s.silo: s.advertise(e) for s in fed.silos}
    fresh = MaskingSilo(2, fed.bits, fed.width, CONTEXT, ids[2], authority)  # silo 2, its state lost
    roster_a = SignedRoster.of(CONTEXT, e, 2, adverts)
    roster_b = SignedRoster.of(CONTEXT, e, 2, {**adverts, 2: fresh.advertise(e)})
    assert roster_a.digest() != roster_b.digest()
    fed.silos[0].join(roster_a)
    fed.silos[1].join(roster_b)  # silo 1 is shown the other roster of the same epoch
    for s in fed.silos[:2]:
        s.mask(1, fed.inputs(22)[s.silo])
    signature_a = fed.silos[0].sign_survivors(1, [0, 1])
    signature_b = fed.silos[1].sign_survivors(1, [0, 1])
    with pytest.raises(SecAggError, match="silo 0: the signature does not verify"):
        fed.silos[1].unmask(1, [0, 1], [2], {0: signature_a, 1: signature_b}, {})


@pytest.mark.parametrize(
    "point", ["00" * 32, "01" + "00" * 31, "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"]
)
def test_a_low_order_key_is_refused_with_the_protocols_error(tmp_path: Path, point: str) -> None:
    """A colluding silo advertises a low-order X25519 point (order 1, 1 or 8), signed with its own
    certified key: the server's check and every honest silo refuse it as the protocol's error
    (before the fix an honest silo's mask raised a bare ValueError from the key agreement)."""
    fed = federation(tmp_path, 3)
    e = fed.server.next_epoch
    adverts = {s.silo: s.advertise(e) for s in fed.silos}
    bad, c = bytes.fromhex(point), adverts[2].c_public
    colluder = fed.silos[2].identity
    adverts[2] = Advert(c, bad, colluder.cert, colluder.sign(advert_bytes(CONTEXT, e, 2, c, bad)))
    assert "low order" in str(check_advert(fed.server.authority, CONTEXT, e, 2, adverts[2]))
    with pytest.raises(SecAggError, match="silo 2: a public key of low order"):
        fed.silos[0].join(SignedRoster.of(CONTEXT, e, 2, adverts))
    with pytest.raises(SecAggError, match="low order or malformed"):  # below the roster check too
        _agree(fed.silos[0].s_private, bad, b"info")


# -- what a server restart in the middle of a round costs -------------------------------------------
def _deployment(tmp_path: Path) -> tuple[Coordinator, list[Silo], list]:  # type: ignore[type-arg]
    spec = _spec()
    signing = trial_signing(tmp_path / "signing", M)
    coord = Coordinator(spec, tmp_path / "server", signing[0][1])
    silos = [Silo(spec, i, tmp_path / f"silo-{i}", "derived", signing=signing[i]) for i in range(M)]
    _epoch(coord, silos, list(range(M)))
    return coord, silos, signing


@pytest.mark.parametrize("stopped", ["after the masked messages", "after the unmask answers"])
def test_a_server_restarted_mid_round_closes_it_with_data_in_the_epoch_in_force(tmp_path: Path, stopped: str) -> None:
    coord, silos, signing = _deployment(tmp_path)
    sent = {}
    coord.state.secagg.open_round(1)
    for s in silos:
        s.release(1, None, 0)
        sent[s.silo_id] = s.masked(1)
    if stopped == "after the unmask answers":
        secagg = coord.state.secagg
        assert secagg is not None
        for i, m in sent.items():
            coord.state.secagg.accept(i, secagg.epoch, 1, m)
        survivors = coord.state.secagg.close_messages()
        answered = {j: silos[j].unmask(1, survivors, [], {}, secagg.shares_for(j)) for j in survivors}
    # the server process dies here; a new one starts from its durable state
    again = Coordinator(coord.spec, tmp_path / "server", signing[0][1])
    assert not again.needs_epoch(NODES) and again.delivered_epoch == 0  # same epoch; roster re-delivered
    secagg = again.state.secagg
    assert secagg is not None and secagg.round_ is None and secagg.epoch == 1
    again.state.secagg.open_round(1)
    for s in silos:
        resent = s.masked(1)  # the stored message, byte for byte: no second masking
        assert resent is s.state.secagg.rounds[1].message and np.array_equal(resent.masked, sent[s.silo_id].masked)  # type: ignore[union-attr]
        assert again.state.secagg.accept(s.silo_id, secagg.epoch, 1, resent) is None
    survivors = again.state.secagg.close_messages()
    reveals = {j: silos[j].unmask(1, survivors, [], {}, secagg.shares_for(j)) for j in survivors}
    if stopped == "after the unmask answers":
        assert all(reveals[j] is answered[j] for j in survivors)  # the stored answers, nothing new revealed
    prefix = again.close_masked_round(1, reveals, [])
    assert again.state.rounds[0].accepted == list(range(M)) and prefix.any()


def test_a_server_restarted_mid_round_into_a_new_epoch_closes_it_without_data(tmp_path: Path) -> None:
    coord, silos, signing = _deployment(tmp_path)
    coord.state.secagg.open_round(1)
    for s in silos:
        s.release(1, None, 0)
        s.masked(1)
    again = Coordinator(coord.spec, tmp_path / "server", signing[0][1])
    assert again.needs_epoch([2000 + i for i in range(M)])  # the silos came back as other nodes
    _epoch(again, silos, list(range(M)))
    for s in silos:
        with pytest.raises(SiloError, match=ONE_SUM):
            s.masked(1)
    prefix = again.close_without_data(1, [])
    assert not prefix.any() and again.state.rounds[0].accepted == []
    # the next round is whole again
    again.state.secagg.open_round(2)
    secagg = again.state.secagg
    assert secagg is not None
    for s in silos:
        s.release(2, prefix, 1)
        assert again.state.secagg.accept(s.silo_id, secagg.epoch, 2, s.masked(2)) is None
    survivors = again.state.secagg.close_messages()
    reveals = {j: silos[j].unmask(2, survivors, [], {}, secagg.shares_for(j)) for j in survivors}
    again.close_masked_round(2, reveals, [])
    assert again.state.rounds[1].accepted == list(range(M))
