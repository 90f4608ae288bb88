"""A server that cheats, against the deployment's secure aggregation (issue #32): each attack fails.

The harness (tests/maskinghelp.py) drives the silos' side directly and plays a server that deviates
from the protocol.  Its goal is silo 1's input: its noisy residues, i.e. its p-sum under its own
noise share only.  Against the previous protocol (pairwise masks only, unsigned keys, a dropped
silo's key rebuilt from Shamir shares) each of these attacks recovered that input exactly: commit
6f0bbc0 holds the same five attacks as passing tests.  Here each ends in a refusal with its reason,
or leaves the server with residues that are uniformly random (chi-square of the top four bits below
its 99.9% quantile, and not the input).
"""

from __future__ import annotations

import numpy as np
import pytest

from fedbandits.crypto.double_masking import Advert, Reveal, SecAggError, SignedRoster, advert_bytes
from fedbandits.crypto.secure_aggregation import keypair, prg, shamir_join
from fedbandits.crypto.signing import Identity
from maskinghelp import CHI2_15_999, CONTEXT, Federation, chi2_top_bits, credentials, federation


def _strip_pairwise(fed: Federation, silo: int, round_: int, reveals: dict[int, Reveal], y: np.ndarray) -> np.ndarray:
    """What the server makes of ``silo``'s message with every round seed it obtained for it."""
    out = y.copy()
    for k, reveal in reveals.items():
        seed = reveal.seeds.get(silo)
        if seed is not None:
            m = prg(seed, 0, fed.width, fed.bits)
            out = out + m if k < silo else out - m  # y_silo carries sign(silo, k) m = -sign(k, silo) m
    return out & fed.mod


def _uniform_and_not(fed: Federation, guess: np.ndarray, x: np.ndarray) -> None:
    assert chi2_top_bits(guess, fed.bits) < CHI2_15_999
    assert np.mean(guess == x) < 0.01


def test_a_false_drop_strips_the_pairwise_masks_but_not_the_self_mask(tmp_path) -> None:
    fed = federation(tmp_path, 5)  # t = 3
    x = fed.inputs(1)
    x[1, :] = 7  # a plaintext far from uniform
    fed.send(1, x)
    y1 = fed.server.received.pop(1).masked  # silo 1 answered; the server hides it and says it dropped
    reveals = fed.unmask(1)
    assert all(1 in r.seeds and 1 not in r.b_shares for r in reveals.values())
    _uniform_and_not(fed, _strip_pairwise(fed, 1, 1, reveals, y1), x[1])
    # silo 1's self-mask needs t = 3 shares from lists with silo 1; the others hold one without it
    everybody = [0, 1, 2, 3, 4]
    for j in (0, 2, 3, 4):
        with pytest.raises(SecAggError, match="a second, different survivor list"):
            fed.silos[j].sign_survivors(1, everybody)
        with pytest.raises(SecAggError, match="a second, different survivor list"):  # nor unsigned, as "nobody dropped"
            fed.silos[j].unmask(
                1, everybody, [], {}, {k: fed.server.received[k].blobs[j] for k in everybody if k not in (1, j)}
            )
    # silo 1 itself, told that nobody dropped, gives its own share: one of the three needed
    own = fed.silos[1].unmask(1, everybody, [], {}, {k: fed.server.received[k].blobs[1] for k in (0, 2, 3, 4)})
    assert own.seeds == {}
    with pytest.raises(SecAggError, match=r"1 share\(s\) cannot rebuild a key that needs 3"):
        shamir_join({1: own.b_shares[1]}, 3)


@pytest.mark.parametrize("forger", ["own CA", "silo's certificate, server's keys"])
def test_a_substituted_roster_key_is_refused(tmp_path, forger) -> None:
    fed = federation(tmp_path / "real", 5)
    e = fed.server.next_epoch
    adverts = {s.silo: s.advertise(e) for s in fed.silos}
    _, fake_ids = credentials(tmp_path / "fake", 5)  # a CA of the server's own, certificates for "silo-j"
    for j in (0, 2, 3, 4):
        c, s = keypair()[1], keypair()[1]
        signer = fake_ids[j] if forger == "own CA" else Identity(j, fake_ids[j].key, adverts[j].cert)
        adverts[j] = Advert(c, s, signer.cert, signer.sign(advert_bytes(CONTEXT, e, j, c, s)))
    shown = SignedRoster.of(CONTEXT, e, 3, adverts)
    reason = "not issued by the pinned signing CA" if forger == "own CA" else "signature does not verify"
    with pytest.raises(SecAggError, match=reason):
        fed.silos[1].join(shown)
    assert fed.silos[1].joined == 1 and fed.silos[1].roster is not None  # the refused roster was not taken
    assert fed.silos[1].roster.epoch == 1


def test_split_survivor_lists_cannot_both_gather_the_threshold(tmp_path) -> None:
    fed = federation(tmp_path, 5)  # t = 3: 2t > 5, any two lists of 3 signers share one
    x = fed.inputs(3)
    fed.send(1, x)
    srv = fed.server
    everybody, without_1 = [0, 1, 2, 3, 4], [0, 2, 3, 4]
    sig_a = {j: fed.silos[j].sign_survivors(1, everybody) for j in (0, 1, 2)}  # told: nobody dropped
    sig_b = {j: fed.silos[j].sign_survivors(1, without_1) for j in (3, 4)}  # told: silo 1 dropped
    # silos 0, 1, 2 reveal silo 1's self-mask shares: the server rebuilds b_1 ...
    reveals = {
        j: fed.silos[j].unmask(1, everybody, [], sig_a, {k: srv.received[k].blobs[j] for k in everybody if k != j})
        for j in (0, 1, 2)
    }
    assert all(1 in r.b_shares for r in reveals.values())
    # ... but the round seeds of silo 1 with 3 and 4 need 3 signatures of the list without silo 1
    for j in (3, 4):
        with pytest.raises(SecAggError, match="at least 3 survivors"):
            fed.silos[j].unmask(1, without_1, [1], sig_b, {k: srv.received[k].blobs[j] for k in without_1 if k != j})
        forged = {**sig_b, 0: sig_a[0]}  # silo 0's signature is of the other list
        with pytest.raises(SecAggError, match="does not verify"):
            fed.silos[j].unmask(1, without_1, [1], forged, {k: srv.received[k].blobs[j] for k in without_1 if k != j})
    with pytest.raises(SecAggError, match="a second, different survivor list"):
        fed.silos[0].sign_survivors(1, without_1)


def test_asking_for_both_shares_of_one_silo_is_refused(tmp_path) -> None:
    fed = federation(tmp_path, 5)
    fed.send(1, fed.inputs(4))
    survivors = fed.server.close_messages()
    sigs = {j: fed.silos[j].sign_survivors(1, survivors) for j in survivors}
    for j in (0, 2):
        blobs = fed.server.shares_for(j)
        with pytest.raises(SecAggError, match=r"both the self-mask share and the round seed of silo\(s\) \[1\]"):
            fed.silos[j].unmask(1, survivors, [1], sigs, blobs)
        with pytest.raises(SecAggError, match="partition the members"):
            fed.silos[j].unmask(1, [0, 2, 3, 4], [], sigs, blobs)
        assert 1 not in fed.silos[j].answered


def test_a_replayed_roster_or_round_is_refused_and_old_rounds_stay_closed(tmp_path) -> None:
    fed = federation(tmp_path, 5)
    old_roster = fed.silos[0].roster
    x = {r: fed.inputs(10 + r) for r in (1, 2, 3)}
    np.testing.assert_array_equal(fed.round(1, x[1]), fed.modsum(x[1]))
    fed.send(2, x[2])
    y1 = fed.server.received[1].masked
    reveals_2 = fed.unmask(2)
    fed.server.total(reveals_2)
    # silo 1 survived round 2: the server legitimately rebuilt its round-2 self-mask seed
    b_2 = shamir_join({j: r.b_shares[1] for j, r in reveals_2.items()}, 3)
    # round 3: silo 1 really drops: the others reveal their round-3 seeds with it, and nothing more
    fed.send(3, x[3], skip={1})
    reveals_3 = fed.unmask(3)
    fed.server.total(reveals_3)
    # the previous protocol rebuilt silo 1's key here, which opened its round-2 message
    guess = _strip_pairwise(fed, 1, 2, reveals_3, (y1 - prg(b_2, 2, fed.width, fed.bits)) & fed.mod)
    _uniform_and_not(fed, guess, x[2][1])
    # a replayed round: the stored bytes again (nothing new), other data refused, a skipped number too
    assert fed.silos[0].mask(2, x[2][0]) is fed.silos[0].rounds[2].message
    with pytest.raises(SecAggError, match="masked already, for other residues"):
        fed.silos[0].mask(2, x[3][0])
    fed.silos[1].rounds.clear()
    with pytest.raises(SecAggError, match="not after round 2: a replayed round"):
        fed.silos[1].mask(1, x[1][1])
    fed.epoch()
    assert old_roster is not None
    with pytest.raises(SecAggError, match="replayed or foreign roster"):
        fed.silos[0].join(old_roster)
    with pytest.raises(SecAggError, match="later epoch than 2"):
        fed.silos[0].advertise(1)
