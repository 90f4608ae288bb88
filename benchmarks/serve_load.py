"""Load on one serving silo over loopback while sync rounds run (issue "Live decisions, part 2").

Setup: ``fedbandits serve silo`` as its own process (uvicorn, one worker, durability ``process``:
SQLite WAL with synchronous NORMAL) serving a ``fedlinucb`` ``ldp`` entry with d = 10 on the
gaussian-sphere instance (M = 1 so one silo closes every round); the coordinator runs sync rounds
every second in this process.  The load generator is an asyncio client on raw keep-alive
connections (``--connections`` of them, each sending one request at a time: a closed loop), so that
the generator, not HTTP client machinery, is the cheap side; it sends ``POST /v1/decisions`` with
K = 100 arms (bodies encoded once, 64 different ones in turn) and, for every --reward-every-th decision (default 2), a
``POST /v1/rewards``.  ``taskset`` pins the silo to CPU 0 and the generator to CPU 1 when
available (one core each).

Reported: decisions/s (decisions answered / wall time of the measured phase, after a warm-up),
client-side p50/p99 latency of decisions (request written to response read), the silo's own
in-handler p50/p99 from ``/v1/status``, the sync rounds closed during the run.  Target: >= 2,000
decisions/s on one core with p99 <= 10 ms.

    python benchmarks/serve_load.py [--seconds 20] [--connections 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from fedbandits.serve.coordinator import Coordinator
from fedbandits.serve.demo import start_silo, write_token
from fedbandits.serve.links import HttpLink

CONFIG = """
[experiment]
seed = 1
horizon = 1000000
[environment]
name = "gaussian-sphere"
agents = 1
arms = 100
dim = 10
[[algorithms]]
name = "fedlinucb"
label = "fed"
batch = 1000
protocol = "ldp"
epsilon = 1.0
delta = 1e-5
"""


def request(path: str, body: bytes, token: str) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return status, await reader.readexactly(length)


async def worker(
    port: int,
    token: str,
    bodies: list[bytes],
    stop_at: float,
    measure_from: float,
    out: dict[str, list[float]],
    reward_every: int,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = 0
    while (now := time.perf_counter()) < stop_at:
        writer.write(request("/v1/decisions", bodies[i % len(bodies)], token))
        await writer.drain()
        status, body = await read_response(reader)
        done = time.perf_counter()
        if status != 200:
            raise RuntimeError(f"decision answered {status}: {body[:200]!r}")
        if now >= measure_from:
            out["decisions"].append(done - now)
        if reward_every and i % reward_every == 0:
            decision_id = json.loads(body)["decision_id"]
            reward = json.dumps({"decision_id": decision_id, "reward": 0.5}).encode()
            writer.write(request("/v1/rewards", reward, token))
            await writer.drain()
            status, body = await read_response(reader)
            if status != 200:
                raise RuntimeError(f"reward answered {status}: {body[:200]!r}")
            if now >= measure_from:
                out["rewards"].append(time.perf_counter() - done)
        i += 1
    writer.close()


def decision_bodies(count: int = 64) -> list[bytes]:
    """The decision requests' bodies, encoded once: K = 100 unit-norm arms of d = 10 each."""
    rng = np.random.default_rng(0)
    bodies = []
    for _ in range(count):
        x = rng.standard_normal((100, 10))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        bodies.append(json.dumps({"features": x.round(6).tolist()}).encode())
    return bodies


async def load(
    port: int, token: str, seconds: float, warmup: float, connections: int, reward_every: int
) -> dict[str, list[float]]:
    bodies = decision_bodies()
    out: dict[str, list[float]] = {"decisions": [], "rewards": []}
    start = time.perf_counter()
    await asyncio.gather(
        *(
            worker(port, token, bodies, start + warmup + seconds, start + warmup, out, reward_every)
            for _ in range(connections)
        )
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--reward-every", type=int, default=2, help="reward every N-th decision (0: none)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fedbandits-serve-load-"))
    config = work / "serve.toml"
    config.write_text(CONFIG)
    tokens = (work / "traffic.token", work / "sync.token")
    token, sync = write_token(tokens[0]), write_token(tokens[1])
    pin = shutil.which("taskset") is not None
    if args.reward_every < 0 or args.connections < 1:
        raise SystemExit("--reward-every must be >= 0 and --connections >= 1")
    silo = start_silo(config, 0, "fed", work, tokens, ["--sync-seconds", "1"])
    coordinator = Coordinator(config, HttpLink([silo.url], sync), work / "server", entry="fed", sync_seconds=1.0)
    try:
        if pin:
            subprocess.run(["taskset", "-a", "-p", "-c", "0", str(silo.process.pid)], check=True, capture_output=True)
            subprocess.run(
                ["taskset", "-a", "-p", "-c", "1", str(__import__("os").getpid())], check=True, capture_output=True
            )
        rounds = threading.Thread(target=coordinator.run, daemon=True)
        rounds.start()
        port = int(silo.url.rsplit(":", 1)[1])
        out = asyncio.run(load(port, token, args.seconds, args.warmup, args.connections, args.reward_every))
        coordinator.stop()
        rounds.join()
        status = httpx.get(silo.url + "/v1/status", headers={"Authorization": f"Bearer {token}"}).json()
    finally:
        coordinator.stop()
        coordinator.close()
        silo.process.stop()
        shutil.rmtree(work, ignore_errors=True)
    dec = np.array(out["decisions"]) * 1000
    rew = np.array(out["rewards"]) * 1000
    rate = len(dec) / args.seconds
    print(
        f"one silo, d = 10, K = 100, ldp, sync every 1 s, {args.connections} connections, "
        f"{args.seconds:g} s measured after {args.warmup:g} s warm-up, pinned: {pin}"
    )
    print(f"decisions/s: {rate:,.0f} (plus {len(rew) / args.seconds:,.0f} rewards/s)")
    print(f"decision latency, client side: p50 {np.percentile(dec, 50):.2f} ms, p99 {np.percentile(dec, 99):.2f} ms")
    if len(rew):
        print(f"reward latency, client side: p50 {np.percentile(rew, 50):.2f} ms, p99 {np.percentile(rew, 99):.2f} ms")
    print(f"in the handler (silo's /v1/status, last 10,000): {status['latency_ms']}")
    print(f"sync rounds closed: {status['model_version']} (epoch.round); releases made: {status['syncs']}")
    met = rate >= 2000 and np.percentile(dec, 99) <= 10
    print(f"target: >= 2,000 decisions/s, p99 <= 10 ms: {'met' if met else 'NOT met'}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
