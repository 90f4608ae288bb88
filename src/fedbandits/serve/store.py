"""A serving silo's event log: one SQLite database (WAL) in the silo's state folder.

Every event the service acknowledges is a row here before the answer leaves: a decision (its
number, the chosen arm and its features, the probability with which it was chosen, its wall-clock
time, and every candidate's features when the operator opts in: a log ``fedbandits evaluate`` can
read), a reward (the decision's number, the
value; at most one per decision: a unique index), a late reward (refused, counted), a release
(the payload exactly as sent, so a retried round gets the same bytes and the noise is never
redrawn) and a prefix adopted.  At each release and each adoption the agent's whole state is
stored as a snapshot in the same transaction, tagged with the last event it includes; a restart
loads the newest snapshot and replays the events after it (:mod:`fedbandits.serve.silo`).

Durability: ``synchronous = NORMAL`` in WAL mode (the default, ``durability = "process"``) keeps
every committed transaction through a crash of the process (``kill -9``); a power cut or an
operating-system crash can lose the last transactions.  ``durability = "fsync"`` (``FULL``)
survives those too, at the price of an fsync per event.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedbandits.serve.options import DURABILITY

#: the log's schema version; a database of another version is refused, but for versions 1 and 2,
#: which are migrated in place (2: a decision's user key, for user-level privacy; 3: a decision's arm,
#: its propensity and, when the operator opts in, its candidates' features, for off-policy evaluation)
SCHEMA = 3
#: the columns each version added to ``events`` (a migration adds those a log lacks)
_ADDED = (("user", "TEXT"), ("arm", "INTEGER"), ("propensity", "REAL"), ("candidates", "BLOB"))

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY, at REAL NOT NULL, kind TEXT NOT NULL, number INTEGER NOT NULL,
    x BLOB, value REAL, context TEXT, release INTEGER, user TEXT, arm INTEGER, propensity REAL, candidates BLOB
);
CREATE UNIQUE INDEX IF NOT EXISTS one_reward ON events(number) WHERE kind = 'reward';
CREATE TABLE IF NOT EXISTS releases (
    id INTEGER PRIMARY KEY, epoch INTEGER NOT NULL, round INTEGER NOT NULL, at REAL NOT NULL,
    payload BLOB NOT NULL, dtype TEXT NOT NULL, samples INTEGER NOT NULL, UNIQUE (epoch, round)
);
CREATE TABLE IF NOT EXISTS prefixes (
    id INTEGER PRIMARY KEY, epoch INTEGER NOT NULL, round INTEGER NOT NULL, at REAL NOT NULL,
    UNIQUE (epoch, round)
);
CREATE TABLE IF NOT EXISTS snapshots (event_seq INTEGER PRIMARY KEY, at REAL NOT NULL, state BLOB NOT NULL);
"""


#: every table of the log and its columns, in the order a migration copies them (fedbandits.serve.migrate)
TABLES = {
    "meta": ("key", "value"),
    "events": (
        "seq",
        "at",
        "kind",
        "number",
        "x",
        "value",
        "context",
        "release",
        '"user"',
        "arm",
        "propensity",
        "candidates",
    ),
    "releases": ("id", "epoch", "round", "at", "payload", "dtype", "samples"),
    "prefixes": ("id", "epoch", "round", "at"),
    "snapshots": ("event_seq", "at", "state"),
}


#: the columns add_event writes: all but the event's number (``seq``) and the release that holds it
EVENT_COLUMNS = TABLES["events"][1:7] + TABLES["events"][8:]


class StoreError(ValueError):
    """A state folder that cannot be used (another schema, another silo's log); nothing was changed."""


@dataclass(frozen=True)
class Event:
    seq: int
    at: float
    kind: str  # "decision", "reward" or "late"
    number: int
    x: bytes | None
    value: float | None
    user: str | None = None  # a decision's user key (user-level privacy), else None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Event:
        """An event from its row's (seq, at, kind, number, x, value, user), as both stores read them."""
        s, at, kind, number, x, value, user = row
        return cls(int(s), float(at), str(kind), int(number), None if x is None else bytes(x), value, user)


@dataclass(frozen=True)
class Release:
    epoch: int
    round: int
    at: float
    payload: np.ndarray
    samples: int


class Store:
    """The event log of one serving silo (one connection, used from the service's one thread).

    This class is the SQLite log; :class:`fedbandits.serve.pgstore.PgStore` is the same log on
    PostgreSQL, which several replicas of one silo share (it overrides the marked hooks: the SQL
    dialect, the write lock, reconnecting)."""

    #: the database driver's errors (the service answers them 503: the log failed, not the request)
    errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
    #: whether other processes write this log too (replicas): the silo reads what they committed,
    #: under the write lock, before each change (fedbandits.serve.silo)
    shared = False

    def __init__(self, path: Path, durability: str = "process") -> None:
        if durability not in DURABILITY:
            raise StoreError(f"durability must be one of {sorted(DURABILITY)}, got {durability!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute(f"PRAGMA synchronous = {DURABILITY[durability]}")
        self.db.executescript(_TABLES)
        schema = self.meta("schema")
        if schema in ("1", "2"):  # the columns added since: an earlier decision has no user key, arm or propensity
            have = {row[1] for row in self.db.execute("PRAGMA table_info(events)")}
            with self.transaction():
                for column, kind in _ADDED:
                    if column not in have:
                        self.db.execute(f"ALTER TABLE events ADD COLUMN {column} {kind}")
                self.db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA),))
        elif schema is None:
            self.set_meta({"schema": str(SCHEMA)})
        elif schema != str(SCHEMA):
            raise StoreError(f"{path}: event log schema {schema}, this fedbandits reads {SCHEMA}")

    def close(self) -> None:
        self.db.close()

    def where(self) -> str:
        """The log's location, for messages (a path; a PostgreSQL URL without its password)."""
        return str(self.path)

    # -- the dialect (hooks PgStore overrides) --------------------------------------------------
    def _q(self, sql: str, params: tuple[object, ...] = ()) -> sqlite3.Cursor:
        """One statement, ``?`` placeholders."""
        return self.db.execute(sql, params)

    def _insert(self, table: str, key: str, columns: tuple[str, ...], values: tuple[object, ...]) -> int:
        """A row whose ``key`` is the table's next number (SQLite's rowid: the largest + 1); that number."""
        marks = ", ".join("?" * len(columns))
        cur = self.db.execute(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", values)
        return int(cur.lastrowid or 0)

    def _replace(self, table: str, values: tuple[object, ...]) -> None:
        """A row that replaces the one with its primary key (``meta``, ``snapshots``)."""
        self.db.execute(f"INSERT OR REPLACE INTO {table} VALUES ({', '.join('?' * len(values))})", values)

    def _begin(self) -> None:
        """Open a write transaction holding the log's write lock (one writer at a time)."""
        self.db.execute("BEGIN IMMEDIATE")

    def _commit(self) -> None:
        """Commit the write transaction."""
        self.db.execute("COMMIT")

    def _rollback(self) -> None:
        # SQLite may have rolled back already (a full disk does): then there is nothing to roll back
        try:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
        except sqlite3.Error:
            self.db.close()  # discards the open transaction (a closed connection: nothing to do)

    def reopen(self) -> bool:
        """Connect again after a failure; False when this store cannot (SQLite: the service restarts)."""
        return False

    # -- meta --------------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        row = self._q("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, values: dict[str, str]) -> None:
        with self.transaction():
            self.put_meta(values)

    def put_meta(self, values: dict[str, str]) -> None:
        """Meta rows, inside the caller's transaction."""
        for item in values.items():
            self._replace("meta", item)

    def version(self) -> int:
        """How many times the agent's state outside the events changed (a release, an adoption, a secure
        aggregation step): a replica that last saw another number reloads (fedbandits.serve.silo)."""
        return int(self.meta("version") or 0)

    def bump(self) -> int:
        """One more state change, inside the caller's transaction; the new :meth:`version`."""
        version = self.version() + 1
        self._replace("meta", ("version", str(version)))
        return version

    # -- writes (each one transaction, committed before the caller answers) -------------------
    def transaction(self) -> _Transaction:
        return _Transaction(self)

    def add_event(
        self,
        at: float,
        kind: str,
        number: int,
        x: np.ndarray | None = None,
        value: float | None = None,
        context: str | None = None,
        user: str | None = None,
        arm: int | None = None,
        propensity: float | None = None,
        candidates: np.ndarray | None = None,
    ) -> int:
        """One event; a decision also keeps its arm, its propensity and (opted in) every candidate's features."""
        blob = None if x is None else np.ascontiguousarray(x, dtype=np.float64).tobytes()
        shown = None if candidates is None else np.ascontiguousarray(candidates, dtype=np.float64).tobytes()
        values = (at, kind, number, blob, value, context, user, arm, propensity, shown)
        return self._insert("events", "seq", EVENT_COLUMNS, values)

    def add_release(self, epoch: int, round_: int, payload: np.ndarray, samples: int) -> int:
        at = time.time()
        rid = self._insert(
            "releases",
            "id",
            ("epoch", "round", "at", "payload", "dtype", "samples"),
            (epoch, round_, at, np.ascontiguousarray(payload).tobytes(), payload.dtype.str, samples),
        )
        self._q("UPDATE events SET release = ? WHERE kind = 'reward' AND release IS NULL", (rid,))
        return rid

    def add_prefix(self, epoch: int, round_: int) -> None:
        self._insert("prefixes", "id", ("epoch", "round", "at"), (epoch, round_, time.time()))

    def add_snapshot(self, state: bytes, pending_from: int = 0) -> None:
        """The agent's state as of the last event; ``pending_from``: the number of its oldest pending
        decision (or of the next one), below which every decision was rewarded or expired then."""
        seq = self.last_seq()
        self._replace("snapshots", (seq, time.time(), state))
        self._replace("meta", ("pending_from", str(pending_from)))  # with the snapshot it belongs to
        self._q("DELETE FROM snapshots WHERE event_seq < ?", (seq,))  # the newest one is enough

    # -- reads -------------------------------------------------------------------------------
    def last_seq(self) -> int:
        return int(self._q("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0])

    def snapshot(self) -> tuple[int, bytes] | None:
        row = self._q("SELECT event_seq, state FROM snapshots ORDER BY event_seq DESC LIMIT 1").fetchone()
        return None if row is None else (int(row[0]), bytes(row[1]))

    def events_after(self, seq: int) -> Iterator[Event]:
        rows = self._q(
            'SELECT seq, at, kind, number, x, value, "user" FROM events WHERE seq > ? ORDER BY seq', (seq,)
        ).fetchall()
        for row in rows:
            yield Event.from_row(row)

    def news(self, seq: int) -> tuple[int, list[Event]]:
        """What a replica reads before each change: :meth:`version` and the events after ``seq``."""
        return self.version(), list(self.events_after(seq))

    def unanswered(self, seq: int) -> list[tuple[int, float, bytes, str | None]]:
        """(number, time, features, user key) of the decisions logged up to event ``seq`` with no reward
        logged up to it, oldest first (the pending decisions a snapshot without them leaves out, and the
        expired), from the newest snapshot's oldest pending one on: a replica reloads at every release, so
        this reads the decisions of the pending window, not the whole log (a log from before has none: 0)."""
        since = int(self.meta("pending_from") or 0)
        rows = self._q(
            "SELECT e.number, e.at, e.x, e.\"user\" FROM events e WHERE e.kind = 'decision' AND e.number >= ? "
            "AND e.seq <= ? AND NOT EXISTS (SELECT 1 FROM events r WHERE r.kind = 'reward' AND r.number = e.number "
            "AND r.seq <= ?) ORDER BY e.seq",
            (since, seq, seq),
        ).fetchall()
        return [(int(n), float(at), bytes(x), user) for n, at, x, user in rows]

    def release(self, epoch: int, round_: int) -> Release | None:
        row = self._q(
            "SELECT at, payload, dtype, samples FROM releases WHERE epoch = ? AND round = ?", (epoch, round_)
        ).fetchone()
        if row is None:
            return None
        payload = np.frombuffer(bytes(row[1]), dtype=np.dtype(row[2])).copy()
        return Release(epoch, round_, float(row[0]), payload, int(row[3]))

    def releases(self, limit: int = 20) -> list[dict[str, object]]:
        rows = self._q("SELECT epoch, round, at, samples FROM releases ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return [{"epoch": e, "round": r, "at": at, "samples": n} for e, r, at, n in rows]

    def last_prefix(self) -> tuple[int, int, float] | None:
        row = self._q("SELECT epoch, round, at FROM prefixes ORDER BY id DESC LIMIT 1").fetchone()
        return None if row is None else (int(row[0]), int(row[1]), float(row[2]))

    def rows(self, table: str) -> list[tuple[object, ...]]:
        """Every row of ``table`` (:data:`TABLES`), its columns in that order, in key order."""
        return [tuple(r) for r in self._q(f"SELECT {', '.join(TABLES[table])} FROM {table} ORDER BY 1").fetchall()]

    def put_rows(self, table: str, rows: list[tuple[object, ...]]) -> None:
        """Rows of ``table`` as :meth:`rows` gives them, numbers kept, inside the caller's transaction (a
        ``meta`` row replaces this log's own: its schema version)."""
        columns = TABLES[table]
        for row in rows:
            if table == "meta":
                self._replace(table, row)
            else:
                self._q(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", row)

    def count(self, kind: str, released: bool | None = None) -> int:
        where = "" if released is None else (" AND release IS NOT NULL" if released else " AND release IS NULL")
        return int(self._q(f"SELECT COUNT(*) FROM events WHERE kind = ?{where}", (kind,)).fetchone()[0])


class _Transaction:
    """``with store.transaction():`` -- a write transaction holding the log's write lock (SQLite's
    BEGIN IMMEDIATE; PostgreSQL's advisory lock), COMMIT on success, ROLLBACK on an exception or a
    failed COMMIT.  The error that failed the transaction is the one raised, and no transaction is
    left open holding the write lock (a restarted service, or another replica, could not write)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __enter__(self) -> object:
        self.store._begin()
        return self.store.db

    def __exit__(self, kind: object, value: object, tb: object) -> None:
        if kind is not None:
            self.store._rollback()
            return
        try:
            self.store._commit()  # a full disk can fail the COMMIT itself, the transaction still open
        except BaseException:
            self.store._rollback()
            raise
