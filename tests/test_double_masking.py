"""Secure aggregation with signed keys, self-masks and a consistency check
(fedbandits.crypto.double_masking), honest runs and bad input, in process."""

from __future__ import annotations

import pickle
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedbandits.crypto.double_masking import Masked, SecAggError, SignedRoster, check_advert, secure_threshold
from maskinghelp import CHI2_15_999, CONTEXT, chi2_top_bits, federation


def test_every_message_is_uniform_and_the_unmasked_sum_is_exact(tmp_path) -> None:
    fed = federation(tmp_path, 5)
    x = fed.inputs(0)
    x[:, :100] = 7  # a plaintext far from uniform
    fed.send(1, x)
    assert all(chi2_top_bits(m.masked, fed.bits) < CHI2_15_999 for m in fed.server.received.values())
    # the plain modular sum of the messages still carries the self-masks: uniform, not the sum
    naive = fed.modsum(np.stack([m.masked for m in fed.server.received.values()]))
    assert chi2_top_bits(naive, fed.bits) < CHI2_15_999
    np.testing.assert_array_equal(fed.server.total(fed.unmask(1)), fed.modsum(x))


def test_any_threshold_of_answers_unmasks_a_round_nobody_dropped(tmp_path) -> None:
    fed = federation(tmp_path, 5)  # t = 3
    x = fed.inputs(1)
    fed.send(1, x)
    reveals = fed.unmask(1, answering={0, 3, 4})
    np.testing.assert_array_equal(fed.server.total(reveals), fed.modsum(x))


def test_a_dropped_silo_is_removed_and_the_epoch_goes_on(tmp_path) -> None:
    fed = federation(tmp_path, 6)
    for r, skip in ((1, {2}), (2, set()), (3, {0, 5})):
        x = fed.inputs(10 + r)
        kept = [i for i in range(6) if i not in skip]
        np.testing.assert_array_equal(fed.round(r, x, skip), fed.modsum(x[kept]))
    assert fed.server.epoch == 1  # no key was revealed: no new set-up


def test_with_somebody_dropped_every_survivor_must_answer(tmp_path) -> None:
    fed = federation(tmp_path, 5)
    fed.send(1, fed.inputs(2), skip={4})
    reveals = fed.unmask(1, answering={0, 1, 2})  # 3 = t answers, but survivor 3's seed with 4 is missing
    with pytest.raises(SecAggError, match="survivor 3 gave no round seed with dropped silo 4"):
        fed.server.total(reveals)


def test_too_few_survivors_cannot_be_signed_for(tmp_path) -> None:
    fed = federation(tmp_path, 5)
    fed.send(1, fed.inputs(3), skip={2, 3, 4})
    survivors = fed.server.close_messages()
    with pytest.raises(SecAggError, match="fewer than the threshold 3"):
        fed.silos[0].sign_survivors(1, survivors)


def test_a_retried_round_gets_the_same_bytes_and_other_data_is_refused(tmp_path) -> None:
    fed = federation(tmp_path, 3)
    x = fed.inputs(4)
    first = fed.silos[0].mask(1, x[0])
    again = fed.silos[0].mask(1, x[0])
    assert first is again
    with pytest.raises(SecAggError, match="masked already, for other residues"):
        fed.silos[0].mask(1, x[1])


def test_the_state_pickles_mid_round(tmp_path) -> None:
    fed = federation(tmp_path, 3)
    x = fed.inputs(5)
    fed.send(1, x)
    survivors = fed.server.close_messages()
    for j in survivors:
        fed.server.accept_signature(j, fed.silos[j].sign_survivors(1, survivors))
    fed.silos = [pickle.loads(pickle.dumps(s)) for s in fed.silos]  # restarted silos
    fed.server = pickle.loads(pickle.dumps(fed.server))
    reveals = {
        j: fed.silos[j].unmask(1, survivors, [], dict(fed.server.signatures), fed.server.shares_for(j))
        for j in survivors
    }
    np.testing.assert_array_equal(fed.server.total(reveals), fed.modsum(x))


def test_secure_threshold_splits_every_two_lists() -> None:
    for n in range(1, 40):
        for c in range(n):
            t = secure_threshold(n, c)
            assert t <= n and 2 * t > n + c and t > c


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda m: Masked(m.masked[:-1], m.blobs, m.commitment), "4096 uint64 residues"),
        (lambda m: Masked(m.masked.astype(np.int64), m.blobs, m.commitment), "4096 uint64 residues"),
        (lambda m: Masked(m.masked | np.uint64(1 << 45), m.blobs, m.commitment), "below 2"),
        (lambda m: Masked(m.masked, {**m.blobs, 1: b"x" * 10}, m.commitment), "self-mask share for each"),
        (lambda m: Masked(m.masked, {}, m.commitment), "self-mask share for each"),
        (lambda m: Masked(m.masked, m.blobs, b"short"), "commitment must be 32 bytes"),
    ],
)
def test_malformed_messages_are_rejected_and_the_round_still_closes(tmp_path, change, reason) -> None:
    fed = federation(tmp_path, 3)
    x = fed.inputs(6)
    fed.server.open_round(1)
    bad = change(fed.silos[0].mask(1, x[0]))
    got = fed.server.accept(0, 1, 1, bad)
    assert got is not None and reason in got
    assert fed.server.received == {}
    for s in fed.silos:
        assert fed.server.accept(s.silo, 1, 1, s.mask(1, x[s.silo])) is None
    np.testing.assert_array_equal(fed.server.total(fed.unmask(1)), fed.modsum(x))


def test_malformed_unmask_requests_are_refused_and_change_nothing(tmp_path) -> None:
    fed = federation(tmp_path, 4)  # t = 3; silo 3 drops, so the unmask step needs signatures
    x = fed.inputs(7)
    fed.send(1, x, skip={3})
    survivors = fed.server.close_messages()
    for j in survivors:
        fed.server.accept_signature(j, fed.silos[j].sign_survivors(1, survivors))
    sigs, blobs = dict(fed.server.signatures), fed.server.shares_for(0)
    silo = fed.silos[0]
    for args, reason in [
        ((["0", 1, 2], [3], sigs, blobs), "list of silo indices"),
        (([2, 1, 0], [3], sigs, blobs), "sorted, distinct"),
        (([0, 1, 2], [], sigs, blobs), "partition the members"),
        (([0, 1, 2, 3], [], sigs, blobs), "a second, different survivor list"),  # the all-members answer
        (([0, 1, 2], [3], {0: b"x" * 64, 1: sigs[1], 2: sigs[2]}, blobs), "does not verify"),
        (([0, 1, 2], [3], {0: sigs[0], 1: sigs[1]}, blobs), "at least 3 survivors"),
        (([0, 1, 2], [3], [sigs[0]], blobs), "signatures must map"),
        (([0, 1, 2], [3], sigs, {1: blobs[1]}), "one self-mask share from each"),
        (([0, 1, 2], [3], sigs, {1: blobs[1], 2: blobs[1]}), "does not authenticate"),
        (([0, 1, 2], [3], sigs, {1: blobs[1], 2: b"y" * 7}), "must be 94 bytes"),
    ]:
        with pytest.raises(SecAggError, match=reason):
            silo.unmask(1, *args)
        assert 1 not in silo.answered
    reveals = {j: fed.silos[j].unmask(1, survivors, [3], sigs, fed.server.shares_for(j)) for j in survivors}
    np.testing.assert_array_equal(fed.server.total(reveals), fed.modsum(x[:3]))


def test_with_nobody_dropped_no_signature_is_needed_and_the_silo_is_bound(tmp_path) -> None:
    fed = federation(tmp_path, 4)
    x = fed.inputs(9)
    fed.send(1, x)
    everybody = fed.server.close_messages()
    reveals = {j: fed.silos[j].unmask(1, everybody, [], {}, fed.server.shares_for(j)) for j in everybody}
    assert all(r.seeds == {} for r in reveals.values())  # no round seed leaves a silo
    np.testing.assert_array_equal(fed.server.total(reveals), fed.modsum(x))
    with pytest.raises(SecAggError, match="a second, different survivor list"):  # no other list after that
        fed.silos[0].sign_survivors(1, [0, 1, 2])


def test_a_roster_with_a_missing_reused_or_bad_signature_is_refused(tmp_path) -> None:
    fed = federation(tmp_path, 4)
    old = fed.silos[0].roster
    assert old is not None
    e = fed.server.next_epoch
    adverts = {s.silo: s.advertise(e) for s in fed.silos}
    good = SignedRoster.of(CONTEXT, e, 3, adverts)
    cases = [
        # silo 2's advert of the previous epoch, keys and signature as they were: bound to epoch 1
        (SignedRoster.of(CONTEXT, e, 3, {**adverts, 2: old.advert(2)}), "silo 2: the signature does not verify"),
        (replace(good, signatures={j: v for j, v in good.signatures.items() if j != 3}), "needs two keys, a cert"),
        (replace(good, signatures={**good.signatures, 3: good.signatures[3][:-1] + b"x"}), "silo 3: the signature"),
        (replace(good, signatures={**good.signatures, 3: b"short"}), "must be 64 bytes"),
        (replace(good, certs={**good.certs, 1: good.certs[2]}), "issued to \\['silo-2'\\], not 'silo-1'"),
        (replace(good, certs={**good.certs, 1: b"x" * 9000}), "at most 8192"),
        (replace(good, certs={**good.certs, 1: [b"x"]}), "PEM bytes"),  # not even hashable
        (replace(good, certs={**good.certs, 1: b"-----BEGIN CERTIFICATE-----\nAAAA"}), "not a PEM X.509"),
        (replace(good, threshold=2), "threshold 2 for 4 member"),  # 2t > n fails: two lists could both pass
        (replace(good, context=b"another"), "another deployment"),
    ]
    for roster, reason in cases:
        with pytest.raises(SecAggError, match=reason):
            fed.silos[0].join(roster)
        assert fed.silos[0].roster is old  # nothing taken
    assert "PEM bytes" in str(check_advert(fed.server.authority, CONTEXT, e, 1, replace(adverts[1], cert=[b"x"])))
    fed.silos[0].join(good)
    assert fed.silos[0].joined == e


def test_a_silo_refuses_sums_smaller_than_the_noise_is_provisioned_for(tmp_path) -> None:
    fed = federation(tmp_path, 5)  # t = 3
    for s in fed.silos:
        s.min_survivors = 4  # M - dropouts with M = 5, dropouts = 1
    fed.send(1, fed.inputs(8), skip={3, 4})
    survivors = fed.server.close_messages()
    with pytest.raises(SecAggError, match="provisioned for sums of at least 4 silos"):
        fed.silos[0].sign_survivors(1, survivors)
    e = fed.server.next_epoch
    adverts = {s.silo: s.advertise(e) for s in fed.silos[:3]}  # a roster of 3: no round could close
    with pytest.raises(SecAggError, match="3 member\\(s\\); the noise is provisioned"):
        fed.silos[0].join(SignedRoster.of(CONTEXT, e, 2, adverts))


INDEX = st.one_of(st.integers(-2, 6), st.booleans(), st.text(max_size=2))
LISTS = st.one_of(st.lists(INDEX, max_size=6), st.none(), st.text(max_size=3), st.integers())
BLOBS = st.dictionaries(INDEX, st.binary(max_size=100), max_size=5)


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):  # type: ignore[no-untyped-def]
    fed = federation(tmp_path_factory.mktemp("fuzz"), 4)
    fed.send(1, fed.inputs(11), skip={3})
    survivors = fed.server.close_messages()
    for j in survivors:
        fed.server.accept_signature(j, fed.silos[j].sign_survivors(1, survivors))
    return fed


@settings(deadline=None)
@given(survivors=LISTS, dropped=LISTS, signatures=BLOBS, blobs=BLOBS, signed=LISTS)
def test_any_sign_or_unmask_request_is_answered_or_refused_without_a_trace(
    fuzzed, survivors, dropped, signatures, blobs, signed
) -> None:  # type: ignore[no-untyped-def]
    """Whatever a server sends, a silo answers or raises SecAggError, and a refusal changes nothing."""
    silo = fuzzed.silos[0]
    before = (dict(silo.signed), dict(silo.answered), silo.last_round)
    try:
        silo.sign_survivors(1, signed)
    except SecAggError:
        assert (dict(silo.signed), dict(silo.answered), silo.last_round) == before
    try:
        silo.unmask(1, survivors, dropped, signatures, blobs)
    except SecAggError:
        assert (dict(silo.signed), dict(silo.answered), silo.last_round) == before
    else:  # only the honest request can pass: the list silo 0 signed, with t valid signatures
        assert survivors == [0, 1, 2] and dropped == [3]


def test_a_durable_state_written_before_the_move_to_the_crypto_room_loads(tmp_path) -> None:
    """A silo's or server's state pickled when the cryptography lived in ``fedbandits.federation``
    (before issue #45) names those modules; it loads, as the classes of ``fedbandits.crypto``."""
    import pickle

    from fedbandits.federation.spec import load_pickle

    fed = federation(tmp_path, 3)
    fed.send(1, fed.inputs(5))
    old = pickle.dumps(fed.silos[0], protocol=0).replace(b"fedbandits.crypto.", b"fedbandits.federation.")
    assert b"fedbandits.federation.double_masking" in old and b"fedbandits.crypto" not in old
    (tmp_path / "silo.pkl").write_bytes(old)
    loaded = load_pickle(tmp_path / "silo.pkl")
    assert (
        type(loaded) is type(fed.silos[0])
        and loaded.rounds[1].message.commitment == fed.silos[0].rounds[1].message.commitment
    )
    assert loaded.identity == fed.silos[0].identity and loaded.authority.ca == fed.silos[0].authority.ca
