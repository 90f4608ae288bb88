"""``fedbandits serve migrate`` (issue #48, item 6): a silo's SQLite log moved to PostgreSQL in one
command, and back; a silo opened on the copy replays to the same agent, bit for bit, and serves on.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedbandits.cli import main
from fedbandits.federation.processes import hold_lock
from fedbandits.online import Aggregator
from fedbandits.serve.pgstore import PgStore
from fedbandits.serve.silo import ServingSilo
from fedbandits.serve.store import TABLES, Store
from servehelp import WallClock, arms, config

pytest.importorskip("psycopg")

CONFIG = config()


def history(folder, clock: WallClock) -> ServingSilo:  # type: ignore[no-untyped-def]
    """A silo with every kind of row: decisions, rewards, a late one, two releases, a prefix, pending ones."""
    silo = ServingSilo(CONFIG, folder, now=clock, expiry_seconds=50.0)
    rng = np.random.default_rng(9)
    ids = []
    for i in range(30):
        clock.t += 1.0
        ids.append(silo.decide(np.array(arms(rng)), context_id=f"c{i}")[1])
        if i % 3:
            silo.reward(ids[-1], float(rng.uniform(-1, 1)))
    clock.t += 60.0  # ids[0] expires: its reward is late (refused, counted, logged)
    with pytest.raises(Exception, match="expired"):
        silo.reward(ids[0], 0.5)
    payload, _ = silo.release(0, 0)
    silo.adopt(0, 0, Aggregator.from_config(CONFIG).aggregate([payload] * 3))
    for _ in range(5):
        clock.t += 1.0
        silo.reward(silo.decide(np.array(arms(rng)))[1], 0.25)
    silo.release(0, 1)
    clock.t += 1.0
    silo.decide(np.array(arms(rng)))  # pending at the move
    return silo


def test_a_sqlite_log_moves_to_postgresql_and_back_and_replays_to_the_same_agent(tmp_path, pg_url, capsys):
    clock = WallClock()
    original = history(tmp_path / "sqlite", clock)
    digest = original.agent.state_digest()
    original.close()
    assert main(["serve", "migrate", "--from", str(tmp_path / "sqlite"), "--to", pg_url]) == 0
    out = capsys.readouterr().out
    assert "copied 4 meta, 62 events, 2 releases, 1 prefixes, 1 snapshots" in out and "***" in out, out
    source, copy = Store(tmp_path / "sqlite" / "events.sqlite"), PgStore(pg_url)
    for table in TABLES:  # every row, with its numbers
        assert source.rows(table) == copy.rows(table), table
    moved = ServingSilo(CONFIG, tmp_path / "replica", store=pg_url, now=clock, expiry_seconds=50.0)
    assert moved.agent.state_digest() == digest
    assert moved.release(0, 1)[0].tobytes() == source.release(0, 1).payload.tobytes()  # a retried round: same bytes
    rng = np.random.default_rng(10)
    moved.reward(moved.decide(np.array(arms(rng)))[1], 0.5)  # and it serves on, numbering after the copy
    assert moved.store.last_seq() == 64 and moved.release(0, 2)[1] == 1
    moved.close()
    # back (fedbandits evaluate reads SQLite logs): the same agent again
    assert main(["serve", "migrate", "--from", pg_url, "--to", str(tmp_path / "back")]) == 0
    again = ServingSilo(CONFIG, tmp_path / "back", now=clock, expiry_seconds=50.0)
    reopened = ServingSilo(CONFIG, tmp_path / "replica", store=pg_url, now=clock, expiry_seconds=50.0)
    assert again.agent.state_digest() == reopened.agent.state_digest()


def test_a_migration_refuses_in_one_line_and_changes_nothing(tmp_path, pg_url, capsys):
    clock = WallClock()
    history(tmp_path / "sqlite", clock).close()
    assert main(["serve", "migrate", "--from", str(tmp_path / "sqlite"), "--to", pg_url]) == 0
    before = PgStore(pg_url).rows("events")
    cases = [
        (["--from", str(tmp_path / "sqlite"), "--to", pg_url], "not empty"),  # a second copy into the same log
        (["--from", str(tmp_path / "nowhere"), "--to", pg_url], "no event log here"),
        (["--from", str(tmp_path / "sqlite"), "--to", str(tmp_path / "sqlite")], "already here"),
        (["--from", str(tmp_path / "sqlite"), "--to", "mysql://u@h/db"], "a state folder or a postgresql:// URL"),
    ]
    for argv, words in cases:
        capsys.readouterr()
        assert main(["serve", "migrate", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert words in err and "\n" not in err, err
    with hold_lock(tmp_path / "sqlite", "serving silo"):  # its silo is running
        assert main(["serve", "migrate", "--from", str(tmp_path / "sqlite"), "--to", str(tmp_path / "x")]) == 2
        assert "stop it before migrating" in capsys.readouterr().err
    assert PgStore(pg_url).rows("events") == before and not (tmp_path / "x" / "events.sqlite").exists()
