"""Secure aggregation that holds against a server that cheats (issue #32), transport-agnostic.

Bonawitz et al. (CCS 2017, Section 4 and Figure 4: the actively secure protocol) with three
departures made for many rounds per set of keys; the silos' side is :class:`MaskingSilo`, the
server's :class:`MaskingServer`; both hold plain data and pickle into durable state.

Per *epoch* (a set of members and their keys, kept across rounds and dropouts):

1. *Advertise*: silo i draws X25519 key pairs c_i (to encrypt shares) and s_i (to agree mask
   seeds) and signs (deployment, epoch, i, c_i, s_i) with its long-term Ed25519 key, whose
   certificate for ``silo-<i>`` the pinned signing CA issued (:mod:`fedbandits.crypto.signing`).
   The keys are an *offer*: the epoch in force keeps its own keys until the silo joins the new
   roster, and a silo advertises once per epoch (none for an epoch before the one it offered last).
2. *Roster*: the server publishes every member's advert.  A silo takes part only if every entry's
   certificate and signature verify for that member and this epoch, its own entry is its own keys,
   the epoch is the one it advertised for and later than any it joined before (an old roster is
   refused), no key is of low order (a point that agrees the all-zero key with anybody), and the
   threshold t satisfies 2t > n + colluders (so that no two survivor lists can both gather t
   signatures, below).

Per *round* r of the epoch:

3. *Mask*: silo i draws a fresh self-mask seed b_i^r, splits it into Shamir shares (threshold t,
   over the prime field 2^521 - 1), encrypts share j for member j (AES-256-GCM under the c_i/c_j
   agreement; the associated data binds deployment, epoch, round, i and j) and sends
   y_i = x_i + PRG(b_i^r) + sum_j sign(i, j) PRG(k_ij^r)  (mod 2^bits)
   with the encrypted shares and a commitment SHA-256(b_i^r).  The pairwise *round seed*
   k_ij^r = SHAKE-256(s_ij || r) is one-way in the epoch's pair seed s_ij = X25519(s_i, s_j).
   A release is masked once, ever (issue #44): a retry in the same epoch gets the stored bytes;
   the same or an older round asked for in any later epoch is refused, so a release enters at most
   one masked sum across epochs, restarts and retries.  (A server that could have a silo mask its
   stored release k afresh in a new epoch would subtract a sum without the silo from a sum with
   it, and hold the silo's release under its own noise share.)
4. *Consistency check* (only if somebody dropped): the server names the survivors U (the silos
   whose message it holds); each survivor signs (deployment, epoch, r, U, the digest of the roster
   it holds), one list per round.
5. *Unmask*: the server sends each survivor U, the dropped D = members - U, the survivors'
   signatures and the encrypted self-mask shares addressed to it.  If D is not empty the silo
   answers only if U is the list it signed and at least t members of U signed it; it reveals its
   shares of b_k^r for every k in U and its round seeds k_ij^r for every j in D: for no silo both.
   If D is empty it reveals self-mask shares only, and no list other than all members can then get
   its signature in that round.  The server rebuilds each b_k^r from t shares (checked against the
   commitment), removes the self-masks and the pairwise masks between U and D, and has the sum.

Departures from the paper, and why:

* A dropped silo's masks are removed with the survivors' *round seeds* with it, not by rebuilding
  its key s_j from Shamir shares.  Keys span many rounds here: a rebuilt s_j would strip the pairwise
  masks from every earlier round of the epoch, where b_j^r was revealed because j survived -- the
  honest recovery of the previous protocol opened those messages (tests/test_secagg_attacks.py).
  A round seed opens one pair in one round.  The price: when somebody dropped, *every* survivor must
  answer the unmask step (a survivor that also drops then leaves the round closed without data);
  with nobody dropped, any t answers suffice.  Nothing about a key is ever revealed, so an epoch
  survives dropouts.
* Self-mask seeds are fresh per round (the paper's protocol is one round): a seed revealed in round
  r says nothing about round r + 1.
* The signatures of step 4 are checked against the roster's certified keys; the paper's PKI is the
  signing CA.
* No consistency check when nobody dropped (one exchange fewer in the common round).  Why that is
  safe: seeds are revealed only on a signed list, and every honest silo reveals for one list per
  round.  To open silo i the server needs every round seed of i -- from each other member j, only
  if j's list leaves i out; from i itself, only for members its own list leaves out -- and t
  shares of b_i^r, only from silos whose list (or the all-members answer) includes i.  If i signed
  a list U, each honest j in U is blocked (neither i nor j reveals their seed), so U's t signers
  would all have to be i or colluders: t <= 1 + colluders, which 2t > n + colluders excludes for
  n > colluders + 1.  If i answered the all-members request, every other honest member must have
  signed a list without i, so b_i^r's shares can come only from i and the colluders: again t <= 1 +
  colluders.  If i revealed nothing, every other honest member must hold a list without i (for the
  seeds), so b_i^r's shares can come only from the colluders, and t > colluders.

What a cheating server gets: to open silo i's message it needs b_i^r, which only silos holding a
list containing i reveal, *and* every round seed of i, which only holders of a signed list without
i reveal; each honest silo holds one list per round, and two lists cannot both reach t signatures
when 2t > n + colluders (the argument for the unsigned all-members answer is above).  It can still
refuse service, drop silos, and choose which rounds close (docs/deployment-security.md, *Against a server that cheats*).
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass, field

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from fedbandits.crypto.secure_aggregation import (
    KEY_BYTES,
    NONCE_BYTES,
    SHARE_BYTES,
    Roster,
    SecAggError,
    _agree,
    keypair,
    prg,
    shamir_join,
    shamir_split,
    usable_key,
)
from fedbandits.crypto.signing import Authority, Identity, SigningError

#: an encrypted share: nonce, the 66-byte share, the GCM tag
BLOB_BYTES = NONCE_BYTES + SHARE_BYTES + 16
#: rounds a silo keeps the record of (a request about an older round is refused)
KEPT_ROUNDS = 4


def secure_threshold(members: int, colluders: int) -> int:
    """The smallest t with 2t > members + colluders: two survivor lists cannot both gather t
    signatures, since they would share an honest signer (at least t > colluders, too)."""
    return min(members, (members + colluders) // 2 + 1)


def _round_seed(pair_seed: bytes, round_: int) -> bytes:
    return hashlib.shake_256(b"fedbandits-round-seed" + pair_seed + round_.to_bytes(8, "little")).digest(KEY_BYTES)


def _commitment(roster: Roster, round_: int, silo: int, b: bytes) -> bytes:
    return hashlib.sha256(roster.info("self-mask-commitment", round_, silo) + b).digest()


def advert_bytes(context: bytes, epoch: int, silo: int, c_public: bytes, s_public: bytes) -> bytes:
    return b"|".join([b"fedbandits-advert", context, str(epoch).encode(), str(silo).encode(), c_public, s_public])


def survivors_bytes(roster: Roster, round_: int, survivors: list[int]) -> bytes:
    """What a survivor signs: the list, the round, and the roster it holds (its digest binds every
    member's keys, so a signature given under one roster of an epoch verifies under no other)."""
    return roster.info("survivors", round_, ",".join(map(str, survivors)), roster.digest().hex())


@dataclass(frozen=True)
class Advert:
    """A silo's public keys for one epoch, signed; ``cert`` certifies the signing key."""

    c_public: bytes
    s_public: bytes
    cert: bytes
    signature: bytes


@dataclass(frozen=True)
class SignedRoster(Roster):
    """The epoch's roster with every member's certificate and advert signature."""

    certs: dict[int, bytes] = field(default_factory=dict)
    signatures: dict[int, bytes] = field(default_factory=dict)

    @classmethod
    def of(cls, context: bytes, epoch: int, threshold: int, adverts: dict[int, Advert]) -> SignedRoster:
        return cls(
            context,
            epoch,
            threshold,
            {i: a.c_public for i, a in adverts.items()},
            {i: a.s_public for i, a in adverts.items()},
            {i: a.cert for i, a in adverts.items()},
            {i: a.signature for i, a in adverts.items()},
        )

    def advert(self, silo: int) -> Advert:
        return Advert(self.c_public[silo], self.s_public[silo], self.certs[silo], self.signatures[silo])


def check_advert(authority: Authority, context: bytes, epoch: int, silo: int, advert: Advert) -> str | None:
    """Why silo ``silo``'s advert for ``epoch`` is not acceptable, or None."""
    if not all(isinstance(k, bytes) and len(k) == KEY_BYTES for k in (advert.c_public, advert.s_public)):
        return f"silo {silo}: public keys must be two {KEY_BYTES}-byte values"
    if not all(usable_key(k) for k in (advert.c_public, advert.s_public)):
        return f"silo {silo}: a public key of low order (no key can be agreed with it)"
    try:
        message = advert_bytes(context, epoch, silo, advert.c_public, advert.s_public)
        authority.verify(advert.cert, silo, message, advert.signature)
    except SigningError as exc:
        return f"advert of epoch {epoch}: {exc}"
    return None


def roster_problem(
    roster: SignedRoster,
    authority: Authority,
    silo: int,
    keys: tuple[bytes, bytes],
    colluders: int,
    min_members: int = 1,
) -> str | None:
    """Why silo ``silo``, whose keys for the roster's epoch are ``keys = (c_public, s_public)``,
    refuses ``roster``, or None.  The one check of a roster's members, for the deployment's silos
    (:meth:`MaskingSilo.join`) and the serving silos (:mod:`fedbandits.serve.silo`); the roster's
    context and epoch are the caller's to check first.

    Every member has two keys, a certificate and a signature; this silo's entry is its own keys; at
    least ``min_members`` members (the noise's M - dropouts); the threshold t satisfies
    2t > members + colluders (:func:`secure_threshold`; so t > colluders: the colluding silos cannot
    pool shares of a key or seed into it); no two members advertise one key; and every member's
    advert verifies under the pinned signing CA for this epoch (:func:`check_advert`)."""
    members = roster.members
    if not set(roster.c_public) == set(roster.certs) == set(roster.signatures) == set(members):
        return f"roster of epoch {roster.epoch}: every member needs two keys, a certificate and a signature"
    if silo not in members or (roster.c_public[silo], roster.s_public[silo]) != keys:
        return f"the roster of epoch {roster.epoch} lists other keys for silo {silo}"
    n, t = len(members), roster.threshold
    if n < min_members:
        return (
            f"roster of epoch {roster.epoch}: {n} member(s); the noise is provisioned for sums of at "
            f"least {min_members} silos"
        )
    if not secure_threshold(n, colluders) <= t <= n:
        return (
            f"roster of epoch {roster.epoch}: threshold {t} for {n} member(s) must be in "
            f"[{secure_threshold(n, colluders)}, {n}] (2t > members + {colluders} colluders)"
        )
    if len(set(roster.s_public.values())) != n or len(set(roster.c_public.values())) != n:
        return f"roster of epoch {roster.epoch}: two members advertise the same key"
    for j in members:
        reason = check_advert(authority, roster.context, roster.epoch, j, roster.advert(j))
        if reason is not None:
            return f"roster refused: {reason}"
    return None


@dataclass(frozen=True)
class Masked:
    """Silo i's message of one round: masked residues, encrypted self-mask shares, commitment."""

    masked: np.ndarray
    blobs: dict[int, bytes]
    commitment: bytes


@dataclass(frozen=True)
class Reveal:
    """A survivor's unmask answer: shares of the survivors' self-mask seeds, round seeds with the dropped."""

    b_shares: dict[int, bytes]
    seeds: dict[int, bytes]


@dataclass
class RoundRecord:
    """What a silo keeps of a round it masked (a retry gets the same message)."""

    digest: bytes  # SHA-256 of the residues that were masked (a retry with other data is refused)
    message: Masked
    own_share: bytes


_RoundRecord = RoundRecord  # the name silo state files pickled before issue #45 refer to


def _survivor_list(value: object, members: list[int], name: str = "survivors") -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise SecAggError(f"{name}: must be a list of silo indices")
    if value != sorted(set(value)) or not set(value) <= set(members):
        raise SecAggError(f"{name}: must be sorted, distinct members of {members}")
    return value


# -- silo -----------------------------------------------------------------------------------------
@dataclass
class MaskingSilo:
    """One silo's side.  Every method either answers or raises :class:`SecAggError` with the reason,
    leaving the state as it was; the caller persists the state before the answer leaves the silo."""

    silo: int
    bits: int
    width: int
    context: bytes
    identity: Identity
    authority: Authority
    colluders: int = 0
    #: the fewest silos whose noise shares must be in any sum this silo's message enters: the
    #: calibration's M - dropouts (a server that drops more cannot shrink the noise, only deny the round)
    min_survivors: int = 1
    roster: SignedRoster | None = None
    offered: int = 0  # the epoch the current keys were advertised for
    joined: int = 0  # the last epoch whose roster this silo accepted
    c_private: bytes = b""  # the keys of the epoch joined (in force)
    s_private: bytes = b""
    c_offer: bytes = b""  # the keys advertised for epoch ``offered``, until its roster is joined
    s_offer: bytes = b""
    #: the last release this silo masked, in any epoch, and that epoch: a release is masked at most
    #: once, so it enters at most one masked sum (never reset by a new epoch)
    last_round: int = 0
    masked_epoch: int = 0
    rounds: dict[int, RoundRecord] = field(default_factory=dict)
    signed: dict[int, list[int]] = field(default_factory=dict)
    answered: dict[int, Reveal] = field(default_factory=dict)

    def advertise(self, epoch: int) -> Advert:
        """Step 1: fresh keys for ``epoch`` (the same advert again while that epoch is being set up).

        The keys are *offered*: the epoch in force keeps its own keys until this silo joins the new
        roster (a stray keys request costs the current epoch nothing).  One advert per epoch: an
        epoch older than the one offered last is refused, so no two validly signed adverts of this
        silo exist for one epoch."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch <= self.joined:
            raise SecAggError(f"epoch {epoch!r}: keys are advertised for a later epoch than {self.joined} only")
        if epoch < self.offered:
            raise SecAggError(f"epoch {epoch}: this silo advertised keys for the later epoch {self.offered} already")
        if epoch != self.offered or not self.s_offer:
            c_private, c_public = keypair()
            s_private, s_public = keypair()
            self.c_offer, self.s_offer, self.offered = c_private, s_private, epoch
        else:
            c_public, s_public = self._public(self.c_offer), self._public(self.s_offer)
        signature = self.identity.sign(advert_bytes(self.context, epoch, self.silo, c_public, s_public))
        return Advert(c_public, s_public, self.identity.cert, signature)

    @staticmethod
    def _public(private: bytes) -> bytes:
        return X25519PrivateKey.from_private_bytes(private).public_key().public_bytes_raw()

    def join(self, roster: SignedRoster) -> None:
        """Step 2: check the roster (module docstring) and take it, with the keys offered for it.

        What was masked in earlier epochs stays recorded (``last_round``, ``masked_epoch``): a
        release masked once is never masked again, under any epoch (:meth:`mask`)."""
        if roster == self.roster:
            return  # a retried delivery
        if roster.context != self.context:
            raise SecAggError("the roster belongs to another deployment")
        if roster.epoch != self.offered or roster.epoch <= self.joined or not self.s_offer:
            raise SecAggError(
                f"roster of epoch {roster.epoch}: this silo advertised keys for epoch {self.offered} "
                f"and joined epoch {self.joined} (a replayed or foreign roster)"
            )
        keys = (self._public(self.c_offer), self._public(self.s_offer))
        reason = roster_problem(roster, self.authority, self.silo, keys, self.colluders, self.min_survivors)
        if reason is not None:
            raise SecAggError(reason)
        self.roster, self.joined = roster, roster.epoch
        self.c_private, self.s_private, self.c_offer, self.s_offer = self.c_offer, self.s_offer, b"", b""
        self.rounds, self.signed, self.answered = {}, {}, {}

    def _roster(self) -> SignedRoster:
        if self.roster is None:
            raise SecAggError("no roster: this silo has joined no epoch")
        return self.roster

    def _share_key(self, j: int) -> bytes:
        roster = self._roster()
        return _agree(
            self.c_private, roster.c_public[j], roster.info("share-key", min(self.silo, j), max(self.silo, j))
        )

    def _pair_round_seed(self, j: int, round_: int) -> bytes:
        roster = self._roster()
        pair = _agree(self.s_private, roster.s_public[j], roster.info("mask", min(self.silo, j), max(self.silo, j)))
        return _round_seed(pair, round_)

    def mask(self, round_: int, residues: np.ndarray) -> Masked:
        """Step 3: the round's message (stored: a retry gets the same bytes)."""
        roster = self._roster()
        residues = np.asarray(residues, dtype=np.uint64)
        digest = hashlib.sha256(residues.tobytes()).digest()
        kept = self.rounds.get(round_)
        if kept is not None:
            if kept.digest != digest:
                raise SecAggError(f"round {round_} was masked already, for other residues")
            return kept.message
        if round_ == self.last_round:
            raise SecAggError(
                f"round {round_} was masked in epoch {self.masked_epoch} already: a release enters one masked sum, ever"
            )
        if round_ < self.last_round:
            raise SecAggError(
                f"round {round_} is not after round {self.last_round}: a replayed round (a release enters one "
                "masked sum, ever)"
            )
        b = secrets.token_bytes(KEY_BYTES)
        shares = shamir_split(b, roster.members, roster.threshold)
        blobs = {}
        for j, share in shares.items():
            if j != self.silo:
                nonce = os.urandom(NONCE_BYTES)
                ad = roster.info("self-mask-share", round_, self.silo, j)
                blobs[j] = nonce + AESGCM(self._share_key(j)).encrypt(nonce, share, ad)
        out = residues + prg(b, round_, self.width, self.bits)
        for j in roster.members:
            if j != self.silo:
                m = prg(self._pair_round_seed(j, round_), 0, self.width, self.bits)
                out = out + m if self.silo < j else out - m
        message = Masked(out & np.uint64((1 << self.bits) - 1), blobs, _commitment(roster, round_, self.silo, b))
        self.rounds[round_] = RoundRecord(digest, message, shares[self.silo])
        self.last_round, self.masked_epoch = round_, roster.epoch
        for old in [r for r in self.rounds if r <= round_ - KEPT_ROUNDS]:
            self.rounds.pop(old)
            self.signed.pop(old, None)
            self.answered.pop(old, None)
        return message

    def sign_survivors(self, round_: int, survivors: object) -> bytes:
        """Step 4: this silo's signature of the round's survivor list (one list per round)."""
        roster = self._roster()
        listed = _survivor_list(survivors, roster.members)
        if round_ not in self.rounds:
            raise SecAggError(f"round {round_}: this silo sent no message it still keeps")
        if self.silo not in listed:
            raise SecAggError(f"round {round_}: the survivor list leaves out this silo, which sent its message")
        if len(listed) < roster.threshold:
            raise SecAggError(f"round {round_}: {len(listed)} survivor(s), fewer than the threshold {roster.threshold}")
        if len(listed) < self.min_survivors:
            raise SecAggError(
                f"round {round_}: {len(listed)} survivor(s); the noise is provisioned for sums of at least "
                f"{self.min_survivors} silos (M - dropouts)"
            )
        if self.signed.get(round_, listed) != listed:
            raise SecAggError(f"round {round_}: a second, different survivor list (signed {self.signed[round_]})")
        self.signed[round_] = listed
        return self.identity.sign(survivors_bytes(roster, round_, listed))

    def unmask(
        self, round_: int, survivors: object, dropped: object, signatures: dict[int, bytes], blobs: dict[int, bytes]
    ) -> Reveal:
        """Step 5: reveal for every member either its self-mask share (survivors) or this silo's
        round seed with it (dropped).  With somebody dropped, only for the list this silo signed and
        once t survivors signed it; with nobody dropped no seed is revealed and no signature is
        needed, but the silo is then bound to that list for the round (module docstring)."""
        roster = self._roster()
        listed = _survivor_list(survivors, roster.members)
        gone = _survivor_list(dropped, roster.members, "dropped")
        both = sorted(set(listed) & set(gone))
        if both:
            raise SecAggError(f"round {round_}: asks for both the self-mask share and the round seed of silo(s) {both}")
        if sorted(listed + gone) != roster.members:
            raise SecAggError(f"round {round_}: survivors and dropped must partition the members {roster.members}")
        if round_ not in self.rounds:
            raise SecAggError(f"round {round_}: this silo sent no message it still keeps")
        if round_ in self.answered and self.signed.get(round_) == listed:
            return self.answered[round_]  # a retried request
        if gone:  # somebody dropped: round seeds are revealed, so t survivors must have signed the list
            if self.signed.get(round_) != listed:
                raise SecAggError(
                    f"round {round_}: the survivor list is not the one this silo signed ({self.signed.get(round_)})"
                )
            self._check_signatures(roster, round_, listed, signatures)
        elif self.signed.get(round_, listed) != listed:
            raise SecAggError(f"round {round_}: a second, different survivor list (signed {self.signed[round_]})")
        if set(blobs) != set(listed) - {self.silo}:
            raise SecAggError(f"round {round_}: needs one self-mask share from each other survivor")
        shares = {self.silo: self.rounds[round_].own_share}
        for k, blob in blobs.items():
            if not isinstance(blob, bytes) or len(blob) != BLOB_BYTES:
                raise SecAggError(f"round {round_}: the self-mask share of silo {k} must be {BLOB_BYTES} bytes")
            try:
                ad = roster.info("self-mask-share", round_, k, self.silo)
                shares[k] = AESGCM(self._share_key(k)).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], ad)
            except InvalidTag:
                raise SecAggError(f"round {round_}: the self-mask share of silo {k} does not authenticate") from None
        reveal = Reveal(shares, {j: self._pair_round_seed(j, round_) for j in gone})
        self.signed[round_] = listed  # (nobody dropped: this silo is bound to the list of all members now)
        self.answered[round_] = reveal
        return reveal

    def _check_signatures(self, roster: SignedRoster, round_: int, listed: list[int], signatures: object) -> None:
        if not isinstance(signatures, dict):
            raise SecAggError(f"round {round_}: signatures must map silo indices to bytes")
        signers = [j for j in sorted(signatures) if j in listed]
        if len(signers) < roster.threshold or set(signatures) - set(listed):
            raise SecAggError(
                f"round {round_}: needs signatures of the list from at least {roster.threshold} survivors, "
                f"got {len(signers)} (and {sorted(set(signatures) - set(listed))} from outside it)"
            )
        message = survivors_bytes(roster, round_, listed)
        for j in signers:
            try:
                self.authority.verify(roster.certs[j], j, message, signatures[j])
            except SigningError as exc:
                raise SecAggError(f"round {round_}: {exc} (the survivor list)") from None


# -- server ---------------------------------------------------------------------------------------
@dataclass
class MaskingServer:
    """The server's side: roster, validation of messages and signatures, unmasking, the sum.

    ``authority``: the silos' signing CA, to refuse a bad advert or signature at once; a server
    without it (the serving coordinator) leaves those checks to the silos, which make them all
    before they join a roster or reveal anything."""

    context: bytes
    bits: int
    width: int
    authority: Authority | None
    epoch: int = 0
    roster: SignedRoster | None = None
    round_: int | None = None
    received: dict[int, Masked] = field(default_factory=dict)
    survivors: list[int] | None = None
    signatures: dict[int, bytes] = field(default_factory=dict)

    @property
    def next_epoch(self) -> int:
        return self.epoch + 1

    def publish(self, adverts: dict[int, Advert], threshold: int) -> SignedRoster:
        """A new epoch with the silos whose adverts for it verify (check them with :func:`check_advert`)."""
        if not 1 <= threshold <= len(adverts):
            raise SecAggError(f"threshold must be in [1, {len(adverts)}] for {len(adverts)} silos, got {threshold}")
        self.epoch += 1
        self.roster = SignedRoster.of(self.context, self.epoch, threshold, adverts)
        self.round_, self.received, self.survivors, self.signatures = None, {}, None, {}
        return self.roster

    def open_round(self, round_: int) -> None:
        if self.roster is None:
            raise SecAggError("no epoch: publish a roster first")
        self.round_, self.received, self.survivors, self.signatures = round_, {}, None, {}

    def accept(self, sender: object, epoch: object, round_: object, message: Masked) -> str | None:
        """Keep a masked message, or return why it is rejected (nothing kept)."""
        if self.roster is None or self.round_ is None or self.survivors is not None:
            return "no round is taking messages"
        x = message.masked
        problem = self._problem(sender, epoch, round_, x)
        if problem is not None:
            return problem
        others = set(self.roster.members) - {sender}
        if set(message.blobs) != others or not all(
            isinstance(b, bytes) and len(b) == BLOB_BYTES for b in message.blobs.values()
        ):
            return f"silo {sender}: needs one {BLOB_BYTES}-byte self-mask share for each other member"
        if not isinstance(message.commitment, bytes) or len(message.commitment) != 32:
            return f"silo {sender}: the self-mask commitment must be 32 bytes"
        self.received[sender] = Masked(x.copy(), dict(message.blobs), message.commitment)  # type: ignore[index]
        return None

    def _problem(self, sender: object, epoch: object, round_: object, masked: object) -> str | None:
        """Why a masked message cannot be taken in the server's open round, or None: its epoch and round,
        its sender (a roster member, first message), its residues (``width`` uint64 below 2^bits)."""
        assert self.roster is not None
        if epoch != self.epoch:
            return f"epoch {epoch!r} is not the current epoch {self.epoch} (foreign or replayed)"
        if round_ != self.round_:
            return f"round {round_!r} is not the current round {self.round_} (stale or replayed)"
        if sender not in self.roster.s_public:
            return f"sender {sender!r} is not in the roster of epoch {self.epoch} (foreign)"
        if sender in self.received:
            return f"silo {sender}: a second masked message in round {round_}"
        if not isinstance(masked, np.ndarray) or masked.dtype != np.uint64 or masked.shape != (self.width,):
            return f"silo {sender}: a masked message must be {self.width} uint64 residues"
        if (masked >> np.uint64(self.bits)).any():
            return f"silo {sender}: residues must be below 2^{self.bits}"
        return None

    def close_messages(self) -> list[int]:
        """The survivor list U of the round (no message is taken after this)."""
        assert self.roster is not None
        self.survivors = sorted(self.received)
        return self.survivors

    def dropped(self) -> list[int]:
        assert self.roster is not None
        return [i for i in self.roster.members if i not in (self.survivors or self.received)]

    def accept_signature(self, silo: int, signature: object) -> str | None:
        assert self.roster is not None and self.round_ is not None and self.survivors is not None
        if silo not in self.survivors:
            return f"silo {silo} is not a survivor of round {self.round_}"
        if not isinstance(signature, bytes) or len(signature) != 64:
            return f"silo {silo}: a signature must be 64 bytes"
        try:
            message = survivors_bytes(self.roster, self.round_, self.survivors)
            if self.authority is not None:
                self.authority.verify(self.roster.certs[silo], silo, message, signature)
        except SigningError as exc:
            return f"round {self.round_}: {exc} (the survivor list)"
        self.signatures[silo] = signature  # type: ignore[assignment]
        return None

    def shares_for(self, silo: int) -> dict[int, bytes]:
        """The survivors' encrypted self-mask shares addressed to ``silo``."""
        assert self.survivors is not None
        return {k: self.received[k].blobs[silo] for k in self.survivors if k != silo}

    def total(self, reveals: dict[int, Reveal]) -> np.ndarray:
        """The modular sum of the survivors' inputs (module docstring, step 5)."""
        assert self.roster is not None and self.round_ is not None and self.survivors is not None
        roster, r, mod = self.roster, self.round_, np.uint64((1 << self.bits) - 1)
        answered = {j: v for j, v in reveals.items() if j in self.survivors}
        out = np.zeros(self.width, dtype=np.uint64)
        for k in self.survivors:
            shares = {j: v.b_shares[k] for j, v in answered.items() if k in v.b_shares}
            b = shamir_join(shares, roster.threshold)
            if _commitment(roster, r, k, b) != self.received[k].commitment:
                raise SecAggError(f"round {r}: the shares of silo {k}'s self-mask rebuild another seed")
            out = out + self.received[k].masked - prg(b, r, self.width, self.bits)
        for j in self.dropped():
            for k in self.survivors:
                seed = answered.get(k, Reveal({}, {})).seeds.get(j)
                if not isinstance(seed, bytes) or len(seed) != KEY_BYTES:
                    raise SecAggError(f"round {r}: survivor {k} gave no round seed with dropped silo {j}")
                m = prg(seed, 0, self.width, self.bits)
                out = out - m if k < j else out + m  # survivor k's term for j was sign(k, j) m
        self.round_ = None
        return out & mod
