"""Durable file writes: a crash leaves the old file or the new one, never half of one.

Used by every writer whose file must survive a crash whole: checkpoints (:mod:`fedbandits.sim.checkpoint`),
the online agent's state (:mod:`fedbandits.online.state`) and the deployment's state and records
(:mod:`fedbandits.federation`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder, fsynced and renamed
    over ``path``, then fsync the folder so the rename itself survives a power cut."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
