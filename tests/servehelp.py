"""What the process-level tests of `fedbandits serve` share: a one-silo federation's config."""

from __future__ import annotations

from pathlib import Path


def one_silo_config(folder: Path, batch: int) -> Path:
    """A config file of one `fedlinucb` `ldp` silo labelled "fed" (d = 5, K = 10): each sync round
    closes as soon as that silo has released.  K = horizon // batch releases per budget epoch."""
    path = folder / "serve.toml"
    path.write_text(
        "[experiment]\nseed = 1\nhorizon = 100000\n"
        '[environment]\nname = "gaussian-sphere"\nagents = 1\narms = 10\ndim = 5\n'
        f'[[algorithms]]\nname = "fedlinucb"\nlabel = "fed"\nbatch = {batch}\nprotocol = "ldp"\n'
        "epsilon = 1.0\ndelta = 1e-5\n"
    )
    return path
