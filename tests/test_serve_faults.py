"""`fedbandits serve` under faults, with real processes on 127.0.0.1 (issue "Live decisions, part 2"):

* a serving silo killed with SIGKILL under load and restarted on its event log: every reward it
  acknowledged is there exactly once, and every completed decision is in at most one release (the
  coordinator's closed rounds hold exactly the rewards the silo's log marks released);
* the server (``fedbandits serve server``) killed with SIGKILL for several rounds: the silo keeps
  serving and says so; when the server is back its rounds resume from its log, and every release
  the silo made is closed exactly once.
"""

from __future__ import annotations

import sqlite3
import time

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from fedbandits.serve.demo import start_silo, write_token  # noqa: E402
from servehelp import Load, one_silo_config, start_server  # noqa: E402

SYNC_SECONDS = 0.5


@pytest.mark.slow
def test_kill_9_under_load_loses_no_acknowledged_reward_and_releases_nothing_twice(tmp_path):
    config = one_silo_config(tmp_path, batch=100)
    tokens = (tmp_path / "traffic.token", tmp_path / "sync.token")
    token = write_token(tokens[0])
    write_token(tokens[1])
    extra = ["--sync-seconds", str(SYNC_SECONDS)]
    silo = start_silo(config, 0, "fed", tmp_path, tokens, extra)
    port = int(silo.url.rsplit(":", 1)[1])
    server_log = tmp_path / "server.log"
    server = start_server(config, [silo.url], tmp_path / "server", tokens[1], SYNC_SECONDS, server_log)
    load = Load(silo.url, token)
    load.thread.start()
    processes = [silo.process, server]
    try:
        for _ in range(3):  # three SIGKILLs, each mid-traffic and between sync rounds
            time.sleep(1.5)
            silo.process.kill()
            before = len(load.acked)
            silo = start_silo(config, 0, "fed", tmp_path, tokens, extra, port=port)
            processes.append(silo.process)
        time.sleep(1.5)
        # the server is killed for several rounds: the silo keeps serving and says the server is unreachable
        server.kill()
        version = load.client.get(silo.url + "/v1/status").json()["model_version"]
        served = len(load.acked)
        time.sleep(4 * SYNC_SECONDS)
        status = load.client.get(silo.url + "/v1/status").json()
        assert status["syncing"].startswith("server unreachable"), status["syncing"]
        assert status["model_version"] == version and len(load.acked) > served + 10
        # back: it resumes its rounds from its log, and the silo adopts new prefixes
        server = start_server(config, [silo.url], tmp_path / "server", tokens[1], SYNC_SECONDS, server_log)
        processes.append(server)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            status = load.client.get(silo.url + "/v1/status").json()
            if status["syncing"] == "active" and status["model_version"] != version:
                break
            time.sleep(0.2)
        assert status["syncing"] == "active" and status["model_version"] != version, status
        load.stopped.set()
        load.thread.join()
        time.sleep(2 * SYNC_SECONDS)  # a last round takes the last rewards
        server.stop()  # SIGTERM: the server ends after its current tick
    finally:
        load.stopped.set()
        for process in processes:
            process.stop()
    assert before > 0 and load.failures > 0  # the kills happened under traffic
    # every acknowledged reward is in the log exactly once (the unique index allows no second one)
    db = sqlite3.connect(tmp_path / "fed-0" / "events.sqlite")
    logged = dict(db.execute("SELECT number, COUNT(*) FROM events WHERE kind = 'reward' GROUP BY number").fetchall())
    acked = [int(d.rsplit("-", 1)[1]) for d in load.acked]
    assert len(set(acked)) == len(acked) and all(logged.get(n) == 1 for n in acked)
    # the restarted silo learned every logged reward once (a reward committed but not answered counts too)
    final = start_silo(config, 0, "fed", tmp_path, tokens, extra)
    try:
        status = httpx.get(final.url + "/v1/status", headers={"Authorization": f"Bearer {token}"}).json()
    finally:
        final.process.stop()
    assert status["rewarded"] == len(logged) >= len(acked)
    # released exactly once: the server's closed rounds hold exactly the rewards the log marks released,
    # and the ones not yet released wait in the next batch
    released = db.execute("SELECT COUNT(*) FROM events WHERE kind = 'reward' AND release IS NOT NULL").fetchone()[0]
    closed = sqlite3.connect(tmp_path / "server" / "coordinator.sqlite")
    assert closed.execute("SELECT SUM(samples) FROM closed").fetchone()[0] == released
    assert status["batch_samples"] == len(logged) - released
    # every release the silo made was closed once, across the server's two lives and the silo's four
    made = db.execute("SELECT epoch, round FROM releases ORDER BY epoch, round").fetchall()
    assert closed.execute("SELECT epoch, round FROM closed ORDER BY epoch, round").fetchall() == made
