"""Start and stop the Flower processes of a deployment, with bounded waits everywhere.

:class:`LocalDeployment` runs a whole federation on loopback -- one SuperLink (the server), one
SuperNode per silo (under :mod:`fedbandits.federation.supervisor`), the app submitted with
``flwr run`` -- over TLS with SuperNode authentication.  Every process is started in its own
session; stopping it signals that session and those of its descendants (the SuperLink detaches
its SuperExec and ServerApp into a session of their own), and :meth:`LocalDeployment.stop_all`
finally kills whatever still carries the deployment's ``FLWR_HOME``: it stops every process the
object started, their Flower children included, and nothing else.  The same pieces serve the multi-machine
commands (``fedbandits deploy server`` / ``silo``).

Flower needs an *app* (a folder with ``pyproject.toml``) to run: :func:`write_app` creates a
minimal one whose components point to :mod:`fedbandits.federation.app`, with the deployment's
settings as its run config.  Flower ships that folder (a FAB) to the SuperLink and the
SuperNodes; the fedbandits code itself comes from the installed package.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from fedbandits.federation.certs import create_trial_credentials
from fedbandits.federation.spec import DeploySpec, atomic_write_bytes

CONNECTION = "fedbandits"


class DeployError(RuntimeError):
    """A deployment step failed (with the log file to read)."""


#: ports this process has handed out (never twice: a process started later binds them)
_HANDED_OUT: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range of ports for outgoing connections (Linux; else the IANA range)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 49152, 65535


def free_port() -> int:
    """A loopback port that is free now, for a process started later to listen on.

    Taken *below* the kernel's ephemeral range: a port the kernel handed out (port 0) is also what
    it gives the next outgoing connection, so between this call and the later bind any client
    connection on the host (a SuperNode polling, a ClientApp starting) could take it -- a flaky
    "address already in use".  A port outside that range is only taken by a listener."""
    low, _ = _ephemeral_range()
    rng = random.Random()
    for _ in range(200 if low - 1024 >= 2000 else 0):  # a range that starts near 1024: no room below
        port = rng.randrange(max(1024, low - 12000), low)
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    for _ in range(50):  # the kernel's choice (inside the ephemeral range)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise DeployError("no free loopback port found")


def flower_bin(name: str) -> str:
    """A Flower executable next to this Python (the venv), else on PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if found is None:
        raise DeployError(f"{name} not found: install the deployment extra, `pip install 'fedbandits[deploy]'`")
    return found


def flower_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    home = Path(home).resolve()
    env["FLWR_HOME"] = str(home)
    env["FLWR_TELEMETRY_ENABLED"] = "0"
    env["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] = "0.1"
    env["PYTHONUNBUFFERED"] = "1"
    home.mkdir(parents=True, exist_ok=True)
    return env


@dataclass
class Proc:
    """A started process (and its session)."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def _groups(self) -> list[int]:
        """Process groups to signal: the session this object started, plus those of its
        descendants that left it (Flower's SuperLink detaches its SuperExec -- and with it the
        ServerApp -- into a new session, out of reach of a signal to ours)."""
        groups = [self.popen.pid]
        for pgid in _descendant_groups(self.popen.pid):
            if pgid not in groups:
                groups.append(pgid)
        return groups

    def kill(self) -> None:
        """SIGKILL the whole process tree at once: a crash, as far as the others can tell."""
        for pgid in self._groups():
            _signal_group(pgid, signal.SIGKILL)
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL of a child cannot be ignored
            pass

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process tree, wait up to ``timeout`` s, then SIGKILL what is left."""
        groups = self._groups()  # before the parent exits and its children are re-parented
        if self.popen.poll() is None:
            for pgid in groups:
                _signal_group(pgid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        for pgid in groups:  # children that outlived their parent
            _signal_group(pgid, signal.SIGKILL)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _descendant_groups(pid: int) -> list[int]:
    """Process groups of ``pid``'s descendants that lead their own group (Linux /proc; else none)."""
    children: dict[int, list[int]] = {}
    pgids: dict[int, int] = {}
    proc = Path("/proc")
    if not proc.is_dir():  # pragma: no cover - not Linux
        return []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may contain spaces and parentheses
        fields = stat[stat.rindex(")") + 2 :].split()
        ppid, pgrp = int(fields[1]), int(fields[2])
        children.setdefault(ppid, []).append(int(entry.name))
        pgids[int(entry.name)] = pgrp
    out: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        if pgids.get(child) == child and child not in out:  # a group leader: its own session/group
            out.append(child)
        todo.extend(children.get(child, []))
    return out


def processes_under(home: Path) -> list[int]:
    """Live processes whose ``FLWR_HOME`` lies under ``home`` (Linux /proc; else none).

    Every process a :class:`LocalDeployment` starts gets ``FLWR_HOME`` inside its work folder,
    and Flower's children (SuperExec, ServerApp, ClientApp) inherit it: this finds what is left
    of a deployment even after parents died and children were re-parented or detached."""
    proc = Path("/proc")
    if not proc.is_dir():  # pragma: no cover - not Linux
        return []
    prefix = f"FLWR_HOME={Path(home).resolve()}".encode()
    out = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text()
        except OSError:
            continue
        if state[state.rindex(")") + 2] == "Z":  # a zombie is gone, only not yet reaped
            continue
        if any(var == prefix or var.startswith(prefix + b"/") for var in environ.split(b"\0")):
            out.append(int(entry.name))
    return out


def kill_processes_under(home: Path) -> list[int]:
    """SIGKILL every live process whose ``FLWR_HOME`` lies under ``home`` (:func:`processes_under`)."""
    killed: list[int] = []
    for _ in range(3):
        left = processes_under(home)
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.2)
    return killed


def take_lock(folder: Path, what: str) -> int:
    """An exclusive lock on ``folder/.lock`` (not waiting); the returned fd holds it until closed."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise DeployError(f"another fedbandits {what} is running in {folder}") from None
    return fd


@contextlib.contextmanager
def hold_lock(folder: Path, what: str) -> Iterator[None]:
    fd = take_lock(folder, what)
    try:
        yield
    finally:
        os.close(fd)


def start_process(name: str, cmd: list[str], log: Path, env: dict[str, str]) -> Proc:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        popen = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return Proc(name, popen, log)


def _wait_health(url: str, ctx: ssl.SSLContext, timeout: float, proc: Proc | None, what: str) -> None:
    """Wait (at most ``timeout`` s) until ``url`` answers 200 over TLS with ``ctx``."""
    deadline = time.time() + timeout
    last: Exception | None = None
    while time.time() < deadline:
        if proc is not None and not proc.alive():
            raise DeployError(f"{proc.name} exited (status {proc.popen.returncode}); see {proc.log}")
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception as exc:
            last = exc
        time.sleep(0.2)
    raise DeployError(f"{what} not ready within {timeout:.0f} s ({last})")


def wait_https(port: int, ca: Path, timeout: float, proc: Proc | None = None, host: str = "127.0.0.1") -> None:
    """Wait (at most ``timeout`` s) until the SuperLink answers GET /health over verified TLS."""
    ctx = ssl.create_default_context(cafile=str(ca))
    _wait_health(f"https://{host}:{port}/health", ctx, timeout, proc, f"SuperLink on port {port}")


def wait_shuffler(address: str, ca: Path, cert: Path, key: Path, timeout: float, proc: Proc | None = None) -> None:
    """Wait (at most ``timeout`` s) until the shuffler answers GET /health over mutual TLS."""
    from fedbandits.federation.shuffler import client_context

    _wait_health(f"https://{address}/health", client_context(ca, cert, key), timeout, proc, f"shuffler at {address}")


def run_cli(args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [flower_bin("flwr"), *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise DeployError(f"`flwr {' '.join(args)}` did not finish within {timeout:.0f} s") from None


def check_quotable(what: str, value: object) -> str:
    """``value`` as it goes between double quotes into Flower's ``--node-config`` or a TOML file:
    refused if it could end the quotes (no quote, backslash or line break) -- a crafted path must not
    inject keys."""
    text = str(value)
    if any(c in text for c in '"\\\n\r'):
        raise DeployError(f"{what} must not contain quotes, backslashes or line breaks: {text!r}")
    return text


def write_connection(home: Path, port: int, ca: Path, host: str = "127.0.0.1") -> None:
    """The Flower CLI's SuperLink connection (FLWR_HOME/config.toml): TLS, verified with the CA."""
    check_quotable("the CA path", ca)
    check_quotable("the server host", host)
    home.mkdir(parents=True, exist_ok=True)
    text = (
        f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
        f'address = "{host}:{port}"\nroot-certificates = "{ca}"\n'
    )
    (home / "config.toml").write_text(text, encoding="utf-8")


def write_app(folder: Path, settings: dict[str, object]) -> Path:
    """The minimal Flower app folder; ``settings`` become its run config (strings, numbers)."""
    pkg = folder / "fedbandits_flower"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text('"""Flower app shim: the code lives in fedbandits.federation.app."""\n')
    (pkg / "apps.py").write_text(
        "from fedbandits.federation.app import client_app as client\n"
        "from fedbandits.federation.app import server_app as server\n\n"
        '__all__ = ["client", "server"]\n'
    )
    lines = []
    for key, value in settings.items():
        lines.append(f"{key} = {json.dumps(value)}")
    (folder / "pyproject.toml").write_text(
        "[build-system]\n"
        'requires = ["hatchling"]\n'
        'build-backend = "hatchling.build"\n\n'
        "[project]\n"
        'name = "fedbandits-flower"\n'
        'version = "1.0.0"\n'
        'description = "Private-FedLinUCB on Flower (generated by fedbandits deploy)"\n'
        'license = "MIT"\n'
        "dependencies = []\n\n"
        "[tool.hatch.build.targets.wheel]\n"
        'packages = ["fedbandits_flower"]\n\n'
        "[tool.flwr.app]\n"
        'publisher = "fedbandits"\n\n'
        "[tool.flwr.app.components]\n"
        'serverapp = "fedbandits_flower.apps:server"\n'
        'clientapp = "fedbandits_flower.apps:client"\n\n'
        "[tool.flwr.app.config]\n" + "\n".join(lines) + "\n"
    )
    return folder


def supervised(cmd: list[str], patience: float) -> list[str]:
    """``cmd`` (a SuperNode) under :mod:`fedbandits.federation.supervisor`: it retries, for at most
    ``patience`` s, a join the SuperLink refuses because it still counts a crashed instance of the
    same silo as online."""
    return [sys.executable, "-m", "fedbandits.federation.supervisor", "--patience", str(patience), "--", *cmd]


def supernode_command(
    superlink: str, ca: Path, key: Path, silo: int, state_dir: Path, runtime_port: int, extra: str = ""
) -> list[str]:
    node_config = f'silo-id={silo} state-dir="{check_quotable("the state folder", state_dir)}"'
    node_config += f" {extra}" if extra else ""
    return [
        flower_bin("flower-supernode"),
        "--superlink",
        superlink,
        "--root-certificates",
        str(ca),
        "--auth-supernode-private-key",
        str(key),
        "--node-config",
        node_config,
        "--port",
        str(runtime_port),
        "--max-wait-time",
        "600",
    ]


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
    round_timeout: float = 60.0
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
        need += [self.silo_public_key(i) for i in range(self.spec.silos)]
        return [f for f in need if not f.is_file()]

    # -- setup -------------------------------------------------------------------------------
    def prepare(self) -> None:
        missing = self.missing_credentials()
        if missing:
            raise DeployError("missing credential file(s): " + ", ".join(map(str, missing)))
        spec_file = self.workdir / "spec.json"
        if spec_file.exists():
            from fedbandits.federation.spec import spec_from_json

            old = spec_from_json(spec_file.read_text())
            if old.digest != self.spec.digest:
                raise DeployError(
                    f"{self.workdir} holds another deployment (config hash {old.digest[:12]}, this one "
                    f"{self.spec.digest[:12]}); use a fresh work folder"
                )
        atomic_write_bytes(spec_file, self.spec.to_json().encode())
        write_connection(self.cli_home, self.port, self.creds / "ca.pem", self.cli_host)
        settings = {
            "spec-file": str(spec_file),
            "state-dir": str(self.state / "server"),
            "registry-file": str(self.workdir / "registry.json"),
            "round-timeout": float(self.round_timeout),
            "join-timeout": float(self.join_timeout),
            "poll-interval": 0.2,
        }
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
        write_app(self.workdir / "app", settings)

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
    silo (under the supervisor), with trial credentials created in ``workdir/certs``."""

    #: how long a (re)started silo keeps trying to join (see :mod:`fedbandits.federation.supervisor`)
    rejoin_patience: float = 120.0
    #: extra node config per silo (e.g. the test hook ``inject-fault="nan@2"``)
    node_extra: dict[int, str] = field(default_factory=dict)

    #: how long a silo's ClientApp retries an unreachable shuffler before the round goes on without it
    shuffler_patience: float = 30.0

    def __post_init__(self) -> None:
        super().__post_init__()
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
                        self.node_extra.get(i, ""),
                    ],
                )
            ),
        )
        cmd = supervised(cmd, self.rejoin_patience)
        proc = start_process(
            f"silo-{i}", cmd, self.logs / f"silo-{i}.log", flower_env(self.workdir / "home" / f"silo-{i}")
        )
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
