"""``fedbandits serve demo --replicas N``: each federated silo served by N replicas on PostgreSQL.

A throwaway PostgreSQL server (:mod:`fedbandits.serve.pglocal`: Debian's ``postgresql``, 127.0.0.1,
a temporary folder) holds one database per federated silo; the silo's N replica processes share it
(``serve silo --store``).  The traffic generator sends each request to the silo's next replica in
turn (:class:`fedbandits.serve.demo_traffic.SiloClient`), so a user's reward often reaches another
replica than the one that decided; the coordinator reaches each silo through its replicas' URLs
joined by commas.  Half-way through, replica 0 of silo 0 is killed with SIGKILL and restarted on the
log 5 s later (:class:`Failover`): the demo's last screen says what that cost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fedbandits.federation.processes import Proc
from fedbandits.serve.pglocal import LocalPostgres, PostgresUnavailable

#: with --replicas: federated and lone silos per line unless --silos says otherwise (N + 1 processes per silo)
REPLICA_SILOS = 6
#: how long the killed replica stays down
DOWN_SECONDS = 5.0


def start_database(silos: int, replicas: int) -> tuple[LocalPostgres, list[str]]:
    """The throwaway server and one database URL per federated silo."""
    if replicas < 2:
        raise ValueError(f"--replicas must be >= 2 (1: the SQLite silo of the plain demo), got {replicas}")
    try:
        server = LocalPostgres(fsync=False).start()  # a demo's: its commits survive killed processes
    except PostgresUnavailable as exc:
        raise ValueError(f"--replicas: {exc}") from None
    try:
        return server, [server.create_database(f"fed{i}") for i in range(silos)]
    except BaseException:
        server.close()
        raise


@dataclass
class Failover:
    """Replica 0 of silo 0 killed half-way through the traffic and restarted ``DOWN_SECONDS`` later."""

    restart: Any  # () -> the restarted replica's Proc (waits until it answers /healthz)
    at: float
    processes: list[Proc]
    killed: Proc
    done: list[str] = field(default_factory=list)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="failover", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        time.sleep(self.at)
        self.killed.kill()
        down = time.monotonic()
        time.sleep(DOWN_SECONDS)
        try:
            self.processes.append(self.restart())
        except RuntimeError as exc:
            self.done.append(f"its restart failed: {exc}")
            return
        self.done.append(f"restarted on the log {time.monotonic() - down:.1f} s after the kill")

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join(timeout=60.0)


def replica_lines(statuses: Sequence[dict[str, Any]], replicas: int, failover: Failover | None) -> list[str]:
    """The last screen's lines about the replicas: freshness, recoveries, the failover."""
    lags = [s["replica"]["lag_ms"] for s in statuses if s.get("replica") and s["replica"]["lag_ms"]["p50"] is not None]
    lines = [
        f"replicas: {replicas} per federated silo on one PostgreSQL database each; a replica decides from every "
        "event committed before (it reads the others' under the log's write lock)"
    ]
    if lags:
        p50 = max(float(x["p50"]) for x in lags)
        p99 = max(float(x["p99"]) for x in lags)
        lines.append(
            f"  the others' events were at most {p50:.1f} ms old (p50, worst replica), {p99:.1f} ms (p99) when read"
        )
    if failover is not None:
        what = failover.done[0] if failover.done else "not yet restarted"
        lines.append(
            f"  replica 0 of silo 0: SIGKILL after {failover.at:.0f} s of traffic, {what}; the requests it had in "
            "flight failed (counted above), the others went to the next replica, and the sync went on through it"
        )
    return lines
