"""The processes of a deployment: start, wait for, signal and find them, with bounded waits.

Free loopback ports (:func:`free_port`, :func:`loopback_port_problem`), the Flower executables and environment
(:func:`flower_bin`, :func:`flower_env`), a started process and its session (:class:`Proc`,
:func:`start_process`; stopping one also signals the sessions its descendants detached into),
the processes still carrying a deployment's ``FLWR_HOME`` (:func:`processes_under`,
:func:`kill_processes_under`, and :func:`watch_processes_under` for when this process dies), the
work folder's lock (:func:`take_lock`, :func:`hold_lock`), health waits for the SuperLink and the
shuffler (:func:`wait_https`, :func:`wait_shuffler`) and bounded ``flwr`` CLI calls
(:func:`run_cli`); :class:`DeployError` is what each of them raises.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
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
from dataclasses import dataclass
from pathlib import Path

from fedbandits.federation.shuffler_client import client_context
from fedbandits.sim.watchdog import Watchdog, kill_marked, marked_processes


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


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def loopback_port_problem(port: int) -> str | None:
    """Why a listener could not bind 127.0.0.1:``port`` now (``None``: it could).  Bound as uvicorn
    binds, with SO_REUSEADDR: a closed connection in TIME_WAIT on the port is no problem."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def flower_bin(name: str) -> str:
    """A Flower executable next to this Python (the venv), else on PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if found is None:
        raise DeployError(f"{name} not found: install the deployment extra, `pip install 'fedbandits[deploy]'`")
    return found


#: the environment variable with which flower-superexec (Flower >= 1.42) polls its SuperNode for tasks
POLL_VARIABLE = "FLWR_SUPEREXEC_TASK_POLL_INTERVAL"


def shared_host_poll_interval(silos: int) -> float:
    """SuperExec's task poll interval (s) when ``silos`` SuperNodes share one host (``deploy local``).

    Every poll costs CPU in the SuperExec and in its SuperNode, and on one host the silos' polls
    compete with their ClientApps.  Measured with 13 silos on 2 cores (``ldp``, 6 rounds): 18.5 s
    per round at 0.1 s, 14.5 s at 0.5 s, 16 s at 1.0 s (Flower's default; each message then waits
    longer to start).  So the silos together poll about 25 times a second: 0.04 s per silo, at
    least 0.1 s (a few silos: quick pickup) and at most 1 s.  ``POLL_VARIABLE`` in the environment
    overrides it."""
    return min(1.0, max(0.1, 0.04 * silos))


def flower_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    home = Path(home).resolve()
    env["FLWR_HOME"] = str(home)
    env["FLWR_TELEMETRY_ENABLED"] = "0"
    env.setdefault(POLL_VARIABLE, "0.1")  # a silo on a host of its own: quick pickup
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
    return marked_processes("FLWR_HOME", str(Path(home).resolve()))


def kill_processes_under(home: Path) -> list[int]:
    """SIGKILL every live process whose ``FLWR_HOME`` lies under ``home`` (:func:`processes_under`),
    and their descendants, until none is left (bounded)."""
    return kill_marked("FLWR_HOME", str(Path(home).resolve()))


def watch_processes_under(home: Path) -> Watchdog:
    """A watchdog that kills whatever carries ``FLWR_HOME`` under ``home`` once this process is
    gone, even SIGKILLed (:mod:`fedbandits.sim.watchdog`), or when it is closed."""
    return Watchdog("FLWR_HOME", str(Path(home).resolve()))


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


@contextlib.contextmanager
def serving_lock(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``folder/.serving.lock``, *waiting* for it: one request of a silo is
    served at a time, even when Flower runs two ClientApps of the silo at once (a request and the
    server's repeat of it, :func:`fedbandits.federation.server_app._exchange`), so the second loads the
    state the first stored and answers with the same message (never a second draw)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / ".serving.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
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
    _wait_health(f"https://{address}/health", client_context(ca, cert, key), timeout, proc, f"shuffler at {address}")


def run_cli(args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [flower_bin("flwr"), *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise DeployError(f"`flwr {' '.join(args)}` did not finish within {timeout:.0f} s") from None
