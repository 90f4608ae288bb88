"""`fedbandits serve` in process: the HTTP API, its refusals, the event log's replay, the sync rounds
and the budget policies (issue "Live decisions, part 2").  The process-level faults (kill -9 under
load) are in tests/test_serve_faults.py."""

from __future__ import annotations

import json
import math
import sqlite3
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx")

with warnings.catch_warnings():  # starlette 1.x notes that its test client may move off httpx one day
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from fedbandits.config import ConfigError  # noqa: E402
from fedbandits.crypto.double_masking import Advert, SignedRoster, advert_bytes  # noqa: E402
from fedbandits.crypto.secure_aggregation import keypair  # noqa: E402
from fedbandits.federation.certs import trial_signing  # noqa: E402
from fedbandits.online import Aggregator  # noqa: E402
from fedbandits.serve import masking  # noqa: E402
from fedbandits.serve.coordinator import Coordinator  # noqa: E402
from fedbandits.serve.http import MAX_BODY, Service  # noqa: E402
from fedbandits.serve.links import HttpLink  # noqa: E402
from fedbandits.serve.silo import ServeError, ServingSilo  # noqa: E402
from fedbandits.serve.store import Store, StoreError  # noqa: E402
from servehelp import AUTH, DIM, LDP, SYNC, SYNC_AUTH, TOKEN, WallClock, arms, config  # noqa: E402


def make(tmp_path, name="silo", silo=0, cfg=None, **kw):
    s = ServingSilo(cfg or config(), tmp_path / name, silo=silo, **kw)
    return s, TestClient(Service(s, TOKEN, SYNC).app)


def events(silo):
    return silo.store.db.execute("SELECT COUNT(*) FROM events").fetchone()[0]


def test_decide_then_reward_over_http(tmp_path):
    _, client = make(tmp_path)
    rng = np.random.default_rng(0)
    r = client.post("/v1/decisions", json={"features": arms(rng), "context_id": "user-7"}, headers=AUTH)
    assert r.status_code == 200, r.text
    got = r.json()
    assert 0 <= got["arm"] < 5 and got["model_version"] is None
    assert client.post("/v1/rewards", json={"decision_id": got["decision_id"], "reward": 0.5}, headers=AUTH).json() == {
        "status": "learned"
    }
    status = client.get("/v1/status", headers=AUTH).json()
    assert (status["decisions"], status["rewarded"], status["pending"]) == (1, 1, 0)
    assert status["batch_samples"] == 1 and status["epsilon_spent"] == 0.0 and status["releases_left"] == 4
    assert status["latency_ms"]["decisions"]["p50"] > 0
    metrics = client.get("/metrics", headers=AUTH).text
    assert "fedbandits_decisions 1.0" in metrics and 'fedbandits_request_seconds_count{route="decisions"} 1' in metrics
    assert client.get("/healthz").text == "ok\n"


def test_bad_requests_get_one_line_4xx_and_store_nothing(tmp_path):
    silo, client = make(tmp_path)
    rng = np.random.default_rng(1)
    first = client.post("/v1/decisions", json={"features": arms(rng)}, headers=AUTH).json()["decision_id"]
    client.post("/v1/rewards", json={"decision_id": first, "reward": 0.2}, headers=AUTH)
    before = (events(silo), silo.agent.state_digest())
    good = arms(rng)
    cases = [
        ("/v1/decisions", b"{not json", AUTH, 400, "body: not JSON"),
        ("/v1/decisions", json.dumps({"features": good}).encode(), {}, 401, "authorization"),
        ("/v1/decisions", json.dumps({"features": good}).encode(), {"Authorization": f"Bearer {SYNC}"}, 401, "author"),
        ("/v1/decisions", json.dumps([1, 2]).encode(), AUTH, 400, "body: must be a JSON object"),
        ("/v1/decisions", json.dumps({"features": good, "x": 1}).encode(), AUTH, 400, "unknown field(s) ['x']"),
        ("/v1/decisions", json.dumps({"features": [[1.0, 2.0]]}).encode(), AUTH, 422, "features"),
        ("/v1/decisions", json.dumps({"features": [[1.0] * DIM, [1.0]]}).encode(), AUTH, 400, "ragged"),
        ("/v1/decisions", json.dumps({"features": []}).encode(), AUTH, 400, "features: must be a list"),
        ("/v1/decisions", b'{"features": [[NaN, 0, 0, 0]]}', AUTH, 400, "body: not JSON"),  # strict JSON
        ("/v1/decisions", b'{"features": [[1e999, 0, 0, 0]]}', AUTH, 400, "body: not JSON"),  # infinity
        ("/v1/decisions", json.dumps({"features": good, "context_id": 5}).encode(), AUTH, 400, "context_id"),
        ("/v1/decisions", json.dumps({"features": good, "context_id": "a\0b"}).encode(), AUTH, 400, "without NUL"),
        ("/v1/decisions", b"[" + b"0," * MAX_BODY + b"0]", AUTH, 413, "larger than"),
        ("/v1/rewards", json.dumps({"decision_id": "nope-1", "reward": 1}).encode(), AUTH, 404, "unknown"),
        ("/v1/rewards", json.dumps({"decision_id": first, "reward": 1}).encode(), AUTH, 409, "already rewarded"),
        ("/v1/rewards", b'{"decision_id": "a", "reward": 1e999}', AUTH, 400, "body: not JSON"),
        ("/v1/rewards", json.dumps({"decision_id": first, "reward": "1"}).encode(), AUTH, 422, "reward"),
        ("/v1/rewards", json.dumps({"rewards": [{"decision_id": first}]}).encode(), AUTH, 400, "missing field(s)"),
        ("/v1/rewards", json.dumps({"rewards": []}).encode(), AUTH, 400, "rewards: must be a list"),
        ("/v1/sync/release", json.dumps({"epoch": 0, "round": 0}).encode(), AUTH, 401, "authorization"),
    ]
    for path, body, headers, status, words in cases:
        r = client.post(path, content=body, headers={"Content-Type": "application/json", **headers})
        assert r.status_code == status, (path, body[:60], r.text)
        message = r.json()["error"]
        assert words in message and "\n" not in message, (words, message)
    # a reward outside the private bound [-B, B] is refused, not clipped (the agent's default)
    pending = client.post("/v1/decisions", json={"features": good}, headers=AUTH).json()["decision_id"]
    before = (events(silo), silo.agent.state_digest())
    r = client.post("/v1/rewards", json={"decision_id": pending, "reward": 5.0}, headers=AUTH)
    assert r.status_code == 422 and r.json()["error"].startswith("reward must be in ["), r.text
    assert (events(silo), silo.agent.state_digest()) == before
    assert client.get("/healthz").status_code == 200
    assert client.get("/v1/status", headers=AUTH).json()["refused"]["401"] == 3


def test_a_batch_of_rewards_answers_each_item(tmp_path):
    silo, client = make(tmp_path)
    rng = np.random.default_rng(2)
    ids = [client.post("/v1/decisions", json={"features": arms(rng)}, headers=AUTH).json()["decision_id"] for _ in "ab"]
    batch = [
        {"decision_id": ids[0], "reward": 0.1},
        {"decision_id": ids[0], "reward": 0.1},
        {"decision_id": "other-3", "reward": 0.1},
        {"decision_id": ids[1], "reward": -0.4},
    ]
    got = client.post("/v1/rewards", json={"rewards": batch}, headers=AUTH).json()["results"]
    assert [g["status"] for g in got] == [200, 409, 404, 200]
    assert silo.agent.counts["rewarded"] == 2


def test_a_restart_replays_the_log_to_the_same_agent(tmp_path):
    clock = WallClock()
    silo, client = make(tmp_path, now=clock, expiry_seconds=100.0)
    rng = np.random.default_rng(3)
    ids = []
    for i in range(30):
        clock.t += 1.0
        ids.append(client.post("/v1/decisions", json={"features": arms(rng)}, headers=AUTH).json()["decision_id"])
        if i % 3 == 0:
            client.post("/v1/rewards", json={"decision_id": ids[-1], "reward": 0.3}, headers=AUTH)
    sync = {"Authorization": f"Bearer {SYNC}"}
    assert client.post("/v1/sync/release", json={"epoch": 0, "round": 0}, headers=sync).status_code == 200
    clock.t += 80.0  # decisions 0 to 9 expire (made at t0 + 1 to 10, expiry 100 s, now t0 + 110)
    late = client.post("/v1/rewards", json={"decision_id": ids[1], "reward": 0.3}, headers=AUTH)
    assert late.status_code == 410 and "expired" in late.json()["error"]
    assert client.post("/v1/rewards", json={"decision_id": ids[29], "reward": 0.9}, headers=AUTH).status_code == 200
    digest, status = silo.agent.state_digest(), silo.status()
    # a second process opens the same folder (what a restart after kill -9 sees: committed rows only)
    again = ServingSilo(config(), tmp_path / "silo", silo=0, now=clock, expiry_seconds=100.0)
    assert again.replayed == 2  # the late reward and the last reward, after the release's snapshot
    assert again.agent.state_digest() == digest
    for key in ("decisions", "rewarded", "expired", "late_rewards", "pending", "batch_samples", "syncs"):
        assert again.status()[key] == status[key], key
    assert status["late_rewards"] == 1 and status["batch_samples"] == 1
    # the retried round gets the stored bytes: the noise is not redrawn
    first = silo.release(0, 0)[0]
    assert np.array_equal(again.release(0, 0)[0], first)


def test_a_clock_that_jumps_back_or_ahead_loses_nothing_and_learns_nothing_late(tmp_path):
    clock = WallClock()
    silo, client = make(tmp_path, now=clock, expiry_seconds=60.0)
    rng = np.random.default_rng(9)
    post = lambda: client.post("/v1/decisions", json={"features": arms(rng)}, headers=AUTH).json()["decision_id"]  # noqa: E731
    first = [post() for _ in range(3)]
    clock.t -= 3600.0  # an hour back: later decisions get earlier deadlines than the first ones
    second = [post() for _ in range(3)]
    for d in first[:2] + second[:2]:
        assert client.post("/v1/rewards", json={"decision_id": d, "reward": 0.1}, headers=AUTH).status_code == 200
    clock.t += 7200.0  # then far ahead: the unanswered ones expire, and a reward for one is counted, not learned
    late = client.post("/v1/rewards", json={"decision_id": second[2], "reward": 0.1}, headers=AUTH)
    assert late.status_code == 410
    status = silo.status()
    assert (status["rewarded"], status["expired"], status["late_rewards"], status["pending"]) == (4, 2, 1, 0)
    digest = silo.agent.state_digest()
    again = ServingSilo(config(), tmp_path / "silo", now=clock, expiry_seconds=60.0)
    assert again.agent.state_digest() == digest


def test_a_log_of_another_silo_or_config_is_refused(tmp_path):
    make(tmp_path)
    with pytest.raises(StoreError, match="belongs to another config, entry or silo"):
        ServingSilo(config(), tmp_path / "silo", silo=1)
    with pytest.raises(ConfigError, match="an agent synchronises through 'none', 'ldp', 'distributed-dp'"):
        ServingSilo(config({**LDP, "protocol": "ldp-prefix"}), tmp_path / "d")
    with pytest.raises(ServeError, match="--allow-unprivatized"):
        ServingSilo(config({"name": "fedlinucb", "batch": 10, "protocol": "none"}), tmp_path / "n")


class Router(httpx.BaseTransport):
    """Routes the coordinator's requests to in-process silos by host; a host in ``down`` refuses."""

    def __init__(self, clients):
        self.clients = clients
        self.down = set()

    def handle_request(self, request):
        host = request.url.host
        if host in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        return self.clients[host]._transport.handle_request(request)


def signing(tmp_path, silos=3):
    """Trial signing identities (distributed-dp), one per silo, made once in ``tmp_path/signing``."""
    return trial_signing(tmp_path / "signing", silos)


def federation(tmp_path, policy="stop", cfg=None, allow=False):
    cfg = cfg or config()
    masked = cfg["algorithms"][0].get("protocol") == "distributed-dp"
    ids = signing(tmp_path) if masked else [None] * 3
    silos, clients = [], {}
    for i in range(3):
        s, c = make(tmp_path, f"silo-{i}", silo=i, cfg=cfg, policy=policy, allow_unprivatized=allow, signing=ids[i])
        silos.append(s)
        clients[f"silo{i}"] = c
    router = Router(clients)
    urls = [f"http://silo{i}" for i in range(3)]
    coordinator = Coordinator(cfg, HttpLink(urls, SYNC, transport=router), tmp_path / "server", policy=policy)
    return silos, clients, router, coordinator


def traffic(clients, rng, n):
    """n users per silo, each rewarded at once with a reward in [-1, 1]; the number learned."""
    learned = 0
    for c in clients.values():
        for _ in range(n):
            d = c.post("/v1/decisions", json={"features": arms(rng)}, headers=AUTH).json()
            c.post(
                "/v1/rewards", json={"decision_id": d["decision_id"], "reward": float(rng.uniform(-1, 1))}, headers=AUTH
            )
            learned += 1
    return learned


def test_sync_rounds_give_every_silo_the_aggregators_prefix(tmp_path):
    cfg = config({"name": "fedlinucb", "batch": 10, "protocol": "none"})
    silos, clients, router, coordinator = federation(tmp_path, cfg=cfg, allow=True)
    rng = np.random.default_rng(4)
    traffic(clients, rng, 5)
    router.down = {"silo2"}
    tick = coordinator.tick()  # silo 2 is down: the round stays open, the others' releases are kept
    assert (tick.released, tick.unreachable, tick.closed) == ([0, 1], [2], False)
    traffic(clients, rng, 4)  # silo 0 and 1's new rewards wait for round 1; silo 2's go into its round 0
    router.down = set()
    tick = coordinator.tick()
    assert (tick.released, tick.closed, tick.delivered) == ([2], True, [0, 1, 2])
    assert [s.status()["model_version"] for s in silos] == ["0.0"] * 3
    assert coordinator.latest()[0:2] == (0, 0)
    # the exact sum of what was released: 5 + 5 + 9 samples
    assert coordinator.db.execute("SELECT samples FROM closed").fetchone()[0] == 19
    coordinator.tick()
    prefix = coordinator.latest()[2]
    # the prefix is the aggregator's over the stored payloads, and every reward is in exactly one release
    replay = Aggregator.from_config(cfg)
    for r in range(2):
        out = replay.aggregate([silos[i].store.release(0, r).payload for i in range(3)])
    assert np.allclose(prefix, out)
    assert sum(s.store.count("reward", released=True) for s in silos) == 27
    assert sum(r["samples"] for s in silos for r in s.store.releases()) == 27
    for s in silos:
        np.testing.assert_allclose(s.agent.synced_bias[0], prefix[-DIM:])


class Bundling(HttpLink):
    """The HTTP link as a costly one (Flower's): the coordinator must send one exchange per tick."""

    bundles = True

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.calls = []

    def exchange(self, requests):
        self.calls.append({silo: [path for path, _ in asks] for silo, asks in requests.items()})
        return super().exchange(requests)


def test_a_bundling_link_carries_the_closed_prefix_with_the_next_release_request(tmp_path):
    cfg = config()
    silos, clients, router, _ = federation(tmp_path, cfg=cfg)
    link = Bundling([f"http://silo{i}" for i in range(3)], SYNC, transport=router)
    coordinator = Coordinator(cfg, link, tmp_path / "bundled")
    rng = np.random.default_rng(11)
    traffic(clients, rng, 2)
    tick = coordinator.tick()  # round 0 closes; its prefix waits for the next tick's message
    assert (tick.closed, tick.delivered) == (True, []) and len(link.calls) == 1
    assert link.calls[0] == {i: ["/v1/sync/release"] for i in range(3)}
    assert [s.status()["model_version"] for s in silos] == [None] * 3
    traffic(clients, rng, 2)
    tick = coordinator.tick()  # one message per silo: the prefix of round 0, then the release of round 1
    assert len(link.calls) == 2 and link.calls[1] == {i: ["/v1/sync/prefix", "/v1/sync/release"] for i in range(3)}
    assert (tick.released, tick.closed, tick.delivered) == ([0, 1, 2], True, [0, 1, 2])
    assert [s.status()["model_version"] for s in silos] == ["0.0"] * 3
    router.down = {"silo1"}  # a silo that misses a tick gets the newest prefix with its next request
    tick = coordinator.tick()
    assert (tick.delivered, tick.unreachable, tick.closed) == ([0, 2], [1], False)
    router.down = set()
    tick = coordinator.tick()
    assert link.calls[-1] == {1: ["/v1/sync/prefix", "/v1/sync/release"]}
    assert (tick.delivered, tick.released, tick.closed) == ([1], [1], True)
    assert [s.status()["model_version"] for s in silos] == ["0.1"] * 3


def test_a_silo_syncing_through_its_supernode_answers_sync_requests_from_loopback_only(tmp_path):
    silo, _ = make(tmp_path)
    app = Service(silo, TOKEN, SYNC, sync_from_loopback=True).app
    sync = {"Authorization": f"Bearer {SYNC}"}
    remote = TestClient(app, client=("10.0.0.9", 40000))
    r = remote.post("/v1/sync/release", json={"epoch": 0, "round": 0}, headers=sync)
    assert r.status_code == 403 and "loopback" in r.json()["error"]
    assert remote.get("/v1/status", headers=AUTH).status_code == 200  # its users' routes are not affected
    assert not silo.store.releases()  # nothing was released to the remote caller
    local = TestClient(app, client=("127.0.0.1", 40000))
    assert local.post("/v1/sync/release", json={"epoch": 0, "round": 0}, headers=sync).status_code == 200


def test_a_tick_that_overruns_the_schedule_skips_the_ticks_it_missed(tmp_path, monkeypatch):
    import fedbandits.serve.coordinator as module

    class Clock:  # the coordinator's time, advanced only by the slow link and by waiting
        t = 1000.0

    clock = Clock()
    monkeypatch.setattr(module, "time", SimpleNamespace(time=lambda: clock.t, monotonic=lambda: clock.t))

    class SlowLink:  # no silo answers; the first exchange takes 5 ticks' time
        silos, bundles, starts = 3, False, []

        def exchange(self, requests):
            if any(requests.values()):
                self.starts.append(clock.t)
                clock.t += 0.5 if len(self.starts) == 1 else 0.001
            return {silo: [None] * len(asks) for silo, asks in requests.items()}

        def close(self):
            pass

    class Waiting:  # the stop event: waiting moves the clock
        def is_set(self):
            return False

        def wait(self, seconds):
            clock.t += seconds

    link = SlowLink()
    coordinator = Coordinator(config(), link, tmp_path / "server", sync_seconds=0.1)
    coordinator.stopped = Waiting()
    coordinator.run(until=1000.95)
    # ticks on the schedule 1000 + 0.1 k: k = 0 ran 0.5 s, so k = 1..4 are skipped (the old loop ran
    # them late, back to back at 0.5, 0.501, ...) and the next ones are k = 5, 6, 7, 8, 9 on time
    assert [round(t - 1000, 3) for t in link.starts] == [0.0, 0.5, 0.6, 0.7, 0.8, 0.9]


def test_a_restarted_coordinator_resumes_its_round_and_tree(tmp_path):
    _, clients, router, coordinator = federation(tmp_path)
    rng = np.random.default_rng(5)
    for _ in range(2):
        traffic(clients, rng, 3)
        coordinator.tick()
    prefix = coordinator.latest()[2].copy()
    coordinator.close()
    urls = [f"http://silo{i}" for i in range(3)]
    again = Coordinator(config(), HttpLink(urls, SYNC, transport=router), tmp_path / "server")
    assert (again.epoch, again.round) == (0, 2)
    assert again.ledger.aggregator.analyzer.k == coordinator.ledger.aggregator.analyzer.k
    traffic(clients, rng, 3)
    assert again.tick().closed and again.latest()[1] == 2
    assert not np.array_equal(again.latest()[2], prefix)


@pytest.mark.parametrize("policy", ["stop", "renew"])
def test_the_budget_policy_when_the_epochs_releases_are_made(tmp_path, policy):
    silos, clients, _, coordinator = federation(tmp_path, policy=policy)
    rng = np.random.default_rng(6)
    for _ in range(4):  # K = 4 releases: the epoch's budget
        traffic(clients, rng, 2)
        assert coordinator.tick().closed
    status = silos[0].status()
    per_epoch = status["epsilon_spent"]
    assert 0 < per_epoch <= 1.0 and status["releases_left"] == 0 and status["epsilon_lifetime"] == per_epoch
    traffic(clients, rng, 2)
    tick = coordinator.tick()
    if policy == "stop":
        assert coordinator.finished and not tick.released and not tick.closed
        assert silos[0].status()["syncing"].startswith("stopped: budget spent")
        with pytest.raises(ServeError, match="budget spent"):
            silos[0].release(1, 0)
        # the silos keep serving from the last prefix
        r = clients["silo0"].post("/v1/decisions", json={"features": arms(rng)}, headers=AUTH)
        assert r.status_code == 200 and r.json()["model_version"] == "0.3"
        assert silos[0].status()["epsilon_lifetime"] == per_epoch  # never a silent overspend
    else:
        assert tick.closed and (tick.epoch, tick.round) == (1, 0)
        status = silos[0].status()
        assert status["epoch"] == 1 and status["releases_left"] == 3
        assert math.isclose(status["epsilon_lifetime"], 2 * per_epoch)
        assert status["model_version"] == "1.0"
        # the new epoch's prefix adds to the old one: the 4-round tree's final prefix is its base
        assert not np.allclose(coordinator.ledger.base, 0)


def test_distributed_dp_rounds_go_through_secure_aggregation(tmp_path):
    cfg = config({**LDP, "protocol": "distributed-dp"})
    silos, clients, router, coordinator = federation(tmp_path, cfg=cfg)
    raw: dict[int, list[np.ndarray]] = {i: [] for i in range(3)}
    for i, silo in enumerate(silos):  # keep each silo's unmasked residues, as its agent releases them

        def spy(original=silo.agent.sync_payload, i=i):
            payload = original()
            raw[i].append(payload.copy())
            return payload

        silo.agent.sync_payload = spy
    with pytest.raises(ServeError, match="secure aggregation is not set up yet"):
        silos[0].release(0, 0)
    assert not raw[0]  # refused before anything was released
    rng = np.random.default_rng(8)
    router.down = {"silo1"}
    tick = coordinator.tick()  # the set-up waits for silo 1's keys; no round is asked for
    assert (tick.released, tick.unreachable, tick.closed) == ([], [1], False)
    assert coordinator.status()["secure_aggregation"] == "setting up"
    router.down = set()
    for _ in range(2):
        traffic(clients, rng, 3)
        assert coordinator.tick().closed
    assert coordinator.status()["secure_aggregation"] == "set up"
    # the coordinator never held a silo's residues: every stored release is masked
    for i, silo in enumerate(silos):
        for r in range(2):
            assert not np.array_equal(silo.store.release(0, r).payload, raw[i][r])
    # and yet the prefix is the aggregator's over the unmasked residues, bit for bit (the unmask step
    # removes the masks)
    replay = Aggregator.from_config(cfg)
    for r in range(2):
        out = replay.aggregate([raw[i][r] for i in range(3)])
    np.testing.assert_array_equal(coordinator.latest()[2], out)
    # a restarted silo has its secure-aggregation state back from its log: keys, roster, the rounds
    # it masked and the unmask answers it gave
    again = ServingSilo(cfg, tmp_path / "silo-0", silo=0, signing=signing(tmp_path)[0])
    assert again.secagg is not None and again.secagg.s_private == silos[0].secagg.s_private
    assert again.secagg.roster == silos[0].secagg.roster and len(again.secagg.answered) == 2
    assert masking.silo_state_to_text(again.secagg) == masking.silo_state_to_text(silos[0].secagg)


def test_a_roster_with_a_substituted_or_unsigned_key_is_refused(tmp_path):
    """A coordinator that puts keys of its own in the roster (to share every pairwise seed with a
    silo) is refused: each entry must be signed under a certificate the signing CA issued to that
    silo, for this set-up (issue #32)."""
    cfg = config({**LDP, "protocol": "distributed-dp"})
    silos, clients, _, _ = federation(tmp_path, cfg=cfg)
    adverts = {}
    for i, c in clients.items():
        got = c.post("/v1/sync/keys", json={"secagg_epoch": 1}, headers=SYNC_AUTH).json()
        adverts[int(i[-1])] = Advert(*(masking.unb64(got[k], k) for k in ("c_public", "s_public", "cert", "signature")))
    context = silos[0].context
    good = SignedRoster.of(context, 1, 2, adverts)
    c_fake, s_fake = keypair()[1], keypair()[1]
    forged = {**adverts, 1: Advert(c_fake, s_fake, adverts[1].cert, adverts[1].signature)}
    own_ca = signing(tmp_path / "other")[1][0]  # a CA of the coordinator's own, a certificate for "silo-1"
    own = Advert(c_fake, s_fake, own_ca.cert, own_ca.sign(advert_bytes(context, 1, 1, c_fake, s_fake)))
    for roster, reason in [
        (SignedRoster.of(context, 1, 2, forged), "silo 1: the signature does not verify"),
        (SignedRoster.of(context, 1, 2, {**adverts, 1: own}), "not issued by the pinned signing CA"),
        (SignedRoster.of(b"x" * 32, 1, 2, adverts), "another federation"),
    ]:
        r = clients["silo0"].post("/v1/sync/roster", json={"roster": masking.roster_to_json(roster)}, headers=SYNC_AUTH)
        assert r.status_code == 422 and reason in r.json()["error"], r.text
        assert silos[0].secagg.roster is None  # nothing taken
    r = clients["silo0"].post("/v1/sync/roster", json={"roster": masking.roster_to_json(good)}, headers=SYNC_AUTH)
    assert r.status_code == 200 and r.json() == {"joined": 1} and silos[0].secagg.roster == good


def test_a_silo_says_when_the_server_is_unreachable(tmp_path):
    clock = WallClock()
    silo = ServingSilo(config(), tmp_path / "s", now=clock)
    assert silo.status(sync_seconds=10.0)["syncing"] == "active"
    clock.t += 31.0  # no sync request for more than 3 rounds
    assert silo.status(sync_seconds=10.0)["syncing"].startswith("server unreachable")
    silo.release(0, 0)
    assert silo.status(sync_seconds=10.0)["syncing"] == "active"


def test_the_command_line_refuses_unsafe_or_bad_settings_in_one_line(tmp_path, capsys):
    from fedbandits.cli import main
    from fedbandits.serve.demo import DEMO_CONFIG

    good, other, short = tmp_path / "t1", tmp_path / "t2", tmp_path / "t3"
    good.write_text("a" * 24)
    other.write_text("b" * 24)
    short.write_text("c" * 8)
    # the demo's config with its federated entry under ldp (the demo runs distributed-dp: below)
    ldp = tmp_path / "ldp.toml"
    ldp.write_text(DEMO_CONFIG.read_text().replace('protocol = "distributed-dp"', 'protocol = "ldp"'))
    base = ["serve", "silo", str(ldp), "--state-dir", str(tmp_path / "state")]
    cases = [
        (["--token-file", str(good), "--sync-token-file", str(other), "--host", "0.0.0.0"], "needs --tls-cert"),
        (["--token-file", str(short), "--sync-token-file", str(other)], "at least 16 characters"),
        (["--token-file", str(good), "--sync-token-file", str(good)], "different tokens"),
        (["--token-file", str(tmp_path / "none"), "--sync-token-file", str(other)], "cannot read"),
        (
            ["--token-file", str(good), "--sync-token-file", str(other), "--silo", "20"],
            "silo must be an integer in [0, 20)",
        ),
        (
            ["--token-file", str(good), "--sync-token-file", str(other), "--node-key", str(good)],
            "goes with --superlink",
        ),
        (["--token-file", str(good), "--sync-token-file", str(other), "--superlink", "host"], "must be HOST:PORT"),
        (
            ["--token-file", str(good), "--sync-token-file", str(other), "--shuffler-ca", str(good)],
            "goes with --shuffler",
        ),
        (
            ["--token-file", str(good), "--sync-token-file", str(other), "--shuffler", "127.0.0.1:9"],
            "--shuffler needs --shuffler-ca",
        ),
        (
            [
                *["--token-file", str(good), "--sync-token-file", str(other), "--superlink", "127.0.0.1:9"],
                *["--superlink-ca", str(good), "--node-key", str(good), "--host", "silo.example", "--insecure-http"],
            ],
            "with --superlink, an IP address",
        ),
        (
            ["--token-file", str(good), "--sync-token-file", str(other), "--superlink", "127.0.0.1:9"],
            "--superlink needs --superlink-ca",
        ),
        (
            [
                "--token-file",
                str(good),
                "--sync-token-file",
                str(other),
                "--superlink",
                "127.0.0.1:9",
                "--superlink-ca",
                str(good),
                "--node-key",
                str(tmp_path / "no-key"),
            ],
            "--node-key: no such file",
        ),
        (
            ["--token-file", str(good), "--sync-token-file", str(other), "--signing-key", str(good)],
            "--signing-key is only for protocol 'distributed-dp'",
        ),
    ]
    for extra, words in cases:
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("fedbandits: error: ") and words in err and "\n" not in err, err
    # distributed-dp: the signing identity is required, and must be the CA's certificate for this silo
    ddp = DEMO_CONFIG
    ids = signing(tmp_path, 2)
    folder = tmp_path / "signing"
    files = ["--signing-cert", str(folder / "silo-1-signing.pem"), "--signing-ca", str(folder / "signing-ca.pem")]
    tokens = ["--token-file", str(good), "--sync-token-file", str(other), "--entry", "fed"]
    base = ["serve", "silo", str(ddp), "--state-dir", str(tmp_path / "state"), *tokens]
    for extra, words in [
        ([], "--signing-key is required with protocol 'distributed-dp'"),
        (["--signing-key", str(folder / "silo-1-signing.key"), *files], "issued to ['silo-1'], not 'silo-0'"),
        (["--signing-key", str(folder / "silo-0-signing.key"), *files], "does not certify the key"),
    ]:
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("fedbandits: error: ") and words in err and "\n" not in err, err
    assert ids and not (tmp_path / "state").exists()  # nothing was created for a refused start
    server = [
        "serve",
        "server",
        str(DEMO_CONFIG),
        "--entry",
        "fed",
        "--state-dir",
        str(tmp_path / "srv"),
        "--sync-token-file",
        str(good),
    ]
    urls = ["--silo-url", "http://10.1.2.3:80", "--silo-url", "http://127.0.0.1:1", "--silo-url", "http://127.0.0.1:2"]
    assert main([*server, *urls]) == 2
    assert "must be reached over https" in capsys.readouterr().err
    # the two links: the silos' sync API (URLs and the sync token) or Flower (--flower and the deployment's certs)
    flower = [*server[:-2], "--flower"]
    cases = [
        (server[:-2], "needs --silo-url (one per silo) and --sync-token-file, or --flower"),
        ([*server, *urls, "--certs", str(tmp_path)], "--certs goes with --flower"),
        ([*server, *urls, "--round-timeout", "5"], "--round-timeout goes with --flower"),
        ([*server, *urls, "--shuffler-key", str(good)], "--shuffler-key goes with --shuffler"),
        ([*flower, "--silo-url", "https://a:1"], "no --silo-url, --sync-token-file or --ca"),
        (flower, "--flower needs --certs"),
    ]
    for args, words in cases:
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("fedbandits: error: ") and words in err and "\n" not in err, err
    assert not (tmp_path / "srv").exists()


def test_the_openapi_document_describes_every_route(tmp_path):
    silo, client = make(tmp_path)
    doc = client.get("/openapi.json").json()  # no credentials needed
    assert doc["openapi"].startswith("3.1") and doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    routed = {route.path: set(route.methods) - {"HEAD"} for route in Service(silo, TOKEN, SYNC).app.routes}
    described = {path: {m.upper() for m in ops} for path, ops in doc["paths"].items()}
    assert described == routed
    # the limits it states are the ones enforced
    arms = doc["paths"]["/v1/decisions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert arms["properties"]["features"]["maxItems"] == 10_000


def test_the_command_line_works_without_the_serve_extra():
    """`pip install -e .` (no extras) must give a working `fedbandits`: the serve parser imports none of
    the extra's packages, and `fedbandits serve` says in one line which one is missing."""
    import subprocess
    import sys

    blocked = ("starlette", "uvicorn", "httpx", "orjson", "cryptography", "httptools", "uvloop")
    code = (
        "import sys\n"
        f"for name in {blocked!r}:\n"
        "    sys.modules[name] = None  # import fails as if not installed\n"
        "from fedbandits.cli import main\n"
        "assert main(['list']) == 0\n"
        "sys.exit(main(['serve', 'demo', '--seconds', '1']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr[-2000:]
    assert (
        out.stderr.strip()
        .splitlines()[-1]
        .startswith("fedbandits: error: fedbandits serve needs the serve extra (httpx is missing)")
    ), out.stderr[-500:]


USER_LEVEL = {**LDP, "privacy_unit": "user", "max_contributions": 2}


def user_config():
    cfg = config(USER_LEVEL)
    cfg["environment"]["returning_users"] = 100  # the config says its users return (what user ids need)
    return cfg


def test_user_level_decisions_carry_user_ids_and_a_restart_keeps_the_caps(tmp_path):
    """privacy_unit = "user", m = 2: user 7's third rewarded decision is dropped (counted); the log keeps
    digests, never the ids, and a restart -- with decisions pending at the release's snapshot and after it
    -- replays to the same agent, caps included; a missing or bad user id is refused, storing nothing."""
    clock = WallClock()
    silo, client = make(tmp_path, cfg=user_config(), now=clock)
    rng = np.random.default_rng(11)

    def decide(user):
        r = client.post("/v1/decisions", json={"features": arms(rng), "user_id": user}, headers=AUTH)
        assert r.status_code == 200, r.text
        return r.json()["decision_id"]

    early = decide(7)  # pending across the release below
    for user in (7, "7", "alice"):
        client.post("/v1/rewards", json={"decision_id": decide(user), "reward": 0.3}, headers=AUTH)
    assert client.post("/v1/sync/release", json={"epoch": 0, "round": 0}, headers=SYNC_AUTH).status_code == 200
    client.post("/v1/rewards", json={"decision_id": early, "reward": 0.3}, headers=AUTH)  # 7's third: dropped
    later = decide("alice")
    status = client.get("/v1/status", headers=AUTH).json()
    assert status["dropped_contributions"] == 1 and status["privacy_unit"].startswith("user, up to 2")
    stored = silo.store.db.execute("SELECT user FROM events WHERE kind = 'decision'").fetchall()
    assert len(stored) == 5 and all(len(u) == 32 for (u,) in stored) and ("7",) not in stored
    before = (events(silo), silo.agent.state_digest())
    for body, code, words in (
        ({"features": arms(rng)}, 422, 'user_id: required with privacy_unit = "user"'),
        ({"features": arms(rng), "user_id": -1}, 422, "user_id must be an integer >= 0"),
        ({"features": arms(rng), "user_id": 1.5}, 400, "user_id: must be an integer >= 0 or a string"),
        ({"features": arms(rng), "user_id": ""}, 422, "user_id must be 1 to 256 characters"),
    ):
        r = client.post("/v1/decisions", json=body, headers=AUTH)
        assert r.status_code == code and words in r.json()["error"], (body, r.text)
    assert (events(silo), silo.agent.state_digest()) == before
    again = ServingSilo(user_config(), tmp_path / "silo", silo=0, now=clock)
    assert again.agent.state_digest() == silo.agent.state_digest()
    again.reward(later, 0.1)  # alice's second: kept
    assert again.status()["dropped_contributions"] == 1 and again.agent.status()["batch_samples"] == 1


def test_a_serving_silo_replays_its_schema_1_log(tmp_path):
    """A silo's log taken back to schema 1 (no user column: what an earlier fedbandits wrote) is migrated
    when the silo restarts, and the replay gives the same agent."""
    clock = WallClock()
    silo, client = make(tmp_path, now=clock)
    rng = np.random.default_rng(12)
    for i in range(6):
        d = client.post("/v1/decisions", json={"features": arms(rng)}, headers=AUTH).json()["decision_id"]
        if i % 2:
            client.post("/v1/rewards", json={"decision_id": d, "reward": 0.2}, headers=AUTH)
    digest = silo.agent.state_digest()
    silo.close()
    db = sqlite3.connect(tmp_path / "silo" / "events.sqlite")
    db.execute("ALTER TABLE events DROP COLUMN user")
    db.execute("UPDATE meta SET value = '1' WHERE key = 'schema'")
    db.commit()
    db.close()
    again = ServingSilo(config(), tmp_path / "silo", silo=0, now=clock)
    assert again.replayed == 9 and again.agent.state_digest() == digest
    assert again.store.meta("schema") == "3"


def test_an_event_log_of_schema_1_is_migrated_in_place(tmp_path):
    """A log written before user keys (schema 1) opens: the column is added, its rows kept."""
    path = tmp_path / "events.sqlite"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE events (seq INTEGER PRIMARY KEY, at REAL NOT NULL, kind TEXT NOT NULL, "
        "number INTEGER NOT NULL, x BLOB, value REAL, context TEXT, release INTEGER);"
        "INSERT INTO meta VALUES ('schema', '1');"
        "INSERT INTO events (at, kind, number, value) VALUES (1.0, 'reward', 0, 0.5);"
    )
    db.commit()
    db.close()
    store = Store(path)
    assert store.meta("schema") == "3"
    assert [(e.kind, e.value, e.user) for e in store.events_after(0)] == [("reward", 0.5, None)]
    store.close()
