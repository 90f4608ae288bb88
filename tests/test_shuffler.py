"""The shuffler party of ``sdp-amplification`` in a deployment: logic, durable state, mutual TLS.

The logic tests need nothing but numpy; the transport tests start the HTTPS service in a thread on
127.0.0.1 with trial certificates (``cryptography``, part of the ``deploy`` extra) and stop it.
The real-process deployment with a shuffler is in ``tests/test_federation.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import threading
from pathlib import Path

import numpy as np
import pytest

from fedbandits.config import loads_config
from fedbandits.federation.server import Incoming, validate_release
from fedbandits.federation.shuffler import SERVER_ROLE, ShufflerCore, required_batch
from fedbandits.federation.shuffler_client import ShufflerClient, ShufflerError, encode_array, split_address
from fedbandits.federation.spec import make_spec
from fedbandits.protocols.gaussian_tree import ShuffledGaussianTreeProtocol
from fedbandits.registry import calibrate_protocol
from fedbandits.sim.seeding import noise_rngs

M = 4


def _spec(agents: int = M, protocol: str = "sdp-amplification"):  # type: ignore[no-untyped-def]
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
calibration = "paper"
epsilon = 5.0
delta = 0.01
""")
    )


def _body(spec, silo: int, k: int, x: np.ndarray) -> dict:  # type: ignore[no-untyped-def]
    return {"silo_id": silo, "digest": spec.digest, "phase": "sync", "round": k, "psum": encode_array(x)}


def _messages(spec, k: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    # distinct, recognisable rows: row i is silo i's message of round k
    return np.arange(spec.silos)[:, None] + 100.0 * k + np.linspace(0, 0.5, spec.width())[None]


def _close(core: ShufflerCore, spec, k: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    return core.close(SERVER_ROLE, {"digest": spec.digest, "round": k}).batch


def test_derived_permutations_are_the_simulators(tmp_path: Path) -> None:
    """With the derived source the shuffler permutes exactly as the simulator's protocol does
    (its shuffle stream of the run), so a parity trial sums the same numbers in the same order."""
    spec = _spec()
    cal = calibrate_protocol(spec.params, horizon=spec.horizon, agents=M, dim=spec.dim())
    protocol = ShuffledGaussianTreeProtocol(1, M, spec.dim(), cal, noise_rngs(spec.noise_seed, [0], 0))  # type: ignore[arg-type]
    core = ShufflerCore(spec, tmp_path, "derived")
    for k in range(1, spec.releases + 1):
        msgs = _messages(spec, k)
        for i in (2, 0, 3, 1):  # arrival order does not matter
            assert core.submit(f"silo-{i}", _body(spec, i, k, msgs[i])) == "accepted"
        perm = protocol.shuffle_rngs[0].permutation(M)
        assert np.array_equal(_close(core, spec, k), msgs[perm])


def test_os_permutations_are_uniform(tmp_path: Path) -> None:
    """The os source shuffles with the OS's CSPRNG (secret, unseedable); the same code path is
    tested with a seeded random.Random in its place.  Position of silo 0's message over N = 4000
    closes: uniform on M = 4 places, so the chi-square statistic (3 degrees of freedom) exceeds
    16.27 with probability 1e-3 only; a fixed order would give 12,000."""
    spec = _spec()
    core = ShufflerCore(spec, tmp_path, "os")
    assert core.state.rng is None and isinstance(core._sysrandom, random.SystemRandom)
    core._sysrandom = random.Random(12345)  # type: ignore[assignment]
    msgs = _messages(spec, 1)
    core.state.pending = {i: msgs[i] for i in range(M)}
    positions = np.zeros(M)
    for _ in range(4000):
        batch = core._shuffle(1, None).batch
        assert sorted(map(tuple, batch)) == sorted(map(tuple, msgs))
        positions[int(np.flatnonzero((batch == msgs[0]).all(axis=1))[0])] += 1
    expected = 4000 / M
    chi2 = float(((positions - expected) ** 2 / expected).sum())
    assert chi2 < 16.27, positions


@pytest.mark.parametrize(
    ("identity", "change", "reason"),
    [
        ("silo-1", {}, "may not send for silo 0"),
        ("server", {}, "may not send for silo 0"),
        ("silo-0", {"digest": "0" * 64}, "not this deployment's"),
        ("silo-0", {"phase": "finish"}, "phase"),
        ("silo-0", {"round": 2}, "not open"),
        ("silo-0", {"round": 0}, "round must be"),
        ("silo-0", {"round": True}, "round must be"),
        ("silo-0", {"silo_id": 9}, "silo_id must be"),
        ("silo-0", {"psum": "not base64!"}, "base64"),
        ("silo-0", {"psum": encode_array(np.zeros(3))}, "multiple of"),
        ("silo-0", {"psum": encode_array(np.zeros(18))}, "exactly 9"),
        ("silo-0", {"psum": encode_array(np.full(9, np.nan))}, "non-finite"),
    ],
)
def test_shuffler_rejects_bad_messages_and_keeps_state(
    tmp_path: Path, identity: str, change: dict, reason: str
) -> None:
    spec = _spec()
    core = ShufflerCore(spec, tmp_path, "derived")
    before = (core.state.closed, dict(core.state.pending))
    with pytest.raises(ShufflerError, match=reason):
        core.submit(identity, {**_body(spec, 0, 1, np.ones(spec.width())), **change})
    assert (core.state.closed, core.state.pending) == before and core.state.rejections == 1
    assert ShufflerCore(spec, tmp_path, "derived").state.pending == {}  # nothing persisted


def test_resends_closes_and_restarts(tmp_path: Path) -> None:
    spec = _spec()
    core = ShufflerCore(spec, tmp_path, "derived")
    msgs = _messages(spec, 1)
    assert core.submit("silo-0", _body(spec, 0, 1, msgs[0])) == "accepted"
    assert core.submit("silo-0", _body(spec, 0, 1, msgs[0])) == "duplicate"  # a resend after a lost answer
    with pytest.raises(ShufflerError, match="second, different message"):
        core.submit("silo-0", _body(spec, 0, 1, msgs[0] + 1))
    assert core.submit("silo-1", _body(spec, 1, 1, msgs[1])) == "accepted"
    # a crash here loses nothing acknowledged
    core = ShufflerCore(spec, tmp_path, "derived")
    assert sorted(core.state.pending) == [0, 1]
    with pytest.raises(ShufflerError, match="may not close"):
        core.close("silo-0", {"digest": spec.digest, "round": 1})
    with pytest.raises(ShufflerError, match="cannot close"):
        _close(core, spec, 2)
    batch = _close(core, spec, 1)
    assert sorted(map(tuple, batch)) == sorted(map(tuple, msgs[:2]))  # the multiset, nothing else
    # a closed round's batch is served again unchanged, also after a restart: never redrawn
    assert np.array_equal(_close(core, spec, 1), batch)
    restarted = ShufflerCore(spec, tmp_path, "derived")
    assert np.array_equal(_close(restarted, spec, 1), batch)
    assert restarted.state.pending == {} and restarted.state.closed == 1
    # after the close: an identical resend is recognised, a late or different one refused
    assert restarted.submit("silo-1", _body(spec, 1, 1, msgs[1])) == "included"
    with pytest.raises(ShufflerError, match="closed without this message"):
        restarted.submit("silo-2", _body(spec, 2, 1, msgs[2]))
    with pytest.raises(ShufflerError, match="closed without this message"):
        restarted.submit("silo-1", _body(spec, 1, 1, msgs[1] + 1))
    # an empty round closes to an empty batch
    assert _close(restarted, spec, 2).shape == (0, spec.width())


def test_shuffler_state_of_another_deployment_or_source_is_refused(tmp_path: Path) -> None:
    ShufflerCore(_spec(), tmp_path, "derived")
    with pytest.raises(ShufflerError, match="another deployment"):
        ShufflerCore(_spec(agents=5), tmp_path, "derived")
    with pytest.raises(ShufflerError, match="shuffle source"):
        ShufflerCore(_spec(), tmp_path, "os")
    with pytest.raises(ShufflerError, match="shuffle source must be"):
        ShufflerCore(_spec(), tmp_path / "x", "seeded")
    with pytest.raises(ShufflerError, match="has no shuffler"):
        ShufflerCore(_spec(protocol="ldp"), tmp_path / "y", "os")


def test_required_batch_follows_what_certifies_the_guarantee(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from fedbandits.federation.spec import DeploySpec

    spec = _spec()
    real = spec.calibration()
    for silo_eps, spent, need in [(5.0, 5.0, 1), (9.0, 5.0, M), (5.0, 5.0 * (1 - 1e-12), M)]:
        cal = replace(real, epsilon_silo=silo_eps, epsilon_spent=spent)
        monkeypatch.setattr(DeploySpec, "calibration", lambda self, cal=cal: cal)
        # amplification (spent below each silo's own guarantee) needs all M messages in a batch
        assert required_batch(spec) == need
    monkeypatch.setattr(DeploySpec, "calibration", lambda self: None)
    assert required_batch(spec) == 1


def test_a_round_with_too_few_messages_is_withheld(tmp_path: Path) -> None:
    """The server decides when a round closes; if the guarantee rests on amplification over M
    messages, a batch with fewer (at worst one: a silo's p-sum by its sender) is never released."""
    spec = _spec()
    core = ShufflerCore(spec, tmp_path, "derived")
    core.state.min_batch = M  # as required_batch gives when amplification certifies
    msgs = _messages(spec, 1)
    for i in range(M - 1):
        core.submit(f"silo-{i}", _body(spec, i, 1, msgs[i]))
    done = core.close(SERVER_ROLE, {"digest": spec.digest, "round": 1})
    assert done.withheld and done.batch.shape == (0, spec.width()) and done.senders == (0, 1, 2)
    restarted = ShufflerCore(spec, tmp_path, "derived")
    assert restarted.state.withheld == [1] and restarted.state.pending == {}
    assert _close(restarted, spec, 1).shape == (0, spec.width())  # the same answer again
    with pytest.raises(ShufflerError, match="closed without this message"):
        restarted.submit(f"silo-{M - 1}", _body(spec, M - 1, 1, msgs[M - 1]))  # too late
    assert restarted.submit("silo-0", _body(spec, 0, 1, msgs[0])) == "withheld"  # a resend learns it
    for i in range(M):  # a full round is released
        restarted.submit(f"silo-{i}", _body(spec, i, 2, msgs[i]))
    assert _close(restarted, spec, 2).shape == (M, spec.width())


def test_a_failed_write_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Disk full while accepting or closing: the answer is an error and neither memory nor disk
    moves, so a retry is a first attempt -- never a 'duplicate' of a message that was not kept,
    never a second permutation of a round."""
    import fedbandits.federation.shuffler as shuffler_module

    spec = _spec()
    core = ShufflerCore(spec, tmp_path, "os")
    msgs = _messages(spec, 1)
    real = shuffler_module.save_pickle

    def full(path: Path, obj: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shuffler_module, "save_pickle", full)
    with pytest.raises(OSError):
        core.submit("silo-0", _body(spec, 0, 1, msgs[0]))
    assert core.state.pending == {} and core.state.accepted == 0
    monkeypatch.setattr(shuffler_module, "save_pickle", real)
    assert core.submit("silo-0", _body(spec, 0, 1, msgs[0])) == "accepted"
    assert core.submit("silo-1", _body(spec, 1, 1, msgs[1])) == "accepted"

    # the close: its round file is written, then the state write fails (a crash at that point)
    calls = []

    def second_fails(path: Path, obj: object) -> None:
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(path, obj)

    monkeypatch.setattr(shuffler_module, "save_pickle", second_fails)
    with pytest.raises(OSError):
        _close(core, spec, 1)
    assert calls[0] == core.round_path(1) and core.state.closed == 0 and len(core.state.pending) == 2
    monkeypatch.setattr(shuffler_module, "save_pickle", real)
    restarted = ShufflerCore(spec, tmp_path, "os")
    assert restarted.state.closed == 0 and sorted(restarted.state.pending) == [0, 1]
    # the round is still open: a late message is accepted and is in the batch the close releases
    # (the round file of the failed close was never served; it is drawn anew)
    assert restarted.submit("silo-2", _body(spec, 2, 1, msgs[2])) == "accepted"
    batch = _close(restarted, spec, 1)
    assert sorted(map(tuple, batch)) == sorted(map(tuple, msgs[:3])) and restarted.state.closed == 1
    assert np.array_equal(_close(ShufflerCore(spec, tmp_path, "os"), spec, 1), batch)  # served again as is
    assert restarted.submit("silo-2", _body(spec, 2, 1, msgs[2])) == "included"


def test_derived_stream_survives_a_crash_between_round_file_and_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parity after a crash at the worst point: round 1's file written, the state not; the next
    rounds still get the simulator's permutations."""
    import fedbandits.federation.shuffler as shuffler_module

    spec = _spec()
    real = shuffler_module.save_pickle
    core = ShufflerCore(spec, tmp_path / "a", "derived")
    reference = ShufflerCore(spec, tmp_path / "b", "derived")
    calls: list[Path] = []

    def crash_after_round_file(path: Path, obj: object) -> None:
        calls.append(path)
        if len(calls) == 2:
            raise OSError("killed")
        real(path, obj)

    for k in (1, 2, 3):
        msgs = _messages(spec, k)
        for i in range(M):
            core.submit(f"silo-{i}", _body(spec, i, k, msgs[i]))
            reference.submit(f"silo-{i}", _body(spec, i, k, msgs[i]))
        if k == 1:
            monkeypatch.setattr(shuffler_module, "save_pickle", crash_after_round_file)
            with pytest.raises(OSError):
                _close(core, spec, 1)
            monkeypatch.setattr(shuffler_module, "save_pickle", real)
            core = ShufflerCore(spec, tmp_path / "a", "derived")  # restart
        assert np.array_equal(_close(core, spec, k), _close(reference, spec, k))


def test_stored_rounds_do_not_link_positions_to_senders(tmp_path: Path) -> None:
    spec = _spec()
    core = ShufflerCore(spec, tmp_path, "derived")
    msgs = _messages(spec, 1)
    for i in (3, 1, 0, 2):
        core.submit(f"silo-{i}", _body(spec, i, 1, msgs[i]))
    _close(core, spec, 1)
    done = core.closed_round(1)
    assert {f.name for f in dataclasses.fields(done)} == {"digest", "round", "batch", "senders", "hashes", "withheld"}
    assert done.senders == (0, 1, 2, 3) and list(done.hashes) == sorted(done.hashes)
    assert not np.array_equal(done.batch, msgs)  # this seed's permutation is not the identity
    state = ShufflerCore(spec, tmp_path, "derived").state
    assert state.pending == {}  # messages by sender are gone once the round is closed


def test_server_refuses_an_acknowledgement_that_carries_the_psum() -> None:
    """Under a shuffled protocol a payload next to the sender's identity would undo the shuffle."""
    spec = _spec()
    meta = {"silo_id": 0, "digest": spec.digest, "phase": "sync", "round": 1}
    kw = {"phase": "sync", "round_": 1, "registry": {7: 0}, "seen": set(), "width": spec.width()}
    ok = validate_release(spec, Incoming(7, meta, {}), **kw)  # type: ignore[arg-type]
    assert not isinstance(ok, str) and ok[0] == 0
    bad = validate_release(spec, Incoming(7, meta, {"psum": np.zeros(spec.width())}), **kw)  # type: ignore[arg-type]
    assert isinstance(bad, str) and "must carry no arrays" in bad


# ------------------------------------------------------------------ mutual TLS on loopback -----
@contextlib.contextmanager
def _serving(tmp_path: Path, host: str, port: int, source: str = "derived"):  # type: ignore[no-untyped-def]
    """A shuffler on ``host``:``port`` in a thread, with trial credentials; stopped on exit."""
    from fedbandits.federation.certs import create_trial_credentials
    from fedbandits.federation.shuffler import serve

    spec = _spec()
    creds = create_trial_credentials(tmp_path / "creds", spec.silos)
    ready, stop = threading.Event(), threading.Event()
    tls = (creds / "shuffler-ca.pem", creds / "shuffler.pem", creds / "shuffler.key")
    thread = threading.Thread(
        target=serve,
        args=(spec, tmp_path / "state", host, port, *tls),
        kwargs={"source": source, "ready": ready, "stop": stop},
    )
    thread.start()
    try:
        assert ready.wait(30)
        yield spec, creds
    finally:
        stop.set()
        thread.join(30)
        assert not thread.is_alive()


@pytest.fixture
def service(tmp_path: Path):  # type: ignore[no-untyped-def]
    pytest.importorskip("cryptography")
    from fedbandits.federation.processes import free_port

    port = free_port()
    with _serving(tmp_path, "127.0.0.1", port) as (spec, creds):
        yield spec, creds, f"127.0.0.1:{port}"


def _client(creds: Path, address: str, who: str) -> ShufflerClient:
    pem, key = creds / f"{who}-client.pem", creds / f"{who}-client.key"
    return ShufflerClient(address, creds / "shuffler-ca.pem", pem, key, 5)


def test_mutual_tls_identities_and_a_round(service) -> None:  # type: ignore[no-untyped-def]
    import ssl

    spec, creds, address = service
    msgs = _messages(spec, 1)
    for i in range(spec.silos):
        assert _client(creds, address, f"silo-{i}").send(i, spec.digest, 1, msgs[i], patience=5) == "accepted"
    # a silo cannot speak for another, nor close a round
    with pytest.raises(ShufflerError, match="may not send for silo 0") as err:
        _client(creds, address, "silo-1").send(0, spec.digest, 1, msgs[0], patience=5)
    assert err.value.status == 403
    with pytest.raises(ShufflerError, match="may not close"):
        _client(creds, address, "silo-0").close(spec.digest, 1, spec.width(), patience=5)
    # a client without a certificate of the CA does not get through the handshake
    import http.client

    anonymous = ssl.create_default_context(cafile=str(creds / "shuffler-ca.pem"))
    host, port = address.split(":")
    conn = http.client.HTTPSConnection(host, int(port), context=anonymous, timeout=5)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        conn.request("GET", "/health")
        conn.getresponse().read()
    conn.close()
    # the Flower CA's certificates (another operator's) are not the shuffler hop's: refused at once,
    # with the flags to check, not retried as if the shuffler were down
    import time

    flower = ShufflerClient(address, creds / "ca.pem", creds / "server.pem", creds / "server.key", 5)
    start = time.time()
    with pytest.raises(ShufflerError, match=r"refused.*--shuffler-ca") as err:
        flower.send(0, spec.digest, 1, msgs[0], patience=20)
    assert err.value.status == 495 and time.time() - start < 10
    batch, withheld, size = _client(creds, address, "server").close(spec.digest, 1, spec.width(), patience=5)
    assert not withheld and size > batch.nbytes and sorted(map(tuple, batch)) == sorted(map(tuple, msgs))
    again, _, _ = _client(creds, address, "server").close(spec.digest, 1, spec.width(), patience=5)
    assert np.array_equal(again, batch)


def _raw(creds: Path, address: str, request: bytes) -> tuple[int, bytes]:
    """Send ``request`` as is over mutual TLS (as silo 0); return the status and the body."""
    import socket

    from fedbandits.federation.shuffler_client import client_context

    ctx = client_context(creds / "shuffler-ca.pem", creds / "silo-0-client.pem", creds / "silo-0-client.key")
    host, port = split_address(address)
    with socket.create_connection((host, port), timeout=10) as raw, ctx.wrap_socket(raw, server_hostname=host) as tls:
        tls.sendall(request)
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def _post(path: bytes, body: bytes, length: bytes | None = None) -> bytes:
    header = b"" if length == b"" else b"Content-Length: " + (length or str(len(body)).encode()) + b"\r\n"
    return b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + header + b"\r\n" + body


@pytest.mark.parametrize(
    ("request_bytes", "status", "reason"),
    [
        (_post(b"/v1/message", b"hello"), 400, "not JSON"),
        (_post(b"/v1/message", b"", b""), 411, "Content-Length is required"),
        (_post(b"/v1/message", b"", b"99999999"), 413, "must be in"),
        (_post(b"/v1/message", b"", b"-1"), 413, "must be in"),
        (_post(b"/v1/other", b"{}"), 404, "no such path"),
        (_post(b"/v1/message", b"[1,2"), 400, "not JSON"),
        (_post(b"/v1/message", b"[]"), 400, "JSON object"),
        (_post(b"/v1/message", b"[" * 100_000 + b"]" * 100_000), 400, "nested too deeply"),
    ],
)
def test_http_boundary_answers_every_bad_request(service, request_bytes: bytes, status: int, reason: str) -> None:  # type: ignore[no-untyped-def]
    spec, creds, address = service
    got, body = _raw(creds, address, request_bytes)
    assert got == status and reason in body.decode()
    # nothing of it reached the state; a good message still goes through
    assert _client(creds, address, "silo-0").send(0, spec.digest, 1, np.ones(spec.width()), patience=5) == "accepted"


def test_http_boundary_does_not_echo_huge_values(service) -> None:  # type: ignore[no-untyped-def]
    _, creds, address = service
    got, body = _raw(creds, address, _post(b"/v1/message", json.dumps({"silo_id": "9" * 500_000}).encode()))
    assert got == 400 and len(body) < 300  # the value is shortened, not echoed


def test_round_files_of_another_deployment_are_refused(tmp_path: Path) -> None:
    spec = _spec()
    core = ShufflerCore(spec, tmp_path / "a", "derived")
    for i in range(M):
        core.submit(f"silo-{i}", _body(spec, i, 1, _messages(spec, 1)[i]))
    _close(core, spec, 1)
    other = ShufflerCore(_spec(agents=5), tmp_path / "b", "derived")
    other.round_path(1).write_bytes(core.round_path(1).read_bytes())  # a leftover of another run
    other.state.closed = 1
    with pytest.raises(ShufflerError, match="another deployment"):
        other.closed_round(1)


def test_serve_checks_tls_files_and_address_before_any_state(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    from fedbandits.federation.certs import create_trial_credentials
    from fedbandits.federation.processes import free_port
    from fedbandits.federation.shuffler import serve

    spec = _spec()
    creds = create_trial_credentials(tmp_path / "creds", spec.silos)
    state = tmp_path / "state"
    mismatched = (creds / "shuffler-ca.pem", creds / "shuffler.pem", creds / "server-client.key")
    with pytest.raises(ShufflerError, match="cannot use the TLS files"):
        serve(spec, state, "127.0.0.1", free_port(), *mismatched)
    tls = (creds / "shuffler-ca.pem", creds / "shuffler.pem", creds / "shuffler.key")
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:  # a port another process holds
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ShufflerError, match=r"cannot listen on 127\.0\.0\.1:\d+ \(--listen\)"):
            serve(spec, state, "127.0.0.1", taken.getsockname()[1], *tls)
    assert not state.exists()


def test_shuffler_listens_on_ipv6_loopback(tmp_path: Path) -> None:
    import socket

    pytest.importorskip("cryptography")
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
            port = probe.getsockname()[1]
    except OSError:
        pytest.skip("no IPv6 loopback on this host")
    with _serving(tmp_path, "::1", port, source="os") as (spec, creds):
        client = _client(creds, f"[::1]:{port}", "silo-0")  # the certificate lists ::1
        assert client.send(0, spec.digest, 1, np.ones(spec.width()), patience=5) == "accepted"


def test_addresses() -> None:
    assert split_address("shuffler.example.org:9095") == ("shuffler.example.org", 9095)
    assert split_address("[::1]:9095") == ("::1", 9095)
    for bad in ("::1:9095", "h", "h:0", "h:65536", ":9095", "[::1]"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            split_address(bad)


def test_unreachable_shuffler_is_a_bounded_wait(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    import time

    from fedbandits.federation.certs import create_trial_credentials
    from fedbandits.federation.processes import free_port

    spec = _spec()
    creds = create_trial_credentials(tmp_path, spec.silos)
    client = _client(creds, f"127.0.0.1:{free_port()}", "silo-0")
    start = time.time()
    with pytest.raises(ShufflerError, match="unreachable for 1 s") as err:
        client.send(0, spec.digest, 1, np.zeros(spec.width()), patience=1.0)
    assert err.value.status == 503 and time.time() - start < 10
