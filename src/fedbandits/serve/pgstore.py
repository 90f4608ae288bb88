"""A serving silo's event log on PostgreSQL (psycopg 3): the log the replicas of one silo share.

The same log as :class:`fedbandits.serve.store.Store` -- the same tables, rows and numbering (an
event's ``seq`` is the largest + 1, as SQLite's rowid is, so a migrated log keeps its numbers) -- in
one PostgreSQL database per silo.  What differs:

* **One writer at a time, whichever replica**: a write transaction first takes the database's
  transaction-level advisory lock (``pg_advisory_xact_lock``).  Commit order is then ``seq`` order,
  so a replica that has read the events up to ``seq`` has read every event numbered below it, and
  it reads them under the lock before it decides, learns or releases (fedbandits.serve.silo): its
  model is never behind the log when it changes it.  A transaction lock, not a session lock or a
  lease: it cannot outlive the transaction that writes, so a paused or cut-off replica can never
  write after another took over (a lease would need fencing tokens for that), and PostgreSQL frees it
  when the replica's connection ends -- at once for a killed process, within
  ``idle_in_transaction_session_timeout`` (5 s) for one that stopped mid-transaction.
* **Durability is the server's**: a commit returns once PostgreSQL has it in its write-ahead log
  (``synchronous_commit = on``, forced per session); whether that survives a power cut is the
  server's ``fsync`` setting.  ``--durability`` is SQLite's and is refused here.
* **A failed connection is reopened** (:meth:`PgStore.reopen`): the silo reloads its agent from the
  log and serves again (a SQLite silo is restarted instead).

Credentials and transport (principle 9): the URL names a role with a password (from the URL, or
libpq's ``PGPASSFILE``/``~/.pgpass``); a server that is not on this machine needs TLS
(``sslmode=require``, ``verify-ca`` or ``verify-full`` in the URL).
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from fedbandits.federation.processes import is_loopback
from fedbandits.serve.store import EVENT_COLUMNS, SCHEMA, TABLES, Event, Store, StoreError

#: text an event's INSERT writes between quotes itself (nothing in it can end or escape a quoted string)
_PLAIN = re.compile(r"[A-Za-z0-9_.:-]*")
#: the advisory lock of the log's writer (one database per silo: one key)
WRITE_LOCK = 0x6665_6462  # "fedb"
#: a write transaction's opening: it holds the write lock until it ends
BEGIN = f"BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK})"
#: a replica waits at most this long for the write lock (then: 503, and it tries again)
SESSION = (
    "-c lock_timeout=5000 -c statement_timeout=15000 -c idle_in_transaction_session_timeout=5000 "
    "-c synchronous_commit=on -c standard_conforming_strings=on"
)

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq BIGINT PRIMARY KEY, at DOUBLE PRECISION NOT NULL, kind TEXT NOT NULL, number BIGINT NOT NULL,
    x BYTEA, value DOUBLE PRECISION, context TEXT, release BIGINT, "user" TEXT, arm INTEGER,
    propensity DOUBLE PRECISION, candidates BYTEA
);
CREATE UNIQUE INDEX IF NOT EXISTS one_reward ON events(number) WHERE kind = 'reward';
CREATE UNIQUE INDEX IF NOT EXISTS one_decision ON events(number) WHERE kind = 'decision';
CREATE INDEX IF NOT EXISTS unreleased ON events(seq) WHERE kind = 'reward' AND release IS NULL;
CREATE TABLE IF NOT EXISTS releases (
    id BIGINT PRIMARY KEY, epoch BIGINT NOT NULL, round BIGINT NOT NULL, at DOUBLE PRECISION NOT NULL,
    payload BYTEA NOT NULL, dtype TEXT NOT NULL, samples BIGINT NOT NULL, UNIQUE (epoch, round)
);
CREATE TABLE IF NOT EXISTS prefixes (
    id BIGINT PRIMARY KEY, epoch BIGINT NOT NULL, round BIGINT NOT NULL, at DOUBLE PRECISION NOT NULL,
    UNIQUE (epoch, round)
);
CREATE TABLE IF NOT EXISTS snapshots (event_seq BIGINT PRIMARY KEY, at DOUBLE PRECISION NOT NULL, state BYTEA NOT NULL);
"""


def is_url(where: object) -> bool:
    return isinstance(where, str) and where.startswith(("postgresql://", "postgres://"))


def check_url(url: str) -> str:
    """The URL if a silo may use it, else a StoreError of one line (no password in it)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        _ = parts.port  # a malformed port fails here
    except ValueError as exc:
        raise StoreError(f"store: not a PostgreSQL URL ({exc})") from None
    if not is_url(url) or not host or not parts.path.strip("/"):
        raise StoreError("store: expected postgresql://ROLE@HOST[:PORT]/DATABASE (one database per silo)")
    mode = parse_qs(parts.query).get("sslmode", [""])[-1]
    if not is_loopback(host) and mode not in ("require", "verify-ca", "verify-full"):
        raise StoreError(
            f"store: {host} is not on this machine: add sslmode=verify-full (or require, verify-ca) to the URL"
        )
    return url


def redact(url: str) -> str:
    """The URL without its password (for messages and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{netloc}"))


class _Connection:
    """A psycopg connection whose statements without parameters skip its cursors: sent on the simple
    query protocol and awaited with psycopg's own non-blocking generator and wait (what
    ``Connection.execute`` runs under its cursor), an error result raised as psycopg's error, the last
    statement's rows loaded by psycopg's loaders (``Transformer``).  A replica sends two such messages
    per group commit; this sends them at about 60% of ``Connection.execute``'s CPU (0.070 against
    0.112 ms for the two, measured on a throwaway server).  A statement with parameters, and anything
    else, is psycopg's."""

    def __init__(self, db: Any) -> None:
        from psycopg import errors, generators, pq, waiting
        from psycopg.adapt import Transformer

        self.db, self._errors, self._fetch, self._wait = db, errors, generators.execute, waiting.wait
        self._loader, self._encoding = Transformer(db), db.info.encoding
        self._failed, self._tuples = (pq.ExecStatus.FATAL_ERROR, pq.ExecStatus.BAD_RESPONSE), pq.ExecStatus.TUPLES_OK

    def execute(self, sql: str, params: Any = None) -> Any:
        if params is not None:
            return self.db.execute(sql, params)
        if self.db.closed:
            raise self._errors.OperationalError("the connection is closed")
        with self.db.lock:
            pgconn = self.db.pgconn
            pgconn.send_query(sql.encode(self._encoding))
            results = self._wait(self._fetch(pgconn), pgconn.socket, interval=0.1)
        for result in results:
            if result.status in self._failed:
                raise self._errors.error_from_result(result, encoding=self._encoding)
        last = results[-1]
        rows = []
        if last.status == self._tuples:
            self._loader.set_pgresult(last)
            rows = self._loader.load_rows(0, last.ntuples, tuple)
        return _Rows(rows)

    def close(self) -> None:
        self.db.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


class _Rows:
    """The rows of a statement :class:`_Connection` ran (a cursor's reading methods)."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None


class PgStore(Store):
    """The event log of one silo in one PostgreSQL database, shared by the silo's replicas."""

    shared = True

    def __init__(self, url: str, durability: str = "process") -> None:
        if durability != "process":
            raise StoreError(
                "durability: a PostgreSQL log's is the server's (synchronous_commit, fsync); --durability is SQLite's"
            )
        import psycopg

        self.url = check_url(url)
        self.errors = (psycopg.Error,)
        self._psycopg = psycopg
        self.db: Any = self._connect()
        #: within a transaction, after news(): the log's last event number and the events to insert at
        #: COMMIT (or before any other statement) in one statement
        self._last: int | None = None
        self._rows: list[tuple[object, ...]] = []
        #: within a transaction whose BEGIN is not sent yet
        self._opening = False
        with self.transaction():
            for statement in filter(str.strip, _TABLES.split(";")):
                self._run(statement)
            schema = self.meta("schema")
            if schema is None:
                self.put_meta({"schema": str(SCHEMA)})
            # news() reads the state's version with the events: its row is there from the start
            self._run("INSERT INTO meta VALUES ('version', '0') ON CONFLICT (key) DO NOTHING")
        if schema is not None and schema != str(SCHEMA):
            self.close()
            raise StoreError(f"{self.where()}: event log schema {schema}, this fedbandits reads {SCHEMA}")

    def _connect(self) -> Any:
        try:
            db = self._psycopg.connect(
                self.url, autocommit=True, connect_timeout=5, options=SESSION,
                keepalives=1, keepalives_idle=5, keepalives_interval=2, keepalives_count=3,
            )  # fmt: skip
        except self._psycopg.Error as exc:
            raise StoreError(f"{self.where()}: {' '.join(str(exc).split())[:200]}") from None
        #: quotes the text of the events' INSERT, which travels with the COMMIT (no parameters)
        self._binder = self._psycopg.ClientCursor(db)
        return _Connection(db)

    def where(self) -> str:
        return redact(self.url)

    def close(self) -> None:
        if self.db is not None:
            self.db.close()

    def reopen(self) -> bool:
        self.close()
        self.db = self._connect()
        return True

    def news(self, seq: int) -> tuple[int, list[Event]]:
        """:meth:`Store.news` in one statement: the version and the events after ``seq``; as a
        transaction's first statement, in the round trip of its BEGIN and lock."""
        rows = self._run(
            'SELECT m.value, e.seq, e.at, e.kind, e.number, e.x, e.value, e."user" FROM meta m '
            f"LEFT JOIN events e ON e.seq > {int(seq)} WHERE m.key = 'version' ORDER BY e.seq"
        ).fetchall()
        events = [Event.from_row(row[1:]) for row in rows if row[1] is not None]
        self._last = events[-1].seq if events else seq  # under the write lock: the log's last event
        return int(rows[0][0]), events

    # -- the dialect ---------------------------------------------------------------------------
    def _run(self, sql: str, params: tuple[object, ...] | list[object] | None = None) -> Any:
        """One statement (``%s`` placeholders), after the events this transaction holds back.  The
        transaction's BEGIN and write lock go in the round trip of its first statement: in the same
        message when it has no parameters (the simple query protocol carries several statements, the
        extended one a single statement); its rows are then the last statement's (:class:`_Connection`)."""
        if self._rows:
            self._flush()
        if self._opening:
            self._opening = False
            if params is None:
                return self.db.execute(f"{BEGIN}; {sql}")
            self.db.execute(BEGIN)
        return self.db.execute(sql, params)

    def _q(self, sql: str, params: tuple[object, ...] = ()) -> Any:
        return self._run(sql.replace("?", "%s"), params)

    def _events(self, rows: list[tuple[object, ...]]) -> str:
        """The INSERT of this transaction's events, with its values written in (no parameters): one
        statement for the requests a replica commits together, sent with their COMMIT."""
        values = ", ".join("(" + ", ".join(map(self._literal, row)) + ")" for row in rows)
        return f"INSERT INTO events (seq, {', '.join(EVENT_COLUMNS)}) VALUES {values}"

    def _literal(self, value: object) -> str:
        """One value of an event's row as an SQL literal: a number or bytes written here (their text
        cannot carry SQL: digits, or hexadecimal digits under ``standard_conforming_strings``, set per
        session), plain text (letters, digits and ``_.:-`` only: no quote, no backslash) put between
        quotes here, any other text quoted by psycopg (``ClientCursor.mogrify``: its quoting, the
        connection's).  The exact built-in types first: a row's values are mostly those."""
        if value is None:
            return "NULL"
        if type(value) is int:
            return str(value)
        if type(value) is float:
            return repr(value) if math.isfinite(value) else f"'{value!r}'::float8"
        if type(value) is bytes:
            return f"'\\x{value.hex()}'::bytea"
        if isinstance(value, str):
            return f"'{value}'" if _PLAIN.fullmatch(value) else str(self._binder.mogrify("%s", (value,)))
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return str(int(value))
        if isinstance(value, numbers.Real):
            return self._literal(float(value))
        raise TypeError(f"an event's column cannot hold a {type(value).__name__}")

    def _flush(self) -> None:
        rows, self._rows = self._rows, []
        self.db.execute(self._events(rows))

    def _commit(self) -> None:
        """COMMIT, in one round trip with the events held back; nothing when no statement was sent."""
        if self._opening:  # the transaction never reached the server
            self._opening = False
            return
        rows, self._rows = self._rows, []
        self.db.execute(f"{self._events(rows)}; COMMIT" if rows else "COMMIT")

    def _insert(self, table: str, key: str, columns: tuple[str, ...], values: tuple[object, ...]) -> int:
        if table == "events" and self._last is not None:  # numbered here: the log's last is known, under the lock
            self._last += 1
            self._rows.append((self._last, *values))
            return self._last
        # the largest + 1, as SQLite's rowid: gapless, and race-free under the write lock
        marks = ", ".join(["%s"] * len(columns))
        row = self._run(
            f"INSERT INTO {table} ({key}, {', '.join(columns)}) "
            f"VALUES ((SELECT COALESCE(MAX({key}), 0) + 1 FROM {table}), {marks}) RETURNING {key}",
            values,
        ).fetchone()
        return int(row[0])

    def _replace(self, table: str, values: tuple[object, ...]) -> None:
        columns = TABLES[table]
        key = columns[0]  # the table's primary key: the row with it is replaced
        update = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c != key)
        self._run(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(values))}) "
            f"ON CONFLICT ({key}) DO UPDATE SET {update}",
            values,
        )

    def _begin(self) -> None:
        self._last, self._rows = None, []
        self._opening = True  # BEGIN and the lock are sent with the first statement (_run)

    def _rollback(self) -> None:
        self._last, self._rows = None, []
        if self._opening:  # the transaction never reached the server
            self._opening = False
            return
        try:
            if self.db.info.transaction_status != self._psycopg.pq.TransactionStatus.IDLE:
                self.db.execute("ROLLBACK")
        except self._psycopg.Error:
            self.db.close()  # the server ends the transaction with the session
