"""Two replicas of one serving silo on PostgreSQL, as real processes on 127.0.0.1 (issue #48, items
3-4), under load: SIGKILLs of a replica, then of the PostgreSQL server itself.

One load generator per replica (as a load balancer would split the traffic); the server
(``fedbandits serve server``) reaches the silo through both replicas' URLs (comma-separated), so the
sync moves to the surviving replica when it finds the other gone.  Checked:

* a replica killed with SIGKILL (twice): the other keeps serving -- none of its requests is refused
  -- and keeps answering the sync rounds (rounds close while the killed one is down); the killed one
  restarts on the log and serves again;
* the PostgreSQL server killed with SIGKILL (server and backends) for two seconds: both replicas
  answer 503 in one line, then serve again by themselves once it is back (no restart);
* nothing acknowledged is lost, nothing is twice: every decision and every reward answered 200 is
  in the log exactly once (decision ids unique across replicas), a restarted replica has learned
  every logged reward, and every completed decision is in exactly one release -- the server's
  closed rounds hold exactly the rewards the log marks released.

Printed (``-s``): the seconds the sync had no replica after each kill, and the requests refused.
"""

from __future__ import annotations

import sqlite3
import time

import pytest

httpx = pytest.importorskip("httpx")
psycopg = pytest.importorskip("psycopg")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from fedbandits.serve.demo import start_silo, write_token  # noqa: E402
from servehelp import Load, one_silo_config, start_server  # noqa: E402

SYNC_SECONDS = 0.5


def closed_times(state: object) -> list[float]:
    """The times the server's closed rounds were recorded (its own log: coordinator.sqlite)."""
    db = sqlite3.connect(f"file:{state}/coordinator.sqlite?mode=ro", uri=True)
    try:
        return [float(t) for (t,) in db.execute("SELECT at FROM closed ORDER BY at")]
    except sqlite3.Error:
        return []
    finally:
        db.close()


@pytest.mark.slow
def test_replicas_survive_kill_9_of_a_replica_and_of_postgresql_losing_nothing_acknowledged(tmp_path, pg_url, postgres):
    config = one_silo_config(tmp_path, batch=100)
    tokens = (tmp_path / "traffic.token", tmp_path / "sync.token")
    token = write_token(tokens[0])
    write_token(tokens[1])
    extra = ["--sync-seconds", str(SYNC_SECONDS), "--store", pg_url]
    replicas = [start_silo(config, 0, "fed", tmp_path / f"r{i}", tokens, extra) for i in range(2)]
    ports = [int(r.url.rsplit(":", 1)[1]) for r in replicas]
    urls = ",".join(r.url for r in replicas)
    state = tmp_path / "server"
    server = start_server(config, [urls], state, tokens[1], SYNC_SECONDS, tmp_path / "server.log")
    loads = [Load(r.url, token, seed=7 + i) for i, r in enumerate(replicas)]
    for load in loads:
        load.thread.start()
    processes = [*(r.process for r in replicas), server]
    gaps = []
    try:
        for _ in range(2):  # replica 0 killed mid-traffic, down for 2 s, restarted on the log
            time.sleep(2.0)
            replicas[0].process.kill()
            killed, served = time.time(), len(loads[1].acked)
            time.sleep(2.0)
            assert len(loads[1].acked) > served + 10  # the other replica kept serving
            after = [t for t in closed_times(state) if t > killed]
            assert after, "no round closed while replica 0 was down"
            gaps.append(after[0] - killed)
            replicas[0] = start_silo(config, 0, "fed", tmp_path / "r0", tokens, extra, port=ports[0])
            processes.append(replicas[0].process)
        assert loads[1].failures == 0, loads[1].statuses  # nothing refused but what went to the killed one
        time.sleep(1.0)
        postgres.kill()  # the database server and its backends, SIGKILL
        time.sleep(1.0)
        for r in replicas:  # each replica answers 503 in one line while the log is gone
            got = httpx.post(r.url + "/v1/decisions", json={"features": [[1.0] * 5] * 10}, headers=load.client.headers)
            assert got.status_code == 503 and list(got.json()) == ["error"] and "\n" not in got.text, got.text
        time.sleep(1.0)
        postgres.start()  # crash recovery from the WAL
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all(
            httpx.get(r.url + "/healthz").status_code == 200 for r in replicas
        ):
            time.sleep(0.2)
        served = [len(load.acked) for load in loads]
        time.sleep(2.0)
        again = [(len(load.acked) - n, dict(load.statuses)) for load, n in zip(loads, served, strict=True)]
        assert all(more > 10 for more, _ in again), again  # both serve again
        for load in loads:
            load.stopped.set()
            load.thread.join()
        time.sleep(3 * SYNC_SECONDS)  # a last round takes the last rewards
        server.stop()
    finally:
        for load in loads:
            load.stopped.set()
        for process in processes:
            process.stop()
    print(f"\nsync without a replica after each SIGKILL: {[round(g, 2) for g in gaps]} s; "
          f"refused: replica 0 {loads[0].statuses}, replica 1 {loads[1].statuses}")  # fmt: skip
    check_the_log(pg_url, loads, state, config, tmp_path, tokens, token, extra)


def check_the_log(pg_url, loads, state, config, tmp_path, tokens, token, extra) -> None:  # type: ignore[no-untyped-def]
    with psycopg.connect(pg_url) as db:
        decisions = [n for (n,) in db.execute("SELECT number FROM events WHERE kind = 'decision'").fetchall()]
        counted = db.execute("SELECT number, COUNT(*) FROM events WHERE kind = 'reward' GROUP BY number")
        rewards = dict(counted.fetchall())
        released = db.execute("SELECT COUNT(*) FROM events WHERE kind = 'reward' AND release IS NOT NULL").fetchone()[0]
        made = db.execute("SELECT epoch, round FROM releases ORDER BY epoch, round").fetchall()
    number = lambda d: int(d.rsplit("-", 1)[1])  # noqa: E731
    decided = [number(d) for load in loads for d in load.decided]
    acked = [number(d) for load in loads for d in load.acked]
    assert len(set(decided)) == len(decided) and len(set(decisions)) == len(decisions)  # unique across replicas
    assert set(decided) <= set(decisions)  # every decision answered is logged, once
    assert all(rewards.get(n) == 1 for n in acked)  # every reward answered is logged, once
    # a restarted replica learned every logged reward once (one committed but not answered counts too)
    final = start_silo(config, 0, "fed", tmp_path / "final", tokens, extra)
    try:
        status = httpx.get(final.url + "/v1/status", headers={"Authorization": f"Bearer {token}"}).json()
    finally:
        final.process.stop()
    assert status["rewarded"] == len(rewards) >= len(acked)
    # every completed decision in exactly one release: the closed rounds hold exactly what the log marks released
    closed = sqlite3.connect(state / "coordinator.sqlite")
    assert closed.execute("SELECT SUM(samples) FROM closed").fetchone()[0] == released
    assert status["batch_samples"] == len(rewards) - released
    assert closed.execute("SELECT epoch, round FROM closed ORDER BY epoch, round").fetchall() == made
