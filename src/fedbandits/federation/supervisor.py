"""Keep a silo's SuperNode trying to join after a crash, for a bounded time.

Why: the SuperLink considers a SuperNode online until ``HEARTBEAT_PATIENCE x heartbeat interval``
(2 x 30 s in Flower 1.41 and 1.42) after its last heartbeat.  A SuperNode that crashed (SIGKILL, power
loss) never deactivates itself, so for up to a minute afterwards the SuperLink refuses to
activate the same key again (``412 Failed to activate SuperNode``, code 2004) -- and
``flower-supernode`` does not retry that: it logs ``Exit Code: 305`` (SUPERNODE_CONNECTION_ERROR)
and exits at once (process status 1, like any other error).  A silo restarted soon after a crash
would therefore never rejoin.

This wrapper starts the SuperNode, passes its output through, and, while it keeps failing with
305 within ``--patience`` seconds, starts it again after ``--retry-delay`` seconds; any other exit
(or the patience running out) ends the wrapper with the SuperNode's status.  SIGTERM / SIGINT are
passed on to the SuperNode and end the wrapper.  The wrapper and the SuperNode share one
session, so stopping the session stops both.

    python -m fedbandits.federation.supervisor --patience 120 --retry-delay 2 -- flower-supernode ...
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO

#: what flower-supernode logs when it cannot connect or is refused activation (flwr ExitCode
#: 305, SUPERNODE_CONNECTION_ERROR); its process status is 1 for every error, so the log tells
CONNECTION_ERROR_MARK = b"Exit Code: 305"
#: default patience: the SuperLink's view of a crashed node expires after 2 x 30 s at most
DEFAULT_PATIENCE = 120.0


def _log(text: str) -> None:
    sys.stdout.buffer.write(f"[fedbandits supervisor] {text}\n".encode())
    sys.stdout.buffer.flush()


def _forward(pipe: IO[bytes], seen: threading.Event) -> None:
    """Copy the child's output to ours line by line; note the connection-error mark."""
    out = sys.stdout.buffer
    for line in iter(pipe.readline, b""):
        if CONNECTION_ERROR_MARK in line:
            seen.set()
        try:
            out.write(line)
            out.flush()
        except (OSError, ValueError):  # our stdout is gone: keep draining the pipe
            pass
    pipe.close()


def supervise(
    cmd: Sequence[str], patience: float = DEFAULT_PATIENCE, retry_delay: float = 2.0, env: dict[str, str] | None = None
) -> int:
    """Run ``cmd``; restart it while it fails with a connection error within ``patience`` s.

    A run that lasted longer than ``patience`` s starts a new streak (a SuperNode that served
    for an hour and then lost its SuperLink gets the same bounded number of retries).
    """
    stop = threading.Event()
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: object) -> None:
        stop.set()
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        streak_start = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            started = time.monotonic()
            refused = threading.Event()
            child = subprocess.Popen(list(cmd), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if stop.is_set():  # a signal that arrived while the child was being started
                child.send_signal(signal.SIGTERM)
            assert child.stdout is not None
            # a daemon thread: the child's own children (its SuperExec) may hold the pipe open a
            # little longer than the child lives, and must not keep us waiting
            reader = threading.Thread(target=_forward, args=(child.stdout, refused), daemon=True)
            reader.start()
            code = child.wait()
            reader.join(timeout=2.0)  # the child's last lines (the exit message) are in the pipe
            if stop.is_set():
                return code
            now = time.monotonic()
            if now - started > patience:
                streak_start = started
            if code == 0 or not refused.is_set():
                return code
            if now + retry_delay - streak_start > patience:
                _log(f"the SuperNode could not join within {patience:.0f} s ({attempt} attempts); giving up")
                return code
            _log(
                "the SuperNode could not join (the SuperLink may still count this silo's previous, crashed "
                f"instance as online for up to a minute); retrying in {retry_delay:.0f} s"
            )
            if stop.wait(retry_delay):
                return code
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fedbandits.federation.supervisor", description=__doc__)
    p.add_argument("--patience", type=float, default=DEFAULT_PATIENCE, help="seconds to keep retrying")
    p.add_argument("--retry-delay", type=float, default=2.0, help="seconds between attempts")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the SuperNode command")
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("give the command to run after --")
    if args.patience < 0 or args.retry_delay <= 0:
        p.error("--patience must be >= 0 and --retry-delay > 0")
    return supervise(cmd, args.patience, args.retry_delay)


if __name__ == "__main__":
    sys.exit(main())
