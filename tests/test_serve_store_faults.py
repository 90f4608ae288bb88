"""A serving silo whose event log fails to write (issue #48, item 5), in both stores: a full disk
or a closed connection at each step of a decision, a reward, a release and an adoption; on
PostgreSQL also the server stopped in the middle of the transaction.

Each request that meets the failure is answered 503 in one line, the log (every table) is as it was
before the request, the silo refuses everything after it (503; ``/healthz`` too) rather than serve
from an agent ahead of its log, and a silo restarted on the same log -- while the failed one is
still open, as a process that has not exited yet -- has the agent of a silo that never saw the
request and serves on: the same request succeeds, and a second restart gives the same agent again.
A silo on PostgreSQL also recovers by itself once the log is back (it reconnects and reloads, as a
restart would): the failed one then holds that same agent.
"""

from __future__ import annotations

import base64
import sqlite3
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

with warnings.catch_warnings():  # starlette 1.x notes that its test client may move off httpx one day
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from fedbandits.online import Aggregator
from fedbandits.serve.http import Service
from fedbandits.serve.silo import ServingSilo
from servehelp import AUTH, SYNC, SYNC_AUTH, TOKEN, arms, config

CONFIG = config()
EXPIRY = 1000.0
FULL = "database or disk is full"


class Flaky:
    """The store's connection, failing at the ``n``-th statement whose SQL starts with ``match``:
    ``full`` raises the database's full-disk error instead of running it, ``after`` runs it and then
    raises that error (the statement's rows are in the open transaction), ``closed`` closes the
    connection and lets the statement meet it (closing rolls back what the transaction wrote: a
    connection that died), ``stopped`` shuts the PostgreSQL server down (``stop``) and lets the
    statement meet it."""

    def __init__(self, db: Any, match: str, mode: str, full: Exception, stop: Any = None) -> None:
        self.db, self.match, self.mode, self.full, self.stop = db, match, mode, full, stop
        self.seen, self.n = 0, 1

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.startswith(self.match):
            self.seen += 1
            if self.seen == self.n:
                if self.mode == "closed":
                    self.db.close()  # the statement meets the closed connection
                elif self.mode == "stopped":
                    self.stop()  # a fast shutdown: the server rolls the transaction back and ends the session
                else:
                    if self.mode == "after":
                        self.db.execute(sql, *args)
                    raise self.full
        return self.db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def b64(vector: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(vector, dtype="<f8").tobytes()).decode()


def open_silo(folder: Path, clock: SimpleNamespace, url: str | None = None) -> tuple[ServingSilo, TestClient]:
    silo = ServingSilo(CONFIG, folder, silo=0, now=lambda: clock.t, expiry_seconds=EXPIRY, store=url)
    return silo, TestClient(Service(silo, TOKEN, SYNC).app)


def dump(s: SimpleNamespace) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the log, as another connection sees it (what is committed)."""
    if s.url is not None:
        import psycopg

        with psycopg.connect(s.url) as db:
            listed = db.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")
            tables = [t for (t,) in listed.fetchall()]
            return {t: db.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in tables}
    db = sqlite3.connect(s.folder / "events.sqlite")
    try:
        tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {t: db.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in tables}
    finally:
        db.close()


def served(tmp_path: Path, url: str | None = None) -> SimpleNamespace:
    """A silo with a history: a decision that expires, decisions and rewards, release 0.0, prefix 0.0
    adopted, then more traffic (events after the adoption's snapshot, decisions pending)."""
    clock = SimpleNamespace(t=1_000_000.0)
    folder = tmp_path / "silo"
    silo, client = open_silo(folder, clock, url)
    rng = np.random.default_rng(5)
    expired = client.post("/v1/decisions", json={"features": arms(rng)}, headers=AUTH).json()["decision_id"]
    clock.t += EXPIRY + 1.0  # its reward will be late: refused, counted and logged

    def traffic(n: int, rewarded: int) -> list[str]:
        ids = []
        for i in range(n):
            clock.t += 1.0
            d = client.post("/v1/decisions", json={"features": arms(rng)}, headers=AUTH)
            assert d.status_code == 200
            ids.append(d.json()["decision_id"])
            if i < rewarded:
                r = client.post("/v1/rewards", json={"decision_id": ids[-1], "reward": 0.25 * (i % 4)}, headers=AUTH)
                assert r.status_code == 200
        return ids[rewarded:]

    traffic(12, 8)
    r = client.post("/v1/sync/release", json={"epoch": 0, "round": 0}, headers=SYNC_AUTH)
    assert r.status_code == 200
    payload = np.frombuffer(base64.b64decode(r.json()["payload"]), dtype=r.json()["dtype"]).astype("<f8")
    aggregator = Aggregator.from_config(CONFIG)
    prefixes = [aggregator.aggregate([payload] * 3) for _ in range(2)]
    r = client.post("/v1/sync/prefix", json={"epoch": 0, "round": 0, "prefix": b64(prefixes[0])}, headers=SYNC_AUTH)
    assert r.json() == {"adopted": True}
    pending = traffic(6, 3)
    return SimpleNamespace(
        silo=silo,
        client=client,
        clock=clock,
        folder=folder,
        rng=rng,
        pending=pending,
        prefix=prefixes[1],
        url=url,
        expired=expired,
    )


#: each request the log must record, and a check of its answer once it succeeds
REQUESTS = {
    "decide": lambda s, c: c.post("/v1/decisions", json={"features": arms(s.rng)}, headers=AUTH),
    "reward": lambda s, c: c.post("/v1/rewards", json={"decision_id": s.pending[0], "reward": 0.5}, headers=AUTH),
    "rewards": lambda s, c: c.post(
        "/v1/rewards", json={"rewards": [{"decision_id": d, "reward": 0.5} for d in s.pending[:2]]}, headers=AUTH
    ),
    "late": lambda s, c: c.post("/v1/rewards", json={"decision_id": s.expired, "reward": 0.5}, headers=AUTH),
    "release": lambda s, c: c.post("/v1/sync/release", json={"epoch": 0, "round": 1}, headers=SYNC_AUTH),
    "adopt": lambda s, c: c.post(
        "/v1/sync/prefix", json={"epoch": 0, "round": 1, "prefix": b64(s.prefix)}, headers=SYNC_AUTH
    ),
}
DONE = {
    "decide": lambda r: r.status_code == 200 and "decision_id" in r.json(),
    "reward": lambda r: r.status_code == 200 and r.json() == {"status": "learned"},
    "rewards": lambda r: r.status_code == 200 and [x["status"] for x in r.json()["results"]] == [200, 200],
    "late": lambda r: r.status_code == 410 and "expired" in r.json()["error"],  # refused, once it is logged
    "release": lambda r: r.status_code == 200 and r.json()["samples"] == 3,  # the 3 rewards since release 0.0, once
    "adopt": lambda r: r.status_code == 200 and r.json() == {"adopted": True},
}
#: each statement of each request's transaction, in order
STEPS = {
    "decide": ["BEGIN", "INSERT INTO events", "COMMIT"],
    "reward": ["BEGIN", "INSERT INTO events", "COMMIT"],
    "rewards": ["BEGIN", "INSERT INTO events", "COMMIT"],
    "late": ["BEGIN", "INSERT INTO events", "COMMIT"],
    "release": [
        "SELECT at, payload",  # the stored release a retried round would get (a read, before any change)
        "BEGIN",
        "INSERT INTO releases",
        "UPDATE events SET release",
        "INSERT OR REPLACE INTO snapshots",
        "DELETE FROM snapshots",
        "INSERT OR REPLACE INTO meta",  # the state's version, which tells a shared log's replicas to reload
        "COMMIT",
    ],
    "adopt": [
        "BEGIN",
        "INSERT INTO prefixes",
        "INSERT OR REPLACE INTO snapshots",
        "DELETE FROM snapshots",
        "INSERT OR REPLACE INTO meta",
        "COMMIT",
    ],
}
#: every step fails before it runs (a full disk, a closed connection); a write can also fail after it ran
CASES = [
    (request, step, mode)
    for request, steps in STEPS.items()
    for step in steps
    for mode in ("full", "closed", "after")
    if mode != "after" or step.startswith(("INSERT", "UPDATE", "DELETE"))
]


def refused_in_one_line(response: Any, shared: bool = False) -> str:
    assert response.status_code == 503, response.text
    assert "\n" not in response.text and list(response.json()) == ["error"], response.text
    error = response.json()["error"]
    remedy = "retrying (at most once a second)" if shared else "restart the service"
    assert error.startswith("the event log failed") and error.endswith(remedy), error
    return str(error)


def check_failed_then_restart(s: SimpleNamespace, request: str, before: dict[str, Any], digest: str) -> None:
    """The log unchanged, the failed silo refusing everything, and a restart that resumes exactly."""
    assert dump(s) == before
    assert s.client.get("/healthz").status_code == 503
    for again in ("decide", "reward"):  # nothing more is acknowledged by the failed silo
        refused_in_one_line(REQUESTS[again](s, s.client), s.url is not None)
    assert dump(s) == before
    # the restart: the failed silo is still open (its process has not exited yet), the fault is gone
    silo, client = open_silo(s.folder, s.clock, s.url)
    assert silo.agent.state_digest() == digest
    assert dump(s) == before  # opening the log writes nothing
    response = REQUESTS[request](s, client)  # the same request succeeds, once
    assert DONE[request](response), response.text
    d = client.post("/v1/decisions", json={"features": arms(s.rng)}, headers=AUTH).json()["decision_id"]
    assert client.post("/v1/rewards", json={"decision_id": d, "reward": 1.0}, headers=AUTH).status_code == 200
    assert client.get("/healthz").status_code == 200
    third, _ = open_silo(s.folder, s.clock, s.url)
    assert third.agent.state_digest() == silo.agent.state_digest()
    if s.url is not None:  # the failed silo, once it may retry: it reloads the log's agent and serves again
        s.silo.RETRY_SECONDS = 0.0
        assert s.client.get("/healthz").status_code == 200
        assert s.silo.agent.state_digest() == silo.agent.state_digest() and s.silo.recoveries == 1
        assert REQUESTS["decide"](s, s.client).status_code == 200
    for x in (third, silo, s.silo):
        x.close()


@pytest.mark.parametrize(("request_", "step", "mode"), CASES, ids=["-".join(c) for c in CASES])
def test_a_write_that_fails_at_any_step_changes_nothing_and_a_restart_resumes(tmp_path, request_, step, mode):
    s = served(tmp_path)
    before, digest = dump(s), s.silo.agent.state_digest()
    flaky = Flaky(s.silo.store.db, step, mode, sqlite3.OperationalError(FULL))
    s.silo.store.db = flaky  # type: ignore[assignment]
    error = refused_in_one_line(REQUESTS[request_](s, s.client))
    assert flaky.seen == 1  # the failure happened where it was put
    assert ("closed database" if mode == "closed" else FULL) in error
    check_failed_then_restart(s, request_, before, digest)


@pytest.mark.parametrize("request_", list(REQUESTS))
def test_a_real_full_disk_fails_a_request_which_changes_nothing(tmp_path, request_):
    """SQLite's own error: the log may not grow by a page (``max_page_count``, once ``VACUUM`` has
    left no free page).  Requests are served until one needs a page; that one is refused and leaves
    the log as it was."""
    s = served(tmp_path)
    if request_ in ("reward", "rewards"):  # enough decisions to reward until the disk is full
        s.pending += [
            s.client.post("/v1/decisions", json={"features": arms(s.rng)}, headers=AUTH).json()["decision_id"]
            for _ in range(200)
        ]
    db = s.silo.store.db
    db.execute("VACUUM")
    db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0]}")
    for _ in range(100):
        before, digest = dump(s), s.silo.agent.state_digest()
        response = REQUESTS[request_](s, s.client)
        if response.status_code not in (200, 410):  # 410: a late reward, logged (each time it comes)
            break
        assert request_ in ("decide", "reward", "rewards", "late")  # a snapshot needs pages of its own
        s.pending = s.pending[{"decide": 0, "reward": 1, "rewards": 2, "late": 0}[request_] :]
    assert FULL in refused_in_one_line(response)
    check_failed_then_restart(s, request_, before, digest)


#: the same requests' statements on PostgreSQL, message by message: its dialect, its write lock and
#: the read of what other replicas committed, under the lock, before any change (one message: BEGIN,
#: the lock, the read); a transaction's events go in the message of its COMMIT
READS = ["BEGIN; SELECT pg_advisory_xact_lock"]
EVENTS = "INSERT INTO events"  # ...; COMMIT
PG_STEPS = {
    "decide": [*READS, EVENTS],
    "reward": [*READS, EVENTS],
    "rewards": [*READS, EVENTS],
    "late": [*READS, EVENTS],
    "release": [
        *READS,
        "SELECT at, payload",
        "INSERT INTO releases",
        "UPDATE events SET release",
        "INSERT INTO snapshots",
        "DELETE FROM snapshots",
        "INSERT INTO meta",
        "COMMIT",
    ],
    "adopt": [
        *READS,
        "INSERT INTO prefixes",
        "INSERT INTO snapshots",
        "DELETE FROM snapshots",
        "INSERT INTO meta",
        "COMMIT",
    ],
}
WRITES = ("INSERT", "UPDATE", "DELETE", "COMMIT")
#: the server is stopped before each write and before the COMMIT (a read meets it as a closed connection
#: does); a write fails after it ran inside the open transaction ("after"), not the one that commits
PG_CASES = [
    (request, step, mode)
    for request, steps in PG_STEPS.items()
    for step in steps
    for mode in ("full", "closed", "after", "stopped")
    if (mode != "after" or (step.startswith(WRITES[:3]) and step != EVENTS))
    and (mode != "stopped" or step.startswith(WRITES))
]


@pytest.mark.parametrize(("request_", "step", "mode"), PG_CASES, ids=["-".join(c) for c in PG_CASES])
def test_on_postgresql_a_write_that_fails_at_any_step_changes_nothing_and_the_silo_resumes(
    tmp_path, pg_url, postgres, request_, step, mode
):
    import psycopg

    s = served(tmp_path, pg_url)
    s.silo.RETRY_SECONDS = 1e9  # the failed silo does not retry until the check lets it
    before, digest = dump(s), s.silo.agent.state_digest()
    full = psycopg.errors.DiskFull("could not extend file: No space left on device")
    flaky = Flaky(s.silo.store.db, step, mode, full, stop=postgres.stop)
    s.silo.store.db = flaky
    error = refused_in_one_line(REQUESTS[request_](s, s.client), shared=True)
    assert flaky.seen == 1  # the failure happened where it was put
    assert {"full": "No space left", "after": "No space left"}.get(mode, "connection") in error, error
    postgres.start()  # a stopped server is back (crash recovery had nothing to undo: the transaction rolled back)
    check_failed_then_restart(s, request_, before, digest)
