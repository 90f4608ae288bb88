"""No orphaned work: a killed driver's worker processes stop within seconds (by PID, never by name)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedbandits.sim.backends import WATCHDOG_INTERVAL, process_alive
from proctree import LONG_RUN_TOML, descendants

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="walks /proc for descendants")


def _start(tmp_path: Path) -> tuple[subprocess.Popen[bytes], set[int]]:
    config = tmp_path / "c.toml"
    config.write_text(LONG_RUN_TOML)
    cmd = [sys.executable, "-m", "fedbandits.cli", "run", str(config), "--workers", "2", "--no-progress"]
    driver = subprocess.Popen([*cmd, "--out", str(tmp_path / "out")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    workers: set[int] = set()
    while time.monotonic() < deadline and len(workers) < 3:  # the fork server and two workers
        time.sleep(0.2)
        workers = descendants(driver.pid)
        assert driver.poll() is None, driver.stderr.read() if driver.stderr else ""
    assert len(workers) >= 3, f"workers did not start: {workers}"
    time.sleep(1.0)  # the workers are computing their tasks
    return driver, descendants(driver.pid)


def _survivors(pids: set[int], seconds: float) -> set[int]:
    deadline = time.monotonic() + seconds
    alive = {p for p in pids if process_alive(p)}
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = {p for p in alive if process_alive(p)}
    return alive


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_stop_when_the_driver_dies(tmp_path: Path, sig: int) -> None:
    """The watchdog polls every 0.25 s; 5 s leaves room for a loaded machine.  With SIGTERM the
    driver itself stops its pool (exit 130); with SIGKILL the workers notice on their own."""
    driver, pids = _start(tmp_path)
    os.kill(driver.pid, sig)
    code = driver.wait(timeout=30)
    assert code == (130 if sig == signal.SIGTERM else -signal.SIGKILL)
    left = _survivors(pids, 5.0)
    for pid in left:  # clean up before failing, by PID
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes survived their driver: {sorted(left)}"
    assert WATCHDOG_INTERVAL <= 0.5


def test_process_alive_sees_a_zombie_as_dead() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while process_alive(child.pid) and time.monotonic() < deadline:  # exited, not yet reaped: a zombie
        time.sleep(0.05)
    assert not process_alive(child.pid)
    child.wait()
    assert process_alive(os.getpid())


#: a driver: a watchdog for its mark, a marked child in a session of its own whose child drops the
#: mark (as a process that rewrites its title seems to), and an unmarked child of its own
WATCHED_DRIVER = """
import os, subprocess, sys, time
from fedbandits.sim.watchdog import Watchdog

dog = Watchdog("FEDBANDITS_TEST_MARK", sys.argv[1])
sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
spawn = "import subprocess, sys, time; subprocess.Popen(sys.argv[1:], env={}, start_new_session=True); time.sleep(120)"
env = {**os.environ, "FEDBANDITS_TEST_MARK": sys.argv[1] + "/child"}
marked = subprocess.Popen([sys.executable, "-c", spawn, *sleep], env=env, start_new_session=True)
other = subprocess.Popen(sleep)
print(dog.pid, marked.pid, other.pid, flush=True)
if sys.argv[2] == "close":
    time.sleep(1.5)
    dog.close()
    print("closed", flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("end", ["SIGKILL", "close"])
def test_watchdog_kills_the_marked_processes_and_their_descendants_only(tmp_path: Path, end: str) -> None:
    """The watchdog records every 0.5 s; 1.5 s after the start its record holds the marked child
    and the grandchild that dropped the mark.  Then the driver is SIGKILLed (or closes the
    watchdog): both are gone within 5 s, the watchdog has exited, the unmarked child still runs."""
    from fedbandits.sim.watchdog import INTERVAL

    mark = f"{os.getpid()}-{time.monotonic_ns()}"
    driver = subprocess.Popen(
        [sys.executable, "-c", WATCHED_DRIVER, mark, end], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    other = None
    try:
        assert driver.stdout is not None
        dog, marked, other = map(int, driver.stdout.readline().split())
        deadline = time.monotonic() + 30
        while len(descendants(marked)) < 1 and time.monotonic() < deadline:  # the grandchild
            time.sleep(0.05)
        work = {marked} | descendants(marked)
        assert len(work) == 2, work
        if end == "SIGKILL":
            time.sleep(3 * INTERVAL)
            os.kill(driver.pid, signal.SIGKILL)
        else:
            assert driver.stdout.readline().strip() == "closed"
        left = _survivors(work | {dog}, 5.0)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, f"survived: {sorted(left)}"
        assert process_alive(other)  # not the work's: untouched
    finally:
        driver.kill()
        driver.wait()
        if other is not None and process_alive(other):
            os.kill(other, signal.SIGKILL)
