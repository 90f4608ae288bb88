"""Decisions a silo can be evaluated from later (issue #46): every decision's arm and propensity in the
answer and in the event log, its candidates too when the operator opts in; an earlier log migrates."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("starlette")

from fedbandits.cli import main
from fedbandits.evaluation.fixed import evaluate
from fedbandits.evaluation.serve_log import read_serve_log
from fedbandits.serve.store import SCHEMA, Store
from test_serve import AUTH, LDP, arms, config, make


def _logged(silo: object) -> list[tuple[int, float, bytes | None]]:
    rows = silo.store.db.execute(  # type: ignore[attr-defined]
        "SELECT arm, propensity, candidates FROM events WHERE kind = 'decision' ORDER BY seq"
    ).fetchall()
    return [(int(a), float(p), c) for a, p, c in rows]


def test_a_ucb_decision_states_propensity_one_and_logs_its_arm(tmp_path: Path) -> None:
    silo, client = make(tmp_path)
    answer = client.post("/v1/decisions", json={"features": arms(np.random.default_rng(0))}, headers=AUTH).json()
    assert answer["propensity"] == 1.0
    assert _logged(silo) == [(answer["arm"], 1.0, None)]  # candidates: not kept unless opted in


def test_a_randomized_decision_logs_its_propensity_and_opted_in_candidates(tmp_path: Path) -> None:
    cfg = config({**LDP, "exploration": "softmax", "temperature": 0.5})
    silo, client = make(tmp_path, cfg=cfg, log_candidates=True)
    rng = np.random.default_rng(1)
    shown = [arms(rng) for _ in range(20)]
    answers = [client.post("/v1/decisions", json={"features": f}, headers=AUTH).json() for f in shown]
    logged = _logged(silo)
    assert [(a["arm"], a["propensity"]) for a in answers] == [(arm, p) for arm, p, _ in logged]
    assert all(0 < p < 1 for _, p, _ in logged) and len({a["arm"] for a in answers}) > 1
    for features, (_, _, blob) in zip(shown, logged, strict=True):
        assert np.array_equal(np.frombuffer(blob, dtype=np.float64).reshape(5, -1), np.array(features))


def test_an_event_log_of_schema_2_gains_the_decision_columns(tmp_path: Path) -> None:
    """A log written before propensities (schema 2) opens: the columns are added, its rows kept (an
    earlier decision was chosen by UCB: its propensity is 1, stored as unknown, NULL)."""
    path = tmp_path / "events.sqlite"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE events (seq INTEGER PRIMARY KEY, at REAL NOT NULL, kind TEXT NOT NULL, "
        "number INTEGER NOT NULL, x BLOB, value REAL, context TEXT, release INTEGER, user TEXT);"
        "INSERT INTO meta VALUES ('schema', '2');"
        "INSERT INTO events (at, kind, number, value) VALUES (1.0, 'reward', 0, 0.5);"
    )
    db.commit()
    db.close()
    store = Store(path)
    assert store.meta("schema") == str(SCHEMA) == "3"
    assert store.db.execute("SELECT arm, propensity, candidates, value FROM events").fetchall() == [
        (None, None, None, 0.5)
    ]
    store.close()


def test_a_silos_own_log_is_evaluated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A silo choosing by softmax with its candidates logged: ``fedbandits evaluate --serve-logs`` reads
    its rewarded decisions (the unrewarded counted and left out) and replays a config on them; a policy
    that takes every logged arm has IPS mean(r / p), the logged propensities read back."""
    cfg = config({**LDP, "exploration": "softmax", "temperature": 0.5})
    silo, client = make(tmp_path, cfg=cfg, log_candidates=True)
    rng = np.random.default_rng(2)
    for i in range(60):
        answer = client.post("/v1/decisions", json={"features": arms(rng)}, headers=AUTH).json()
        if i % 6:
            client.post("/v1/rewards", json={"decision_id": answer["decision_id"], "reward": 0.3}, headers=AUTH)
    silo.close()
    read = read_serve_log(tmp_path / "silo")
    assert (read.log.n, read.unrewarded, read.without_candidates) == (50, 10, 0)
    assert (read.log.n_arms, read.log.dim) == (5, 4) and 0 < read.log.propensities.max() < 1
    own = evaluate(read.log, np.eye(5)[read.log.actions], estimators=("ips",))[0]
    assert own.value == pytest.approx(read.log.rewards.mean() * np.mean(1 / read.log.propensities))
    toml = tmp_path / "c.toml"
    toml.write_text('[experiment]\nhorizon = 40\n\n[[algorithms]]\nname = "linucb-independent"\n')
    assert main(["evaluate", str(toml), "--serve-logs", str(tmp_path / "silo")]) == 0
    out = capsys.readouterr().out
    assert "50 rewarded decisions with their candidates (10 unrewarded, 0 without candidates: left out)" in out
    assert "linucb-independent" in out.splitlines()[-1]


def test_a_log_without_candidates_cannot_be_evaluated(tmp_path: Path) -> None:
    silo, client = make(tmp_path)
    answer = client.post("/v1/decisions", json={"features": arms(np.random.default_rng(0))}, headers=AUTH).json()
    client.post("/v1/rewards", json={"decision_id": answer["decision_id"], "reward": 0.3}, headers=AUTH)
    silo.close()
    with pytest.raises(ValueError, match=r"events.sqlite: no rewarded decision with its candidates \(1 decisions"):
        read_serve_log(tmp_path / "silo")
