"""The traffic of ``fedbandits serve demo``: users of the config's gaussian-sphere instance, each shown
to a federated silo and to its lone twin, with rewards posted after a delay.

The generator is an open loop (``rate`` users per second per silo, whatever the silos answer) on raw
HTTP/1.1 keep-alive connections to the silos' loopback ports, as benchmarks/serve_load.py's: an
HTTP client library costs a few times the silos' own CPU per request, and with 2 x M silos and the
generator sharing two cores the generator would be what falls behind.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from fedbandits.config import Config
from fedbandits.envs.synthetic import GaussianSphere, GaussianSphereParams
from fedbandits.serve.demo_report import Choice

#: connections kept per silo; requests beyond wait for one of them (here, not in a socket queue)
CONNECTIONS_PER_SILO = 4
#: a connection idle longer than this is dropped, well before the silo's keep-alive (30 s) closes it
IDLE_SECONDS = 10.0


class RequestError(Exception):
    """A request that got no HTTP answer (the connection failed or closed)."""


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    used: float


class SiloClient:
    """Keep-alive HTTP/1.1 connections to one silo at ``url`` (``http://127.0.0.1:PORT``), at most
    :data:`CONNECTIONS_PER_SILO` at once; one request at a time per connection.  A silo served by
    replicas has their URLs joined by commas: each request goes to the next replica in turn, and to
    the one after when a replica refuses the connection (as a load balancer would; a request that
    reached a replica is never sent twice)."""

    def __init__(self, url: str, token: str) -> None:
        self.replicas = []
        for one in url.split(","):
            parts = urlsplit(one)
            self.replicas.append((parts.hostname or "127.0.0.1", int(parts.port or 80)))
        self.host = self.replicas[0][0]
        self.auth = f"Authorization: Bearer {token}\r\n"
        self.idle: list[list[_Conn]] = [[] for _ in self.replicas]
        self.turn = 0
        self.slots = asyncio.Semaphore(CONNECTIONS_PER_SILO * len(self.replicas))

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """``POST path`` with the JSON ``body``: the status and the response body."""
        async with self.slots:
            at, conn = await self._connection()
            head = (
                f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\n{self.auth}"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            try:
                conn.writer.write(head.encode() + body)
                await conn.writer.drain()
                status, answer, close = await _read_response(conn.reader)
            except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                conn.writer.close()
                raise RequestError(type(exc).__name__) from None
            if close:
                conn.writer.close()
            else:
                conn.used = time.monotonic()
                self.idle[at].append(conn)
            return status, answer

    async def _connection(self) -> tuple[int, _Conn]:
        """A connection to the next replica that takes one (which replica, and the connection)."""
        failed: OSError | None = None
        for _ in self.replicas:
            at = self.turn
            self.turn = (self.turn + 1) % len(self.replicas)
            now = time.monotonic()
            while self.idle[at]:
                conn = self.idle[at].pop()
                if now - conn.used < IDLE_SECONDS and not conn.reader.at_eof():
                    return at, conn
                conn.writer.close()
            try:
                reader, writer = await asyncio.open_connection(*self.replicas[at])
            except OSError as exc:
                failed = exc
                continue
            return at, _Conn(reader, writer, now)
        raise RequestError(type(failed).__name__)

    def close(self) -> None:
        for idle in self.idle:
            for conn in idle:
                conn.writer.close()
            idle.clear()


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """One response: its status, body (by Content-Length) and whether the server closes the connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length, close = 0, False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection" and value.strip().lower() == b"close":
            close = True
    return status, await reader.readexactly(length), close


@dataclass
class Tally:
    """Client-side figures of the traffic."""

    latencies: list[float] = field(default_factory=list)
    #: per line, every user served: (step, silo, expected reward of the chosen arm, best expected reward)
    chosen: dict[str, list[Choice]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    rewards_posted: int = 0

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


@dataclass(frozen=True)
class Shown:
    """One user as one silo sees it: where it is sent and what it observes."""

    line: str
    client: SiloClient
    step: int
    silo: int
    body: bytes  # {"features": ...}
    means: np.ndarray
    noise: float
    delay: float | None  # seconds before the user's reward is posted; None: the user never acts
    bounds: tuple[float, float] | None  # the private line's [c - B, c + B]: its rewards are clipped to it


async def _user(user: Shown, tally: Tally) -> None:
    start = time.perf_counter()
    try:
        status, answer = await user.client.post("/v1/decisions", user.body)
    except RequestError as exc:
        tally.error(str(exc))
        return
    tally.latencies.append(time.perf_counter() - start)
    if status != 200:
        tally.error(f"decision {status}")
        return
    got = json.loads(answer)
    arm = int(got["arm"])
    tally.chosen.setdefault(user.line, []).append(
        (user.step, user.silo, float(user.means[arm]), float(user.means.max()))
    )
    if user.delay is None:
        return
    await asyncio.sleep(user.delay)
    reward = float(user.means[arm] + user.noise)
    if user.bounds is not None:  # the private silo refuses a reward out of its bounds: clipping is its cost
        reward = float(np.clip(reward, *user.bounds))
    try:
        status, _ = await user.client.post(
            "/v1/rewards", json.dumps({"decision_id": got["decision_id"], "reward": reward}).encode()
        )
    except RequestError as exc:
        tally.error(str(exc))
        return
    if status == 200:
        tally.rewards_posted += 1
    else:
        tally.error(f"reward {status}")


def private_bounds(config: Config) -> tuple[float, float] | None:
    """The 'fed' entry's reward range [c - B, c + B] (None if it is not private: no bound)."""
    params: Any = next(a for a in config.algorithms if a.label == "fed").params
    if params.protocol == "none":
        return None
    return (float(params.reward_offset) - float(params.reward_bound), float(params.reward_offset) + params.reward_bound)


async def traffic(
    fed: Sequence[str], alone: Sequence[str], token: str, config: Config, seconds: float, rate: float, seed: int
) -> Tally:
    """``rate`` users per second per silo for ``seconds``; each shown to a federated silo and its lone
    twin, which observe the same reward (the federated one clipped to its private bounds: the lone
    silo learns from the reward as observed, as the simulator's non-private learner does)."""
    params = config.environment.params
    assert isinstance(params, GaussianSphereParams)  # demo_config checked it
    sphere = GaussianSphere([np.random.default_rng(seed)], params)
    rng = np.random.default_rng(seed + 1)
    bounds = private_bounds(config)
    clients = [(SiloClient(f, token), SiloClient(a, token)) for f, a in zip(fed, alone, strict=True)]
    tally = Tally()
    tasks: set[asyncio.Task[None]] = set()
    start = time.monotonic()
    step = 0
    while (now := time.monotonic()) < start + seconds:
        wait = start + step / rate - now
        if wait > 0:
            await asyncio.sleep(wait)
        round_ = sphere.next_round()
        for i, (to_fed, to_alone) in enumerate(clients):
            means = round_.means[0, i].astype(np.float64)
            noise = float(params.noise_sd * round_.noise[0, i])
            body = json.dumps({"features": round_.features[0, i].astype(np.float64).tolist()}).encode()
            # the same user on both lines: the same arms, reward noise and delay (1 in 10 never acts)
            delay = float(rng.exponential(2.0)) if rng.random() >= 0.1 else None
            for line, client, clip in (("federated", to_fed, bounds), ("alone", to_alone, None)):
                user = Shown(line, client, step, i, body, means, noise, delay, clip)
                task = asyncio.create_task(_user(user, tally))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        step += 1
    if tasks:
        await asyncio.wait(tasks, timeout=30.0)
    for task in list(tasks):  # users still waiting to act when the demo ends never do
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for pair in clients:
        for client in pair:
            client.close()
    return tally


def run_traffic(
    fed: Sequence[str], alone: Sequence[str], token: str, config: Config, seconds: float, rate: float, seed: int
) -> Tally:
    """:func:`traffic` on uvloop's event loop (the serve extra's; cheaper per request than asyncio's)."""
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(traffic(fed, alone, token, config, seconds, rate, seed))
