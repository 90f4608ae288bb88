"""Trial credentials: a private CA, the server's TLS certificate, and each silo's authentication key.

* ``ca.pem`` / ``ca.key``: a self-signed CA (keep ``ca.key`` offline in a real deployment);
* ``server.pem`` / ``server.key``: the SuperLink's TLS certificate, signed by the CA, valid for the
  given host names / IP addresses (Subject Alternative Names);
* ``silo-<i>`` / ``silo-<i>.pub``: silo i's SuperNode authentication key pair (ECDSA P-384,
  OpenSSH format, as Flower requires).  The server operator registers the ``.pub`` files; the
  private key never leaves the silo.

Flower's SuperNodes authenticate with these keys (signed requests), not with TLS client
certificates; TLS authenticates the server to the silos and encrypts every connection.

For a shuffled protocol (``sdp-amplification``) the shuffler is a separate party that speaks
mutual TLS under a CA of its own operator, ``shuffler-ca.pem`` / ``.key``: ``shuffler.pem`` /
``shuffler.key`` (its server certificate) and one TLS client certificate per party,
``server-client.pem`` / ``.key`` and ``silo-<i>-client.pem`` / ``.key``, whose common name
(``server``, ``silo-<i>``) is the identity the shuffler checks.

For ``distributed-dp`` each silo also signs its secure-aggregation messages (issue #32;
:mod:`fedbandits.crypto.signing`) under a third CA, ``signing-ca.pem`` / ``.key``, which the
silos' consortium keeps (never the server's operator: whoever holds it can speak for any silo):
``silo-<i>-signing.pem`` (an Ed25519 key certified for common name ``silo-<i>``) and
``silo-<i>-signing.key``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fedbandits.crypto.signing import Authority, Identity, load_signing

#: file stem of the shuffler hop's own CA (``shuffler-ca.pem`` / ``shuffler-ca.key``)
SHUFFLER_CA = "shuffler-ca"

#: file stem of the silos' signing CA (``signing-ca.pem`` / ``signing-ca.key``)
SIGNING_CA = "signing-ca"

_NO_OTHER_USAGE = dict.fromkeys(
    (
        "content_commitment",
        "key_encipherment",
        "data_encipherment",
        "key_agreement",
        "key_cert_sign",
        "crl_sign",
        "encipher_only",
        "decipher_only",
    ),
    False,
)

#: names every trial server certificate lists, so that the operator's CLI on the server host works
LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if private:
        os.chmod(path, 0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey | Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def create_ca(
    out: str | Path, days: int = 30, name: str = "fedbandits trial CA", stem: str = "ca"
) -> tuple[Path, Path]:
    out = Path(out)
    key = ec.generate_private_key(ec.SECP384R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA384())
    )
    _write(out / f"{stem}.pem", cert.public_bytes(serialization.Encoding.PEM))
    _write(out / f"{stem}.key", _key_pem(key), private=True)
    return out / f"{stem}.pem", out / f"{stem}.key"


def _issue(
    out: Path,
    stem: str,
    common_name: str,
    usage: x509.ObjectIdentifier | None,
    hosts: list[str] | None,
    days: int,
    ca_dir: Path,
    ca_stem: str = "ca",
    key: ec.EllipticCurvePrivateKey | Ed25519PrivateKey | None = None,
) -> tuple[Path, Path]:
    """``<stem>.pem`` / ``<stem>.key``: a certificate for ``common_name`` signed by the CA
    ``ca_dir/<ca_stem>.pem``, for TLS server or client authentication (``usage``; None: digital
    signatures only), with ``hosts`` as its Subject Alternative Names (server certificates), for
    ``key`` (default: a new ECDSA P-384 key)."""
    ca_cert = x509.load_pem_x509_certificate((ca_dir / f"{ca_stem}.pem").read_bytes())
    ca_key = serialization.load_pem_private_key((ca_dir / f"{ca_stem}.key").read_bytes(), password=None)
    key = key if key is not None else ec.generate_private_key(ec.SECP384R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    else:
        builder = builder.add_extension(x509.KeyUsage(digital_signature=True, **_NO_OTHER_USAGE), critical=True)
    if hosts:
        sans: list[x509.GeneralName] = []
        for h in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                sans.append(x509.DNSName(h))
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA384())  # type: ignore[arg-type]
    _write(out / f"{stem}.pem", cert.public_bytes(serialization.Encoding.PEM))
    _write(out / f"{stem}.key", _key_pem(key), private=True)
    return out / f"{stem}.pem", out / f"{stem}.key"


def create_server_cert(
    out: str | Path,
    hosts: list[str] | None = None,
    days: int = 30,
    ca_dir: str | Path | None = None,
    stem: str = "server",
    ca_stem: str = "ca",
) -> tuple[Path, Path]:
    """``server.pem`` / ``server.key`` for ``hosts`` plus the loopback names 127.0.0.1, ::1 and
    localhost (the server operator's own ``flwr`` CLI reaches the SuperLink over loopback), signed by
    the CA in ``ca_dir`` (default ``out``).  The first host is the certificate's common name.
    ``stem = "shuffler"`` with ``ca_stem = "shuffler-ca"`` gives the shuffler's certificate."""
    out = Path(out)
    hosts = list(dict.fromkeys([*(hosts or []), *LOOPBACK]))
    ca = Path(ca_dir) if ca_dir is not None else out
    return _issue(out, stem, hosts[0], ExtendedKeyUsageOID.SERVER_AUTH, hosts, days, ca, ca_stem)


def create_client_cert(
    out: str | Path, name: str, days: int = 30, ca_dir: str | Path | None = None, ca_stem: str = SHUFFLER_CA
) -> tuple[Path, Path]:
    """``<name>-client.pem`` / ``.key``: a TLS client certificate with common name ``name``
    (``silo-<i>`` or ``server``), by which the shuffler knows who is talking to it."""
    out = Path(out)
    ca = Path(ca_dir) if ca_dir is not None else out
    return _issue(out, f"{name}-client", name, ExtendedKeyUsageOID.CLIENT_AUTH, None, days, ca, ca_stem)


def create_silo_key(out: str | Path, silo: int) -> tuple[Path, Path]:
    """Silo ``silo``'s SuperNode authentication key pair: ``silo-<i>`` (private) and ``silo-<i>.pub``."""
    out = Path(out)
    key = ec.generate_private_key(ec.SECP384R1())
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    _write(out / f"silo-{silo}", private, private=True)
    _write(out / f"silo-{silo}.pub", public + b"\n")
    return out / f"silo-{silo}", out / f"silo-{silo}.pub"


def create_shuffler_credentials(out: str | Path, silos: int, hosts: list[str] | None = None) -> Path:
    """The shuffler hop's credentials, made by the shuffler's operator: its own CA
    (``shuffler-ca.pem`` / ``.key``), the shuffler's certificate for ``hosts`` plus loopback, and TLS
    client certificates for the server and each silo.  A separate CA, because whoever can issue a
    ``silo-<i>`` client certificate can post as silo i -- and a server that could fill a round with
    its own messages would isolate one silo's message in the batch."""
    out = Path(out)
    create_ca(out, name="fedbandits shuffler-hop CA", stem=SHUFFLER_CA)
    create_server_cert(out, hosts, stem="shuffler", ca_stem=SHUFFLER_CA)
    create_client_cert(out, "server")
    for i in range(silos):
        create_client_cert(out, f"silo-{i}")
    return out


def create_signing_credentials(out: str | Path, silos: int, days: int = 30) -> Path:
    """The silos' signing CA (``signing-ca.pem`` / ``.key``) and, per silo, an Ed25519 signing key
    ``silo-<i>-signing.key`` with its certificate ``silo-<i>-signing.pem`` (common name ``silo-<i>``,
    digital signatures only)."""
    out = Path(out)
    create_ca(out, days, name="fedbandits silos' signing CA", stem=SIGNING_CA)
    for i in range(silos):
        _issue(out, f"silo-{i}-signing", f"silo-{i}", None, None, days, out, SIGNING_CA, Ed25519PrivateKey.generate())
    return out


def signing_files(folder: str | Path, silo: int) -> tuple[Path, Path, Path]:
    """Silo ``silo``'s signing key, its certificate and the signing CA in ``folder``, as
    :func:`create_signing_credentials` names them."""
    folder = Path(folder)
    return folder / f"silo-{silo}-signing.key", folder / f"silo-{silo}-signing.pem", folder / f"{SIGNING_CA}.pem"


def trial_signing(folder: str | Path, silos: int) -> list[tuple[Identity, Authority]]:
    """Every silo's signing identity and the CA from ``folder``, made there first if absent (trials)."""
    if not signing_files(folder, 0)[2].exists():
        create_signing_credentials(folder, silos)
    return [load_signing(i, *signing_files(folder, i)) for i in range(silos)]


def create_trial_credentials(
    out: str | Path, silos: int, hosts: list[str] | None = None, shuffler_hosts: list[str] | None = None
) -> Path:
    """Everything a one-host trial needs in ``out``: the Flower credentials (CA, server certificate,
    ``silos`` silo keys), the shuffler hop's (:func:`create_shuffler_credentials`) and the silos'
    signing identities (:func:`create_signing_credentials`).  In a real
    deployment the two sets are made by different operators (see docs/deployment.md)."""
    create_flower_credentials(out, silos, hosts)
    create_shuffler_credentials(out, silos, shuffler_hosts)
    create_signing_credentials(out, silos)
    return Path(out)


def create_flower_credentials(out: str | Path, silos: int, hosts: list[str] | None = None) -> Path:
    """The Flower side's credentials in ``out``: CA, server certificate, ``silos`` silo keys."""
    out = Path(out)
    create_ca(out)
    create_server_cert(out, hosts)
    for i in range(silos):
        create_silo_key(out, i)
    return out
