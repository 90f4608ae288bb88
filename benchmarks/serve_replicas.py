"""One serving silo on SQLite against its replicas on PostgreSQL, same load generator, same run (issue #48).

The load is benchmarks/serve_load.py's: its asyncio closed-loop generator on raw keep-alive
connections (``--connections``, one request at a time each), ``POST /v1/decisions`` with K = 100
arms of d = 10 and a ``POST /v1/rewards`` for every --reward-every-th decision (default 2), the
same ``fedlinucb`` ``ldp`` config; the coordinator syncs every second in this process
(``HttpLink`` with the replicas' URLs joined by commas).  Lines, one after the other:

1. ``sqlite``: one silo process, durability ``process`` (SQLite WAL, synchronous NORMAL);
2. ``postgresql``, the server's ``fsync`` on (the production setting), one replica;
3. ``postgresql``, ``fsync`` off (survives a killed process, not a machine crash: SQLite's
   ``process`` promise), one replica;
4. ``postgresql``, ``fsync`` off, two replicas, the connections split evenly across them.

The PostgreSQL server is a throwaway real one (:class:`fedbandits.serve.pglocal.LocalPostgres`).
Reported per line: decisions/s over the measured phase (after --warmup); the CPU-seconds the replica
(silo) processes used in it, from ``/proc/<pid>/stat`` (utime + stime, and cutime + cstime of reaped
children, of each process and everything in its process group or under it), and decisions per such
CPU-second -- the issue's comparison, PostgreSQL against SQLite, aim within 25%; the PostgreSQL
server's CPU-seconds (postmaster and backends: its process group) separately, and decisions per
CPU-second of replicas and server together; client-side p50/p99; each replica's in-handler p50/p99
and replica lag p50/p99 (``/v1/status``: the last 10,000 requests, so the warm-up's too on a short
run); the sync rounds closed in the measured phase; requests failed.

Then a failover phase on line 4's set-up (a fresh database; sync every 0.5 s; load on both replicas):
replica 0 is SIGKILLed (its process tree, as tests/test_serve_replica_faults.py does) three times,
each time restarted on the same port.  Per kill: the seconds from the kill until the next sync
round closed (the coordinator's ``closed`` table), the requests failed on each replica's connections
in the 3 s after the kill, and the decisions replica 1 answered meanwhile.

On 2 cores the replicas, the PostgreSQL server and the generator share the CPUs (``--pin``: the
servers on CPU 0, the generator on CPU 1, as serve_load pins); per-CPU-second figures normalize that.

    python benchmarks/serve_replicas.py [--seconds 10] [--warmup 3] [--connections 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import shutil
import sqlite3
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from fedbandits.federation.processes import Proc
from fedbandits.serve.coordinator import Coordinator
from fedbandits.serve.demo import SiloProcess, start_silo, write_token
from fedbandits.serve.links import HttpLink
from fedbandits.serve.pglocal import LocalPostgres
from serve_load import CONFIG, decision_bodies, read_response, request

TICKS = os.sysconf("SC_CLK_TCK")
#: a request unanswered this long counts as failed (its connection is reopened)
REQUEST_TIMEOUT = 5.0
#: (name, the PostgreSQL server's fsync or None for SQLite, replicas)
LINES: tuple[tuple[str, bool | None, int], ...] = (
    ("sqlite, durability process", None, 1),
    ("postgresql, fsync on", True, 1),
    ("postgresql, fsync off", False, 1),
    ("postgresql, fsync off, 2 replicas", False, 2),
)
FAILOVER_SYNC = 0.5
FAILOVER_WINDOW = 3.0
KILLS = 3
#: a worker's failed connection attempt (retried every 20 ms while a replica is down), not a failed request
REFUSED = "ConnectionRefusedError"


# -- CPU time from /proc ---------------------------------------------------------------------
def _stat(pid: str) -> tuple[int, int, int] | None:
    """(ppid, pgrp, utime + stime + cutime + cstime in clock ticks) of a live process, or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # fields 3.. of proc(5): state, ppid, pgrp, ...
    return int(fields[1]), int(fields[2]), sum(int(f) for f in fields[11:15])


def tree(roots: list[int]) -> dict[int, int]:
    """{pid: clock ticks} of ``roots``, the processes in their process groups (each root leads its
    session) and every descendant of those."""
    stats = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := _stat(p)) is not None}
    keep = set(roots) | {pid for pid, (_, pgrp, _) in stats.items() if pgrp in roots}
    while more := {pid for pid, (ppid, _, _) in stats.items() if ppid in keep} - keep:
        keep |= more
    return {pid: stats[pid][2] for pid in keep if pid in stats}


def cpu_seconds(roots: list[int]) -> float:
    """CPU-seconds used so far by the process trees of ``roots`` (reaped children's included)."""
    return sum(tree(roots).values()) / TICKS


def own_cpu_seconds() -> float:
    """This process: the generator and the in-process coordinator."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def pin(roots: list[int], cpu: str) -> None:
    for pid in tree(roots):
        subprocess.run(["taskset", "-a", "-p", "-c", cpu, str(pid)], check=False, capture_output=True)


# -- the load generator (serve_load's, tolerant of failures) ------------------------------------
@dataclass
class Phase:
    """perf_counter times: latencies count from ``measure_from``; the workers stop at ``stop_at``
    (another thread may set it)."""

    measure_from: float
    stop_at: float


@dataclass
class Tally:
    replicas: int
    decisions: list[float] = field(default_factory=list)  # seconds, answered 200 in the measured phase
    rewards: list[float] = field(default_factory=list)
    ok: list[int] = field(default_factory=list)  # decisions answered 200 per replica, the whole run
    measured: list[int] = field(default_factory=list)  # those of the measured phase
    failed: list[tuple[float, int, str]] = field(default_factory=list)  # (unix time, replica, what)

    def __post_init__(self) -> None:
        self.ok = [0] * self.replicas
        self.measured = [0] * self.replicas

    def fail(self, replica: int, what: str) -> None:
        self.failed.append((time.time(), replica, what))


async def ask(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], data: bytes) -> tuple[int, bytes]:
    reader, writer = conn
    writer.write(data)
    await writer.drain()
    async with asyncio.timeout(REQUEST_TIMEOUT):
        return await read_response(reader)


async def worker(
    port: int, replica: int, token: str, bodies: list[bytes], phase: Phase, tally: Tally, reward_every: int
) -> None:
    """serve_load's closed loop on one keep-alive connection; a failed request is counted (and its
    connection reopened, 20 ms later) instead of ending the run."""
    conn = None
    i = 0
    while (now := time.perf_counter()) < phase.stop_at:
        try:
            if conn is None:
                conn = await asyncio.open_connection("127.0.0.1", port)
            status, body = await ask(conn, request("/v1/decisions", bodies[i % len(bodies)], token))
            done = time.perf_counter()
            if status != 200:
                tally.fail(replica, f"decision {status}")
                await asyncio.sleep(0.02)
                continue
            tally.ok[replica] += 1
            if now >= phase.measure_from:
                tally.decisions.append(done - now)
                tally.measured[replica] += 1
            if reward_every and i % reward_every == 0:
                reward = json.dumps({"decision_id": json.loads(body)["decision_id"], "reward": 0.5}).encode()
                status, body = await ask(conn, request("/v1/rewards", reward, token))
                if status != 200:
                    tally.fail(replica, f"reward {status}")
                elif now >= phase.measure_from:
                    tally.rewards.append(time.perf_counter() - done)
        except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError) as exc:
            tally.fail(replica, type(exc).__name__)
            if conn is not None:
                conn[1].close()
            conn = None
            await asyncio.sleep(0.02)
        i += 1
    if conn is not None:
        conn[1].close()


async def at(when: float, call: Callable[[], None]) -> None:
    await asyncio.sleep(max(0.0, when - time.perf_counter()))
    call()


async def drive(
    ports: list[int],
    token: str,
    connections: int,
    reward_every: int,
    phase: Phase,
    tally: Tally,
    marks: tuple[tuple[float, Callable[[], None]], ...] = (),
) -> None:
    """``connections`` workers, connection c on replica c mod len(ports); ``marks``: (time, call)."""
    bodies = decision_bodies()
    jobs = [
        worker(ports[c % len(ports)], c % len(ports), token, bodies, phase, tally, reward_every)
        for c in range(connections)
    ]
    await asyncio.gather(*jobs, *(at(when, call) for when, call in marks))


# -- a silo's replicas and the coordinator -----------------------------------------------------
@dataclass
class Line:
    replicas: list[SiloProcess]
    coordinator: Coordinator
    thread: threading.Thread
    state: Path
    extra: list[str]
    work: Path
    procs: list[Proc] = field(default_factory=list)  # every process started (restarts too), to stop

    @property
    def ports(self) -> list[int]:
        return [int(r.url.rsplit(":", 1)[1]) for r in self.replicas]

    def pids(self) -> list[int]:
        return [r.process.pid for r in self.replicas]


def start_line(
    work: Path, tokens: tuple[Path, Path], sync: str, store: str | None, replicas: int, sync_seconds: float
) -> Line:
    """``replicas`` silo processes on ``store`` (None: each its own SQLite log) and a coordinator
    ticking every ``sync_seconds`` in a thread of this process."""
    config = work.parent / "serve.toml"
    extra = ["--sync-seconds", f"{sync_seconds:g}", *(["--store", store] if store else [])]
    started: list[SiloProcess] = []
    try:
        for i in range(replicas):  # one after the other: the first one creates the agent in the log
            started.append(start_silo(config, 0, "fed", work / f"r{i}", tokens, extra))
        link = HttpLink([",".join(r.url for r in started)], sync)
        coordinator = Coordinator(config, link, work / "server", entry="fed", sync_seconds=sync_seconds)
    except BaseException:
        for r in started:
            r.process.stop()
        raise
    thread = threading.Thread(target=coordinator.run, daemon=True)
    thread.start()
    return Line(started, coordinator, thread, work / "server", extra, work, [r.process for r in started])


def stop_line(line: Line) -> list[str]:
    """Stop the coordinator and every replica; the replicas' log lines other than the start banner."""
    line.coordinator.stop()
    line.thread.join()
    line.coordinator.close()
    for proc in line.procs:
        proc.stop()
    lines = []
    for log in dict.fromkeys(proc.log for proc in line.procs):
        text = log.read_text(errors="replace") if log.exists() else ""
        lines += [f"{log.stem}@{log.parent.name}: {t}" for t in text.splitlines() if not t.startswith("serving silo")]
    return lines


def pg_problems(pg: LocalPostgres) -> list[str]:
    text = pg.log.read_text(errors="replace") if pg.log.exists() else ""
    return [t for t in text.splitlines() if any(k in t for k in ("ERROR:", "FATAL:", "PANIC:", "WARNING:"))]


def silo_status(url: str, token: str) -> dict[str, Any]:
    return httpx.get(url + "/v1/status", headers={"Authorization": f"Bearer {token}"}, timeout=10).json()


# -- one line ---------------------------------------------------------------------------------
def measure_line(
    args: argparse.Namespace,
    work: Path,
    tokens: tuple[Path, Path],
    keys: tuple[str, str],
    line_def: tuple[str, bool | None, int],
    pg: LocalPostgres | None,
) -> dict[str, Any]:
    replicas = line_def[2]
    store = None if pg is None else pg.create_database(work.name)  # one database per line
    token, sync = keys
    line = start_line(work, tokens, sync, store, replicas, 1.0)
    pg_roots = [] if pg is None or pg.pid is None else [pg.pid]
    snaps: dict[str, dict[str, float]] = {}

    def snap(key: str) -> None:
        snaps[key] = {
            "replicas": cpu_seconds(line.pids()),
            "postgres": cpu_seconds(pg_roots) if pg_roots else 0.0,
            "generator": own_cpu_seconds(),
            "rounds": line.coordinator.status()["rounds_closed"],
        }

    try:
        if args.pin:
            pin([*line.pids(), *pg_roots], "0")
            pin([os.getpid()], "1")
        tally = Tally(replicas)
        start = time.perf_counter()
        phase = Phase(start + args.warmup, start + args.warmup + args.seconds)
        marks = ((phase.measure_from, lambda: snap("from")), (phase.stop_at, lambda: snap("to")))
        asyncio.run(drive(line.ports, token, args.connections, args.reward_every, phase, tally, marks))
        statuses = [silo_status(r.url, token) for r in line.replicas]
    finally:
        logs = stop_line(line)
    return summarize(args, line_def, tally, snaps, statuses, logs)


def _ms(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None}
    p50, p99 = np.percentile(np.array(values) * 1000, [50, 99])
    return {"p50": round(float(p50), 3), "p99": round(float(p99), 3)}


def summarize(
    args: argparse.Namespace,
    line_def: tuple[str, bool | None, int],
    tally: Tally,
    snaps: dict[str, dict[str, float]],
    statuses: list[dict[str, Any]],
    logs: list[str],
) -> dict[str, Any]:
    name, fsync, replicas = line_def
    used = {k: snaps["to"][k] - snaps["from"][k] for k in snaps["to"]}
    decisions = len(tally.decisions)
    pg_cpu = None if fsync is None else used["postgres"]
    return {
        "line": name,
        "store": "sqlite" if fsync is None else "postgresql",
        "fsync": fsync,
        "replicas": replicas,
        "decisions": decisions,
        "decisions_per_replica": tally.measured,
        "decisions_per_s": decisions / args.seconds,
        "rewards_per_s": len(tally.rewards) / args.seconds,
        "replica_cpu_s": used["replicas"],
        "decisions_per_replica_cpu_s": decisions / used["replicas"] if used["replicas"] else None,
        "postgres_cpu_s": pg_cpu,
        "decisions_per_cpu_s_with_postgres": decisions / (used["replicas"] + (pg_cpu or 0.0)),
        "generator_cpu_s": used["generator"],  # this process: the generator and the coordinator
        "client_ms": _ms(tally.decisions),
        "client_reward_ms": _ms(tally.rewards),
        "handler_ms": [s["latency_ms"]["decisions"] for s in statuses],
        "lag_ms": [s["replica"]["lag_ms"] if "replica" in s else None for s in statuses],
        "recoveries": [s["replica"]["recoveries"] if "replica" in s else None for s in statuses],
        "refused": [s.get("refused", {}) for s in statuses],
        "rounds_closed": int(used["rounds"]),
        "failed": len(tally.failed),
        "failures": dict(Counter(f"replica {r}: {what}" for _, r, what in tally.failed)),
        "replica_log": logs[:20],
    }


# -- failover ----------------------------------------------------------------------------------
def closed_after(state: Path, since: float) -> float | None:
    """The time of the first sync round closed after ``since`` (the coordinator's log), or None."""
    db = sqlite3.connect(f"file:{state}/coordinator.sqlite?mode=ro", uri=True)
    try:
        got = db.execute("SELECT MIN(at) FROM closed WHERE at > ?", (since,)).fetchone()[0]
    except sqlite3.Error:
        got = None
    finally:
        db.close()
    return None if got is None else float(got)


def kill_once(line: Line, tally: Tally, tokens: tuple[Path, Path]) -> dict[str, Any]:
    """SIGKILL replica 0's process tree under load; 3 s later, restart it on the same port."""
    ok = list(tally.ok)
    ports = line.ports
    killed = time.time()
    line.replicas[0].process.kill()
    time.sleep(FAILOVER_WINDOW)
    served = [b - a for a, b in zip(ok, tally.ok, strict=True)]
    closed = closed_after(line.state, killed)
    while closed is None and time.time() < killed + 15:
        time.sleep(0.05)
        closed = closed_after(line.state, killed)
    window = [f for f in tally.failed if killed <= f[0] < killed + FAILOVER_WINDOW]
    refused = [f for f in window if f[2] == REFUSED]  # a connection attempt refused: no request sent
    started = time.time()
    replica = start_silo(line.work.parent / "serve.toml", 0, "fed", line.work / "r0", tokens, line.extra, ports[0])
    line.replicas[0] = replica
    line.procs.append(replica.process)
    healthy = time.time()
    time.sleep(1.5)  # serving again (its connections reopened) before the next kill
    return {
        "next_round_closed_after_s": None if closed is None else round(closed - killed, 3),
        "failed_requests_in_window": [sum(1 for f in window if f[1] == r and f[2] != REFUSED) for r in range(2)],
        "refused_connects_in_window": [sum(1 for f in refused if f[1] == r) for r in range(2)],
        "failure_kinds": dict(Counter(f"replica {f[1]}: {f[2]}" for f in window)),
        "decisions_in_window": served,
        "restart_s": round(healthy - started, 2),
        "failed_on_replica0_until_restarted": sum(1 for f in tally.failed if f[1] == 0 and killed <= f[0] < healthy),
    }


def failover(
    args: argparse.Namespace, work: Path, tokens: tuple[Path, Path], keys: tuple[str, str], pg: LocalPostgres
) -> dict[str, Any]:
    token, sync = keys
    line = start_line(work, tokens, sync, pg.create_database("failover"), 2, FAILOVER_SYNC)
    tally = Tally(2)
    phase = Phase(math.inf, math.inf)  # no latencies; runs until stop_at is set
    ports = line.ports
    loader = threading.Thread(
        target=lambda: asyncio.run(drive(ports, token, args.connections, args.reward_every, phase, tally)),
        daemon=True,
    )
    kills = []
    try:
        loader.start()
        time.sleep(2.0)
        for _ in range(KILLS):
            kills.append(kill_once(line, tally, tokens))
    finally:
        phase.stop_at = 0.0
        loader.join(REQUEST_TIMEOUT + 5)
        logs = stop_line(line)
    return {"kills": kills, "failed_total": len(tally.failed), "replica_log": logs[:30]}


# -- the run and its report --------------------------------------------------------------------
def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    (work / "serve.toml").write_text(CONFIG)
    tokens = (work / "traffic.token", work / "sync.token")
    keys = (write_token(tokens[0]), write_token(tokens[1]))
    lines = [measure_line(args, work / "line1", tokens, keys, LINES[0], None)]
    problems: dict[str, list[str]] = {}
    with LocalPostgres(fsync=True) as pg:
        lines.append(measure_line(args, work / "line2", tokens, keys, LINES[1], pg))
        problems["postgresql fsync on"] = pg_problems(pg)
    with LocalPostgres(fsync=False) as pg:
        lines.append(measure_line(args, work / "line3", tokens, keys, LINES[2], pg))
        lines.append(measure_line(args, work / "line4", tokens, keys, LINES[3], pg))
        problems["postgresql fsync off (lines 3-4)"] = pg_problems(pg)
        before = len(problems["postgresql fsync off (lines 3-4)"])
        kills = failover(args, work / "failover", tokens, keys, pg)
        problems["postgresql fsync off (failover)"] = pg_problems(pg)[before:]
    return {"lines": lines, "failover": kills, "postgres_log": {k: v[:20] for k, v in problems.items()}}


def _pair(p: dict[str, float | None] | None) -> str:
    if not p or p.get("p50") is None:
        return "-"
    return f"{p['p50']:.2f}/{p['p99']:.2f}"


def report(args: argparse.Namespace, out: dict[str, Any]) -> None:
    lines, base = out["lines"], out["lines"][0]["decisions_per_replica_cpu_s"]
    print(
        f"K = 100, d = 10, ldp, rewards every {args.reward_every}, sync every 1 s, {args.connections} connections, "
        f"{args.seconds:g} s measured after {args.warmup:g} s warm-up, {os.cpu_count()} CPUs, pinned: {args.pin}"
    )
    head = f"{'line':36} {'dec/s':>7} {'replica CPU-s':>13} {'dec/replica CPU-s':>17} {'vs sqlite':>9}"
    print(head + f" {'PG CPU-s':>8} {'dec/CPU-s +PG':>13} {'this proc CPU-s':>15} {'rounds':>6} {'failed':>6}")
    for r in lines:
        per = r["decisions_per_replica_cpu_s"]
        vs = f"{100 * (per / base - 1):+.0f}%" if per and base else "-"
        pg = "-" if r["postgres_cpu_s"] is None else f"{r['postgres_cpu_s']:.2f}"
        print(
            f"{r['line']:36} {r['decisions_per_s']:7,.0f} {r['replica_cpu_s']:13.2f} {per or 0:17,.0f} {vs:>9} "
            f"{pg:>8} {r['decisions_per_cpu_s_with_postgres']:13,.0f} {r['generator_cpu_s']:15.2f} "
            f"{r['rounds_closed']:6d} {r['failed']:6d}"
        )
    print(f"\n{'line':36} {'client p50/p99 ms':>17}  {'handler p50/p99 ms (per replica)':32}  lag p50/p99 ms")
    for r in lines:
        handler = "; ".join(_pair(h) for h in r["handler_ms"])
        lag = "; ".join(_pair(x) for x in r["lag_ms"]) if r["store"] == "postgresql" else "-"
        print(f"{r['line']:36} {_pair(r['client_ms']):>17}  {handler:32}  {lag}")
    report_failover(out)
    report_problems(out)


def report_failover(out: dict[str, Any]) -> None:
    print(f"\nfailover: 2 replicas on PostgreSQL (fsync off), sync every {FAILOVER_SYNC:g} s, replica 0 SIGKILLed")
    print(
        f"{'kill':>4} {'next round closed (s)':>21} {'requests failed r0/r1 in 3 s':>29} "
        f"{'decisions r0/r1 in 3 s':>22} {'refused connects r0':>19} {'restart (s)':>11}"
    )
    for i, k in enumerate(out["failover"]["kills"], 1):
        gap = "none" if k["next_round_closed_after_s"] is None else f"{k['next_round_closed_after_s']:.2f}"
        failed = "/".join(map(str, k["failed_requests_in_window"]))
        served = "/".join(map(str, k["decisions_in_window"]))
        print(
            f"{i:4d} {gap:>21} {failed:>29} {served:>22} {k['refused_connects_in_window'][0]:19d} "
            f"{k['restart_s']:11.2f}"
        )
    kinds = Counter[str]()
    for k in out["failover"]["kills"]:
        kinds.update(k["failure_kinds"])
    print(f"     failures in the 3 s windows, by kind: {dict(kinds)}")


def report_problems(out: dict[str, Any]) -> None:
    found = [(r["line"], t) for r in out["lines"] for t in r["replica_log"]]
    found += [("failover", t) for t in out["failover"]["replica_log"]]
    found += [(f"PostgreSQL log, {k}", t) for k, v in out["postgres_log"].items() for t in v]
    found += [(r["line"], f"refused (status): {x}") for r in out["lines"] for x in r["refused"] if x]
    print("\nproblems:" if found else "\nproblems: none (no replica log lines, no PostgreSQL errors, nothing refused)")
    for where, text in found[:40]:
        print(f"  [{where}] {text[:200]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--reward-every", type=int, default=2, help="reward every N-th decision (0: none)")
    parser.add_argument("--pin", action="store_true", help="servers on CPU 0, the generator on CPU 1 (taskset)")
    parser.add_argument("--json", type=Path, help="write the numbers here")
    args = parser.parse_args()
    if args.reward_every < 0 or args.connections < 2 or args.seconds <= 0 or args.warmup < 0:
        raise SystemExit("--reward-every must be >= 0, --connections >= 2, --seconds > 0, --warmup >= 0")
    args.pin = args.pin and shutil.which("taskset") is not None
    work = Path(tempfile.mkdtemp(prefix="fedbandits-serve-replicas-"))
    began = time.monotonic()
    try:
        out = run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["wall_seconds"] = round(time.monotonic() - began, 1)
    report(args, out)
    print(f"\nthe whole run took {out['wall_seconds']:.0f} s")
    if args.json:
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        args.json.write_text(json.dumps({"settings": settings, **out}, indent=2) + "\n")


if __name__ == "__main__":
    main()
