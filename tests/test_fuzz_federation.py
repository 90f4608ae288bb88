"""Property-based fuzzing of the deployment's boundaries: the shuffler's messages and HTTP requests,
and the server's validation of silo replies.

Every generated input gets either a result or a rejection with a one-line reason (logged by the
shuffler; returned by ``validate_release``, which the server logs and counts); never another
exception, a 500, a hang, or a change of state.  The hypothesis profile is fixed (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedbandits.config import loads_config
from fedbandits.federation.server import Incoming, validate_release
from fedbandits.federation.shuffler import SERVER_ROLE, ShufflerCore, serve
from fedbandits.federation.shuffler_client import (
    ShufflerClient,
    ShufflerError,
    client_context,
    encode_array,
    split_address,
)
from fedbandits.federation.spec import DeploySpec, make_spec

JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
)
JSON = st.recursive(
    JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _spec(protocol: str, agents: int = 4) -> DeploySpec:
    extra = "" if protocol == "distributed-dp" else 'calibration = "paper"\nepsilon = 5.0\ndelta = 0.01'
    return make_spec(
        loads_config(f"""
[experiment]
seed = 11
horizon = 40
[environment]
name = "gaussian-sphere"
agents = {agents}
arms = 5
dim = 3
[[algorithms]]
name = "fedlinucb"
batch = 10
protocol = "{protocol}"
{extra}
""")
    )


SHUFFLED = _spec("sdp-amplification")


def _valid_message(spec: DeploySpec, silo: int = 0) -> dict[str, Any]:
    return {
        "silo_id": silo,
        "digest": spec.digest,
        "phase": "sync",
        "round": 1,
        "psum": encode_array(np.ones(spec.width())),
    }


@st.composite
def _mutated(draw: st.DrawFn, valid: dict[str, Any]) -> dict[str, Any]:
    """A valid body with some fields replaced by any JSON value, some dropped, some added."""
    body = dict(valid)
    for key in draw(st.lists(st.sampled_from(sorted(valid)), unique=True)):
        if draw(st.booleans()):
            body[key] = draw(JSON)
        else:
            del body[key]
    body.update(draw(st.dictionaries(st.text(max_size=8), JSON, max_size=2)))
    return body


def _psum_text() -> st.SearchStrategy[str]:
    """Base64 of float64 arrays of any length and value, or of arbitrary bytes, or not base64."""
    arrays = st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=20).map(
        lambda xs: encode_array(np.array(xs, dtype=np.float64))
    )
    return st.one_of(arrays, st.binary(max_size=40).map(lambda b: encode_array(np.frombuffer(b, np.uint8))), st.text())


@settings(max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    identity=st.one_of(st.sampled_from(["silo-0", "silo-1", "silo-3", SERVER_ROLE]), st.text(max_size=12)),
    body=_mutated(_valid_message(SHUFFLED)),
    psum=st.one_of(st.none(), _psum_text()),
)
def test_any_shuffler_message_is_taken_or_refused_with_a_reason(
    tmp_path_factory: pytest.TempPathFactory, caplog: pytest.LogCaptureFixture, identity: str, body: dict, psum: Any
) -> None:
    if psum is not None:
        body = {**body, "psum": psum}
    core = ShufflerCore(SHUFFLED, tmp_path_factory.mktemp("shuffler"), "derived")
    before = (core.state.closed, dict(core.state.pending), core.state.accepted)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fedbandits.federation.shuffler"):
        try:
            status = core.submit(identity, body)
        except ShufflerError as exc:
            assert str(exc) and "\n" not in str(exc) and 400 <= exc.status < 500
            assert (core.state.closed, core.state.pending, core.state.accepted) == before
            assert any(str(exc) in rec.getMessage() for rec in caplog.records)  # the reason is logged
            return
    assert status == "accepted" and core.state.accepted == 1


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(identity=st.one_of(st.just(SERVER_ROLE), st.text(max_size=12)), body=_mutated({"digest": "", "round": 1}))
def test_any_close_request_is_answered_or_refused(
    tmp_path_factory: pytest.TempPathFactory, identity: str, body: dict
) -> None:
    if body.get("digest") == "":
        body = {**body, "digest": SHUFFLED.digest}
    core = ShufflerCore(SHUFFLED, tmp_path_factory.mktemp("shuffler"), "derived")
    try:
        done = core.close(identity, body)
    except ShufflerError as exc:
        assert str(exc) and "\n" not in str(exc) and 400 <= exc.status < 500
        assert core.state.closed == 0
        return
    assert identity == SERVER_ROLE and done.round == 1 and core.state.closed == 1


# -- the server's validation of silo replies ------------------------------------------------------
SPECS = {p: _spec(p) for p in ("ldp", "sdp-amplification", "distributed-dp", "none")}
PHASES = ("setup", "sync", "keys", "shares", "unmask", "finish")
ARRAYS = st.one_of(
    st.builds(
        lambda dtype, shape, fill: np.full(shape, fill).astype(dtype),
        st.sampled_from([np.float64, np.float32, np.uint64, np.int64, np.uint8, np.bool_]),
        st.lists(st.integers(0, 15), max_size=2).map(tuple),
        st.floats(allow_nan=True, allow_infinity=True, width=32) | st.integers(0, 2**30),
    ),
    JSON_LEAVES,
)


@st.composite
def _reply(draw: st.DrawFn, spec: DeploySpec, phase: str) -> Incoming:
    meta = draw(_mutated({"silo_id": 1, "digest": spec.digest, "phase": phase, "round": 1, "served": 0}) | st.none())
    names = ["psum", "masked", "curve", "other"]
    arrays = draw(st.dictionaries(st.sampled_from(names), ARRAYS, max_size=2))
    arrays_or_none = draw(st.just(arrays) | st.none())
    return Incoming(draw(st.integers(0, 9)), meta, arrays_or_none, draw(st.none() | st.text(max_size=10)))


@settings(max_examples=150)
@given(data=st.data(), protocol=st.sampled_from(sorted(SPECS)), phase=st.sampled_from(PHASES))
def test_any_silo_reply_is_accepted_or_rejected_with_a_reason(data: st.DataObject, protocol: str, phase: str) -> None:
    spec = SPECS[protocol]
    incoming = data.draw(_reply(spec, phase))
    registry = data.draw(st.none() | st.just({n: n % spec.silos for n in range(8)}))
    out = validate_release(
        spec, incoming, phase=phase, round_=1, registry=registry, seen=set(), width=spec.width(), curve_points=5
    )
    if isinstance(out, str):
        assert out and "\n" not in out
        return
    silo, payload = out
    assert 0 <= silo < spec.silos
    if isinstance(payload, np.ndarray) and payload.size:  # an accepted array has the announced form
        assert payload.shape == (spec.width(),) and (payload.dtype == np.uint64 or np.isfinite(payload).all())


# -- the shuffler's HTTP boundary -----------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _serving(tmp: Path) -> Iterator[tuple[Path, str]]:
    from fedbandits.federation.certs import create_trial_credentials

    creds = create_trial_credentials(tmp / "creds", SHUFFLED.silos)
    port = _free_port()
    ready, stop = threading.Event(), threading.Event()
    tls = (creds / "shuffler-ca.pem", creds / "shuffler.pem", creds / "shuffler.key")
    thread = threading.Thread(
        target=serve,
        args=(SHUFFLED, tmp / "state", "127.0.0.1", port, *tls),
        kwargs={"source": "derived", "ready": ready, "stop": stop},
    )
    thread.start()
    try:
        assert ready.wait(30)
        yield creds, f"127.0.0.1:{port}"
    finally:
        stop.set()
        thread.join(30)
        assert not thread.is_alive()


@pytest.fixture(scope="module")
def shuffler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    pytest.importorskip("cryptography")
    with _serving(tmp_path_factory.mktemp("http")) as served:
        yield served


def _send(creds: Path, address: str, request: bytes) -> bytes:
    ctx = client_context(creds / "shuffler-ca.pem", creds / "silo-0-client.pem", creds / "silo-0-client.key")
    host, port = split_address(address)
    with socket.create_connection((host, port), timeout=10) as raw, ctx.wrap_socket(raw, server_hostname=host) as tls:
        tls.sendall(request)
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
    return data


TOKENS = st.one_of(
    st.sampled_from([b"/v1/message", b"/v1/close", b"/health", b"/"]), st.binary(min_size=1, max_size=12)
)


@st.composite
def _request(draw: st.DrawFn) -> bytes:
    """A raw HTTP/1.1 request: any method, path, headers and body; Content-Length never promises
    more bytes than are sent (that is a slow client, which the handler's 30 s timeout answers)."""
    method = draw(st.sampled_from([b"GET", b"POST", b"PUT", b"DELETE"]) | st.binary(min_size=1, max_size=6))
    path = draw(TOKENS)
    body = draw(
        st.one_of(
            st.binary(max_size=200),
            JSON.map(lambda v: json.dumps(v).encode()),
            _mutated(_valid_message(SHUFFLED)).map(lambda v: json.dumps(v).encode()),
        )
    )
    length = draw(
        st.one_of(
            st.just(str(len(body)).encode()),
            st.integers(-5, len(body)).map(lambda n: str(n).encode()),
            st.binary(max_size=6),
            st.none(),
        )
    )
    if length is not None and length.strip().isdigit() and int(length) > len(body):
        length = str(len(body)).encode()
    headers = b"Host: x\r\nConnection: close\r\n"
    if length is not None:
        headers += b"Content-Length: " + length.replace(b"\r", b"").replace(b"\n", b"") + b"\r\n"
    first = method.replace(b"\r", b"").replace(b"\n", b"") + b" " + path.replace(b"\r", b"").replace(b"\n", b"")
    return first + b" HTTP/1.1\r\n" + headers + b"\r\n" + body


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=_request())
def test_any_http_request_gets_an_answer_and_the_shuffler_stays_up(shuffler: tuple[Path, str], request: bytes) -> None:
    creds, address = shuffler
    answer = _send(creds, address, request)
    # http.server reads a two-word request line ("GET <path>", or a method with a byte Python counts
    # as a space) as HTTP/0.9: the reply then has no status line, only the JSON or HTML error body
    if answer.startswith(b"HTTP/"):
        status = int(answer.split(b" ", 2)[1])
    elif answer.startswith(b"{"):
        payload = json.loads(answer)
        status = 200 if "status" in payload else 400
        assert "error" in payload or "status" in payload, answer[:300]
    elif answer:
        found = re.search(rb"Error code: (\d+)", answer)
        assert found, answer[:300]
        status = int(found[1])
    else:  # a request the parser could not even frame may be closed without a reply
        status = 400
    assert status in (200, 400, 403, 404, 405, 409, 411, 413, 414, 431, 501, 505), answer[:300]
    health = _send(creds, address, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert health.startswith(b"HTTP/1.1 200") or health.startswith(b"HTTP/1.0 200")


def test_the_shuffler_takes_a_good_message_after_the_fuzzing(shuffler: tuple[Path, str]) -> None:
    creds, address = shuffler
    client = ShufflerClient(
        address, creds / "shuffler-ca.pem", creds / "silo-2-client.pem", creds / "silo-2-client.key", 5
    )
    assert client.send(2, SHUFFLED.digest, 1, np.full(SHUFFLED.width(), 2.0), patience=5) in ("accepted", "duplicate")
