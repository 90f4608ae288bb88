"""Start and stop a deployment's Flower processes, with bounded waits everywhere.

:class:`LocalDeployment` runs a whole federation on loopback -- one SuperLink (the server), one
SuperNode per silo (under :mod:`fedbandits.federation.supervisor`), the app submitted with
``flwr run`` -- over TLS with SuperNode authentication.  Every process is started in its own
session; stopping it signals that session and those of its descendants (the SuperLink detaches
its SuperExec and ServerApp into a session of their own), and :meth:`LocalDeployment.stop_all`
finally kills whatever still carries the deployment's ``FLWR_HOME``: it stops every process the
object started, their Flower children included, and nothing else.  If the process that runs it
dies first -- even SIGKILLed, which runs no clean-up -- a watchdog does the same
(:mod:`fedbandits.sim.watchdog`).  :class:`ServerDeployment`, its server side, serves the
multi-machine command ``fedbandits deploy server`` (whose SuperLink outlives a killed command on
purpose: running it again clears it and resumes).

The processes themselves are handled by :mod:`fedbandits.federation.processes`; the files and
command lines Flower is given come from :mod:`fedbandits.federation.flower_setup`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from fedbandits.federation.certs import create_trial_credentials, signing_files
from fedbandits.federation.flower_setup import (
    CONNECTION,
    check_quotable,
    supernode_command,
    supervised,
    write_app,
    write_connection,
)
from fedbandits.federation.processes import (
    POLL_VARIABLE,
    DeployError,
    Proc,
    flower_bin,
    flower_env,
    free_port,
    kill_processes_under,
    processes_under,
    run_cli,
    shared_host_poll_interval,
    start_process,
    take_lock,
    wait_https,
    wait_shuffler,
    watch_processes_under,
)
from fedbandits.federation.spec import DeploySpec, atomic_write_bytes, spec_from_json
from fedbandits.sim.watchdog import Watchdog


@dataclass
class ServerDeployment:
    """The server side of a federation under ``workdir``: a SuperLink with TLS and SuperNode
    authentication, the silos' registered keys, the submitted app, durable state.

    ``certs`` holds ``ca.pem``, ``server.pem``, ``server.key`` and the silos' ``silo-<i>.pub``
    (see :mod:`fedbandits.federation.certs`).  The SuperLink listens on ``host``:``port``; the
    operator's own ``flwr`` CLI reaches it at ``cli_host`` (a name the server certificate lists;
    trial certificates always list 127.0.0.1).  Everything durable -- the SuperLink database,
    ``registry.json`` (Flower node id -> silo index), ``spec.json`` and the server state -- lives in
    ``workdir``, so running the same deployment again resumes it.
    """

    workdir: Path
    spec: DeploySpec
    certs: Path | None = None
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port, chosen once
    cli_host: str = "127.0.0.1"
    round_timeout: float = 90.0  # a silo restarted after a crash rejoins within ~75 s (docs: Fault model)
    join_timeout: float = 60.0
    start_timeout: float = 60.0
    #: HOST:PORT of the shuffler party (shuffled protocols only; see fedbandits.federation.shuffler)
    shuffler: str | None = None
    #: folder with the shuffler hop's shuffler-ca.pem and the server's server-client.pem / .key
    #: (made by the shuffler's operator; default: ``certs``)
    shuffler_creds: Path | None = None
    procs: dict[str, Proc] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir).resolve()
        self.certs = Path(self.certs).resolve() if self.certs is not None else self.workdir / "certs"
        self.shuffler_creds = Path(self.shuffler_creds).resolve() if self.shuffler_creds is not None else self.certs
        self.state = self.workdir / "state"
        self.logs = self.workdir / "logs"
        self.cli_home = self.workdir / "home" / "cli"
        self.run_id: str | None = None
        self._lock: int | None = None  # fd of the work folder's lock while this object runs it
        self._owns = False  # whether this object may clean up the work folder's processes
        ports = self._ports()
        self.port = int(ports["superlink"]) if not self.port else int(self.port)  # type: ignore[call-overload]

    def _ports(self) -> dict[str, object]:
        """Ports chosen once and kept in ``ports.json``: a restart reuses them, so silos find the
        server again."""
        ports_file = self.workdir / "ports.json"
        if ports_file.exists():
            return json.loads(ports_file.read_text())  # type: ignore[no-any-return]
        ports = self._new_ports()
        self.workdir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(ports_file, json.dumps(ports).encode())
        return ports

    def _new_ports(self) -> dict[str, object]:
        return {"superlink": self.port or free_port()}

    @property
    def creds(self) -> Path:
        assert self.certs is not None
        return self.certs

    @property
    def hop(self) -> Path:
        """Where the shuffler hop's credentials are."""
        assert self.shuffler_creds is not None
        return self.shuffler_creds

    def silo_public_key(self, i: int) -> Path:
        return self.creds / f"silo-{i}.pub"

    def missing_credentials(self) -> list[Path]:
        """Credential files the server needs but ``certs`` lacks (checked before anything starts)."""
        need = [self.creds / n for n in ("ca.pem", "server.pem", "server.key")]
        if self.spec.shuffled:  # the shuffler hop's CA and the server's TLS identity towards the shuffler
            need += [self.hop / n for n in ("shuffler-ca.pem", "server-client.pem", "server-client.key")]
        if self.spec.masked:  # the silos' signing CA: the server checks their signed keys and lists
            need.append(signing_files(self.creds, 0)[2])
        need += [self.silo_public_key(i) for i in range(self.spec.silos)]
        return [f for f in need if not f.is_file()]

    # -- setup -------------------------------------------------------------------------------
    def prepare(self) -> None:
        missing = self.missing_credentials()
        if missing:
            raise DeployError("missing credential file(s): " + ", ".join(map(str, missing)))
        spec_file = self.workdir / "spec.json"
        if spec_file.exists():
            old = spec_from_json(spec_file.read_text())
            if old.digest != self.spec.digest:
                raise DeployError(
                    f"{self.workdir} holds another deployment (config hash {old.digest[:12]}, this one "
                    f"{self.spec.digest[:12]}); use a fresh work folder"
                )
        atomic_write_bytes(spec_file, self.spec.to_json().encode())
        write_connection(self.cli_home, self.port, self.creds / "ca.pem", self.cli_host)
        write_app(self.workdir / "app", self.app_settings(spec_file), self.server_module, self.client_module)

    #: the module whose ``server_app`` and ``client_app`` the submitted Flower app runs
    server_module = "fedbandits.federation.server_app"
    client_module = "fedbandits.federation.client_app"

    def app_settings(self, spec_file: Path) -> dict[str, object]:
        """The submitted app's run config (what the ServerApp reads)."""
        settings: dict[str, object] = {
            "spec-file": str(spec_file),
            "state-dir": str(self.state / "server"),
            "registry-file": str(self.workdir / "registry.json"),
            "round-timeout": float(self.round_timeout),
            "join-timeout": float(self.join_timeout),
            "poll-interval": 0.2,
        }
        if self.spec.masked:
            settings["signing-ca"] = str(signing_files(self.creds, 0)[2])
        if self.spec.shuffled:
            if not self.shuffler:
                raise DeployError(f"protocol {self.spec.params.protocol!r} needs a shuffler address (HOST:PORT)")
            settings.update(
                {
                    "shuffler": check_quotable("the shuffler address", self.shuffler),
                    "shuffler-ca": str(self.hop / "shuffler-ca.pem"),
                    "shuffler-cert": str(self.hop / "server-client.pem"),
                    "shuffler-key": str(self.hop / "server-client.key"),
                }
            )
        return settings

    # -- processes ---------------------------------------------------------------------------
    def start_superlink(self) -> Proc:
        cmd = [
            flower_bin("flower-superlink"),
            "--ssl-ca-certfile", str(self.creds / "ca.pem"),
            "--ssl-certfile", str(self.creds / "server.pem"),
            "--ssl-keyfile", str(self.creds / "server.key"),
            "--enable-supernode-auth",
            "--database", str(self.workdir / "superlink.db"),
            "--host", self.host,
            "--port", str(self.port),
            "--disable-runtime-dependency-installation",
        ]  # fmt: skip
        proc = start_process("superlink", cmd, self.logs / "superlink.log", flower_env(self.workdir / "home" / "link"))
        self.procs["superlink"] = proc
        wait_https(self.port, self.creds / "ca.pem", self.start_timeout, proc, host=self.cli_host)
        return proc

    def register_silos(self) -> dict[int, int]:
        """Register every silo's public key (once; the SuperLink database keeps them across restarts)."""
        path = self.workdir / "registry.json"
        registry: dict[str, int] = json.loads(path.read_text()) if path.exists() else {}
        known = set(registry.values())
        for i in range(self.spec.silos):
            if i in known:
                continue
            node = self.register_key(self.silo_public_key(i), name=f"silo-{i}")
            registry[str(node)] = i
            atomic_write_bytes(path, json.dumps(registry, indent=2).encode())
        return {int(k): v for k, v in registry.items()}

    def register_key(self, public_key: Path, name: str) -> int:
        env = flower_env(self.cli_home)
        res = run_cli(
            ["supernode", "register", str(public_key), CONNECTION, "--name", name, "--format", "json"], env, 60
        )
        try:
            return int(json.loads(res.stdout)["node-id"])
        except (ValueError, KeyError, TypeError):
            raise DeployError(f"registering {public_key} failed: {res.stdout.strip()} {res.stderr.strip()}") from None

    def stop_stale_runs(self) -> list[str]:
        """``flwr stop`` every run on the SuperLink that is not finished (bounded CLI calls).

        After a server crash the SuperLink's database still holds the dead run as running, with
        the requests its ServerApp had pushed for the next round but never completed (their
        payload never arrived).  SuperNodes take requests oldest first, so each silo would first
        wait -- past the new run's round deadline -- for that payload, until the SuperLink
        times the dead run out.  A stopped run's requests are dropped by the SuperNodes at once."""
        env = flower_env(self.cli_home)
        res = run_cli(["ls", CONNECTION, "--format", "json"], env, 60)
        try:
            runs = json.loads(res.stdout)["runs"]
        except (ValueError, KeyError, TypeError):
            raise DeployError(f"`flwr ls` failed: {res.stdout.strip()} {res.stderr.strip()}") from None
        stale = [str(r["run-id"]) for r in runs if not str(r.get("status", "")).startswith("finished")]
        for run_id in stale:
            # a failure (e.g. the run finished in between) only costs the silos one round: go on
            run_cli(["stop", run_id, CONNECTION, "--format", "json"], env, 60)
        return stale

    def submit(self) -> str:
        """``flwr run`` the app (a new Flower run; the server resumes from its durable state).
        Runs left over by a crashed server are stopped first (:meth:`stop_stale_runs`)."""
        for f in ("done.json", "error.txt"):
            (self.state / "server" / f).unlink(missing_ok=True)
        self.stop_stale_runs()
        res = run_cli(
            ["run", str(self.workdir / "app"), CONNECTION, "--format", "json"], flower_env(self.cli_home), 120
        )
        try:
            self.run_id = str(json.loads(res.stdout)["run-id"])
        except (ValueError, KeyError, TypeError):
            raise DeployError(f"`flwr run` failed: {res.stdout.strip()} {res.stderr.strip()}") from None
        return self.run_id

    def _current(self, run_id: object) -> bool:
        """Whether a file the ServerApp wrote belongs to the run submitted last (not to the
        ServerApp of a killed SuperLink, which may still be dying)."""
        return self.run_id is None or str(run_id) == self.run_id

    def wait_done(self, timeout: float) -> dict[str, object]:
        """Wait (at most ``timeout`` s) for the server's summary; raise with the reason if it failed."""
        deadline = time.time() + timeout
        done, error = self.state / "server" / "done.json", self.state / "server" / "error.txt"
        while time.time() < deadline:
            if done.exists():
                summary = json.loads(done.read_text())
                if self._current(summary.get("run_id")):
                    return summary  # type: ignore[no-any-return]
            if error.exists():
                text = error.read_text()
                first, _, rest = text.partition("\n")
                if not first.startswith("run "):  # no run id: take it as this run's
                    raise DeployError(f"the server failed:\n{text}")
                if self._current(first.removeprefix("run ").strip()):
                    raise DeployError(f"the server failed:\n{rest}")
            link = self.procs.get("superlink")
            if link is not None and not link.alive():
                raise DeployError(f"the SuperLink exited; see {link.log}")
            time.sleep(0.3)
        raise DeployError(f"the deployment did not finish within {timeout:.0f} s; logs in {self.logs}")

    def stop_leftovers(self) -> list[int]:
        """SIGKILL what an earlier, killed instance of this deployment left running (its SuperLink
        lives in a session of its own and outlives a SIGKILLed ``deploy server``, holding the port
        and the database).  Only processes whose ``FLWR_HOME`` lies in this work folder."""
        return kill_processes_under(self.workdir / "home")

    def acquire(self) -> None:
        """Take the work folder's lock (``.lock``, exclusive, not waiting) and check the folder
        (:meth:`prepare`); only then may this object clean up what a dead earlier instance left
        running.  A second instance on the same folder, or a folder of another deployment, is
        refused without touching any process."""
        if self._lock is None:
            self._lock = take_lock(self.workdir, "deployment")
        self.prepare()
        self._owns = True
        self.stop_leftovers()

    def release(self) -> None:
        if self._lock is not None:
            os.close(self._lock)  # closing drops the flock
            self._lock = None
        self._owns = False

    def start(self) -> None:
        """Everything up to a submitted run: SuperLink, registration of the silos' keys, the app."""
        self.acquire()
        self.start_superlink()
        self.register_silos()
        self.submit()

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None:
            proc.stop()

    def crash(self, name: str) -> None:
        """SIGKILL process ``name`` with all its children (a crash: no goodbye to the SuperLink)."""
        proc = self.procs.pop(name, None)
        if proc is not None:
            proc.kill()

    def stop_all(self) -> None:
        """Stop every process this object started: silos first, then the server; then SIGKILL
        anything of this deployment still alive (Flower children whose parent was killed)."""
        for name in sorted(self.procs, key=lambda n: n == "superlink"):
            self.procs[name].stop()
        self.procs.clear()
        if self._owns:  # never for an instance that was refused the folder
            self.stop_leftovers()
        self.release()

    def leftovers(self) -> list[int]:
        """Processes of this deployment still alive (see :func:`processes_under`)."""
        return processes_under(self.workdir / "home")

    def __enter__(self) -> ServerDeployment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()


@dataclass
class LocalDeployment(ServerDeployment):
    """A whole federation on 127.0.0.1 under ``workdir``: the server side plus one SuperNode per
    silo (under the supervisor), with trial credentials created in ``workdir/certs``.  From
    :meth:`acquire` to :meth:`release` a watchdog stands by: if this process dies, it kills every
    process of the deployment (:func:`~fedbandits.federation.processes.watch_processes_under`)."""

    #: how long a (re)started silo keeps trying to join (see :mod:`fedbandits.federation.supervisor`)
    rejoin_patience: float = 120.0
    #: extra node config per silo (e.g. the test hook ``inject-fault="nan@2"``)
    node_extra: dict[int, str] = field(default_factory=dict)

    #: how long a silo's ClientApp retries an unreachable shuffler before the round goes on without it
    shuffler_patience: float = 30.0

    def __post_init__(self) -> None:
        super().__post_init__()
        self._watchdog: Watchdog | None = None
        ports = self._ports()
        self.silo_ports = [int(p) for p in ports["silos"]]  # type: ignore[attr-defined]
        if self.spec.shuffled:
            self.shuffler = f"127.0.0.1:{int(ports['shuffler'])}"  # type: ignore[call-overload]

    def _new_ports(self) -> dict[str, object]:
        ports = {**super()._new_ports(), "silos": [free_port() for _ in range(self.spec.silos)]}
        if self.spec.shuffled:
            ports["shuffler"] = free_port()
        return ports

    def start_shuffler(self) -> Proc:
        """The shuffler party (``fedbandits deploy shuffler``) on loopback, with the simulator's
        permutations (``derived``, for parity trials); waits until it answers over mutual TLS."""
        assert self.shuffler is not None
        cmd = [
            sys.executable, "-m", "fedbandits.cli", "deploy", "shuffler",
            "--spec", str(self.workdir / "spec.json"),
            "--listen", self.shuffler,
            "--ca", str(self.hop / "shuffler-ca.pem"),
            "--cert", str(self.hop / "shuffler.pem"),
            "--key", str(self.hop / "shuffler.key"),
            "--state-dir", str(self.state / "shuffler"),
            "--shuffle-source", "derived",
        ]  # fmt: skip
        env = flower_env(self.workdir / "home" / "shuffler")  # FLWR_HOME: found by stop_leftovers
        proc = start_process("shuffler", cmd, self.logs / "shuffler.log", env)
        self.procs["shuffler"] = proc
        wait_shuffler(
            self.shuffler, self.hop / "shuffler-ca.pem", self.hop / "server-client.pem", self.hop / "server-client.key",
            self.start_timeout, proc,
        )  # fmt: skip
        return proc

    def _signing_node_config(self, i: int) -> str:
        if not self.spec.masked:
            return ""
        files = zip(("signing-key", "signing-cert", "signing-ca"), signing_files(self.creds, i), strict=True)
        return " ".join(f'{k}="{check_quotable(k, v)}"' for k, v in files)

    def _shuffler_node_config(self, i: int) -> str:
        if not self.spec.shuffled:
            return ""
        files = {
            "shuffler-ca": self.hop / "shuffler-ca.pem",
            "shuffler-cert": self.hop / f"silo-{i}-client.pem",
            "shuffler-key": self.hop / f"silo-{i}-client.key",
        }
        text = f'shuffler="{self.shuffler}" shuffler-patience={float(self.shuffler_patience)}'
        return text + "".join(f' {k}="{check_quotable(k, v)}"' for k, v in files.items())

    def prepare(self) -> None:
        if not (self.creds / "ca.pem").exists():
            create_trial_credentials(self.creds, self.spec.silos)
        super().prepare()

    def acquire(self) -> None:
        super().acquire()
        if self._watchdog is None:  # the folder is ours: its processes must not outlive this one
            self._watchdog = watch_processes_under(self.workdir / "home")

    def release(self) -> None:
        if self._watchdog is not None:
            self._watchdog.close()  # it kills whatever is left, then exits
            self._watchdog = None
        super().release()

    def start_silo(self, i: int) -> Proc:
        cmd = supernode_command(
            f"127.0.0.1:{self.port}",
            self.creds / "ca.pem",
            self.creds / f"silo-{i}",
            i,
            self.state / f"silo-{i}",
            self.silo_ports[i],
            " ".join(
                filter(
                    None,
                    [
                        f'spec-digest="{self.spec.digest}"',
                        # a trial compared with the simulator: the simulator's noise, regret reported
                        'noise-source="derived" share-report="true"',
                        self._shuffler_node_config(i),
                        self._signing_node_config(i),
                        self.node_extra.get(i, ""),
                    ],
                )
            ),
        )
        cmd = supervised(cmd, self.rejoin_patience)
        env = flower_env(self.workdir / "home" / f"silo-{i}")
        if POLL_VARIABLE not in os.environ:
            env[POLL_VARIABLE] = str(shared_host_poll_interval(self.spec.silos))
        proc = start_process(f"silo-{i}", cmd, self.logs / f"silo-{i}.log", env)
        self.procs[f"silo-{i}"] = proc
        return proc

    def start(self) -> None:
        """Everything up to a submitted run: credentials, SuperLink, registration, SuperNodes."""
        self.acquire()
        if self.spec.shuffled:
            self.start_shuffler()
        self.start_superlink()
        self.register_silos()
        for i in range(self.spec.silos):
            self.start_silo(i)
        self.submit()

    def __enter__(self) -> LocalDeployment:
        return self
