"""The federation's side of serving silos: sync rounds on a wall-clock schedule.

Every ``sync_seconds`` (fixed at start, never moved by the amount or the content of the data) the
coordinator works on the open round ``(epoch, round)``:

1. it asks every silo that has not yet answered this round for its release
   (``POST /v1/sync/release``); a silo answers with its completed decisions since its previous
   release, privatized by its local randomizer (any number, possibly none);
2. once all M releases are in, it closes the round through the federation's round ledger
   (:class:`fedbandits.online.Rounds`, the deployment's coordinator's too: the simulator's tree
   analyzer for ``ldp``, the exact sum for ``none``, the modular analyzer for ``distributed-dp``),
   which adds the final prefix of the earlier epochs and applies the budget policy;
3. it sends the newest closed prefix to every silo that does not have it (``POST /v1/sync/prefix``).

``distributed-dp`` runs the deployment's secure aggregation and its round, written once in the
protocol layer (:mod:`fedbandits.serve.masked_sync` carries it): the releases are masked, and the
round closes with the sum the unmask step opens.

A silo that is down is asked again at the next tick; the round stays open until every silo has
answered (its releases already made are stored on both sides, a retried request gets the same
bytes).  Silos serve from their last prefix meanwhile.  Everything the coordinator receives and
closes is in its own SQLite log, so a restarted coordinator resumes the same round and rebuilds the
ledger by closing the stored rounds again (the analyzer adds no noise: nothing is redrawn).

Budget: a private protocol's noise covers K releases per epoch.  After round K - 1 of an epoch
the policy ``stop`` ends syncing (the silos keep serving); ``renew`` opens epoch e + 1 (a new tree
on both sides; the lifetime epsilon is the sum of the epochs').
"""

from __future__ import annotations

import base64
import logging
import math
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedbandits.config import Config
from fedbandits.online import AgentSetup, Rounds
from fedbandits.serve import masking
from fedbandits.serve.links import Request, Requests, SiloLink, exchange_one
from fedbandits.serve.masked_sync import MaskedSync
from fedbandits.serve.options import POLICIES
from fedbandits.serve.shuffling import ServerShuffling

log = logging.getLogger("fedbandits.serve")

_TABLES = """
CREATE TABLE IF NOT EXISTS payloads (
    epoch INTEGER NOT NULL, round INTEGER NOT NULL, silo INTEGER NOT NULL, payload BLOB NOT NULL,
    samples INTEGER NOT NULL, PRIMARY KEY (epoch, round, silo)
);
CREATE TABLE IF NOT EXISTS closed (
    epoch INTEGER NOT NULL, round INTEGER NOT NULL, at REAL NOT NULL, prefix BLOB NOT NULL, samples INTEGER NOT NULL,
    PRIMARY KEY (epoch, round)
);
CREATE TABLE IF NOT EXISTS delivered (silo INTEGER PRIMARY KEY, epoch INTEGER NOT NULL, round INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS secagg (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS shuffled (
    epoch INTEGER NOT NULL, round INTEGER NOT NULL, batch BLOB NOT NULL, withheld INTEGER NOT NULL,
    PRIMARY KEY (epoch, round)
);
"""


@dataclass
class Tick:
    """What one tick did: who released, whether the round closed, who got the prefix."""

    epoch: int
    round: int
    released: list[int]
    unreachable: list[int]
    closed: bool
    delivered: list[int]
    seconds: float = 0.0  # how long the tick took (its exchanges with the silos)


class Coordinator:
    """Sync rounds for the M serving silos that ``link`` reaches (silo order)."""

    def __init__(
        self,
        config: Config | dict[str, object] | str | Path,
        link: SiloLink,
        state_dir: Path,
        *,
        entry: str | None = None,
        sync_seconds: float = 10.0,
        policy: str = "stop",
        shuffling: ServerShuffling | None = None,
    ) -> None:
        setup = self.check(config, entry, policy, sync_seconds, shuffler=shuffling is not None)
        #: sdp-amplification: the releases are at the shuffler; a round closes with its batch
        self.shuffling = shuffling
        if link.silos != setup.silos:
            raise ValueError(f"silos: the config's [environment] agents is {setup.silos}, got {link.silos} silos")
        self.setup = setup
        self.link = link
        #: binds secure aggregation's keys and shares to this federation (config and entry)
        self.context = masking.federation_context(setup)
        self.policy = policy
        self.sync_seconds = float(sync_seconds)
        state_dir.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(state_dir / "coordinator.sqlite", isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.executescript(_TABLES)
        #: distributed-dp: secure aggregation's rounds over the link (the deployment's protocol and round)
        self.masking = MaskedSync(self.db, link, setup, self.context) if setup.masked else None
        self.history: list[dict[str, Any]] = []
        self.stopped = threading.Event()
        self._resume()
        self._status = self._report()

    @staticmethod
    def check(
        config: Config | dict[str, object] | str | Path,
        entry: str | None,
        policy: str,
        sync_seconds: float,
        shuffler: bool = False,
    ) -> AgentSetup:
        """The entry's set-up, if a coordinator can sync it with these settings (else a ValueError);
        ``shuffler``: the releases go through the deployment's shuffler (``sdp-amplification``)."""
        setup = AgentSetup.from_config(config, entry, shuffler=shuffler)
        if not setup.federated:
            raise ValueError(f"entry: {setup.name!r} does not synchronise; the coordinator needs a fedlinucb entry")
        if shuffler and not setup.shuffled:
            raise ValueError(f"a shuffler is for protocol 'sdp-amplification', not {setup.protocol!r}")
        if setup.shuffled and policy != "stop":
            raise ValueError("budget policy: the shuffler numbers the rounds of one budget epoch; use 'stop'")
        if policy not in POLICIES:
            raise ValueError(f"budget policy must be one of {list(POLICIES)}, got {policy!r}")
        if not sync_seconds > 0:
            raise ValueError(f"sync_seconds must be > 0, got {sync_seconds!r}")
        return setup

    # -- state -------------------------------------------------------------------------------
    def _resume(self) -> None:
        """The open round and its epoch's analyzer, replayed from the stored closed rounds' releases."""
        self.ledger = Rounds(self.setup, renew=self.policy == "renew")
        for epoch, round_ in self.db.execute("SELECT epoch, round FROM closed ORDER BY epoch, round").fetchall():
            assert (epoch, round_) == (self.ledger.epoch, self.ledger.round), "the closed rounds are the ledger's"
            self._close_stored(epoch, round_)

    @property
    def epoch(self) -> int:
        return self.ledger.epoch

    @property
    def round(self) -> int:
        return self.ledger.round

    @property
    def finished(self) -> bool:
        return self.ledger.finished

    def _close_stored(self, epoch: int, round_: int) -> np.ndarray:
        """Close round ``(epoch, round_)`` through the ledger with what the log holds of it: the
        shuffler's anonymous batch, or one release per silo."""
        if self.shuffling is not None:
            got = self.db.execute(
                "SELECT batch FROM shuffled WHERE epoch = ? AND round = ?", (epoch, round_)
            ).fetchone()
            return self.ledger.close_batch(np.frombuffer(got[0], dtype="<f8").reshape(-1, self.setup.width))
        total = None if self.masking is None else self.masking.total(epoch, round_)
        if total is not None:  # distributed-dp: the survivors' modular sum the secure round opened
            return self.ledger.close_sum(total)[1]
        # (a distributed-dp round closed before issue #45: the all-present protocol's masks cancel in the sum)
        rows = self.db.execute(
            "SELECT silo, payload FROM payloads WHERE epoch = ? AND round = ? ORDER BY silo", (epoch, round_)
        ).fetchall()
        return self.ledger.close([np.frombuffer(p, dtype=self._dtype()).copy() for _, p in rows])

    def _dtype(self) -> str:
        return "<u8" if self.setup.masked else "<f8"

    def latest(self) -> tuple[int, int, np.ndarray, float] | None:
        row = self.db.execute("SELECT epoch, round, prefix, at FROM closed ORDER BY epoch DESC, round DESC LIMIT 1")
        got = row.fetchone()
        return None if got is None else (int(got[0]), int(got[1]), np.frombuffer(got[2], dtype="<f8"), float(got[3]))

    # -- one round ---------------------------------------------------------------------------
    def tick(self) -> Tick:
        started = time.monotonic()
        epoch, round_ = self.epoch, self.round
        run = self._plain_tick if self.masking is None else self._masked_tick
        released, unreachable, closed, delivered = run(epoch, round_)
        record = Tick(epoch, round_, released, unreachable, closed, delivered, time.monotonic() - started)
        self.history.append({"at": time.time(), **record.__dict__})
        del self.history[:-200]
        self._status = self._report()
        return record

    def _plain_tick(self, epoch: int, round_: int) -> tuple[list[int], list[int], bool, list[int]]:
        """``none``, ``ldp`` and shuffled rounds: the releases, the close, the prefix."""
        released: list[int] = []
        unreachable: list[int] = []
        closed = False
        delivered: list[int] = []
        asks: Requests = {s: [] for s in self.silos}
        # a bundling link: the last closed round's prefix goes with this tick's release requests
        prefix = self._deliveries() if self.link.bundles else {}
        for s, request in prefix.items():
            asks[s].append(request)
        have = {
            s for (s,) in self.db.execute("SELECT silo FROM payloads WHERE epoch = ? AND round = ?", (epoch, round_))
        }
        for s in self.silos:
            if not self.finished and s not in have:
                asks[s].append(("/v1/sync/release", {"epoch": epoch, "round": round_}))
        for silo, answers in sorted(self.link.exchange({s: a for s, a in asks.items() if a}).items()):
            if silo in prefix:
                got_prefix = self._delivered(silo, prefix[silo], answers.pop(0))
                delivered += got_prefix
                if not answers:
                    unreachable += [] if got_prefix else [silo]
                    continue
            got = answers[0]
            payload = self._check_release(silo, got)
            if payload is None:
                unreachable.append(silo)
                continue
            self.db.execute(
                "INSERT INTO payloads VALUES (?, ?, ?, ?, ?)",
                (epoch, round_, silo, payload.tobytes(), int(got["samples"])),  # type: ignore[index]
            )
            released.append(silo)
            have.add(silo)
        if not self.finished and len(have) == self.link.silos:
            closed = True
            self._close(epoch, round_)
        if not self.link.bundles:  # at once, in a message of its own
            delivered += self._deliver_now(unreachable)
        return released, unreachable, closed, delivered

    def _masked_tick(self, epoch: int, round_: int) -> tuple[list[int], list[int], bool, list[int]]:
        """``distributed-dp``: the round's secure aggregation (:mod:`fedbandits.serve.masked_sync`),
        the close, the prefix (bundled with the tick's first requests on a bundling link)."""
        assert self.masking is not None
        prefix = self._deliveries() if self.link.bundles else {}
        delivered: list[int] = []
        released: list[int] = []
        unreachable: list[int] = []
        closed = False
        if not self.finished:
            tick = self.masking.run(epoch, round_, {s: [request] for s, request in prefix.items()})
            for silo, answers in sorted(tick.extra_answers.items()):
                delivered += self._delivered(silo, prefix[silo], answers[0] if answers else None)
            prefix = {s: r for s, r in prefix.items() if s not in tick.extra_answers}  # (not sent)
            released, unreachable, closed = tick.released, tick.unreachable, tick.closed
            if closed:
                self._close(epoch, round_)
        if prefix:
            for silo, got in sorted(exchange_one(self.link, prefix).items()):
                delivered += self._delivered(silo, prefix[silo], got)
        if not self.link.bundles:
            delivered += self._deliver_now(unreachable)
        return released, unreachable, closed, delivered

    def _deliver_now(self, unreachable: list[int]) -> list[int]:
        """The newest closed prefix to every silo that lacks it, in a message of its own."""
        delivered: list[int] = []
        deliveries = self._deliveries()
        for silo, got in sorted(exchange_one(self.link, deliveries).items()):
            got_prefix = self._delivered(silo, deliveries[silo], got)
            delivered += got_prefix
            if not got_prefix and silo not in unreachable:
                unreachable.append(silo)
        return delivered

    def _check_release(self, silo: int, got: dict[str, Any] | None) -> np.ndarray | None:
        if got is None:
            return None
        if self.shuffling is not None:  # an acknowledgement: the release itself is at the shuffler
            if got.get("shuffled") not in ("accepted", "duplicate", "included", "withheld") or not isinstance(
                got.get("samples"), int
            ):
                log.warning("silo %d: a malformed acknowledgement refused", silo)
                return None
            return np.zeros(0)
        try:
            if got.get("dtype") != self._dtype():
                raise ValueError(f"dtype {got.get('dtype')!r}")
            payload = np.frombuffer(base64.b64decode(got["payload"], validate=True), dtype=self._dtype()).copy()
            if payload.shape != (self.setup.width,) or not isinstance(got.get("samples"), int):
                raise ValueError(f"shape {payload.shape}")
            if payload.dtype.kind == "f" and not np.isfinite(payload).all():
                raise ValueError("not finite")
        except (KeyError, ValueError, TypeError) as exc:
            log.warning("silo %d: a malformed release refused (%s)", silo, exc)
            return None
        return payload

    def _close(self, epoch: int, round_: int) -> None:
        if self.shuffling is not None:  # every silo has sent: the shuffler permutes the round once
            batch, withheld = self.shuffling.close(epoch, round_)
            if withheld:
                log.warning(
                    "round %d.%d: the shuffler withheld the batch (a silo acknowledged without sending)", epoch, round_
                )
            self.db.execute(
                "INSERT OR REPLACE INTO shuffled VALUES (?, ?, ?, ?)",
                (epoch, round_, np.ascontiguousarray(batch, dtype="<f8").tobytes(), int(withheld)),
            )
        prefix = self._close_stored(epoch, round_)
        table = "payloads" if self.masking is None else "sums"
        samples = self.db.execute(
            f"SELECT SUM(samples) FROM {table} WHERE epoch = ? AND round = ?", (epoch, round_)
        ).fetchone()[0]
        self.db.execute(
            "INSERT INTO closed VALUES (?, ?, ?, ?, ?)", (epoch, round_, time.time(), prefix.tobytes(), int(samples))
        )

    def _deliveries(self) -> dict[int, Request]:
        """The newest closed prefix for every silo that has not acknowledged it."""
        latest = self.latest()
        if latest is None:
            return {}
        epoch, round_, prefix, _ = latest
        done = dict(((s, (e, r)) for s, e, r in self.db.execute("SELECT silo, epoch, round FROM delivered")))
        body = {"epoch": epoch, "round": round_, "prefix": base64.b64encode(prefix.tobytes()).decode()}
        return {s: ("/v1/sync/prefix", body) for s in self.silos if done.get(s) != (epoch, round_)}

    def _delivered(self, silo: int, request: Request, got: dict[str, Any] | None) -> list[int]:
        """Record an acknowledged delivery; ``[silo]`` if it was, else ``[]``."""
        if got is None:
            return []
        body = request[1]
        self.db.execute("INSERT OR REPLACE INTO delivered VALUES (?, ?, ?)", (silo, body["epoch"], body["round"]))
        return [silo]

    @property
    def silos(self) -> range:
        return range(self.link.silos)

    # -- the schedule ------------------------------------------------------------------------
    def run(self, until: float | None = None, after_tick: Callable[[], None] | None = None) -> None:
        """Tick at start + k * sync_seconds (wall clock) until ``stop()`` or the time ``until``;
        ``after_tick`` (e.g. publish the status) after each."""
        start = time.time()
        k = 0
        while not self.stopped.is_set() and (until is None or time.time() < until):
            try:
                self.tick()
                if after_tick is not None:
                    after_tick()
            except Exception:  # one bad tick must not stop the federation's schedule
                log.exception("sync tick failed")
            # the next tick on the schedule; one that a long tick overran is skipped, not run late
            k = max(k + 1, math.ceil((time.time() - start) / self.sync_seconds))
            wait = start + k * self.sync_seconds - time.time()
            if wait > 0:
                self.stopped.wait(wait if until is None else min(wait, max(0.0, until - time.time())))

    def stop(self) -> None:
        self.stopped.set()

    def status(self) -> dict[str, Any]:
        """The last tick's report (computed by the ticking thread; safe to read from another)."""
        return self._status

    def _report(self) -> dict[str, Any]:
        latest = self.latest()
        cal = self.setup.calibration
        closed = self.db.execute(
            "SELECT epoch, round, at, samples FROM closed ORDER BY epoch DESC, round DESC LIMIT 300"
        ).fetchall()[::-1]
        count = self.db.execute("SELECT COUNT(*) FROM closed").fetchone()[0]
        per_epoch = None if cal is None else cal.epsilon
        last = self.history[-1] if self.history else None
        return {
            "silos": self.link.silos,
            "epoch": self.epoch,
            "rounds_closed": int(count),
            "unreachable": [] if last is None else last["unreachable"],
            # every epoch that has closed a round spent its (epsilon, delta): basic composition
            "epsilon_lifetime": None if per_epoch is None else (latest[0] + 1 if latest else 0) * per_epoch,
            "closed": [
                {
                    "epoch": e,
                    "round": r,
                    "at": at,
                    "samples": n,
                    "epsilon_lifetime": None if per_epoch is None else (e + 1) * per_epoch,
                }
                for e, r, at, n in closed
            ],
            "open_round": None if self.finished else f"{self.epoch}.{self.round}",
            "secure_aggregation": None if self.masking is None else ("set up" if self.masking.set_up else "setting up"),
            "finished": self.finished,
            "budget_policy": self.policy,
            "sync_seconds": self.sync_seconds,
            "model_version": None if latest is None else f"{latest[0]}.{latest[1]}",
            "last_close": None if latest is None else latest[3],
            "releases_per_epoch": self.setup.releases,  # None: no noise, or a streaming release (no horizon)
            "horizon_of_guarantee": "unbounded: every release" if self.setup.streaming else None,
            "epsilon_per_epoch": None if cal is None else cal.epsilon,
            "history": self.history[-50:],
        }

    def close(self) -> None:
        self.link.close()
        self.db.close()
