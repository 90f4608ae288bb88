"""Serving silos as silos of ``fedbandits deploy``: the Flower processes on either side (beside the
deployment's own, :mod:`fedbandits.federation.deployment`).

* :class:`ServeDeployment` (``fedbandits serve server --flower``): the deployment's server side
  (:class:`fedbandits.federation.deployment.ServerDeployment`: a SuperLink with TLS and SuperNode
  authentication, the silos' registered keys, durable state in the work folder) submitting the
  app of :mod:`fedbandits.federation.serving_server_app`, whose ServerApp runs the coordinator.  The work folder is
  the server's ``--state-dir``; the coordinator's own log is in ``state/server/``.
* :class:`SiloNode` (``fedbandits serve silo --superlink ...``): the silo's SuperNode, started by
  the serving process beside its HTTP service (under the deployment's supervisor, which retries a
  join the SuperLink still refuses after a crash), with the node config that points its ClientApp
  at the service on loopback.  A watchdog kills the SuperNode if the serving process dies, even
  SIGKILLed; a restarted silo first stops what an earlier instance left.

The credentials are the deployment's: ``fedbandits deploy certs`` (or
:func:`fedbandits.federation.certs.create_trial_credentials`) makes the CA, the server's
certificate and one SuperNode key per silo; the server needs ``ca.pem``, ``server.pem``,
``server.key`` and every ``silo-<i>.pub``, silo i its private key ``silo-<i>`` and ``ca.pem``.
The silo's sync token never leaves the silo: its own SuperNode reads it from its file.
"""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from fedbandits.federation.deployment import ServerDeployment
from fedbandits.federation.flower_setup import check_quotable, supernode_command, supervised
from fedbandits.federation.processes import (
    Proc,
    flower_env,
    free_port,
    kill_processes_under,
    start_process,
    watch_processes_under,
)
from fedbandits.sim.watchdog import Watchdog

#: the CPU priority of a silo's SuperNode and its ClientApps, below the decision service's
NICE = ("nice", "-n", "10")


@dataclass
class ServeDeployment(ServerDeployment):
    """The server side of a serving federation (see the module's docstring)."""

    config_file: Path = Path("config.toml")
    entry: str = ""
    sync_seconds: float = 10.0
    policy: str = "stop"
    #: how long one phase of requests waits for the silos (a silo silent for a third of it is asked again)
    round_timeout: float = 20.0
    #: sdp-amplification: the shuffler hop's CA, the server's client certificate and key (``shuffler``: HOST:PORT)
    shuffler_files: tuple[Path, Path, Path] | None = None

    server_module = "fedbandits.federation.serving_server_app"
    client_module = "fedbandits.federation.serving_client_app"

    def missing_credentials(self) -> list[Path]:
        """The Flower side's files (the shuffler's are named one by one on the command line)."""
        need = [self.creds / n for n in ("ca.pem", "server.pem", "server.key")]
        need += [self.silo_public_key(i) for i in range(self.spec.silos)]
        need += [Path(f) for f in self.shuffler_files or ()]
        return [f for f in need if not f.is_file()]

    def app_settings(self, spec_file: Path) -> dict[str, object]:
        shuffler: dict[str, object] = {}
        if self.shuffler_files is not None:
            ca, cert, key = (str(Path(f).resolve()) for f in self.shuffler_files)
            shuffler = {"shuffler": str(self.shuffler), "shuffler-ca": ca, "shuffler-cert": cert, "shuffler-key": key}
        return {
            **shuffler,
            "config-file": str(Path(self.config_file).resolve()),
            "entry": self.entry,
            "state-dir": str(self.state / "server"),
            "registry-file": str(self.workdir / "registry.json"),
            "round-timeout": float(self.round_timeout),
            "poll-interval": 0.2,
            "sync-seconds": float(self.sync_seconds),
            "budget-policy": self.policy,
        }

    @property
    def status_file(self) -> Path:
        return self.state / "server" / "status.json"

    @property
    def error_file(self) -> Path:
        return self.state / "server" / "error.txt"

    def watch(self, stop: threading.Event, patience: float) -> None:
        """Until ``stop``: a failed ServerApp, a SuperLink gone or a tick ``patience`` s overdue ends
        the run (a ValueError naming the log to read)."""
        started = time.time()
        while not stop.wait(1.0):
            if self.error_file.exists():
                raise ValueError(f"the serving ServerApp failed:\n{self.error_file.read_text()}")
            link = self.procs.get("superlink")
            if link is not None and not link.alive():
                raise ValueError(f"the SuperLink exited; see {link.log}")
            ticked = self.status_file.stat().st_mtime if self.status_file.exists() else started
            if time.time() - ticked > patience:
                raise ValueError(f"the serving ServerApp has not ticked for {patience:g} s; see {self.logs}")


@dataclass
class SiloNode:
    """Silo ``silo``'s SuperNode, forwarding the federation's requests to ``sync_url``."""

    superlink: str  # HOST:PORT
    ca: Path
    key: Path
    silo: int
    state_dir: Path
    sync_url: str
    sync_token_file: Path
    patience: float = 120.0
    proc: Proc | None = None
    watchdog: Watchdog | None = field(default=None, repr=False)

    @property
    def home(self) -> Path:
        return Path(self.state_dir).resolve() / "flwr-home"

    def start(self) -> Proc:
        extra = (
            f'sync-url="{check_quotable("the sync URL", self.sync_url)}" '
            f'sync-token-file="{check_quotable("--sync-token-file", Path(self.sync_token_file).resolve())}"'
        )
        cmd = supernode_command(
            self.superlink,
            Path(self.ca).resolve(),
            Path(self.key).resolve(),
            self.silo,
            Path(self.state_dir).resolve() / "supernode",
            free_port(),
            extra,
        )
        kill_processes_under(self.home)  # what a SIGKILLed earlier instance of this silo left
        self.watchdog = watch_processes_under(self.home)
        env = flower_env(self.home)
        log = Path(self.state_dir) / "supernode.log"
        # the sync path yields to the decision path: the SuperNode and every ClientApp it starts (a
        # process per message, ~2 s of CPU each) run at a lower CPU priority than the service
        cmd = [*NICE, *supervised(cmd, self.patience)] if shutil.which("nice") else supervised(cmd, self.patience)
        self.proc = start_process(f"supernode-{self.silo}", cmd, log, env)
        return self.proc

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None
        if self.watchdog is not None:
            self.watchdog.close()
            self.watchdog = None
