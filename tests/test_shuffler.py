"""The shuffler party of ``sdp-amplification`` in a deployment: logic, durable state, mutual TLS.

The logic tests need nothing but numpy; the transport tests start the HTTPS service in a thread on
127.0.0.1 with trial certificates (``cryptography``, part of the ``deploy`` extra) and stop it.
The real-process deployment with a shuffler is in ``tests/test_federation.py``.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

import numpy as np
import pytest

from fedbandits.config import loads_config
from fedbandits.federation.server import Incoming, validate_release
from fedbandits.federation.shuffler import (
    SERVER_ROLE,
    ShufflerClient,
    ShufflerCore,
    ShufflerError,
    encode_array,
)
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
    return core.close(SERVER_ROLE, {"digest": spec.digest, "round": k})


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
    core = ShufflerCore(_spec(), tmp_path, "os")
    assert core.state.rng is None and isinstance(core._sysrandom, random.SystemRandom)
    core._sysrandom = random.Random(12345)  # type: ignore[assignment]
    positions = np.zeros(M)
    for _ in range(4000):
        order = core._permutation(M)
        assert sorted(order) == list(range(M))
        positions[order.index(0)] += 1
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
@pytest.fixture
def service(tmp_path: Path):  # type: ignore[no-untyped-def]
    pytest.importorskip("cryptography")
    from fedbandits.federation.certs import create_trial_credentials
    from fedbandits.federation.launcher import free_port
    from fedbandits.federation.shuffler import serve

    spec = _spec()
    creds = create_trial_credentials(tmp_path / "creds", spec.silos)
    port = free_port()
    ready, stop = threading.Event(), threading.Event()
    args = (
        spec,
        tmp_path / "state",
        "127.0.0.1",
        port,
        creds / "ca.pem",
        creds / "shuffler.pem",
        creds / "shuffler.key",
    )
    thread = threading.Thread(target=serve, args=args, kwargs={"source": "derived", "ready": ready, "stop": stop})
    thread.start()
    assert ready.wait(30)
    try:
        yield spec, creds, f"127.0.0.1:{port}"
    finally:
        stop.set()
        thread.join(30)
        assert not thread.is_alive()


def _client(creds: Path, address: str, who: str) -> ShufflerClient:
    return ShufflerClient(address, creds / "ca.pem", creds / f"{who}-client.pem", creds / f"{who}-client.key", 5)


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

    anonymous = ssl.create_default_context(cafile=str(creds / "ca.pem"))
    host, port = address.split(":")
    conn = http.client.HTTPSConnection(host, int(port), context=anonymous, timeout=5)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        conn.request("GET", "/health")
        conn.getresponse().read()
    conn.close()
    batch, size = _client(creds, address, "server").close(spec.digest, 1, spec.width(), patience=5)
    assert size > batch.nbytes and sorted(map(tuple, batch)) == sorted(map(tuple, msgs))
    again, _ = _client(creds, address, "server").close(spec.digest, 1, spec.width(), patience=5)
    assert np.array_equal(again, batch)


def test_unreachable_shuffler_is_a_bounded_wait(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    import time

    from fedbandits.federation.certs import create_trial_credentials
    from fedbandits.federation.launcher import free_port

    spec = _spec()
    creds = create_trial_credentials(tmp_path, spec.silos)
    client = _client(creds, f"127.0.0.1:{free_port()}", "silo-0")
    start = time.time()
    with pytest.raises(ShufflerError, match="unreachable for 1 s") as err:
        client.send(0, spec.digest, 1, np.zeros(spec.width()), patience=1.0)
    assert err.value.status == 503 and time.time() - start < 10
