"""The shuffler S of the shuffle model, deployed as its own party (``fedbandits deploy shuffler``).

``sdp-amplification`` (Zhou & Chowdhury 2023, Algorithm 2 with S = shuffle) needs a party
between the silos and the server that receives the M noisy p-sums of a release *with* their
senders and hands the server only the multiset, in a uniformly random order.  Flower is
hub-and-spoke (every message passes through the SuperLink, which sees the sender's node id), so
the shuffler is not a Flower component: it is a small HTTPS service with mutual TLS.

* A silo's ClientApp posts its released p-sum to ``POST /v1/message`` (identity: its TLS client
  certificate, common name ``silo-<i>``) and answers the server's Flower request with an
  acknowledgement that carries **no payload**.
* The server (client certificate ``server``) closes the round with ``POST /v1/close``: the
  shuffler permutes the round's messages, persists the batch, and returns it -- without sender
  identities.  Closing a closed round returns the same batch (the permutation is drawn once and
  never redrawn), so a restarted server resumes without a second, different view.
* A round with fewer messages than the guarantee assumes (:func:`required_batch`: all M when the
  reported epsilon comes from the amplification lemma) is closed with its batch **withheld**:
  the server decides when a round closes, and must not obtain a batch of one message.

Trust: the shuffler sees every silo's noisy p-sum with its sender, exactly what the server sees
under ``ldp``; each silo's messages are protected against it only by the silo's own noise (the
calibration's ``epsilon_silo``).  The server sees an anonymous multiset; the guarantee of
``sdp-amplification`` holds as long as shuffler and server do not collude, and as long as only
silo i holds a client certificate for ``silo-<i>`` (the shuffler hop has a CA of its own,
:func:`fedbandits.federation.certs.create_shuffler_credentials`).  What the shuffler keeps: the
open round's messages by sender (until the round closes), then per closed round the anonymous
batch and, apart from it, the sorted senders and the sorted SHA-256 of their messages (so that an
identical resend after the close is recognised); nothing links a position in a batch to a
sender.

:class:`ShufflerCore` is the transport-free logic (validation, rounds, durable state);
:func:`serve` runs it behind HTTPS; :class:`~fedbandits.federation.shuffler_client.ShufflerClient`
(its own module, so that a silo's ClientApp loads no server) is what silos and the server use.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import os
import random
import socket
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

from fedbandits.federation.shuffler_client import (
    ShufflerError,
    decode_array,
    encode_array,
)
from fedbandits.federation.spec import DeploySpec, load_pickle, save_pickle
from fedbandits.federation.spec import shown as _show
from fedbandits.privacy.calibration import NoiseCalibration
from fedbandits.privacy.mechanisms import protocol_streams
from fedbandits.sim.seeding import noise_rngs

log = logging.getLogger("fedbandits.federation.shuffler")

#: where the permutations come from: "os" (the operating system's CSPRNG, secret to the shuffler)
#: or "derived" (the simulator's shuffle stream of the run, for parity trials only: anybody who
#: knows the config can undo such a shuffle)
SHUFFLE_SOURCES = ("os", "derived")

#: largest request body accepted (a p-sum is d(d+1)/2 + d float64 numbers: 2.8 KiB at d = 25)
MAX_BODY = 1 << 22

#: the common name of the server's client certificate (silos use ``silo-<i>``)
SERVER_ROLE = "server"


def derived_shuffle_rng(spec: DeploySpec) -> np.random.Generator:
    """The shuffle stream the simulator's shuffler uses in this run (see
    :class:`~fedbandits.protocols.gaussian_tree.GaussianTreeProtocol`)."""
    run_rng = noise_rngs(spec.noise_seed, [spec.run], spec.noise_stream)[0]
    return protocol_streams(run_rng)[1]


@dataclass
class ShufflerState:
    """What the shuffler must not lose, small and rewritten at every accepted message; each closed
    round's batch is in a file of its own (:class:`ClosedRound`), written once."""

    digest: str
    silos: int
    width: int
    releases: int
    source: str
    min_batch: int  # fewer messages in a round: its batch is withheld (see required_batch)
    rng: np.random.Generator | None  # the derived stream (None: OS randomness, nothing to keep)
    closed: int = 0  # rounds closed
    pending: dict[int, np.ndarray] = field(default_factory=dict)  # round closed + 1: silo -> message
    withheld: list[int] = field(default_factory=list)  # closed rounds whose batch was withheld
    accepted: int = 0
    rejections: int = 0
    bytes_in: int = 0  # request bytes of accepted silo messages
    bytes_out: int = 0  # response bytes of batches sent to the server


@dataclass(frozen=True)
class ClosedRound:
    """A closed round as the shuffler keeps it: the shuffled batch, and -- kept apart from it, so
    that nothing links a position to a sender -- the sorted senders and the sorted SHA-256 of their
    messages (to recognise an identical resend)."""

    digest: str  # the deployment's config hash
    round: int
    batch: np.ndarray  # (n, P) in the shuffled order; (0, P) if withheld
    senders: tuple[int, ...]  # sorted
    hashes: tuple[str, ...]  # sorted
    withheld: bool


def required_batch(spec: DeploySpec) -> int:
    """Fewest messages a released batch may hold.  If the reported epsilon comes from the
    amplification lemma (it is below each silo's own guarantee ``epsilon_silo``), the lemma was
    applied to all M silos' messages: a batch with fewer would amplify less than reported -- with
    one message it would hand the server that silo's p-sum -- so it is withheld.  If plain
    composition certifies the target alone, the shuffle adds nothing the guarantee relies on."""
    cal = spec.calibration()
    if not isinstance(cal, NoiseCalibration):  # none (distributed-dp is never shuffled)
        return 1
    return spec.silos if cal.epsilon_spent < cal.epsilon_silo else 1


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x, dtype="<f8").tobytes()).hexdigest()


class ShufflerCore:
    """The shuffler's logic and durable state, independent of the transport.

    Every change is written atomically to ``state_dir`` *before* it takes effect in memory and
    before the answer leaves: a failed write (disk full) changes nothing, a restarted shuffler
    loses nothing it acknowledged, and a closed round's batch (``rounds/round-<k>.pkl``, written
    before the round counts as closed) is served again byte for byte -- its permutation is drawn
    once.  Thread-safe (one lock)."""

    def __init__(self, spec: DeploySpec, state_dir: str | Path, source: str = "os") -> None:
        if source not in SHUFFLE_SOURCES:
            raise ShufflerError(f"shuffle source must be one of {SHUFFLE_SOURCES}, got {source!r}")
        if not spec.shuffled:
            raise ShufflerError(f"protocol {spec.params.protocol!r} has no shuffler; use sdp-amplification")
        self.spec = spec
        self.dir = Path(state_dir)
        self.path = self.dir / "shuffler.pkl"
        self.lock = threading.Lock()
        self._sysrandom = random.SystemRandom()
        if self.path.exists():
            state: ShufflerState = load_pickle(self.path)
            if state.digest != spec.digest:
                raise ShufflerError(
                    f"shuffler state {self.path} belongs to another deployment (config hash {state.digest[:12]})"
                )
            if state.source != source:
                raise ShufflerError(f"shuffler state {self.path} was started with shuffle source {state.source!r}")
            self.state = state
            log.info("resuming: %d of %d rounds closed", state.closed, state.releases)
        else:
            state = ShufflerState(
                digest=spec.digest,
                silos=spec.silos,
                width=spec.width(),
                releases=spec.releases,
                source=source,
                min_batch=required_batch(spec),
                rng=derived_shuffle_rng(spec) if source == "derived" else None,
            )
            (self.dir / "rounds").mkdir(parents=True, exist_ok=True)
            _fsync_dir(self.dir)  # rounds/ itself survives a power loss
            save_pickle(self.path, state)
            self.state = state
        if source == "derived":
            log.warning("shuffle source 'derived': permutations anybody with the config can recompute (trials only)")

    def _commit(self, state: ShufflerState) -> None:
        save_pickle(self.path, state)  # raises before anything changed if the write fails
        self.state = state

    def round_path(self, k: int) -> Path:
        return self.dir / "rounds" / f"round-{k}.pkl"

    def closed_round(self, k: int) -> ClosedRound:
        done: ClosedRound = load_pickle(self.round_path(k))
        if done.digest != self.state.digest or done.round != k:
            raise ShufflerError(f"{self.round_path(k)} belongs to another deployment or round", 500)
        return done

    # -- silo side ---------------------------------------------------------------------------
    def submit(self, identity: str, body: dict[str, Any], size: int = 0) -> str:
        """Take silo ``identity``'s message; return "accepted", "duplicate", or for an identical
        resend after its round closed "included" (in the released batch) or "withheld" (the round's
        batch was withheld); raise :class:`ShufflerError`."""
        with self.lock:
            try:
                silo, k, x = self._check_message(identity, body)
                status = self._status(silo, k, x)
            except ShufflerError as exc:
                self.state.rejections += 1  # a counter only: persisted with the next change
                log.warning("rejected a message from %s: %s", _show(identity), exc)
                raise
            if status == "accepted":
                s = self.state
                self._commit(
                    dataclasses.replace(
                        s, pending={**s.pending, silo: x}, accepted=s.accepted + 1, bytes_in=s.bytes_in + size
                    )
                )
            return status

    def _check_message(self, identity: str, body: dict[str, Any]) -> tuple[int, int, np.ndarray]:
        s = self.state
        silo = body.get("silo_id")
        if isinstance(silo, bool) or not isinstance(silo, int) or not 0 <= silo < s.silos:
            raise ShufflerError(f"silo_id must be an integer in [0, {s.silos}), got {_show(silo)}")
        if identity != f"silo-{silo}":
            raise ShufflerError(f"client certificate {_show(identity)} may not send for silo {silo}", 403)
        if body.get("digest") != s.digest:
            raise ShufflerError(f"config hash {_show(body.get('digest'))} is not this deployment's", 409)
        if body.get("phase") != "sync":
            raise ShufflerError(f"phase {_show(body.get('phase'))}, expected 'sync'")
        k = body.get("round")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= s.releases:
            raise ShufflerError(f"round must be an integer in [1, {s.releases}], got {_show(k)}")
        rows = decode_array(body.get("psum"), s.width, "psum")
        if rows.shape != (1, s.width):
            raise ShufflerError(f"psum must be exactly {s.width} float64 numbers, got {rows.size}")
        x = rows[0]
        if not np.isfinite(x).all():
            raise ShufflerError(f"psum has {int((~np.isfinite(x)).sum())} non-finite entries")
        return silo, k, x

    def _status(self, silo: int, k: int, x: np.ndarray) -> str:
        s = self.state
        if k <= s.closed:
            done = self.closed_round(k)
            if silo in done.senders and _sha256(x) in done.hashes:
                return "withheld" if done.withheld else "included"
            raise ShufflerError(f"round {k} is closed without this message (stale or replayed)", 409)
        if k != s.closed + 1:
            raise ShufflerError(f"round {k} is not open (the open round is {s.closed + 1})", 409)
        old = s.pending.get(silo)
        if old is not None:
            if np.array_equal(old, x):
                return "duplicate"
            raise ShufflerError(f"silo {silo}: a second, different message in round {k}", 409)
        return "accepted"

    # -- server side -------------------------------------------------------------------------
    def close(self, identity: str, body: dict[str, Any]) -> ClosedRound:
        """Close round ``body["round"]`` (the server only): permute its messages once; return the
        closed round (its batch is empty if fewer than ``min_batch`` messages arrived)."""
        with self.lock:
            s = self.state
            if identity != SERVER_ROLE:
                raise ShufflerError(f"client certificate {_show(identity)} may not close rounds", 403)
            if body.get("digest") != s.digest:
                raise ShufflerError(f"config hash {_show(body.get('digest'))} is not this deployment's", 409)
            k = body.get("round")
            if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= s.releases:
                raise ShufflerError(f"round must be an integer in [1, {s.releases}], got {_show(k)}")
            if k <= s.closed:
                return self.closed_round(k)
            if k != s.closed + 1:
                raise ShufflerError(f"round {k} cannot close: {s.closed} rounds are closed", 409)
            rng = copy.deepcopy(s.rng)
            # a round file of a round that is still open (written before a failed state write or a
            # crash) was never served -- a batch leaves only after the commit below -- and may lack
            # messages accepted since: it is drawn anew and replaced
            done = self._shuffle(k, rng)
            save_pickle(self.round_path(k), done)
            withheld = [*s.withheld, k] if done.withheld else s.withheld
            self._commit(dataclasses.replace(s, closed=k, pending={}, rng=rng, withheld=withheld))
            if done.withheld:
                log.warning(
                    "round %d closed with %d of the %d messages the guarantee needs: batch withheld",
                    k,
                    len(done.senders),
                    s.min_batch,
                )
            else:
                log.info("round %d closed: %d message(s) shuffled", k, len(done.senders))
            return done

    def _shuffle(self, k: int, rng: np.random.Generator | None) -> ClosedRound:
        s = self.state
        if rng is not None:
            # derived: the simulator's rng.permutation(M) over all silos, senders kept in that order
            # (with every silo present, exactly the simulator's order; a missing one shifts nothing)
            order = [int(i) for i in rng.permutation(s.silos) if int(i) in s.pending]
        else:
            order = list(s.pending)
            self._sysrandom.shuffle(order)  # the OS's CSPRNG: unpredictable to the server
        withheld = len(order) < s.min_batch
        batch = np.zeros((0, s.width)) if withheld or not order else np.stack([s.pending[i] for i in order])
        return ClosedRound(
            digest=s.digest,
            round=k,
            batch=batch,
            senders=tuple(sorted(s.pending)),
            hashes=tuple(sorted(_sha256(x) for x in s.pending.values())),
            withheld=withheld,
        )

    def status(self) -> dict[str, int]:
        with self.lock:
            s = self.state
            return {"closed": s.closed, "pending": len(s.pending), "accepted": s.accepted, "rejections": s.rejections}


# ================================================================ transport ================
def _peer_identity(sock: ssl.SSLSocket) -> str:
    cert: dict[str, Any] = dict(sock.getpeercert() or {})
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""


class _Handler(BaseHTTPRequestHandler):
    server: _ShufflerHTTPServer
    timeout = 30  # seconds per connection (handshake and request)
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.request.settimeout(self.timeout)
        self.request.do_handshake()  # in this connection's thread, not the accept loop
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _answer(self, status: int, payload: dict[str, Any]) -> int:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        return len(data)

    def _body(self) -> tuple[dict[str, Any], int]:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise ShufflerError("Content-Length is required", 411) from None
        if not 0 <= length <= MAX_BODY:
            raise ShufflerError(f"Content-Length must be in [0, {MAX_BODY}], got {length}", 413)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise ShufflerError("body is not JSON (or nested too deeply)") from None
        if not isinstance(body, dict):
            raise ShufflerError("body must be a JSON object")
        return body, length

    def do_GET(self) -> None:
        if self.path == "/health":
            self._answer(200, {"status": "ok", **self.server.core.status()})
        else:
            self._answer(404, {"error": f"no such path {self.path!r}"})

    def do_POST(self) -> None:
        identity = _peer_identity(self.request)
        core = self.server.core
        try:
            if self.path not in ("/v1/message", "/v1/close"):
                raise ShufflerError(f"no such path {_show(self.path)}", 404)
            body, size = self._body()
            if self.path == "/v1/message":
                status = core.submit(identity, body, size)
                self._answer(200, {"status": status})
            else:
                done = core.close(identity, body)
                payload = {
                    "round": done.round,
                    "count": int(done.batch.shape[0]),
                    "withheld": done.withheld,
                    "batch": encode_array(done.batch),
                }
                sent = self._answer(200, payload)
                with core.lock:
                    core.state.bytes_out += sent  # a counter only: persisted with the next change
        except ShufflerError as exc:
            if self.path != "/v1/message":  # submit logs its own rejections
                log.warning("refused %s from %s: %s", _show(self.path), _show(identity), exc)
            self.close_connection = True  # the body may be unread: do not reuse the connection
            self._answer(exc.status, {"error": str(exc)})
        except Exception:  # a bug, a failed write (then nothing changed: see ShufflerCore), a lost client
            log.exception("request %s from %s failed", _show(self.path), _show(identity))
            self.close_connection = True
            try:
                self._answer(500, {"error": "internal error of the shuffler (see its log)"})
            except OSError:
                pass


class _ShufflerHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    core: ShufflerCore  # set before serving (serve() binds the port first)

    def __init__(self, address: tuple[str, int], core: ShufflerCore | None, context: ssl.SSLContext) -> None:
        if core is not None:
            self.core = core
        self.context = context
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = self.socket.accept()
        # the TLS handshake runs in the connection's thread (_Handler.setup): a slow or silent
        # client cannot stall the accept loop
        return self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        exc = sys.exc_info()[1]
        log.warning("connection from %s failed: %s", client_address[0] if client_address else "?", exc)


def server_context(ca: str | Path, cert: str | Path, key: str | Path) -> ssl.SSLContext:
    """TLS for the shuffler: its own certificate, and a client certificate signed by ``ca`` required."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert), str(key))
    ctx.load_verify_locations(str(ca))
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def serve(
    spec: DeploySpec,
    state_dir: str | Path,
    host: str,
    port: int,
    ca: str | Path,
    cert: str | Path,
    key: str | Path,
    source: str = "os",
    ready: threading.Event | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Run the shuffler until ``stop`` is set (or forever / until KeyboardInterrupt).  The TLS files
    are read and the port bound before any state is created: a mistake there changes nothing."""
    try:
        context = server_context(ca, cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise ShufflerError(f"cannot use the TLS files (--ca {ca}, --cert {cert}, --key {key}): {exc}") from None
    try:
        httpd = _ShufflerHTTPServer((host, port), None, context)
    except OSError as exc:
        raise ShufflerError(f"cannot listen on {host}:{port} (--listen): {exc.strerror or exc}") from None
    try:
        httpd.core = ShufflerCore(spec, state_dir, source)
    except BaseException:
        httpd.server_close()
        raise
    log.info("shuffler for deployment %s listening on %s:%d (mutual TLS)", spec.digest[:12], host, port)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    if ready is not None:
        ready.set()
    stop = stop or threading.Event()
    try:
        while thread.is_alive() and not stop.wait(0.5):
            pass
    finally:
        httpd.shutdown()
        httpd.server_close()
