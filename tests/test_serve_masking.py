"""A release enters one masked sum, ever, in ``serve`` too (issue #44): a coordinator that cheats.

A serving silo masks each release once, when it makes it, and stores the masked bytes: asked again
for the same ``(epoch, round)`` it answers those bytes, whatever key set-up is in force since, so a
new set-up cannot make it re-mask a release under other keys.  And its secure aggregation is the
all-present protocol (every roster lists every silo, nothing is ever revealed): the one sum a
release can enter is the sum over all M silos.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from fedbandits.crypto.double_masking import Advert, SignedRoster
from fedbandits.crypto.secure_aggregation import SecAggServer
from fedbandits.serve import masking
from test_serve import LDP, SYNC_AUTH, config, federation, traffic


def _setup(clients: dict, secagg_epoch: int, members: list[int], context: bytes) -> list[int]:  # type: ignore[type-arg]
    """A key set-up run by the cheating coordinator over the sync API; the HTTP statuses of the rosters."""
    adverts = {}
    for i in members:
        got = clients[f"silo{i}"].post("/v1/sync/keys", json={"secagg_epoch": secagg_epoch}, headers=SYNC_AUTH).json()
        adverts[i] = Advert(*(masking.unb64(got[k], k) for k in ("c_public", "s_public", "cert", "signature")))
    roster = SignedRoster.of(context, secagg_epoch, 2, adverts)
    statuses, out = [], {}
    body = {"roster": masking.roster_to_json(roster)}
    for i in members:
        r = clients[f"silo{i}"].post("/v1/sync/roster", json=body, headers=SYNC_AUTH)
        statuses.append(r.status_code)
        if r.status_code == 200:
            out[i] = masking.keyed(r.json()["shares"], "shares")
    if len(out) == len(members):
        routed = SecAggServer.route(out)
        for i in members:
            body = {"shares": masking.unkeyed(routed[i])}
            assert clients[f"silo{i}"].post("/v1/sync/shares", json=body, headers=SYNC_AUTH).status_code == 200
    return statuses


def _release(client, epoch: int, round_: int) -> bytes:  # type: ignore[no-untyped-def]
    r = client.post("/v1/sync/release", json={"epoch": epoch, "round": round_}, headers=SYNC_AUTH)
    assert r.status_code == 200, r.text
    return masking.unb64(r.json()["payload"], "payload")


def test_a_new_key_set_up_cannot_make_a_serving_silo_mask_a_release_again(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = config({**LDP, "protocol": "distributed-dp"})
    silos, clients, _, coordinator = federation(tmp_path, cfg=cfg)
    rng = np.random.default_rng(44)
    traffic(clients, rng, 3)
    assert coordinator.tick().closed  # set-up 1 and round (0, 0), summed over all three silos
    sent = {i: _release(clients[f"silo{i}"], 0, 0) for i in range(3)}
    keys_before = silos[0].secagg.s_private  # type: ignore[union-attr]
    # the coordinator runs a second set-up (as after losing its state, or to cheat) and asks again
    assert _setup(clients, 2, [0, 1, 2], silos[0].context) == [200, 200, 200]
    assert silos[0].secagg.s_private != keys_before  # type: ignore[union-attr]  # new keys are in force ...
    for i in range(3):  # ... and release (0, 0) is the bytes masked under set-up 1, not masked again
        assert _release(clients[f"silo{i}"], 0, 0) == sent[i]
    # a set-up without silo 1 (a sum of the others, to difference against) is refused by every silo
    partial = SignedRoster.of(silos[0].context, 3, 2, {0: _advert(), 2: _advert()})
    r = clients["silo0"].post("/v1/sync/roster", json={"roster": masking.roster_to_json(partial)}, headers=SYNC_AUTH)
    assert r.status_code == 400 and "must list the keys of silos 0 to 2" in r.json()["error"]


def _advert() -> Advert:
    return Advert(b"\x09" * 32, b"\x09" * 32, b"cert", b"\x00" * 64)


def test_a_serving_silo_refuses_a_roster_whose_threshold_the_colluders_could_meet(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``colluders = 1``: one silo may hand the server everything it holds.  Each silo sends every
    member a Shamir share of its mask key, encrypted for that member; under a roster of threshold 1
    the colluding member's one share *is* the key, and with it the server computes every pairwise
    mask of the silo and opens its release.  A serving silo checks the roster as the deployment's
    silos do (``crypto.double_masking.roster_problem``: 2t > M + colluders, so t = 3 of 3 here), and
    the coordinator publishes that threshold."""
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
        assert silos[0].secagg.roster is None  # type: ignore[union-attr]  # nothing taken, no share made
    traffic(clients, np.random.default_rng(3), 2)
    assert coordinator.tick().closed  # the honest coordinator's roster (t = 3) is taken by every silo
    assert all(s.secagg.roster.threshold == 3 for s in silos)  # type: ignore[union-attr]
