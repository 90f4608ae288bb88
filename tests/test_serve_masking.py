"""Secure aggregation in ``serve``: the deployment's double masking (issue #45), and a release that
enters one masked sum, ever (issue #44), against a coordinator that cheats or loses its state.

A serving silo masks each release once, when it makes it.  Asked again under the same key set-up it
answers the same message; after a new set-up it withdraws the release (it enters no second sum),
and the round goes on without it: here, with no dropout provisioned, it closes without data.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from fedbandits.crypto.double_masking import Advert, SignedRoster
from fedbandits.serve import masking
from fedbandits.serve.coordinator import Coordinator
from fedbandits.serve.links import HttpLink
from test_serve import LDP, SYNC, SYNC_AUTH, Bundling, config, federation, traffic


def _setup(clients: dict, secagg_epoch: int, members: list[int], context: bytes) -> list[int]:  # type: ignore[type-arg]
    """A key set-up run by the cheating coordinator over the sync API; the HTTP statuses of the rosters."""
    adverts = {}
    for i in members:
        got = clients[f"silo{i}"].post("/v1/sync/keys", json={"secagg_epoch": secagg_epoch}, headers=SYNC_AUTH).json()
        adverts[i] = Advert(*(masking.unb64(got[k], k) for k in ("c_public", "s_public", "cert", "signature")))
    body = {"roster": masking.roster_to_json(SignedRoster.of(context, secagg_epoch, 2, adverts))}
    return [clients[f"silo{i}"].post("/v1/sync/roster", json=body, headers=SYNC_AUTH).status_code for i in members]


def _release(client, epoch: int, round_: int) -> dict:  # type: ignore[no-untyped-def, type-arg]
    r = client.post("/v1/sync/release", json={"epoch": epoch, "round": round_}, headers=SYNC_AUTH)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def test_a_new_key_set_up_cannot_make_a_serving_silo_mask_a_release_again(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = config({**LDP, "protocol": "distributed-dp"})
    silos, clients, _, coordinator = federation(tmp_path, cfg=cfg)
    traffic(clients, np.random.default_rng(44), 3)
    assert coordinator.tick().closed  # set-up 1 and round (0, 0), summed over all three silos
    sent = {i: _release(clients[f"silo{i}"], 0, 0) for i in range(3)}  # asked again: the same message
    for i, silo in enumerate(silos):
        assert masking.unb64(sent[i]["payload"], "payload") == silo.store.release(0, 0).payload.tobytes()
    keys_before = silos[0].secagg.s_private  # type: ignore[union-attr]
    # the coordinator runs a second set-up (as after losing its state, or to cheat) and asks again
    assert _setup(clients, 2, [0, 1, 2], silos[0].context) == [200, 200, 200]
    assert silos[0].secagg.s_private != keys_before  # type: ignore[union-attr]  # new keys are in force ...
    for i in range(3):  # ... and release (0, 0) is withdrawn, not masked again under them
        again = _release(clients[f"silo{i}"], 0, 0)
        assert "payload" not in again and "enters one masked sum, ever" in again["withdrawn"]
    # nor does any silo reveal anything about round (0, 0) under the new roster
    body = {"epoch": 0, "round": 0, "survivors": [0, 1, 2], "dropped": [], "signatures": {}, "held": {}}
    r = clients["silo0"].post("/v1/sync/unmask", json=body, headers=SYNC_AUTH)
    assert r.status_code == 422 and "sent no message it still keeps" in r.json()["error"]
    # a set-up without silo 1 (a sum of the others, to difference against) is refused by every silo
    partial = SignedRoster.of(silos[0].context, 3, 2, {0: _advert(), 2: _advert()})
    r = clients["silo0"].post("/v1/sync/roster", json={"roster": masking.roster_to_json(partial)}, headers=SYNC_AUTH)
    assert r.status_code == 400 and "must list the keys of silos 0 to 2" in r.json()["error"]


def _advert() -> Advert:
    return Advert(b"\x09" * 32, b"\x09" * 32, b"cert", b"\x00" * 64)


def test_a_coordinator_that_lost_its_state_gets_withdrawn_releases_and_closes_without_their_data(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Round (0, 1) is half released (silo 2 down) when the coordinator loses its log.  Its successor
    runs a new key set-up; every release made under the first one is withdrawn, so rounds (0, 0) and
    (0, 1) close without data (no dropout is provisioned: the noise needs all three silos), and
    round (0, 2) is whole again."""
    cfg = config({**LDP, "protocol": "distributed-dp"})
    silos, clients, router, coordinator = federation(tmp_path, cfg=cfg)
    rng = np.random.default_rng(45)
    traffic(clients, rng, 3)
    assert coordinator.tick().closed
    traffic(clients, rng, 3)
    router.down = {"silo2"}
    tick = coordinator.tick()
    assert (tick.released, tick.unreachable, tick.closed) == ([0, 1], [2], False)
    coordinator.close()
    router.down = set()
    urls = [f"http://silo{i}" for i in range(3)]
    successor = Coordinator(cfg, HttpLink(urls, SYNC, transport=router), tmp_path / "server-2")
    # its first set-up (epoch 1) is older than the silos' own: they say which to ask for, and it does
    assert not successor.tick().closed and successor.status()["secure_aggregation"] == "setting up"
    for _ in range(3):
        traffic(clients, rng, 2)
        assert successor.tick().closed
    samples = [n for (n,) in successor.db.execute("SELECT samples FROM sums ORDER BY epoch, round")]
    assert samples[:2] == [0, 0] and samples[2] > 0  # round (0, 1): silo 2's fresh release alone is not summed
    assert all(s.secagg.joined == 2 for s in silos)  # type: ignore[union-attr]  # the successor's set-up
    assert [s.status()["model_version"] for s in silos] == ["0.2"] * 3


def test_a_serving_silo_refuses_a_roster_whose_threshold_the_colluders_could_meet(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``colluders = 1``: one silo may hand the server everything it holds.  Under a roster whose
    threshold t has 2t <= M + colluders, two survivor lists could each gather t signatures, and the
    colluder's shares of another silo's self-mask seed would count towards the t that rebuild it:
    the server could remove both of a silo's masks.  A serving silo checks the roster as the
    deployment's silos do (``crypto.double_masking.roster_problem``: 2t > M + colluders, so t = 3 of
    3 here), and the coordinator publishes that threshold."""
    cfg = config({**LDP, "protocol": "distributed-dp", "colluders": 1})
    silos, clients, _, coordinator = federation(tmp_path, cfg=cfg)
    adverts = {}
    for i in range(3):
        got = clients[f"silo{i}"].post("/v1/sync/keys", json={"secagg_epoch": 1}, headers=SYNC_AUTH).json()
        adverts[i] = Advert(*(masking.unb64(got[k], k) for k in ("c_public", "s_public", "cert", "signature")))
    for t in (1, 2):
        low = SignedRoster.of(silos[0].context, 1, t, adverts)
        r = clients["silo0"].post("/v1/sync/roster", json={"roster": masking.roster_to_json(low)}, headers=SYNC_AUTH)
        assert r.status_code == 422, r.text
        assert f"threshold {t} for 3 member(s) must be in [3, 3] (2t > members + 1 colluders)" in r.json()["error"]
        assert silos[0].secagg.roster is None  # type: ignore[union-attr]  # nothing taken
    traffic(clients, np.random.default_rng(3), 2)
    assert coordinator.tick().closed  # the honest coordinator's roster (t = 3) is taken by every silo
    assert all(s.secagg.roster.threshold == 3 for s in silos)  # type: ignore[union-attr]


def test_logs_of_the_all_present_protocol_move_to_double_masking(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Event logs and a coordinator log written before issue #45 (tests/data/serve-before-45: round 0.0
    closed under the all-present masking, round 0.1 released by silos 0 and 1 only).  The
    coordinator replays round 0.0 from its stored payloads (their masks cancel) to the prefix it
    closed then; a new key set-up follows (double masking); the half-made round 0.1 closes without
    data, since silos 0 and 1 masked theirs under the earlier protocol and withdraw them; round 0.2
    is whole."""
    shutil.copytree(Path(__file__).parent / "data" / "serve-before-45", tmp_path, dirs_exist_ok=True)
    cfg = config({**LDP, "protocol": "distributed-dp"})
    silos, clients, _, coordinator = federation(tmp_path, cfg=cfg)
    stored = coordinator.db.execute("SELECT prefix FROM closed WHERE epoch = 0 AND round = 0").fetchone()[0]
    assert coordinator.ledger.prefix is not None and coordinator.ledger.prefix.tobytes() == stored
    assert (coordinator.epoch, coordinator.round) == (0, 1)
    assert all(s.secagg.joined == 0 and s.store.meta("secagg") for s in silos)  # type: ignore[union-attr]
    rng = np.random.default_rng(47)
    for _ in range(2):
        traffic(clients, rng, 2)
        assert coordinator.tick().closed
    samples = [n for (n,) in coordinator.db.execute("SELECT samples FROM sums ORDER BY epoch, round")]
    assert samples[0] == 0 and samples[1] > 0  # round 0.1 without data, round 0.2 summed
    assert all(s.secagg.joined == 2 for s in silos)  # type: ignore[union-attr]  # after the old set-up 1
    assert [s.status()["model_version"] for s in silos] == ["0.2"] * 3


def test_a_bundling_link_carries_the_prefix_with_the_first_step_of_the_next_masked_round(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Through Flower every message costs a ClientApp process: a masked round is one message per silo
    and step (keys and roster once, then the release and the unmask step), and a closed round's
    prefix rides with the next round's first message."""
    cfg = config({**LDP, "protocol": "distributed-dp"})
    silos, clients, router, _ = federation(tmp_path, cfg=cfg)
    link = Bundling([f"http://silo{i}" for i in range(3)], SYNC, transport=router)
    coordinator = Coordinator(cfg, link, tmp_path / "bundled")
    rng = np.random.default_rng(12)
    traffic(clients, rng, 2)
    tick = coordinator.tick()  # set-up and round 0.0; its prefix waits for the next tick
    assert (tick.closed, tick.delivered) == (True, [])
    everybody = range(3)
    assert link.calls == [
        {i: ["/v1/sync/keys"] for i in everybody},
        {i: ["/v1/sync/roster", "/v1/sync/release"] for i in everybody},
        {i: ["/v1/sync/unmask"] for i in everybody},
    ]
    traffic(clients, rng, 2)
    tick = coordinator.tick()
    assert link.calls[3:] == [
        {i: ["/v1/sync/prefix", "/v1/sync/release"] for i in everybody},
        {i: ["/v1/sync/unmask"] for i in everybody},
    ]
    assert (tick.closed, tick.delivered) == (True, [0, 1, 2])
    assert [s.status()["model_version"] for s in silos] == ["0.0"] * 3
