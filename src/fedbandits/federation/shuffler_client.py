"""The shuffler's clients: a silo posting its release, the server closing a round (mutual TLS,
bounded retries), and the wire both ends share -- paths, the array encoding, and the HTTP status each
:class:`ShufflerError` carries, which decides whether a client retries.  The shuffler party itself is
:mod:`fedbandits.federation.shuffler`.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fedbandits.federation.spec import shown as _show

#: largest answer a client reads (a batch of M p-sums, base64: 10 MB at M = 20, d = 300)
MAX_RESPONSE = 1 << 26


class ShufflerError(RuntimeError):
    """A request the shuffler refuses (with the HTTP status to answer); nothing changed."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.status = status


def encode_array(x: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(x, dtype="<f8").tobytes()).decode("ascii")


def decode_array(text: object, width: int, what: str) -> np.ndarray:
    """A base64 string of little-endian float64 numbers, reshaped to rows of ``width``."""
    if not isinstance(text, str):
        raise ShufflerError(f"{what} must be a base64 string of float64 numbers")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise ShufflerError(f"{what} is not valid base64") from None
    if len(raw) % (8 * width):
        raise ShufflerError(f"{what} must hold a multiple of {width} float64 numbers, got {len(raw)} bytes")
    return np.frombuffer(raw, dtype="<f8").astype(np.float64).reshape(-1, width)


def client_context(ca: str | Path, cert: str | Path, key: str | Path) -> ssl.SSLContext:
    """TLS for a silo or the server talking to the shuffler: verify it against ``ca``, show ``cert``."""
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


def split_address(address: str, what: str = "the shuffler address") -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets, ``[::1]:9095``) as (host, port)."""
    host, _, port = str(address).rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        host = ""  # an IPv6 address without brackets is ambiguous
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{what} must be HOST:PORT with a port in [1, 65535] (IPv6 as [ADDR]:PORT), got {address!r}")
    return host, int(port)


#: TLS failures that a retry cannot fix (wrong CA or certificate), as OpenSSL names them
_TLS_REFUSALS = frozenset(
    {
        "CERTIFICATE_VERIFY_FAILED",
        "TLSV1_ALERT_UNKNOWN_CA",
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
        "TLSV1_ALERT_ACCESS_DENIED",
    }
)


class ShufflerClient:
    """A silo's or the server's connection to the shuffler (mutual TLS, bounded retries)."""

    def __init__(self, address: str, ca: str | Path, cert: str | Path, key: str | Path, timeout: float = 10.0) -> None:
        self.host, self.port = split_address(address)
        self.context = client_context(ca, cert, key)
        self.timeout = timeout

    #: keys of a run config (server) or node config (silo) that name the shuffler and the TLS files
    CONFIG_KEYS = ("shuffler", "shuffler-ca", "shuffler-cert", "shuffler-key")

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> ShufflerClient:
        """The client a Flower run config or node config describes (:attr:`CONFIG_KEYS`)."""
        missing = [k for k in cls.CONFIG_KEYS if not str(config.get(k, ""))]
        if missing:
            raise ShufflerError(f"a shuffled protocol needs the config keys {', '.join(missing)} (--shuffler ...)")
        address, ca, cert, key = (str(config[k]) for k in cls.CONFIG_KEYS)
        return cls(address, ca, cert, key)

    def _post(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode()
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=self.timeout)
        try:
            conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read(MAX_RESPONSE + 1)
            if len(raw) > MAX_RESPONSE:
                raise ShufflerError(f"the shuffler's answer exceeds {MAX_RESPONSE} bytes", 502)
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = {"error": raw[:200].decode("utf-8", "replace")}
            return resp.status, payload if isinstance(payload, dict) else {"error": "not a JSON object"}
        finally:
            conn.close()

    def _retrying(self, path: str, body: dict[str, Any], patience: float) -> dict[str, Any]:
        """POST, retrying connection failures (not refusals) for at most ``patience`` seconds."""
        deadline = time.time() + patience
        while True:
            try:
                status, payload = self._post(path, body)
            except (OSError, http.client.HTTPException) as exc:  # down or restarting: try again ...
                if isinstance(exc, ssl.SSLError) and (
                    isinstance(exc, ssl.SSLCertVerificationError) or exc.reason in _TLS_REFUSALS
                ):  # ... unless the TLS credentials are wrong, which no retry fixes
                    raise ShufflerError(
                        f"TLS with the shuffler {self.host}:{self.port} refused ({exc.reason}): check the shuffler "
                        "hop's CA (--shuffler-ca) and this party's client certificate and key",
                        495,
                    ) from None
                if time.time() >= deadline:
                    where = f"{self.host}:{self.port}"
                    raise ShufflerError(f"shuffler {where} unreachable for {patience:.0f} s: {exc}", 503) from None
                time.sleep(0.5)
                continue
            if status != 200:
                raise ShufflerError(f"shuffler refused {path}: {payload.get('error', status)}", status)
            return payload

    def send(self, silo: int, digest: str, round_: int, psum: np.ndarray, patience: float = 30.0) -> str:
        body = {"silo_id": silo, "digest": digest, "phase": "sync", "round": round_, "psum": encode_array(psum)}
        return str(self._retrying("/v1/message", body, patience).get("status"))

    def close(self, digest: str, round_: int, width: int, patience: float = 60.0) -> tuple[np.ndarray, bool, int]:
        """Round ``round_``'s shuffled batch ``(n, width)``, whether the shuffler withheld it (too few
        messages for the guarantee), and the response's size in bytes."""
        payload = self._retrying("/v1/close", {"digest": digest, "round": round_}, patience)
        if payload.get("round") != round_:
            raise ShufflerError(f"the shuffler answered for round {_show(payload.get('round'))}, not {round_}", 502)
        batch = decode_array(payload.get("batch"), width, "batch")
        withheld = payload.get("withheld")
        if batch.shape[0] != payload.get("count") or not isinstance(withheld, bool) or (withheld and len(batch)):
            raise ShufflerError("the shuffler's answer is inconsistent (count, withheld, batch)", 502)
        return batch, withheld, len(json.dumps(payload))
