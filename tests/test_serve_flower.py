"""Serving silos synced through the Flower deployment (issue "Live decisions, part 2", item 2), with
real processes on 127.0.0.1: ``fedbandits serve server --flower`` (a SuperLink with TLS and SuperNode
authentication, the silos' keys registered, the serving app submitted; its ServerApp runs the
coordinator) and three ``fedbandits serve silo --superlink`` (each with its SuperNode, whose
ClientApp hands the federation's requests to the silo's service).

* ``ldp`` under traffic: rounds close, every silo adopts the federation's prefixes; the whole server
  side is killed with SIGKILL (the command, its SuperLink and ServerApp) for several rounds while
  the silos keep serving and say so; restarted on the same work folder it resumes its rounds, and
  every completed decision is in exactly one closed round;
* ``distributed-dp``: the secure aggregation set-up (keys, roster, shares) runs over Flower, then
  rounds close; what the coordinator holds is each silo's stored (masked) release, byte for byte
  (the in-process tests check the masking itself: tests/test_serve.py).

Needs the deploy and serve extras (CI's deployment step); about 3 minutes.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import threading
import time

import numpy as np
import pytest

pytest.importorskip("flwr")
httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")

from fedbandits.federation.certs import create_signing_credentials  # noqa: E402
from fedbandits.federation.processes import free_port, processes_under  # noqa: E402
from fedbandits.serve.demo import start_flower_server, start_silo, write_token  # noqa: E402

pytestmark = pytest.mark.slow

SYNC = 2.0  # seconds between the server's ticks (a tick over Flower takes a few: a ClientApp process per message)


def three_silo_config(folder, protocol):
    """3 silos (d = 4, K = 5), K = horizon // batch = 100 releases per budget epoch."""
    path = folder / "serve.toml"
    path.write_text(
        "[experiment]\nseed = 3\nhorizon = 10000\n"
        '[environment]\nname = "gaussian-sphere"\nagents = 3\narms = 5\ndim = 4\n'
        f'[[algorithms]]\nname = "fedlinucb"\nlabel = "fed"\nbatch = 100\nprotocol = "{protocol}"\n'
        "epsilon = 1.0\ndelta = 1e-5\n"
    )
    return path


class Load(threading.Thread):
    """One user at a time on a silo: a decision, then its reward; counts what was acknowledged."""

    def __init__(self, url, token, seed):
        super().__init__(daemon=True)
        self.url = url
        self.client = httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=5.0)
        self.rng = np.random.default_rng(seed)
        self.acked = 0
        self.failures = 0
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.is_set():
            x = self.rng.standard_normal((5, 4))
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            try:
                d = self.client.post(self.url + "/v1/decisions", json={"features": x.tolist()})
                r = self.client.post(
                    self.url + "/v1/rewards", json={"decision_id": d.json()["decision_id"], "reward": 0.3}
                )
                self.acked += r.status_code == 200
                self.failures += r.status_code != 200
            except (httpx.HTTPError, KeyError, ValueError):
                self.failures += 1
            time.sleep(0.05)


def federation(tmp_path, protocol, sync=SYNC):
    config = three_silo_config(tmp_path, protocol)
    tokens = (tmp_path / "traffic.token", tmp_path / "sync.token")
    token = write_token(tokens[0])
    write_token(tokens[1])
    view = write_token(tmp_path / "view.token")
    port = free_port()
    server, link = start_flower_server(config, tmp_path, 3, port, sync_seconds=sync)
    certs = tmp_path / "certs"
    ca = str(certs / "ca.pem")
    if protocol == "distributed-dp":  # each silo signs its secure-aggregation keys
        create_signing_credentials(certs, 3)
    silos = []
    for i in range(3):
        key = str(certs / f"silo-{i}")
        extra = ["--sync-seconds", str(sync), "--superlink", link, "--superlink-ca", ca, "--node-key", key]
        if protocol == "distributed-dp":
            extra += ["--signing-key", str(certs / f"silo-{i}-signing.key")]
            extra += [
                "--signing-cert",
                str(certs / f"silo-{i}-signing.pem"),
                "--signing-ca",
                str(certs / "signing-ca.pem"),
            ]
        silos.append(start_silo(config, i, "fed", tmp_path, tokens, extra))
    return config, token, view, port, server, link, silos


def status(url, token):
    return httpx.get(url + "/v1/status", headers={"Authorization": f"Bearer {token}"}, timeout=10.0).json()


def wait_for(what, check, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"{what} within {seconds} s")


def rounds_closed(port, view):
    try:
        return status(f"http://127.0.0.1:{port}", view).get("rounds_closed", 0)
    except (httpx.HTTPError, ValueError):
        return 0


def test_ldp_rounds_over_flower_survive_a_server_crash_and_release_every_decision_once(tmp_path):
    config, token, view, port, server, link, silos = federation(tmp_path, "ldp")
    loads = [Load(s.url, token, seed=i) for i, s in enumerate(silos)]
    processes = [server] + [s.process for s in silos]
    try:
        for load in loads:
            load.start()
        wait_for("3 rounds closed", lambda: rounds_closed(port, view) >= 3, 150)
        wait_for(
            "every silo on a federation prefix",
            lambda: all(status(s.url, token)["model_version"] for s in silos),
            60,
        )
        # the whole server side dies (the command, its SuperLink and ServerApp): no goodbye to anyone
        server.kill()
        wait_for("no process of the server side left", lambda: not processes_under(tmp_path / "server" / "home"), 10)
        # read after the server side is gone: a round in flight at the kill may still have been adopted
        versions = [status(s.url, token)["model_version"] for s in silos]
        served = [load.acked for load in loads]
        time.sleep(6 * SYNC)
        for s, load, before, version in zip(silos, loads, served, versions, strict=True):
            now = status(s.url, token)
            assert now["syncing"].startswith("server unreachable"), now["syncing"]
            assert now["model_version"] == version and load.acked > before + 10  # serving on its last prefix
        closed_before = rounds_closed_in_log(tmp_path)
        server, _ = start_flower_server(config, tmp_path, 3, port, sync_seconds=SYNC, link=link)
        processes.append(server)
        wait_for("rounds resumed", lambda: rounds_closed(port, view) >= closed_before + 2, 180)
        wait_for(
            "every silo on a newer prefix",
            lambda: all(
                status(s.url, token)["model_version"] not in (None, v) for s, v in zip(silos, versions, strict=True)
            ),
            60,
        )
        for load in loads:
            load.stopped.set()
            load.join()
        # a last round takes the last rewards
        last = rounds_closed(port, view)
        wait_for("a round after the traffic", lambda: rounds_closed(port, view) >= last + 2, 60)
    finally:
        for load in loads:
            load.stopped.set()
        for process in processes:
            process.stop()
    assert all(load.failures == 0 for load in loads)  # the crash never reached the silos' users
    # every completed decision in exactly one closed round: per silo, the rewards its log marks released
    # are the samples it sent, and the coordinator closed exactly the rounds each silo released
    coordinator = sqlite3.connect(tmp_path / "server" / "state" / "server" / "coordinator.sqlite")
    closed = coordinator.execute("SELECT epoch, round FROM closed ORDER BY epoch, round").fetchall()
    released_total = 0
    for i in range(3):
        log = sqlite3.connect(tmp_path / f"fed-{i}" / "events.sqlite")
        released = log.execute("SELECT COUNT(*) FROM events WHERE kind = 'reward' AND release IS NOT NULL").fetchone()
        sent = coordinator.execute("SELECT SUM(samples) FROM payloads WHERE silo = ?", (i,)).fetchone()
        assert released[0] == sent[0] > 0
        released_total += released[0]
        made = log.execute("SELECT epoch, round FROM releases ORDER BY epoch, round").fetchall()
        assert made[: len(closed)] == closed and len(made) <= len(closed) + 1  # at most the open round more
    assert coordinator.execute("SELECT SUM(samples) FROM closed").fetchone()[0] <= released_total


def rounds_closed_in_log(tmp_path):
    db = sqlite3.connect(tmp_path / "server" / "state" / "server" / "coordinator.sqlite")
    return db.execute("SELECT COUNT(*) FROM closed").fetchone()[0]


def test_distributed_dp_sets_up_secure_aggregation_over_flower(tmp_path):
    _, token, view, port, server, _, silos = federation(tmp_path, "distributed-dp")
    processes = [server] + [s.process for s in silos]
    loads = [Load(s.url, token, seed=10 + i) for i, s in enumerate(silos)]
    try:
        for load in loads:
            load.start()
        wait_for("2 rounds closed", lambda: rounds_closed(port, view) >= 2, 180)
        assert status(f"http://127.0.0.1:{port}", view)["secure_aggregation"] == "set up"
        wait_for(
            "every silo on a federation prefix", lambda: all(status(s.url, token)["model_version"] for s in silos), 60
        )
    finally:
        for load in loads:
            load.stopped.set()
        for process in processes:
            process.stop()
    # the coordinator holds exactly what each silo released: its stored (masked) residues, byte for byte
    coordinator = sqlite3.connect(tmp_path / "server" / "state" / "server" / "coordinator.sqlite")
    rows = coordinator.execute("SELECT silo, epoch, round, message FROM masked WHERE message IS NOT NULL").fetchall()
    assert rows
    for silo, epoch, round_, message in rows:
        payload = base64.b64decode(json.loads(message)["payload"])
        log = sqlite3.connect(tmp_path / f"fed-{silo}" / "events.sqlite")
        stored = log.execute("SELECT payload FROM releases WHERE epoch = ? AND round = ?", (epoch, round_)).fetchone()
        assert stored is not None and bytes(stored[0]) == bytes(payload)
