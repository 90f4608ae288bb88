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

from fedbandits.config import Config, load_config
from fedbandits.envs.synthetic import GaussianSphere, GaussianSphereParams
from fedbandits.federation.certs import create_flower_credentials
from fedbandits.federation.processes import (
    DeployError,
    Proc,
    flower_bin,
    free_port,
    start_process,
    watch_processes_under,
)
from fedbandits.serve.coordinator import Coordinator
from fedbandits.serve.links import HttpLink
from fedbandits.serve.server_http import federation_app

DEMO_CONFIG = Path(__file__).with_name("demo.toml")
SYNC_SECONDS = 5.0
#: with --flower: every message starts a ClientApp process on the silo's host (Flower 1.42; about
#: 2 s of CPU, docs/serving.md), and the demo's 3 silos share one host with the traffic generator
FLOWER_SYNC_SECONDS = 15.0


@dataclass
class SiloProcess:
    """A ``fedbandits serve silo`` process on 127.0.0.1 and how to reach it."""

    process: Proc
    url: str
    log: Path


def marked(workdir: Path) -> dict[str, str]:
    """The environment of a process the demo starts: marked with the work folder, so that the
    demo's watchdog (:func:`fedbandits.federation.processes.watch_processes_under`) stops it, and
    whatever it starts in turn, even if the demo is SIGKILLed."""
    return {**os.environ, "FLWR_HOME": str(workdir.resolve())}


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
    process = start_process(name, cmd, log, marked(workdir))
    url = f"http://127.0.0.1:{port}"
    wait_healthy(process, url, log)
    return SiloProcess(process, url, log)


def start_flower_server(
    config: Path,
    workdir: Path,
    silos: int,
    status_port: int,
    sync_seconds: float = FLOWER_SYNC_SECONDS,
    link: str | None = None,
) -> tuple[Proc, str]:
    """``fedbandits serve server --flower`` on 127.0.0.1 with trial credentials made in ``workdir/certs``
    (the deployment's CA, server certificate and one SuperNode key per silo), its status API on
    ``status_port``; waits until the app is submitted (90 s at most).  ``link``: the SuperLink's
    HOST:PORT (default: 127.0.0.1 and a free port; a restart passes the same).  Returns the process
    and ``link``."""
    certs = workdir / "certs"
    if not (certs / "ca.pem").exists():
        create_flower_credentials(certs, silos)
    link = link or f"127.0.0.1:{free_port()}"
    cmd = [
        sys.executable, "-m", "fedbandits.cli", "serve", "server", str(config), "--entry", "fed", "--flower",
        "--certs", str(certs), "--state-dir", str(workdir / "server"), "--superlink-port", link.split(":")[1],
        "--sync-seconds", str(sync_seconds), "--budget-policy", "renew",
        "--port", str(status_port), "--token-file", str(workdir / "view.token"),
    ]  # fmt: skip
    log = workdir / "server.log"
    process = start_process("server", cmd, log, marked(workdir))
    wait_healthy(process, f"http://127.0.0.1:{status_port}", log, 90.0, "server")
    return process, link


def wait_healthy(process: Proc, url: str, log: Path, seconds: float = 30.0, what: str = "silo") -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not process.alive():
            raise RuntimeError(f"{what} process exited with {process.popen.returncode}: {log.read_text()[-400:]}")
        try:
            if httpx.get(url + "/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} at {url} did not become healthy in {seconds:g} s")


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
    slots: asyncio.Semaphore,
) -> None:
    try:
        async with slots:
            start = time.perf_counter()
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
        async with slots:
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
    # requests wait for one of the pool's connections here, not in httpx's pool, whose queue costs
    # time quadratic in its length: an open-loop generator that falls behind must not spiral
    slots = asyncio.Semaphore(64)
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
                    task = asyncio.create_task(_user(client, url, x, means, noise, tally, line, rng, slots))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(tasks, timeout=30.0)
        for task in list(tasks):  # users still waiting to act when the demo ends never do
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return tally


def demo_config(path: Path | None, flower: bool) -> tuple[Path, Config, str]:
    """The demo's config (the embedded one unless ``path``), checked: its file, the config, the
    protocol of 'fed'; with ``flower``, that the deploy extra is installed."""
    path = Path(path) if path else DEMO_CONFIG
    config = load_config(path)
    labels = {a.label: a.name for a in config.algorithms}
    if not isinstance(config.environment.params, GaussianSphereParams):
        raise ValueError(f"--config {path}: the demo's users come from a gaussian-sphere environment")
    if labels.get("fed") != "fedlinucb" or labels.get("alone") != "linucb-independent":
        raise ValueError(
            f"--config {path}: the demo needs entries labelled 'fed' (fedlinucb) and 'alone' (linucb-independent)"
        )
    protocol = next(a for a in config.algorithms if a.label == "fed").params.protocol  # type: ignore[attr-defined]
    if flower:
        try:
            flower_bin("flower-superlink")
        except DeployError as exc:
            raise ValueError(f"--flower: {exc}") from None
    return path, config, protocol


def _start_silos(
    flower: bool,
    path: Path,
    workdir: Path,
    silos: int,
    tokens: tuple[Path, Path],
    web_port: int,
    sync_seconds: float,
    processes: list[Proc],
) -> tuple[list[SiloProcess], list[SiloProcess]]:
    """The federated silos (with ``flower``: behind `serve server --flower`'s SuperLink) and the lone
    ones; every process started is in ``processes``, to be stopped whatever happens next."""
    schedule = ["--sync-seconds", str(sync_seconds), "--budget-policy", "renew"]
    if flower:  # the Flower deployment carries the rounds: `serve server --flower`, silos with --superlink
        server, link = start_flower_server(path, workdir, silos, web_port)
        processes.append(server)
        schedule += ["--superlink", link, "--superlink-ca", str(workdir / "certs" / "ca.pem")]
    fed = []
    for i in range(silos):
        key = ["--node-key", str(workdir / "certs" / f"silo-{i}")] if flower else []
        fed.append(start_silo(path, i, "fed", workdir, tokens, [*schedule, *key]))
        processes.append(fed[-1].process)
    alone = []
    for i in range(silos):
        alone.append(start_silo(path, i, "alone", workdir, tokens))
        processes.append(alone[-1].process)
    return fed, alone


def run_demo(config_file: Path | None, seconds: float, rate: float, workdir: Path | None, flower: bool) -> int:
    """Run the demo: ``seconds`` of traffic at ``rate`` users per second per silo, its work folder
    kept in ``workdir`` if given (else a temporary one, removed), synced through Flower if ``flower``."""
    if not seconds > 0 or not rate > 0:
        raise ValueError(f"seconds and rate must be > 0, got {seconds} and {rate}")
    path, config, protocol = demo_config(config_file, flower)
    keep = workdir is not None
    workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="fedbandits-serve-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    tokens = (workdir / "traffic.token", workdir / "sync.token")
    token, sync = write_token(tokens[0]), write_token(tokens[1])
    silos = config.environment.params.agents  # type: ignore[attr-defined]
    processes: list[Proc] = []
    watchdog = watch_processes_under(workdir)
    coordinator: Coordinator | None = None
    thread: threading.Thread | None = None
    web: uvicorn.Server | None = None
    web_thread = threading.Thread()
    view = write_token(workdir / "view.token")
    web_port = free_port()
    try:
        sync_seconds = FLOWER_SYNC_SECONDS if flower else SYNC_SECONDS
        fed, alone = _start_silos(flower, path, workdir, silos, tokens, web_port, sync_seconds, processes)
        if not flower:
            coordinator = Coordinator(
                config,
                HttpLink([s.url for s in fed], sync),
                workdir / "server",
                entry="fed",
                sync_seconds=sync_seconds,
                policy="renew",
            )
            thread = threading.Thread(target=coordinator.run, name="sync-rounds", daemon=True)
            thread.start()
            app = federation_app(coordinator.status, view)
            web = uvicorn.Server(uvicorn.Config(app, port=web_port, log_level="warning"))
            web_thread = threading.Thread(target=web.run, name="federation-status", daemon=True)
            web_thread.start()
        carrier = "the Flower deployment" if flower else "the silos' sync API"
        print(
            f"demo: {silos} federated silos ({protocol}, sync every {sync_seconds:g} s over {carrier}) and {silos} "
            f"lone silos on 127.0.0.1, {rate:g} users/s each, for {seconds:g} s (work folder {workdir})",
            flush=True,
        )
        print(
            f"dashboards: {fed[0].url}/dashboard#token={token} (silo 0), "
            f"http://127.0.0.1:{web_port}/dashboard#token={view} (federation)",
            flush=True,
        )
        tally = asyncio.run(traffic([s.url for s in fed], [s.url for s in alone], token, config, seconds, rate))
        if coordinator is not None and thread is not None:
            coordinator.stop()
            thread.join(timeout=30.0)
        statuses = [httpx.get(s.url + "/v1/status", headers={"Authorization": f"Bearer {token}"}).json() for s in fed]
        server_status = httpx.get(
            f"http://127.0.0.1:{web_port}/v1/status", headers={"Authorization": f"Bearer {view}"}, timeout=10.0
        ).json()
        print(summary(tally, statuses, server_status))
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
        watchdog.close()  # and whatever is still marked with the work folder
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
    if s.get("horizon_of_guarantee"):  # a streaming release: one guarantee, its noise grows instead
        budget = (
            f"epsilon spent {s.get('epsilon_lifetime', 0.0):.3f} for every release ever made (streaming, band "
            f"{s.get('stream_band')}; delta {s.get('delta_lifetime')}); prefix noise std "
            f"{s.get('prefix_noise_std'):.3g} now, {s.get('prefix_noise_std_at_10x'):.3g} at 10x the releases"
        )
    else:
        budget = (
            f"epsilon spent {s.get('epsilon_lifetime', 0.0):.3f} over {int(s.get('epoch', 0)) + 1} epoch(s) of "
            f"{s.get('releases_planned')} releases at epsilon {s.get('epsilon')} (delta {s.get('delta_lifetime')})"
        )
    lines.append(f"sync: {server['model_version']} (epoch.round) closed, every {server['sync_seconds']:g} s; {budget}")
    return "\n".join(lines)
