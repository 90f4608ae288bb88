"""Replicas of one serving silo on one PostgreSQL event log (issue #48, items 1-2; a real server,
tests/conftest.py's ``postgres``): the same promises as one silo, whichever replica answers.

Two (or three) :class:`ServingSilo` objects on one database are the replicas of one silo, as
processes behind a load balancer would be; each request goes to one of them.  Checked: a decision's
id is unique across replicas and any replica takes its reward, once (a second one: 409 from any
replica); every replica decides from every event committed before (the freshness bound: zero
events); a sync round's release is made once, and a retried round gets the same bytes from any
replica; every completed decision is in exactly one release; and a replica opened on the log, a
restart, holds the agent the serving ones hold, bit for bit -- the same agent a SQLite silo that got
the same requests holds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedbandits.online import Aggregator
from fedbandits.serve.silo import ServeError, ServingSilo
from fedbandits.serve.store import StoreError
from servehelp import LDP, WallClock, arms, config

pytest.importorskip("psycopg")

NONE = {"name": "fedlinucb", "batch": 10, "protocol": "none"}


def replicas(url: str, tmp_path: Path, n: int, clock: WallClock, algorithm: dict = LDP) -> list[ServingSilo]:  # type: ignore[type-arg]
    extra = {"allow_unprivatized": True} if algorithm.get("protocol") == "none" else {}
    return [
        ServingSilo(config(algorithm), tmp_path / f"r{i}", store=url, now=clock, expiry_seconds=1000.0, **extra)
        for i in range(n)
    ]


def traffic(silos: list[ServingSilo], clock: WallClock, rng: np.random.Generator, n: int) -> list[str]:
    """``n`` decisions spread over the replicas, each rewarded by another replica but every fourth (pending)."""
    pending = []
    for i in range(n):
        clock.t += 1.0
        _, decision, _ = silos[i % len(silos)].decide(np.array(arms(rng)))
        if i % 4 == 3:
            pending.append(decision)
        else:
            silos[(i + 1) % len(silos)].reward(decision, float(rng.uniform(-1, 1)))
    return pending


def test_decision_ids_are_unique_and_any_replica_takes_a_reward_once(pg_url, tmp_path):
    clock, rng = WallClock(), np.random.default_rng(1)
    a, b = replicas(pg_url, tmp_path, 2, clock)
    ids = [s.decide(np.array(arms(rng)))[1] for s in (a, b, a, a, b, b, a)]
    assert len(set(ids)) == 7 and [int(i.rsplit("-", 1)[1]) for i in ids] == list(range(7))
    b.reward(ids[0], 0.5)  # decided by a, rewarded at b
    for silo in (a, b):  # a second reward: 409 whichever replica gets it
        with pytest.raises(ServeError) as refused:
            silo.reward(ids[0], 0.5)
        assert refused.value.status == 409
    a.reward(ids[1], 0.25)  # decided by b, rewarded at a
    assert a.store.count("reward") == 2 and a.agent.counts["learned"] == 2
    b.decide(np.array(arms(rng)))  # every change starts from the log: b now holds a's reward too
    assert b.agent.counts["learned"] == 2 and b.agent.counts["decisions"] == 8


def test_a_release_is_made_once_and_a_retried_round_gets_the_same_bytes_from_any_replica(pg_url, tmp_path):
    clock, rng = WallClock(), np.random.default_rng(2)
    a, b, c = replicas(pg_url, tmp_path, 3, clock)
    pending = traffic([a, b, c], clock, rng, 16)
    payload, samples = b.release(0, 0)
    assert samples == 12  # the completed decisions of every replica
    for silo in (a, c, b):  # the retried round: the stored bytes (the noise is never redrawn)
        again, n = silo.release(0, 0)
        assert n == samples and again.tobytes() == payload.tobytes()
    for d in pending:  # completed after the release, at the replica that made it and at the others
        a.reward(d, 0.5)
    payload1, samples1 = c.release(0, 1)
    assert samples1 == len(pending)
    # every completed decision in exactly one release
    assert a.store.count("reward", released=True) == 16 and a.store.count("reward", released=False) == 0
    assert a.release(0, 1)[0].tobytes() == payload1.tobytes()
    with pytest.raises(ServeError) as refused:  # a round out of order, at any replica
        a.release(0, 3)
    assert refused.value.status == 409


def test_only_the_replica_that_answered_the_last_sync_round_draws_the_next_ones_noise_ahead(pg_url, tmp_path):
    """Noise drawn ahead by a replica that another one's release then reloads is never used: a replica
    draws ahead only once it answered a sync round, until another one does (a SQLite silo always)."""
    clock, rng = WallClock(), np.random.default_rng(8)
    a, b = replicas(pg_url, tmp_path, 2, clock)
    lite = ServingSilo(config(LDP), tmp_path / "lite", now=clock, expiry_seconds=1000.0)
    assert lite.prepare_noise() and not a.prepare_noise() and not b.prepare_noise()
    traffic([a, b], clock, rng, 8)
    a.release(0, 0)
    b.refresh()
    assert a.prepare_noise() and not b.prepare_noise()
    b.release(0, 1)  # the next round, answered by the other replica (a failover)
    a.refresh()
    assert b.prepare_noise() and not a.prepare_noise()


def test_a_replica_opened_on_the_log_holds_the_serving_replicas_agent_bit_for_bit(pg_url, tmp_path):
    clock, rng = WallClock(), np.random.default_rng(3)
    a, b = replicas(pg_url, tmp_path, 2, clock)
    traffic([a, b], clock, rng, 21)
    payload, _ = a.release(0, 0)
    traffic([b, a], clock, rng, 9)
    prefix = Aggregator.from_config(config(LDP)).aggregate([payload] * 3)
    assert b.adopt(0, 0, prefix) and not a.adopt(0, 0, prefix)  # adopted once; a second time: already in force
    traffic([a, b], clock, rng, 5)
    for silo in (a, b):
        silo.refresh()
    (c,) = replicas(pg_url, tmp_path / "late", 1, clock)  # a replica that joins (or one restarted)
    assert a.agent.state_digest() == b.agent.state_digest() == c.agent.state_digest()
    assert c.model_version() == "0.0" and a.model_version() == "0.0"


def test_a_replica_reloading_at_anothers_release_carries_its_pending_decisions_as_the_log_has_them(
    pg_url, tmp_path, monkeypatch
):
    """A replica reloads at each release and adoption another replica makes; it takes the decisions
    the snapshot left out from the agent it held and the events it has just read
    (fedbandits.serve.pending.carried), not from the log's whole pending window.  Its agent is then
    the one a replica reading the log holds, bit for bit -- pending decisions made, answered and
    expired on either side of the release included, and after its own clock expired decisions in a
    refused request (no trace in the log)."""
    from fedbandits.serve import pending as module

    read = []
    monkeypatch.setattr(module, "from_log", lambda *a, f=module.from_log: (read.append(a[2]), f(*a))[1])
    clock, rng = WallClock(), np.random.default_rng(10)
    a, b = replicas(pg_url, tmp_path, 2, clock)  # expiry: 1,000 s
    early = traffic([a, b], clock, rng, 12)  # 3 decisions pending, made by either replica
    clock.t += 400.0
    late = traffic([b, a], clock, rng, 12)
    b.reward(early[0], 0.5)  # answered after b last read... by b itself; a answers another one:
    a.reward(late[0], 0.5)
    clock.t += 700.0  # early's decisions are past their deadlines, late's are not
    a.decide(np.array(arms(rng)))  # a's clock expires early's (logged: a decision at this time)
    payload, _ = a.release(0, 0)
    prefix = Aggregator.from_config(config(LDP)).aggregate([payload] * 3)
    traffic([a], clock, rng, 4)  # events after the snapshot
    read.clear()
    b.refresh()  # b reloads: carried
    assert read == []
    (c,) = replicas(pg_url, tmp_path / "c", 1, clock)  # reads the pending window from the log
    assert b.agent.state_digest() == c.agent.state_digest() == a.agent.state_digest()
    assert len(b.agent.pending) == 2 + 1 + 1  # late's 3 less the one answered, a's decision, the last traffic's

    # b's own clock runs past late's deadlines in a request it refuses (409): nothing is logged; a's
    # adoption expires them too before its snapshot, so b carries, and still holds the log's agent
    clock.t += 999.0
    with pytest.raises(ServeError):
        b.reward(early[0], 0.5)  # already rewarded: 409, after b's agent expired late's decisions
    assert b.agent.counts["expired"] > a.agent.counts["expired"]
    assert a.adopt(0, 0, prefix)
    read.clear()
    b.refresh()
    assert read == []
    (d,) = replicas(pg_url, tmp_path / "d", 1, clock)
    assert b.agent.state_digest() == d.agent.state_digest()


def test_carrying_declines_when_the_held_agent_counts_expired_what_the_snapshot_holds_pending():
    """The decisions a replica's agent counts expired but the loaded snapshot holds pending (its clock
    ran past their deadlines in a request the log has no trace of): only the log says whether they
    are pending, so fedbandits.serve.pending.carried declines and changes nothing; with the same
    expiry on both sides it carries the held agent's pending decisions."""
    from fedbandits import Agent, config_from_dict
    from fedbandits.serve import pending

    clock, rng = WallClock(), np.random.default_rng(11)
    held = Agent.from_config(config_from_dict(config(NONE)), seed=0, expiry_seconds=10.0, clock=clock)
    ids = [held.choose(np.array(arms(rng))).decision_id for _ in range(3)]
    held.reward(ids[0], 0.5)
    snapshot = held.snapshot(pending=False)  # decisions 1 and 2 pending
    loaded = Agent.load(snapshot, clock=clock)
    assert pending.carried(loaded, 0, held, 0, []) and sorted(loaded.pending) == [1, 2]
    clock.t += 11.0
    held.status()  # held's clock expires 1 and 2
    loaded = Agent.load(snapshot, clock=clock)
    before = loaded.state_digest()
    assert not pending.carried(loaded, 0, held, 0, [])
    assert loaded.state_digest() == before and not loaded.pending


def test_replicas_on_postgresql_hold_the_agent_of_one_sqlite_silo_given_the_same_requests(pg_url, tmp_path):
    """The same requests, at the same times, to two replicas on PostgreSQL and to one silo on SQLite:
    the same decisions, the same releases byte for byte, the same agent."""
    clock = WallClock()
    pair = replicas(pg_url, tmp_path, 2, clock, NONE)
    alone = ServingSilo(config(NONE), tmp_path / "sqlite", now=clock, expiry_seconds=1000.0, allow_unprivatized=True)
    for seed in (4, 5):
        for group in (pair, [alone]):
            traffic(group, clock, np.random.default_rng(seed), 20)
            clock.t -= 20.0  # both groups see the same times
        clock.t += 20.0
        k = seed - 4
        assert pair[k].release(0, k)[0].tobytes() == alone.release(0, k)[0].tobytes()
    for silo in pair:
        silo.refresh()
    assert pair[0].agent.state_digest() == pair[1].agent.state_digest()
    # another silo's agent has another instance id and secret: the same model, counts and pending decisions
    for silo in pair:
        got, want = silo.agent, alone.agent
        assert got.state.gram.tobytes() == want.state.gram.tobytes()
        assert got.state.bias.tobytes() == want.state.bias.tobytes()
        assert got.counts == want.counts and sorted(got.pending) == sorted(want.pending)


def test_a_log_of_another_silo_is_refused_and_the_url_must_name_a_database(pg_url, tmp_path):
    clock = WallClock()
    replicas(pg_url, tmp_path, 1, clock)
    with pytest.raises(StoreError, match="another config, entry or silo"):
        ServingSilo(config(LDP, agents=4), tmp_path / "x", store=pg_url, now=clock)
    for url, words in [
        ("postgresql://u@127.0.0.1:5432", "one database per silo"),
        ("postgresql://u@db.example.com/silo0", "sslmode=verify-full"),
        ("mysql://u@127.0.0.1/silo0", "expected postgresql://"),
    ]:
        with pytest.raises(StoreError, match=words):
            ServingSilo(config(LDP), tmp_path / "y", store=url, now=clock)


class Counted:
    """A connection that records each statement it runs (the text of one message to the server)."""

    def __init__(self, db) -> None:  # type: ignore[no-untyped-def]
        self.db, self.statements = db, []

    def execute(self, sql, *args):  # type: ignore[no-untyped-def]
        self.statements.append(" ".join(sql.split()))
        return self.db.execute(sql, *args)

    def __getattr__(self, name):  # type: ignore[no-untyped-def]
        return getattr(self.db, name)


def test_requests_a_replica_takes_together_are_committed_together_each_refused_alone(pg_url, tmp_path):
    """Group commit (the service queues the decisions and rewards it reads together): one lock, one
    catch-up, one insert of every event and one commit, in two round trips (the lock with the
    catch-up, the insert with the commit); a refused request changes nothing and the others go on;
    the other replica then reads the events in their order."""
    clock, rng = WallClock(), np.random.default_rng(6)
    a, b = replicas(pg_url, tmp_path, 2, clock)
    first = a.decide(np.array(arms(rng)))[1]
    counted = Counted(a.store.db)
    a.store.db = counted
    steps = [
        a.decision(np.array(arms(rng))),
        a.rewarding(first, 0.5),
        a.rewarding(first.rsplit("-", 1)[0] + "-99", 0.5),  # no such decision: 404
        a.rewarding(first, 0.25),  # a second reward for it: 409
        a.decision(np.array(arms(rng))),
    ]
    out = a.write_many(steps)
    assert [type(x).__name__ for x in out] == ["tuple", "NoneType", "ServeError", "ServeError", "tuple"]
    assert [out[2].status, out[3].status] == [404, 409]  # type: ignore[union-attr]
    opening, events = counted.statements  # two messages
    assert opening.startswith("BEGIN; SELECT pg_advisory_xact_lock(") and "; SELECT m.value, e.seq" in opening
    assert events.startswith("INSERT INTO events") and events.endswith("; COMMIT")
    assert events.count("), (") == 2  # one statement for the three events (two decisions, a reward)
    assert [int(x[1].rsplit("-", 1)[1]) for x in (out[0], out[4])] == [1, 2]  # type: ignore[index]
    b.refresh()
    assert b.agent.counts["decisions"] == 3 and b.agent.counts["learned"] == 1
    assert [(e.seq, e.kind, e.number) for e in b.store.events_after(0)] == [
        (1, "decision", 0), (2, "decision", 1), (3, "reward", 0), (4, "decision", 2)
    ]  # fmt: skip


def test_a_context_id_postgresql_cannot_store_is_refused_before_it_reaches_the_log(pg_url, tmp_path):
    """A NUL in ``context_id``: PostgreSQL's text cannot hold it, and the statement that failed on it
    would fail every request committed with it (a group) and send the replica through a reload.  It is
    refused 400 at the boundary instead; the replica's log and agent are untouched."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from fedbandits.serve.http import Service
    from servehelp import AUTH, SYNC, TOKEN

    (silo,) = replicas(pg_url, tmp_path, 1, WallClock())
    client = TestClient(Service(silo, TOKEN, SYNC).app)
    rng = np.random.default_rng(8)
    before = (silo.store.rows("events"), silo.agent.state_digest())
    r = client.post("/v1/decisions", json={"features": arms(rng), "context_id": "a\0b"}, headers=AUTH)
    assert r.status_code == 400 and "without NUL" in r.json()["error"], r.text
    assert (silo.store.rows("events"), silo.agent.state_digest()) == before
    assert silo.broken is None and silo.recoveries == 0
    r = client.post("/v1/decisions", json={"features": arms(rng), "context_id": "ab"}, headers=AUTH)
    assert r.status_code == 200, r.text


def test_an_events_text_and_numbers_come_back_from_postgresql_exactly_as_written(pg_url, tmp_path):
    """A replica writes its events' values into the INSERT that goes with its COMMIT (no parameters):
    plain text (letters, digits, ``_.:-``) between quotes, any other text quoted by psycopg -- quotes,
    backslashes, SQL and non-ASCII come back as sent, nothing runs --
    and floats, integers and feature bytes exactly (compared with what a SQLite log stores)."""
    clock, rng = WallClock(), np.random.default_rng(9)
    (pg,) = replicas(pg_url, tmp_path, 1, clock)
    lite = ServingSilo(config(LDP), tmp_path / "lite", now=clock, expiry_seconds=1000.0)
    contexts = ["x'); DROP TABLE events; --", "back\\slash \\x00 '' \"", "ünï €", "%s %(a)s $1", "", "order-17:a_b.c"]
    for context in contexts:
        clock.t += 0.123456789
        features, value = np.array(arms(rng)) * np.pi, float(rng.uniform(-1, 1))  # full-precision floats
        for silo in (pg, lite):
            _, decision, _ = silo.decide(features, context)
            silo.reward(decision, value)
    rows, expected = pg.store.rows("events"), lite.store.rows("events")
    assert [r[6] for r in rows if r[2] == "decision"] == contexts
    assert [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in rows] == expected


def test_a_statement_without_parameters_runs_as_psycopg_runs_it_errors_and_types_included(pg_url):
    """The store's connection sends a statement without parameters past psycopg's cursors
    (:class:`fedbandits.serve.pgstore._Connection`): its last statement's rows come back as psycopg's
    cursor gives them, types included; an error result is psycopg's error, raised, and the
    connection goes on (after the transaction it failed is rolled back); a closed one says so."""
    import psycopg

    from fedbandits.serve.pgstore import PgStore

    store = PgStore(pg_url)
    query = "SELECT 2::bigint, 0.5::float8, 'é'::text, '\\x00ff'::bytea, NULL"
    with psycopg.connect(pg_url, autocommit=True) as plain:
        expected = plain.execute(query).fetchall()
    assert store.db.execute(f"BEGIN; SELECT 1; {query}").fetchall() == expected == [(2, 0.5, "é", b"\x00\xff", None)]
    store.db.execute("COMMIT")
    with pytest.raises(psycopg.errors.DivisionByZero):
        store.db.execute("BEGIN; SELECT 1 / 0")
    assert store.db.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
    store.db.execute("ROLLBACK")
    assert store.db.execute("SELECT 7").fetchone() == (7,)
    store.close()
    with pytest.raises(psycopg.OperationalError, match="closed"):
        store.db.execute("SELECT 7")
