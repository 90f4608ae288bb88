"""What the tests of `fedbandits serve` share: the in-process tests' tokens, federation config, clock and
arms; the process-level tests' one-silo config and server."""

from __future__ import annotations

import os
import sys
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
