"""``fedbandits serve demo``: a server, 3 serving silos and live traffic on 127.0.0.1.

Six silo processes serve the same users: 3 federated silos (``fedlinucb``, ``ldp``, synced by the
coordinator every few seconds) and, for comparison, 3 silos serving alone (``linucb-independent``).
Users come from the synthetic instance of the embedded config (gaussian-sphere: K fresh arms,
expected reward <x, theta*>); each user is shown to a federated silo and to its lone twin, and each
posts the observed reward (clipped to the private bound [-1, 1]) after a random delay (exponential,
mean 2 s), or never (1 user in 10).  At the end the demo prints decisions served, client-side
p50/p99 latency, the mean *expected* reward of the chosen arms (federated against alone, over the
second half of the traffic: the pseudo-regret view), the sync rounds closed and the epsilon spent,
then stops every process it started.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import uvicorn

from fedbandits.config import load_config
from fedbandits.envs.synthetic import GaussianSphere, GaussianSphereParams
from fedbandits.federation.processes import Proc, free_port, start_process
from fedbandits.serve.coordinator import Coordinator
from fedbandits.serve.links import HttpLink
from fedbandits.serve.server_http import federation_app

DEMO_CONFIG = Path(__file__).with_name("demo.toml")
SYNC_SECONDS = 5.0


@dataclass
class SiloProcess:
    """A ``fedbandits serve silo`` process on 127.0.0.1 and how to reach it."""

    process: Proc
    url: str
    log: Path


def write_token(path: Path) -> str:
    token = secrets.token_urlsafe(24)
    path.write_text(token + "\n", encoding="utf-8")
    path.chmod(0o600)
    return token


def start_silo(
    config: Path,
    silo: int,
    entry: str,
    workdir: Path,
    tokens: tuple[Path, Path],
    extra: Sequence[str] = (),
    port: int | None = None,
) -> SiloProcess:
    """Start one silo process (on ``port``, default a free one) and wait until it answers ``/healthz``
    (30 s at most)."""
    port = port or free_port()
    name = f"{entry}-{silo}"
    log = workdir / f"{name}.log"
    cmd = [
        sys.executable,
        "-m",
        "fedbandits.cli",
        "serve",
        "silo",
        str(config),
        "--silo",
        str(silo),
        "--entry",
        entry,
        "--state-dir",
        str(workdir / name),
        "--token-file",
        str(tokens[0]),
        "--sync-token-file",
        str(tokens[1]),
        "--port",
        str(port),
        *extra,
    ]
    process = start_process(name, cmd, log, dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    wait_healthy(process, url, log)
    return SiloProcess(process, url, log)


def wait_healthy(process: Proc, url: str, log: Path, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not process.alive():
            raise RuntimeError(f"silo process exited with {process.popen.returncode}: {log.read_text()[-400:]}")
        try:
            if httpx.get(url + "/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"silo at {url} did not become healthy in {seconds:g} s")


@dataclass
class Tally:
    """Client-side figures of the traffic."""

    latencies: list[float] = field(default_factory=list)
    chosen: dict[str, list[tuple[float, float, float]]] = field(default_factory=dict)  # (time, mean, best)
    errors: dict[str, int] = field(default_factory=dict)

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1

    rewards_posted: int = 0


async def _user(
    client: httpx.AsyncClient,
    url: str,
    features: np.ndarray,
    means: np.ndarray,
    noise: float,
    tally: Tally,
    line: str,
    rng: np.random.Generator,
) -> None:
    start = time.perf_counter()
    try:
        r = await client.post(url + "/v1/decisions", json={"features": features.tolist()})
    except httpx.HTTPError as exc:
        tally.error(type(exc).__name__)
        return
    tally.latencies.append(time.perf_counter() - start)
    if r.status_code != 200:
        tally.error(f"decision {r.status_code}")
        return
    got = r.json()
    arm = int(got["arm"])
    tally.chosen.setdefault(line, []).append((time.time(), float(means[arm]), float(means.max())))
    if rng.random() < 0.1:  # this user never acts
        return
    await asyncio.sleep(float(rng.exponential(2.0)))
    reward = float(np.clip(means[arm] + noise, -1.0, 1.0))
    try:
        r = await client.post(url + "/v1/rewards", json={"decision_id": got["decision_id"], "reward": reward})
        if r.status_code == 200:
            tally.rewards_posted += 1
        else:
            tally.error(f"reward {r.status_code}")
    except httpx.HTTPError as exc:
        tally.error(type(exc).__name__)


async def traffic(
    fed: list[str], alone: list[str], token: str, config: Any, seconds: float, rate: float, seed: int = 2026
) -> Tally:
    """``rate`` users per second per silo for ``seconds``; each shown to a federated silo and its lone twin."""
    env = config.environment
    assert isinstance(env.params, GaussianSphereParams)  # the demo's embedded config
    params = env.params
    sphere = GaussianSphere([np.random.default_rng(seed)], params)
    rng = np.random.default_rng(seed + 1)
    tally = Tally()
    tasks: set[asyncio.Task[None]] = set()
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64, keepalive_expiry=2.0)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=10.0, limits=limits) as client:
        start = time.monotonic()
        step = 0
        while (now := time.monotonic()) < start + seconds:
            wait = start + step / rate - now
            if wait > 0:
                await asyncio.sleep(wait)
            step += 1
            round_ = sphere.next_round()
            for i in range(len(fed)):
                x = round_.features[0, i].astype(np.float64)
                means = round_.means[0, i].astype(np.float64)
                noise = float(params.noise_sd * round_.noise[0, i])
                for line, url in (("federated", fed[i]), ("alone", alone[i])):
                    task = asyncio.create_task(_user(client, url, x, means, noise, tally, line, rng))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks, timeout=30.0)
    return tally


def run_demo(args: argparse.Namespace) -> int:
    if not args.seconds > 0 or not args.rate > 0:
        raise ValueError("--seconds and --rate must be > 0")
    path = Path(args.config) if args.config else DEMO_CONFIG
    config = load_config(path)
    labels = {a.label: a.name for a in config.algorithms}
    if not isinstance(config.environment.params, GaussianSphereParams):
        raise ValueError(f"--config {path}: the demo's users come from a gaussian-sphere environment")
    if labels.get("fed") != "fedlinucb" or labels.get("alone") != "linucb-independent":
        raise ValueError(
            f"--config {path}: the demo needs entries labelled 'fed' (fedlinucb) and 'alone' (linucb-independent)"
        )
    protocol = next(a for a in config.algorithms if a.label == "fed").params.protocol  # type: ignore[attr-defined]
    keep = args.workdir is not None
    workdir = Path(args.workdir) if keep else Path(tempfile.mkdtemp(prefix="fedbandits-serve-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    tokens = (workdir / "traffic.token", workdir / "sync.token")
    token, sync = write_token(tokens[0]), write_token(tokens[1])
    silos = config.environment.params.agents  # type: ignore[attr-defined]
    processes: list[Proc] = []
    coordinator: Coordinator | None = None
    thread: threading.Thread | None = None
    web: uvicorn.Server | None = None
    web_thread = threading.Thread()
    try:
        schedule = ["--sync-seconds", str(SYNC_SECONDS), "--budget-policy", "renew"]
        fed = [start_silo(path, i, "fed", workdir, tokens, schedule) for i in range(silos)]
        processes += [s.process for s in fed]
        alone = [start_silo(path, i, "alone", workdir, tokens) for i in range(silos)]
        processes += [s.process for s in alone]
        coordinator = Coordinator(
            config,
            HttpLink([s.url for s in fed], sync),
            workdir / "server",
            entry="fed",
            sync_seconds=SYNC_SECONDS,
            policy="renew",
        )
        thread = threading.Thread(target=coordinator.run, name="sync-rounds", daemon=True)
        thread.start()
        view = write_token(workdir / "view.token")
        web_port = free_port()
        web = uvicorn.Server(uvicorn.Config(federation_app(coordinator, view), port=web_port, log_level="warning"))
        web_thread = threading.Thread(target=web.run, name="federation-status", daemon=True)
        web_thread.start()
        print(
            f"demo: {silos} federated silos ({protocol}, sync every {SYNC_SECONDS:g} s) and {silos} lone silos on "
            f"127.0.0.1, {args.rate:g} users/s each, for {args.seconds:g} s (work folder {workdir})",
            flush=True,
        )
        print(
            f"dashboards: {fed[0].url}/dashboard#token={token} (silo 0), "
            f"http://127.0.0.1:{web_port}/dashboard#token={view} (federation)",
            flush=True,
        )
        tally = asyncio.run(
            traffic([s.url for s in fed], [s.url for s in alone], token, config, args.seconds, args.rate)
        )
        coordinator.stop()
        thread.join(timeout=30.0)
        statuses = [httpx.get(s.url + "/v1/status", headers={"Authorization": f"Bearer {token}"}).json() for s in fed]
        print(summary(tally, statuses, coordinator.status()))
    finally:
        if web is not None:
            web.should_exit = True
            web_thread.join(timeout=10.0)
        if coordinator is not None:
            coordinator.stop()
            if thread is not None:
                thread.join(timeout=30.0)
            coordinator.close()
        for process in processes:  # SIGTERM, then SIGKILL after 10 s: no process of ours outlives the demo
            process.stop()
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


def summary(tally: Tally, statuses: list[dict[str, Any]], server: dict[str, Any]) -> str:
    lat = np.array(tally.latencies) * 1000
    p50, p99 = np.percentile(lat, [50, 99]) if len(lat) else (float("nan"),) * 2
    lines = [
        f"decisions served: {len(lat):,} ({tally.rewards_posted:,} rewards learned; "
        f"refused or failed: {tally.errors or 'none'})",
        f"latency seen by the traffic generator (its own busy loop included): p50 {p50:.2f} ms, p99 {p99:.2f} ms",
    ]
    inside = [s["latency_ms"]["decisions"] for s in statuses]
    lines.append(
        "latency in the federated silos' handlers (last 10,000 each): "
        + ", ".join(f"p50 {q['p50']:.2f} / p99 {q['p99']:.2f} ms" for q in inside)
    )
    for line in ("federated", "alone"):
        rows = tally.chosen.get(line, [])
        half = sorted(rows)[len(rows) // 2 :]
        mean = np.mean([m for _, m, _ in half]) if half else float("nan")
        regret = np.mean([b - m for _, m, b in half]) if half else float("nan")
        lines.append(
            f"{line:>9}: mean expected reward {mean:.3f}, pseudo-regret per user {regret:.3f} "
            f"(second half, {len(half):,} users)"
        )
    s = statuses[0]
    lines.append(
        f"sync: {server['model_version']} (epoch.round) closed, every {server['sync_seconds']:g} s; "
        f"epsilon spent {s.get('epsilon_lifetime', 0.0):.3f} over {int(s.get('epoch', 0)) + 1} epoch(s) of "
        f"{s.get('releases_planned')} releases at epsilon {s.get('epsilon')} (delta {s.get('delta_lifetime')})"
    )
    return "\n".join(lines)
