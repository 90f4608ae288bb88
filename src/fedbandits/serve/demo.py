"""``fedbandits serve demo``: a server, 20 federated serving silos, 20 lone ones and live traffic on 127.0.0.1.

2 x M silo processes serve the same users: M federated silos (``fedlinucb``; the embedded config:
M = 20, ``distributed-dp`` with the streaming banded release, synced by the coordinator every 5 s)
and, for comparison, M silos serving alone (``linucb-independent``).  Users come from the synthetic
instance of the config (gaussian-sphere: K fresh arms, expected reward <x, theta*>;
:mod:`fedbandits.serve.demo_traffic`); each user is shown to a federated silo and to its lone twin,
and posts the observed reward after a random delay (exponential, mean 2 s), or never (1 user in 10).
At the end the demo prints decisions served, client-side p50/p99 latency, the pseudo-regret per user
of both lines as a learning curve with 95% intervals and a verdict
(:mod:`fedbandits.serve.demo_report`), the sync rounds closed and the epsilon spent, then stops every
process it started.  With ``--flower`` the rounds go through a Flower deployment, 3 silos per line by
default (each Flower message starts a process on the silo's host).
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import tomli_w
import uvicorn

from fedbandits.config import Config, config_from_dict, load_config
from fedbandits.envs.synthetic import GaussianSphereParams
from fedbandits.federation.certs import create_flower_credentials, create_signing_credentials, signing_files
from fedbandits.federation.processes import (
    DeployError,
    Proc,
    flower_bin,
    free_port,
    start_process,
    watch_processes_under,
)
from fedbandits.serve.coordinator import Coordinator
from fedbandits.serve.demo_replicas import REPLICA_SILOS, Failover, replica_lines, start_database
from fedbandits.serve.demo_report import regret_table
from fedbandits.serve.demo_traffic import Tally, run_traffic
from fedbandits.serve.links import HttpLink
from fedbandits.serve.server_http import federation_app

DEMO_CONFIG = Path(__file__).with_name("demo.toml")
SYNC_SECONDS = 5.0
#: with --flower: every message starts a ClientApp process on the silo's host (Flower 1.42; about
#: 2 s of CPU, docs/serving.md), and the demo's 3 silos share one host with the traffic generator
FLOWER_SYNC_SECONDS = 15.0
#: with --flower the demo runs 3 silos per line unless --silos says otherwise: each silo's SuperNode starts
#: a ClientApp process per message (about 2 s of CPU), and distributed-dp's rounds take several messages
FLOWER_SILOS = 3
#: how long the silos, started side by side, may take to answer /healthz (2 x 20 processes importing
#: numpy and starlette at once on 2 cores)
STARTUP_SECONDS = 120.0


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


def launch_silo(
    config: Path,
    silo: int,
    entry: str,
    workdir: Path,
    tokens: tuple[Path, Path],
    extra: Sequence[str] = (),
    port: int | None = None,
) -> SiloProcess:
    """Start one silo process (on ``port``, default a free one) without waiting for it."""
    port = port or free_port()
    name = f"{entry}-{silo}"
    log = workdir / f"{name}.log"
    cmd = [
        sys.executable, "-m", "fedbandits.cli", "serve", "silo", str(config), "--silo", str(silo),
        "--entry", entry, "--state-dir", str(workdir / name), "--token-file", str(tokens[0]),
        "--sync-token-file", str(tokens[1]), "--port", str(port), *extra,
    ]  # fmt: skip
    process = start_process(name, cmd, log, marked(workdir))
    return SiloProcess(process, f"http://127.0.0.1:{port}", log)


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
    started = launch_silo(config, silo, entry, workdir, tokens, extra, port)
    wait_healthy(started.process, started.url, started.log)
    return started


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


def demo_config(path: Path | None, flower: bool, silos: int | None = None) -> tuple[Path, Config, str]:
    """The demo's config (the embedded one unless ``path``), checked: its file, the config, the
    protocol of 'fed'; with ``flower``, that the deploy extra is installed.  ``silos``: that many
    silos per line instead of the config's agents (the caller writes the changed config out)."""
    path = Path(path) if path else DEMO_CONFIG
    config = load_config(path)
    labels = {a.label: a.name for a in config.algorithms}
    if not isinstance(config.environment.params, GaussianSphereParams):
        raise ValueError(f"--config {path}: the demo's users come from a gaussian-sphere environment")
    if labels.get("fed") != "fedlinucb" or labels.get("alone") != "linucb-independent":
        raise ValueError(
            f"--config {path}: the demo needs entries labelled 'fed' (fedlinucb) and 'alone' (linucb-independent)"
        )
    if silos is not None and silos != config.environment.params.agents:
        if isinstance(silos, bool) or not isinstance(silos, int) or silos < 1:
            raise ValueError(f"--silos must be an integer >= 1, got {silos!r}")
        data = config.to_dict()
        data["environment"]["agents"] = silos
        config = config_from_dict(data)
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
    masked: bool,
    stores: list[str] | None = None,
    replicas: int = 1,
) -> tuple[list[list[SiloProcess]], list[SiloProcess]]:
    """The federated silos (with ``flower``: behind `serve server --flower`'s SuperLink) and the lone
    ones, all started at once, then waited for (every process started is in ``processes``, to be
    stopped whatever happens next); each federated silo as a list of its replicas (one, or one per
    replica on ``stores[i]``: a PostgreSQL URL per silo).  ``masked`` (distributed-dp): each
    federated silo gets a trial signing identity for its secure-aggregation keys."""
    schedule = ["--sync-seconds", str(sync_seconds), "--budget-policy", "renew"]
    certs = workdir / "certs"
    if flower:  # the Flower deployment carries the rounds: `serve server --flower`, silos with --superlink
        server, link = start_flower_server(path, workdir, silos, web_port)
        processes.append(server)
        schedule += ["--superlink", link, "--superlink-ca", str(certs / "ca.pem")]
    if masked:
        create_signing_credentials(certs, silos)
    fed: list[list[SiloProcess]] = []
    alone = []
    for i in range(silos):
        extra = list(schedule)
        if flower:
            extra += ["--node-key", str(certs / f"silo-{i}")]
        if masked:
            key, cert, ca = signing_files(certs, i)
            extra += ["--signing-key", str(key), "--signing-cert", str(cert), "--signing-ca", str(ca)]
        if stores is None:
            fed.append([launch_silo(path, i, "fed", workdir, tokens, extra)])
        else:  # each replica its own state folder (its lock, its log file), the log in stores[i]
            extra += ["--store", stores[i]]
            fed.append([launch_silo(path, i, "fed", workdir / f"replica-{k}", tokens, extra) for k in range(replicas)])
        processes.extend(s.process for s in fed[-1])
        alone.append(launch_silo(path, i, "alone", workdir, tokens))
        processes.append(alone[-1].process)
    for started in (*(s for group in fed for s in group), *alone):  # side by side: the two cores import at once
        wait_healthy(started.process, started.url, started.log, STARTUP_SECONDS)
    return fed, alone


@dataclass
class Sync:
    """The demo's sync side without --flower: the coordinator's thread and the federation's status page."""

    coordinator: Coordinator | None = None
    thread: threading.Thread | None = None
    web: uvicorn.Server | None = None
    web_thread: threading.Thread | None = None

    def start(self, config: Config, fed: list[list[SiloProcess]], sync: str, workdir: Path, seconds: float) -> None:
        self.coordinator = Coordinator(
            config,
            HttpLink([",".join(s.url for s in group) for group in fed], sync),  # a silo's replicas: any answers
            workdir / "server",
            entry="fed",
            sync_seconds=seconds,
            policy="renew",
        )
        self.thread = threading.Thread(target=self.coordinator.run, name="sync-rounds", daemon=True)
        self.thread.start()

    def serve_status(self, view: str, port: int) -> None:
        assert self.coordinator is not None
        app = federation_app(self.coordinator.status, view)
        self.web = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
        self.web_thread = threading.Thread(target=self.web.run, name="federation-status", daemon=True)
        self.web_thread.start()

    def stop_rounds(self) -> None:
        if self.coordinator is not None:
            self.coordinator.stop()
            if self.thread is not None:
                self.thread.join(timeout=30.0)

    def close(self) -> None:
        if self.web is not None and self.web_thread is not None:
            self.web.should_exit = True
            self.web_thread.join(timeout=10.0)
        self.stop_rounds()
        if self.coordinator is not None:
            self.coordinator.close()


def run_demo(
    config_file: Path | None,
    seconds: float,
    rate: float,
    workdir: Path | None,
    flower: bool,
    silos: int | None = None,
    seed: int | None = None,
    replicas: int = 1,
) -> int:
    """Run the demo: ``seconds`` of traffic at ``rate`` users per second per silo, its work folder
    kept in ``workdir`` if given (else a temporary one, removed), synced through Flower if ``flower``;
    ``silos`` per line (default: the config's agents, 3 with ``flower``, 6 with ``replicas``), users drawn
    from ``seed`` (default: the config's); ``replicas`` > 1: each federated silo served by that many
    replicas on PostgreSQL (:mod:`fedbandits.serve.demo_replicas`)."""
    if not seconds > 0 or not rate > 0:
        raise ValueError(f"seconds and rate must be > 0, got {seconds} and {rate}")
    if replicas != 1 and flower:
        raise ValueError("--replicas: the demo's replicas sync over HTTPS, not --flower")
    if silos is None and (flower or replicas != 1):
        silos = FLOWER_SILOS if flower else REPLICA_SILOS
    _, config, protocol = demo_config(config_file, flower, silos)
    seed = config.experiment.seed if seed is None else seed
    keep = workdir is not None
    workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="fedbandits-serve-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "demo.toml"  # the config every process of the demo runs
    path.write_text(tomli_w.dumps(config.to_dict()), encoding="utf-8")
    tokens = (workdir / "traffic.token", workdir / "sync.token")
    token, sync = write_token(tokens[0]), write_token(tokens[1])
    silos = int(config.environment.params.agents)  # type: ignore[attr-defined]
    processes: list[Proc] = []
    watchdog = watch_processes_under(workdir)
    side = Sync()
    view = write_token(workdir / "view.token")
    web_port = free_port()
    masked = protocol == "distributed-dp"
    database, stores, failover = (None, None, None)
    try:
        if replicas != 1:
            database, stores = start_database(silos, replicas)
        sync_seconds = FLOWER_SYNC_SECONDS if flower else SYNC_SECONDS
        begun = time.monotonic()
        fed, alone = _start_silos(
            flower, path, workdir, silos, tokens, web_port, sync_seconds, processes, masked, stores, replicas
        )
        if stores is not None:  # half-way through, replica 0 of silo 0 is killed, then restarted on the log
            failover = _failover(fed[0][0], path, workdir, tokens, sync_seconds, masked, stores[0], seconds, processes)
        if not flower:
            side.start(config, fed, sync, workdir, sync_seconds)
            side.serve_status(view, web_port)
        carrier = "the Flower deployment" if flower else "the silos' sync API"
        each = f" ({replicas} replicas each)" if replicas != 1 else ""
        print(
            f"demo: {silos} federated silos{each} ({protocol}, sync every {sync_seconds:g} s over {carrier}) and "
            f"{silos} lone silos on 127.0.0.1 (started in {time.monotonic() - begun:.0f} s), {rate:g} users/s each, "
            f"for {seconds:g} s, users of seed {seed} (work folder {workdir})",
            flush=True,
        )
        print(f"dashboards: {fed[0][0].url}/dashboard#token={token} (silo 0), ", end="")
        print(f"http://127.0.0.1:{web_port}/dashboard#token={view} (federation)", flush=True)
        if failover is not None:
            failover.start()
        urls = [",".join(s.url for s in group) for group in fed]
        tally = run_traffic(urls, [s.url for s in alone], token, config, seconds, rate, seed)
        side.stop_rounds()
        if failover is not None:
            failover.join()
        _report(tally, fed, token, f"http://127.0.0.1:{web_port}", view, silos, replicas, failover)
    finally:
        side.close()
        if database is not None:
            database.close()
        for process in processes:  # SIGTERM, then SIGKILL after 10 s: no process of ours outlives the demo
            process.stop()
        watchdog.close()  # and whatever is still marked with the work folder
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


def _report(
    tally: Tally,
    fed: list[list[SiloProcess]],
    token: str,
    server: str,
    view: str,
    silos: int,
    replicas: int,
    failover: Failover | None,
) -> None:
    """The demo's last screen, from the traffic's tally and every federated replica's and the server's status."""
    auth = {"Authorization": f"Bearer {token}"}
    statuses = [httpx.get(s.url + "/v1/status", headers=auth).json() for group in fed for s in group]
    server_status = httpx.get(server + "/v1/status", headers={"Authorization": f"Bearer {view}"}, timeout=10.0).json()
    print(summary(tally, statuses, server_status, silos), flush=True)
    if replicas != 1:
        print("\n".join(replica_lines(statuses, replicas, failover)), flush=True)


def _failover(
    first: SiloProcess,
    path: Path,
    workdir: Path,
    tokens: tuple[Path, Path],
    sync_seconds: float,
    masked: bool,
    store: str,
    seconds: float,
    processes: list[Proc],
) -> Failover:
    """Replica 0 of silo 0's kill half-way through the traffic, and its restart on the same port and log."""
    extra = ["--sync-seconds", str(sync_seconds), "--budget-policy", "renew", "--store", store]
    if masked:
        key, cert, ca = signing_files(workdir / "certs", 0)
        extra += ["--signing-key", str(key), "--signing-cert", str(cert), "--signing-ca", str(ca)]
    port = int(first.url.rsplit(":", 1)[1])

    def restart() -> Proc:
        return start_silo(path, 0, "fed", workdir / "replica-0", tokens, extra, port=port).process

    return Failover(restart, seconds / 2, processes, first.process)


def summary(tally: Tally, statuses: list[dict[str, Any]], server: dict[str, Any], silos: int) -> str:
    lat = np.array(tally.latencies) * 1000
    p50, p99 = np.percentile(lat, [50, 99]) if len(lat) else (float("nan"),) * 2
    lines = [
        f"decisions served: {len(lat):,} ({tally.rewards_posted:,} rewards learned; "
        f"refused or failed: {tally.errors or 'none'})",
        f"latency seen by the traffic generator (its own busy loop included): p50 {p50:.2f} ms, p99 {p99:.2f} ms",
    ]
    # a replica restarted late in the run may not have served a decision yet (no percentiles)
    served = [s["latency_ms"]["decisions"] for s in statuses if s["latency_ms"]["decisions"]["p50"] is not None]
    inside = np.array([[s[q] for q in ("p50", "p99")] for s in served] or [[float("nan")] * 2])
    lines.append(
        f"latency in the {silos} federated silos' handlers (last 10,000 each"
        f"{'' if len(statuses) == silos else f', {len(statuses)} replicas'}): "
        f"p50 {inside[:, 0].min():.2f}-{inside[:, 0].max():.2f} ms, "
        f"p99 {inside[:, 1].min():.2f}-{inside[:, 1].max():.2f} ms"
    )
    version = server.get("model_version")
    lines += regret_table(tally.chosen, silos, synced=version is not None)
    closed = "no round closed" if version is None else f"{version} (epoch.round) closed"
    rounds = f"sync: {closed}, every {server['sync_seconds']:g} s"
    lines.append(f"{rounds}; {budget(statuses[0])}")
    return "\n".join(lines)


def budget(s: dict[str, Any]) -> str:
    """The privacy a federated silo's releases spent, as its status states it."""
    if not s.get("private"):
        return "no privacy: the silos' exact statistics go to the server (protocol 'none')"
    if s.get("horizon_of_guarantee"):  # a streaming release: one guarantee, its noise grows instead
        if not s.get("syncs"):
            return f"no release made, so no epsilon spent (epsilon {s.get('epsilon')} will cover every release)"
        return (
            f"epsilon {s.get('epsilon_lifetime', 0.0):.3f} for every release ever made (streaming, band "
            f"{s.get('stream_band')}; delta {s.get('delta_lifetime')}); prefix noise std "
            f"{s.get('prefix_noise_std'):.3g} now, {s.get('prefix_noise_std_at_10x'):.3g} at 10x the releases"
        )
    return (
        f"epsilon spent {s.get('epsilon_lifetime', 0.0):.3f} over {int(s.get('epoch', 0)) + 1} epoch(s) of "
        f"{s.get('releases_planned')} releases at epsilon {s.get('epsilon')} (delta {s.get('delta_lifetime')})"
    )
