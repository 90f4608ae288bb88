"""What the process-level tests of `fedbandits serve` share: a one-silo federation's config."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fedbandits.federation.processes import Proc, start_process


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
