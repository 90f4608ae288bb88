"""What the tests of `fedbandits serve` share: the in-process tests' tokens, federation config, clock and
arms; the process-level tests' one-silo config and server."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

from fedbandits.federation.processes import Proc, start_process

DIM = 4
TOKEN, SYNC = "traffic-token-0123456789", "sync-token-0123456789ab"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SYNC_AUTH = {"Authorization": f"Bearer {SYNC}"}
LDP = {"name": "fedlinucb", "batch": 10, "protocol": "ldp", "epsilon": 1.0, "delta": 1e-3}


def config(algorithm=None, agents=3, horizon=40):  # type: ignore[no-untyped-def]
    """The in-process tests' federation (d = DIM, K = 5); horizon 40, batch 10: the noise covers K = 4
    releases per epoch."""
    return {
        "experiment": {"seed": 1, "horizon": horizon},
        "environment": {"name": "gaussian-sphere", "agents": agents, "arms": 5, "dim": DIM},
        "algorithms": [algorithm or LDP],
    }


class WallClock:
    """A wall clock the test moves by hand (``clock.t``)."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def arms(rng: np.random.Generator, k: int = 5) -> list[list[float]]:
    """K unit-norm candidate arms of dimension DIM, as a request body carries them."""
    x = rng.standard_normal((k, DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).tolist()


def one_silo_config(folder: Path, batch: int, mechanism: str = "tree") -> Path:
    """A config file of one `fedlinucb` `ldp` silo labelled "fed" (d = 5, K = 10): each sync round
    closes as soon as that silo has released.  K = horizon // batch releases per budget epoch (with
    ``mechanism = "banded"``: a streaming release banded to K, no budget epochs)."""
    path = folder / "serve.toml"
    path.write_text(
        "[experiment]\nseed = 1\nhorizon = 100000\n"
        '[environment]\nname = "gaussian-sphere"\nagents = 1\narms = 10\ndim = 5\n'
        f'[[algorithms]]\nname = "fedlinucb"\nlabel = "fed"\nbatch = {batch}\nprotocol = "ldp"\n'
        f'epsilon = 1.0\ndelta = 1e-5\nmechanism = "{mechanism}"\n'
    )
    return path


def start_server(
    config: Path,
    urls: list[str],
    state: Path,
    sync_token: Path,
    sync_seconds: float,
    log: Path,
    extra: tuple[str, ...] = (),
) -> Proc:
    """`fedbandits serve server` as its own process (its own session: a SIGKILL of the group is clean)."""
    cmd = [sys.executable, "-m", "fedbandits.cli", "serve", "server", str(config), "--entry", "fed"]
    cmd += ["--state-dir", str(state), "--sync-token-file", str(sync_token), "--sync-seconds", str(sync_seconds)]
    for url in urls:
        cmd += ["--silo-url", url]
    return start_process("server", [*cmd, *extra], log, dict(os.environ))


class Load:
    """Decisions and rewards, one after the other, from a thread; remembers what was acknowledged:
    ``decided`` (every decision answered 200), ``acked`` (those whose reward was answered 200), and
    ``failures`` (requests refused or unanswered; ``statuses`` counts the refusals by status)."""

    def __init__(self, url: str, token: str, seed: int = 7) -> None:
        import httpx

        self.url = url
        self.client = httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=2.0)
        self.errors = httpx.HTTPError
        self.decided: list[str] = []
        self.acked: list[str] = []
        self.failures = 0
        self.statuses: dict[int, int] = {}
        self.stopped = threading.Event()
        self.rng = np.random.default_rng(seed)
        self.thread = threading.Thread(target=self.run, daemon=True)

    def _failed(self, status: int = 0) -> None:
        self.failures += 1
        self.statuses[status] = self.statuses.get(status, 0) + 1
        time.sleep(0.02)

    def run(self) -> None:
        while not self.stopped.is_set():
            x = self.rng.standard_normal((10, 5))
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            try:
                d = self.client.post(self.url + "/v1/decisions", json={"features": x.tolist()})
                if d.status_code != 200:
                    self._failed(d.status_code)
                    continue
                decision_id = d.json()["decision_id"]
                self.decided.append(decision_id)
                r = self.client.post(self.url + "/v1/rewards", json={"decision_id": decision_id, "reward": 0.5})
                if r.status_code == 200:
                    self.acked.append(decision_id)
                else:
                    self._failed(r.status_code)
            except self.errors:
                self._failed()
