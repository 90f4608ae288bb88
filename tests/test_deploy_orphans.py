"""No orphaned deployment: a SIGKILLed `fedbandits deploy local` leaves none of its processes running.

Slow (a real Flower federation on loopback, about a minute) and skipped without Flower (the deploy
extra); run with ``pytest -m slow tests/test_deploy_orphans.py``.  Processes are found by PID: the
driver's descendants and those carrying the deployment's ``FLWR_HOME``, never by name.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedbandits.federation.processes import processes_under
from fedbandits.sim.backends import process_alive
from proctree import descendants

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("flwr") is None, reason="needs flwr (the deploy extra)"),
    pytest.mark.skipif(not Path("/proc").is_dir(), reason="walks /proc"),
]

#: 2 silos, 100 synchronisations: far from finished when the driver is killed in the first
CONFIG = """
[experiment]
seed = 7
horizon = 1000
[environment]
name = "gaussian-sphere"
agents = 2
arms = 5
dim = 3
[[algorithms]]
name = "fedlinucb"
batch = 10
protocol = "ldp"
epsilon = 5.0
delta = 0.01
"""


def _clientapps_started(workdir: Path, silos: int = 2) -> bool:
    """Whether every silo's ClientApp has begun round 1 (it opens the silo's log): by then every
    kind of process of the deployment runs."""
    return all((workdir / "state" / f"silo-{i}" / "silo.log").exists() for i in range(silos))


def test_a_sigkilled_deploy_local_leaves_no_process(tmp_path: Path) -> None:
    """The driver is SIGKILLed during round 1 (SuperLink, SuperNodes under their supervisors,
    SuperExec, ServerApp and ClientApps all running, several in sessions of their own); then every
    one of them is gone within 5 s.  A SIGKILLed driver runs no clean-up: its
    watchdog, woken at once by its pipe closing, SIGKILLs them in a few /proc walks (well under a
    second; 5 s is room for a loaded 2-core machine).  Without it they all kept running."""
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    workdir = tmp_path / "dep"
    log = tmp_path / "driver.log"
    cmd = [sys.executable, "-m", "fedbandits.cli", "deploy", "local", "--config", str(config)]
    cmd += ["--workdir", str(workdir), "--round-timeout", "60", "--timeout", "300"]
    with open(log, "wb") as out:
        driver = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    pids: set[int] = set()
    left: set[int] = set()
    try:
        deadline = time.monotonic() + 150
        while not _clientapps_started(workdir):
            assert driver.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "round 1 did not start within 150 s: " + log.read_text()[-3000:]
            time.sleep(0.3)
        time.sleep(0.5)
        pids = descendants(driver.pid) | set(processes_under(workdir / "home"))
        os.kill(driver.pid, signal.SIGKILL)
        assert driver.wait(timeout=30) == -signal.SIGKILL
        assert len(pids) >= 8, pids  # SuperLink, SuperExec, ServerApp, 2 supervisors, 2 SuperNodes, ClientApps
        end = time.monotonic() + 5.0
        left = {p for p in pids if process_alive(p)}
        while left and time.monotonic() < end:
            time.sleep(0.1)
            left = {p for p in left if process_alive(p)}
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        for pid in {p for p in pids if process_alive(p)} | set(processes_under(workdir / "home")):
            os.kill(pid, signal.SIGKILL)  # clean up before failing, by PID
    assert not left, f"processes of the deployment survived their driver: {sorted(left)}"
    assert processes_under(workdir / "home") == []
