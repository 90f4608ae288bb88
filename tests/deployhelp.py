"""Helpers shared by the tests that run a real deployment (test_federation, test_chaos).

Not a test module; the tests import it by name (pytest puts ``tests/`` on ``sys.path``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fedbandits.federation.deployment import LocalDeployment
from fedbandits.federation.spec import load_pickle


def wait_for(pred: Callable[[], object], timeout: float, what: str) -> None:
    """Poll ``pred`` every 0.3 s; AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def completed_rounds(dep: LocalDeployment) -> int:
    """Rounds the deployment's server has closed (its durable state); 0 before it is written."""
    path = dep.state / "server" / "server.pkl"
    if not path.exists():
        return 0
    try:
        return int(load_pickle(path).completed)
    except Exception:  # being replaced
        return 0
