"""``fedbandits serve migrate``: a serving silo's event log moved to another store, in one command.

Typically an SQLite log (a state folder) moved to PostgreSQL when the silo outgrows one process
(docs/serving.md); the other way too (``fedbandits evaluate`` reads SQLite logs).  Every row of every
table (:data:`fedbandits.serve.store.TABLES`: the meta rows, the events, the releases as sent, the
prefixes, the snapshot) is copied with its numbers, in one transaction on each side, each holding its
log's write lock: the copy is one consistent cut of the source, and the target is written whole or
not at all.  A silo opened on the copy replays to the agent the source gives, bit for bit
(tests/test_serve_migrate.py).  The target must be empty (a new database or folder); the source is
left as it was (an SQLite log of schema 1 or 2 is first upgraded in place, as a restart would).
Stop the silo first: :func:`migrate` refuses a state folder whose silo is running (its lock), and
events a replica writes after the copy would not be in it.
"""

from __future__ import annotations

from pathlib import Path

from fedbandits.serve.pgstore import PgStore, is_url
from fedbandits.serve.store import TABLES, Store, StoreError


def open_log(where: str, *, existing: bool) -> Store:
    """The log at ``where``: a PostgreSQL URL or a state folder (its ``events.sqlite``)."""
    if is_url(where):
        return PgStore(where)
    if where.startswith(("postgres", "mysql", "sqlite")) and "://" in where:
        raise StoreError(f"{where.split('://')[0]}://: a log is a state folder or a postgresql:// URL")
    path = Path(where) / "events.sqlite"
    if existing and not path.exists():
        raise StoreError(f"{where}: no event log here (events.sqlite)")
    if not existing and path.exists():
        raise StoreError(f"{where}: a log is already here (events.sqlite); the target must be empty")
    return Store(path)


def migrate(source: str, target: str) -> dict[str, int]:
    """Copy the log at ``source`` into the empty log at ``target``; the rows copied per table."""
    src = open_log(source, existing=True)
    try:
        dst = open_log(target, existing=False)
    except BaseException:
        src.close()
        raise
    try:
        with src.transaction():  # the source's write lock: nothing is written to it while it is read
            if src.snapshot() is None:
                raise StoreError(f"{src.where()}: an empty log (no snapshot): nothing to migrate")
            rows = {table: src.rows(table) for table in TABLES}
        with dst.transaction():
            if dst.snapshot() is not None or dst.last_seq() or dst.meta("identity") is not None:
                raise StoreError(f"{dst.where()}: the target log is not empty (use a new database)")
            for table in TABLES:
                dst.put_rows(table, rows[table])
        return {table: len(found) for table, found in rows.items()}
    finally:
        src.close()
        dst.close()
