"""Pairwise masking (Bonawitz et al. 2017) with every member present, and the primitives both
secure aggregations share; transport-agnostic.

Two protocols use these pieces.  The Flower deployment's ``distributed-dp`` runs
:mod:`fedbandits.crypto.double_masking`, which holds against a server that cheats (signed
keys, self-masks, a consistency check).  The serving silos (:mod:`fedbandits.serve.masking`) run
the all-present variant here, :class:`SecAggClient` / :class:`SecAggServer`: a serving round closes
only when every silo has released, so masks never need removing and nothing is ever revealed; the
serving silos sign their keys and check the roster's signatures (:mod:`fedbandits.serve.masking`).

Primitives: X25519 key agreement, HKDF-SHA256, SHAKE-256 as the mask generator (64-bit words
modulo 2^bits), Shamir shares over the prime field of 2^521 - 1, AES-256-GCM.

The all-present protocol, per epoch (a fixed roster):

1. *Advertise*: silo i draws two X25519 key pairs, c and s, and sends the public halves; the
   server publishes the roster (every member's public keys, the epoch, a threshold t).
2. *Share*: silo i splits its s private key into Shamir shares, one per member, each encrypted
   with AES-256-GCM under HKDF(X25519(c_i, c_j)) with associated data binding (deployment, epoch,
   i, j).  The serving protocol keeps this step on its wire, but no party decrypts or reveals the
   shares: there is no recovery step.
3. *Mask* (every round r): y_i = x_i + sum_{j != i} sign(i, j) PRG(s_ij, r) (mod 2^bits),
   sign = +1 if i < j else -1, s_ij = HKDF(X25519(s_i, s_j)) bound to the deployment and epoch;
   PRG = SHAKE-256(s_ij || r).  The masks cancel in the sum over the whole roster.

The server accepts one masked message per roster member for the current (epoch, round) and refuses
a replayed, foreign, second or malformed one with its reason; without every member's message the
sum is uniform garbage, and :meth:`SecAggServer.total` refuses it.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

#: Shamir shares live in the prime field of the Mersenne prime 2^521 - 1 (> any 256-bit key)
PRIME = (1 << 521) - 1
SHARE_BYTES = 66
KEY_BYTES = 32
NONCE_BYTES = 12


class SecAggError(ValueError):
    """A message or request the protocol cannot accept; nothing changed."""


# -- primitives -----------------------------------------------------------------------------------
def _kdf(secret: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=info).derive(secret)


def _agree(private: bytes, public: bytes, info: bytes) -> bytes:
    try:
        shared = X25519PrivateKey.from_private_bytes(private).exchange(X25519PublicKey.from_public_bytes(public))
    except ValueError:  # a low-order point (the shared secret would be all zeros) or a malformed key
        raise SecAggError("a public key of low order or malformed: no key can be agreed with it") from None
    return _kdf(shared, info)


#: any fixed scalar tells a low-order point: X25519 clamps scalars to multiples of the cofactor 8,
#: so the product with a point of order 1, 2, 4 or 8 is the identity whatever the scalar
_PROBE = X25519PrivateKey.from_private_bytes(hashlib.sha256(b"fedbandits-low-order-probe").digest())


def usable_key(public: bytes) -> bool:
    """Whether a 32-byte X25519 public key agrees a key with anybody (False: low order)."""
    try:
        _PROBE.exchange(X25519PublicKey.from_public_bytes(public))
    except ValueError:
        return False
    return True


def keypair() -> tuple[bytes, bytes]:
    """(private, public) raw X25519 keys from the OS CSPRNG."""
    key = X25519PrivateKey.generate()
    return key.private_bytes_raw(), key.public_key().public_bytes_raw()


def prg(seed: bytes, round_: int, width: int, bits: int) -> np.ndarray:
    """``width`` pseudo-random residues modulo 2^bits (uint64) expanded from ``seed`` for round ``round_``."""
    stream = hashlib.shake_256(seed + round_.to_bytes(8, "little")).digest(8 * width)
    return np.frombuffer(stream, dtype="<u8").astype(np.uint64) & np.uint64((1 << bits) - 1)


def shamir_split(secret: bytes, holders: list[int], threshold: int) -> dict[int, bytes]:
    """Shares of ``secret`` for every holder (evaluation point holder + 1), any ``threshold`` rebuild it."""
    coeffs = [int.from_bytes(secret, "big")] + [secrets.randbelow(PRIME) for _ in range(threshold - 1)]
    out = {}
    for h in holders:
        x, y = h + 1, 0
        for c in reversed(coeffs):
            y = (y * x + c) % PRIME
        out[h] = y.to_bytes(SHARE_BYTES, "big")
    return out


def shamir_join(shares: dict[int, bytes], threshold: int) -> bytes:
    """The secret from ``threshold`` or more shares (Lagrange interpolation at 0)."""
    if len(shares) < threshold:
        raise SecAggError(f"{len(shares)} share(s) cannot rebuild a key that needs {threshold}")
    points = [(h + 1, int.from_bytes(v, "big")) for h, v in sorted(shares.items())[:threshold]]
    secret = 0
    for i, (xi, yi) in enumerate(points):
        num = den = 1
        for j, (xj, _) in enumerate(points):
            if i != j:
                num = num * -xj % PRIME
                den = den * (xi - xj) % PRIME
        secret = (secret + yi * num * pow(den, -1, PRIME)) % PRIME
    if secret >> (8 * KEY_BYTES):
        raise SecAggError("the shares rebuild no 32-byte key (corrupted, or from a polynomial of higher degree)")
    return secret.to_bytes(KEY_BYTES, "big")


# -- roster ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Roster:
    """One epoch's members and their public keys, as the server publishes them."""

    context: bytes  # the deployment (its config hash)
    epoch: int
    threshold: int
    c_public: dict[int, bytes]
    s_public: dict[int, bytes]

    @property
    def members(self) -> list[int]:
        return sorted(self.s_public)

    def digest(self) -> bytes:
        """SHA-256 of everything the roster says: deployment, epoch, threshold, every member's keys."""
        h = hashlib.sha256(b"fedbandits-roster")
        for part in (self.context, str(self.epoch).encode(), str(self.threshold).encode()):
            h.update(len(part).to_bytes(8, "little") + part)
        for i in self.members:
            h.update(i.to_bytes(8, "little") + self.c_public[i] + self.s_public[i])
        return h.digest()

    def info(self, *parts: object) -> bytes:
        return b"|".join(
            [b"fedbandits-secagg", self.context, str(self.epoch).encode(), *(str(p).encode() for p in parts)]
        )


def default_threshold(members: int, colluders: int, dropouts: int) -> int:
    """t: more than the colluders can pool, a majority if the provisioned dropouts leave one."""
    return max(colluders + 1, min(members // 2 + 1, members - dropouts))


# -- silo -----------------------------------------------------------------------------------------
@dataclass
class SecAggClient:
    """One silo's side; its private keys never leave it except as encrypted shares."""

    silo: int
    bits: int
    width: int
    roster: Roster | None = None
    c_private: bytes = b""
    s_private: bytes = b""
    held: dict[int, bytes] = field(default_factory=dict)  # encrypted shares addressed to this silo, by owner

    def advertise(self) -> tuple[bytes, bytes]:
        """Step 1: fresh c and s public keys (the private halves are kept)."""
        self.c_private, c_public = keypair()
        self.s_private, s_public = keypair()
        self.roster, self.held = None, {}
        return c_public, s_public

    def share(self, roster: Roster) -> dict[int, bytes]:
        """Step 2: one encrypted share of this silo's s key per member."""
        if self.silo not in roster.s_public or not self.s_private:
            raise SecAggError(f"silo {self.silo} is not in the roster of epoch {roster.epoch} or has no keys")
        if (
            roster.s_public[self.silo]
            != X25519PrivateKey.from_private_bytes(self.s_private).public_key().public_bytes_raw()
        ):
            raise SecAggError(f"the roster of epoch {roster.epoch} lists another key for silo {self.silo}")
        self.roster = roster
        shares = shamir_split(self.s_private, roster.members, roster.threshold)
        out = {}
        for j, share in shares.items():
            key = _agree(
                self.c_private, roster.c_public[j], roster.info("share-key", min(self.silo, j), max(self.silo, j))
            )
            nonce = os.urandom(NONCE_BYTES)
            out[j] = nonce + AESGCM(key).encrypt(nonce, share, roster.info("share", self.silo, j))
        return out

    def receive(self, shares: dict[int, bytes]) -> None:
        """Step 2, the other way: the encrypted shares the other members addressed to this silo."""
        if self.roster is None:
            raise SecAggError("shares arrived before the roster")
        unknown = set(shares) - set(self.roster.members)
        if unknown:
            raise SecAggError(f"shares from silos {sorted(unknown)} outside the roster of epoch {self.roster.epoch}")
        self.held = dict(shares)

    def _seed(self, j: int) -> bytes:
        assert self.roster is not None
        return _agree(
            self.s_private, self.roster.s_public[j], self.roster.info("mask", min(self.silo, j), max(self.silo, j))
        )

    def mask(self, round_: int, residues: np.ndarray) -> np.ndarray:
        """Step 3: the masked message of round ``round_``."""
        if self.roster is None:
            raise SecAggError("no roster: the epoch's keys were not shared")
        out = np.asarray(residues, dtype=np.uint64).copy()
        for j in self.roster.members:
            if j == self.silo:
                continue
            m = prg(self._seed(j), round_, self.width, self.bits)
            out = out + m if self.silo < j else out - m
        return out & np.uint64((1 << self.bits) - 1)


# -- server ---------------------------------------------------------------------------------------
class _OpenRound(Protocol):
    """What :func:`message_problem` reads of a server's side (both protocols' servers have it)."""

    epoch: int
    round_: int | None
    bits: int
    width: int

    @property
    def roster(self) -> Roster | None: ...

    @property
    def received(self) -> Mapping[int, object]: ...


def message_problem(server: _OpenRound, sender: object, epoch: object, round_: object, masked: object) -> str | None:
    """Why a masked message cannot be taken in the server's open round, or None: its epoch and round,
    its sender (a roster member, first message), its residues (``width`` uint64 below 2^bits)."""
    assert server.roster is not None
    if epoch != server.epoch:
        return f"epoch {epoch!r} is not the current epoch {server.epoch} (foreign or replayed)"
    if round_ != server.round_:
        return f"round {round_!r} is not the current round {server.round_} (stale or replayed)"
    if sender not in server.roster.s_public:
        return f"sender {sender!r} is not in the roster of epoch {server.epoch} (foreign)"
    if sender in server.received:
        return f"silo {sender}: a second masked message in round {round_}"
    if not isinstance(masked, np.ndarray) or masked.dtype != np.uint64 or masked.shape != (server.width,):
        return f"silo {sender}: a masked message must be {server.width} uint64 residues"
    if (masked >> np.uint64(server.bits)).any():
        return f"silo {sender}: residues must be below 2^{server.bits}"
    return None


@dataclass
class SecAggServer:
    """The server's side: roster, routing, validation of masked messages, modular sum, recovery."""

    context: bytes
    bits: int
    width: int
    epoch: int = 0
    roster: Roster | None = None
    round_: int | None = None
    received: dict[int, np.ndarray] = field(default_factory=dict)

    def publish(self, keys: dict[int, tuple[bytes, bytes]], threshold: int) -> Roster:
        """Step 1: a new epoch with the silos that advertised keys."""
        if not 1 <= threshold <= len(keys):
            raise SecAggError(f"threshold must be in [1, {len(keys)}] for {len(keys)} silos, got {threshold}")
        self.epoch += 1
        self.roster = Roster(
            self.context,
            self.epoch,
            threshold,
            {i: c for i, (c, _) in keys.items()},
            {i: s for i, (_, s) in keys.items()},
        )
        self.round_, self.received = None, {}
        return self.roster

    @staticmethod
    def route(shares: dict[int, dict[int, bytes]]) -> dict[int, dict[int, bytes]]:
        """Step 2: ciphertexts by recipient (sender -> recipient -> blob becomes recipient -> sender -> blob)."""
        out: dict[int, dict[int, bytes]] = {}
        for sender, blobs in shares.items():
            for recipient, blob in blobs.items():
                out.setdefault(recipient, {})[sender] = blob
        return out

    def open_round(self, round_: int) -> None:
        if self.roster is None:
            raise SecAggError("no epoch: publish a roster first")
        self.round_, self.received = round_, {}

    def accept(self, sender: object, epoch: object, round_: object, message: object) -> str | None:
        """Step 3: keep a masked message, or return why it is rejected (nothing kept)."""
        if self.roster is None or self.round_ is None:
            return "no round is open"
        problem = message_problem(self, sender, epoch, round_, message)
        if problem is None:
            assert isinstance(message, np.ndarray) and isinstance(sender, int)  # (what message_problem checked)
            self.received[sender] = message.copy()
        return problem

    def dropped(self) -> list[int]:
        assert self.roster is not None
        return [i for i in self.roster.members if i not in self.received]

    def total(self) -> np.ndarray:
        """The modular sum of the round's inputs; every member's message is needed."""
        assert self.roster is not None and self.round_ is not None
        if self.dropped():
            raise SecAggError(f"silos {self.dropped()} sent no message: their masks do not cancel")
        out = np.zeros(self.width, dtype=np.uint64)
        for message in self.received.values():
            out = out + message
        self.round_ = None
        return out & np.uint64((1 << self.bits) - 1)
