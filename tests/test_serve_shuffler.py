"""Serving silos with ``sdp-amplification`` and real processes on 127.0.0.1: the deployment's
shuffler party (``fedbandits deploy shuffler``, mutual TLS with its own CA), twelve ``fedbandits
serve silo --shuffler`` (Lemma F.2 needs more than 11 silos) and ``fedbandits serve server
--shuffler``: rounds close with the shuffler's batches, no release reaches the server, and every
completed decision is in exactly one closed round.  About a minute (CI's serve step).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("starlette")
pytest.importorskip("cryptography")

from fedbandits.federation.certs import create_shuffler_credentials  # noqa: E402
from fedbandits.federation.processes import free_port, start_process, wait_shuffler  # noqa: E402
from fedbandits.serve.demo import start_silo, write_token  # noqa: E402
from servehelp import start_server  # noqa: E402

M = 12


@pytest.mark.slow
def test_serving_silos_release_only_through_the_shuffler(tmp_path):
    config = tmp_path / "serve.toml"
    config.write_text(
        "[experiment]\nseed = 5\nhorizon = 100000\n"
        f'[environment]\nname = "gaussian-sphere"\nagents = {M}\narms = 5\ndim = 4\n'
        '[[algorithms]]\nname = "fedlinucb"\nlabel = "fed"\nbatch = 1000\nprotocol = "sdp-amplification"\n'
        "epsilon = 1.0\ndelta = 1e-5\n"
    )
    creds = create_shuffler_credentials(tmp_path / "hop", M)
    address = f"127.0.0.1:{free_port()}"
    cmd = [
        sys.executable, "-m", "fedbandits.cli", "deploy", "shuffler", "--config", str(config), "--algorithm", "fed",
        "--listen", address, "--ca", str(creds / "shuffler-ca.pem"), "--cert", str(creds / "shuffler.pem"),
        "--key", str(creds / "shuffler.key"), "--state-dir", str(tmp_path / "shuffler"),
    ]  # fmt: skip
    processes = [start_process("shuffler", cmd, tmp_path / "shuffler.log", dict(os.environ))]
    try:
        wait_shuffler(
            address, creds / "shuffler-ca.pem", creds / "server-client.pem", creds / "server-client.key", 30,
            processes[0],
        )  # fmt: skip
        tokens = (tmp_path / "traffic.token", tmp_path / "sync.token")
        token = write_token(tokens[0])
        write_token(tokens[1])
        silos = []
        for i in range(M):
            hop = ["--shuffler", address, "--shuffler-ca", str(creds / "shuffler-ca.pem")]
            hop += ["--shuffler-cert", str(creds / f"silo-{i}-client.pem")]
            hop += ["--shuffler-key", str(creds / f"silo-{i}-client.key")]
            silos.append(start_silo(config, i, "fed", tmp_path, tokens, ["--sync-seconds", "1", *hop]))
            processes.append(silos[-1].process)
        client = httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=10.0)
        rng = np.random.default_rng(3)

        def traffic(n):
            for silo in silos:
                for _ in range(n):
                    x = rng.standard_normal((5, 4))
                    x /= np.linalg.norm(x, axis=1, keepdims=True)
                    d = client.post(silo.url + "/v1/decisions", json={"features": x.tolist()}).json()
                    r = client.post(silo.url + "/v1/rewards", json={"decision_id": d["decision_id"], "reward": 0.2})
                    assert r.status_code == 200, r.text

        traffic(3)
        hop = ("--shuffler", address, "--shuffler-ca", str(creds / "shuffler-ca.pem"))
        hop += ("--shuffler-cert", str(creds / "server-client.pem"), "--shuffler-key", str(creds / "server-client.key"))
        server = start_server(
            config, [s.url for s in silos], tmp_path / "server", tokens[1], 1.0, tmp_path / "server.log", hop
        )
        processes.append(server)
        db_path = tmp_path / "server" / "coordinator.sqlite"

        def closed():  # rounds closed and the completed decisions they hold
            try:
                got = sqlite3.connect(db_path).execute("SELECT COUNT(*), SUM(samples) FROM closed").fetchone()
            except sqlite3.Error:
                return 0, 0
            return got[0], got[1] or 0

        def wait_for(done):
            deadline = time.monotonic() + 60
            while not done(*closed()) and time.monotonic() < deadline:
                time.sleep(0.5)
            assert done(*closed()), (tmp_path / "server.log").read_text()[-2000:]

        wait_for(lambda rounds, samples: rounds >= 2 and samples == 3 * M)
        traffic(2)
        wait_for(lambda rounds, samples: samples == 5 * M)
        versions = {client.get(s.url + "/v1/status").json()["model_version"] for s in silos}
        assert None not in versions
        server.stop()
    finally:
        for process in processes:
            process.stop()
    db = sqlite3.connect(tmp_path / "server" / "coordinator.sqlite")
    # no release reached the server: it holds acknowledgements, and the shuffler's batches
    assert {bytes(p) for (p,) in db.execute("SELECT payload FROM payloads")} == {b""}
    rounds = db.execute("SELECT epoch, round FROM closed ORDER BY epoch, round").fetchall()
    batches = dict(((e, r), b) for e, r, b in db.execute("SELECT epoch, round, batch FROM shuffled"))
    released = 0
    for i in range(M):
        log = sqlite3.connect(tmp_path / f"fed-{i}" / "events.sqlite")
        released += log.execute("SELECT COUNT(*) FROM events WHERE kind = 'reward' AND release IS NOT NULL").fetchone()[
            0
        ]
        made = log.execute("SELECT epoch, round, payload FROM releases ORDER BY epoch, round").fetchall()
        for epoch, round_, payload in made:  # each closed release is one row of its round's batch
            if (epoch, round_) in rounds:
                rows = np.frombuffer(batches[(epoch, round_)], dtype="<f8").reshape(-1, len(payload) // 8)
                mine = np.frombuffer(payload, dtype="<f8")
                assert sum(np.array_equal(row, mine) for row in rows) == 1
    # every completed decision in exactly one closed round (5 per silo; a later open round holds none)
    assert db.execute("SELECT SUM(samples) FROM closed").fetchone()[0] == released == 5 * M
