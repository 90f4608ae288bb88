"""An agent's state file: plain arrays and one JSON header in an ``.npz`` archive, versioned.

What is saved is the whole agent: the config (as data, validated again on load), the ridge
statistics and inverse, the synced prefix in force, the batch statistics of the next release,
the pending decisions (features and deadlines), the expired ids, every counter, (user-level) each
user's contributions in the current epoch and each pending decision's user, as keyed digests (and
the digests' secret key), the noise source
and the local randomizer's tree: its exact nodes and the released noisy nodes (``ldp``), which a
loaded agent re-uses, never redraws (a streaming banded release: its last ``band`` batches).  With
``derived`` noise the exact position of its noise
stream is saved too (a loaded agent continues the stream: noise not yet drawn is never replayed);
with ``os`` noise (the default) there is no stream -- a loaded agent draws every new node's noise
fresh from the OS CSPRNG.

Safety: the archive is read with ``allow_pickle=False`` and the header with ``json``: loading a
state file runs no code from it.  A SHA-256 of the content is kept in the header, so a
corrupted or truncated file is refused, as is a file of another format version.  A ``derived``
noise stream's state is in the file: treat that file as secret (it predicts the noise still to be
drawn).  An ``os`` file holds no secret noise (released nodes only, which were sent anyway), but it
holds the users' unreleased statistics and pending decisions: keep it as private as the data.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fedbandits._version import __version__
from fedbandits.config import ConfigError, config_from_dict
from fedbandits.core.files import atomic_write_bytes
from fedbandits.online.setup import AgentSetup
from fedbandits.privacy.mechanisms import TreeRandomizer
from fedbandits.privacy.streaming import BandedStreamEncoder

# the agent is typed Any here: this module is imported by fedbandits.online.agent, never the reverse
Agent = Any

#: the state file's format; a file of another format is refused (2: the noise source, and ``os``
#: noise with no stream)
FORMAT = 2
KIND = "fedbandits-agent"


class StateFileError(ValueError):
    """A state file that cannot be loaded (corrupt, truncated, another format); nothing was changed."""


def dump(agent: Agent, pending: bool = True) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The agent's whole state: a JSON-able header and named arrays.  ``pending=False`` leaves the
    pending decisions out (a service whose event log holds them: a snapshot then costs what the
    learned state costs, not what the users who have not answered yet cost)."""
    numbers = np.array(sorted(agent.pending) if pending else [], dtype=np.int64)
    done = np.array(sorted(agent.completed), dtype=np.int64)
    d = agent.dim
    header: dict[str, Any] = {
        "kind": KIND,
        "format": FORMAT,
        "fedbandits": __version__,
        "config": agent.setup.config.to_dict(),
        "entry": agent.setup.label,
        "silo": agent.silo,
        "noise_source": agent.noise_source,
        "expiry_seconds": agent.expiry_seconds,
        "clip_rewards": agent.clip_out_of_bound,
        "instance": agent.instance,
        "counts": dict(agent.counts),
        "feature_norm_max": agent.feature_norm_max,
        "noise": None,
        "releases_made": 0,
    }
    if agent.setup.shuffled:  # restore() accepts the shuffled protocol again (older files: never shuffled)
        header["shuffled"] = True
    arrays: dict[str, np.ndarray] = {
        "gram": agent.state.gram,
        "inv": agent.state.inv,
        "bias": agent.state.bias,
        "completed_numbers": done,
        "completed_x": np.array([agent.completed[int(n)][0] for n in done], dtype=np.float64).reshape(-1, d),
        "completed_y": np.array([agent.completed[int(n)][1][0] for n in done], dtype=np.float64),
        "synced_cov": agent.synced_cov,
        "synced_bias": agent.synced_bias,
        "pending_numbers": numbers,
        "pending_x": np.array([agent.pending[int(n)][0] for n in numbers], dtype=np.float64).reshape(-1, d),
        "pending_deadlines": np.array([agent.pending[int(n)][1] for n in numbers], dtype=np.float64),
        "expired": np.array(sorted(agent.expired), dtype=np.int64),
    }
    if agent.setup.user_level:  # keyed digests only: the raw user ids are never kept
        header["user_secret"] = agent.user_secret.hex()
        users = sorted(agent.contributions)
        arrays["pending_users"] = np.array([agent.pending_users[int(n)] for n in numbers], dtype="S32")
        arrays["user_keys"] = np.array(users, dtype="S32")
        arrays["user_epochs"] = np.array([agent.contributions[u][0] for u in users], dtype=np.int64)
        arrays["user_contributions"] = np.array([agent.contributions[u][1] for u in users], dtype=np.int64)
    if agent.noise_source == "derived" and agent.chooser.exploration != "ucb":
        header["choices"] = _plain(agent.chooser.rng.bit_generator.state)
    r = agent.randomizer
    if r is not None:
        if agent.noise_source == "derived":
            header["noise"] = _plain(r.silo_rngs[0][0].bit_generator.state)
        header["releases_made"] = r.k
        encoder = getattr(r, "encoder", None)
        if isinstance(encoder, BandedStreamEncoder):  # a streaming release: its last `band` batches
            arrays["stream_past"] = encoder.past
        else:
            arrays["tree_exact"] = r.exact
            if isinstance(r, TreeRandomizer):
                arrays["tree_noisy"] = r.noisy
    return header, arrays


def digest(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 of a state (header without its own checksum and the save time, then every array)."""
    h = hashlib.sha256()
    kept = {k: v for k, v in header.items() if k not in ("sha256", "clock")}
    h.update(json.dumps(kept, sort_keys=True, separators=(",", ":")).encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def encode(header: dict[str, Any], arrays: dict[str, np.ndarray], now: float) -> bytes:
    """The state file's bytes (also what a service keeps in its event log as a snapshot)."""
    header = {**header, "clock": now}
    header["sha256"] = digest(header, arrays)
    buffer = io.BytesIO()
    text = json.dumps(header, sort_keys=True).encode()
    np.savez(buffer, header=np.frombuffer(text, dtype=np.uint8), **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def write(path: Path, header: dict[str, Any], arrays: dict[str, np.ndarray], now: float) -> None:
    """Write atomically: a crash leaves the old file or the new one, never half of one."""
    atomic_write_bytes(path, encode(header, arrays, now))


def read(path: Path | io.BytesIO) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Header and arrays of a state file (a path, or its bytes in a buffer), checked;
    :class:`StateFileError` in one line otherwise."""
    where = path if isinstance(path, Path) else "the snapshot"
    broken = StateFileError(f"{where} is not an agent state file (corrupt or truncated)")
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except FileNotFoundError:
        raise StateFileError(f"{path}: no such state file") from None
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):
        raise broken from None
    try:
        header = json.loads(arrays.pop("header").tobytes().decode())
    except (KeyError, ValueError, UnicodeDecodeError):
        raise broken from None
    if not isinstance(header, dict) or header.get("kind") != KIND:
        raise broken
    if header.get("format") != FORMAT:
        raise StateFileError(f"{where} was written by agent format {header.get('format')!r}; this is {FORMAT}")
    if header.get("sha256") != digest(header, arrays):
        raise broken
    return header, arrays


def restore(
    cls: type[Agent], header: dict[str, Any], arrays: dict[str, np.ndarray], clock: Callable[[], float]
) -> Agent:
    """The saved agent, rebuilt from its config and then given back every saved number."""
    try:
        config = config_from_dict(header["config"])
        setup = AgentSetup.from_config(config, header["entry"], shuffler=bool(header.get("shuffled", False)))
    except ConfigError as exc:
        raise StateFileError(f"the state file's config no longer validates: {exc}") from None
    source = header["noise_source"]
    if source not in ("os", "derived"):
        raise ValueError(f"noise_source {source!r}")
    agent = cls(
        setup,
        silo=header["silo"],
        # derived: any seed builds the simulator's randomizer, its stream's saved position is set below;
        # os: the secret randomizer, no stream
        seed=0 if source == "derived" else None,
        expiry_seconds=header["expiry_seconds"],
        clock=clock,
        clip_rewards=header["clip_rewards"],
    )
    agent.instance = str(header["instance"])
    agent.counts.update({k: int(v) for k, v in header["counts"].items()})
    agent.feature_norm_max = float(header["feature_norm_max"])
    agent.state.gram[...] = arrays["gram"]
    agent.state.inv[...] = arrays["inv"]
    agent.state.bias[...] = arrays["bias"]
    agent.completed = {
        int(n): (arrays["completed_x"][i].copy(), arrays["completed_y"][i : i + 1].copy())
        for i, n in enumerate(arrays["completed_numbers"])
    }
    agent.synced_cov = arrays["synced_cov"].copy()
    agent.synced_bias = arrays["synced_bias"].copy()
    # deadlines are on the agent's clock: shift them by the time that clock moved since the save
    offset = clock() - float(header["clock"])
    deadlines = arrays["pending_deadlines"] + offset if offset else arrays["pending_deadlines"]
    numbers = [int(n) for n in arrays["pending_numbers"]]
    agent.pending = {n: (arrays["pending_x"][i].copy(), float(deadlines[i])) for i, n in enumerate(numbers)}
    agent._queue = deque(sorted((deadline, n) for n, (_, deadline) in agent.pending.items()))
    if setup.user_level:
        agent.user_secret = bytes.fromhex(header["user_secret"])
        agent.pending_users = {n: arrays["pending_users"][i].decode() for i, n in enumerate(numbers)}
        agent.contributions = {
            key.decode(): (int(epoch), int(n))
            for key, epoch, n in zip(
                arrays["user_keys"], arrays["user_epochs"], arrays["user_contributions"], strict=True
            )
        }
    agent.expired = {int(n) for n in arrays["expired"]}
    r = agent.randomizer
    if r is not None:
        if source == "derived":
            r.silo_rngs[0][0].bit_generator.state = _numpy_state(header["noise"])
        _restore_randomizer(r, int(header["releases_made"]), arrays)
    choices = header.get("choices")  # a derived agent that explores at random: its choice stream's position
    if source == "derived" and choices is not None:
        agent.chooser.rng.bit_generator.state = _numpy_state(choices)
    agent._refresh()
    return agent


def _restore_randomizer(r: Any, releases_made: int, arrays: dict[str, np.ndarray]) -> None:
    """Give a fresh randomizer back its saved state: the tree's nodes, or a streaming release's batches."""
    encoder = getattr(r, "encoder", None)
    if isinstance(encoder, BandedStreamEncoder):
        if "stream_past" not in arrays or arrays["stream_past"].shape != encoder.past.shape:
            raise StateFileError("the state file's streaming release does not match its config's band")
        encoder.past[...] = arrays["stream_past"]
        encoder.k = releases_made
    else:
        r.exact[...] = arrays["tree_exact"]
        if isinstance(r, TreeRandomizer):
            r.noisy[...] = arrays["tree_noisy"]
    r.k = releases_made


def _plain(value: Any) -> Any:
    """A bit generator's state as JSON: arrays as lists of Python ints (exact)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return {"uint64": [int(v) for v in value.ravel()]}
    if isinstance(value, np.integer):
        return int(value)
    return value


def _numpy_state(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"uint64"}:
            return np.array(value["uint64"], dtype=np.uint64)
        return {k: _numpy_state(v) for k, v in value.items()}
    return value
