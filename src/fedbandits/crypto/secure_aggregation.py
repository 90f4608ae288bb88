"""The primitives of secure aggregation, transport-agnostic: X25519 key agreement, HKDF-SHA256,
SHAKE-256 as the mask generator (64-bit words modulo 2^bits), Shamir shares over the prime field of
2^521 - 1, and the roster of an epoch's members and keys.

The protocol built on them is :mod:`fedbandits.crypto.double_masking` (Bonawitz et al. 2017 with
signed keys, self-masks and signed survivor lists), which the Flower deployment and the serving
silos both run; its round is :mod:`fedbandits.crypto.secure_round`.  (The serving silos ran an
all-present pairwise variant of their own until issue #45; it is gone.)
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
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
