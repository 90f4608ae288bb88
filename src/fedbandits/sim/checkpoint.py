"""Checkpoints: every finished task's result on disk, keyed by configuration hash and runs.

A task simulates a fixed group of runs (:func:`fedbandits.sim.task.task_chunks`) and its result
depends only on the fields of the config that :func:`config_key` hashes and on the run indices,
never on the worker, the backend or the order tasks finish in.  So a result written once can be
reused by any later run of an equivalent config -- that is what ``--resume`` does.  Layout::

    CHECKPOINT/<key[:16]>/key.json                  what was hashed, and the full SHA-256
    CHECKPOINT/<key[:16]>/runs-000000-000003.pkl    one finished task (runs 0..3), written atomically

The CLI uses ``<results folder>/checkpoint``.  Files are written by the driver only, one per task,
through a temporary file and an atomic rename: a task retried after a lost worker, or finished
twice, still leaves exactly one file, and an interrupted write leaves none.  The files are
pickles: resume only from checkpoint folders you (or your own runs) wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedbandits._version import __version__
from fedbandits.config import Config
from fedbandits.core.files import atomic_write_bytes
from fedbandits.sim.task import ChunkResult

#: bump when the stored layout or the meaning of a result changes
FORMAT = 2  # 2: private learners report `observations` and `feature_norm_max` (issue #29)


class TaskFailedError(RuntimeError):
    """A task could not be completed (e.g. its worker was lost more often than retries allow)."""


def key_fields(config: Config, record_transcript: bool = False) -> dict[str, Any]:
    """Everything a task's result depends on besides its run indices.

    In: seed, the effective noise seed, horizon, grid_points (the recorded curve points), the
    environment and every algorithm (name, label, ``noise_stream`` if stated, parameters, order --
    the order picks the noise stream of an entry that states none), whether transcripts are
    recorded, the fedbandits version and the checkpoint format.  Out: ``name`` and ``runs`` (run
    r's numbers do not depend on how many runs there are) and ``runs_per_task`` (the grouping is
    part of each file's run range instead: a differently grouped task is simply recomputed).
    """
    exp = config.experiment
    data = config.to_dict()
    return {
        "format": FORMAT,
        "fedbandits": __version__,
        "seed": exp.seed,
        "noise_seed": exp.seed if exp.noise_seed is None else exp.noise_seed,
        "horizon": exp.horizon,
        "grid_points": exp.grid_points,
        "environment": data["environment"],
        "algorithms": data["algorithms"],
        "transcript": bool(record_transcript),
    }


def _jsonable(value: object) -> object:
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "item"):  # numpy scalar
        return value.item()  # type: ignore[attr-defined]
    raise TypeError(f"cannot hash a config value of type {type(value).__name__}: {value!r}")


def canonical_json(fields: dict[str, Any]) -> str:
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), allow_nan=True, default=_jsonable)


def config_key(config: Config, record_transcript: bool = False) -> str:
    """SHA-256 (hex) of the canonical JSON of :func:`key_fields`."""
    return hashlib.sha256(canonical_json(key_fields(config, record_transcript)).encode("utf-8")).hexdigest()


def _file_name(runs: Sequence[int]) -> str:
    first, last = runs[0], runs[-1]
    if list(runs) != list(range(first, last + 1)):
        raise ValueError(f"a task's runs must be consecutive, got {list(runs)}")
    return f"runs-{first:06d}-{last:06d}.pkl"


class Checkpoint:
    """The finished tasks of one configuration under ``root`` (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str], config: Config, record_transcript: bool = False) -> None:
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise ValueError(f"checkpoint {self.root} exists and is not a folder")
        fields = key_fields(config, record_transcript)
        self.key = hashlib.sha256(canonical_json(fields).encode("utf-8")).hexdigest()
        self.folder = self.root / self.key[:16]
        self._fields = fields

    def _ensure_folder(self) -> None:
        if not self.folder.is_dir():
            self.folder.mkdir(parents=True, exist_ok=True)
        key_file = self.folder / "key.json"
        if not key_file.is_file():
            text = json.dumps({"sha256": self.key, "fields": self._fields}, indent=2, default=_jsonable) + "\n"
            atomic_write_bytes(key_file, text.encode("utf-8"))

    def path(self, runs: Sequence[int]) -> Path:
        return self.folder / _file_name(runs)

    def load(self, runs: Sequence[int]) -> ChunkResult | None:
        """The stored result of the task ``runs``, or None if there is none (or it is unusable)."""
        path = self.path(runs)
        try:
            with open(path, "rb") as fh:
                record = pickle.load(fh)
        except FileNotFoundError:
            return None
        except Exception:  # damaged or from an incompatible version: recompute (and overwrite) it
            return None
        if (
            not isinstance(record, dict)
            or record.get("format") != FORMAT
            or record.get("key") != self.key
            or list(record.get("runs", ())) != list(runs)
            or list(getattr(record.get("result"), "runs", ())) != list(runs)
        ):
            return None
        return record["result"]

    def save(self, result: ChunkResult) -> Path:
        """Write one finished task (atomically; an existing file for the same runs is replaced)."""
        self._ensure_folder()
        path = self.path(result.runs)
        record = {"format": FORMAT, "key": self.key, "runs": list(result.runs), "result": result}
        atomic_write_bytes(path, pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))
        return path
