"""Serving silos with ``sdp-amplification``: releases go through the deployment's shuffler party
(issue "Live decisions, part 2", item 2: "server, shuffler, secure aggregation as today").

In process: twelve serving silos behind their HTTP API (Lemma F.2 needs more than 11 silos), the
coordinator over the silos' sync API, and the deployment's transport-free shuffler core
(:class:`fedbandits.federation.shuffler.ShufflerCore`) standing in for the shuffler party.
"""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("cryptography")
from starlette.testclient import TestClient  # noqa: E402

from fedbandits.config import ConfigError  # noqa: E402
from fedbandits.federation.shuffler import SERVER_ROLE, ShufflerCore  # noqa: E402
from fedbandits.federation.shuffler_client import encode_array  # noqa: E402
from fedbandits.federation.spec import make_spec  # noqa: E402
from fedbandits.online import Aggregator  # noqa: E402
from fedbandits.online.setup import AgentSetup  # noqa: E402
from fedbandits.serve.coordinator import Coordinator  # noqa: E402
from fedbandits.serve.http import Service  # noqa: E402
from fedbandits.serve.links import HttpLink  # noqa: E402
from fedbandits.serve.shuffling import ServerShuffling, SiloShuffling  # noqa: E402
from fedbandits.serve.silo import ServeError, ServingSilo  # noqa: E402

M, DIM = 12, 4
TOKEN, SYNC = "traffic-token-0123456789", "sync-token-0123456789ab"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def config():
    # horizon 40, batch 10: K = 4 releases, one budget epoch
    return {
        "experiment": {"seed": 1, "horizon": 40},
        "environment": {"name": "gaussian-sphere", "agents": M, "arms": 5, "dim": DIM},
        "algorithms": [
            {"name": "fedlinucb", "batch": 10, "protocol": "sdp-amplification", "epsilon": 1.0, "delta": 1e-3}
        ],
    }


class InProcessShuffler:
    """The shuffler party's two calls (as ShufflerClient makes them), on a ShufflerCore; counts sends."""

    def __init__(self, core):
        self.core = core
        self.sends = 0

    def send(self, silo, digest, round_, psum, patience=30.0):
        self.sends += 1
        body = {"silo_id": silo, "digest": digest, "phase": "sync", "round": round_, "psum": encode_array(psum)}
        return self.core.submit(f"silo-{silo}", body)

    def close(self, digest, round_, width, patience=60.0):
        done = self.core.close(SERVER_ROLE, {"digest": digest, "round": round_})
        return done.batch, done.withheld, 0


class Router(httpx.BaseTransport):
    def __init__(self, clients):
        self.clients = clients

    def handle_request(self, request):
        return self.clients[request.url.host]._transport.handle_request(request)


def federation(tmp_path):
    cfg = config()
    spec = make_spec(AgentSetup.from_config(cfg, shuffler=True).config)
    party = InProcessShuffler(ShufflerCore(spec, tmp_path / "shuffler"))
    silos, clients = [], {}
    for i in range(M):
        silo = ServingSilo(cfg, tmp_path / f"silo-{i}", silo=i, shuffler=True)
        service = Service(silo, TOKEN, SYNC, shuffling=SiloShuffling(party, spec.digest, i))
        silos.append(silo)
        clients[f"silo{i}"] = TestClient(service.app)
    return cfg, party, silos, clients, coordinator_of(tmp_path, cfg, party, clients)


def coordinator_of(tmp_path, cfg, party, clients):
    """The coordinator (its state in ``tmp_path/server``) over the silos' sync API and the shuffler."""
    setup = AgentSetup.from_config(cfg, shuffler=True)
    link = HttpLink([f"http://silo{i}" for i in range(M)], SYNC, transport=Router(clients))
    shuffling = ServerShuffling(party, make_spec(setup.config).digest, setup.width, M)
    return Coordinator(cfg, link, tmp_path / "server", shuffling=shuffling)


def traffic(clients, rng, n):
    for c in clients.values():
        for _ in range(n):
            x = rng.standard_normal((5, DIM))
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            d = c.post("/v1/decisions", json={"features": x.tolist()}, headers=AUTH).json()
            r = {"decision_id": d["decision_id"], "reward": float(rng.uniform(-1, 1))}
            assert c.post("/v1/rewards", json=r, headers=AUTH).status_code == 200


def test_releases_reach_the_coordinator_only_as_the_shufflers_batch(tmp_path):
    cfg, party, silos, clients, coordinator = federation(tmp_path)
    rng = np.random.default_rng(21)
    for _ in range(2):
        traffic(clients, rng, 2)
        tick = coordinator.tick()
        assert tick.closed and tick.released == list(range(M))
    assert party.sends == 2 * M
    # the coordinator never held a silo's release: its payload rows are empty acknowledgements
    db = sqlite3.connect(tmp_path / "server" / "coordinator.sqlite")
    assert {bytes(p) for (p,) in db.execute("SELECT payload FROM payloads")} == {b""}
    assert db.execute("SELECT SUM(samples) FROM closed").fetchone()[0] == 2 * 2 * M
    # what it closed with is the shuffler's batch: the silos' releases as a multiset, in another order
    for r in range(2):
        batch = party.core.closed_round(r + 1).batch
        released = np.stack([s.store.release(0, r).payload for s in silos])
        assert sorted(map(tuple, batch)) == sorted(map(tuple, released))
    # and the prefix is the aggregator's over the releases (sums in another order: equal to rounding)
    agg = Aggregator(AgentSetup.from_config(cfg, shuffler=True))
    for r in range(2):
        expected = agg.aggregate([s.store.release(0, r).payload for s in silos])
    np.testing.assert_allclose(coordinator.latest()[2], expected, rtol=1e-12, atol=1e-12)
    assert {s.status()["model_version"] for s in silos} == {"0.1"}  # every silo adopted round 1's prefix
    # a retried release sends the stored bytes again: the shuffler knows them, nothing new is released
    again = clients["silo3"].post(
        "/v1/sync/release", json={"epoch": 0, "round": 0}, headers={"Authorization": f"Bearer {SYNC}"}
    )
    assert again.json() == {"shuffled": "included", "samples": 2}
    status = silos[0].status()
    assert status["protocol"] == "sdp-amplification" and status["epsilon_silo"] == pytest.approx(status["epsilon"])


def test_a_restarted_coordinator_replays_the_shuffled_rounds(tmp_path):
    cfg, party, _, clients, coordinator = federation(tmp_path)
    rng = np.random.default_rng(22)
    for _ in range(2):
        traffic(clients, rng, 1)
        coordinator.tick()
    prefix = coordinator.latest()[2].copy()
    coordinator.close()
    again = coordinator_of(tmp_path, cfg, party, clients)
    assert (again.epoch, again.round) == (0, 2)
    assert again.ledger.aggregator.analyzer.k == coordinator.ledger.aggregator.analyzer.k
    traffic(clients, rng, 1)
    assert again.tick().closed and not np.array_equal(again.latest()[2], prefix)


def test_sdp_amplification_is_refused_without_a_shuffler_or_with_renewed_epochs(tmp_path):
    cfg = config()
    with pytest.raises(ConfigError, match="needs a shuffler between the silos and the server"):
        ServingSilo(cfg, tmp_path / "a", silo=0)
    with pytest.raises(ConfigError, match="needs a shuffler"):
        AgentSetup.from_config(cfg)  # in process nothing would shuffle: the online agent refuses it too
    with pytest.raises(ServeError, match="one budget epoch"):
        ServingSilo(cfg, tmp_path / "b", silo=0, policy="renew", shuffler=True)
    ldp = {**cfg, "algorithms": [{**cfg["algorithms"][0], "protocol": "ldp"}]}
    with pytest.raises(ServeError, match="a shuffler is for protocol 'sdp-amplification'"):
        ServingSilo(ldp, tmp_path / "c", silo=0, shuffler=True)
    silo = ServingSilo(cfg, tmp_path / "d", silo=0, shuffler=True)
    with pytest.raises(ValueError, match="releases through the shuffler"):
        Service(silo, TOKEN, SYNC)  # a shuffled silo with no way to the shuffler
    with pytest.raises(ValueError, match="one budget epoch"):
        Coordinator.check(cfg, None, "renew", 10.0, shuffler=True)
    with pytest.raises(ConfigError, match="needs a shuffler"):
        Coordinator.check(cfg, None, "stop", 10.0)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists() and not (tmp_path / "c").exists()


def test_the_flower_serverapp_is_given_the_shuffler(tmp_path):
    from fedbandits.federation.certs import create_shuffler_credentials
    from fedbandits.federation.serving_deployment import ServeDeployment
    from fedbandits.federation.shuffler_client import ShufflerClient

    creds = create_shuffler_credentials(tmp_path / "hop", M)
    files = (creds / "shuffler-ca.pem", creds / "server-client.pem", creds / "server-client.key")
    spec = make_spec(AgentSetup.from_config(config(), shuffler=True).config)
    dep = ServeDeployment(
        tmp_path / "work", spec, certs=tmp_path / "certs", shuffler="127.0.0.1:9", shuffler_files=files
    )
    settings = dep.app_settings(tmp_path / "work" / "spec.json")
    assert settings["shuffler"] == "127.0.0.1:9"
    party = ShufflerClient.from_config(settings)  # what the ServerApp builds from its run config
    assert (party.host, party.port) == ("127.0.0.1", 9)
    missing = {p.name for p in dep.missing_credentials()}  # the Flower side's files; the hop's are there
    assert missing == {"ca.pem", "server.pem", "server.key", *(f"silo-{i}.pub" for i in range(M))}
