"""A watchdog process that outlives its driver just long enough to stop what the driver started.

The driver starts it (:class:`Watchdog`) holding the write end of a pipe; the watchdog waits on
the other end.  When the driver exits -- normally, by a signal, or SIGKILLed, which runs no
clean-up of its own -- the kernel closes the write end, the watchdog sees end-of-file and SIGKILLs
the driver's work until none of it is left, then exits.

The work is known by a mark in the environment, ``NAME=VALUE`` (or ``NAME=VALUE/...``: a folder
under it), which every process the work starts inherits (a local Ray instance's GCS, raylet and
workers; a Flower deployment's SuperLink, SuperNodes, SuperExec, ServerApp and ClientApps), and by
the process tree below the marked processes: a process that rewrites its title (setproctitle, as
Ray's dashboard and runtime-env agents do) also blanks what /proc shows of its environment.  So
while the driver lives the watchdog records, every :data:`INTERVAL` s, the marked processes and
their descendants (pid and start time: a reused pid is never taken for one of them); at the end it
kills those still running, with whatever is marked or below them now.  Re-parented or detached into
sessions of their own, they are found all the same, and nothing else is touched; the driver itself
is spared.

The watchdog runs in a session of its own (a Ctrl-C at the terminal or a signal to the driver's
process group does not reach it) and ignores SIGINT and SIGHUP.  It imports the standard library
only and runs as a script (``python -I watchdog.py``): tens of milliseconds, no fedbandits import.
It needs Linux's /proc; elsewhere :class:`Watchdog` starts nothing.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

#: seconds between the watchdog's records of the marked processes and their descendants
INTERVAL = 0.5
#: seconds the watchdog keeps sweeping at the end (new processes may start while it kills)
SWEEP_TIMEOUT = 10.0

PROC = Path("/proc")


def _marked(environ: bytes, mark: bytes) -> bool:
    return any(var == mark or var.startswith(mark + b"/") for var in environ.split(b"\0"))


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time in clock ticks since boot) of ``pid``, or None if gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # "pid (comm) state ppid ...": comm may hold spaces
    return fields[0], int(fields[1]), int(fields[19])


def marked_processes(name: str, value: str, exclude: Iterable[int] = ()) -> list[int]:
    """Live processes whose environment holds ``name=value`` or ``name=value/...`` (Linux /proc;
    elsewhere none).  Zombies -- dead, only not yet reaped -- are not live."""
    if not PROC.is_dir():  # pragma: no cover - not Linux
        return []
    mark = f"{name}={value}".encode()
    skip = {os.getpid(), *exclude}
    out = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        try:
            environ = (entry / "environ").read_bytes()  # another user's: PermissionError, skipped
        except OSError:
            continue
        stat = _stat(int(entry.name))
        if stat is not None and stat[0] not in "ZX" and _marked(environ, mark):
            out.append(int(entry.name))
    return out


class _Tracker:
    """The marked processes and their descendants, as (pid, start time), recorded over time."""

    def __init__(self, name: str, value: str, spare: Iterable[int]) -> None:
        self.mark = f"{name}={value}".encode()
        self.spare = {os.getpid(), *spare}
        self.seen: dict[int, int] = {}  # pid -> start time of a process of the work
        self._checked: dict[tuple[int, int], bool] = {}  # (pid, start) -> marked, read once

    def _is_marked(self, pid: int, start: int) -> bool:
        key = (pid, start)
        if key not in self._checked:
            try:
                self._checked[key] = _marked((PROC / str(pid) / "environ").read_bytes(), self.mark)
            except OSError:
                self._checked[key] = False
        return self._checked[key]

    def record(self) -> list[int]:
        """Add what belongs to the work now; return its live processes (recorded ones included)."""
        table: dict[int, tuple[int, int]] = {}  # live pid -> (parent, start)
        for entry in PROC.iterdir():
            if entry.name.isdigit():
                stat = _stat(int(entry.name))
                if stat is not None and stat[0] not in "ZX":
                    table[int(entry.name)] = (stat[1], stat[2])
        children: dict[int, list[int]] = {}
        for pid, (parent, _) in table.items():
            children.setdefault(parent, []).append(pid)
        roots = [pid for pid, (_, start) in table.items() if self.seen.get(pid) == start]
        roots += [pid for pid, (_, start) in table.items() if self._is_marked(pid, start)]
        work: set[int] = set()
        while roots:
            pid = roots.pop()
            if pid not in work:
                work.add(pid)
                roots.extend(children.get(pid, []))
        work -= self.spare
        self.seen.update({pid: table[pid][1] for pid in work})
        return sorted(work)

    def kill_all(self, timeout: float = SWEEP_TIMEOUT) -> list[int]:
        """SIGKILL the work, again until none of it is left (at most ``timeout`` s); the killed pids."""
        killed: list[int] = []
        deadline = time.monotonic() + timeout
        while True:
            left = self.record()
            if not left or time.monotonic() >= deadline:
                return killed
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.1)


def kill_marked(name: str, value: str, exclude: Iterable[int] = (), timeout: float = SWEEP_TIMEOUT) -> list[int]:
    """SIGKILL every process :func:`marked_processes` finds and their descendants, again until none
    is left (at most ``timeout`` s: a supervisor or raylet may start one more while the others die)."""
    if not PROC.is_dir():  # pragma: no cover - not Linux
        return []
    return _Tracker(name, value, exclude).kill_all(timeout)


class Watchdog:
    """The driver's side: start the watchdog for mark ``name=value``; :meth:`close` (or the
    driver's death) makes it kill the marked processes and their descendants, and exit."""

    def __init__(self, name: str, value: str) -> None:
        self.name, self.value = name, value
        self.popen: subprocess.Popen[bytes] | None = None
        if not PROC.is_dir():  # pragma: no cover - not Linux: nothing to walk
            return
        self.popen = subprocess.Popen(
            [sys.executable, "-I", str(Path(__file__).resolve()), name, value, str(os.getpid())],
            stdin=subprocess.PIPE,  # the pipe: its write end stays in this process (not inheritable)
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    @property
    def pid(self) -> int | None:
        return None if self.popen is None else self.popen.pid

    def close(self, timeout: float = SWEEP_TIMEOUT + 5.0) -> None:
        """Close the pipe and wait (at most ``timeout`` s) for the watchdog's last sweep."""
        if self.popen is None:
            return
        popen, self.popen = self.popen, None
        assert popen.stdin is not None
        popen.stdin.close()
        try:
            popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:  # pragma: no cover - the sweep is bounded
            popen.kill()
            popen.wait()

    def __enter__(self) -> Watchdog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _main(argv: list[str]) -> int:
    """``watchdog.py NAME VALUE DRIVER_PID``, stdin the driver's pipe."""
    name, value, driver = argv[0], argv[1], int(argv[2])
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    tracker = _Tracker(name, value, spare=[driver])
    while True:
        tracker.record()
        try:
            ready, _, _ = select.select([0], [], [], INTERVAL)
            if ready and not os.read(0, 4096):  # the driver never writes: readable means end-of-file
                break
        except OSError:
            break
    tracker.kill_all()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
