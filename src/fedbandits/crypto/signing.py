"""Silos' long-term signing identities for secure aggregation against a cheating server (issue #32).

Each silo holds an Ed25519 signing key and an X.509 certificate for it, common name ``silo-<i>``,
issued by the *signing CA* (``signing-ca.pem``; :func:`fedbandits.federation.certs.create_signing_credentials`).
Every silo pins that CA and checks, before it trusts a roster or a survivor list, that each entry is
signed by the key of a certificate the CA issued to that very silo.  Whoever holds ``signing-ca.key``
can speak for any silo, so it must not be the server's operator (in a trial one folder holds
everything; docs/deployment.md says who should keep it in a real deployment).

Both objects hold bytes only (they pickle into a silo's or the server's durable state).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.x509.oid import NameOID

SIGNATURE_BYTES = 64
#: a certificate larger than this is refused unread (bad input from the network)
MAX_CERT_BYTES = 8192


class SigningError(ValueError):
    """A certificate or signature that does not verify; nothing was accepted."""


def silo_name(silo: int) -> str:
    return f"silo-{silo}"


@dataclass(frozen=True)
class Identity:
    """One silo's signing key (raw Ed25519) and its certificate (PEM)."""

    silo: int
    key: bytes
    cert: bytes

    @classmethod
    def load(cls, silo: int, key_path: str | Path, cert_path: str | Path) -> Identity:
        key = serialization.load_pem_private_key(Path(key_path).read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise SigningError(f"{key_path}: not an Ed25519 private key")
        cert = Path(cert_path).read_bytes()
        public = x509.load_pem_x509_certificate(cert).public_key()
        raw = key.private_bytes_raw()
        if not isinstance(public, Ed25519PublicKey) or public != key.public_key():
            raise SigningError(f"{cert_path} does not certify the key in {key_path}")
        return cls(silo, raw, cert)

    def sign(self, message: bytes) -> bytes:
        return Ed25519PrivateKey.from_private_bytes(self.key).sign(message)


@dataclass
class Authority:
    """The pinned signing CA: verifies silo certificates and their signatures."""

    ca: bytes
    _known: dict[tuple[bytes, int], bytes] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def load(cls, path: str | Path) -> Authority:
        ca = Path(path).read_bytes()
        x509.load_pem_x509_certificate(ca)  # a readable certificate, or the error names the file
        return cls(ca)

    def public_key(self, cert: bytes, silo: int) -> bytes:
        """The raw Ed25519 key the CA certified for ``silo``, or :class:`SigningError` saying why not."""
        if not isinstance(cert, bytes) or len(cert) > MAX_CERT_BYTES:
            raise SigningError(f"silo {silo}: a certificate must be PEM bytes of at most {MAX_CERT_BYTES}")
        known = self._known.get((cert, silo))
        if known is not None:
            return known
        try:
            parsed = x509.load_pem_x509_certificate(cert)
        except ValueError:
            raise SigningError(f"silo {silo}: the certificate is not a PEM X.509 certificate") from None
        ca = x509.load_pem_x509_certificate(self.ca)
        try:
            parsed.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            raise SigningError(f"silo {silo}: the certificate is not issued by the pinned signing CA") from None
        now = dt.datetime.now(dt.UTC)
        if not parsed.not_valid_before_utc <= now <= parsed.not_valid_after_utc:
            raise SigningError(f"silo {silo}: the certificate is not valid now")
        names = [a.value for a in parsed.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
        if names != [silo_name(silo)]:
            raise SigningError(f"silo {silo}: the certificate is issued to {names}, not {silo_name(silo)!r}")
        public = parsed.public_key()
        if not isinstance(public, Ed25519PublicKey):
            raise SigningError(f"silo {silo}: the certified key is not an Ed25519 key")
        raw = public.public_bytes_raw()
        self._known[(cert, silo)] = raw
        return raw

    def verify(self, cert: bytes, silo: int, message: bytes, signature: object) -> None:
        """Raise :class:`SigningError` unless ``signature`` is ``silo``'s certified signature of ``message``."""
        if not isinstance(signature, bytes) or len(signature) != SIGNATURE_BYTES:
            raise SigningError(f"silo {silo}: a signature must be {SIGNATURE_BYTES} bytes")
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key(cert, silo)).verify(signature, message)
        except InvalidSignature:
            raise SigningError(f"silo {silo}: the signature does not verify") from None


def load_signing(silo: int, key: str | Path, cert: str | Path, ca: str | Path) -> tuple[Identity, Authority]:
    """Silo ``silo``'s signing identity and the pinned CA, from their files: the certificate must
    certify the key and be the CA's certificate for ``silo-<i>`` (else :class:`SigningError`)."""
    identity, authority = Identity.load(silo, key, cert), Authority.load(ca)
    authority.public_key(identity.cert, silo)
    return identity, authority
